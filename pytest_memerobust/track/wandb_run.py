"""One W&B run per pytest session, through wandb's own SDK (the [wandb] extra): config = the run's params, summary =
every figure by its stable name (names.py), a `conditions` table (one row per figure with its interval), and the
reports, counterexamples and the run's history entry as one artifact.

W&B decides online or offline as it always does (WANDB_MODE, `wandb offline`); offline runs stay under WANDB_DIR
for `wandb sync`. An online W&B without an API key, or whose server does not answer, is refused before any case:
wandb.init would otherwise wait for it at the end of the run."""
from __future__ import annotations

import json
import os
from pathlib import Path

from .names import figures, report_metrics, report_params
from .common import ANSWER_SECONDS, HISTORY_ARTIFACT, TrackerError, answers, install_hint, run_name, verdict_tags

OFFLINE_MODES = ("offline", "dryrun", "disabled")  # modes that need no server
ARTIFACT = "memerobust-reports"  # the artifact holding the run's reports, counterexamples and history entry
TABLE_COLUMNS = ["model", "dataset", "condition", "metric", "value", "ci_low", "ci_high"]


def _import_wandb(flag: str):
    try:
        import wandb
    except ImportError as exc:
        raise TrackerError(f"{flag}: W&B is not installed here ({exc}): {install_hint('wandb')}") from None
    return wandb


def settings(flag: str):
    """W&B's settings as wandb.init will read them (its settings files, then the WANDB_* variables), without
    starting anything."""
    wandb = _import_wandb(flag)
    try:
        found = wandb.Settings()
        found.update_from_system_settings()
        found.update_from_env_vars(dict(os.environ))
    except Exception as exc:
        text = " ".join(str(exc).split())
        raise TrackerError(f"{flag}: W&B's settings (WANDB_* variables, settings files) are invalid: {text[:400]}") \
            from None
    return found


def _has_credentials(found) -> bool:
    """An API key for W&B's server: WANDB_API_KEY, an identity token file, the settings, or `wandb login`'s .netrc."""
    if os.environ.get("WANDB_API_KEY") or os.environ.get("WANDB_IDENTITY_TOKEN_FILE") or found.api_key:
        return True
    try:
        from wandb.sdk.lib.wbauth import read_netrc_auth

        return bool(read_netrc_auth(host=found.base_url))
    except Exception:  # (an unreadable .netrc, or a wandb without this reader: wandb.init will say)
        return False


def check_wandb(project: str) -> None:
    """Before any case: W&B is installed, the project name is one W&B takes, and an online W&B can log in and
    reach its server (TrackerError names the culprit and suggests WANDB_MODE=offline)."""
    flag = f"--memerobust-wandb={project}"
    wandb = _import_wandb(flag)
    try:
        wandb.Settings(project=project)
    except Exception as exc:
        text = " ".join(str(exc).split())
        raise TrackerError(f"{flag}: W&B does not take this project name ({text[:300]})") from None
    found = settings(flag)
    if found.mode in OFFLINE_MODES:
        return
    if not _has_credentials(found):
        mode = f"WANDB_MODE={os.environ['WANDB_MODE']}" if os.environ.get("WANDB_MODE") else "WANDB_MODE is not set"
        raise TrackerError(f"{flag}: W&B is online ({mode}) and has no API key for {found.base_url} "
                           "(WANDB_API_KEY or `wandb login`): log in, or set WANDB_MODE=offline to keep the run on "
                           "disk for `wandb sync`")
    why = answers(found.base_url)
    if why is not None:
        raise TrackerError(f"{flag}: the W&B server {found.base_url} does not answer ({why}, within "
                           f"{ANSWER_SECONDS:g} s); set WANDB_MODE=offline to keep the run on disk for `wandb sync`")


def log_wandb(report: dict, project: str, files: list[Path], entry: dict) -> str:
    """One W&B run for the finished run; the line that says where it went. Raises on failure (log_run says it)."""
    flag = f"--memerobust-wandb={project}"
    wandb = _import_wandb(flag)
    found = settings(flag)
    if found.mode == "disabled":
        return f"memerobust: W&B is disabled (WANDB_MODE={os.environ.get('WANDB_MODE') or 'disabled'}): not logged"
    tags = verdict_tags(entry)
    config = {**report_params(report), **tags}
    # quiet (the run's terminal says where it went in one line), no console capture or system sampling: the run is
    # over, only its results are logged; reinit="create_new" leaves any run the user's own code has open alone
    run = wandb.init(project=project, name=run_name(report, entry), job_type="robustness", config=config,
                     tags=[tags["memerobust.verdict"]], notes=(report.get("verdict") or {}).get("summary"),
                     reinit="create_new",
                     settings=wandb.Settings(silent=True, console="off", x_disable_stats=True, save_code=False))
    try:
        metrics = report_metrics(report)
        run.summary.update(metrics)
        rows = [[r[c] for c in TABLE_COLUMNS] for r in figures(report)]
        run.log({"conditions": wandb.Table(columns=TABLE_COLUMNS, data=rows)})
        artifact = wandb.Artifact(ARTIFACT, type="robustness-report",
                                  metadata={"verdict": tags["memerobust.verdict"], "commit": entry.get("commit")})
        for path in files:
            if path.is_dir():
                artifact.add_dir(str(path), name=path.name)
            else:
                artifact.add_file(str(path))
        with artifact.new_file(HISTORY_ARTIFACT, encoding="utf-8") as handle:
            handle.write(json.dumps(entry, sort_keys=True))
        run.log_artifact(artifact)
        where = (f"offline, `wandb sync {run.settings.sync_dir}` uploads it" if run.settings.mode in OFFLINE_MODES
                 else run.url)
        line = (f"memerobust: logged to W&B run {run.id} ({len(metrics)} metrics, a table of {len(rows)} rows, "
                f"artifact {ARTIFACT}): {where}")
    finally:
        run.finish()
    return line
