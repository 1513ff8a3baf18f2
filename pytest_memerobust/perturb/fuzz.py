"""Hypothesis strategies for caption edits and for rewordings of a prompted detector's instruction (the checks behind
the shipped fuzzing suites, which run a detector on them, are in run/analyses.py; users import the strategies and the
caption check from `pytest_memerobust.fuzz`).

An edit is a small value (`Edit`): which word, which character, which operation, which replacement. Lists of
edits shrink the way Hypothesis shrinks lists and integers, so a failure is reported as the smallest edit that
still flips the prediction, and Hypothesis' example database replays it on the next run.

    from hypothesis import given
    from pytest_memerobust.fuzz import apply_edits, caption_edits, captions

    @given(captions(), caption_edits(max_edits=3))
    def test_edits_keep_words(caption, edits):
        edited = apply_edits(caption, edits)
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

import numpy as np
from hypothesis import strategies as st

from .evasion import LEET, ZERO_WIDTH, homoglyph_table
from .text import QWERTY_NEIGHBOURS

_WORD = re.compile(r"[A-Za-z]{2,}")
_LETTERS = "abcdefghijklmnopqrstuvwxyz"

# Operations a reader looks past, simplest first (Hypothesis shrinks towards the first).
EDIT_OPERATIONS = ("swap", "delete", "insert", "keyboard", "case", "homoglyph", "leet", "zero_width", "space")


@dataclass(frozen=True)
class Edit:
    operation: str
    word: int  # index among the caption's editable words (taken modulo their number)
    char: int  # index inside the word (taken modulo its length)
    choice: int  # which replacement, where the operation has several

    def __str__(self) -> str:
        return f"{self.operation}(word {self.word}, char {self.char}, choice {self.choice})"


def _edit_word(word: str, edit: Edit) -> str:
    i, op = edit.char % len(word), edit.operation
    ch = word[i]
    if op == "swap":
        j = min(i, len(word) - 2)
        return word[:j] + word[j + 1] + word[j] + word[j + 2 :]
    if op == "delete":
        return word[:i] + word[i + 1 :] if len(word) > 2 else word
    if op == "insert":
        return word[:i] + _LETTERS[edit.choice % 26] + word[i:]
    if op == "keyboard":
        neighbours = QWERTY_NEIGHBOURS.get(ch.lower(), "")
        return word[:i] + neighbours[edit.choice % len(neighbours)] + word[i + 1 :] if neighbours else word
    if op == "case":
        return word[:i] + ch.swapcase() + word[i + 1 :]
    if op == "homoglyph":
        options = homoglyph_table().get(ch, ())
        return word[:i] + options[edit.choice % len(options)] + word[i + 1 :] if options else word
    if op == "leet":
        options = LEET.get(ch.lower(), "")
        return word[:i] + options[edit.choice % len(options)] + word[i + 1 :] if options else word
    if op == "zero_width":
        return word[: max(i, 1)] + ZERO_WIDTH[edit.choice % len(ZERO_WIDTH)] + word[max(i, 1) :]
    if op == "space":
        return word[: max(i, 1)] + " " + word[max(i, 1) :]
    raise ValueError(f"unknown edit operation {op!r}; known: {', '.join(EDIT_OPERATIONS)}")


def apply_edits(caption: str, edits: Sequence[Edit]) -> str:
    """The caption with each edit applied in turn to one of its words (words of two or more letters)."""
    for edit in edits:
        spans = [(m.start(), m.end()) for m in _WORD.finditer(caption)]
        if not spans:
            break
        a, b = spans[edit.word % len(spans)]
        caption = caption[:a] + _edit_word(caption[a:b], edit) + caption[b:]
    return caption


def caption_edits(max_edits: int = 3, operations: Sequence[str] = EDIT_OPERATIONS):
    """Lists of 1..max_edits label-preserving character edits; shrinks towards one `swap` on the first word."""
    unknown = set(operations) - set(EDIT_OPERATIONS)
    if unknown:
        raise ValueError(f"unknown edit operations {sorted(unknown)}; known: {', '.join(EDIT_OPERATIONS)}")
    edit = st.builds(Edit, st.sampled_from(list(operations)), st.integers(0, 40), st.integers(0, 20),
                     st.integers(0, 25))
    return st.lists(edit, min_size=1, max_size=max_edits)


_VOCABULARY = ("trans", "rights", "are", "human", "gay", "love", "pride", "queer", "people", "hate", "nobody",
               "wants", "near", "our", "children", "proud", "stand", "with", "the", "community", "meme", "when")


def captions(vocabulary: Sequence[str] = _VOCABULARY, min_words: int = 2, max_words: int = 12):
    """Captions of lowercase words drawn from `vocabulary` (or pass your own, e.g. a dataset's words)."""
    return st.lists(st.sampled_from(list(vocabulary)), min_size=min_words, max_size=max_words).map(" ".join)


def meme_images(min_side: int = 8, max_side: int = 64):
    """RGB uint8 pictures of any size in range, for fuzzing the image path."""
    from hypothesis.extra.numpy import arrays

    shapes = st.tuples(st.integers(min_side, max_side), st.integers(min_side, max_side), st.just(3))
    return shapes.flatmap(lambda shape: arrays(np.uint8, shape))


# A small grammar of instructions for a prompted detector: an opening, where the caption goes, the question, how to
# answer (4 x 3 x 4 x 3 = 144 wordings); `rewordings` draws from it, and shrinks a failure towards the first choice of
# each part.
OPENINGS = ("", "Here is a meme. ", "Look at this meme. ", "You are shown a meme. ")
CAPTION_FRAMES = ('Its caption reads "{caption}". ', 'The text on it says "{caption}". ', 'Caption: "{caption}". ')
QUESTIONS = ("Is it hateful?", "Is this meme hateful?", "Does this meme express hate?",
             "Would a content moderator remove it as hateful?")
ANSWERS = (" Answer {options}.", " Reply with {options}.", " Answer with one word: {options}.")


def rewordings():
    """Instructions from the grammar above (the `instruction` of a prompted detector's prompt)."""
    return st.builds(lambda *parts: "".join(parts), st.sampled_from(OPENINGS), st.sampled_from(CAPTION_FRAMES),
                     st.sampled_from(QUESTIONS), st.sampled_from(ANSWERS))
