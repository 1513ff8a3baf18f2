"""Behaviour of the built-in caption and image perturbations: determinism, severity scaling, exact values,
the input contract and the registry wiring."""
from __future__ import annotations

import io
import re

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

import pytest_memerobust.perturb as perturb
from pytest_memerobust.perturb import get, names
from pytest_memerobust.data.pictures import check_array
from pytest_memerobust.perturb.text import QWERTY_NEIGHBOURS, _check_caption

TEXT_NAMES = ["typos", "char_swap", "char_shuffle_middle", "char_keyboard", "char_insert", "char_delete"]
IMAGE_NAMES = ["gaussian_noise", "contrast", "jpeg_compression", "brightness"]
TYPO_SHARES = [0.1, 0.2, 0.3, 0.4, 0.5]
SEP = re.compile(r"(\s+)")

VOCAB = (
    "when you finally understand the meme but everyone already moved on to another format this is fine "
    "nobody expects cats dogs people friday monday coffee internet strangers really angry about nothing "
    "literally every single group chat tonight tomorrow yesterday politics football weather"
).split()


def _captions(n: int, seed: int = 0) -> list[str]:
    r = np.random.default_rng(seed)
    return [" ".join(r.choice(VOCAB, size=int(r.integers(10, 31)))) for _ in range(n)]


def _picture(h: int = 48, w: int = 64, seed: int = 0) -> np.ndarray:
    """A gradient with a block and some grain: structure for JPEG, room for noise and contrast to act on."""
    r = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w]
    x = np.stack([xx * 255 / w, yy * 255 / h, (xx + yy) * 127 / (h + w)], axis=-1)
    x[h // 5: h // 2, w // 4: w // 2] = [200, 30, 40]
    x += r.normal(0, 20, x.shape)
    return np.clip(x, 0, 255).astype(np.uint8)


def _mad(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a.astype(np.int64) - b.astype(np.int64)).mean())


def _words(text: str) -> list[str]:
    return SEP.split(text)[0::2]


def _seps(text: str) -> list[str]:
    return SEP.split(text)[1::2]


# --- registry wiring ----------------------------------------------------------------------------------------


def test_text_names_are_registered():
    assert set(TEXT_NAMES) <= set(names(modality="text"))
    assert set(IMAGE_NAMES) <= set(names(modality="image"))
    assert not set(TEXT_NAMES) & set(names(modality="image"))


@pytest.mark.parametrize("name", TEXT_NAMES + IMAGE_NAMES)
def test_registry_records(name):
    p = get(name)
    assert isinstance(p, perturb.Perturbation)
    assert p.parameters.severities == (1, 2, 3, 4, 5)
    assert p.traits.label_preserving and not p.needs_model
    assert p.code.doc and "\n" not in p.code.doc
    if name in TEXT_NAMES:
        assert (p.modality, p.family) == ("text", "typos")
        assert p.tags == {"text"}
    else:
        assert (p.modality, p.family) == ("image", name)
        assert {"image", "imagenet_c"} <= p.tags
    assert name in names(tag=p.modality)


@pytest.mark.parametrize("name", TEXT_NAMES + IMAGE_NAMES)
def test_unknown_severity_lists_the_valid_ones(name):
    p = get(name)
    x = "some caption here" if p.modality == "text" else _picture(8, 8)
    with pytest.raises(ValueError, match=re.escape("[1, 2, 3, 4, 5]")):
        p(x, 6, np.random.default_rng(0))
    with pytest.raises(ValueError, match="severity 6"):
        p.apply([x], ["m1"], 6, seed=0)


# --- determinism --------------------------------------------------------------------------------------------

RNG_NAMES = TEXT_NAMES + ["gaussian_noise"]


def _item(name):
    if get(name).modality == "text":
        return "this meme is honestly hilarious but also kind of mean to everybody involved"
    return _picture(16, 24)


def _same(a, b) -> bool:
    return a == b if isinstance(a, str) else np.array_equal(a, b)


@pytest.mark.parametrize("name", RNG_NAMES)
def test_apply_is_deterministic_per_seed_and_meme(name):
    p, x = get(name), _item(name)
    first = p.apply([x, x], ["m1", "m2"], 3, seed=7)
    again = p.apply([x], ["m1"], 3, seed=7)  # other batch composition, same meme
    assert _same(first[0], again[0])
    assert not _same(first[0], first[1])  # other meme id
    assert not _same(first[0], p.apply([x], ["m1"], 3, seed=8)[0])  # other seed
    assert not _same(first[0], x)


@pytest.mark.parametrize("name", RNG_NAMES)
def test_no_global_random_state(name):
    p, x = get(name), _item(name)
    np.random.seed(1)
    before = np.random.get_state()[1].copy()
    a = p(x, 3, np.random.default_rng(5))
    assert np.array_equal(np.random.get_state()[1], before)
    np.random.seed(2)
    b = p(x, 3, np.random.default_rng(5))
    assert _same(a, b)


def test_jpeg_compression_ignores_rng():
    x = _picture()
    a = get("jpeg_compression")(x, 2, np.random.default_rng(0))
    b = get("jpeg_compression")(x, 2, np.random.default_rng(1))
    assert np.array_equal(a, b)


# --- severity scaling ---------------------------------------------------------------------------------------


def test_typos_share_of_words_follows_the_table():
    captions = _captions(200)
    means = []
    for severity in range(1, 6):
        out = get("typos").apply(captions, [f"m{i}" for i in range(200)], severity, seed=0)
        shares = []
        for before, after in zip(captions, out):
            wb, wa = _words(before), _words(after)
            assert len(wa) == len(wb)
            shares.append(sum(a != b for a, b in zip(wa, wb)) / len(wb))
        means.append(float(np.mean(shares)))
    assert all(a < b for a, b in zip(means, means[1:])), means
    for got, want in zip(means, TYPO_SHARES):
        assert abs(got - want) <= 0.05, (means, TYPO_SHARES)


@pytest.mark.parametrize("name", ["gaussian_noise", "contrast", "brightness"])
def test_image_change_grows_with_severity(name):
    x = _picture()
    mads = [_mad(get(name)(x, s, np.random.default_rng(0)), x) for s in range(1, 6)]
    assert all(a < b for a, b in zip(mads, mads[1:])), mads
    assert mads[0] > 0


def test_jpeg_size_of_reencoded_output_shrinks_with_severity():
    x = _picture(64, 96)
    sizes = []
    for severity in range(1, 6):
        y = get("jpeg_compression")(x, severity, np.random.default_rng(0))
        buf = io.BytesIO()
        Image.fromarray(y).save(buf, format="JPEG", quality=95)
        sizes.append(len(buf.getvalue()))
    assert all(a > b for a, b in zip(sizes, sizes[1:])), sizes


# --- exact values -------------------------------------------------------------------------------------------


def test_qwerty_table_is_symmetric_and_complete():
    assert sorted(QWERTY_NEIGHBOURS) == list("abcdefghijklmnopqrstuvwxyz")
    for key, neighbours in QWERTY_NEIGHBOURS.items():
        assert key not in neighbours
        for n in neighbours:
            assert key in QWERTY_NEIGHBOURS[n], (key, n)


def _changed_pairs(name, captions, severity=5):
    out = get(name).apply(captions, [f"m{i}" for i in range(len(captions))], severity, seed=3)
    pairs = []
    for before, after in zip(captions, out):
        assert _seps(after) == _seps(before)
        pairs += [(a, b) for a, b in zip(_words(before), _words(after)) if a != b]
    assert pairs
    return pairs


def test_keyboard_substitutions_are_qwerty_neighbours():
    captions = [c.title() for c in _captions(50, seed=1)] + _captions(50, seed=2)
    for before, after in _changed_pairs("char_keyboard", captions):
        assert len(before) == len(after)
        diff = [i for i, (a, b) in enumerate(zip(before, after)) if a != b]
        assert len(diff) == 1
        old, new = before[diff[0]], after[diff[0]]
        assert new.lower() in QWERTY_NEIGHBOURS[old.lower()]
        assert old.isupper() == new.isupper()


def test_insertions_are_qwerty_neighbours_of_an_adjacent_letter():
    for before, after in _changed_pairs("char_insert", _captions(50)):
        assert len(after) == len(before) + 1
        # the inserted position is ambiguous when letters repeat ("ee"): accept any reading that fits
        assert any(
            after[:i] + after[i + 1:] == before
            and any(after[i] in QWERTY_NEIGHBOURS[before[k]] for k in (i - 1, i) if 0 <= k < len(before))
            for i in range(len(after))
        ), (before, after)


def test_middle_shuffle_keeps_ends_and_letters():
    for before, after in _changed_pairs("char_shuffle_middle", _captions(50)):
        assert len(before) >= 4
        assert (after[0], after[-1]) == (before[0], before[-1])
        assert sorted(after) == sorted(before)


def test_swap_exchanges_two_adjacent_inner_letters():
    for before, after in _changed_pairs("char_swap", _captions(50)):
        diff = [i for i, (a, b) in enumerate(zip(before, after)) if a != b]
        assert len(diff) == 2 and diff[1] == diff[0] + 1
        assert 0 < diff[0] and diff[1] < len(before) - 1
        assert (after[diff[0]], after[diff[1]]) == (before[diff[1]], before[diff[0]])


def test_deletion_drops_one_inner_letter_never_a_word():
    for before, after in _changed_pairs("char_delete", _captions(50) + ["to be or not to be is it"]):
        assert len(after) == len(before) - 1 >= 2
        assert (after[0], after[-1]) == (before[0], before[-1])
    # two-letter words have no inner letter: nothing to delete, so the caption comes back as is
    assert get("char_delete")("to be or no", 5, np.random.default_rng(0)) == "to be or no"


@pytest.mark.parametrize("name", TEXT_NAMES)
def test_whitespace_and_word_count_are_preserved(name):
    caption = "  Leading spaces,\ttabs\tand\nnew lines   between words — and trailing!  "
    for seed in range(20):
        out = get(name)(caption, 5, np.random.default_rng(seed))
        assert _seps(out) == _seps(caption)
        assert len(out.split()) == len(caption.split())
        assert all(w for w in _words(out)[1:-1])


def test_punctuation_around_words_is_kept():
    out = get("typos")("(hello), world!!! ... 1234 ?!", 5, np.random.default_rng(0))
    words = _words(out)
    assert words[0].startswith("(") and words[0].endswith("),")
    assert words[1].endswith("!!!")
    assert words[2:] == ["...", "1234", "?!"]


@pytest.mark.parametrize("name", TEXT_NAMES)
def test_no_eligible_word_leaves_the_caption_alone(name):
    caption = "a 42 ... !? I 2024"
    for seed in range(5):
        assert get(name)(caption, 5, np.random.default_rng(seed)) == caption


@pytest.mark.parametrize("caption", ["aaaa", "ll", "Xx", "oops"])
def test_typos_always_change_an_eligible_word(caption):
    # swapping or shuffling equal letters is a no-op: another operation must be used instead
    for seed in range(30):
        assert get("typos")(caption, 1, np.random.default_rng(seed)) != caption


def test_at_least_one_word_is_hit():
    caption = "one two three four five"  # 0.1 * 5 rounds to 0, but severity 1 must still do something
    out = get("typos")(caption, 1, np.random.default_rng(0))
    assert sum(a != b for a, b in zip(_words(out), _words(caption))) == 1


# --- the input contract -------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", IMAGE_NAMES)
def test_non_square_shape_and_dtype(name):
    x = _picture(37, 53)
    for severity in range(1, 6):
        y = get(name)(x, severity, np.random.default_rng(severity))
        assert y.shape == (37, 53, 3) and y.dtype == np.uint8
    assert np.array_equal(x, _picture(37, 53))  # input not modified in place
    view = _picture(60, 80)[5:42, 10:63]  # non-contiguous input
    assert get(name)(view, 2, np.random.default_rng(0)).shape == (37, 53, 3)


@pytest.mark.parametrize("name", TEXT_NAMES)
@pytest.mark.parametrize("bad", ["", "   ", "\n\t"])
def test_empty_caption_is_rejected(name, bad):
    with pytest.raises(ValueError, match="empty"):
        get(name)(bad, 1, np.random.default_rng(0))


def test_non_str_caption_is_rejected():
    with pytest.raises(ValueError, match="str"):
        _check_caption(b"bytes caption")
    with pytest.raises(ValueError, match="str"):
        get("typos")(None, 1, np.random.default_rng(0))


@pytest.mark.parametrize("name", IMAGE_NAMES)
@pytest.mark.parametrize(
    "bad, problem",
    [
        (np.zeros((8, 8, 3), dtype=np.float32), "uint8"),
        (np.zeros((8, 8), dtype=np.uint8), "HxWx3"),
        (np.zeros((8, 8, 4), dtype=np.uint8), "HxWx3"),
        (np.zeros((0, 8, 3), dtype=np.uint8), "empty"),
        ([[[0, 0, 0]]], "ndarray"),
        (torch.zeros((3, 8, 8), dtype=torch.float32), "uint8"),
        (torch.zeros((8, 8, 3), dtype=torch.uint8), "3xHxW"),
        (torch.zeros((3, 0, 8), dtype=torch.uint8), "empty"),
    ],
)
def test_bad_image_is_rejected(name, bad, problem):
    with pytest.raises(ValueError, match=problem):
        get(name)(bad, 1, np.random.default_rng(0))


def test_check_image_returns_its_input():
    x = _picture(3, 4)
    assert check_array(x) is x


# --- properties ---------------------------------------------------------------------------------------------

letters_and_spaces = st.text(alphabet=st.sampled_from("abcXYZ qwertyQWERTY  "), min_size=1, max_size=60).filter(
    lambda s: s.strip()
)


@settings(max_examples=150, deadline=None)
@given(caption=letters_and_spaces, severity=st.integers(1, 5), seed=st.integers(0, 2**32 - 1))
def test_typos_property_token_count_and_determinism(caption, severity, seed):
    p = get("typos")
    out = p.apply([caption], ["meme"], severity, seed)[0]
    assert out == p.apply([caption], ["meme"], severity, seed)[0]
    assert len(out.split()) == len(caption.split())
    assert _seps(out) == _seps(caption)
    # every word of two or more ASCII letters is eligible, so the caption changes exactly when one exists
    assert (out != caption) == any(len(w) >= 2 for w in caption.split())


@settings(max_examples=150, deadline=None)
@given(caption=st.text(min_size=1, max_size=40).filter(lambda s: s.strip()), name=st.sampled_from(TEXT_NAMES))
def test_any_unicode_caption_keeps_its_whitespace(caption, name):
    out = get(name)(caption, 5, np.random.default_rng(0))
    assert isinstance(out, str)
    assert _seps(out) == _seps(caption)
    assert out == get(name)(caption, 5, np.random.default_rng(0))


def _model_free():
    return [n for n in names() if not get(n).needs_model and "needs_backend" not in get(n).tags]


@pytest.mark.parametrize("name", _model_free())
def test_no_perturbation_touches_global_random_state(name):
    """Every model-free perturbation, text or image: the explicit rng is the only randomness."""
    p = get(name)
    x = ("the quick brown fox jumps over the lazy dog and everyone believes it" if p.modality == "text"
         else np.random.default_rng(0).integers(0, 256, (24, 32, 3), dtype=np.uint8))
    severities = p.parameters.severities
    severity = severities[len(severities) // 2] if severities else None
    extra = ("a caption to draw",) if p.traits.caption_source else ()
    np.random.seed(1)
    torch.manual_seed(1)
    before, torch_before = np.random.get_state()[1].copy(), torch.random.get_rng_state()
    a = p(x, severity, np.random.default_rng(3), *extra)
    assert np.array_equal(np.random.get_state()[1], before)
    assert torch.equal(torch.random.get_rng_state(), torch_before)
    np.random.seed(2)
    torch.manual_seed(2)
    assert np.array_equal(np.asarray(p(x, severity, np.random.default_rng(3), *extra)), np.asarray(a))
