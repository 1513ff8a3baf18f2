"""Minimal evasion budgets: exact budgets on toy detectors whose flipping point is known by construction, nested and
keyed edits, one detector call per level, and the curve / area / median statistics with their bootstrap."""
from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest
import torch

from pytest_memerobust.judge import budgets as B
from pytest_memerobust.perturb import budget_edits as E

TEXT_FAMILIES = ["char_edits", "lookalikes", "word_substitutions", "covered_caption"]
LONG = "when you finally understand the meme but everyone already moved on to another format"
INF = math.inf


def hate_detector(captions, pictures):
    """P(harmful) 0.9 when the casefolded caption has 'hate' as a whole word."""
    return np.array([0.9 if re.search(r"\bhate\b", c.casefold()) else 0.1 for c in captions])


def blind_detector(captions, pictures):
    return np.full(len(captions), 0.9)


class Counting:
    """Wraps a detector and records the batch size of every call."""

    def __init__(self, detector):
        self.detector, self.calls = detector, []

    def __call__(self, captions, pictures):
        self.calls.append(len(captions))
        return self.detector(captions, pictures)


def budgets_of(family, captions, detector=hate_detector, labels=None, **kw):
    labels = [1] * len(captions) if labels is None else labels
    return E.minimal_budgets(detector, captions, None, labels, family, **kw).budgets.tolist()


# --- exact budgets --------------------------------------------------------------------------------------------


def test_char_edits_flip_exactly_when_every_hate_was_hit():
    # one slip per word in plan order: each 'hate' needs its own slip; "I" has no usable op and is skipped
    captions = ["hate", "hate hate", "hate hate hate", "I hate", "(hate), HATE!"]
    assert budgets_of("char_edits", captions) == [1, 2, 3, 1, 2]


def test_char_edits_wrap_to_second_slips_that_never_restore_the_word():
    edited = [E.char_edits("hatred", b, key=3) for b in range(0, 11)]
    assert edited[0] == "hatred"
    assert all(e != "hatred" for e in edited[1:])
    assert len(set(edited[1:])) > 5  # the budget keeps editing the one word past its first slip


def test_lookalikes_flip_at_the_number_of_letters_that_must_change():
    result = E.minimal_budgets(hate_detector, ["hate"], None, [1], "lookalikes")
    assert result.budgets.tolist() == [1]
    assert result.evasions[0] != "hate" and len(result.evasions[0]) == 4

    def ascii_a(captions, pictures):  # harmful while an ASCII 'a' is left
        return np.array([0.9 if "a" in c else 0.1 for c in captions])

    # "aaaa": all four sites are a's, so the flip comes with the fourth; 12 a's outlast the max of 10; digits and
    # punctuation have no look-alike, so "42 a!" has one site
    assert budgets_of("lookalikes", ["aaaa", "a" * 12, "42 a!"], ascii_a) == [4, INF, 1]


def test_word_substitutions_and_covered_caption_exact_budgets():
    assert budgets_of("word_substitutions", ["hate", "hate hate", "I hate", "HATE, hate"]) == [1, 2, 1, 2]
    assert E.word_substitutions("HATE", 1, key=0).isupper()
    # covered: max(1, round(b/10 * n)) words go; "hate hate" loses its second word at b = 8 (round(1.6) = 2)
    assert budgets_of("covered_caption", ["hate", "hate hate", " ".join(["hate"] * 10)]) == [1, 8, 10]
    assert E.covered_caption("hate love", 10, key=0) == ""


@pytest.mark.parametrize("name", TEXT_FAMILIES)
def test_a_detector_that_ignores_text_is_censored_at_the_max(name):
    predict = Counting(blind_detector)
    result = E.minimal_budgets(predict, ["hate", LONG, "x"], None, [1, 1, 1], name)
    assert np.isinf(result.budgets).all() and result.evasions == (None, None, None)
    levels = E.get_family(name).levels
    assert predict.calls == [3] + [3] * len(levels)  # clean, then once per level on every meme
    summary = B.budget_summary(result, n_resamples=50)
    assert summary["median"] == "inf" and summary["median_text"] == f"> {levels[-1]}"
    assert summary["n_censored"] == 3 and summary["curve"] == [0.0] * len(levels) and summary["area"] == 0.0


def test_misclassified_memes_are_left_out_and_counted():
    result = E.minimal_budgets(hate_detector, ["hate", "love", "hate", "fine"], None, [1, 1, 0, 0], "char_edits")
    assert result.searched.tolist() == [0, 3] and result.n_misclassified_clean == 2
    assert result.budgets.tolist() == [1, INF]


def test_predict_is_called_once_per_level_on_the_memes_still_standing():
    predict = Counting(hate_detector)
    captions = ["hate", "hate hate", "hate hate hate", "love"]
    E.minimal_budgets(predict, captions, None, [1, 1, 1, 0], "char_edits")
    # clean (4); level 1: all four, "hate" flips; level 2: three, "hate hate" flips; then two for levels 3..10
    assert predict.calls == [4, 4, 3, 2] + [1] * 7
    everyone = Counting(hate_detector)
    E.minimal_budgets(everyone, ["hate", "I hate"], None, [1, 1], "char_edits")
    assert everyone.calls == [2, 2]  # nothing left after the first level: no more calls


def test_pictures_travel_with_their_memes_for_text_families():
    pictures = torch.arange(4, dtype=torch.float32).reshape(4, 1, 1, 1).expand(4, 3, 2, 2)
    seen = []

    def detector(captions, pics):
        seen.append(pics[:, 0, 0, 0].tolist())
        return hate_detector(captions, pics)

    E.minimal_budgets(detector, ["hate", "love", "hate hate", "hate"], pictures, [1, 1, 1, 1], "char_edits")
    assert seen == [[0, 1, 2, 3], [0, 2, 3], [2]]  # "love" misclassified; "hate" x2 fall at 1, "hate hate" at 2


# --- nested, keyed, deterministic -----------------------------------------------------------------------------


def _words(text):
    return text.split(" ")


@pytest.mark.parametrize("name", ["char_edits", "word_substitutions"])
def test_word_edits_are_nested(name):
    edit = E.get_family(name).edit
    clean = _words(LONG)
    previous = set()
    for b in range(1, 11):
        words = _words(edit(LONG, b, 11))
        assert len(words) == len(clean)  # these edits never add or remove a word
        changed = {i for i, (w, c) in enumerate(zip(words, clean)) if w != c}
        assert previous <= changed and len(changed) == b
        previous = changed


def test_lookalikes_are_nested_letter_by_letter():
    previous = set()
    for b in range(0, 11):
        edited = E.lookalikes(LONG, b, key=5)
        assert len(edited) == len(LONG)
        changed = {i for i, (e, c) in enumerate(zip(edited, LONG)) if e != c}
        assert previous <= changed and len(changed) == b
        previous = changed


def test_covered_caption_is_nested():
    kept = [set(_words(E.covered_caption(LONG, b, key=2))) - {""} for b in range(0, 11)]
    assert all(later <= earlier for earlier, later in zip(kept, kept[1:]))
    assert [len(k) for k in kept] == [14, 13, 11, 10, 8, 7, 6, 4, 3, 1, 0]  # 14 distinct words, round(b/10 * 14)


@pytest.mark.parametrize("name", TEXT_FAMILIES)
def test_text_edits_are_deterministic_and_keyed(name):
    edit = E.get_family(name).edit
    assert edit(LONG, 3, 42) == edit(LONG, 3, 42)
    assert len({edit(LONG, 1, key) for key in range(8)}) > 1  # the key moves the edit
    first = E.minimal_budgets(hate_detector, ["hate " + LONG] * 3, None, [1] * 3, name, key=9)
    again = E.minimal_budgets(hate_detector, ["hate " + LONG] * 3, None, [1] * 3, name, key=9)
    assert first.budgets.tolist() == again.budgets.tolist() and first.evasions == again.evasions


def test_memes_get_their_own_keys():
    assert E.meme_key(0, 1) != E.meme_key(0, 2) != E.meme_key(1, 2)
    many = E.minimal_budgets(hate_detector, [LONG + " hate"] * 30, None, [1] * 30, "word_substitutions")
    assert len(set(many.budgets.tolist())) > 1  # same caption, different plans


def test_unknown_family_names_the_valid_ones():
    with pytest.raises(ValueError, match="unknown edit family 'typo'.*char_edits, covered_caption, image_linf"):
        E.get_family("typo")
    assert E.family_names("image") == ["image_linf"]


# --- image_linf -----------------------------------------------------------------------------------------------

REFERENCE = 0.5


def drift_detector(captions, pictures):
    """Harmful while the mean absolute distance from the grey reference is below the caption's tolerance (/255)."""
    drift = (pictures - REFERENCE).abs().mean(dim=(1, 2, 3)) * 255
    return np.where(drift.numpy() < np.array([float(c) for c in captions]) - 1e-3, 0.9, 0.1)


def test_image_linf_flips_at_the_first_level_past_the_tolerance():
    pictures = torch.full((4, 3, 8, 8), REFERENCE)
    predict = Counting(drift_detector)
    result = E.minimal_budgets(predict, ["3", "8", "10", "40"], pictures, [1] * 4, "image_linf")
    assert result.budgets.tolist() == [4, 8, 16, INF]
    assert result.evasions == (None,) * 4 and predict.calls == [4, 4, 4, 4, 3, 2, 1]
    as_list = E.minimal_budgets(drift_detector_list, ["3", "8"], list(pictures[:2]), [1, 1], "image_linf")
    assert as_list.budgets.tolist() == [4, 8]


def drift_detector_list(captions, pictures):
    return drift_detector(captions, torch.stack(pictures))


def test_image_linf_is_a_fixed_sign_pattern_times_epsilon():
    grey = torch.full((3, 16, 16), REFERENCE)
    deltas = [E.image_linf(grey, b, key=7) - grey for b in (1, 2, 4, 8, 16, 32)]
    sign = torch.sign(deltas[0])
    assert set(sign.unique().tolist()) == {-1.0, 1.0}
    for b, delta in zip((1, 2, 4, 8, 16, 32), deltas):
        assert torch.allclose(delta, sign * b / 255, atol=1e-6)  # nested: same direction, growing step
    assert torch.equal(E.image_linf(grey, 4, key=7), E.image_linf(grey, 4, key=7))
    assert not torch.equal(E.image_linf(grey, 4, key=7), E.image_linf(grey, 4, key=8))
    batch = E.image_linf(torch.stack([grey, grey]), 4, key=[7, 8])  # one key per picture, batch-independent
    assert torch.equal(batch[0], E.image_linf(grey, 4, key=7)) and torch.equal(batch[1], E.image_linf(grey, 4, 8))


def test_image_linf_clamps_and_keeps_dtype_and_device():
    black = torch.zeros(3, 4, 4)
    out = E.image_linf(black, 32, key=1)
    assert out.device == black.device and out.dtype == torch.float32
    assert torch.allclose(out, (out > 0) * (32 / 255)) and 0 < (out > 0).sum() < out.numel()  # -eps clamped to 0
    grey8 = torch.full((2, 3, 4, 4), 128, dtype=torch.uint8)
    out8 = E.image_linf(grey8, 16, key=[1, 2])
    assert out8.dtype == torch.uint8 and set(out8.unique().tolist()) == {112, 144}
    assert torch.equal(E.image_linf(torch.full((3, 4, 4), 250, dtype=torch.uint8), 32, 1).max(), torch.tensor(255))
    with pytest.raises(ValueError, match="pictures is None"):
        E.minimal_budgets(blind_detector, ["x"], None, [1], "image_linf")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_image_linf_stays_on_the_gpu_and_draws_what_the_cpu_draws():
    grey = torch.full((2, 3, 8, 8), REFERENCE)
    out = E.image_linf(grey.cuda(), 8, key=[3, 4])
    assert out.is_cuda and torch.equal(out.cpu(), E.image_linf(grey, 8, key=[3, 4]))


# --- statistics -----------------------------------------------------------------------------------------------

LEVELS = (1, 2, 3, 4)


def test_curve_area_and_median_on_hand_made_budgets():
    budgets = np.array([1, 2, INF, INF])
    assert B.evasion_curve(budgets, LEVELS).tolist() == [0.25, 0.5, 0.5, 0.5]
    assert B.curve_area([1, 1, 1, 1], LEVELS) == 1.0 and B.curve_area([0, 0, 0, 0], LEVELS) == 0.0
    assert B.curve_area([0.0, 0.5, 1.0], (1, 2, 4)) == pytest.approx(0.5)
    assert B.curve_area(B.evasion_curve(budgets, LEVELS), LEVELS) == pytest.approx((0.125 + 0.5 + 0.5 + 0.25) / 3)
    assert B.median_budget([3, 1, 2, 4]) == 2  # the lower median: a budget that occurred
    assert B.median_budget([1, 2, INF, INF]) == 2  # exactly half censored: half are evaded by 2
    assert B.median_budget([1, INF, INF]) == INF and math.isnan(B.median_budget([]))
    assert B.format_budget(INF, (1, 2, 4, 8, 16, 32)) == "> 32" and B.format_budget(2.0, LEVELS) == "2"
    with pytest.raises(ValueError, match="levels"):
        B.bootstrap_intervals([1.5], LEVELS)


def test_bootstrap_intervals_contain_the_estimates_and_repeat_with_the_seed():
    budgets = np.array([1, 1, 2, 2, 2, 3, 3, 4, INF, INF] * 3)
    ci = B.bootstrap_intervals(budgets, LEVELS, n_resamples=500, seed=4)
    assert ci == B.bootstrap_intervals(budgets, LEVELS, n_resamples=500, seed=4)
    assert ci != B.bootstrap_intervals(budgets, LEVELS, n_resamples=500, seed=5)
    low, high = ci["median_ci"]
    assert low <= B.median_budget(budgets) <= high and low in LEVELS and high in LEVELS
    for (lo, hi), point in zip(ci["curve_ci"], B.evasion_curve(budgets, LEVELS)):
        assert lo <= point <= hi and hi - lo > 0
    lo, hi = ci["area_ci"]
    assert lo <= B.curve_area(B.evasion_curve(budgets, LEVELS), LEVELS) <= hi
    # most memes censored: the upper end of the median's interval is past the max
    assert B.bootstrap_intervals([1, 2, INF, INF, INF], LEVELS, n_resamples=200)["median_ci"][1] == INF


def test_summary_is_json_and_worst_lists_the_cheapest_evasions():
    captions = ["hate hate hate", "hate", "love", "hate hate", "I hate"]
    result = E.minimal_budgets(hate_detector, captions, None, [1, 1, 1, 1, 1], "char_edits")
    summary = json.loads(json.dumps(B.budget_summary(result, n_resamples=100), allow_nan=False))
    assert summary["n"] == 4 and summary["n_misclassified_clean"] == 1 and summary["n_censored"] == 0
    assert summary["median"] == 1.0 and summary["curve"][:3] == [0.5, 0.75, 1.0]
    assert summary["median_ci"][0] == 1 and len(summary["curve_ci"]) == 10
    top = B.worst(result, k=3)
    assert [(w["index"], w["budget"]) for w in top] == [(1, 1.0), (4, 1.0), (3, 2.0)]
    assert all(not re.search(r"\bhate\b", w["evasion"]) for w in top)
    empty = B.budget_summary(E.minimal_budgets(hate_detector, ["love"], None, [1], "char_edits"))
    assert empty["n"] == 0 and empty["median"] is None and empty["median_ci"] == [None, None]


# --- a detector's budgets through the engine and the command line ------------------------------------------------


def test_memerobust_budgets_on_the_demo_detector_writes_every_family_with_worst_memes(tmp_path, capsys):
    import json

    from pytest_memerobust.cli import main
    from pytest_memerobust.data.demo import demo_dataset

    out = tmp_path / "budgets.json"
    assert main(["budgets", "demo", "--data", "demo", "--limit", "40", "--bootstrap", "50", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    report = json.loads(out.read_text())
    entries = {e["family"]: e for e in report["budgets"]}
    assert set(entries) == {"char_edits", "lookalikes", "word_substitutions", "covered_caption", "image_linf"}
    memes = {m.id: m for m in demo_dataset("test").memes}
    harmful = sum(m.labels["hate"] == 1 for m in list(memes.values())[:40])
    for e in entries.values():
        assert e["n"] + e["n_misclassified_clean"] == harmful and e["family"] in printed
        evaded = [b for b in e["curve"]]
        assert evaded == sorted(evaded) and 0 <= e["area"] <= 1
        for w in e["worst"]:  # each worst meme is a harmful demo meme, its budget a level, its caption edited
            assert memes[w["id"]].labels["hate"] == 1 and w["budget"] in e["levels"]
            assert memes[w["id"]].text == w["caption"]
            assert (w["evasion"] is None) == (e["family"] == "image_linf") and w["evasion"] != w["caption"]
    assert "median budget (CI)" in printed


def test_an_unknown_family_is_refused_before_anything_loads(capsys):
    from pytest_memerobust.cli import main

    assert main(["budgets", "demo", "--data", "demo", "--family", "typos"]) == 2
    err = capsys.readouterr().err
    assert "typos" in err and "char_edits" in err


def test_a_caption_only_detector_is_searched_on_caption_families_only():
    from pytest_memerobust.run.analyses import evaluate_budgets
    from pytest_memerobust.data.demo import demo_dataset
    from pytest_memerobust.engine import Engine

    data = demo_dataset("test").head(40)
    engine = Engine(_CaptionOnly(), data)
    entries = evaluate_budgets(engine, data.labels("hate"), n_resamples=20)
    assert [e["family"] for e in entries] == ["char_edits", "lookalikes", "word_substitutions", "covered_caption"]
    flagged = [m for m in data.memes if m.labels["hate"] == 1 and {"ban", "ruin"} & set(m.text.lower().split())]
    for e in entries:
        assert e["n"] == len(flagged) > 0
        for w in e["worst"]:  # the evasion is exactly an edit that took the keyword away
            assert not {"ban", "ruin"} & set(w["evasion"].lower().split())
    with pytest.raises(ValueError, match="image_linf.*does not read"):
        evaluate_budgets(engine, data.labels("hate"), ["image_linf"], n_resamples=20)


class _CaptionOnly:
    """Flags a caption with 'ban' or 'ruin' in it; reads no picture."""

    modalities = ("text",)
    classes = ("non-hateful", "hateful")

    def predict_proba(self, images, texts):
        p = np.array([0.9 if {"ban", "ruin"} & set(t.lower().split()) else 0.1 for t in texts])
        return np.stack([1 - p, p], axis=1)
