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

QUICK = ["--memerobust-limit=24", "--memerobust-bootstrap=50", "-p", "no:cacheprovider"]


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
    card = dataclasses.replace(card, params={**card.params, "map_dim": value}, checkpoint=None)
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


def test_a_suites_own_task_reaches_the_report(pytester, tmp_path):
    """A suite scoring a csv's `label` while the card's task is `hate`: the cases and the report use the suite's."""
    rows = ["id,image,text,label"]
    rng = np.random.default_rng(0)
    for i in range(24):
        Image.fromarray(rng.integers(0, 255, (32, 32, 3), dtype=np.uint8)).save(tmp_path / f"{i}.png")
        rows.append(f"m{i},{i}.png,caption number {i},{i % 2}")
    (tmp_path / "memes.csv").write_text("\n".join(rows) + "\n")
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


def test_a_report_that_cannot_be_built_is_said_and_the_run_ends_normally(pytester, tmp_path, monkeypatch):
    def broken(session):
        raise ZeroDivisionError("boom")

    monkeypatch.setattr("pytest_memerobust.report.build_report", broken)
    report = tmp_path / "r.json"
    result = pytester.runpytest("--memerobust-model=demo", "-k", "rainbow and typos-1", f"--memerobust-report={report}",
                                *QUICK)
    result.assert_outcomes(passed=1)
    out = result.stdout.str()
    assert "INTERNALERROR" not in out and "Traceback" not in out
    assert "the tables could not be built (ZeroDivisionError: boom)" in out
    assert "the report could not be built (ZeroDivisionError: boom)" in out and not report.exists()


def test_an_interrupted_run_leaves_the_old_report_in_place(pytester, tmp_path):
    pytester.syspathinsert()  # a plugin, not a conftest: the built-in suites lie outside this folder
    pytester.makepyfile(interrupter="""
import pytest
calls = []

@pytest.hookimpl(tryfirst=True)
def pytest_runtest_call(item):
    calls.append(item)
    if len(calls) == 2:
        raise KeyboardInterrupt
""")
    report = tmp_path / "r.json"
    report.write_text("previous run\n")
    result = pytester.runpytest("--memerobust-model=demo", "-p", "interrupter", "-k", "rainbow and typos",
                                f"--memerobust-report={report}", *QUICK, no_reraise_ctrlc=True)
    assert result.ret == pytest.ExitCode.INTERRUPTED
    assert report.read_text() == "previous run\n" and not list(tmp_path.glob("*.tmp*"))
    assert f"interrupted: {report} not written" in result.stdout.str()


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
    """The README's whole main job (every case of every built-in suite on memeblip2-tda, on 24 memes: about 40 s)
    with every socket connection and DNS lookup recorded and refused, in a fresh process: none is attempted."""
    pytester.makepyfile(nonet=NO_NETWORK_PLUGIN)
    log = tmp_path / "network.log"
    pytester._monkeypatch.setenv("MEMEROBUST_NETWORK_LOG", str(log))
    pytester._monkeypatch.delenv(DOWNLOAD_ENV, raising=False)
    result = pytester.runpytest_subprocess(
        "-p", "nonet", *QUICK, "--memerobust-model=memeblip2-tda", "--memerobust-fuzz-examples=5",
        f"--memerobust-cache-dir={tmp_path / 'cache'}")
    outcomes = result.parseoutcomes()
    assert outcomes.get("passed", 0) + outcomes.get("failed", 0) >= 150, result.stdout.str()[-3000:]
    assert "error" not in outcomes, result.stdout.str()[-3000:]
    assert (tmp_path / "network.log.armed").is_file()  # the guard was loaded in the run's process
    assert not log.exists(), log.read_text()
