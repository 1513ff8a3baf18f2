"""The experiment trackers, against the real libraries offline: a run of the demo detector logged to a SQLite MLflow
store and to W&B in offline mode, read back through MLflow's client and W&B's own run file; a tracker that cannot
take the run is one usage error before any case; a tracker failing at the end loses nothing."""
from __future__ import annotations

import json
import math
import re
import socket
import struct
import sys
from pathlib import Path

import pytest
import torch  # noqa: F401  imported here once: pytester's in-process runs would otherwise re-import it

from pytest_memerobust import options
from pytest_memerobust.cli import main as cli_main
from pytest_memerobust.track import mlflow_run, names
from pytest_memerobust.track.common import TrackerError
from pytest_memerobust.track.trackers import check_trackers, log_run
from test_reliability import INTERRUPTER

mlflow = pytest.importorskip("mlflow")
wandb = pytest.importorskip("wandb")
# imported once here: pytester's in-process runs drop the modules they imported, and a SQLite store opened after one
# would mix two copies of SQLAlchemy ("'InternalTraversal' object is not callable")
import mlflow.store.db.utils  # noqa: E402,F401
import mlflow.store.tracking.sqlalchemy_store  # noqa: E402,F401

QUICK = ["--memerobust-model=demo", "--memerobust-limit=16", "--memerobust-bootstrap=50", "-p", "no:cacheprovider"]
SUITE = """
[suite]
name = "tracked"
[thresholds]
min_relative_robustness = { accuracy = 0.5 }
[text]
typos = [3]
[grid]
text = ["typos@3"]
image = ["contrast@2"]
"""
MLFLOW_KEY = re.compile(r"^[/\w.\- :]*$")  # MLflow's rule for metric and param names (mlflow.utils.validation)


@pytest.fixture
def offline_wandb(tmp_path, monkeypatch):
    """W&B offline, everything it writes (runs, staged artifacts, settings) under tmp_path."""
    for name, sub in (("WANDB_DIR", "wandb-dir"), ("WANDB_DATA_DIR", "wandb-data"), ("WANDB_CACHE_DIR", "wandb-cache"),
                      ("WANDB_CONFIG_DIR", "wandb-config")):
        (tmp_path / sub).mkdir()
        monkeypatch.setenv(name, str(tmp_path / sub))
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.delenv("MLFLOW_EXPERIMENT_NAME", raising=False)
    return tmp_path / "wandb-dir"


def wandb_records(run_dir: Path) -> list:
    """The records of an offline run's .wandb file, decoded with W&B's own protobuf schema. (wandb 0.31 writes no
    wandb-summary.json or config.yaml for an offline run and has no Python reader of the file any more; the file is
    LevelDB's log format: a 7-byte file header, then 32 KiB blocks of records, each with a 7-byte header of
    checksum, length and kind: full, or first/middle/last piece.)"""
    from wandb.proto import wandb_internal_pb2

    [path] = run_dir.glob("run-*.wandb")
    data, block, position, pieces, records = path.read_bytes(), 32768, 7, b"", []
    assert data[:4] == b":W&B"
    while position + 7 <= len(data):
        if block - position % block < 7:  # a block's tail too short for a header is padding
            position += block - position % block
            continue
        _, length, kind = struct.unpack("<IHB", data[position:position + 7])
        if kind == 0:
            break
        pieces += data[position + 7:position + 7 + length]
        position += 7 + length
        if kind in (1, 4):  # a full record, or the last piece of one
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pieces)
            records.append(record)
            pieces = b""
    return records


def _updates(items) -> dict:
    return {item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in items}


def _run_pytest(pytester, *args):
    pytester.makefile(".toml", **{"memerobust-tracked": SUITE})
    return pytester.runpytest(*QUICK, *args, ".")


def test_a_run_is_logged_to_mlflow_and_wandb_and_read_back(pytester, offline_wandb, tmp_path, capsys):
    uri = f"sqlite:///{(tmp_path / 'store' / 'm.db').as_posix()}"
    (tmp_path / "store").mkdir()
    result = _run_pytest(pytester, f"--memerobust-mlflow={uri}", "--memerobust-wandb=robustness-tests",
                         "--memerobust-report=r.json", "--memerobust-report=r.html",
                         "--memerobust-save-baseline=b.json")
    result.assert_outcomes(passed=3)
    out = result.stdout.str()
    report = json.loads((pytester.path / "r.json").read_text())
    expected = names.report_metrics(report)
    assert "memerobust: logged to MLflow run " in out and f"({uri}, experiment 'pytest-memerobust')" in out
    assert "artifacts r.json, r.html, memerobust-history.json" in out
    assert "memerobust: logged to W&B run " in out and "offline, `wandb sync " in out

    # MLflow, through its own client
    client = mlflow.MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("pytest-memerobust")
    assert experiment.artifact_location == (tmp_path / "store" / "mlartifacts").as_uri()  # beside the store
    [run] = client.search_runs([experiment.experiment_id])
    metrics = run.data.metrics
    assert metrics == expected
    typos = report["groups"][0]["results"][0]
    assert typos["condition"] == "text=typos@3"
    assert metrics["demo/demo:test/typos-3/accuracy"] == typos["metrics"]["accuracy"]
    assert metrics["demo/demo:test/typos-3/accuracy_ci_low"] == typos["metrics_ci"]["accuracy"][0]
    assert metrics["demo/demo:test/typos-3/accuracy_relative_robustness_ci_high"] == \
        typos["relative_robustness_ci"]["accuracy"][1]
    assert metrics["demo/demo:test/typos-3/flip_rate"] == typos["flip_rate"]
    assert metrics["demo/demo:test/typos-3/accuracy_drop"] == pytest.approx(
        typos["clean_metrics"]["accuracy"] - typos["metrics"]["accuracy"])
    combined = next(r for r in report["groups"][0]["results"] if r["condition"] == "text=typos@3+image=contrast@2")
    assert metrics["demo/demo:test/typos-3 x contrast-2/flip_rate_ci_high"] == combined["flip_rate_ci"][1]
    assert metrics["demo/demo:test/clean/auroc"] == report["groups"][0]["clean"]["metrics"]["auroc"]
    assert metrics["verdict/passed"] == 1.0 and metrics["verdict/cases"] == 3 and metrics["verdict/errors"] == 0
    assert not any(k.startswith("gate/") for k in metrics)  # not gated
    params = run.data.params
    assert params["seed"] == "0" and params["options/limit"] == "16" and params["options/n_resamples"] == "50"
    assert params["models/demo/checkpoint_sha256"] == report["models"]["demo"]["checkpoint_sha256"]
    assert params["models/demo/card/classes"] == '["non-hateful", "hateful"]'
    assert run.data.tags["memerobust.verdict"] == "PASSED" and run.info.run_name.startswith("demo 20")
    assert run.data.tags["mlflow.note.content"] == report["verdict"]["summary"]
    assert sorted(f.path for f in client.list_artifacts(run.info.run_id)) == [
        "memerobust-history.json", "r.html", "r.json"]
    logged = Path(client.download_artifacts(run.info.run_id, "r.json", str(tmp_path / "down")))
    assert logged.read_bytes() == (pytester.path / "r.json").read_bytes()

    # W&B, from the offline run's own file
    [run_dir] = (offline_wandb / "wandb").glob("offline-run-*")
    records = wandb_records(run_dir)
    [start] = [r.run for r in records if r.WhichOneof("record_type") == "run"]
    assert start.project == "robustness-tests" and start.display_name == run.info.run_name
    config = _updates(start.config.update)
    assert config["seed"] == 0 and config["options/limit"] == 16 and config["memerobust.verdict"] == "PASSED"
    summary = {}
    for r in records:
        if r.WhichOneof("record_type") == "summary":
            summary.update(_updates(r.summary.update))
    assert {k: summary[k] for k in expected} == expected
    artifacts = {r.artifact.name: r.artifact for r in records if r.WhichOneof("record_type") == "artifact"}
    assert sorted(c.path for c in artifacts["memerobust-reports"].manifest.contents) == [
        "memerobust-history.json", "r.html", "r.json"]
    [table] = run_dir.glob("files/media/table/conditions_*.table.json")
    rows = json.loads(table.read_text())
    assert rows["columns"] == ["model", "dataset", "condition", "metric", "value", "ci_low", "ci_high"]
    assert ["demo", "demo:test", "text=typos@3", "accuracy", typos["metrics"]["accuracy"],
            *typos["metrics_ci"]["accuracy"]] in rows["data"]

    # a gated run: the gate's comparison, and the history read back from MLflow oldest first
    gated = _run_pytest(pytester, f"--memerobust-mlflow={uri}", "--memerobust-baseline=b.json",
                        "--memerobust-report=g.json")
    gated.assert_outcomes(passed=3)
    report = json.loads((pytester.path / "g.json").read_text())
    [second] = [r for r in client.search_runs([experiment.experiment_id]) if r.info.run_id != run.info.run_id]
    comparison = next(c for case in report["cases"] for c in case["regressions"]
                      if c["condition"] == "text=typos@3" and c["rule"] == "acc")
    assert second.data.metrics["gate/regressed"] == 0 and second.data.metrics["gate/conditions"] == 3
    assert second.data.metrics["demo/demo:test/typos-3/gate_acc_difference"] == comparison["difference"]
    assert second.data.metrics["demo/demo:test/typos-3/gate_acc_difference_ci_low"] == comparison["ci"][0]
    assert second.data.metrics["demo/demo:test/typos-3/gate_acc_regressed"] == 0
    # the same checkpoint against its own baseline: nothing improved, said as 0 (not left out)
    assert second.data.metrics["gate/improved"] == 0
    assert second.data.metrics["demo/demo:test/typos-3/gate_acc_improved"] == 0
    assert second.data.tags["memerobust.improved"] == "0" and "memerobust.improved" in run.data.tags
    history = mlflow_run.mlflow_history(uri)
    assert [e["gated"] for e in history] == [False, True] and all(e["verdict"] == "PASSED" for e in history)
    assert history[1]["families"] and history[1]["models"]["demo"]["checkpoint_sha256"]
    # `memerobust history --mlflow URI` reads the same runs back: their trend, without a history file
    capsys.readouterr()
    assert cli_main(["history", "--mlflow", uri]) == 0
    shown = capsys.readouterr().out
    assert f"run history: MLflow {uri}: the last 2 of 2 runs" in shown and "regression" in shown
    assert "demo on demo: relative robustness (accuracy) of each family's worst case" in shown


def test_metric_names_follow_mlflows_rules_and_leave_out_what_is_not_finite():
    assert names.condition_key("clean") == "clean"
    assert names.condition_key("text=typos@3+image=uap@3") == "typos-3 x uap-3"
    assert names.condition_key("text=textattack:pwws@2") == "textattack:pwws-2"
    assert names.condition_key("image=blank") == "blank"
    assert names.condition_key("text=hotflip@1+defence=nfkc,confusables") == "hotflip-1 x defence-nfkc_confusables"
    assert names.condition_key("image=uap@3+from=memeclip") == "uap-3 x from-memeclip"
    assert names.key_part("..") == "_" and names.key_part("a/b?c") == "a_b_c"
    long = names.fit("m/" + "x" * 300)
    assert len(long) == names.MAX_KEY and long != names.fit("m/" + "x" * 301)
    nan = float("nan")
    result = {"model": "demo", "dataset": "pridemm:/data/PrideMM:test", "condition": "text=typos@3", "kind": "text",
              "metrics": {"accuracy": 0.5, "auroc": nan, "macro_f1": 0.4},
              "metrics_ci": {"accuracy": [0.25, 0.75], "auroc": [nan, nan], "macro_f1": [0.2, 0.6]},
              "clean_metrics": {"accuracy": 0.75, "auroc": 0.8, "macro_f1": 0.7}, "flip_rate": 0.25,
              "flip_rate_ci": [0.0, 0.5], "relative_robustness": {"accuracy": 2 / 3, "auroc": nan, "macro_f1": 4 / 7},
              "relative_robustness_ci": {"accuracy": [0.4, 1.0], "auroc": [nan, nan], "macro_f1": [0.3, 1.0]},
              "sampling": {"k": 5, "expected_accuracy": 0.55, "expected_accuracy_ci": [0.4, 0.7],
                           "consistency_rate": 0.3, "consistency_rate_ci": [0.1, 0.5], "declined_rate": 0.0,
                           "self_flip_rate": nan, "self_flip_rate_ci": [nan, nan]}}
    report = {"groups": [{"model": "demo", "label": "demo", "dataset": "pridemm:/data/PrideMM:test", "clean": None,
                          "results": [result]}], "datasets": {"pridemm:/data/PrideMM:test": {"name": "pridemm:test"}}}
    metrics = names.report_metrics(report)
    assert metrics["demo/pridemm:test/typos-3/accuracy_relative_robustness"] == 2 / 3  # the loader's name, no path
    assert metrics["demo/pridemm:test/typos-3/accuracy_drop"] == 0.25
    assert not any("auroc" in k and not k.endswith("auroc_clean") for k in metrics)  # NaN: left out
    assert "demo/pridemm:test/typos-3/auroc_clean" in metrics
    # a sampled detector's figures with their intervals; k is not a figure, NaN is left out
    assert metrics["demo/pridemm:test/typos-3/sampling_expected_accuracy_ci_high"] == 0.7
    assert metrics["demo/pridemm:test/typos-3/sampling_consistency_rate"] == 0.3
    assert metrics["demo/pridemm:test/typos-3/sampling_declined_rate"] == 0.0
    assert not any(k.endswith(("sampling_k", "self_flip_rate")) for k in metrics)
    assert all(MLFLOW_KEY.match(k) and len(k) <= names.MAX_KEY for k in metrics)
    assert all(math.isfinite(v) for v in metrics.values())
    assert mlflow_run.DEFAULT_STORE == options.DEFAULT  # the option given alone means the store in the cache dir


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_unreachable_tracking_server_is_one_usage_error_before_any_case(pytester, offline_wandb):
    port = _closed_port()
    result = _run_pytest(pytester, f"--memerobust-mlflow=http://127.0.0.1:{port}", "--memerobust-report=r.json")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert (f"ERROR: --memerobust-mlflow=http://127.0.0.1:{port}: the MLflow tracking server http://127.0.0.1:{port} "
            "does not answer (ConnectionRefusedError") in result.stderr.str()
    report = json.loads((pytester.path / "r.json").read_text())  # a refused run's stub (issue 50): the reason alone
    assert "passed" not in result.stdout.str() and report["verdict"]["passed"] is False and report["groups"] == []
    assert "does not answer" in report["verdict"]["refused"]


def test_a_missing_extra_names_the_install_command(pytester, offline_wandb, monkeypatch):
    monkeypatch.setitem(sys.modules, "mlflow", None)
    with pytest.raises(TrackerError, match=re.escape("--memerobust-mlflow: MLflow is not installed here")) as caught:
        check_trackers(options.DEFAULT, None, pytester.path)
    assert str(caught.value).endswith("pip install 'pytest-memerobust[mlflow]'")
    result = _run_pytest(pytester, "--memerobust-mlflow")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "pip install 'pytest-memerobust[mlflow]'" in result.stderr.str()
    monkeypatch.setitem(sys.modules, "wandb", None)
    with pytest.raises(TrackerError, match=re.escape("pip install 'pytest-memerobust[wandb]'")):
        check_trackers(None, "p", None)


def test_stores_mlflow_refuses_or_cannot_reach_are_refused_with_a_way_out(tmp_path, offline_wandb, monkeypatch):
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
    with pytest.raises(TrackerError, match="MLflow's file store is retired") as caught:
        check_trackers((tmp_path / "mlruns").as_uri(), None, None)
    assert f"--memerobust-mlflow=sqlite:///{(tmp_path / 'mlflow.db').as_posix()}" in str(caught.value)
    with pytest.raises(TrackerError, match="this run has none"):
        check_trackers(options.DEFAULT, None, None)
    (tmp_path / "a-file").write_text("")
    with pytest.raises(TrackerError, match="the SQLite store's folder .* cannot be made .*a-file is not a folder"):
        check_trackers(f"sqlite:///{(tmp_path / 'a-file' / 'm.db').as_posix()}", None, None)
    assert mlflow_run.tracking_uri(options.DEFAULT, tmp_path) == f"sqlite:///{(tmp_path / 'mlflow.db').as_posix()}"
    monkeypatch.setenv("WANDB_MODE", "online")
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))
    with pytest.raises(TrackerError, match="has no API key .* set WANDB_MODE=offline"):
        check_trackers(None, "p", None)
    with pytest.raises(TrackerError, match="W&B does not take this project name"):
        check_trackers(None, "a/b", None)


def test_a_tracker_failing_at_the_end_is_one_line_and_touches_nothing(tmp_path, offline_wandb):
    report = tmp_path / "r.json"
    report.write_text('{"verdict": null}\n')
    (tmp_path / "a-file").write_text("")  # where the store's folder should be (a disk gone, a store moved)
    lines = log_run({"verdict": None, "models": {}, "groups": []},
                    mlflow=f"sqlite:///{(tmp_path / 'a-file' / 'm.db').as_posix()}", wandb=None, cache_dir=None,
                    artifacts=[report])
    assert len(lines) == 1 and lines[0].startswith("memerobust: could not log to MLflow (TrackerError: ")
    assert lines[0].endswith("the run's own reports are unaffected")
    assert report.read_text() == '{"verdict": null}\n'


def test_an_interrupted_run_logs_nothing_to_the_trackers_and_says_so(pytester, offline_wandb, tmp_path):
    pytester.syspathinsert()
    pytester.makepyfile(interrupter=INTERRUPTER)
    uri = f"sqlite:///{(tmp_path / 'm.db').as_posix()}"
    pytester.makefile(".toml", **{"memerobust-tracked": SUITE})
    result = pytester.runpytest(*QUICK, "-p", "interrupter", f"--memerobust-mlflow={uri}", "--memerobust-wandb=p",
                                ".", no_reraise_ctrlc=True)
    assert result.ret == pytest.ExitCode.INTERRUPTED
    assert "memerobust: interrupted: nothing logged to MLflow or W&B (1 of 3 cases ran)" in result.stdout.str()
    assert mlflow.MlflowClient(tracking_uri=uri).get_experiment_by_name("pytest-memerobust") is None
    assert not (offline_wandb / "wandb").exists() or not list((offline_wandb / "wandb").glob("offline-run-*"))


def test_two_csv_files_log_to_one_experiment_under_names_of_their_own():
    """Issue 49: every csv file's figures were `<model>/csv/...`, so a second csv dataset overwrote the first's in
    one experiment. A generic file's name (its stem, sanitised) is part of the key; the key is read off the spec's
    text only, the same on every machine."""

    def report(spec, name):
        result = {"model": "m", "dataset": spec, "condition": "clean", "kind": "clean",
                  "metrics": {"accuracy": 0.5}, "metrics_ci": {}}
        return {"groups": [{"model": "m", "label": "m", "dataset": spec, "clean": result, "results": []}],
                "datasets": {spec: {"name": name}}}

    first = names.report_metrics(report("csv:/data/hateful dev?.csv:test", "csv:test"))
    second = names.report_metrics(report("csv:/elsewhere/pridemm.csv:test", "csv:test"))
    assert list(first) == ["m/csv-hateful dev_:test/clean/accuracy"]
    assert list(second) == ["m/csv-pridemm:test/clean/accuracy"]
    assert names.report_metrics(report("/data/x.jsonl", "jsonl")) == {"m/jsonl-x/clean/accuracy": 0.5}
    assert names.report_metrics(report(r"csv:C:\data\a.csv", "csv")) == {"m/csv-a/clean/accuracy": 0.5}
    assert list(names.report_metrics(report("pridemm:/data/PrideMM:test", "pridemm:test"))) == [
        "m/pridemm:test/clean/accuracy"]  # a named loader's name says which dataset: unchanged
    assert all(MLFLOW_KEY.match(k) for k in [*first, *second])
