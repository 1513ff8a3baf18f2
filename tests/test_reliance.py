"""Multimodal reliance: modality swaps say which channel a detector follows, confounder pairs are found in the
data, and the per-meme unimodal predictions sit next to the multimodal one."""
import re

import numpy as np
import pytest

from pytest_memerobust.data.meme import Dataset, Meme
from pytest_memerobust.engine import Engine
from pytest_memerobust.judge.reliance import confounder_pairs, confounder_scores, swap_partners, swap_reliance
from pytest_memerobust.run.analyses import evaluate_reliance, reliance

from test_engine import _image_features, _text_features


@pytest.mark.parametrize("n", [2, 3, 10, 101])
def test_swap_partners_are_a_seeded_derangement(n):
    partners = swap_partners(n, seed=3)
    assert sorted(partners.tolist()) == list(range(n))  # everyone is someone's partner once
    assert (partners != np.arange(n)).all()
    np.testing.assert_array_equal(partners, swap_partners(n, seed=3))
    with pytest.raises(ValueError, match="at least 2"):
        swap_partners(1)


def test_swap_reliance_counts_only_informative_swaps():
    clean = np.array([0, 1, 1, 0])
    # swaps: (picture of 0, caption of 1) -> 1 follows caption; (picture of 1, caption of 2) -> uninformative;
    # (picture of 2, caption of 3) -> 1 follows picture; (picture of 3, caption of 0) -> uninformative
    r = swap_reliance(clean, pred_swapped=np.array([1, 0, 1, 1]), text_from=np.array([1, 2, 3, 0]),
                      image_from=np.array([0, 1, 2, 3]))
    assert (r.n_swaps, r.n_informative) == (4, 2)
    assert (r.follows_text, r.follows_image, r.follows_neither) == (0.5, 0.5, 0.0)
    none = swap_reliance(np.array([1, 1]), np.array([0, 1]), np.array([1, 0]), np.array([0, 1]))
    assert none.n_informative == 0 and np.isnan(none.follows_text)


def test_confounder_pairs_share_one_channel_and_differ_in_label():
    texts = ["Love is love", "love is love ", "go home", "go home", "other"]
    images = ["a", "b", "c", "c", "c"]
    labels = np.array([0, 1, 1, 1, 0])
    pairs = confounder_pairs(texts, images, labels)
    assert pairs["same_text"].tolist() == [[0, 1]]  # 2 and 3 share their caption but also their label
    assert pairs["same_image"].tolist() == [[2, 4], [3, 4]]
    scores = confounder_scores(pairs["same_image"], labels, pred=np.array([0, 1, 1, 0, 0]))
    assert scores == {"pairs": 2, "told_apart": 0.5, "both_correct": 0.5}
    assert np.isnan(confounder_scores(np.zeros((0, 2), int), labels, labels)["told_apart"])


class OneChannel:
    """A split detector that decides from one channel only."""

    classes = ["non-hateful", "hateful"]

    def __init__(self, channel):
        self.channel = channel

    def encode_images(self, images):
        return _image_features(images)

    def encode_texts(self, texts):
        return _text_features(texts)

    def head(self, image_features, text_features):
        score = text_features[:, 0] - 0.5 if self.channel == "text" else image_features.mean(1) - 0.5
        p = 1 / (1 + np.exp(-50 * score))
        return np.stack([1 - p, p], axis=1)


def _data(n=40):
    rng = np.random.default_rng(1)
    memes = [Meme(id=f"m{i}", text=f"caption number {i} " + "x" * int(rng.integers(0, 9)), labels={"hate": i % 2},
                  image_array=rng.integers(0, 256, (6, 6, 3), dtype=np.uint8)) for i in range(n)]
    memes.append(Meme(id="confound", text=memes[0].text, labels={"hate": 1 - memes[0].labels["hate"]},
                      image_array=rng.integers(0, 256, (6, 6, 3), dtype=np.uint8)))
    return Dataset("toy", memes, {"hate": ["non-hateful", "hateful"]})


@pytest.mark.parametrize("channel, follows", [("text", "follows_text"), ("image", "follows_image")])
def test_a_one_channel_detector_follows_that_channel_in_every_swap(channel, follows):
    data = _data()
    report = evaluate_reliance(Engine(OneChannel(channel), data), data.labels("hate"), seed=0)
    swap = report["swap"]
    assert swap["n_informative"] > 10 and swap[follows] == 1.0
    assert report["confounders"]["same_text"]["pairs"] == 1
    if channel == "text":  # a caption-only detector cannot tell apart two memes with the same caption
        assert report["confounders"]["same_text"]["told_apart"] == 0.0
    assert report["per_meme"]["id"][-1] == "confound" and "text_only" not in report["per_meme"]


class BlackBox:
    """The same decision as OneChannel("image"), but only through predict_proba."""

    classes = OneChannel.classes

    def predict_proba(self, images, texts):
        return OneChannel("image").head(_image_features(images), _text_features(texts))


def test_black_box_and_split_detectors_give_the_same_reliance():
    data = _data()
    a = evaluate_reliance(Engine(OneChannel("image"), data), data.labels("hate"))
    b = evaluate_reliance(Engine(BlackBox(), data), data.labels("hate"))
    assert a["swap"] == b["swap"] and a["per_meme"] == b["per_meme"]
    assert a["confounders"]["same_text"] == b["confounders"]["same_text"]


def test_the_session_reports_reliance_with_unimodal_predictions_per_meme():
    from pytest_memerobust.run.report import build_report
    from pytest_memerobust.report.tables import render
    from pytest_memerobust.run.options import DataOptions, Options
    from pytest_memerobust.run.session import RobustnessSession

    session = RobustnessSession(Options(models=("memeblip2-tda",), data=DataOptions(limit=60)))
    found = reliance(session, "memeblip2-tda")
    per_meme = found["per_meme"]
    assert len(per_meme["multimodal"]) == len(per_meme["text_only"]) == len(per_meme["image_only"]) == 60
    assert per_meme["text_only"] != per_meme["image_only"]
    report = build_report(session)
    assert report["reliance"][0]["model"] == "memeblip2-tda" and report["reliance"][0]["swap"] == found["swap"]
    assert "modality reliance: which channel decides" in render(report)


def test_a_swap_on_caption_only_data_names_the_meme_without_a_picture():
    from pytest_memerobust.errors import DataError

    data = _data(6)
    memes = data.memes[:3] + [Meme(id="captions-only", text="no picture here", labels={"hate": 1})] + data.memes[3:]
    data = Dataset("toy", memes, data.classes)
    with pytest.raises(DataError, match="meme 'captions-only' has no picture"):
        evaluate_reliance(Engine(OneChannel("text"), data), data.labels("hate"))


def _suite_case():
    import importlib.util

    from pytest_memerobust.run.suite import builtin_suite_dir

    spec = importlib.util.spec_from_file_location("modality_suite", builtin_suite_dir() / "test_modality_reliance.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.test_both_channels_decide


class _Probe:
    """What the built-in suite reads of the `memerobust` fixture."""

    def __init__(self, modalities, pictures: bool):
        data = _data(4)
        if not pictures:
            data = Dataset("toy", [Meme(id=m.id, text=m.text, labels=m.labels) for m in data.memes], data.classes)
        self.model, self.data, self.dataset = "card", "csv:captions.csv", data
        self.detector = type("Detector", (), {"modalities": modalities})()
        self.session = type("Session", (), {"data_spec": staticmethod(lambda data: data)})()  # no swap is run


@pytest.mark.parametrize("modalities, pictures, reason", [
    (("text",), True, "card reads only its text: a modality swap needs a detector of both"),
    (("image", "text"), False, "csv:captions.csv has no pictures (caption-only data)")])
def test_the_modality_suite_skips_what_has_one_channel_and_says_which(modalities, pictures, reason):
    with pytest.raises(pytest.skip.Exception, match=re.escape(reason)):
        _suite_case()(_Probe(modalities, pictures))
