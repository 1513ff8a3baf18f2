"""How often the gate fails a checkpoint that is no worse: pure null pairs built from two saved baselines.

Per pair, each meme's outputs (clean and under every condition) are swapped between the two checkpoints by a fair
coin, the same coin for the meme in every condition: the two halves are then exchangeable, neither is better on any
meme, and every failure of the gate is a false alarm. The pairs are gated with this release's `memerobust compare`
(in process, the family-wise default, and any other --control given) and, with --old PATH (a checkout of an earlier
release), with that release's `memerobust compare` in a subprocess, so before and after come from one run.

    python bench/null_pairs.py A.json B.json --pairs 20 --old /tmp/wt_old

Prints, per procedure, how many pairs failed and the conditions failing per pair; then the power of the default
control (the median worsening each rule detects at 80% power) and the time of one compare.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from pytest_memerobust.judge.gate import ErrorControl, compare_baselines, summarize
from pytest_memerobust.report.gate_tables import power_line
from pytest_memerobust.track.baseline import load_baseline, paired_cells


def null_pair(a: dict, b: dict, seed: int) -> tuple[dict, dict]:
    """(A', B'): per (model, dataset) one coin per meme; where it lands heads the meme's cells are swapped."""
    rng = np.random.default_rng(seed)
    left, right = json.loads(json.dumps(a)), json.loads(json.dumps(b))
    for model, by_spec in a["results"].items():
        for spec, by_condition in by_spec.items():
            n = len(next(iter(by_condition.values()))["y"])
            swap = rng.random(n) < 0.5
            for condition, cell in by_condition.items():
                other = b["results"].get(model, {}).get(spec, {}).get(condition)
                if other is None:
                    continue
                for key in ("clean", "perturbed", "declined"):
                    if key in cell:
                        x, y = cell[key], other[key]
                        left["results"][model][spec][condition][key] = [y[i] if swap[i] else x[i] for i in range(n)]
                        right["results"][model][spec][condition][key] = [x[i] if swap[i] else y[i] for i in range(n)]
    return left, right


def old_compare(old: Path, before: Path, after: Path) -> tuple[int, int | None]:
    """(exit code, conditions regressed) of an earlier release's `memerobust compare`."""
    code = "import sys; from pytest_memerobust.cli import main; sys.exit(main(sys.argv[1:]))"
    out = subprocess.run([sys.executable, "-c", code, "compare", str(before), str(after)], capture_output=True,
                         text=True, env={**os.environ, "PYTHONPATH": str(old)})
    last = [line for line in out.stdout.splitlines() if "conditions regressed" in line or "condition regressed" in line]
    regressed = int(last[-1].split()[0]) if last else None
    return out.returncode, regressed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("a")
    parser.add_argument("b")
    parser.add_argument("--pairs", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--control", action="append", default=[],
                        help="more error controls to count (fdr, holm, none); fwer is always counted")
    parser.add_argument("--old", type=Path, help="a checkout of an earlier release, to count its compare too")
    args = parser.parse_args()
    a, b = load_baseline(Path(args.a)), load_baseline(Path(args.b))
    controls = ["fwer"] + [c for c in args.control if c != "fwer"]
    failed = {c: [] for c in controls + (["old"] if args.old else [])}
    seconds, power = [], None
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.pairs):
            left, right = null_pair(a, b, args.seed + i)
            for control in controls:
                start = time.perf_counter()
                comparisons = compare_baselines(paired_cells(left, right), control=ErrorControl.parse(control),
                                                seed=right["seed"])
                summary = summarize(comparisons)
                if control == "fwer":
                    seconds.append(time.perf_counter() - start)
                    power = power or power_line(summary)
                failed[control].append(summary["regressed"])
            if args.old:
                paths = [Path(tmp) / f"{side}.json" for side in ("a", "b")]
                for path, data in zip(paths, (left, right)):
                    path.write_text(json.dumps(data))
                code, regressed = old_compare(args.old, *paths)
                failed["old"].append(regressed if code in (0, 1) else f"error {code}")
            print(f"pair {i + 1}: " + ", ".join(f"{c} {failed[c][-1]}" for c in failed), flush=True)
    n = sum(len(cells) for by_spec in b["results"].values() for cells in by_spec.values())
    print(f"\n{args.pairs} null pairs of {args.a} and {args.b} ({n} conditions):")
    for control, counts in failed.items():
        bad = sum(1 for c in counts if not isinstance(c, int) or c > 0)
        name = f"release at {args.old}" if control == "old" else ErrorControl.parse(control).describe()
        print(f"  {name}: {bad} of {args.pairs} pairs fail the gate; conditions failing per pair: {counts}")
    print(f"  {power}")
    print(f"  one compare (fwer, this release, in process): median {np.median(seconds):.2f} s")


if __name__ == "__main__":
    main()
