"""`memerobust history`: the trend of a run history (--memerobust-history): per model and perturbation family, the
worst case's relative robustness run by run and whether it eroded."""
from __future__ import annotations

import sys
from pathlib import Path

from ..errors import ConfigError


def add_parser(sub) -> None:
    from ..options import positive_int

    history = sub.add_parser("history", help="the trend of a run history (--memerobust-history): per model and "
                             "perturbation family, the worst case's relative robustness run by run and whether it "
                             "eroded")
    history.add_argument("path", nargs="?", help="the .jsonl history (default: .pytest_cache/d/memerobust/"
                         "history.jsonl, where --memerobust-history writes when given no path)")
    history.add_argument("--last", type=positive_int, help="show the last N runs (default 8)")
    history.add_argument("--model", help="only this model (its label in the reports)")
    history.add_argument("--family", help="only this perturbation family")
    history.add_argument("--mlflow", help="read the runs from this MLflow tracking URI instead (runs logged with "
                         "--memerobust-mlflow)")
    history.add_argument("--experiment", help="the MLflow experiment (default: $MLFLOW_EXPERIMENT_NAME, else "
                         "pytest-memerobust)")
    history.add_argument("--fail-on-erosion", dest="fail_on_erosion", action="store_true",
                         help="exit 1 when a family eroded beyond noise over the runs shown")


def run(args) -> int:
    """The trend of a run history: the runs, then per model and family the worst case's relative robustness run by
    run, its change and whether it eroded (judge/trend.py)."""
    from ..judge.trend import trend_series
    from ..report.history import (DEFAULT_NAME, SHOWN_RUNS, STATE_LEGEND, distinct_runs, erosion_lines, printable,
                                  read_history, runs_table, trend_tables)

    def warn(message: str) -> None:
        print(f"memerobust history: warning: {message}", file=sys.stderr)

    if args.mlflow:
        from ..track.mlflow_run import mlflow_history

        entries, where = mlflow_history(args.mlflow, args.experiment, warn=warn), f"MLflow {args.mlflow}"
    else:
        path = Path(args.path or Path(".pytest_cache") / "d" / "memerobust" / DEFAULT_NAME)
        entries, where = read_history(path, warn=warn), printable(str(path))
    shown = distinct_runs(entries[-(args.last or SHOWN_RUNS):])
    if not shown:
        print(f"memerobust history: {where} holds no run yet")
        return 0
    series = trend_series(shown, model=args.model, family=args.family)
    if (args.model or args.family) and not series:
        raise ConfigError(f"{where}: no run has " + " and ".join(
            f"{what} {value!r}" for what, value in (("model", args.model), ("family", args.family)) if value))
    print(f"run history: {where}: the last {len(shown)} of {len(entries)} runs")
    print(runs_table(shown))
    print()
    print(trend_tables(series, [e["run"] for e in shown]))
    print(STATE_LEGEND)
    for line in erosion_lines(series):
        print(line)
    return 1 if args.fail_on_erosion and any(s["state"] == "eroded" for s in series) else 0
