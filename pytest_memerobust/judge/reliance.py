"""Which channel does a detector decide from? Tests of multimodal reliance after the Hateful Memes paper's benign
confounders and Rainbow Noise's channel ablation.

- Modality swap: each meme's picture is paired with another meme's caption. Where the two source memes got
  different clean predictions, the swapped prediction either follows the caption's meme or the picture's meme;
  the shares say how much each channel decides.
- Confounders: pairs of memes with the same caption and different pictures (or the same picture and different
  captions) whose labels differ, as Hateful Memes builds on purpose. A detector that reads both channels tells the
  two apart; one that reads only the shared channel cannot.
- Unimodal predictions: per meme, the text-only and image-only predictions (the channel-ablation views) next to
  the multimodal one.

Plain functions of predictions and partner indices; run/analyses.py's `evaluate_reliance` asks the detector.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def swap_partners(n: int, seed: int = 0) -> np.ndarray:
    """A partner for every meme, never itself: a seeded random derangement (a cyclic shift of a permutation)."""
    if n < 2:
        raise ValueError(f"a modality swap needs at least 2 memes, got {n}")
    order = np.random.default_rng(seed).permutation(n)
    partners = np.empty(n, dtype=np.int64)
    partners[order] = np.roll(order, -1)
    return partners


@dataclass(frozen=True)
class SwapReliance:
    """Over the swaps whose two source memes the detector predicted differently (the informative ones)."""

    n_swaps: int
    n_informative: int
    follows_text: float  # share of informative swaps predicted as the caption's meme was
    follows_image: float  # share predicted as the picture's meme was
    follows_neither: float  # multi-class only: a third class

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def swap_reliance(pred_clean: np.ndarray, pred_swapped: np.ndarray, text_from: np.ndarray,
                  image_from: np.ndarray) -> SwapReliance:
    """`pred_swapped[k]` is the prediction for the picture of meme `image_from[k]` with the caption of meme
    `text_from[k]`; `pred_clean` the clean prediction of every meme."""
    pred_clean, pred_swapped = np.asarray(pred_clean), np.asarray(pred_swapped)
    text_pred, image_pred = pred_clean[np.asarray(text_from)], pred_clean[np.asarray(image_from)]
    informative = text_pred != image_pred
    n = int(informative.sum())
    if n == 0:
        return SwapReliance(len(pred_swapped), 0, float("nan"), float("nan"), float("nan"))
    swapped = pred_swapped[informative]
    follows_text, follows_image = swapped == text_pred[informative], swapped == image_pred[informative]
    return SwapReliance(len(pred_swapped), n, float(follows_text.mean()), float(follows_image.mean()),
                        float((~follows_text & ~follows_image).mean()))


def confounder_pairs(texts: list[str], image_digests: list[str], labels: np.ndarray) -> dict[str, np.ndarray]:
    """Pairs (i, j), i < j, with differing labels that share their caption (`same_text`) or picture
    (`same_image`): Hateful Memes' benign confounders, found from the data itself."""
    labels = np.asarray(labels)
    out = {}
    for kind, keys in (("same_text", [t.strip().lower() for t in texts]), ("same_image", image_digests)):
        groups: dict[str, list[int]] = {}
        for i, key in enumerate(keys):
            groups.setdefault(key, []).append(i)
        pairs = [(a, b) for members in groups.values() for k, a in enumerate(members) for b in members[k + 1 :]
                 if labels[a] != labels[b]]
        out[kind] = np.array(pairs, dtype=np.int64).reshape(-1, 2)
    return out


def confounder_scores(pairs: np.ndarray, labels: np.ndarray, pred: np.ndarray) -> dict:
    """How many confounder pairs the detector tells apart (different predictions) and gets both right."""
    if len(pairs) == 0:
        return {"pairs": 0, "told_apart": float("nan"), "both_correct": float("nan")}
    a, b = pairs[:, 0], pairs[:, 1]
    return {"pairs": int(len(pairs)), "told_apart": float((pred[a] != pred[b]).mean()),
            "both_correct": float(((pred[a] == labels[a]) & (pred[b] == labels[b])).mean())}
