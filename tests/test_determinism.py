"""The same numbers on every machine (DESIGN.md 9, pytest_memerobust/determinism.py): a report does not depend on the
thread count, nor on how pytest-xdist splits the cases, for every kind of perturbation (typos, look-alike letters,
an image corruption, a universal adversarial perturbation, a universal trigger, HotFlip, a text x image pair).

The plugin runs in subprocesses on a detector with torch encoders (the demo detector's are numpy, which hides
exactly what is checked here); the reports must be equal once package versions and paths are left out."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from pytest_memerobust.determinism import RESULT_THREADS, fixed_threads
from pytest_memerobust.engine.features import FeatureStore
from report_compare import comparable

MODEL = "memeblip2-tda"
SUITE = """
[suite]
name = "determinism"
[thresholds]
min_relative_robustness = { accuracy = 0.0 }
max_flip_rate = 1.0
[text]
typos = [3]
homoglyphs = [3]
hotflip = [1]
universal_trigger = [1]
[image]
gaussian_noise = [3]
uap = [1]
[grid]
text = ["typos@3"]
image = ["uap@1"]
"""
KINDS = {"text=typos@3", "text=homoglyphs@3", "text=hotflip@1", "text=universal_trigger@1",
         "image=gaussian_noise@3", "image=uap@1", "text=typos@3+image=uap@1"}
RUN = [f"--memerobust-model={MODEL}", "--memerobust-limit=24", "--memerobust-bootstrap=100", "-k", "determinism",
       "-p", "no:cacheprovider", "-p", "no:randomly", "-q"]
@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    """The same selection run three ways: one intra-op thread, three, and three in each of two pytest-xdist workers
    (each with a fresh cache, so no run reads what another computed)."""
    root = tmp_path_factory.mktemp("determinism")
    (root / "memerobust-determinism.toml").write_text(SUITE)
    runs = {"one-thread": ("1", []), "three-threads": ("3", [])}
    try:
        import xdist  # noqa: F401

        runs["two-workers"] = ("3", ["-n", "2"])
    except ImportError:
        pass
    out = {}
    for name, (threads, extra) in runs.items():
        report = root / f"{name}.json"
        run = subprocess.run([sys.executable, "-m", "pytest", *RUN, *extra, f"--memerobust-report={report}",
                              f"--memerobust-cache-dir={root / name}"], cwd=root, capture_output=True, text=True,
                             env={**os.environ, "OMP_NUM_THREADS": threads}, timeout=600)
        assert report.is_file(), run.stdout[-3000:] + run.stderr[-3000:]
        out[name] = (run.returncode, json.loads(report.read_text()))
    return out


def test_every_kind_of_perturbation_is_in_the_runs(reports):
    _, report = reports["one-thread"]
    conditions = {r["condition"] for group in report["groups"] for r in group["results"]}
    assert conditions == KINDS


def test_the_thread_count_does_not_change_a_single_number(reports):
    (code_one, one), (code_three, three) = reports["one-thread"], reports["three-threads"]
    assert code_one == code_three
    assert comparable(one) == comparable(three)  # every probability digest, interval, thumbnail and verdict


def test_pytest_xdist_workers_report_what_one_process_reports(reports):
    if "two-workers" not in reports:
        pytest.skip("pytest-xdist is in the dev extra")
    (code_one, one), (code_split, split) = reports["three-threads"], reports["two-workers"]
    assert code_one == code_split
    assert comparable(one) == comparable(split)  # the cases in the same order too


# --- the mechanisms -------------------------------------------------------------------------------------------


def test_fixed_threads_holds_the_count_inside_and_gives_the_callers_back():
    before = torch.get_num_threads()
    torch.set_num_threads(3)
    try:
        with fixed_threads():
            assert torch.get_num_threads() == RESULT_THREADS
            with fixed_threads():  # nested: nothing to set
                assert torch.get_num_threads() == RESULT_THREADS
            assert torch.get_num_threads() == RESULT_THREADS
        assert torch.get_num_threads() == 3

        @fixed_threads()
        def fails():
            assert torch.get_num_threads() == RESULT_THREADS
            raise KeyError("boom")

        with pytest.raises(KeyError):
            fails()
        assert torch.get_num_threads() == 3
    finally:
        torch.set_num_threads(before)


class Rows:
    """An encoder that records the number of rows of each call; a caption's feature is its length."""

    def __init__(self):
        self.calls: list[int] = []

    def __call__(self, items):
        self.calls.append(len(items))
        return np.array([[len(x)] for x in items], np.float32)


def test_the_store_encodes_every_batch_with_the_same_number_of_rows():
    store, encode = FeatureStore("ns"), Rows()
    out = store.features("text", ["a", "bb", "ccc", "dddd", "eeeee"], encode, batch_size=4)
    assert encode.calls == [4, 4]  # the last batch filled up; its extra rows are dropped
    np.testing.assert_array_equal(out[:, 0], [1, 2, 3, 4, 5])
    store.features("text", ["a", "ffffff"], encode, batch_size=4)
    assert encode.calls == [4, 4, 4] and store.stats.encoded["text"] == 6


@pytest.fixture(scope="module")
def detector():
    from pytest_memerobust.detectors import load_detector

    return load_detector(MODEL)


def test_a_caption_gets_the_same_features_whatever_was_encoded_before(detector):
    """What a store has already encoded decides which captions share a batch; the features must not change with it
    (a pytest-xdist worker and a single run encode different sides first). Without the filled-up batch the long
    caption is encoded alone in one store and among others in the other; without the full-length padding "love is
    love" is padded to 5 tokens in one and to the long caption's 35 in the other: either changes its last bits."""
    long = ("they should all be sent back where they came from, every single one of them, and their friends and "
            "their families and everyone who ever stood with them at a parade")
    captions = ["love is love", "no", "pride month", "no way", long]
    fresh, warm = FeatureStore("fresh"), FeatureStore("warm")
    with fixed_threads():
        warm.features("text", ["no"], detector.encode_texts, batch_size=4)
        alone = fresh.features("text", captions, detector.encode_texts, batch_size=4)
        after = warm.features("text", captions, detector.encode_texts, batch_size=4)
    np.testing.assert_array_equal(alone, after)
