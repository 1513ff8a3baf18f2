"""`memerobust baseline merge OUT IN1 IN2 ...`: one baseline of several checkpoints of one recipe, from baselines
saved one checkpoint (or recipe) at a time, for the gate to judge a candidate against the recipe's own spread."""
from __future__ import annotations

import json
from pathlib import Path

from ..errors import ConfigError


def add_parser(sub) -> None:
    baseline = sub.add_parser("baseline", help="work on saved baselines: merge the checkpoints of one recipe")
    actions = baseline.add_subparsers(dest="action", required=True)
    merge = actions.add_parser("merge", help="merge baselines of one recipe's checkpoints (the same card, data, "
                                             "seed, memes limit, labels and conditions) into one")
    merge.add_argument("out", help="the merged baseline (.json) to write")
    merge.add_argument("inputs", nargs="+", metavar="IN", help="two or more baselines (.json), from "
                       "--memerobust-save-baseline or an earlier merge")


def run(args) -> int:
    """Merge `inputs` in their order (each refused, naming the field, where it differs from the others in anything
    but its checkpoints) and write `out` atomically; one line says what it holds."""
    from ..atomic import atomic_write_text
    from ..report.gate_tables import baseline_saved_line
    from ..track.baseline import baseline_contents, load_baseline, merged_baselines
    from .common import check_output_json

    if len(args.inputs) < 2:
        raise ConfigError(f"baseline merge: name two or more baselines to merge into {args.out} (got "
                          f"{len(args.inputs)})")
    out = check_output_json(Path(args.out), "baseline merge OUT")
    merged = load_baseline(Path(args.inputs[0]))
    for i, path in enumerate(args.inputs[1:], start=1):
        so_far = args.inputs[0] if i == 1 else f"the merge of {', '.join(args.inputs[:i])}"
        merged = merged_baselines(merged, load_baseline(Path(path)), names=(so_far, path))
    atomic_write_text(out, json.dumps(merged) + "\n")
    print(baseline_saved_line(f"{len(args.inputs)} baselines merged into {out}", baseline_contents(merged)))
    return 0
