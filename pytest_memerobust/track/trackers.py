"""A run's results in the experiment trackers teams already read: one MLflow run and one W&B run per pytest session
(--memerobust-mlflow, --memerobust-wandb), each an optional extra imported only when asked for.

`check_trackers` runs before any case: a tracker that is not installed, not writable or does not answer is one usage
error naming it, not a failure after an hour of cases. `log_run` runs after the run's own reports are written and
never raises: a tracker that fails then is one line saying what failed, and the reports are never touched."""
from __future__ import annotations

import urllib.error
import urllib.request
from pathlib import Path

from ..errors import MemeRobustError

EXPERIMENT = "pytest-memerobust"  # MLflow's experiment (unless MLFLOW_EXPERIMENT_NAME) and W&B's default project
ANSWER_SECONDS = 5.0  # how long a tracker's server has to answer the check before the run is refused
HISTORY_ARTIFACT = "memerobust-history.json"  # the run's history entry, so a history reads back from the tracker


class TrackerError(MemeRobustError):
    """An experiment tracker cannot be used: its extra is missing, its store not writable, its server silent."""


def install_hint(extra: str) -> str:
    return f"pip install 'pytest-memerobust[{extra}]'"


def answers(url: str, timeout: float = ANSWER_SECONDS) -> str | None:
    """None when a server answers `url` (any HTTP status: a 401 or 404 still proves it is there); else why not."""
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method="GET"), timeout=timeout):
            return None
    except urllib.error.HTTPError:
        return None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        return f"{type(reason).__name__}: {reason}" if str(reason) else type(reason).__name__


def check_trackers(mlflow: str | None, wandb: str | None, cache_dir: Path | None) -> None:
    """Before any case: each tracker asked for is installed and can take the run (TrackerError names what is not)."""
    if mlflow is not None:
        from .mlflow_run import check_mlflow

        check_mlflow(mlflow, cache_dir)
    if wandb is not None:
        from .wandb_run import check_wandb

        check_wandb(wandb)


def run_name(report: dict, entry: dict) -> str:
    """What a tracker calls the run: its models (cards, without fusion modes) and when it ended (UTC, to the minute)."""
    # a partial report (the verdict alone) has no models: its cases' records name them
    named = list(report.get("models") or {}) or [c.get("model") for c in report.get("cases") or []]
    models = dict.fromkeys(str(m).split(":")[0] for m in named if m) or {"no model": None}
    return f"{', '.join(models)} {entry['date'][:16].replace('T', ' ')}"


def verdict_tags(entry: dict) -> dict[str, str]:
    """Tags both trackers carry: the verdict (PASSED, FAILED), the commit when known, whether the gate regressed."""
    tags = {"memerobust.verdict": entry.get("verdict") or "NONE",
            "memerobust.gated": str(bool(entry.get("gated"))).lower(),
            "memerobust.regressed": str(bool(entry.get("regressed"))).lower()}
    if entry.get("commit"):
        tags["memerobust.commit"] = str(entry["commit"])
    return tags


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
