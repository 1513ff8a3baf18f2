"""Image corruptions of ImageNet-C (Hendrycks & Dietterich, 2019, "Benchmarking neural network robustness to
common corruptions and perturbations"), after the reference implementation `imagecorruptions` 1.1.2.

The severity tables and formulas are the published ones. Two deliberate differences from the reference code:
the noise comes from the explicit `rng` instead of NumPy's global state, and any H x W is accepted (the
reference is written for 224 x 224 crops; these four corruptions do not depend on size). Like the reference,
which ends with `np.uint8(x)`, the float result in [0, 255] is truncated, not rounded, to uint8.
"""
from __future__ import annotations

from io import BytesIO

import numpy as np
from PIL import Image

from .registry import register

_TAGS = {"imagenet_c"}


def _check_image(x) -> np.ndarray:
    """Reject what is not an RGB uint8 picture of shape H x W x 3, naming the problem."""
    if not isinstance(x, np.ndarray):
        raise ValueError(f"image must be a numpy.ndarray, got {type(x).__name__}")
    if x.ndim != 3 or x.shape[2] != 3:
        raise ValueError(f"image must have shape HxWx3 (RGB), got shape {x.shape}")
    if x.shape[0] == 0 or x.shape[1] == 0:
        raise ValueError(f"image is empty: shape {x.shape}")
    if x.dtype != np.uint8:
        raise ValueError(f"image dtype must be uint8, got {x.dtype}")
    return x


# --- colour space: the semantics of skimage.color.rgb2hsv / hsv2rgb, vectorised ------------------------------


def rgb_to_hsv(rgb: np.ndarray) -> np.ndarray:
    """RGB floats in [0, 1] (..., 3) to HSV in [0, 1], as skimage.color.rgb2hsv (H = 0 and S = 0 for greys)."""
    rgb = np.asarray(rgb, dtype=np.float64)
    r, g, b = rgb[..., 0], rgb[..., 1], rgb[..., 2]
    v = rgb.max(axis=-1)
    delta = v - rgb.min(axis=-1)
    grey = delta == 0
    safe_delta = np.where(grey, 1.0, delta)
    safe_v = np.where(v == 0, 1.0, v)
    s = np.where(grey, 0.0, delta / safe_v)
    # skimage assigns red-max, then green-max, then blue-max, so on ties the later channel wins
    h = np.where(r == v, (g - b) / safe_delta, 0.0)
    h = np.where(g == v, 2.0 + (b - r) / safe_delta, h)
    h = np.where(b == v, 4.0 + (r - g) / safe_delta, h)
    h = (h / 6.0) % 1.0
    h = np.where(grey, 0.0, h)
    return np.stack([h, s, v], axis=-1)


def hsv_to_rgb(hsv: np.ndarray) -> np.ndarray:
    """HSV in [0, 1] (..., 3) to RGB floats in [0, 1], as skimage.color.hsv2rgb."""
    hsv = np.asarray(hsv, dtype=np.float64)
    h, s, v = hsv[..., 0], hsv[..., 1], hsv[..., 2]
    hi = np.floor(h * 6)
    f = h * 6 - hi
    p = v * (1 - s)
    q = v * (1 - f * s)
    t = v * (1 - (1 - f) * s)
    sector = hi.astype(np.int64) % 6
    cases = [sector == k for k in range(6)]
    r = np.select(cases, [v, q, p, p, t, v])
    g = np.select(cases, [t, v, v, q, p, p])
    b = np.select(cases, [p, p, t, v, v, q])
    return np.stack([r, g, b], axis=-1)


def _to_uint8(x: np.ndarray) -> np.ndarray:
    # truncation, not rounding: the reference returns np.uint8(np.clip(x, 0, 1) * 255)
    return (np.clip(x, 0, 1) * 255).astype(np.uint8)


# --- registered corruptions ---------------------------------------------------------------------------------


@register("gaussian_noise", modality="image", family="gaussian_noise", severities=(1, 2, 3, 4, 5),
          label_preserving=True, tags=_TAGS)
def gaussian_noise(x: np.ndarray, severity: int, rng: np.random.Generator) -> np.ndarray:
    """Additive Gaussian noise (sensor noise in low light); ImageNet-C definition, sigma on the [0, 1] scale."""
    c = [.08, .12, .18, .26, .38][severity - 1]
    x = _check_image(x) / 255.0
    return _to_uint8(x + rng.normal(size=x.shape, scale=c))


@register("contrast", modality="image", family="contrast", severities=(1, 2, 3, 4, 5),
          label_preserving=True, tags=_TAGS)
def contrast(x: np.ndarray, severity: int, rng: np.random.Generator) -> np.ndarray:
    """Pull every pixel towards the per-channel image mean (fog, washed-out screenshots); ImageNet-C definition."""
    c = [0.4, .3, .2, .1, .05][severity - 1]
    x = _check_image(x) / 255.0
    means = np.mean(x, axis=(0, 1), keepdims=True)
    return _to_uint8((x - means) * c + means)


@register("jpeg_compression", modality="image", family="jpeg_compression", severities=(1, 2, 3, 4, 5),
          label_preserving=True, tags=_TAGS)
def jpeg_compression(x: np.ndarray, severity: int, rng: np.random.Generator) -> np.ndarray:
    """Re-encode as low-quality JPEG (memes are re-shared and re-compressed); ImageNet-C definition. No rng."""
    c = [25, 18, 15, 10, 7][severity - 1]
    buf = BytesIO()
    Image.fromarray(np.ascontiguousarray(_check_image(x))).save(buf, format="JPEG", quality=c)
    buf.seek(0)
    with Image.open(buf) as img:
        return np.array(img.convert("RGB"), dtype=np.uint8)


@register("brightness", modality="image", family="brightness", severities=(1, 2, 3, 4, 5),
          label_preserving=True, tags=_TAGS)
def brightness(x: np.ndarray, severity: int, rng: np.random.Generator) -> np.ndarray:
    """Raise the HSV value channel (over-exposure); ImageNet-C definition."""
    c = [.1, .2, .3, .4, .5][severity - 1]
    hsv = rgb_to_hsv(_check_image(x) / 255.0)
    hsv[..., 2] = np.clip(hsv[..., 2] + c, 0, 1)
    return _to_uint8(hsv_to_rgb(hsv))
