"""The OCR-robustness view: for each image condition, how much of the caption an OCR reader still reads off the
perturbed pictures (character error rate against its reading of the clean picture), next to the detector's drop.

Why: a moderation pipeline that OCRs uploads has two things to break. A caption cover that leaves OCR unable to read
anything and a sticker that OCR reads through are different failures; this view shows which an attack reached, the
reader or the detector. Readings are computed on the first memes of a run (the reader is slow: about 0.7 s per
512 px picture on a CPU) and cached by picture content by the reader itself.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from . import metrics
from ..perturb.distance import levenshtein


def character_error_rate(read: str, reference: str) -> float:
    """Edits (Levenshtein, on characters, case and spacing ignored) from the reference to the reading, over the
    reference's length; NaN for an empty reference (nothing to read)."""
    reference, read = " ".join(reference.upper().split()), " ".join(read.upper().split())
    if not reference:
        return float("nan")
    return levenshtein(read, reference) / len(reference)


def word_recall(read: str, reference: str) -> float:
    """The share of the reference's words (with repeats, case ignored) found in the reading: text added to the
    picture (counter-text) raises the error rate but keeps this, a reader that lost the caption loses it."""
    from collections import Counter

    wanted, found = Counter(reference.upper().split()), Counter(read.upper().split())
    total = sum(wanted.values())
    return float("nan") if not total else sum(min(n, found[w]) for w, n in wanted.items()) / total


def reading_scores(clean: Sequence[str], read: Sequence[str], n_resamples: int = 1000, confidence: float = 0.95,
                   seed: int = 0) -> dict:
    """Per-condition summary over the memes whose clean picture reads as something: the mean character error rate
    (capped at 1 per meme, so one long misreading does not outweigh the rest) with a bootstrap interval, the mean
    share of the clean reading's words still read, and the share of memes read as nothing at all."""
    if len(clean) != len(read):
        raise ValueError(f"{len(clean)} clean readings but {len(read)} perturbed ones")
    kept = [(c, r) for c, r in zip(clean, read) if c.strip()]
    if not kept:
        return {"memes": 0, "cer": float("nan"), "cer_ci": [float("nan"), float("nan")], "words_kept": float("nan"),
                "unread": float("nan")}
    rates = np.array([min(1.0, character_error_rate(r, c)) for c, r in kept])
    low, high = metrics.paired_bootstrap_ci(np.mean, rates, n_resamples=n_resamples, confidence=confidence,
                                            seed=seed)
    return {"memes": len(kept), "cer": float(rates.mean()), "cer_ci": [float(low), float(high)],
            "words_kept": float(np.mean([word_recall(r, c) for c, r in kept])),
            "unread": float(np.mean([not r.strip() for _, r in kept]))}


def ocr_view_rows(readings: dict[str, Sequence[str]], clean: Sequence[str], results: Sequence[dict],
                  n_resamples: int = 1000, confidence: float = 0.95, seed: int = 0) -> list[dict]:
    """One row per image condition of `results` (report dicts) that has readings: its OCR scores, and the
    detector's accuracy drop and flip rate on the same condition (over all the run's memes)."""
    rows = []
    for result in results:
        if result["condition"] not in readings:
            continue
        drop = result["clean_metrics"]["accuracy"] - result["metrics"]["accuracy"]
        rows.append({"condition": result["condition"],
                     **reading_scores(clean, readings[result["condition"]], n_resamples, confidence, seed),
                     "accuracy_drop": float(drop), "flip_rate": result.get("flip_rate")})
    return rows
