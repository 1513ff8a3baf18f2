"""What the engine needs from a detector.

A black-box detector only implements `predict_proba`. A detector with frozen encoders also implements
`encode_images`, `encode_texts` and `head`, so the engine encodes each distinct input once and reuses it across
conditions (a text-only condition reuses the clean image features).
"""
from __future__ import annotations

from typing import Protocol, Sequence, runtime_checkable

import numpy as np


@runtime_checkable
class Detector(Protocol):
    classes: Sequence[str]

    def predict_proba(self, images: Sequence[np.ndarray], texts: Sequence[str]) -> np.ndarray:
        """Class probabilities, shape [N, len(classes)], rows summing to 1."""


@runtime_checkable
class SplitDetector(Detector, Protocol):
    def encode_images(self, images: Sequence[np.ndarray]) -> np.ndarray: ...

    def encode_texts(self, texts: Sequence[str]) -> np.ndarray: ...

    def head(self, image_features: np.ndarray, text_features: np.ndarray) -> np.ndarray: ...


def is_split(detector) -> bool:
    return all(callable(getattr(detector, n, None)) for n in ("encode_images", "encode_texts", "head"))
