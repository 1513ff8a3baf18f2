"""The 19 corruptions of ImageNet-C (Hendrycks & Dietterich, ICLR 2019) on batched torch tensors, plus `blank`
from the adaptation benchmark and `imagenet_c`, Rainbow Noise's image noise 2.

Every corruption follows the published reference, `imagecorruptions` 1.1.2 (its severity tables and formulas), and
runs on the GPU when there is one, on any image size. tests/test_imagenet_c_*.py compare each with the reference's
own output on the same inputs and random draws, with the tolerance each test states.
"""
from __future__ import annotations

import numpy as np
import torch

from . import blur, digital, noise, weather  # noqa: F401  (each registers its corruptions)
from ..registry import register
from .tensor import CORRUPTIONS, Draws, default_device, run_batched

# The order of imagecorruptions' `get_corruption_names('common')` and ('validation').
COMMON = (
    "gaussian_noise", "shot_noise", "impulse_noise", "defocus_blur", "glass_blur", "motion_blur", "zoom_blur",
    "snow", "frost", "fog", "brightness", "contrast", "elastic_transform", "pixelate", "jpeg_compression",
)
EXTRA = ("speckle_noise", "gaussian_blur", "spatter", "saturate")

__all__ = ["COMMON", "EXTRA", "CORRUPTIONS", "Draws", "default_device", "run_batched"]


def _one_of_the_common(x: torch.Tensor, severity: int, draws) -> torch.Tensor:
    """Each picture gets one of the 15 common corruptions, drawn from its own generator."""
    out = torch.empty_like(x)
    choices = [COMMON[d.integers(0, len(COMMON))] for d in draws]
    for name in dict.fromkeys(choices):
        rows = [i for i, c in enumerate(choices) if c == name]
        out[rows] = CORRUPTIONS[name](x[rows], severity, [draws[i] for i in rows])
    return out


@register("imagenet_c", modality="image", family="imagenet_c", tags={"imagenet_c", "family"},
          batch=lambda images, severity, rngs: run_batched(_one_of_the_common, images, severity, rngs), takes="tensor")
def imagenet_c(picture: torch.Tensor, severity: int, rng: np.random.Generator) -> torch.Tensor:
    """One of the 15 common ImageNet-C corruptions per picture at this severity: Rainbow Noise's image noise 2 as one
    condition, so that it pairs with each caption attack in the grid (the per-corruption view: run the 15 names)."""
    return run_batched(_one_of_the_common, [picture], severity, [rng])[0]


@register("blank", modality="image", family="blank", severities=None, label_preserving=False, tags={"ablation"},
          takes="tensor")
def blank(picture: torch.Tensor, severity, rng: np.random.Generator) -> torch.Tensor:
    """Every pixel 255 (the adaptation benchmark's `blank`): what the detector decides from the caption alone."""
    return torch.full_like(picture, 255)
