"""One MLflow run per pytest session, through MLflow's own client (the [mlflow] extra: mlflow-skinny, with SQLAlchemy
and Alembic for the SQLite store): the options and cards as params, every figure by its stable name (names.py) as
a metric, the verdict as tags, the reports, counterexamples and the run's history entry as artifacts.

Without a URI the store is `sqlite:///<cache dir>/mlflow.db` (MLflow's file store is retired: 3.7 made SQLite the
default and later versions refuse `mlruns/` unless MLFLOW_ALLOW_FILE_STORE=true). A new experiment in a SQLite store
keeps its artifacts in `mlartifacts/` beside the database, not in the working directory's `mlruns/`."""
from __future__ import annotations

import base64
import json
import logging
import os
import socket
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
import warnings
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlparse

from .names import report_metrics, report_params
from .common import (ANSWER_SECONDS, EXPERIMENT, HISTORY_ARTIFACT, TrackerError, answers, install_hint, run_name,
                       verdict_tags)

DEFAULT_STORE = "default"  # options.DEFAULT: --memerobust-mlflow given alone (a SQLite store in the cache dir)
DB_NAME = "mlflow.db"
ARTIFACTS_NAME = "mlartifacts"  # beside a SQLite store: where its new experiments keep their artifacts
MAX_PARAM_VALUE = 6000  # MLflow's limit on a param's value (mlflow.utils.validation.MAX_PARAM_VAL_LENGTH)
METRICS_PER_BATCH, PARAMS_PER_BATCH = 1000, 100  # MLflow's limits on one log_batch request
DB_PORTS = {"postgresql": 5432, "mysql": 3306, "mssql": 1433}  # database stores: their default ports
_QUIET = ("mlflow", "alembic")  # loggers that announce the SQLite store's creation and migrations at INFO
_PROGRESS_BAR = "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"
# SQLAlchemy's deprecation of a loader MLflow's store uses, printed as the first line of every run otherwise
_DEPRECATION = r"The ``noload`` loader strategy is deprecated"
EXPERIMENT_API = "/api/2.0/mlflow/experiments/get-by-name"  # what the start check asks a tracking server


def experiment_name() -> str:
    return os.environ.get("MLFLOW_EXPERIMENT_NAME") or EXPERIMENT


def tracking_uri(option: str, cache_dir: Path | None) -> str:
    """The tracking URI the option names: itself, or for DEFAULT_STORE a SQLite store in the cache dir."""
    if option != DEFAULT_STORE:
        return option
    if cache_dir is None:
        raise TrackerError("--memerobust-mlflow without a URI keeps a SQLite store in the cache dir, and this run has "
                           "none (pytest's cache provider is off): pass --memerobust-mlflow=sqlite:///PATH/mlflow.db "
                           "or --memerobust-cache-dir=DIR")
    return "sqlite:///" + (Path(cache_dir).resolve() / DB_NAME).as_posix()


def _scheme(uri: str) -> str:
    """The store kind: `sqlite`, `postgresql` (a `+driver` dropped), `http`, ... ; `` for a plain path."""
    if uri in ("databricks", "databricks-uc", "uc"):
        return "databricks"
    if os.path.isabs(uri) or "://" not in uri and ":" not in uri:
        return ""
    return urlparse(uri).scheme.split("+")[0].lower()


def sqlite_path(uri: str) -> Path | None:
    """The database file of a `sqlite:///relative` or `sqlite:////absolute` URI; None for an in-memory one."""
    rest = uri.split("://", 1)[1] if "://" in uri else ""
    path = rest[1:] if rest.startswith("/") else rest
    path = path.split("?", 1)[0]
    return Path(path) if path and path != ":memory:" else None


@contextmanager
def _quiet():
    """MLflow and Alembic announce the store's tables at INFO on stderr, and MLflow draws a progress bar per
    download; the run's terminal says what happened in one line."""
    loggers = [logging.getLogger(name) for name in _QUIET]
    levels = [logger.level for logger in loggers]
    bar = os.environ.get(_PROGRESS_BAR)
    for logger in loggers:
        logger.setLevel(max(logger.getEffectiveLevel(), logging.WARNING))
    os.environ[_PROGRESS_BAR] = "false"
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=_DEPRECATION, category=DeprecationWarning)
            yield
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)
        if bar is None:
            os.environ.pop(_PROGRESS_BAR, None)
        else:
            os.environ[_PROGRESS_BAR] = bar


def _import_mlflow(flag: str):
    try:
        import mlflow  # noqa: F401
        from mlflow import MlflowClient
    except ImportError as exc:
        raise TrackerError(f"{flag}: MLflow is not installed here ({exc}): {install_hint('mlflow')}") from None
    return MlflowClient


def _client(uri: str, flag: str):
    """MLflow's client on `uri`; building it opens (and on first use creates) the store, so a store MLflow refuses
    is a TrackerError here."""
    MlflowClient = _import_mlflow(flag)
    try:
        with _quiet(), _creating(uri):
            return MlflowClient(tracking_uri=uri)
    except Exception as exc:
        text = " ".join(str(exc).split())
        if _scheme(uri) in ("", "file") and "MLFLOW_ALLOW_FILE_STORE" in text:
            folder = Path(urlparse(uri).path if _scheme(uri) == "file" else uri).parent
            said = text.split(". ")[0].rstrip(".")
            raise TrackerError(f"{flag}: MLflow's file store is retired, and this MLflow refuses it unless "
                               f"MLFLOW_ALLOW_FILE_STORE=true (\"{said}.\"); log to a SQLite store instead, e.g. "
                               f"--memerobust-mlflow=sqlite:///{(folder / DB_NAME).as_posix()} (`mlflow "
                               f"migrate-filestore` moves earlier runs there), or --memerobust-mlflow alone for one "
                               f"in the cache dir") from None
        raise TrackerError(f"{flag}: MLflow cannot open the tracking store {uri} ({type(exc).__name__}: "
                           f"{text[:500]})") from None


@contextmanager
def _creating(uri: str):
    """A SQLite store is created (its tables, then Alembic's migrations) by the first client that opens it: two runs
    doing it at once broke each other (`duplicate column name`), so its folder is locked meanwhile."""
    path = sqlite_path(uri) if _scheme(uri) == "sqlite" else None
    if path is None:
        yield
        return
    from ..atomic import folder_locked

    path.parent.mkdir(parents=True, exist_ok=True)
    with folder_locked(path.parent):
        yield


def _auth_headers() -> dict[str, str]:
    """The credentials MLflow's own client sends (MLFLOW_TRACKING_TOKEN, or MLFLOW_TRACKING_USERNAME and _PASSWORD)."""
    if os.environ.get("MLFLOW_TRACKING_TOKEN"):
        return {"Authorization": f"Bearer {os.environ['MLFLOW_TRACKING_TOKEN']}"}
    user, password = os.environ.get("MLFLOW_TRACKING_USERNAME"), os.environ.get("MLFLOW_TRACKING_PASSWORD")
    if user and password:
        return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}
    return {}


def check_server(uri: str, flag: str) -> None:
    """A tracking server at `uri` answers, and as MLflow: its REST API's experiment lookup gives MLflow's JSON (the
    experiment, or an `error_code` such as RESOURCE_DOES_NOT_EXIST). Anything else answering there (a proxy's page,
    another service) would take the run and keep nothing: a TrackerError before any case."""
    why = answers(uri.rstrip("/") + "/health")
    if why is not None:
        raise TrackerError(f"{flag}: the MLflow tracking server {uri} does not answer ({why}, within "
                           f"{ANSWER_SECONDS:g} s); start it, or log to a local store with --memerobust-mlflow alone")
    query = urllib.parse.urlencode({"experiment_name": experiment_name()})
    request = urllib.request.Request(f"{uri.rstrip('/')}{EXPERIMENT_API}?{query}", headers=_auth_headers())
    try:
        with urllib.request.urlopen(request, timeout=ANSWER_SECONDS) as reply:
            status, body = reply.status, reply.read(1 << 20)
    except urllib.error.HTTPError as exc:
        status, body = exc.code, exc.read(1 << 20)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise TrackerError(f"{flag}: the MLflow tracking server {uri} does not answer its API ({exc})") from None
    if status in (401, 403):
        raise TrackerError(f"{flag}: the MLflow tracking server {uri} refuses this client (HTTP {status}): set "
                           "MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD, or MLFLOW_TRACKING_TOKEN")
    try:
        data = json.loads(body)
    except ValueError:
        data = None
    if not (isinstance(data, dict) and (isinstance(data.get("experiment"), dict)
                                        or isinstance(data.get("error_code"), str))):
        raise TrackerError(f"{flag}: {uri} answers, but not as an MLflow tracking server (GET {EXPERIMENT_API} "
                           f"gave HTTP {status} without MLflow's JSON); check the address (and its path, if the "
                           "server sits behind a proxy)")


def check_mlflow(option: str, cache_dir: Path | None) -> None:
    """Before any case: MLflow is installed and the store named takes the run (TrackerError names the culprit)."""
    flag = "--memerobust-mlflow" + ("" if option == DEFAULT_STORE else f"={option}")
    _import_mlflow(flag)
    uri = tracking_uri(option, cache_dir)
    scheme = _scheme(uri)
    if scheme in ("sqlite", *DB_PORTS):
        try:
            import alembic  # noqa: F401
            import sqlalchemy  # noqa: F401
        except ImportError as exc:
            raise TrackerError(f"{flag}: a database store needs SQLAlchemy and Alembic ({exc}): "
                               f"{install_hint('mlflow')}") from None
    if scheme == "sqlite":
        _check_sqlite(uri, flag)
    elif scheme in ("http", "https"):
        check_server(uri, flag)
    elif scheme in DB_PORTS:
        parsed = urlparse(uri)
        try:
            socket.create_connection((parsed.hostname or "localhost", parsed.port or DB_PORTS[scheme]),
                                     timeout=ANSWER_SECONDS).close()
        except OSError as exc:
            raise TrackerError(f"{flag}: the {scheme} database of the MLflow store {parsed.hostname}:"
                               f"{parsed.port or DB_PORTS[scheme]} does not answer ({exc})") from None
    _client(uri, flag)


def _check_sqlite(uri: str, flag: str) -> None:
    path = sqlite_path(uri)
    if path is None:
        raise TrackerError(f"{flag}: an in-memory SQLite store keeps nothing once the run ends; name a file, e.g. "
                           f"sqlite:///mlflow.db")
    folder = path.parent  # MLflow creates a missing folder: the nearest one that exists must take it
    existing = next((f for f in (folder, *folder.parents) if f.exists()), None)
    if existing is None or not existing.is_dir():
        raise TrackerError(f"{flag}: the SQLite store's folder {folder} cannot be made ({existing} is not a folder)")
    read_only = path if path.exists() else existing
    if not os.access(read_only, os.W_OK):
        raise TrackerError(f"{flag}: the SQLite store {path} is not writable here ({read_only} is read-only)")


def _artifact_root(uri: str) -> str | None:
    """Where a new experiment keeps its artifacts: beside a SQLite store; elsewhere the store's default."""
    path = sqlite_path(uri) if _scheme(uri) == "sqlite" else None
    return None if path is None else (path.resolve().parent / ARTIFACTS_NAME).as_uri()


def _param_value(value) -> str:
    text = value if isinstance(value, str) else json.dumps(value)
    return text if len(text) <= MAX_PARAM_VALUE else text[:MAX_PARAM_VALUE - 12] + " [truncated]"


def log_mlflow(report: dict, option: str, cache_dir: Path | None, files: list[Path], entry: dict) -> str:
    """One MLflow run for the finished run; the line that says where it went. Raises on failure (log_run says it)."""
    from mlflow.entities import Metric, Param

    uri = tracking_uri(option, cache_dir)
    client = _client(uri, "--memerobust-mlflow")
    name = experiment_name()
    with _quiet():
        experiment = client.get_experiment_by_name(name)
        experiment_id = (experiment.experiment_id if experiment is not None else
                         client.create_experiment(name, artifact_location=_artifact_root(uri)))
        tags = verdict_tags(entry)
        summary = (report.get("verdict") or {}).get("summary")
        if summary:
            tags["mlflow.note.content"] = summary  # the run's description in MLflow's UI
        run = client.create_run(experiment_id, run_name=run_name(report, entry), tags=tags)
        run_id = run.info.run_id
        try:
            now = int(time.time() * 1000)
            metrics = [Metric(key, value, now, 0) for key, value in report_metrics(report).items()]
            params = [Param(key, _param_value(value)) for key, value in report_params(report).items()]
            for start in range(0, len(metrics), METRICS_PER_BATCH):
                client.log_batch(run_id, metrics=metrics[start:start + METRICS_PER_BATCH])
            for start in range(0, len(params), PARAMS_PER_BATCH):
                client.log_batch(run_id, params=params[start:start + PARAMS_PER_BATCH])
            for path in files:
                if path.is_dir():
                    client.log_artifacts(run_id, str(path), artifact_path=path.name)
                else:
                    client.log_artifact(run_id, str(path))
            client.log_dict(run_id, entry, HISTORY_ARTIFACT)
            client.set_terminated(run_id)
        except BaseException:
            client.set_terminated(run_id, status="FAILED")
            raise
    return (f"memerobust: logged to MLflow run {run_id} ({uri}, experiment {name!r}): {len(metrics)} metrics, "
            f"{len(params)} params; artifacts {', '.join([*(f.name for f in files), HISTORY_ARTIFACT])}")


def mlflow_history(uri: str, experiment: str | None = None, warn=None) -> list[dict]:
    """The history entries of the experiment's runs (their `memerobust-history.json`), oldest first: what
    `memerobust history --mlflow URI` reads instead of a .jsonl file. Runs without one are not the plugin's; a run
    whose entry is damaged is skipped, as a history file's damaged line is (`warn` gets one message naming them).
    `experiment`: the one runs log to unless told (MLFLOW_EXPERIMENT_NAME, else pytest-memerobust)."""
    from ..report.history import parse_entry, skipped_message

    flag, experiment = f"--mlflow {uri}", experiment or experiment_name()
    if _scheme(uri) in ("http", "https"):
        check_server(uri, flag)
    client = _client(uri, flag)
    with _quiet():
        found = client.get_experiment_by_name(experiment)
        if found is None:
            raise TrackerError(f"{flag}: the store has no experiment {experiment!r} (a run logs there with "
                               f"--memerobust-mlflow={uri})")
        runs, token = [], None
        while True:
            page = client.search_runs([found.experiment_id], order_by=["attributes.start_time ASC"],
                                      max_results=1000, page_token=token)
            runs += list(page)
            token = page.token
            if not token:
                break
        entries, skipped = [], []
        with tempfile.TemporaryDirectory() as folder:
            for run in runs:
                if HISTORY_ARTIFACT not in {f.path for f in client.list_artifacts(run.info.run_id)}:
                    continue
                local = client.download_artifacts(run.info.run_id, HISTORY_ARTIFACT, folder)
                try:
                    entry, why = parse_entry(Path(local).read_text(encoding="utf-8"))
                except (OSError, UnicodeDecodeError) as exc:
                    entry, why = None, f"cannot be read ({exc})"
                if why is not None:
                    skipped.append(f"run {run.info.run_id}: {why}")
                else:
                    entries.append(entry)
    if skipped and warn is not None:
        warn(skipped_message(f"{uri}, experiment {experiment!r}", skipped, what="run"))
    return sorted(entries, key=lambda e: e["date"])
