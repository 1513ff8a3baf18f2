"""The check behind the shipped caption-fuzzing suite (suites/test_caption_fuzz.py): a detector and dataset prepared
once, the memes it classifies confidently and correctly, and whether an edit from `perturb/fuzz.py` flips one of
them. Users import it from `pytest_memerobust.fuzz`."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..determinism import fixed_threads
from ..perturb.fuzz import Edit, apply_edits


@dataclass
class FlipCheck:
    """What a flipped prediction looks like in a failure message."""

    caption: str
    edited: str
    edits: Sequence[Edit]
    before: np.ndarray
    after: np.ndarray
    classes: Sequence[str]

    @property
    def flipped(self) -> bool:
        return int(self.before.argmax()) != int(self.after.argmax())

    def __str__(self) -> str:
        fmt = lambda p: ", ".join(f"{c} {v:.3f}" for c, v in zip(self.classes, p))
        return (f"a label-preserving edit flipped a confident prediction\n"
                f"  original: {self.caption!r}\n  edited:   {self.edited!r}\n"
                f"  edits:    {'; '.join(map(str, self.edits))}\n"
                f"  before:   {fmt(self.before)}\n  after:    {fmt(self.after)}")


class CaptionFuzzer:
    """A detector and dataset prepared for fuzzing: pictures encoded once (split detectors), the confidently and
    correctly classified memes found, each check one small batch."""

    @fixed_threads()  # the same confident memes and flips at every thread count (determinism.py)
    def __init__(self, detector, dataset, task: str, threshold: float = 0.9):
        self.detector, self.dataset = detector, dataset
        memes = dataset.memes
        reads_images = "image" in getattr(detector, "modalities", ("image", "text"))
        self.split = callable(getattr(detector, "head", None))
        if self.split:
            self.image_features = (detector.encode_images([m.image for m in memes]) if reads_images
                                   else np.zeros((len(memes), 0), dtype=np.float32))
            proba = detector.head(self.image_features, detector.encode_texts([m.text for m in memes]))
        else:
            proba = detector.predict_proba([m.image for m in memes], [m.text for m in memes])
        keep = (proba.max(axis=1) >= threshold) & (proba.argmax(axis=1) == dataset.labels(task))
        self.confident = [int(i) for i in np.flatnonzero(keep)]

    @fixed_threads()
    def check(self, index: int, edits: Sequence[Edit]) -> FlipCheck:
        meme = self.dataset.memes[index]
        edited = apply_edits(meme.text, edits)
        if self.split:
            proba = self.detector.head(self.image_features[[index, index]],
                                       self.detector.encode_texts([meme.text, edited]))
        else:
            proba = self.detector.predict_proba([meme.image, meme.image], [meme.text, edited])
        return FlipCheck(meme.text, edited, list(edits), proba[0], proba[1], self.detector.classes)
