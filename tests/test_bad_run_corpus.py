"""The bad-input corpus of a run (issue 19), past the datasets (tests/bad_inputs.py) and the suites and cards
(tests/test_bad_configs.py): broken checkpoints, damaged caches, bad options, unreadable reports and signals. Each kind
is one error of the exact class that names the culprit, raised before any case runs (or, for a cache, a damaged entry
recomputed and counted), and nothing half-written is left. The last test counts the whole corpus by category."""
from __future__ import annotations

import json
import os
import pickle
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from pytest_memerobust.cli import main as cli_main
from pytest_memerobust.detectors import load_detector
from pytest_memerobust.detectors.cards import available_cards
from pytest_memerobust.errors import CheckpointError
from pytest_memerobust.engine.features import FeatureStore

DEMO_WEIGHTS = available_cards()["demo"].parent / "demo.safetensors"


def snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    return {str(p): (p.lstat().st_size, p.lstat().st_mtime_ns) for p in sorted(folder.rglob("*"))}


# --- checkpoints ------------------------------------------------------------------------------------------------------


def _weights(folder: Path, change) -> Path:
    state = load_file(str(DEMO_WEIGHTS))
    change(state, sorted(k for k, v in state.items() if v.is_floating_point())[0])
    path = folder / "bad.safetensors"
    save_file(state, str(path))
    return path


class Evil:
    def __reduce__(self):  # unpickling would create a file: a refused pickle leaves none
        return (os.system, (f"touch {Path(os.environ['MEMEROBUST_TEST_MARKER'])}",))


def _written(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def _pickle(folder: Path) -> Path:
    (folder / "evil.pt").write_bytes(pickle.dumps(Evil()))
    return folder / "evil.pt"


# kind -> (make the checkpoint in a folder, substrings the message must hold besides the file's name)
BAD_CHECKPOINTS = {
    "nan_weights": (lambda d: _weights(d, lambda s, k: s.__setitem__(k, s[k].clone().fill_(float("nan")))),
                    ["NaN or infinite values", "classifier."]),
    "infinite_weights": (lambda d: _weights(d, lambda s, k: s.__setitem__(k, s[k].clone().fill_(float("inf")))),
                         ["NaN or infinite values"]),
    "integer_weights": (lambda d: _weights(d, lambda s, k: s.__setitem__(k, s[k].round().to(torch.int64))),
                        ["is int64, the model expects float32"]),
    "wrong_shape": (lambda d: _weights(d, lambda s, k: s.__setitem__(k, torch.zeros(3, 3))), ["wrong shape ['"]),
    "missing_tensor": (lambda d: _weights(d, lambda s, k: s.pop(k)), ["missing ['"]),
    "unexpected_tensor": (lambda d: _weights(d, lambda s, k: s.__setitem__("surplus.weight", torch.zeros(2))),
                          ["unexpected ['surplus.weight']"]),
    "truncated_file": (lambda d: _written(d / "t.safetensors", DEMO_WEIGHTS.read_bytes()[:1000]),
                       ["corrupt safetensors checkpoint"]),
    "empty_file": (lambda d: _written(d / "e.safetensors", b""), ["corrupt safetensors checkpoint"]),
    "pickle_with_code": (_pickle, ["cannot be loaded with weights_only=True"]),
    "another_models_weights": (lambda d: available_cards()["demo"].parent / "memeclip.demo.safetensors",
                               ["does not fit the demo detector"]),
    "text_file": (lambda d: _written(d / "w.txt", b"weights"), ["unsupported checkpoint format"]),
}


@pytest.mark.parametrize("kind", sorted(BAD_CHECKPOINTS))
def test_a_broken_checkpoint_is_one_checkpoint_error_naming_it(kind, tmp_path, monkeypatch):
    marker = tmp_path / "unpickled"
    monkeypatch.setenv("MEMEROBUST_TEST_MARKER", str(marker))
    make, culprits = BAD_CHECKPOINTS[kind]
    path = make(tmp_path)
    before = snapshot(tmp_path)
    with pytest.raises(CheckpointError) as err:
        load_detector("demo", path)
    message = str(err.value)
    assert type(err.value) is CheckpointError and str(path) in message and "\n" not in message[:300], message
    for culprit in culprits:
        assert culprit in message, message
    assert snapshot(tmp_path) == before and not marker.exists()


# --- caches -----------------------------------------------------------------------------------------------------------


class Encoder:
    def __init__(self):
        self.seen = []

    def __call__(self, items):
        self.seen.extend(items)
        return np.array([[len(x), 1.0] for x in items], np.float32)


def _rewrite(path: Path, change) -> None:
    with np.load(path) as archive:
        header, features = json.loads(bytes(archive["header"]).decode()), archive["features"].copy()
    header, features = change(header, features)
    np.savez(path, features=features, header=np.frombuffer(json.dumps(header).encode(), np.uint8))


def _object_array(path: Path) -> None:
    np.savez(path, features=np.array([Evil()], dtype=object), header=np.array([Evil()], dtype=object))


# kind -> damage done to a side's cache file (tests/test_features.py covers truncated, garbage, empty, foreign and
# tampered files; these are the others)
BAD_CACHE_FILES = {
    "pickled_objects": _object_array,
    "other_inputs_in_header": lambda p: _rewrite(p, lambda h, f: ({**h, "digests": h["digests"][::-1]}, f)),
    "header_not_json": lambda p: np.savez(p, features=np.zeros((3, 2), np.float32),
                                          header=np.frombuffer(b"{oops", np.uint8)),
    "fewer_rows_than_inputs": lambda p: _rewrite(p, lambda h, f: ({**h, "sha256": __import__("hashlib").sha256(
        np.ascontiguousarray(f[:2]).tobytes()).hexdigest()}, f[:2])),
    "older_format": lambda p: _rewrite(p, lambda h, f: ({**h, "format": 1}, f)),
    "a_folder_in_its_place": lambda p: p.unlink() or p.mkdir(),
}


@pytest.mark.parametrize("kind", sorted(BAD_CACHE_FILES))
def test_a_damaged_cache_file_is_recomputed_and_counted_never_trusted(kind, tmp_path, monkeypatch):
    monkeypatch.setenv("MEMEROBUST_TEST_MARKER", str(tmp_path / "unpickled"))
    captions = ["one", "three", "seven"]
    FeatureStore("ns", tmp_path).features("text", captions, Encoder(), batch_size=3)
    (path,) = (tmp_path / "features").rglob("*.npz")
    BAD_CACHE_FILES[kind](path)
    encode, store = Encoder(), FeatureStore("ns", tmp_path)
    out = store.features("text", captions, encode, batch_size=3)
    np.testing.assert_array_equal(out[:, 0], [3, 5, 5])
    assert encode.seen == captions and not (tmp_path / "unpickled").exists()
    if kind != "a_folder_in_its_place":  # a folder cannot be taken for a file: it is left, and the run goes on
        assert store.stats.rejected_files == 1 and path.is_file()
    assert not [p for p in tmp_path.rglob("*") if ".tmp" in p.name]


# --- options ----------------------------------------------------------------------------------------------------------

QUICK = ["--memerobust-limit=8", "--memerobust-bootstrap=20", "-p", "no:cacheprovider"]

# kind -> (arguments, the culprit stderr must name exactly once)
BAD_OPTIONS = {
    "limit_negative": (["--memerobust-limit=-3"], "'-3'"),
    "batch_size_zero": (["--memerobust-batch-size=0"], "'0'"),
    "seed_negative": (["--memerobust-seed=-1"], "'-1'"),
    "bootstrap_not_a_number": (["--memerobust-bootstrap=abc"], "'abc'"),
    "confidence_one": (["--memerobust-confidence=1"], "'1'"),
    "device_unknown": (["--memerobust-device=tpu"], "'tpu'"),
    "precision_unknown": (["--memerobust-precision=fp8"], "'fp8'"),
    "ocr_unknown": (["--memerobust-ocr=tesseract"], "'tesseract'"),
    "captions_unknown": (["--memerobust-captions=pixels"], "'pixels'"),
    "fail_on_unknown": (["--memerobust-fail-on=bogus"], "bogus"),
    "baseline_not_json": (["--memerobust-baseline=b.txt"], "'b.txt'"),
    "feature_memory_zero": (["--memerobust-feature-memory=0"], "'0'"),
    "model_unknown": (["--memerobust-model=nope"], "unknown model 'nope'"),
    "model_card_missing": (["--memerobust-model=missing.toml"], "missing.toml"),
    "checkpoint_for_another_model": (["--memerobust-model=demo", "--memerobust-checkpoint=dmeo=w.safetensors"],
                                     "'dmeo' is not a model of this run"),
    "baseline_missing": (["--memerobust-model=demo", "--memerobust-baseline=gone.json"], "gone.json: no such file"),
    "cuda_index_absent": (["--memerobust-model=demo", "--memerobust-device=cuda:99"],
                          "--memerobust-device=cuda:99"),
    "report_under_a_file": (["--memerobust-model=demo", "--memerobust-report=afile/r.json"], "does not exist"),
}


@pytest.mark.parametrize("kind", sorted(BAD_OPTIONS))
def test_a_bad_option_is_one_usage_error_naming_it_before_any_case(kind, pytester):
    args, culprit = BAD_OPTIONS[kind]
    (pytester.path / "afile").write_text("a file, not a folder")
    before = snapshot(pytester.path)
    result = pytester.runpytest(*args, *QUICK)
    err, out = result.stderr.str(), result.stdout.str()
    assert result.ret == pytest.ExitCode.USAGE_ERROR, out[-1500:] + err[-1500:]
    assert err.count(culprit) == 1 and "Traceback" not in out + err and " passed" not in out, err[-1500:]
    assert snapshot(pytester.path) == before


# --- reports ----------------------------------------------------------------------------------------------------------

REPORT = {"tool": "pytest-memerobust", "format": 1, "groups": []}

# kind -> (file content, what the one error line must say besides the file's name)
BAD_REPORTS = {
    "groups_not_a_list": (json.dumps({**REPORT, "groups": "x"}), "is not a pytest-memerobust report"),
    "group_without_fields": (json.dumps({**REPORT, "groups": [{"model": "m"}]}), "damaged pytest-memerobust report"),
    "binary_bytes": (bytes(range(256)) * 2, "cannot read report"),
    "future_format": (json.dumps({**REPORT, "format": 99}), "of format 99; this version reads format 1"),
    "another_tool": (json.dumps({"tool": "other", "format": 1}), "is not a pytest-memerobust report"),
    "nested_too_deeply": ("[" * 100000 + "]" * 100000, "nests its JSON too deeply"),
}


@pytest.mark.parametrize("kind", sorted(BAD_REPORTS))
def test_an_unreadable_report_is_one_error_line_naming_it(kind, tmp_path, monkeypatch, capsys):
    content, says = BAD_REPORTS[kind]
    path = tmp_path / "bad.json"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    monkeypatch.chdir(tmp_path)
    before = snapshot(tmp_path)
    assert cli_main(["report", "bad.json", "--md", "out.md"]) == 2
    captured = capsys.readouterr()
    lines = [line for line in (captured.out + captured.err).splitlines() if line.strip()]
    assert len(lines) == 1 and "bad.json" in lines[0] and says in lines[0], lines
    assert snapshot(tmp_path) == before  # no out.md


# --- signals ----------------------------------------------------------------------------------------------------------

SLOW_CASES = """
import time
from pathlib import Path

def pytest_runtest_call(item):
    Path("case-started").write_text(item.nodeid)
    time.sleep(1.0)
"""

# kind -> (signal, extra options)
SIGNALS = {
    "sigint": (signal.SIGINT, []),
    "sigterm": (signal.SIGTERM, []),
    "sigterm_saving_a_baseline": (signal.SIGTERM, ["--memerobust-save-baseline=b.json"]),
}


def _signals_as_in_a_terminal() -> None:
    """A test run started in the background (nohup, `cmd &`) ignores SIGINT, and so would the child: Python then
    keeps it ignored and Ctrl-C could not be tested."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.parametrize("kind", sorted(SIGNALS))
def test_a_signal_mid_run_replaces_the_old_report_with_its_interrupted_verdict_alone(kind, tmp_path):
    """No partial numbers and no baseline, but no earlier run's report left either: r.json says INTERRUPTED."""
    sent, extra = SIGNALS[kind]
    (tmp_path / "slowcases.py").write_text(SLOW_CASES)
    (tmp_path / "r.json").write_text('{"verdict": {"passed": true}}\n')
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    process = subprocess.Popen([sys.executable, "-m", "pytest", "--memerobust-model=demo", "-p", "slowcases",
                                "--memerobust-report=r.json", "-k", "rainbow and typos", *QUICK, *extra],
                               cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               preexec_fn=_signals_as_in_a_terminal)
    deadline = time.monotonic() + 120
    while not (tmp_path / "case-started").exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    process.send_signal(sent)
    out, _ = process.communicate(timeout=120)
    assert process.returncode == pytest.ExitCode.INTERRUPTED, out[-2000:]
    assert "memerobust: interrupted: r.json holds only the verdict INTERRUPTED" in out, out[-2000:]
    assert "Traceback" not in out and "\nINTERRUPTED: 0 of 8 cases ran; no verdict\n" in out, out[-2000:]
    verdict = json.loads((tmp_path / "r.json").read_text())["verdict"]
    assert verdict["interrupted"] is True and verdict["passed"] is False and not (tmp_path / "b.json").exists()
    assert not [p for p in tmp_path.rglob("*") if ".tmp" in p.name]


# --- the whole corpus ---------------------------------------------------------------------------------------------


def test_the_corpus_has_126_kinds_and_every_category():
    """The count only rises: 118 before issue 37 added unreadable and too-large pictures and over-long captions."""
    from bad_inputs import CASES, CATEGORIES
    from test_bad_configs import BAD_CARDS, BAD_SUITES

    counts = {category: 0 for category in ("images", "captions", "labels", "rows", "suites", "cards", "checkpoints",
                                           "caches", "options", "reports", "signals")}
    for kind in CASES:
        counts[CATEGORIES[kind]] += 1
    for category, table in (("suites", BAD_SUITES), ("cards", BAD_CARDS), ("checkpoints", BAD_CHECKPOINTS),
                            ("caches", BAD_CACHE_FILES), ("options", BAD_OPTIONS), ("reports", BAD_REPORTS),
                            ("signals", SIGNALS)):
        counts[category] += len(table)
    assert sum(counts.values()) >= 126 and min(counts.values()) >= 3, counts
