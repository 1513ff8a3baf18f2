"""Multi-label tasks end to end (FigMemes' six figurative-language labels): a sigmoid per label, binary
cross-entropy with re-weighted positives, the multi-label metrics in every result, and a clear error when a
detector's kind does not match the task's. Also tasks only some memes are labelled for (PrideMM's target)."""
import dataclasses

import numpy as np
import pytest

from pytest_memerobust.data.meme import Dataset, Meme
from pytest_memerobust.detectors import Scoring, find_card
from pytest_memerobust.detectors.demo import DemoDetector
from pytest_memerobust.errors import ConfigError
from pytest_memerobust.run.options import DataOptions, Options
from pytest_memerobust.run.session import RobustnessSession
from pytest_memerobust.run.training.loop import train_head

LABELS = ["allusion", "exaggeration", "irony", "anthropomorphism", "metaphor", "contrast"]
CUES = ["history", "gigantic", "obviously", "talking", "like", "versus"]  # one caption word hints at each label


def _figurative(n: int, seed: int) -> Dataset:
    rng = np.random.default_rng(seed)
    memes = []
    for i in range(n):
        flags = tuple(int(v) for v in rng.random(6) < 0.3)
        words = [CUES[k] for k in range(6) if flags[k]] + list(rng.choice(["meme", "people", "when", "the"], 3))
        memes.append(Meme(id=f"f{seed}-{i}", text=" ".join(rng.permutation(words)), labels={"figurative": flags},
                          image_array=rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)))
    return Dataset("figtoy", memes, {"figurative": LABELS}, multilabel=frozenset({"figurative"}))


def _detector(multilabel=True):
    import torch

    torch.manual_seed(0)  # the head's initial weights
    detector = DemoDetector(LABELS, text_dim=512, thumbnail_side=8, map_dim=32, dropout=0.0)
    detector.card = dataclasses.replace(find_card("demo"), name="figtoy", classes=tuple(LABELS), task="figurative",
                                        scoring=Scoring(multilabel=multilabel))
    detector.fingerprint = "untrained:figtoy"
    return detector


@pytest.fixture(scope="module")
def trained():
    detector = _detector()
    result = train_head(detector, _figurative(300, 0), _figurative(100, 1), task="figurative", epochs=30, lr=3e-3,
                        batch_size=32)
    return detector, result


def test_a_multi_label_head_learns_each_label_on_its_own(trained):
    detector, result = trained
    assert result.best_val_auroc > 0.9  # measured 0.935; chance is 0.5
    proba = detector.predict_proba([m.image for m in _figurative(20, 2).memes], [m.text for m in _figurative(20, 2).memes])
    assert proba.shape == (20, 6) and ((proba >= 0) & (proba <= 1)).all()
    assert not np.allclose(proba.sum(1), 1.0)  # independent sigmoids, not a softmax


def test_a_multi_label_run_reports_the_multi_label_metrics(trained):
    detector, _ = trained
    session = RobustnessSession(Options(data=DataOptions(task="figurative")))
    session.loaded.detectors["figtoy"] = detector
    session.loaded.datasets["figtoy-test"] = _figurative(120, 3)
    result = session.evaluate("figtoy", "text=typos@5", data="figtoy-test")
    clean = session.outcomes.results[("figtoy", "figtoy-test", "clean")]
    assert clean.memes.y_true.shape == (120, 6)
    assert clean.values["auroc"] > 0.8 and 0 < clean.values["accuracy"] < 1  # exact match is strict
    assert result.values["macro_f1"] < clean.values["macro_f1"]  # typos break the cue words
    assert 0 < result.flip_rate <= 1
    low, high = result.ci("macro_f1")
    assert low <= result.relative_robustness("macro_f1") <= high


def test_a_single_label_detector_is_refused_on_a_multi_label_task():
    session = RobustnessSession(Options(data=DataOptions(task="figurative")))
    session.loaded.detectors["plain"] = _detector(multilabel=False)
    session.loaded.datasets["figtoy-test"] = _figurative(10, 4)
    with pytest.raises(ConfigError, match="task 'figurative' of 'figtoy-test' is multi-label but model 'plain' is "
                                          "single-label"):
        session.evaluate("plain", "clean", data="figtoy-test")


def test_a_task_only_some_memes_have_is_scored_on_those_memes():
    rng = np.random.default_rng(0)
    memes = [Meme(id=f"m{i}", text=f"caption {i}", labels={"hate": i % 2, **({"target": i % 3} if i % 4 else {})},
                  image_array=rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)) for i in range(40)]
    data = Dataset("partial", memes, {"hate": ["no", "yes"], "target": ["a", "b", "c"]})
    assert len(data.labelled("target")) == 30 and data.labelled("hate") is data
    detector = DemoDetector(["a", "b", "c"], text_dim=64, thumbnail_side=4, map_dim=8)
    detector.card = dataclasses.replace(find_card("demo"), name="t3", classes=("a", "b", "c"), task="target")
    detector.fingerprint = "untrained:t3"
    session = RobustnessSession(Options())
    session.loaded.detectors["t3"] = detector
    session.loaded.datasets["partial"] = data
    result = session.evaluate("t3", "text=typos@2", data="partial")
    assert len(result.memes.y_true) == 30
    assert [m.id for m in session.engine("t3", "partial").dataset.memes] == [m.id for m in data.labelled("target").memes]


def test_a_multi_label_run_writes_its_report_with_its_worst_examples(trained, tmp_path, monkeypatch):
    from pytest_memerobust.judge.metrics import true_probability
    from pytest_memerobust.report import write_report

    detector, _ = trained
    monkeypatch.setattr(detector, "checkpoint", None, raising=False)  # as a loaded card without weights has
    session = RobustnessSession(Options(data=DataOptions(task="figurative")))
    session.loaded.detectors["figtoy"] = detector
    session.loaded.datasets["figtoy-test"] = _figurative(60, 5)
    session.evaluate("figtoy", "text=typos@5", data="figtoy-test")
    report = session.report()
    worst = report["groups"][0]["worst_examples"]
    assert worst and all(w["p_true_perturbed"] < w["p_true_clean"] for w in worst)
    assert all(set(w["label"].split(", ")) <= {*LABELS, "none"} for w in worst)
    write_report(tmp_path / "r.html", report)
    assert "figtoy" in (tmp_path / "r.html").read_text()
    y = np.array([[1, 0], [0, 0]])
    assert np.allclose(true_probability(np.array([[0.9, 0.2], [0.4, 0.1]]), y), [0.85, 0.75])
    assert np.allclose(true_probability(np.array([[0.3, 0.7], [0.6, 0.4]]), np.array([1, 0])), [0.7, 0.6])
