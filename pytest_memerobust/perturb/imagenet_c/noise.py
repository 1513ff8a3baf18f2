"""ImageNet-C's noise corruptions: gaussian, shot, impulse and speckle noise, after `imagecorruptions` 1.1.2.

Every noise field is drawn for the whole batch on the device (one keyed field per picture) in the reference's
H x W x 3 layout, so the fidelity tests can feed the reference's own numbers, and then moved to channels-first.
"""
from __future__ import annotations

from typing import Sequence

import torch

from .tensor import Draws, corruption, normal_fields, poisson_fields, uniform_fields


def _channels_first(field: torch.Tensor) -> torch.Tensor:
    """B x H x W x 3 fields (the reference's layout) in x's B x 3 x H x W layout."""
    return field.permute(0, 3, 1, 2)


@corruption("gaussian_noise", group="noise")
def gaussian_noise(x: torch.Tensor, severity: int, draws: Sequence[Draws]) -> torch.Tensor:
    """Additive Gaussian sensor noise (high gain, low light); ImageNet-C definition."""
    c = [.08, .12, 0.18, 0.26, 0.38][severity - 1]
    h, w = x.shape[-2:]
    return x + _channels_first(normal_fields(draws, (h, w, 3), scale=c, device=x.device, dtype=x.dtype))


@corruption("shot_noise", group="noise")
def shot_noise(x: torch.Tensor, severity: int, draws: Sequence[Draws]) -> torch.Tensor:
    """Poisson photon noise (low light); ImageNet-C definition."""
    c = [60, 25, 12, 5, 3][severity - 1]
    lam = (x * c).permute(0, 2, 3, 1)  # the reference's H x W x 3 layout, so its Poisson draws line up
    grey = torch.round(x * 255)
    levels = None
    if bool((grey / 255 == x).all()):  # a uint8 picture: 256 means, one CDF table each
        means = torch.arange(256, dtype=torch.float64, device=x.device) / 255 * c
        levels = (means, grey.permute(0, 2, 3, 1).long())
    return _channels_first(poisson_fields(draws, lam, levels)) / float(c)


@corruption("impulse_noise", group="noise")
def impulse_noise(x: torch.Tensor, severity: int, draws: Sequence[Draws]) -> torch.Tensor:
    """Salt-and-pepper noise (bit errors, dead pixels); ImageNet-C definition."""
    amount = [.03, .06, .09, 0.17, 0.27][severity - 1]
    h, w = x.shape[-2:]
    # skimage's random_noise(mode='s&p'): every value (each channel on its own) flips with probability `amount`,
    # a flipped value becomes 1 or 0 with even odds (salt_vs_pepper=0.5); both fields compare uniforms with <=.
    flipped = _channels_first(uniform_fields(draws, 0.0, 1.0, (h, w, 3), x.device, x.dtype)) <= amount
    salted = _channels_first(uniform_fields(draws, 0.0, 1.0, (h, w, 3), x.device, x.dtype)) <= 0.5
    return torch.where(flipped, salted.to(x.dtype), x)


@corruption("speckle_noise", group="noise")
def speckle_noise(x: torch.Tensor, severity: int, draws: Sequence[Draws]) -> torch.Tensor:
    """Multiplicative speckle noise (coherent imaging, compression of noisy scans); ImageNet-C definition."""
    c = [.15, .2, 0.35, 0.45, 0.6][severity - 1]
    h, w = x.shape[-2:]
    return x + x * _channels_first(normal_fields(draws, (h, w, 3), scale=c, device=x.device, dtype=x.dtype))
