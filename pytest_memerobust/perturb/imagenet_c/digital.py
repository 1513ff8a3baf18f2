"""ImageNet-C's digital corruptions: brightness, contrast, saturate, elastic transform, pixelate and JPEG, after
`imagecorruptions` 1.1.2.

pixelate reproduces Pillow's BOX and NEAREST resizes bit for bit (fixed-point weights, rounding to uint8 after
each pass), and jpeg_compression runs libjpeg's integer pipeline in torch (jpeg.py), so both equal the reference
exactly, on any device. Unlike the
reference, any picture size works: pixelate keeps at least one pixel per axis where the reference's Pillow call
would fail on a 0-pixel intermediate.
"""
from __future__ import annotations

import functools
import itertools
from typing import Sequence

import torch

from ...data.pictures import pillow_box_resize
from .jpeg import jpeg_roundtrip
from .tensor import (Draws, boundary_indices, corruption, gaussian_filter, hsv_to_rgb, rgb_to_hsv, to_uint8,
                     uniform_fields)


@corruption("brightness", group="digital")
def brightness(x: torch.Tensor, severity: int, draws: Sequence[Draws]) -> torch.Tensor:
    """Raise the HSV value (over-exposure, brightening filters), as memes get lightened on re-upload; ImageNet-C."""
    c = [.1, .2, .3, .4, .5][severity - 1]
    hsv = rgb_to_hsv(x)
    hsv[:, 2] = (hsv[:, 2] + c).clamp(0, 1)
    return hsv_to_rgb(hsv)


@corruption("contrast", group="digital")
def contrast(x: torch.Tensor, severity: int, draws: Sequence[Draws]) -> torch.Tensor:
    """Pull every pixel towards its channel's mean (haze, washed-out screenshots of screenshots); ImageNet-C."""
    c = [0.4, .3, .2, .1, .05][severity - 1]
    means = x.mean(dim=(2, 3), keepdim=True)
    return (x - means) * c + means


@corruption("saturate", group="digital")
def saturate(x: torch.Tensor, severity: int, draws: Sequence[Draws]) -> torch.Tensor:
    """Scale the HSV saturation: the faded or deep-fried colours of meme filters; ImageNet-C."""
    scale, shift = [(0.3, 0), (0.1, 0), (2, 0), (5, 0.1), (20, 0.2)][severity - 1]
    hsv = rgb_to_hsv(x)
    hsv[:, 1] = (hsv[:, 1] * scale + shift).clamp(0, 1)
    return hsv_to_rgb(hsv)


# --- elastic transform --------------------------------------------------------------------------------------


def map_coordinates_linear(x: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor,
                           mode: str = "reflect") -> torch.Tensor:
    """Sample every channel of `x` (B x C x H x W) at fractional positions `rows`, `cols` (B x H' x W') bilinearly,
    reading outside the picture by `mode` (see `boundary_indices`), as scipy.ndimage.map_coordinates(order=1)."""
    b, c, h, w = x.shape
    top, left = rows.floor(), cols.floor()
    fy, fx = (rows - top)[:, None], (cols - left)[:, None]
    top, left = top.long(), left.long()

    def source(i: torch.Tensor, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The in-picture indices of positions i and i + 1, through a lookup table that spans both."""
        before = max(0, -int(i.min()))
        table = boundary_indices(n, before, max(0, int(i.max()) + 2 - n), mode, x.device)
        return table[i + before], table[i + 1 + before]

    r0, r1 = source(top, h)
    c0, c1 = source(left, w)
    flat = x.reshape(b, c, h * w)

    def at(r: torch.Tensor, col: torch.Tensor) -> torch.Tensor:
        index = (r * w + col).reshape(b, 1, -1).expand(b, c, -1)
        return flat.gather(2, index).reshape(b, c, *rows.shape[1:])

    upper = at(r0, c0) * (1 - fx) + at(r0, c1) * fx
    lower = at(r1, c0) * (1 - fx) + at(r1, c1) * fx
    return upper * (1 - fy) + lower * fy


@corruption("elastic_transform", group="digital")
def elastic_transform(x: torch.Tensor, severity: int, draws: Sequence[Draws]) -> torch.Tensor:
    """Warp by a smooth random displacement field (lens, scan and phone-photo-of-a-screen wobble); ImageNet-C."""
    alpha = [250 * 0.05, 250 * 0.065, 250 * 0.085, 250 * 0.1, 250 * 0.12][severity - 1]
    h, w = x.shape[-2:]
    max_shift = h * 0.005  # the reference uses the height for both axes
    dx = uniform_fields(draws, -max_shift, max_shift, (h, w), x.device)
    dy = uniform_fields(draws, -max_shift, max_shift, (h, w), x.device)
    fields = torch.stack([dy, dx], dim=1)
    shifts = gaussian_filter(fields, (h * 0.01, w * 0.01), mode="reflect", truncate=3.0) * alpha
    rows = torch.arange(h, device=x.device, dtype=torch.float32)[:, None] + shifts[:, 0]
    cols = torch.arange(w, device=x.device, dtype=torch.float32) + shifts[:, 1]
    return map_coordinates_linear(x, rows, cols, mode="reflect")


# --- pixelate: Pillow's resizes -----------------------------------------------------------------------------

@functools.lru_cache(maxsize=256)
def pillow_nearest_index(n_in: int, n_out: int) -> torch.Tensor:
    """The input index of each output of Pillow's NEAREST resize of one axis (Geometry.c `ImagingScaleAffine`,
    which steps the sample position by repeated addition, so it is accumulated here the same way)."""
    step = n_in / n_out
    positions = itertools.accumulate([step * 0.5] + [step] * (n_out - 1))
    return torch.tensor([min(int(p), n_in - 1) for p in positions])


@corruption("pixelate", group="digital")
def pixelate(x: torch.Tensor, severity: int, draws: Sequence[Draws]) -> torch.Tensor:
    """Box-shrink and blow back up with nearest neighbour, as thumbnails of memes get re-enlarged; ImageNet-C."""
    c = [0.6, 0.5, 0.4, 0.3, 0.25][severity - 1]
    h, w = x.shape[-2:]
    small_h, small_w = max(int(h * c), 1), max(int(w * c), 1)  # Pillow refuses 0 pixels; tiny pictures keep 1
    small = pillow_box_resize(to_uint8(x).to(torch.int32), small_h, small_w)
    rows = pillow_nearest_index(small_h, h).to(x.device)
    cols = pillow_nearest_index(small_w, w).to(x.device)
    return small[..., rows, :][..., cols].to(x.dtype) / 255.0


@corruption("jpeg_compression", group="digital")
def jpeg_compression(x: torch.Tensor, severity: int, draws: Sequence[Draws]) -> torch.Tensor:
    """Re-encode as low-quality JPEG, as memes are re-shared and re-compressed; ImageNet-C. libjpeg's encoder and
    decoder in torch on the pictures' device (jpeg.py), equal to Pillow's round trip."""
    quality = [25, 18, 15, 10, 7][severity - 1]
    return jpeg_roundtrip(to_uint8(x), quality).to(x.dtype) / 255.0
