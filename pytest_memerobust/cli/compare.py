"""`memerobust compare`: the gate's rules and summary on two saved baselines, side by side (exit 1 on a
regression; what improved beyond noise is listed beside what regressed, and never changes the exit), optionally
written as JSON for scripts (`--json`)."""
from __future__ import annotations

import json
from pathlib import Path

from ..errors import ConfigError
from .common import check_output_json, parsed_rules, strict_json

COMPARE_FORMAT = "pytest-memerobust-compare/1"


def add_parser(sub) -> None:
    from ..judge.gate import DEFAULT_RESAMPLES, METHODS, PERMUTATION_BELOW

    compare = sub.add_parser(
        "compare", help="two checkpoints (the gate: exit 1 on a regression), two recipes over their seeds "
                        "(--recipe ... --recipe ...), or detectors on the same memes (more / less robust)",
        description="Checkpoint against checkpoint (A.json B.json: the gate's question, exit 1 when B regressed); "
                    "recipe against recipe (--recipe A1.json A2.json A3.json --recipe B1.json ...: each file one "
                    "seed, the effect judged against the seeds' spread); detector against detector (files of "
                    "different detectors on the same memes, or one file of a run with several models: which loses "
                    "less, beyond noise).")
    compare.add_argument("files", nargs="*", metavar="BASELINE",
                         help="A.json B.json (from --memerobust-save-baseline; A may hold several checkpoints of one "
                              "recipe); baselines of different detectors; or one baseline of several detectors")
    compare.add_argument("--recipe", nargs="+", action="append", metavar="BASELINE",
                         help="the baselines of one recipe's checkpoints, one seed each (shell globs welcome); give "
                              "it twice, recipe A then recipe B")
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
    compare.add_argument("--every", action="store_true", help="detectors: list every comparison, not only the "
                         "family means and the decided ones (at most 12 of those)")
    compare.add_argument("--json", metavar="PATH", help="also write every comparison (rule, scores, difference, "
                         "bound, raw and adjusted p, state, method, resamples) and the verdict to this .json file")


def run(args) -> int:
    """Which question the files ask (recipes, detectors or the gate's), answered by its module."""
    from ..track.baseline import load_baseline

    if args.recipe:
        if args.files:
            raise ConfigError(f"--recipe compares recipes given by --recipe only; also given: {', '.join(args.files)}")
        if len(args.recipe) != 2:
            raise ConfigError(f"--recipe: give it twice, recipe A then recipe B (got it {len(args.recipe)} "
                              f"time{'s' * (len(args.recipe) != 1)})")
        from . import compare_recipes

        return compare_recipes.run(args)
    if not args.files:
        raise ConfigError("compare: give two baselines (A.json B.json), --recipe twice, or baselines of detectors")
    baselines = [load_baseline(Path(p)) for p in args.files]
    if len(baselines) != 2 or _detectors_apart(*baselines):
        from . import compare_detectors

        return compare_detectors.run(args, baselines)
    return _run_gate(args, *baselines)


def _detectors_apart(before: dict, after: dict) -> bool:
    """Two baselines that hold no model in common: a detector comparison, not a checkpoint one."""
    return not set(before["results"]) & set(after["results"])


def _run_gate(args, before: dict, after: dict) -> int:
    """The gate's rules and summary on two saved baselines (A = before, B = now): the same family, error control,
    table, summary line and notes as `pytest --memerobust-baseline`, exit 1 when B fails the gate."""
    from tabulate import tabulate

    from ..judge.gate import METHODS, compare_baselines, summarize
    from ..report.gate_tables import change_list_lines, comparison_headers, comparison_rows
    from ..report.outline import baseline_notes
    from ..track.baseline import (baseline_checkpoints, flip_ledger_of, held_checkpoint_index, paired_cells,
                                  unmatched_conditions)

    checks, control = parsed_rules(args)
    if args.method not in METHODS:
        raise ConfigError(f"--method {args.method!r}: expected one of {', '.join(METHODS)}")
    names = tuple(args.files)
    if args.json is not None:
        check_output_json(Path(args.json), "--json", reads=names)
    if args.ledger and len(baseline_checkpoints(before)) > 1:  # before the work, not after it
        flip_ledger_of(before, after, names=names)
    mode = "non-inferiority" if args.non_inferiority else "regressions"
    comparisons = compare_baselines(paired_cells(before, after, names), checks, names=names, control=control,
                                    mode=mode, confidence=args.confidence, n_resamples=args.resamples,
                                    seed=after["seed"], method=args.method)
    new, missing = unmatched_conditions(before, after)
    summary = summarize(comparisons, closest=len(comparisons), new=new, missing=missing)
    print(f"A = {names[0]} (baseline), B = {names[1]} (now); rules {', '.join(c.spec for c in checks)}; "
          f"per condition its rule furthest past failing, else its clearest improvement, else its rule nearest to "
          f"failing")
    print(tabulate(comparison_rows(summary["rows"]), headers=comparison_headers(), tablefmt="simple",
                   disable_numparse=True))
    print(summary["summary"])
    for line in change_list_lines(summary):  # what improved, then both lists rule by rule
        print(line)
    for line in baseline_notes(summary):  # the question and error control, the resampling, recipe, power
        print(line)
    held = held_checkpoint_index(before, baseline_checkpoints(after)[0]["models"])
    if held is not None and len(baseline_checkpoints(before)) > 1:
        print(f"Note: B is checkpoint {held + 1} of the {len(baseline_checkpoints(before))} in recipe A (the same "
              "weights): it is compared with a recipe that holds it, so its own seed pulls the recipe toward it.")
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
    return strict_json({"format": COMPARE_FORMAT, "before": str(names[0]), "after": str(names[1]),
                         "rules": [c.spec for c in checks], "verdict": verdict,
                         "comparisons": [c.as_dict() for c in comparisons]})
