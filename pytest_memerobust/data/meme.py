"""The one record every loader produces and every later stage reads."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from ..errors import DataError
from .image_files import load_rgb

DECLINED = -1  # the class index of an answer a detector declined to give (scored as no answer, never as a class)
NO_LABEL = -1  # every meme's label in an unlabelled dataset: no class, so no label-bound measure is defined


def unlabelled(y) -> bool:
    """Whether labels `y` are an unlabelled dataset's (every one NO_LABEL): what tells a label-bound measure (accuracy,
    AUROC, F1, attack success) "not judged: no labels" from one that is undefined for another cause."""
    y = np.asarray(y)
    return y.ndim == 1 and y.size > 0 and bool((y == NO_LABEL).all())


@dataclass(frozen=True)
class Meme:
    """A meme: an RGB picture (loaded lazily from `image_path`, or given as an array) and its caption.

    `labels` maps a task name (e.g. "hate") to a class index; `meta` holds the rest (split, target group...).
    """

    id: str
    text: str
    labels: Mapping[str, int]
    image_path: Path | None = None
    image_array: np.ndarray | None = field(default=None, repr=False, compare=False)
    meta: Mapping[str, Any] = field(default_factory=dict, compare=False)

    @property
    def has_picture(self) -> bool:
        """Whether the meme comes with a picture (caption-only data has none)."""
        return self.image_path is not None or self.image_array is not None

    @property
    def image(self) -> np.ndarray:
        """The picture as an H x W x 3 array (the edges: OCR, thumbnails, fingerprints)."""
        if self.image_array is not None:
            return self.image_array
        if self.image_path is None:
            raise DataError(f"meme {self.id!r} has no image")
        return load_rgb(self.image_path)

    def picture(self, device="cpu"):
        """The picture as a uint8 tensor 3 x H x W on `device`, decoded there where it can be (pictures.py)."""
        from .pictures import as_picture, decode

        if self.image_array is not None:
            return as_picture(self.image_array, device)
        if self.image_path is None:
            raise DataError(f"meme {self.id!r} has no image")
        return decode(self.image_path, device)


@dataclass(frozen=True)
class Dataset:
    """An ordered, named collection of memes with the class names of each task.

    A task is binary or multi-class (a meme's label is one class index) or, when named in `multilabel`, multi-label
    (a meme's label is a tuple of 0/1, one per class name, as FigMemes' six figurative-language labels)."""

    name: str
    memes: Sequence[Meme]
    classes: Mapping[str, Sequence[str]]
    source: str = ""
    multilabel: frozenset[str] = frozenset()
    # no meme has a label (a folder of pictures as they come): any task is measured on it, by the label-free
    # measures only (flips against the clean prediction, the probability shift, evasion budgets, the gate's flips)
    unlabelled: bool = False

    def __len__(self) -> int:
        return len(self.memes)

    def labels(self, task: str) -> np.ndarray:
        """[N] class indices, or [N, K] 0/1 for a multi-label task; NO_LABEL for each meme of an unlabelled dataset."""
        if self.unlabelled:
            return np.full(len(self.memes), NO_LABEL, dtype=np.int64)
        return np.array([m.labels[task] for m in self.memes], dtype=np.int64)

    def labelled(self, task: str) -> "Dataset":
        """The memes that have a label for `task` (PrideMM's target and ToxicTags' stage II label only some); every
        meme of an unlabelled dataset, each measured without one."""
        if self.unlabelled or all(task in m.labels for m in self.memes):
            return self
        return replace(self, name=f"{self.name}[{task}]", memes=[m for m in self.memes if task in m.labels])

    def head(self, n: int | None) -> "Dataset":
        """The first `n` memes (all when n is None): what `--memerobust-limit` selects."""
        if n is None or n >= len(self.memes):
            return self
        return replace(self, memes=list(self.memes[:n]))

    def fingerprint(self) -> str:
        """Content digest of the memes used: ids, captions, labels and image bytes."""
        h = hashlib.sha256()
        for m in self.memes:
            h.update(m.id.encode() + b"\0" + m.text.encode() + b"\0")
            h.update(repr(sorted(m.labels.items())).encode())
            if not m.has_picture:  # caption-only data
                h.update(b"no picture")
                continue
            img = m.image
            h.update(repr(img.shape).encode() + img.tobytes())
        return h.hexdigest()


def is_multilabel(detector) -> bool:
    """A detector of a multi-label task (its card says `multilabel = true`): one independent probability per label,
    as `Dataset.multilabel` names the dataset's. Here, below the detectors, so that the white-box attacks, which
    receive the detector they attack, can ask it without importing the detectors."""
    scoring = getattr(getattr(detector, "card", None), "scoring", None)
    return bool(getattr(scoring, "multilabel", False))
