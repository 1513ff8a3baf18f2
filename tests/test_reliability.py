"""Bad options, checkpoints and faults met by the plugin: one usage error naming the culprit before any case runs,
and report hooks that never crash nor leave a partial report in the report's place."""
import dataclasses
import json
import socket

import numpy as np
import pytest
import torch
from PIL import Image
from safetensors.torch import load_file, save_file

from pytest_memerobust.detectors import find_card, load_detector
from pytest_memerobust.detectors.cards import DOWNLOAD_ENV, available_cards
from pytest_memerobust.errors import BackendMissing, CheckpointError, ConfigError
from small_fits import small_fits_plugin

QUICK = ["--memerobust-limit=24", "--memerobust-bootstrap=50", "-p", "no:cacheprovider"]

# a plugin that interrupts a run (as Ctrl-C does) when its second test starts
INTERRUPTER = """
import pytest
calls = []

@pytest.hookimpl(tryfirst=True)
def pytest_runtest_call(item):
    calls.append(item)
    if len(calls) == 2:
        raise KeyboardInterrupt
"""


def _usage_error(result, culprit: str) -> None:
    """One usage error (exit 4) that names `culprit` once, before any case ran, with no traceback."""
    out, err = result.stdout.str(), result.stderr.str()
    assert result.ret == pytest.ExitCode.USAGE_ERROR, out[-2000:] + err[-2000:]
    assert err.count(culprit) == 1, err[-2000:]
    assert "Traceback" not in out + err and " passed" not in out and " failed" not in out


def _demo_weights(tmp_path, change) -> str:
    state = load_file(str(available_cards()["demo"].parent / "demo.safetensors"))
    key = sorted(k for k, v in state.items() if v.is_floating_point())[0]
    state[key] = change(state[key])
    path = tmp_path / "bad.safetensors"
    save_file(state, str(path))
    return key, str(path)


def test_a_checkpoint_with_nan_weights_is_refused_at_the_start_naming_it(pytester, tmp_path):
    key, path = _demo_weights(tmp_path, lambda t: t.clone().fill_(float("nan")))
    result = pytester.runpytest("--memerobust-model=demo", f"--memerobust-checkpoint={path}", "-k", "rainbow", *QUICK)
    _usage_error(result, f"tensor {key!r} holds")
    assert "bad.safetensors" in result.stderr.str() and "NaN" in result.stderr.str()


def test_integer_weights_are_refused_not_cast(tmp_path):
    key, path = _demo_weights(tmp_path, lambda t: t.round().to(torch.int64))
    with pytest.raises(CheckpointError, match=rf"tensor {key!r} is int64, the model expects float32"):
        load_detector("demo", path)


@pytest.mark.parametrize("value", ["big", 0, True])
def test_a_card_with_a_head_parameter_of_the_wrong_kind_is_one_named_error(value):
    card = find_card("memeblip2-tda").with_demo()
    network = dataclasses.replace(card.network, params={**card.network.params, "map_dim": value}, checkpoint=None)
    card = dataclasses.replace(card, network=network)
    with pytest.raises(ConfigError, match=r"\[params\] map_dim = .*expected a positive whole number"):
        load_detector(card)


def test_a_device_this_torch_does_not_have_is_one_usage_error(pytester):
    result = pytester.runpytest("--memerobust-model=demo", "--memerobust-device=cuda:99", *QUICK)
    _usage_error(result, "--memerobust-device=cuda:99")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks a machine without a GPU")
def test_cuda_on_a_machine_without_one_says_so(pytester):
    result = pytester.runpytest("--memerobust-model=demo", "--memerobust-device=cuda", *QUICK)
    _usage_error(result, "--memerobust-device=cuda:")


@pytest.mark.parametrize("make, culprit", [
    (lambda p: (p / "out.json").mkdir() or f"--memerobust-report={p / 'out.json'}", "is a folder"),
    (lambda p: f"--memerobust-report={p / 'nowhere' / 'out.json'}", "does not exist"),
    (lambda p: f"--memerobust-save-baseline={p / 'nowhere' / 'b.json'}", "does not exist"),
    (lambda p: (p / "cache").write_text("x") and f"--memerobust-cache-dir={p / 'cache'}", "is a file, not a folder"),
])
def test_output_paths_are_checked_before_the_run(pytester, tmp_path, make, culprit):
    result = pytester.runpytest("--memerobust-model=demo", make(tmp_path), *QUICK)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert culprit in result.stderr.str() and "Traceback" not in result.stderr.str()


def _csv_memes(folder, n: int, side: int) -> None:
    """`folder/memes.csv`: `n` memes of random `side` px pictures, labelled 0 and 1 in turn in its `label` column."""
    rows = ["id,image,text,label"]
    rng = np.random.default_rng(0)
    for i in range(n):
        Image.fromarray(rng.integers(0, 255, (side, side, 3), dtype=np.uint8)).save(folder / f"{i}.png")
        rows.append(f"m{i},{i}.png,caption number {i},{i % 2}")
    (folder / "memes.csv").write_text("\n".join(rows) + "\n")


def test_a_suites_own_task_reaches_the_report(pytester, tmp_path):
    """A suite scoring a csv's `label` while the card's task is `hate`: the cases and the report use the suite's."""
    _csv_memes(tmp_path, 24, 32)
    pytester.makefile(".toml", **{"memerobust-task": f"""
[suite]
name = "task"
task = "label"
dataset = "csv:{tmp_path / 'memes.csv'}"
[thresholds]
max_flip_rate = 1.0
[image]
contrast = [3]
"""})
    report = tmp_path / "r.json"
    result = pytester.runpytest("--memerobust-model=demo", f"--memerobust-report={report}", *QUICK, ".")
    result.assert_outcomes(passed=2)
    assert "memerobust tables" in result.stdout.str() and "Traceback" not in result.stdout.str()
    (group,) = json.loads(report.read_text())["groups"]
    assert group["task"] == "label" and group["results"][0]["task"] == "label"


def test_a_report_that_cannot_be_built_or_written_never_leaves_an_earlier_one(pytester, tmp_path, monkeypatch):
    """The build fails: each report holds the verdict and the cases' records instead; a file that cannot be written
    is removed, so an earlier run's "passed" report is never read as this run's."""
    from pytest_memerobust.report import write_report

    def broken(session):
        raise ZeroDivisionError("boom")

    def unwritable_markdown(path, report):
        if path.suffix == ".md":
            raise PermissionError("read-only")
        write_report(path, report)

    monkeypatch.setattr("pytest_memerobust.run.report.build_report", broken)
    monkeypatch.setattr("pytest_memerobust.report.write_report", unwritable_markdown)
    report, markdown = tmp_path / "r.json", tmp_path / "r.md"
    for stale in (report, markdown):
        stale.write_text('{"verdict": {"passed": true}}\n')
    result = pytester.runpytest("--memerobust-model=demo", "-k", "rainbow and typos-1", f"--memerobust-report={report}",
                                f"--memerobust-report={markdown}", *QUICK)
    result.assert_outcomes(passed=1)
    out = result.stdout.str()
    assert "INTERNALERROR" not in out and "Traceback" not in out
    assert "the tables could not be built (ZeroDivisionError: boom)" in out
    assert "the report could not be built (ZeroDivisionError: boom); the reports hold the verdict" in out
    written = json.loads(report.read_text())
    assert written["verdict"]["passed"] and written["groups"] == [] and "ZeroDivisionError" in written["partial"]
    assert [c["nodeid"] for c in written["cases"]] == ["rainbow-noise::demo::typos-1"]
    assert f"could not write {markdown} (PermissionError: read-only); no earlier report is left there" in out
    assert not markdown.exists()


def test_an_interrupted_run_says_so_and_replaces_the_old_report_with_that_alone(pytester, tmp_path):
    """Never PASSED: the verdict says how many cases ran of how many; the report's path holds that verdict, not an
    earlier run's report that a CI step would read as this run's, nor this run's partial numbers."""
    pytester.syspathinsert()  # a plugin, not a conftest: the built-in suites lie outside this folder
    pytester.makepyfile(interrupter=INTERRUPTER)
    report = tmp_path / "r.json"
    report.write_text('{"verdict": {"passed": true}}\n')
    result = pytester.runpytest("--memerobust-model=demo", "-p", "interrupter", "-k", "rainbow and typos",
                                f"--memerobust-report={report}", *QUICK, no_reraise_ctrlc=True)
    assert result.ret == pytest.ExitCode.INTERRUPTED
    out = result.stdout.str()
    verdict_lines = out.split("memerobust verdict")[1].splitlines()
    assert [line for line in verdict_lines if line.startswith(("PASSED", "FAILED", "INTERRUPTED"))] == [
        "INTERRUPTED: 1 of 8 cases ran; no verdict"]
    assert f"interrupted: {report} holds only the verdict INTERRUPTED (1 of 8 cases ran), no results" in out
    written = json.loads(report.read_text())
    assert written["verdict"]["passed"] is False and written["verdict"]["interrupted"] is True
    assert (written["verdict"]["cases_run"], written["verdict"]["cases_collected"]) == (1, 8)
    assert written["groups"] == [] and len(written["cases"]) == 1 and not list(tmp_path.glob("*.tmp*"))


def test_a_run_whose_every_case_errors_writes_a_failed_report_over_the_old_one(pytester, tmp_path):
    """Pictures that pass the checks at the start and are cut short before the cases read them (a share going away):
    every case raises. The report still says so (failed, each case's error named) in place of an earlier "passed"
    one, and no empty baseline is saved."""
    _csv_memes(tmp_path, 8, 64)
    pytester.syspathinsert()
    pytester.makepyfile(cutter=f"""
from pathlib import Path

def pytest_collection_finish(session):
    for picture in Path({str(tmp_path)!r}).glob("*.png"):
        picture.write_bytes(picture.read_bytes()[: picture.stat().st_size // 3])
""")
    report, baseline = tmp_path / "r.json", tmp_path / "b.json"
    report.write_text('{"verdict": {"passed": true}}\n')
    result = pytester.runpytest("--memerobust-model=demo", f"--memerobust-data=csv:{tmp_path / 'memes.csv'}",
                                "--memerobust-task=label", "-p", "cutter", "-k", "rainbow and (clean or typos-1)",
                                f"--memerobust-report={report}", f"--memerobust-save-baseline={baseline}", *QUICK)
    result.assert_outcomes(failed=2)
    out = result.stdout.str()
    assert f"baseline {baseline} not saved: no case was measured (its cases raised errors)" in out
    assert "2 raised an error instead of a measurement: DataError ×2" in out and not baseline.exists()
    written = json.loads(report.read_text())
    verdict = written["verdict"]
    assert verdict["passed"] is False and len(verdict["errors"]) == 2 and "DataError ×2" in verdict["summary"]
    assert [(c["error"], c["gated_by"]) for c in written["cases"]] == [("DataError", ["error"])] * 2
    assert all("unreadable image" in c["message"] for c in written["cases"])


def test_a_case_that_raises_is_named_in_its_record_beside_the_measured_ones(pytester, tmp_path):
    pytester.syspathinsert()
    pytester.makepyfile(breaker="""
import pytest

@pytest.hookimpl(tryfirst=True)
def pytest_runtest_call(item):
    if item.name == "typos-2":
        raise RuntimeError("the detector's server went away")
""")
    report = tmp_path / "r.json"
    result = pytester.runpytest("--memerobust-model=demo", "-p", "breaker", "-k", "rainbow and (typos-1 or typos-2)",
                                f"--memerobust-report={report}", *QUICK)
    result.assert_outcomes(passed=1, failed=1)
    written = json.loads(report.read_text())
    cases = {c["condition"]: c for c in written["cases"]}
    broken = cases["text=typos@2"]
    assert broken["error"] == "RuntimeError" and "server went away" in broken["message"]
    assert "error" not in cases["text=typos@1"] and cases["text=typos@1"]["verdict"] == "pass"
    assert [r["condition"] for g in written["groups"] for r in g["results"]] == ["text=typos@1"]
    assert "0 of 1 cases below their thresholds (0 for sure), 1 more raised an error (RuntimeError ×1)" in written[
        "verdict"]["summary"]


def test_saving_the_baseline_onto_the_one_gated_against_is_refused_before_any_case(pytester, tmp_path):
    """Else a regression would be reported, then saved as the reference, and the next gated run would pass."""
    baseline = tmp_path / "b.json"
    case = ["--memerobust-model=demo", "-k", "rainbow and typos-1", *QUICK]
    pytester.runpytest(*case, f"--memerobust-save-baseline={baseline}").assert_outcomes(passed=1)
    saved = baseline.read_bytes()
    (tmp_path / "sub").mkdir()
    result = pytester.runpytest(*case, f"--memerobust-baseline={baseline}",
                                f"--memerobust-save-baseline={tmp_path / 'sub' / '..' / 'b.json'}")
    _usage_error(result, "gates this run against: a run never overwrites its own baseline")
    assert baseline.read_bytes() == saved


def test_back_translation_without_its_models_asks_nobody(monkeypatch):
    """No MarianMT model here: refused at once, without a DNS lookup of the hub (HF_HUB_OFFLINE unset)."""
    from pytest_memerobust.perturb import translation

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("MEMEROBUST_MARIAN_DIR", raising=False)
    lookups = []
    real = socket.getaddrinfo
    monkeypatch.setattr(socket, "getaddrinfo", lambda *a, **k: lookups.append(a) or real(*a, **k))
    translation._translator.cache_clear()
    with pytest.raises(BackendMissing, match="MEMEROBUST_MARIAN_DIR"):
        translation._translator("opus-mt-en-de")
    assert lookups == []


def test_image_paths_outside_the_dataset_need_the_option(pytester, tmp_path):
    outside = tmp_path / "elsewhere.png"
    Image.fromarray(np.zeros((32, 32, 3), np.uint8)).save(outside)
    data = tmp_path / "d"
    data.mkdir()
    rows = ["id,image,text,label"] + [f"m{i},{outside},caption {i},{i % 2}" for i in range(4)]
    (data / "memes.csv").write_text("\n".join(rows) + "\n")
    args = ["--memerobust-model=demo", f"--memerobust-data=csv:{data / 'memes.csv'}", "--memerobust-task=label", "-k",
            "rainbow and clean", *QUICK]
    _usage_error(pytester.runpytest(*args), "leads outside the dataset folder")
    pytester.runpytest(*args, "--memerobust-allow-outside-paths").assert_outcomes(passed=1)


def test_reports_are_byte_identical_cold_warm_and_after_the_cache_is_damaged(pytester, tmp_path):
    """The same run three times: cold cache, warm cache, and with every cached feature file damaged (truncated or
    overwritten with garbage). A damaged entry is recomputed, never trusted, so the report is the same bytes."""
    cache = tmp_path / "cache"
    args = [*QUICK, "--memerobust-model=demo", "-p", "no:randomly", f"--memerobust-cache-dir={cache}",
            "-k", "rainbow and (typos or gaussian_noise or hotflip or clean)"]
    reports = []
    for run in ("cold", "warm", "damaged"):
        if run == "damaged":
            files = sorted(p for p in (cache / "features").rglob("*") if p.is_file())
            assert files
            for k, path in enumerate(files):
                data = path.read_bytes()
                path.write_bytes(data[: len(data) // 2] if k % 2 else b"\x00garbage" * 8)
        result = pytester.runpytest_subprocess(*args, f"--memerobust-report={tmp_path / run}.json")
        assert result.ret in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED), result.stdout.str()[-2000:]
        if run == "warm":
            result.stdout.fnmatch_lines(["*read [1-9]* from the feature cache*"])
        reports.append((tmp_path / f"{run}.json").read_bytes())
    assert reports[0] == reports[1] == reports[2]


NO_NETWORK_PLUGIN = '''
"""Loaded with -p: every connection and every name lookup of the run is written down, then refused."""
import os
import socket

LOG = os.environ["MEMEROBUST_NETWORK_LOG"]


def _attempt(what):
    with open(LOG, "a", encoding="utf-8") as log:
        log.write(f"{what}\\n")
    raise OSError(f"network refused by the test: {what}")


def _connect(self, address, *args, **kwargs):
    if self.family == getattr(socket, "AF_UNIX", None):
        return _real_connect(self, address, *args, **kwargs)
    return _attempt(f"connect {address!r}")


_real_connect = socket.socket.connect
socket.socket.connect = _connect
socket.socket.connect_ex = _connect
socket.getaddrinfo = lambda host, *args, **kwargs: _attempt(f"getaddrinfo {host!r}")
socket.gethostbyname = lambda host: _attempt(f"gethostbyname {host!r}")
socket.create_connection = lambda address, *args, **kwargs: _attempt(f"create_connection {address!r}")
open(LOG + ".armed", "w").close()  # the guard is in place for this run
'''


def test_the_main_job_neither_connects_nor_looks_up_a_name(pytester, tmp_path):
    """The README's whole main job (every case of every built-in suite on memeblip2-tda, on 8 memes, its universal
    attacks fitted on 8: about 25 s) with every socket connection and DNS lookup recorded and refused, in a fresh
    process: none is attempted. How many memes are evaluated and fitted on changes no connection (on 24 memes and
    64 fit memes, 40 s, the same cases skipped for the same reasons)."""
    pytester.makepyfile(nonet=NO_NETWORK_PLUGIN, small_fits=small_fits_plugin(8))
    log = tmp_path / "network.log"
    pytester._monkeypatch.setenv("MEMEROBUST_NETWORK_LOG", str(log))
    pytester._monkeypatch.delenv(DOWNLOAD_ENV, raising=False)
    result = pytester.runpytest_subprocess(
        "-p", "nonet", "-p", "small_fits", "--memerobust-limit=8", "--memerobust-bootstrap=50", "-p",
        "no:cacheprovider", "--memerobust-model=memeblip2-tda", "--memerobust-fuzz-examples=5",
        f"--memerobust-cache-dir={tmp_path / 'cache'}",
        "--memerobust-workers=1")  # one process, as in a pytest-xdist worker: the guard is in every process that works
    outcomes = result.parseoutcomes()
    assert outcomes.get("passed", 0) + outcomes.get("failed", 0) >= 150, result.stdout.str()[-3000:]
    assert "error" not in outcomes, result.stdout.str()[-3000:]
    assert (tmp_path / "network.log.armed").is_file()  # the guard was loaded in the run's process
    assert not log.exists(), log.read_text()
