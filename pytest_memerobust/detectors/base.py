"""What the engine needs from a detector.

A black-box detector only implements `predict_proba`. A detector with frozen encoders also implements
`encode_images`, `encode_texts` and `head`, so the engine encodes each distinct input once and reuses it across
conditions (a text-only condition reuses the clean image features).

Pictures reach a detector as uint8 tensors 3 x H x W on its `device` (data/pictures.py); a detector written for numpy
says `takes_pictures = "array"` and gets H x W x 3 arrays instead, converted at that edge.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Protocol, Sequence, runtime_checkable

import numpy as np

from ..data.meme import is_multilabel


@runtime_checkable
class Detector(Protocol):
    classes: Sequence[str]

    def predict_proba(self, images: Sequence, texts: Sequence[str]) -> np.ndarray:
        """Class probabilities, shape [N, len(classes)], rows summing to 1, for picture tensors and captions."""


@runtime_checkable
class SplitDetector(Detector, Protocol):
    def encode_images(self, images: Sequence) -> np.ndarray: ...

    def encode_texts(self, texts: Sequence[str]) -> np.ndarray: ...

    def head(self, image_features: np.ndarray, text_features: np.ndarray) -> np.ndarray: ...


def is_split(detector) -> bool:
    return all(callable(getattr(detector, n, None)) for n in ("encode_images", "encode_texts", "head"))


MODES = ("multimodal", "text", "image")


def class_probabilities(logits, multilabel: bool = False):
    """Softmax over the classes; for a multi-label task an independent sigmoid per label."""
    import torch

    return torch.sigmoid(logits) if multilabel else torch.softmax(logits, dim=-1)


def classification_loss(logits, target, multilabel: bool = False, reduction: str = "mean", pos_weight=None):
    """Cross-entropy over the classes; for a multi-label task binary cross-entropy per label (FigMemes' loss), with
    `pos_weight` re-weighting each label's positives."""
    import torch.nn.functional as F

    if multilabel:
        return F.binary_cross_entropy_with_logits(logits, target.float(), reduction=reduction, pos_weight=pos_weight)
    return F.cross_entropy(logits, target, reduction=reduction)


def probabilities(logits_fn, image_features, text_features, device, multilabel: bool = False) -> np.ndarray:
    """Class probabilities of a torch head on numpy features, without gradients."""
    import torch

    with torch.no_grad():
        i = torch.as_tensor(image_features, device=device)
        t = torch.as_tensor(text_features, device=device)
        return class_probabilities(logits_fn(i, t), multilabel).float().cpu().numpy()


class ModeView:
    """A detector seen through one fusion mode (the channel ablation of Rainbow Noise tables 4 and 7): "text" leaves
    the image out of the fusion, "image" the caption. Encoders and weights are the base detector's own; the base's
    head module must have a `mode` attribute its forward pass honours."""

    def __init__(self, base, mode: str):
        from ..errors import ConfigError, ModeNotRead

        if mode not in MODES:
            raise ConfigError(f"unknown mode {mode!r}; valid: {', '.join(MODES)}")
        reads = getattr(base, "modalities", ("image", "text"))
        if mode != "multimodal" and mode not in reads:
            raise ModeNotRead(f"this detector does not read the {mode}, so it has no {mode!r} mode")
        self.base, self.mode = base, mode
        self.classes, self.device = base.classes, base.device
        self.modalities = reads if mode == "multimodal" else (mode,)

    # Base methods that run the head, so they must run in this view's mode (white-box attack hooks).
    _MODE_DEPENDENT = ("text_saliency", "text_saliency_vectors", "pixel_loss_gradient", "picture_logits")

    def __getattr__(self, name):  # card, checkpoint, fingerprint, encoders, token_embedding...
        attr = getattr(self.base, name)
        if name not in self._MODE_DEPENDENT:
            return attr

        def in_mode(*args, **kwargs):
            with self._mode():
                return attr(*args, **kwargs)

        return in_mode

    @contextmanager
    def _mode(self):
        head = self.base.head_module
        previous, head.mode = head.mode, self.mode
        try:
            yield
        finally:
            head.mode = previous

    def logits(self, image_features, text_features):
        with self._mode():
            return self.base.logits(image_features, text_features)

    def head(self, image_features, text_features) -> np.ndarray:
        return probabilities(self.logits, image_features, text_features, self.device, is_multilabel(self))

    def predict_proba(self, images, texts) -> np.ndarray:
        n = len(texts)
        image_features = self.base.encode_images(images) if "image" in self.modalities else np.zeros((n, 0), np.float32)
        text_features = self.base.encode_texts(texts) if "text" in self.modalities else np.zeros((n, 0), np.float32)
        return self.head(image_features, text_features)
