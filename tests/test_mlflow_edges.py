"""MLflow at the edges of a run: a new SQLite store created by two runs at once, an address where something other
than MLflow answers, and SQLAlchemy's deprecation warning, which printed itself as the first line of every run."""
import json
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from pytest_memerobust.track.common import TrackerError
from pytest_memerobust.track.trackers import check_trackers

pytest.importorskip("mlflow", reason="the [mlflow] extra (constraints-mlflow.txt) is not installed")

CREATOR = """
import sys, time
from pathlib import Path
from pytest_memerobust.track.mlflow_run import check_mlflow
folder = Path(sys.argv[1])
(folder / f"ready-{sys.argv[2]}").touch()
while not (folder / "go").exists():  # both processes start creating the stores at the same moment
    time.sleep(0.01)
check_mlflow(f"sqlite:///{(folder / 'store' / 'mlflow.db').as_posix()}", None)
print("created", flush=True)
"""


def test_two_runs_create_a_new_sqlite_store_at_once_and_print_no_warning(tmp_path):
    """One of two runs died on `OperationalError: duplicate column name` (or Alembic's migration error), and every
    run began with SQLAlchemy's `noload` deprecation warning."""
    runs = [subprocess.Popen([sys.executable, "-W", "default", "-c", CREATOR, str(tmp_path), str(k)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for k in range(2)]
    try:
        for _ in range(6000):  # at most a minute for both to import MLflow
            if all((tmp_path / f"ready-{k}").exists() for k in range(2)) or any(r.poll() is not None for r in runs):
                break
            threading.Event().wait(0.01)
        (tmp_path / "go").touch()
        done = [(r.wait(timeout=120), r.stdout.read(), r.stderr.read()) for r in runs]
    finally:
        for r in runs:
            if r.poll() is None:
                r.kill()
                r.wait()
    assert [code for code, _, _ in done] == [0, 0], done
    assert done == [(0, "created\n", "")] * 2  # not a word on stderr: no warning either


class _Server(ThreadingHTTPServer):
    daemon_threads = True


def _serve(status: int, body: bytes, content_type: str):
    """A 127.0.0.1 server answering every GET with `status` and `body`; the caller shuts it down."""
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = _Server(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.mark.parametrize("status, body, content_type", [
    (200, b"<html><body>Welcome to nginx!</body></html>", "text/html"),
    (200, b'{"status": "ok"}', "application/json"),  # some other service's JSON
    (404, b"Not Found", "text/plain"),
])
def test_an_address_where_something_else_answers_is_refused_before_the_run(status, body, content_type):
    """It passed the start check (any answer to /health did), and the run then logged nothing, exit 0."""
    server = _serve(status, body, content_type)
    uri = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        with pytest.raises(TrackerError) as caught:
            check_trackers(uri, None, None)
    finally:
        server.shutdown()
        server.server_close()
    assert str(caught.value) == (
        f"--memerobust-mlflow={uri}: {uri} answers, but not as an MLflow tracking server (GET "
        f"/api/2.0/mlflow/experiments/get-by-name gave HTTP {status} without MLflow's JSON); check the address (and "
        "its path, if the server sits behind a proxy)")


def test_a_tracking_server_that_answers_as_mlflow_passes_the_check():
    """MLflow's answer for an experiment not made yet: the run makes it when it logs."""
    body = json.dumps({"error_code": "RESOURCE_DOES_NOT_EXIST", "message": "Could not find experiment"}).encode()
    server = _serve(404, body, "application/json")
    try:
        check_trackers(f"http://127.0.0.1:{server.server_address[1]}", None, None)
    finally:
        server.shutdown()
        server.server_close()


def test_a_damaged_history_entry_in_mlflow_is_skipped_with_one_warning(tmp_path, monkeypatch, capsys):
    """A run's memerobust-history.json with a hand-edited value was a TypeError traceback of `memerobust history`."""
    from datetime import datetime, timezone

    from mlflow import MlflowClient

    from pytest_memerobust.cli import main
    from pytest_memerobust.report.history import history_entry
    from pytest_memerobust.track.common import EXPERIMENT, HISTORY_ARTIFACT
    from pytest_memerobust.track.mlflow_run import _quiet
    from verdict_sample import two_suite_report, with_verdict

    monkeypatch.delenv("MLFLOW_EXPERIMENT_NAME", raising=False)
    uri = f"sqlite:///{(tmp_path / 'mlflow.db').as_posix()}"
    report = with_verdict(two_suite_report())
    with _quiet():
        client = MlflowClient(tracking_uri=uri)
        experiment = client.create_experiment(EXPERIMENT, artifact_location=(tmp_path / "artifacts").as_uri())
        ids = []
        for k in range(3):
            entry = history_entry(report, commit=f"c{k}", date=datetime(2026, 11, 20 + k, tzinfo=timezone.utc))
            if k == 1:
                entry["families"][0]["relative_robustness"] = "0.9"
            run = client.create_run(experiment)
            client.log_dict(run.info.run_id, entry, HISTORY_ARTIFACT)
            client.set_terminated(run.info.run_id)
            ids.append(run.info.run_id)
    assert main(["history", "--mlflow", uri]) == 0
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1 and f"1 damaged run skipped (run {ids[1]}: family 1" in captured.err
    assert "the last 2 of 2 runs" in captured.out
