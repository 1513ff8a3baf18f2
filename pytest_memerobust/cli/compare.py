"""`memerobust compare`: the gate's rules and summary on two saved baselines, side by side (exit 1 on a
regression)."""
from __future__ import annotations

from pathlib import Path

from ..errors import ConfigError


def add_parser(sub) -> None:
    compare = sub.add_parser("compare", help="side-by-side table of two baselines (exit 1 on a regression)")
    compare.add_argument("before", help="baseline A (.json, from --memerobust-save-baseline)")
    compare.add_argument("after", help="baseline B")
    compare.add_argument("--fail-on", "--metric", action="append", metavar="RULE",
                         help="regression rule as in --memerobust-fail-on: acc, auroc, f1, flip, rel_acc... with an "
                              "optional minimum effect (acc:1%%); repeatable; default: acc, auroc, f1 and flip")
    compare.add_argument("--gate-error", default="fwer", metavar="CONTROL",
                         help="error control over every condition and rule, as --memerobust-gate-error: fwer "
                              "(default), holm, fdr or none, optionally with a level (fwer:0.01)")
    compare.add_argument("--non-inferiority", action="store_true",
                         help="ask the non-inferiority question: B passes only where every rule is shown no worse "
                              "than A by more than its margin (--fail-on acc:2%%; 2 points unless given)")
    compare.add_argument("--confidence", type=float, default=0.95)
    compare.add_argument("--bootstrap", type=int, default=1000)
    compare.add_argument("--ledger", metavar="DIR", help="also write the flip ledger (the memes B newly gets wrong "
                         "and newly gets right, with McNemar's test) to DIR/flip-ledger.json and DIR/flip-ledger.md")


def run(args) -> int:
    """The gate's rules and summary on two saved baselines (A = before, B = now): the same family, error control,
    table and summary line as `pytest --memerobust-baseline`, exit 1 when B fails the gate."""
    from tabulate import tabulate

    from ..judge.gate import (DEFAULT_CHECKS, ErrorControl, RegressionCheck, check_resamples, compare_baselines,
                              summarize)
    from ..report.gate_tables import comparison_headers, comparison_rows, memes_needed_line, power_line
    from ..track.baseline import flip_ledger_of, load_baseline, paired_cells, unmatched_conditions

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
    check_resamples(control, args.bootstrap, "--bootstrap")  # too few resamples: a gate that cannot fail
    before, after = load_baseline(Path(args.before)), load_baseline(Path(args.after))
    mode = "non-inferiority" if args.non_inferiority else "regressions"
    names = (args.before, args.after)
    comparisons = compare_baselines(paired_cells(before, after, names), checks, names=names, control=control,
                                    mode=mode, confidence=args.confidence, n_resamples=args.bootstrap,
                                    seed=after["seed"])
    new, missing = unmatched_conditions(before, after)
    summary = summarize(comparisons, closest=len(comparisons), new=new, missing=missing)
    print(f"A = {args.before} (baseline), B = {args.after} (now); rules {', '.join(c.spec for c in checks)}; "
          f"{mode}: one-sided paired tests of B against A over the same memes ({args.bootstrap} bootstrap "
          f"resamples shared by every condition), {control.describe()}; per condition its rule nearest to, or "
          f"furthest past, failing")
    print(tabulate(comparison_rows(summary["rows"]), headers=comparison_headers(), tablefmt="simple",
                   disable_numparse=True))
    print(summary["summary"])
    for line in filter(None, [power_line(summary), memes_needed_line(summary)]):
        print(line)
    if args.ledger:
        from ..report.ledger import write_ledger

        ledger = flip_ledger_of(before, after, names=names)
        paths = write_ledger(ledger, Path(args.ledger))
        wrong, right = (sum(c[key] for c in ledger["conditions"]) for key in ("n_newly_wrong", "n_newly_right"))
        print(f"flip ledger: {wrong} memes newly wrong and {right} newly right in B over "
              f"{len(ledger['conditions'])} conditions; wrote {' and '.join(map(str, paths))}")
    return 1 if summary["regressed"] else 0
