"""`memerobust compare`: the gate's rules and summary on two saved baselines, side by side (exit 1 on a
regression; what improved beyond noise is listed beside what regressed, and never changes the exit), optionally
written as JSON for scripts (`--json`)."""
from __future__ import annotations

import json
import math
from pathlib import Path

from ..errors import ConfigError
from .common import check_output_json

COMPARE_FORMAT = "pytest-memerobust-compare/1"


def add_parser(sub) -> None:
    from ..judge.gate import DEFAULT_RESAMPLES, METHODS, PERMUTATION_BELOW

    compare = sub.add_parser("compare", help="side-by-side table of two baselines (exit 1 on a regression)")
    compare.add_argument("before", help="baseline A (.json, from --memerobust-save-baseline; it may hold several "
                                        "checkpoints of one recipe)")
    compare.add_argument("after", help="baseline B, of one checkpoint")
    compare.add_argument("--fail-on", "--metric", action="append", metavar="RULE",
                         help="regression rule as in --memerobust-fail-on: acc, auroc, f1, flip, rel_acc... with an "
                              "optional minimum effect (acc:1%%); repeatable; default: acc, auroc, f1 and flip")
    compare.add_argument("--gate-error", default="fwer", metavar="CONTROL",
                         help="error control over every condition and rule, as --memerobust-gate-error: fwer "
                              "(default), holm, fdr or none, optionally with a level (fwer:0.01)")
    compare.add_argument("--non-inferiority", action="store_true",
                         help="ask the non-inferiority question: B passes only where every rule is shown no worse "
                              "than A by more than its margin (--fail-on acc:2%%; 2 points unless given)")
    compare.add_argument("--method", default="auto",
                         help=f"how the decision resamples, as --memerobust-gate-method: {', '.join(METHODS)} "
                              f"(default auto: paired permutations below {PERMUTATION_BELOW} memes, else the paired "
                              "bootstrap)")
    compare.add_argument("--resamples", "--bootstrap", dest="resamples", type=int, default=DEFAULT_RESAMPLES,
                         metavar="N", help=f"resamples of the decision (and of the intervals), as "
                                           f"--memerobust-gate-resamples (default {DEFAULT_RESAMPLES})")
    compare.add_argument("--confidence", type=float, default=0.95)
    compare.add_argument("--ledger", metavar="DIR", help="also write the flip ledger (the memes B newly gets wrong "
                         "and newly gets right, with McNemar's test) to DIR/flip-ledger.json and DIR/flip-ledger.md")
    compare.add_argument("--json", metavar="PATH", help="also write every comparison (rule, scores, difference, "
                         "bound, raw and adjusted p, state, method, resamples) and the verdict to this .json file")


def run(args) -> int:
    """The gate's rules and summary on two saved baselines (A = before, B = now): the same family, error control,
    table, summary line and notes as `pytest --memerobust-baseline`, exit 1 when B fails the gate."""
    from tabulate import tabulate

    from ..judge.gate import (DEFAULT_CHECKS, METHODS, ErrorControl, RegressionCheck, check_resamples,
                              compare_baselines, summarize)
    from ..report.gate_tables import change_list_lines, comparison_headers, comparison_rows
    from ..report.outline import baseline_notes
    from ..track.baseline import (baseline_checkpoints, flip_ledger_of, load_baseline, paired_cells,
                                  unmatched_conditions)

    try:
        checks = tuple(RegressionCheck.parse(s) for s in args.fail_on) if args.fail_on else DEFAULT_CHECKS
    except ValueError as exc:
        raise ConfigError(f"--fail-on: {exc}") from None
    try:
        control = ErrorControl.parse(args.gate_error)
    except ValueError as exc:
        raise ConfigError(f"--gate-error: {exc}") from None
    if not 0 < args.confidence < 1:
        raise ConfigError(f"--confidence {args.confidence}: must lie strictly between 0 and 1, e.g. 0.95")
    if args.method not in METHODS:
        raise ConfigError(f"--method {args.method!r}: expected one of {', '.join(METHODS)}")
    check_resamples(control, args.resamples, "--resamples")  # too few resamples: a gate that cannot fail
    if args.json is not None:
        check_output_json(Path(args.json), "--json", reads=(args.before, args.after))
    before, after = load_baseline(Path(args.before)), load_baseline(Path(args.after))
    names = (args.before, args.after)
    if args.ledger and len(baseline_checkpoints(before)) > 1:  # before the work, not after it
        flip_ledger_of(before, after, names=names)
    mode = "non-inferiority" if args.non_inferiority else "regressions"
    comparisons = compare_baselines(paired_cells(before, after, names), checks, names=names, control=control,
                                    mode=mode, confidence=args.confidence, n_resamples=args.resamples,
                                    seed=after["seed"], method=args.method)
    new, missing = unmatched_conditions(before, after)
    summary = summarize(comparisons, closest=len(comparisons), new=new, missing=missing)
    print(f"A = {args.before} (baseline), B = {args.after} (now); rules {', '.join(c.spec for c in checks)}; "
          f"per condition its rule furthest past failing, else its clearest improvement, else its rule nearest to "
          f"failing")
    print(tabulate(comparison_rows(summary["rows"]), headers=comparison_headers(), tablefmt="simple",
                   disable_numparse=True))
    print(summary["summary"])
    for line in change_list_lines(summary):  # what improved, then both lists rule by rule
        print(line)
    for line in baseline_notes(summary):  # the question and error control, the resampling, recipe, power
        print(line)
    if args.ledger:
        from ..report.ledger import write_ledger

        ledger = flip_ledger_of(before, after, names=names)
        paths = write_ledger(ledger, Path(args.ledger))
        wrong, right = (sum(c[key] for c in ledger["conditions"]) for key in ("n_newly_wrong", "n_newly_right"))
        print(f"flip ledger: {wrong} memes newly wrong and {right} newly right in B over "
              f"{len(ledger['conditions'])} conditions; wrote {' and '.join(map(str, paths))}")
    if args.json is not None:
        from ..atomic import atomic_write_text

        document = comparison_document(names, checks, comparisons, summary)
        atomic_write_text(Path(args.json), json.dumps(document, indent=2, allow_nan=False) + "\n")
        print(f"wrote {len(comparisons)} comparisons and the verdict to {args.json}")
    return 1 if summary["regressed"] else 0


def comparison_document(names, checks, comparisons, summary: dict) -> dict:
    """What `--json` writes: the two files, the rules, the verdict (judge.gate.summarize's keys but its table rows,
    with `passed`; `improved`, `improved_summary` and `improvements` the improvement family's) and every comparison
    (judge.gate.Comparison.as_dict, with its `improved` decision, p-values and bound), numbers that are not finite as
    null."""
    verdict = {"passed": not summary["regressed"], **{k: v for k, v in summary.items() if k != "rows"}}
    return _strict_json({"format": COMPARE_FORMAT, "before": str(names[0]), "after": str(names[1]),
                         "rules": [c.spec for c in checks], "verdict": verdict,
                         "comparisons": [c.as_dict() for c in comparisons]})


def _strict_json(value):
    """`value` with every NaN or infinity as None (null), so the file is JSON every reader parses."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _strict_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_strict_json(v) for v in value]
    return value
