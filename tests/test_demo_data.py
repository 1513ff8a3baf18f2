"""The generated demo memes: deterministic in the seed, split as declared, labelled by the documented rule (up to
the label-noise share), and reachable through `load_dataset`; plus Dataset.fingerprint and Dataset.head."""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import replace

import numpy as np
import pytest

from pytest_memerobust.data import Dataset, demo_dataset, load_dataset
from pytest_memerobust.data import demo
from pytest_memerobust.data.demo import CLASSES, IMAGE_SIZE, LABEL_NOISE, SPLITS, generate
from pytest_memerobust.errors import DataError

CROSS = (170, 20, 20)
HEART = (255, 105, 180)


@pytest.fixture(scope="module")
def memes():
    return generate(0)


def _template_regex(template: str) -> re.Pattern:
    parts = re.split(r"(\{g\}|\{t\})", template)
    groups = "|".join(re.escape(g) for g in demo._GROUPS)
    things = "|".join(re.escape(t) for t in demo._THINGS)
    pattern = "".join(f"(?:{groups})" if p == "{g}" else f"(?:{things})" if p == "{t}" else re.escape(p)
                      for p in parts)
    return re.compile(f"^{pattern}$")


TEMPLATES = {kind: [_template_regex(t) for t in templates] for kind, templates in
             (("hostile", demo._HOSTILE), ("supportive", demo._SUPPORTIVE), ("neutral", demo._NEUTRAL))}


def _has_colour(image: np.ndarray, colour) -> bool:
    return bool(np.any(np.all(image == np.array(colour, dtype=np.uint8), axis=-1)))


# --- generate ---------------------------------------------------------------------------------------------------


def _drawn_again(seed: int):
    """generate(seed) with its caches bypassed: the random draws and the pictures made again."""
    demo._plan.cache_clear()
    return demo._memes.__wrapped__(seed, IMAGE_SIZE, None)


def test_generate_is_deterministic(memes):
    fresh = _drawn_again(0)
    assert fresh is not memes
    assert [m.id for m in fresh] == [m.id for m in memes]
    assert [m.text for m in fresh] == [m.text for m in memes]
    assert [dict(m.labels) for m in fresh] == [dict(m.labels) for m in memes]
    assert [dict(m.meta) for m in fresh] == [dict(m.meta) for m in memes]
    for a, b in zip(fresh, memes):
        assert a.image.tobytes() == b.image.tobytes()


def test_another_seed_draws_other_memes(memes):
    other = _drawn_again(1)
    assert [m.id for m in other] == [m.id for m in memes]  # ids are positional: demo-0000, demo-0001, ...
    texts_differ = sum(a.text != b.text for a, b in zip(memes, other))
    images_differ = sum(a.image.tobytes() != b.image.tobytes() for a, b in zip(memes, other))
    labels_differ = sum(a.labels["hate"] != b.labels["hate"] for a, b in zip(memes, other))
    assert texts_differ > 0.8 * len(memes)
    assert images_differ > 0.8 * len(memes)
    assert labels_differ > 0.2 * len(memes)


def test_generate_is_cached(memes):
    assert generate(0) is memes


def test_a_split_drawn_alone_is_the_bytes_of_that_split_drawn_with_the_others(memes):
    """A run that reads one split draws only its pictures (demo._plan): the same memes as when every split is drawn."""
    for split in SPLITS:
        demo._memes.cache_clear()
        alone = demo_dataset(split).memes
        within = [m for m in memes if m.meta["split"] == split]
        assert [m.id for m in alone] == [m.id for m in within] and len(alone) == SPLITS[split]
        assert [(m.text, dict(m.labels), dict(m.meta)) for m in alone] == [
            (m.text, dict(m.labels), dict(m.meta)) for m in within]
        assert all(a.image.tobytes() == b.image.tobytes() for a, b in zip(alone, within))


def test_split_sizes_and_order(memes):
    assert len(memes) == sum(SPLITS.values()) == 800
    assert Counter(m.meta["split"] for m in memes) == SPLITS
    expected = [split for split, count in SPLITS.items() for _ in range(count)]
    assert [m.meta["split"] for m in memes] == expected
    assert [m.id for m in memes] == [f"demo-{i:04d}" for i in range(len(memes))]


def test_images_are_rgb_uint8_96x96(memes):
    for m in memes:
        assert m.image.dtype == np.uint8
        assert m.image.shape == (IMAGE_SIZE, IMAGE_SIZE, 3) == (96, 96, 3)
        assert m.image_path is None


def test_caption_kind_and_symbol_are_what_meta_says(memes):
    for m in memes:
        kind, symbol = m.meta["kind"], m.meta["symbol"]
        assert any(r.match(m.text) for r in TEMPLATES[kind]), (m.id, kind, m.text)
        # the drawn symbol's exact colour is in the picture, the other symbol's is not
        assert _has_colour(m.image, CROSS) == (symbol == "cross"), m.id
        assert _has_colour(m.image, HEART) == (symbol == "heart"), m.id


def rule_label(meme) -> int:
    """The construction rule of data/demo.py: hostile -> hateful, supportive -> benign, neutral -> the symbol."""
    kind = meme.meta["kind"]
    if kind == "neutral":
        return int(meme.meta["symbol"] == "cross")
    return int(kind == "hostile")


def test_labels_follow_the_construction_rule_up_to_label_noise(memes):
    labels = np.array([m.labels["hate"] for m in memes])
    assert set(labels.tolist()) == {0, 1}
    violations = np.array([m.labels["hate"] != rule_label(m) for m in memes])
    assert 0 < violations.mean() < 0.1
    assert violations.mean() == pytest.approx(LABEL_NOISE, abs=0.025)
    # per kind: hostile captions are hateful and supportive ones benign, except the noise
    for kind, label in (("hostile", 1), ("supportive", 0)):
        of_kind = [m for m in memes if m.meta["kind"] == kind]
        assert np.mean([m.labels["hate"] != label for m in of_kind]) < 0.1


def test_symbol_agrees_with_the_caption_about_three_times_in_four(memes):
    opinionated = [m for m in memes if m.meta["kind"] != "neutral"]
    agree = np.mean([(m.meta["symbol"] == "cross") == (m.meta["kind"] == "hostile") for m in opinionated])
    assert 0.65 < agree < 0.85


def test_all_three_kinds_and_both_classes_in_every_split(memes):
    for split in SPLITS:
        part = [m for m in memes if m.meta["split"] == split]
        assert {m.meta["kind"] for m in part} == {"hostile", "supportive", "neutral"}
        assert 0.3 < np.mean([m.labels["hate"] for m in part]) < 0.7


# --- load_dataset -----------------------------------------------------------------------------------------------


def test_load_dataset_demo_is_the_test_split(memes):
    data = load_dataset("demo")
    assert isinstance(data, Dataset)
    assert data.name == "demo:test"
    assert len(data) == SPLITS["test"]
    assert [m.id for m in data.memes] == [m.id for m in memes if m.meta["split"] == "test"]
    assert data.classes == {"hate": list(CLASSES)}
    assert data.labels("hate").tolist() == [m.labels["hate"] for m in memes[-SPLITS["test"]:]]


@pytest.mark.parametrize("split", ["train", "val", "test"])
def test_load_dataset_demo_split(memes, split):
    data = load_dataset(f"demo:{split}")
    assert data.name == f"demo:{split}"
    assert len(data) == SPLITS[split]
    assert [m.id for m in data.memes] == [m.id for m in memes if m.meta["split"] == split]
    assert [m.id for m in data.memes] == [m.id for m in demo_dataset(split).memes]


def test_val_and_test_are_disjoint():
    val, test = load_dataset("demo:val"), load_dataset("demo")
    assert not {m.id for m in val.memes} & {m.id for m in test.memes}


@pytest.mark.parametrize("spec", ["demo:holdout", "demo:dev"])
def test_unknown_demo_split(spec):
    with pytest.raises(DataError) as info:
        load_dataset(spec)
    split = spec.split(":")[1]
    assert repr(split) in str(info.value)
    for known in SPLITS:
        assert known in str(info.value)


def test_demo_dataset_unknown_split():
    with pytest.raises(DataError, match="no split 'bogus'"):
        demo_dataset("bogus")


def test_demo_dataset_all_splits(memes):
    data = demo_dataset(None)
    assert data.name == "demo" and len(data) == len(memes)


# --- Dataset.fingerprint and Dataset.head -----------------------------------------------------------------------


def small() -> Dataset:
    return load_dataset("demo:val").head(12)


def test_fingerprint_is_stable():
    a, b = small(), small()
    assert a.fingerprint() == a.fingerprint() == b.fingerprint()
    assert re.fullmatch(r"[0-9a-f]{64}", a.fingerprint())
    assert load_dataset("demo").fingerprint() == demo_dataset("test").fingerprint()


def _with(data: Dataset, i: int, **changes) -> Dataset:
    memes = list(data.memes)
    memes[i] = replace(memes[i], **changes)
    return Dataset(data.name, memes, data.classes, data.source)


def test_fingerprint_changes_with_one_caption():
    data = small()
    changed = _with(data, 5, text=data.memes[5].text + "!")
    assert changed.fingerprint() != data.fingerprint()
    assert _with(data, 5, text=data.memes[5].text).fingerprint() == data.fingerprint()


def test_fingerprint_changes_with_one_label_one_pixel_or_the_order():
    data = small()
    m = data.memes[3]
    assert _with(data, 3, labels={"hate": 1 - m.labels["hate"]}).fingerprint() != data.fingerprint()
    picture = m.image.copy()
    picture[0, 0, 0] ^= 1
    assert _with(data, 3, image_array=picture).fingerprint() != data.fingerprint()
    swapped = list(data.memes)
    swapped[0], swapped[1] = swapped[1], swapped[0]
    assert Dataset(data.name, swapped, data.classes).fingerprint() != data.fingerprint()


def test_fingerprint_ignores_name_and_meta():
    data = small()
    renamed = Dataset("other", list(data.memes), data.classes, "elsewhere")
    assert renamed.fingerprint() == data.fingerprint()
    assert _with(data, 2, meta={"split": "x"}).fingerprint() == data.fingerprint()


def test_head():
    data = load_dataset("demo")
    first = data.head(5)
    assert len(first) == 5
    assert [m.id for m in first.memes] == [m.id for m in data.memes[:5]]
    assert (first.name, first.classes, first.source) == (data.name, data.classes, data.source)
    assert first.labels("hate").tolist() == data.labels("hate")[:5].tolist()
    assert first.fingerprint() != data.fingerprint()
    assert first.fingerprint() == data.head(5).fingerprint()
    assert data.head(None) is data
    assert data.head(len(data)) is data
    assert data.head(10 ** 6) is data
    assert len(data.head(0)) == 0
