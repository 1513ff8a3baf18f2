"""ImageNet-C's weather corruptions: snow, frost, fog and spatter, after `imagecorruptions` 1.1.2.

Each picture's random numbers come from its own `Draws`, asked for in the reference's order and shapes, so the
fidelity tests can feed the reference's own numbers. Spatter's water drops (severities 1-3) run the reference's
OpenCV chain (Canny, distance transform, histogram equalisation, filters) re-implemented in torch.
"""
from __future__ import annotations

import functools
import math
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image

from .tensor import (Draws, clipped_zoom, corruption, filter2d, gaussian_filter, motion_blur, normal_fields,
                     rgb_to_gray, stack_fields, uniform_fields)

FROST_DIR = Path(__file__).parent / "frost"
FROST_FILES = ("frost1.png", "frost2.png", "frost3.png", "frost4.jpg", "frost5.jpg")


# --- snow ---------------------------------------------------------------------------------------------------


@corruption("snow", group="weather")
def snow(x: torch.Tensor, severity: int, draws: Sequence[Draws]) -> torch.Tensor:
    """Falling snow: streaks of flakes over a whitened scene (outdoor cameras in winter); ImageNet-C definition."""
    c = [(0.1, 0.3, 3, 0.5, 10, 4, 0.8),
         (0.2, 0.3, 2, 0.5, 12, 4, 0.7),
         (0.55, 0.3, 4, 0.9, 12, 8, 0.7),
         (0.55, 0.3, 4.5, 0.85, 12, 8, 0.65),
         (0.55, 0.3, 2.5, 0.85, 12, 12, 0.55)][severity - 1]
    h, w = x.shape[-2:]
    # per picture, the flake field first, then the angle of the fall (the reference's order)
    fields = normal_fields(draws, (h, w), loc=c[0], scale=c[1], device=x.device)
    angles = [d.uniform(-135, -45) for d in draws]
    # float64 like the reference: the layer is rounded to 1/255 steps below, where float32 error flips levels
    flakes = clipped_zoom(fields[:, None].double(), c[2], crop=False)
    flakes = torch.where(flakes < c[3], 0.0, flakes).clamp(0, 1)
    flakes = motion_blur(flakes, radius=c[4], sigma=c[5], angles=angles)
    flakes = (torch.round(flakes * 255) / 255)[..., :h, :w].to(x.dtype)
    x = c[6] * x + (1 - c[6]) * torch.maximum(x, rgb_to_gray(x) * 1.5 + 0.5)
    return x + flakes + flakes.flip(-2, -1)


# --- frost --------------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=len(FROST_FILES))
def _frost_photo(index: int) -> torch.Tensor:
    """Frost photograph `index` as 3 x h x w uint8 RGB (the reference reads BGR with OpenCV and flips it)."""
    with Image.open(FROST_DIR / FROST_FILES[index]) as photo:
        return torch.from_numpy(np.array(photo.convert("RGB"))).permute(2, 0, 1).contiguous()


@functools.lru_cache(maxsize=32)
def _frost_resized(index: int, height: int, width: int) -> torch.Tensor:
    """The photograph resized as OpenCV's INTER_CUBIC on uint8 (Keys' A = -0.75, half-pixel centres, rounded and
    saturated); torch's bicubic uses the same A, OpenCV's 11-bit fixed-point weights can move a level by one."""
    photo = _frost_photo(index)[None].float()
    resized = F.interpolate(photo, size=(height, width), mode="bicubic", align_corners=False)
    return resized[0].round().clamp(0, 255).to(torch.uint8)


def _frost_crop(d: Draws, height: int, width: int) -> torch.Tensor:
    """The reference's frost layer for one H x W picture: a random photograph, scaled to cover the picture with a
    10% margin, at a random offset. The margin (ceil(1.1 * n) > n) always leaves at least one offset, so the
    reference's `randint(0, 0)` crash cannot happen at any picture size."""
    index = d.integers(0, 5)
    photo_h, photo_w = _frost_photo(index).shape[1:]
    scale = max(1.0, height / photo_h, width / photo_w) * 1.1
    texture = _frost_resized(index, math.ceil(photo_h * scale), math.ceil(photo_w * scale))
    top = d.integers(0, texture.shape[1] - height)
    left = d.integers(0, texture.shape[2] - width)
    return texture[:, top : top + height, left : left + width]


@corruption("frost", group="weather")
def frost(x: torch.Tensor, severity: int, draws: Sequence[Draws]) -> torch.Tensor:
    """Ice crystals on a lens or window blended over the scene (cold-weather cameras); ImageNet-C definition."""
    c = [(1, 0.4), (0.8, 0.6), (0.7, 0.7), (0.65, 0.7), (0.6, 0.75)][severity - 1]
    h, w = x.shape[-2:]
    ice = stack_fields(draws, lambda d: _frost_crop(d, h, w), x.device, x.dtype) / 255
    return c[0] * x + c[1] * ice


# --- fog ----------------------------------------------------------------------------------------------------


def _plasma_fractals(draws: Sequence[Draws], mapsize: int, wibble_decay: float, device) -> torch.Tensor:
    """The reference's `plasma_fractal` (diamond-square) for every picture of a batch at once: B height maps of
    mapsize x mapsize in [0, 1], each from its picture's own draws (the batch is bounded by `chunk_size`)."""
    heights = torch.zeros(len(draws), mapsize, mapsize, dtype=torch.float64, device=device)
    step, wibble = mapsize, 100.0

    def wibbled_mean(total: torch.Tensor) -> torch.Tensor:
        noise = uniform_fields(draws, -wibble, wibble, tuple(total.shape[1:]), device, torch.float64)
        return total / 4 + wibble * noise

    while step >= 2:
        half = step // 2
        # squares: each centre from its four corners
        corners = heights[:, ::step, ::step]
        total = corners + corners.roll(-1, 1)
        heights[:, half::step, half::step] = wibbled_mean(total + total.roll(-1, 2))
        # diamonds: each edge midpoint from the two centres and the two corners beside it
        centres, corners = heights[:, half::step, half::step], heights[:, ::step, ::step]
        heights[:, ::step, half::step] = wibbled_mean(centres + centres.roll(1, 1) + corners + corners.roll(-1, 2))
        heights[:, half::step, ::step] = wibbled_mean(centres + centres.roll(1, 2) + corners + corners.roll(-1, 1))
        step //= 2
        wibble /= wibble_decay
    heights = heights - heights.amin((1, 2), keepdim=True)
    return heights / heights.amax((1, 2), keepdim=True)


@corruption("fog", group="weather")
def fog(x: torch.Tensor, severity: int, draws: Sequence[Draws]) -> torch.Tensor:
    """Fog: a fractal haze that lifts dark values and flattens contrast (outdoor scenes, steam); ImageNet-C
    definition."""
    c = [(1.5, 2), (2., 2), (2.5, 1.7), (2.5, 1.5), (3., 1.4)][severity - 1]
    h, w = x.shape[-2:]
    mapsize = 1 << (max(h, w, 3) - 1).bit_length()  # next power of two of the reference's largest of H, W, C
    haze = _plasma_fractals(draws, mapsize, c[1], x.device)[:, :h, :w].to(x.dtype)
    brightest = x.amax((1, 2, 3), keepdim=True)
    return (x + c[0] * haze[:, None]) * brightest / (brightest + c[0])


# --- spatter ------------------------------------------------------------------------------------------------

SOBEL_X = np.array([[-1, 0, 1], [-2, 0, 2], [-1, 0, 1]])
TAN_22_5 = 13573  # OpenCV Canny's tan(22.5 deg) in 15-bit fixed point


def _canny(gray: torch.Tensor, low: int, high: int) -> torch.Tensor:
    """OpenCV's `Canny(gray, low, high)` (3x3 Sobel with replicated border, L1 magnitude) on B x 1 x H x W
    integer-valued floats: True on edges. Non-maximum suppression quantises the gradient direction as OpenCV does
    and treats magnitudes outside the picture as 0; hysteresis keeps candidates 8-connected to a strong one."""
    dx = filter2d(gray, SOBEL_X, mode="nearest").long()
    dy = filter2d(gray, SOBEL_X.T, mode="nearest").long()
    mag = dx.abs() + dy.abs()
    h, w = mag.shape[-2:]
    ring = F.pad(mag, (1, 1, 1, 1))

    def neighbour(di: int, dj: int) -> torch.Tensor:
        return ring[..., 1 + di : 1 + di + h, 1 + dj : 1 + dj + w]

    along_x = dy.abs() << 15 < dx.abs() * TAN_22_5
    along_y = dy.abs() << 15 > dx.abs() * TAN_22_5 + (dx.abs() << 16)
    same_sign = (dx ^ dy) >= 0
    peak_x = (mag > neighbour(0, -1)) & (mag >= neighbour(0, 1))
    peak_y = (mag > neighbour(-1, 0)) & (mag >= neighbour(1, 0))
    peak_diagonal = torch.where(same_sign, (mag > neighbour(-1, -1)) & (mag > neighbour(1, 1)),
                                (mag > neighbour(-1, 1)) & (mag > neighbour(1, -1)))
    candidate = (mag > low) & torch.where(along_x, peak_x, torch.where(along_y, peak_y, peak_diagonal))
    edges = candidate & (mag > high)
    while True:
        grown = candidate & (F.max_pool2d(edges.float(), 3, 1, 1) > 0)
        if torch.equal(grown, edges):
            return edges
        edges = grown


def _distance_to_edges(edges: torch.Tensor, cap: float) -> torch.Tensor:
    """OpenCV's `distanceTransform(255 - edges, DIST_L2, 5)` truncated at `cap`: the shortest chain of steps of
    OpenCV's 5x5 chamfer mask (unit 1, diagonal 1.4, knight's move 2.1969) to an edge pixel, outside the picture
    being no edge, by relaxing every step in parallel until nothing changes. Starting from the cap changes no
    distance below it (its chain only passes nearer pixels), and such a chain has fewer than `cap` steps."""
    h, w = edges.shape[-2:]
    dist = torch.where(edges, 0.0, cap)

    def either_side(t: torch.Tensor, k: int) -> torch.Tensor:  # min of columns j - k and j + k, j in the picture
        return torch.minimum(t[..., 2 - k : 2 - k + w], t[..., 2 + k : 2 + k + w])

    for _ in range(math.ceil(cap)):
        ring = F.pad(dist, (2, 2, 2, 2), value=cap)
        row_1 = torch.minimum(ring[..., 1 : h + 1, :], ring[..., 3 : h + 3, :])  # rows i - 1 and i + 1
        row_2 = torch.minimum(ring[..., 0:h, :], ring[..., 4 : h + 4, :])  # rows i - 2 and i + 2
        unit = torch.minimum(row_1[..., 2 : w + 2], either_side(ring[..., 2 : h + 2, :], 1))
        knight = torch.minimum(either_side(row_1, 2), either_side(row_2, 1))
        # min(a + s, b + s) = min(a, b) + s exactly, as float rounding is monotonic
        nearer = torch.minimum(torch.minimum(dist, unit + 1.0),
                               torch.minimum(either_side(row_1, 1) + 1.4, knight + 2.1969))
        if torch.equal(nearer, dist):
            break
        dist = nearer
    return dist


def _box3(x: torch.Tensor) -> torch.Tensor:
    """3x3 sum with OpenCV's default border (reflect 101), in x's dtype."""
    return filter2d(x, np.ones((3, 3)))


def _equalize_hist(levels: torch.Tensor) -> torch.Tensor:
    """OpenCV's `equalizeHist` per picture of B x 1 x H x W integer levels: the cumulative count above the lowest
    level present, scaled in float32 by 255 / (pixels not at that level) and rounded; one level stays as it is."""
    b = levels.shape[0]
    flat = levels.reshape(b, -1).long()
    counts = torch.zeros(b, 256, dtype=torch.long, device=levels.device).scatter_add_(1, flat, torch.ones_like(flat))
    lowest = (counts > 0).long().argmax(1, keepdim=True)
    at_lowest = counts.gather(1, lowest)
    total = flat.shape[1]
    scale = 255.0 / (total - at_lowest).clamp(min=1).float()
    lut = torch.round((counts.cumsum(1) - at_lowest).float() * scale).clamp(0, 255)
    lut = torch.where(at_lowest == total, lowest.float(), lut)
    return lut.gather(1, flat).reshape(levels.shape)


def _water_drops(liquid: torch.Tensor, strength: float) -> torch.Tensor:
    """The reference's water mask from the thresholded liquid layer (B x 1 x H x W, float64): the liquid's uint8
    levels weighted by a texture built from the distance to the drops' Canny edges, scaled so its maximum is
    `strength` (0 where the picture has no drops, where the reference divides by zero)."""
    levels = torch.floor(liquid * 255).clamp(0, 255).float()
    dist = _distance_to_edges(_canny(levels, 50, 150), cap=20.0)
    dist = torch.floor((_box3(dist.double()) * (1 / 9)).float())  # cv2.blur on float32, then .astype(np.uint8)
    dist = _equalize_hist(dist)
    dist = filter2d(dist, np.array([[-2, -1, 0], [-1, 1, 1], [0, 1, 2]])).clamp(0, 255)  # filter2D to CV_8U
    dist = torch.round(_box3(dist) / 9)  # cv2.blur on uint8 rounds
    m = levels * dist
    peak = m.amax((1, 2, 3), keepdim=True)
    return torch.where(peak > 0, m / peak.clamp(min=1), 0.0) * strength


@corruption("spatter", group="weather")
def spatter(x: torch.Tensor, severity: int, draws: Sequence[Draws]) -> torch.Tensor:
    """Water drops or mud splashed on the lens (dashcams, outdoor cameras); ImageNet-C's validation corruption.

    Mud (severities 4-5) is the reference's formula. Water (1-3) re-implements its OpenCV chain in torch: Canny,
    the 5x5 chamfer distance (OpenCV's own approximation, not the exact Euclidean one; its float32 sums can differ
    from OpenCV's by an ulp), box blurs, equalizeHist and filter2D with OpenCV's rounding and saturation. A picture
    without drops gets no water, where the reference divides 0 by 0.
    """
    c = [(0.65, 0.3, 4, 0.69, 0.6, 0),
         (0.65, 0.3, 3, 0.68, 0.6, 0),
         (0.65, 0.3, 2, 0.68, 0.5, 0),
         (0.65, 0.3, 1, 0.65, 1.5, 1),
         (0.67, 0.4, 1, 0.65, 1.5, 1)][severity - 1]
    h, w = x.shape[-2:]
    # float64 like the reference: the liquid is cut at a threshold and truncated to levels, where float32 flips
    liquid = normal_fields(draws, (h, w), loc=c[0], scale=c[1], device=x.device, dtype=torch.float64)[:, None]
    liquid = gaussian_filter(liquid, c[2])
    liquid = torch.where(liquid < c[3], 0.0, liquid)
    if c[5] == 0:  # water, pale turquoise in the reference's channel order
        colour = torch.tensor([175, 238, 238], dtype=x.dtype, device=x.device)[None, :, None, None] / 255
        return x + _water_drops(liquid, c[4]).to(x.dtype) * colour
    mud = gaussian_filter((liquid > c[3]).float(), c[4]).to(x.dtype)
    mud = torch.where(mud < 0.8, 0.0, mud)
    colour = torch.tensor([63, 42, 20], dtype=x.dtype, device=x.device)[None, :, None, None] / 255
    return x * (1 - mud) + mud * colour
