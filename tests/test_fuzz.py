"""The Hypothesis strategies and the caption fuzzer: edits do what they say, failures shrink and replay."""
import unicodedata

import numpy as np
import torch  # noqa: F401  (imported once, before pytester runs: see tests/test_plugin.py)
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from pytest_memerobust import fuzz
from pytest_memerobust.data import demo_dataset
from pytest_memerobust.detectors import load_detector
from pytest_memerobust.fuzz import EDIT_OPERATIONS, CaptionFuzzer, Edit, apply_edits, caption_edits, captions
from pytest_memerobust.perturb.evasion import ZERO_WIDTH


def test_all_is_honest():
    # the public module is re-exports only (perturb/fuzz.py, judge/caption_fuzz.py, run/analyses.py): all in __all__
    public = {n for n in vars(fuzz) if not n.startswith("_") and callable(getattr(fuzz, n))
              and getattr(getattr(fuzz, n), "__module__", "").startswith("pytest_memerobust.")}
    public |= {"EDIT_OPERATIONS"}
    assert set(fuzz.__all__) == public


@pytest.mark.parametrize("operation, expected", [
    ("swap", "hlelo"), ("delete", "hllo"), ("insert", "haello"), ("case", "hEllo"),
])
def test_each_operation_edits_the_chosen_character(operation, expected):
    # word 0 = "hello", char 1 = "e", choice 0 = "a" for insert
    assert apply_edits("hello world", [Edit(operation, 0, 1, 0)]) == f"{expected} world"


def test_indices_wrap_around_the_words_and_characters():
    assert apply_edits("hello world", [Edit("case", 3, 12, 0)]) == "hello woRld"  # word 3 % 2 = 1, char 12 % 5 = 2


def test_keyboard_uses_a_qwerty_neighbour_and_leet_a_leet_symbol():
    edited = apply_edits("hate", [Edit("keyboard", 0, 0, 1)])
    assert edited[0] in "yugjbn" and edited[1:] == "ate"
    assert apply_edits("hate", [Edit("leet", 0, 1, 0)]) in ("h4te", "h@te")


def test_invisible_and_lookalike_edits_keep_what_a_reader_sees():
    zero = apply_edits("hate speech", [Edit("zero_width", 0, 2, 3)])
    assert "".join(ch for ch in zero if ch not in ZERO_WIDTH) == "hate speech" and zero != "hate speech"
    glyph = apply_edits("hate", [Edit("homoglyph", 0, 1, 0)])
    assert glyph != "hate" and len(glyph) == 4 and unicodedata.name(glyph[1]).split()[0] != "LATIN"
    assert apply_edits("hate", [Edit("space", 0, 2, 0)]) == "ha te"


def test_captions_without_words_are_left_alone():
    assert apply_edits("!!! 42 ?", [Edit("swap", 0, 0, 0)]) == "!!! 42 ?"


def test_unknown_operations_are_refused():
    with pytest.raises(ValueError, match="known"):
        apply_edits("hello", [Edit("teleport", 0, 0, 0)])
    with pytest.raises(ValueError, match="known"):
        caption_edits(operations=["teleport"])


@settings(max_examples=60, deadline=None)
@given(captions(), caption_edits(max_edits=3))
def test_edits_never_add_or_remove_letters_beyond_their_count(caption, edits):
    edited = apply_edits(caption, edits)
    assert 1 <= len(edits) <= 3
    assert abs(len(edited) - len(caption)) <= len(edits)


def test_a_failure_shrinks_to_one_simple_edit():
    """A property that fails on any edit touching word 0 shrinks to the simplest such edit."""
    seen = []

    @settings(max_examples=200, deadline=None, database=None, phases=[Phase.generate, Phase.shrink])
    @given(caption_edits(max_edits=3))
    def prop(edits):
        if any(e.word == 0 for e in edits):
            seen.append(edits)
            raise AssertionError("touched word 0")

    with pytest.raises(AssertionError):
        prop()
    assert seen[-1] == [Edit(EDIT_OPERATIONS[0], 0, 0, 0)]


@pytest.fixture(scope="module")
def fuzzer():
    return CaptionFuzzer(load_detector("memeblip2-tda"), demo_dataset("test").head(40), "hate", threshold=0.9)


def test_fuzzer_keeps_only_confident_correct_memes(fuzzer):
    detector, memes = fuzzer.detector, fuzzer.dataset.memes
    proba = detector.predict_proba([m.image for m in memes], [m.text for m in memes])
    labels = fuzzer.dataset.labels("hate")
    expected = [i for i in range(len(memes)) if proba[i].max() >= 0.9 and proba[i].argmax() == labels[i]]
    assert fuzzer.confident == expected and expected


def test_a_check_reports_both_captions_and_probabilities(fuzzer):
    index = fuzzer.confident[0]
    check = fuzzer.check(index, [Edit("swap", 0, 1, 0)])
    np.testing.assert_allclose(check.before, fuzzer.detector.predict_proba(
        [fuzzer.dataset.memes[index].image], [fuzzer.dataset.memes[index].text])[0], atol=1e-5)
    text = str(check)
    assert check.caption in text and check.edited in text and "before:" in text and "after:" in text
    assert fuzzer.check(index, []).flipped is False


def test_the_shipped_fuzz_suite_finds_and_replays_a_flip(pytester):
    import shutil

    from pytest_memerobust.run.suite import builtin_suite_dir

    shutil.copy(builtin_suite_dir() / "test_caption_fuzz.py", pytester.path / "test_caption_fuzz.py")
    args = ["--memerobust-model=memeblip2-tda", "--memerobust-fuzz-examples=30", "-p", "no:cacheprovider",
            "test_caption_fuzz.py"]
    first = pytester.runpytest(*args)
    first.assert_outcomes(failed=1)
    first.stdout.fnmatch_lines(["*a label-preserving edit flipped a confident prediction*", "*original:*",
                                "*edited:*", "*before:*", "*after:*"])
    second = pytester.runpytest(*args)  # the example database replays the shrunk failure
    second.assert_outcomes(failed=1)
    edited = [l for l in first.stdout.lines if "edited:" in l][0]
    assert edited in second.stdout.lines


UNTRAINED_CARD = """
name = "untrained"
architecture = "demo"
task = "hate"
classes = ["non-hateful", "hateful"]

[params]
text_dim = 512
thumbnail_side = 16
map_dim = 32
"""
CLEAN_SUITE = """
[suite]
name = "clean-only"
[thresholds]
min_relative_robustness = { accuracy = 0.0 }
[text]
typos = [1]
"""


def test_a_fuzz_case_with_no_confident_prediction_says_why_in_the_runs_notes(pytester):
    """Issue 49: at the default confidence 0.9 an unconfident head (here an untrained one: every probability near
    0.5) skipped the case with only "1 skipped" in the summary. Its reason names the model and the option, and the
    run's notes say it where the default summary shows them."""
    pytester.makefile(".toml", untrained=UNTRAINED_CARD, **{"memerobust-clean": CLEAN_SUITE})
    result = pytester.runpytest("--memerobust-model=untrained.toml", "--memerobust-limit=16",
                                "--memerobust-bootstrap=20", "-p", "no:cacheprovider", "-k", "fuzz or typos",
                                "test_caption_fuzz.py", ".")
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(["memerobust: caption fuzzing skipped: untrained classifies no meme correctly with "
                                 "probability >= 0.9 (--memerobust-fuzz-confidence), so no confident prediction is "
                                 "left to fuzz; a lower confidence fuzzes its less confident ones"])
