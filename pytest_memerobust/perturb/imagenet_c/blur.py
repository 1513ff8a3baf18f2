"""ImageNet-C's blur corruptions: defocus, glass, motion, zoom and gaussian blur, after `imagecorruptions` 1.1.2."""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import torch

from . import tensor
from .tensor import (Draws, clipped_zoom, corruption, filter2d, gaussian_filter, integer_fields, sampled_gaussian,
                     to_uint8)


def cv2_gaussian_kernel1d(ksize: int, sigma: float) -> np.ndarray:
    """OpenCV's `getGaussianKernel` for sigma > 0 as GaussianBlur uses it on float32 pictures: sampled in float64,
    normalised, stored as float32."""
    return sampled_gaussian(np.arange(ksize) - (ksize - 1) / 2, sigma).astype(np.float32)


def disk(radius: int, alias_blur: float) -> np.ndarray:
    """The reference's defocus kernel: an aliased disk of `radius`, normalised, softened by OpenCV's GaussianBlur
    (separable, REFLECT_101 border, which is numpy's 'reflect')."""
    if radius <= 8:
        taps, ksize = np.arange(-8, 8 + 1), 3
    else:
        taps, ksize = np.arange(-radius, radius + 1), 5
    xs, ys = np.meshgrid(taps, taps)
    aliased = np.array(xs**2 + ys**2 <= radius**2, dtype=np.float32)
    aliased /= aliased.sum()
    g = cv2_gaussian_kernel1d(ksize, alias_blur)
    r = ksize // 2
    padded = np.pad(aliased, r, mode="reflect")
    size = len(taps)
    rows = sum(g[i] * padded[:, i : i + size] for i in range(ksize))  # along x, then along y, as sepFilter2D
    return sum(g[i] * rows[i : i + size] for i in range(ksize)).astype(np.float32)


@corruption("defocus_blur", group="blur")
def defocus_blur(x: torch.Tensor, severity: int, draws: Sequence[Draws]) -> torch.Tensor:
    """Out-of-focus lens blur (a disk kernel); ImageNet-C definition."""
    radius, alias_blur = [(3, 0.1), (4, 0.5), (6, 0.5), (8, 0.5), (10, 0.5)][severity - 1]
    return filter2d(x, disk(radius, alias_blur))


def _scrambled(where_from: torch.Tensor, targets: torch.Tensor, sources: torch.Tensor) -> torch.Tensor:
    """The reference's swap loop, vectorised. It visits `targets` in order (bottom-right to top-left) and its
    `x[h, w], x[h', w'] = x[h', w'], x[h, w]` swaps numpy views: after the first assignment the second copies the
    new x[h, w] back, so (h', w') keeps its pixel and each target takes what its source holds at that moment.
    A source that is a target visited earlier (a larger flat index) already holds its own source's pixel, so
    the result follows chains of such links to their ends, resolved by pointer doubling on the device.
    where_from: [B, H*W] current origin of every pixel; targets: [T] ascending-visit order; sources: [B, T]."""
    b, n = where_from.shape
    visited_earlier = torch.zeros(n, dtype=torch.bool, device=targets.device)
    visited_earlier[targets] = True
    linked = visited_earlier[sources] & (sources > targets)
    link = torch.arange(n, device=targets.device).repeat(b, 1)
    link.scatter_(1, targets.expand(b, -1), torch.where(linked, sources, targets.expand(b, -1)))
    end_value = where_from.clone()
    end_value.scatter_(1, targets.expand(b, -1), where_from.gather(1, sources))
    for _ in range(max(1, math.ceil(math.log2(n)) + 1)):
        jumped = link.gather(1, link)
        if torch.equal(jumped, link):
            break
        link = jumped
    return end_value.gather(1, link)


@corruption("glass_blur", group="blur")
def glass_blur(x: torch.Tensor, severity: int, draws: Sequence[Draws]) -> torch.Tensor:
    """Frosted-glass blur: blur, local pixel scrambling, blur again; ImageNet-C definition."""
    sigma, max_delta, iterations = [(0.7, 1, 2), (0.9, 2, 1), (1, 2, 3), (1.1, 3, 2), (1.5, 4, 2)][severity - 1]
    b, _, h, w = x.shape
    # the reference scrambles a uint8 picture, so the first blur is truncated to whole levels
    x = to_uint8(gaussian_filter(x, sigma)).to(x.dtype) / 255
    rows = np.arange(h - max_delta, max_delta, -1)  # the reference's loop order: bottom-right to top-left
    cols = np.arange(w - max_delta, max_delta, -1)
    targets = torch.from_numpy((rows[:, None] * w + cols[None, :]).ravel()).to(x.device)
    sources = torch.arange(h * w, device=x.device).repeat(b, 1)  # where each scrambled pixel comes from
    if len(targets):  # else too small for any swap: the reference draws nothing either
        for _ in range(iterations):
            shifts = integer_fields(draws, -max_delta, max_delta, (len(targets), 2), x.device)
            sources = _scrambled(sources, targets, targets + shifts[..., 1] * w + shifts[..., 0])
    index = sources.to(x.device)[:, None, :].expand(b, x.shape[1], h * w)
    x = x.reshape(b, -1, h * w).gather(2, index).reshape(x.shape)
    return gaussian_filter(x, sigma)


@corruption("motion_blur", group="blur")
def motion_blur(x: torch.Tensor, severity: int, draws: Sequence[Draws]) -> torch.Tensor:
    """Camera shake: blur along a random direction; ImageNet-C definition."""
    radius, sigma = [(10, 3), (15, 5), (15, 8), (15, 12), (20, 15)][severity - 1]
    angles = [d.uniform(-45, 45) for d in draws]
    # the reference blurs on the 0-255 scale; the kernel is linear, so [0, 1] gives the same picture
    return tensor.motion_blur(x, radius, sigma, angles)


@corruption("zoom_blur", group="blur")
def zoom_blur(x: torch.Tensor, severity: int, draws: Sequence[Draws]) -> torch.Tensor:
    """Blur of a camera zooming in during the exposure; ImageNet-C definition."""
    zooms = [np.arange(1, 1.11, 0.01),
             np.arange(1, 1.16, 0.01),
             np.arange(1, 1.21, 0.02),
             np.arange(1, 1.26, 0.02),
             np.arange(1, 1.31, 0.03)][severity - 1]
    out = torch.zeros_like(x)
    for zoom in zooms:
        out += clipped_zoom(x, float(zoom))
    return (x + out) / (len(zooms) + 1)


@corruption("gaussian_blur", group="blur")
def gaussian_blur(x: torch.Tensor, severity: int, draws: Sequence[Draws]) -> torch.Tensor:
    """Gaussian blur (soft focus, low-pass resampling); ImageNet-C definition."""
    sigma = [1, 2, 3, 4, 6][severity - 1]
    return gaussian_filter(x, sigma)
