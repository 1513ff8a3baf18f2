"""Edit distance between a caption and its perturbed version: how big an edit a perturbation makes."""
from __future__ import annotations

import re
from difflib import SequenceMatcher

import numpy as np

_WORDS = re.compile(r"\w+(?:['’-]\w+)*")


def _codes(text: str) -> np.ndarray:
    return np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)


def levenshtein(a: str, b: str) -> int:
    """Levenshtein distance on code points: common prefix and suffix trimmed, then one numpy row per character of
    the shorter side. The insertion term `cur[j] = min(x[j], cur[j-1] + 1)` is a running minimum of x[j] - j."""
    if a == b:
        return 0
    x, y = _codes(a), _codes(b)
    n = min(len(x), len(y))
    prefix = int(np.argmax(x[:n] != y[:n])) if n and (x[:n] != y[:n]).any() else n
    x, y = x[prefix:], y[prefix:]
    n = min(len(x), len(y))
    if n:
        tail = (x[len(x) - n:] != y[len(y) - n:])[::-1]
        suffix = int(np.argmax(tail)) if tail.any() else n
        x, y = x[: len(x) - suffix], y[: len(y) - suffix]
    if len(x) < len(y):
        x, y = y, x
    if len(y) == 0:
        return int(len(x))
    cols = np.arange(len(y) + 1)
    prev = cols.copy()
    for i, ch in enumerate(x, 1):
        sub = prev[:-1] + (y != ch)
        cur = np.empty_like(prev)
        cur[0] = i
        cur[1:] = np.minimum(prev[1:] + 1, sub)
        prev = np.minimum.accumulate(cur - cols) + cols
    return int(prev[-1])


def words_changed(clean: str, perturbed: str) -> float:
    """Share of the clean caption's words an edit changed: word edits (substituted, deleted or inserted words, by
    the longest common word subsequence) over the clean word count, at most 1. The size of an edit in the unit
    TextAttack budgets and reports, measured the same way for every perturbation."""
    before, after = _WORDS.findall(clean), _WORDS.findall(perturbed)
    if not before:
        return 0.0 if not after else 1.0
    kept = sum(block.size for block in SequenceMatcher(None, before, after, autojunk=False).get_matching_blocks())
    return min(1.0, (max(len(before), len(after)) - kept) / len(before))
