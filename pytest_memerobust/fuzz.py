"""Hypothesis strategies for caption edits and prompt rewordings, and the check behind the shipped caption-fuzzing
suite: the public API for your own properties. Re-exports only (as `hypothesis.strategies` is): the strategies are
in perturb/fuzz.py, the check that runs a detector on them in run/analyses.py (CaptionFuzzer) and
judge/caption_fuzz.py (FlipCheck).

    from hypothesis import given
    from pytest_memerobust.fuzz import apply_edits, caption_edits, captions

    @given(captions(), caption_edits(max_edits=3))
    def test_edits_keep_words(caption, edits):
        edited = apply_edits(caption, edits)
"""
from .judge.caption_fuzz import FlipCheck
from .perturb.fuzz import EDIT_OPERATIONS, Edit, apply_edits, caption_edits, captions, meme_images, rewordings
from .run.analyses import CaptionFuzzer

__all__ = ["EDIT_OPERATIONS", "CaptionFuzzer", "Edit", "FlipCheck", "apply_edits", "caption_edits", "captions",
           "meme_images", "rewordings"]
