"""A run's results in the experiment trackers teams already read: one MLflow run and one W&B run per pytest session
(--memerobust-mlflow, --memerobust-wandb), each an optional extra imported only when asked for.

`check_trackers` runs before any case: a tracker that is not installed, not writable or does not answer is one usage
error naming it, not a failure after an hour of cases. `log_run` runs after the run's own reports are written and
never raises: a tracker that fails then is one line saying what failed, and the reports are never touched."""
from __future__ import annotations

from pathlib import Path


def check_trackers(mlflow: str | None, wandb: str | None, cache_dir: Path | None) -> None:
    """Before any case: each tracker asked for is installed and can take the run (common.TrackerError names what is
    not)."""
    if mlflow is not None:
        from .mlflow_run import check_mlflow

        check_mlflow(mlflow, cache_dir)
    if wandb is not None:
        from .wandb_run import check_wandb

        check_wandb(wandb)


def log_run(report: dict, *, mlflow: str | None, wandb: str | None, cache_dir: Path | None,
            artifacts: list[Path] = (), history_entry: dict | None = None) -> list[str]:
    """Log the finished run to each tracker asked for; the lines that say where it went, or what failed. Never
    raises. `artifacts`: the report files, the counterexample manifest and its pictures folder (those that exist
    are logged); `history_entry`: the run's history line (report/history.py), computed here when not given."""
    if mlflow is None and wandb is None:
        return []
    try:
        from ..report.history import history_entry as make_entry, run_commit

        entry = history_entry if history_entry is not None else make_entry(report, commit=run_commit())
    except Exception as exc:
        return [f"memerobust: nothing logged to the trackers: the run's history entry could not be built "
                f"({type(exc).__name__}: {exc})"]
    files = [Path(a) for a in artifacts if Path(a).exists()]
    lines = []
    for name, target, log in (("MLflow", mlflow, _log_mlflow), ("W&B", wandb, _log_wandb)):
        if target is None:
            continue
        try:
            lines.append(log(report, target, cache_dir, files, entry))
        except Exception as exc:  # a tracker's failure is one line; the reports are already written
            lines.append(f"memerobust: could not log to {name} ({type(exc).__name__}: {_first_line(exc)}); the "
                         "run's own reports are unaffected")
    return lines


def _first_line(exc: Exception) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else ""


def _log_mlflow(report, uri, cache_dir, files, entry) -> str:
    from .mlflow_run import log_mlflow

    return log_mlflow(report, uri, cache_dir, files, entry)


def _log_wandb(report, project, cache_dir, files, entry) -> str:
    from .wandb_run import log_wandb

    return log_wandb(report, project, files, entry)
