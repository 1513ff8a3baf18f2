"""Condition ids, and the engine's promise: each distinct side of a condition is perturbed and encoded once, outputs
depend only on (seed, condition), and a perturbation is only ever applied to its own modality."""
from __future__ import annotations

import zlib

import numpy as np
import pytest

from pytest_memerobust.data.meme import Dataset, Meme
from pytest_memerobust.detectors.base import is_split
from pytest_memerobust.engine import Condition, EncodingSettings, Engine
from pytest_memerobust.perturb import get
from pytest_memerobust.data.pictures import to_array

CAPTIONS = [
    "nobody wants those people near our children",
    "proud to stand with everyone today and always",
    "when the monday morning finally arrives again",
    "keep them away from normal people please",
    "sending hugs to all my friends this weekend",
    "my face when someone mentions tax season",
]


def make_dataset(n: int = 6, side: int = 8) -> Dataset:
    rng = np.random.default_rng(42)
    memes = [
        Meme(id=f"m{i}", text=CAPTIONS[i % len(CAPTIONS)], labels={"hate": i % 2},
             image_array=rng.integers(0, 256, size=(side, side, 3), dtype=np.uint8))
        for i in range(n)
    ]
    return Dataset("toy", memes, {"hate": ["non-hateful", "hateful"]})


def _text_features(texts) -> np.ndarray:
    return np.array([[zlib.crc32(t.encode()) / 2**32, len(t) / 100] for t in texts], dtype=np.float64)


def _as_array(picture) -> np.ndarray:
    """H x W x 3, whether the engine handed a picture tensor (the contract) or an array (takes_pictures="array")."""
    return picture if isinstance(picture, np.ndarray) else to_array(picture)


def _image_features(images) -> np.ndarray:
    return np.array([_as_array(img).astype(np.float64).reshape(-1, 3).mean(0) / 255 for img in images])


def _head(image_features, text_features) -> np.ndarray:
    score = 4 * (text_features[:, 0] - 0.5) + 2 * (image_features.mean(1) - 0.5) + text_features[:, 1]
    p1 = 1 / (1 + np.exp(-score))
    return np.stack([1 - p1, p1], axis=1)


class CountingSplit:
    """A split detector that records every call and the inputs it saw."""

    classes = ["non-hateful", "hateful"]

    def __init__(self):
        self.image_batches: list[list[np.ndarray]] = []
        self.text_batches: list[list[str]] = []
        self.head_calls = 0
        self.predict_calls = 0

    def encode_images(self, images):
        self.image_batches.append([_as_array(i) for i in images])
        return _image_features(images)

    def encode_texts(self, texts):
        self.text_batches.append(list(texts))
        return _text_features(texts)

    def head(self, image_features, text_features):
        self.head_calls += 1
        return _head(image_features, text_features)

    def predict_proba(self, images, texts):
        self.predict_calls += 1
        return _head(_image_features(images), _text_features(texts))


class CountingBlackBox:
    """A black-box detector written for numpy: it gets H x W x 3 arrays."""

    classes = ["non-hateful", "hateful"]
    takes_pictures = "array"

    def __init__(self):
        self.calls: list[tuple[list[np.ndarray], list[str]]] = []

    def predict_proba(self, images, texts):
        assert all(isinstance(i, np.ndarray) and i.shape[2] == 3 for i in images)
        self.calls.append(([np.array(i) for i in images], list(texts)))
        return _head(_image_features(images), _text_features(texts))


TEXT = Condition(text="typos", text_severity=2)
IMAGE = Condition(image="gaussian_noise", image_severity=2)
BOTH = Condition(text="typos", text_severity=2, image="gaussian_noise", image_severity=2)


# --- Condition ids ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("condition, id_, kind", [
    (Condition(), "clean", "clean"),
    (Condition(text="typos", text_severity=3), "text=typos@3", "text"),
    (Condition(image="gaussian_noise", image_severity=5), "image=gaussian_noise@5", "image"),
    (Condition(text="typos", text_severity=3, image="contrast", image_severity=2),
     "text=typos@3+image=contrast@2", "combined"),
    (Condition(text="ocr_swap"), "text=ocr_swap", "text"),
    (Condition(image="jpeg.v2-x"), "image=jpeg.v2-x", "image"),
    (Condition(text="ocr_swap", image="contrast", image_severity=1), "text=ocr_swap+image=contrast@1", "combined"),
    (Condition(text="typos", text_severity=0), "text=typos@0", "text"),
])
def test_condition_id_round_trip(condition, id_, kind):
    assert condition.id == id_
    assert condition.kind == kind
    assert Condition.parse(id_) == condition
    assert Condition.parse(condition.id).id == id_


def test_parse_accepts_image_first_and_spaces_around_sides():
    c = Condition.parse("image=contrast@2 + text=typos@3")
    assert c == Condition(text="typos", text_severity=3, image="contrast", image_severity=2)
    assert c.id == "text=typos@3+image=contrast@2"


def test_parsed_severity_is_an_int():
    c = Condition.parse("text=typos@4")
    assert c.text_severity == 4 and isinstance(c.text_severity, int)
    assert Condition.parse("text=typos").text_severity is None


@pytest.mark.parametrize("bad", [
    "", "Clean", "clean+text=typos@1", "text=typos@x", "text=typos@", "text=", "typos@3", "text:typos@3",
    "audio=beep@1", "text=typos@3+", "+image=contrast@1", "text=typos@3+text=char_swap@1",
    "image=contrast@1+image=brightness@2", "text=ty pos@3", "text=typos@3@4", "text=typos@-1",
])
def test_bad_condition_ids_raise_value_error(bad):
    with pytest.raises(ValueError, match="bad condition"):
        Condition.parse(bad)


# --- caching for a split detector -------------------------------------------------------------------------------


def test_split_detector_encodes_each_side_once():
    data, det = make_dataset(), CountingSplit()
    assert is_split(det)
    engine = Engine(det, data, seed=0,
                    asking=EncodingSettings(batch_size=6))  # one batch per side, none filled up (determinism.py)

    clean = engine.predict(Condition())
    assert engine.encoder_calls == {"image": 6, "text": 6}
    assert det.text_batches == [CAPTIONS]

    engine.predict(TEXT)  # new text side, clean image side reused
    assert engine.encoder_calls == {"image": 6, "text": 12}
    assert len(det.image_batches) == 1 and len(det.text_batches) == 2
    typo_texts = get("typos").apply(CAPTIONS, engine.ids, 2, 0)
    assert det.text_batches[1] == typo_texts
    assert typo_texts != CAPTIONS

    engine.predict(IMAGE)  # new image side, clean text side reused
    assert engine.encoder_calls == {"image": 12, "text": 12}
    assert len(det.image_batches) == 2 and len(det.text_batches) == 2

    head_calls = det.head_calls
    both = engine.predict(BOTH)  # both sides already encoded
    assert engine.encoder_calls == {"image": 12, "text": 12}
    assert len(det.image_batches) == 2 and len(det.text_batches) == 2
    assert det.head_calls == head_calls + 1
    assert det.predict_calls == 0

    # the combined prediction pairs the noisy pictures with the typo captions
    noisy = get("gaussian_noise").apply([m.image for m in data.memes], engine.ids, 2, 0)
    for got, want in zip(det.image_batches[1], noisy):
        np.testing.assert_array_equal(got, want)
    np.testing.assert_allclose(both, _head(_image_features(noisy), _text_features(typo_texts)))
    np.testing.assert_allclose(clean, _head(_image_features([m.image for m in data.memes]),
                                            _text_features(CAPTIONS)))
    assert clean.shape == (6, 2)

    # asking again changes nothing
    engine.predict(BOTH)
    engine.predict(Condition())
    assert engine.encoder_calls == {"image": 12, "text": 12}
    assert len(det.image_batches) == 2 and len(det.text_batches) == 2


def test_combined_first_then_singles():
    det = CountingSplit()
    engine = Engine(det, make_dataset(), seed=0)
    engine.predict(BOTH)
    assert engine.encoder_calls == {"image": 6, "text": 6}
    engine.predict(TEXT)  # needs the clean image side only
    assert engine.encoder_calls == {"image": 12, "text": 6}
    engine.predict(IMAGE)  # needs the clean text side only
    assert engine.encoder_calls == {"image": 12, "text": 12}


def test_batches_split_the_encoder_calls_but_not_the_counts():
    data, det = make_dataset(), CountingSplit()
    engine = Engine(det, data, seed=0, asking=EncodingSettings(batch_size=4))
    small = engine.predict(TEXT)
    assert [len(b) for b in det.image_batches] == [4, 4]  # every encode has one shape: the last is filled up
    assert [len(b) for b in det.text_batches] == [4, 4]
    assert det.head_calls == 2
    assert engine.encoder_calls == {"image": 6, "text": 6}
    whole = Engine(CountingSplit(), data, seed=0, asking=EncodingSettings(batch_size=64)).predict(TEXT)
    np.testing.assert_allclose(small, whole)


def test_black_box_detector_is_called_per_condition():
    data, det = make_dataset(), CountingBlackBox()
    assert not is_split(det)
    engine = Engine(det, data, seed=0)
    outputs = [engine.predict(c) for c in (Condition(), TEXT, IMAGE, BOTH)]
    assert len(det.calls) == 4
    assert engine.encoder_calls == {"image": 24, "text": 24}
    typo_texts = get("typos").apply(CAPTIONS, engine.ids, 2, 0)
    noisy = get("gaussian_noise").apply([m.image for m in data.memes], engine.ids, 2, 0)
    assert [texts for _, texts in det.calls] == [CAPTIONS, typo_texts, CAPTIONS, typo_texts]
    for got, want in zip(det.calls[3][0], noisy):
        np.testing.assert_array_equal(got, want)
    for got, want in zip(det.calls[1][0], [m.image for m in data.memes]):
        np.testing.assert_array_equal(got, want)
    np.testing.assert_allclose(outputs[3], _head(_image_features(noisy), _text_features(typo_texts)))
    engine.predict(BOTH)  # no prediction cache: called again
    assert len(det.calls) == 5
    assert engine.encoder_calls == {"image": 30, "text": 30}


# --- determinism ------------------------------------------------------------------------------------------------


def test_same_seed_same_predictions_across_engines():
    data = make_dataset()
    a, b = Engine(CountingSplit(), data, seed=7), Engine(CountingSplit(), data, seed=7)
    for condition in (TEXT, IMAGE, BOTH):
        np.testing.assert_array_equal(a.predict(condition), b.predict(condition))
    assert a.inputs("text", "typos", 2) == b.inputs("text", "typos", 2)


def test_other_seed_other_typos():
    data = make_dataset()
    a, b = Engine(CountingSplit(), data, seed=0), Engine(CountingSplit(), data, seed=1)
    assert a.inputs("text", "typos", 2) != b.inputs("text", "typos", 2)
    assert not np.array_equal(a.predict(TEXT), b.predict(TEXT))
    # the clean condition does not depend on the seed
    np.testing.assert_array_equal(a.predict(Condition()), b.predict(Condition()))


def test_black_box_and_split_agree():
    data = make_dataset()
    split, box = Engine(CountingSplit(), data, seed=3), Engine(CountingBlackBox(), data, seed=3)
    for condition in (Condition(), TEXT, IMAGE, BOTH):
        np.testing.assert_allclose(split.predict(condition), box.predict(condition))


# --- modality checks --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("condition", [
    Condition(image="typos", image_severity=2),
    Condition(text="gaussian_noise", text_severity=2),
    Condition(text="contrast", text_severity=1, image="gaussian_noise", image_severity=1),
])
@pytest.mark.parametrize("detector", [CountingSplit, CountingBlackBox])
def test_perturbation_given_the_wrong_modality_raises(condition, detector):
    engine = Engine(detector(), make_dataset(), seed=0)
    with pytest.raises(ValueError, match="perturbation"):
        engine.predict(condition)


def test_wrong_modality_through_inputs():
    engine = Engine(CountingSplit(), make_dataset(), seed=0)
    with pytest.raises(ValueError, match="'typos' is a text perturbation, not image"):
        engine.inputs("image", "typos", 1)


def test_pictures_reach_a_detector_as_tensors_on_its_device_unless_it_takes_arrays():
    import torch

    seen = {}

    class Recorder(CountingSplit):
        device = "cpu"

        def encode_images(self, images):
            seen.setdefault("kinds", set()).update(type(i).__name__ for i in images)
            assert all(i.dtype == torch.uint8 and i.shape[0] == 3 and i.device.type == "cpu" for i in images)
            return super().encode_images(images)

    data = make_dataset()
    Engine(Recorder(), data).predict(IMAGE)
    assert seen["kinds"] == {"Tensor"}
    # the same pictures, as arrays, for a detector that asks for them: identical predictions
    arrays = CountingBlackBox()
    np.testing.assert_allclose(Engine(arrays, data).predict(IMAGE), Engine(Recorder(), data).predict(IMAGE))


def test_background_perturbations_use_one_cpu_thread_and_leave_the_others_theirs():
    import threading

    import torch

    from pytest_memerobust.engine import sides

    before = torch.get_num_threads()
    background = sides._background()
    assert background.submit(torch.get_num_threads).result() == 1
    assert torch.get_num_threads() == before
    started_later = []
    thread = threading.Thread(target=lambda: started_later.append(torch.get_num_threads()))
    thread.start()
    thread.join()
    assert started_later == [before]
