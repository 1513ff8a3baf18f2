"""The demo detector: a MemeCLIP-shaped head on two tiny frozen encoders, so the main job runs with no download.

The "encoders" are fixed feature maps rather than networks (hashed character trigrams for the caption, a 16x16
thumbnail for the picture): small enough to ship, yet sensitive to the same edits as the real ones (a typo changes
trigrams, noise and contrast change the thumbnail). Only the head is trained, as in MemeCLIP and MemeBLIP2.
"""
from __future__ import annotations

import zlib
from pathlib import Path
from typing import Sequence

import numpy as np

from ..errors import CheckpointError
from ..data.meme import is_multilabel
from .base import ModeView, probabilities
from .checkpoints import check_weights
from .registry import register_architecture

FEATURES_VERSION = 1  # bump when `hashed_trigrams` or `thumbnails` compute something else


def hashed_trigrams(texts: Sequence[str], dim: int) -> np.ndarray:
    """L2-normalised counts of character trigrams of each word (with boundary marks), hashed into `dim` bins."""
    out = np.zeros((len(texts), dim), dtype=np.float32)
    for row, text in enumerate(texts):
        for word in text.lower().split():
            padded = f"<{word}>"
            for i in range(len(padded) - 2):
                out[row, zlib.crc32(padded[i : i + 3].encode()) % dim] += 1.0
    norms = np.linalg.norm(out, axis=1, keepdims=True)
    return out / np.maximum(norms, 1e-6)


def thumbnails(images: Sequence, side: int) -> np.ndarray:
    """Box-downsampled RGB thumbnails scaled to [-1, 1], flattened (H, W, channel order): any input size maps to
    side*side*3 values. Pillow's BOX resize computed on the pictures' device (data/pictures.py), batched per size."""
    import torch

    from ..data.pictures import as_picture, groups_by_size, pillow_box_resize

    pictures = [as_picture(x) for x in images]
    out = np.empty((len(pictures), side * side * 3), dtype=np.float32)
    for rows in groups_by_size(pictures).values():
        small = pillow_box_resize(torch.stack([pictures[i] for i in rows]).to(torch.int32), side, side)
        out[rows] = (small.permute(0, 2, 3, 1).reshape(len(rows), -1).float() / 127.5 - 1.0).cpu().numpy()
    return out


def build_head(image_dim: int, text_dim: int, map_dim: int, n_classes: int, dropout: float):
    """Projections, product fusion (with both sides kept), and an MLP classifier."""
    import torch
    from torch import nn

    class DemoHead(nn.Module):
        def __init__(self):
            super().__init__()
            self.image_projection = nn.Linear(image_dim, map_dim)
            self.text_projection = nn.Linear(text_dim, map_dim)
            self.dropout = nn.Dropout(dropout)
            self.classifier = nn.Sequential(nn.Linear(3 * map_dim, map_dim), nn.ReLU(), nn.Linear(map_dim, n_classes))
            self.mode = "multimodal"

        def forward(self, image_features, text_features):
            # The channel ablation leaves one side out of the fusion: its projection is replaced by zeros.
            n = max(len(image_features), len(text_features))
            zeros = torch.zeros(n, map_dim, device=self.classifier[0].weight.device)
            i = zeros if self.mode == "text" else torch.tanh(self.image_projection(image_features))
            t = zeros if self.mode == "image" else torch.tanh(self.text_projection(text_features))
            return self.classifier(self.dropout(torch.cat([i, t, i * t], dim=-1)))

    return DemoHead()


class DemoDetector:
    """Frozen feature maps + a trainable head; implements the split interface, so features are cached."""

    def __init__(self, classes: Sequence[str], text_dim: int = 512, thumbnail_side: int = 16, map_dim: int = 32,
                 dropout: float = 0.2, device: str = "cpu"):
        self.classes = list(classes)
        self.text_dim, self.thumbnail_side, self.device = text_dim, thumbnail_side, device
        self.head_module = build_head(thumbnail_side * thumbnail_side * 3, text_dim, map_dim, len(classes), dropout)
        self.head_module.to(device).eval()

    def encoder_fingerprints(self) -> dict[str, str]:
        """The feature maps are fixed functions of their sizes, trained or not: any head of these sizes shares them."""
        return {"image": f"demo-thumbnails/{FEATURES_VERSION}:side={self.thumbnail_side}",
                "text": f"demo-trigrams/{FEATURES_VERSION}:dim={self.text_dim}"}

    def encode_images(self, images: Sequence) -> np.ndarray:
        return thumbnails(images, self.thumbnail_side)

    def encode_texts(self, texts: Sequence[str]) -> np.ndarray:
        return hashed_trigrams(texts, self.text_dim)

    def logits(self, image_features, text_features):
        """Differentiable path for training and white-box attacks (torch tensors in, logits out)."""
        return self.head_module(image_features, text_features)

    def head(self, image_features: np.ndarray, text_features: np.ndarray) -> np.ndarray:
        return probabilities(self.logits, image_features, text_features, self.device, is_multilabel(self))

    def picture_logits(self, values, text_features):
        """Logits of pictures given as float 0-255 values [N, 3, H, W] (one size), the caption's features fixed:
        the thumbnails computed without rounding, so white-box image attacks get a gradient."""
        from ..data.pictures import box_resize_values

        side = self.thumbnail_side
        small = box_resize_values(values.to(self.device).float(), side, side)
        features = (small.permute(0, 2, 3, 1).reshape(len(values), -1) / 127.5 - 1.0)
        return self.logits(features, text_features.expand(len(values), -1))

    def with_mode(self, mode: str) -> ModeView:
        return ModeView(self, mode)

    def predict_proba(self, images: Sequence[np.ndarray], texts: Sequence[str]) -> np.ndarray:
        return self.head(self.encode_images(images), self.encode_texts(texts))

    def shipped_state(self) -> dict:
        return self.head_module.state_dict()

    def checkpoint_metadata(self) -> dict:
        return {}

    def load_state(self, state: dict, source: str = "checkpoint") -> None:
        import torch

        expected = self.head_module.state_dict()
        not_tensors = sorted(k for k, v in state.items() if not isinstance(v, torch.Tensor))
        if not_tensors:
            raise CheckpointError(f"{source} does not fit the demo detector: not tensors: {not_tensors}")
        missing, unexpected = set(expected) - set(state), set(state) - set(expected)
        bad_shape = [k for k in set(expected) & set(state) if tuple(expected[k].shape) != tuple(state[k].shape)]
        if missing or unexpected or bad_shape:
            raise CheckpointError(
                f"{source} does not fit the demo detector: missing {sorted(missing)}, "
                f"unexpected {sorted(unexpected)}, wrong shape {sorted(bad_shape)}"
            )
        check_weights(state, expected, source)
        self.head_module.load_state_dict(state)
        self.head_module.to(self.device).eval()


@register_architecture("demo")
def build_demo(card, checkpoint: Path | None, device: str) -> DemoDetector:
    from .checkpoints import load_state_dict

    detector = DemoDetector(card.classes, device=device, **card.network.params)
    if checkpoint is not None:
        state, _ = load_state_dict(checkpoint)
        detector.load_state(state, source=str(checkpoint))
    return detector
