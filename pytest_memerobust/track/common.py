"""What the MLflow and W&B trackers share (mlflow_run.py, wandb_run.py): the experiment's name, the error a tracker
that cannot take the run raises, the check that its server answers, and what each calls the run and tags it with.
trackers.py picks the trackers a run asked for."""
from __future__ import annotations

import urllib.error
import urllib.request

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


def run_name(report: dict, entry: dict) -> str:
    """What a tracker calls the run: its models (cards, without fusion modes) and when it ended (UTC, to the minute)."""
    # a partial report (the verdict alone) has no models: its cases' records name them
    named = list(report.get("models") or {}) or [c.get("model") for c in report.get("cases") or []]
    models = dict.fromkeys(str(m).split(":")[0] for m in named if m) or {"no model": None}
    return f"{', '.join(models)} {entry['date'][:16].replace('T', ' ')}"


def verdict_tags(entry: dict) -> dict[str, str]:
    """Tags both trackers carry: the verdict (PASSED, FAILED), the commit when known, whether the gate regressed and
    how many conditions it found improved."""
    tags = {"memerobust.verdict": entry.get("verdict") or "NONE",
            "memerobust.gated": str(bool(entry.get("gated"))).lower(),
            "memerobust.regressed": str(bool(entry.get("regressed"))).lower(),
            "memerobust.improved": str(int(entry.get("improved") or 0))}
    if entry.get("commit"):
        tags["memerobust.commit"] = str(entry["commit"])
    return tags
