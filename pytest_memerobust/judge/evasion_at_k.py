"""Evasion@k: how many of the harmful memes a detector flags get past it when the poster may try a caption edit k
times, each a fresh draw of the same edit at the same severity (a new key: another typo in another place). A
detector whose every flagged meme falls to one of ten tries of `typos@3` is not protected by catching the first.

The share evaded within the first k draws rises with k; each share carries its Wilson interval over the memes. This
is the query-budget view of attack success (success within k queries), with the queries drawn at random rather
than searched, so it is what a poster without the model gets, a lower bound on what a search gets."""
from __future__ import annotations

import numpy as np

from .instructions import wilson_interval


def evasion_at_k(evaded, confidence: float = 0.95) -> dict:
    """`evaded`: memes x draws, True where that draw of the edit got the meme past the detector. Per k = 1..draws:
    the memes evaded within the first k draws, their share and its Wilson interval; and the mean draws a meme that
    fell needed (the first evading draw, 1-based)."""
    evaded = np.asarray(evaded, dtype=bool)
    if evaded.ndim != 2:
        raise ValueError(f"evaded must be memes x draws, got shape {evaded.shape}")
    memes, draws = evaded.shape
    within = np.logical_or.accumulate(evaded, axis=1) if draws else np.zeros((memes, 0), bool)
    curve = []
    for k in range(1, draws + 1):
        count = int(within[:, k - 1].sum())
        low, high = wilson_interval(count, memes, confidence)
        curve.append({"k": k, "evaded": count, "share": count / memes if memes else float("nan"),
                      "ci": [low, high]})
    fell = within[:, -1] if draws else np.zeros(memes, bool)
    first = evaded[fell].argmax(axis=1) + 1 if fell.any() else np.zeros(0)
    return {"memes": memes, "draws": draws, "confidence": confidence, "curve": curve,
            "mean_tries_to_evade": float(first.mean()) if first.size else float("nan")}
