"""The machinery every batched ImageNet-C corruption shares: batching, randomness, filters and colour space.

A corruption is `fn(x, severity, draws) -> y` on a float32 batch `x` of shape B x 3 x H x W in [0, 1] (already on
its device), with one `Draws` per image; `y` may leave [0, 1], `run_batched` clips it. The filters reproduce the
boundary rules of the scipy/skimage/OpenCV calls the reference (`imagecorruptions` 1.1.2) makes, so that the
fidelity tests can compare pixel values, and they accept any image size, however small.
"""
from __future__ import annotations

import functools
import math
import os
from typing import Callable, Optional, Sequence, Tuple

import numpy as np
import torch
import torch.nn.functional as F

from ...data import keyed
from ...data.pictures import as_picture, groups_by_size, is_tensor_batch, to_array
from ..registry import register

DEVICE_ENV = "MEMEROBUST_PERTURB_DEVICE"
# Pictures per call of a corruption. On a GPU a large batch keeps it busy (and bounds its memory for large memes);
# on a CPU small batches stay in cache, which measured fastest (bench/imagenet_c.py).
CHUNK = {"cuda": 128, "cpu": 8}
CHUNK_PIXELS = {"cuda": 128 * 512 * 512, "cpu": 8 * 512 * 512}
FFT_MIN_TAPS = 121  # filter2d convolves kernels of at least this many taps (11 x 11) through the FFT

Corruption = Callable[[torch.Tensor, int, Sequence["Draws"]], torch.Tensor]


def default_device() -> torch.device:
    """Where corruptions run: `$MEMEROBUST_PERTURB_DEVICE` if set, else the GPU when there is one."""
    name = os.environ.get(DEVICE_ENV)
    if name:
        return torch.device(name)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


class Draws:
    """The random numbers of one picture, keyed by that picture's own generator.

    Scalars (an angle, a crop offset) come from the numpy `rng`. Fields come from `keyed`: each field is a hash of
    (the picture's key, the field's number, the element's index) computed on the device, so a picture's corruption
    is the same in any batch, order or worker, and no field crosses from the CPU. The method names and argument
    orders mirror `numpy.random`, which lets the fidelity tests substitute the reference's global-state draws one
    for one; the `*_fields` functions below draw one field per picture for a whole batch in one pass.
    """

    def __init__(self, rng: np.random.Generator, device: torch.device | str = "cpu"):
        self.rng = rng
        self.device = torch.device(device)
        self.key = int(rng.integers(2**63))
        self._fields = 0  # fields drawn so far: the next field's number

    def next_keys(self, count: int) -> list[tuple[int, int]]:
        """Round keys of this picture's next `count` fields."""
        keys = [keyed.field_keys(self.key, self._fields + i) for i in range(count)]
        self._fields += count
        return keys

    def normal(self, shape: tuple[int, ...], loc: float = 0.0, scale: float = 1.0) -> torch.Tensor:
        return normal_fields([self], shape, loc, scale, self.device)[0]

    def uniform(self, low: float, high: float, shape: tuple[int, ...] | None = None):
        if shape is None:
            return float(self.rng.uniform(low, high))
        return uniform_fields([self], low, high, shape, self.device)[0]

    def integers(self, low: int, high: int, shape: tuple[int, ...] | None = None):
        """Integers in [low, high), as `numpy.random.randint`."""
        if shape is None:
            return int(self.rng.integers(low, high))
        return integer_fields([self], low, high, shape, self.device)[0]

    def poisson(self, lam: torch.Tensor) -> torch.Tensor:
        return poisson_fields([self], lam[None].to(self.device))[0]


def _stream_keys(draws: Sequence, streams: int, device: torch.device) -> list[torch.Tensor] | None:
    """Per stream, the [B, 2] round keys of every picture's next field; None when some draws are not keyed (the
    fidelity tests' reference draws), which then draw one picture at a time."""
    if not all(isinstance(d, Draws) for d in draws):
        return None
    keys = [d.next_keys(streams) for d in draws]
    return [torch.tensor([k[s] for k in keys], dtype=torch.int32, device=device) for s in range(streams)]


def normal_fields(draws: Sequence[Draws], shape: tuple[int, ...], loc: float = 0.0, scale: float = 1.0,
                  device=None, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """[B, *shape]: one normal field per picture, from each picture's own draws, computed on `device`."""
    device = torch.device(device) if device is not None else draws[0].device
    keys = _stream_keys(draws, 2, device)
    if keys is None:
        return torch.stack([d.normal(shape, loc=loc, scale=scale).to(device, dtype) for d in draws])
    return (keyed.normals((keys[0], keys[1]), shape) * scale + loc).to(dtype)


def uniform_fields(draws: Sequence[Draws], low: float, high: float, shape: tuple[int, ...], device=None,
                   dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """[B, *shape]: one uniform field in [low, high) per picture, computed on `device`."""
    device = torch.device(device) if device is not None else draws[0].device
    keys = _stream_keys(draws, 1, device)
    if keys is None:
        return torch.stack([d.uniform(low, high, shape).to(device, dtype) for d in draws])
    return keyed.uniforms(keys[0], shape, dtype) * (high - low) + low


def integer_fields(draws: Sequence[Draws], low: int, high: int, shape: tuple[int, ...], device=None) -> torch.Tensor:
    """[B, *shape]: one field of integers in [low, high) per picture, computed on `device`."""
    device = torch.device(device) if device is not None else draws[0].device
    keys = _stream_keys(draws, 1, device)
    if keys is None:
        return torch.stack([d.integers(low, high, shape).to(device) for d in draws])
    u = keyed.uniforms(keys[0], shape, torch.float64)
    return (torch.floor(u * (high - low)) + low).long().clamp(max=high - 1)


def poisson_fields(draws: Sequence[Draws], lam: torch.Tensor,
                   levels: Optional[Tuple[torch.Tensor, torch.Tensor]] = None) -> torch.Tensor:
    """Poisson counts for a batch of means `lam` [B, ...], each picture's from its own draws, on lam's device.
    `levels` = (means, index) says that lam is means[index] (a picture's grey levels): one table lookup then
    replaces the per-element search."""
    keys = _stream_keys(draws, 1, lam.device)
    if keys is None:
        return torch.stack([d.poisson(lam[i]).to(lam.device, lam.dtype) for i, d in enumerate(draws)])
    u = keyed.uniforms(keys[0], lam.shape[1:], torch.float64)
    if levels is not None:
        return keyed.poisson_of_levels(levels[0], levels[1], u).to(lam.dtype)
    return keyed.poisson(lam, u).to(lam.dtype)


def stack_fields(draws: Sequence[Draws], field: Callable[[Draws], torch.Tensor], device: torch.device,
                 dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """One random field per picture, each drawn from that picture's own draws, stacked on the device."""
    return torch.stack([field(d).to(device, dtype) for d in draws])


# --- batching -----------------------------------------------------------------------------------------------


def to_uint8(x: torch.Tensor) -> torch.Tensor:
    """[0, 1] floats to uint8 by truncation, as the reference's `np.uint8(clip(x, 0, 1) * 255)`. The 1e-3 guard
    keeps float32 round-off (k/255*255 = k - 1e-5) from losing a level the float64 reference keeps."""
    return torch.floor(x.clamp(0, 1) * 255 + 1e-3).clamp(0, 255).to(torch.uint8)


def chunk_size(device: torch.device, height: int, width: int) -> int:
    """Pictures per call of a corruption on `device`: `CHUNK` for pictures up to `CHUNK_PIXELS` / CHUNK pixels,
    fewer for larger ones, so that peak memory stays bounded (1,024 x 1,024 memes get a quarter of 512 x 512's)."""
    kind = device.type if device.type in CHUNK else "cpu"
    return max(1, min(CHUNK[kind], CHUNK_PIXELS[kind] // (height * width)))


def run_batched(corruption: Corruption, images: Sequence, severity: int, rngs: Sequence[np.random.Generator],
                device: torch.device | str | None = None, chunk: int | None = None) -> list:
    """Apply `corruption` to pictures of any sizes: same-size pictures are stacked into one batch, and every picture
    keeps its own draws, so the result does not depend on how pictures are grouped.

    Picture tensors (3 x H x W uint8) are corrupted on their own device and come back as tensors there; arrays
    (H x W x 3, a library user's) are corrupted on `default_device()` and come back as arrays. `device` overrides."""
    arrays = not is_tensor_batch(images)
    pictures = [as_picture(x) for x in images]
    out: list = [None] * len(pictures)
    for (h, w), indices in groups_by_size(pictures).items():
        here = (torch.device(device) if device is not None
                else default_device() if arrays else pictures[indices[0]].device)
        step = chunk or chunk_size(here, h, w)
        for start in range(0, len(indices), step):
            part = indices[start : start + step]
            draws = [Draws(rngs[i], here) for i in part]
            x = torch.stack([pictures[i].to(here, non_blocking=True) for i in part]).float() / 255.0
            # TF32 convolutions would cost the GPU output levels the fidelity tests hold it to
            with torch.no_grad(), torch.backends.cudnn.flags(enabled=True, allow_tf32=False):
                y = to_uint8(corruption(x, severity, draws))
            for i, picture in zip(part, y):
                out[i] = to_array(picture) if arrays else picture
    return out


# --- padding and filters ------------------------------------------------------------------------------------


def boundary_indices(n: int, before: int, after: int, mode: str, device=None) -> torch.Tensor:
    """Source index of each position in [-before, n + after) of an axis of length n, for any padding width.

    `nearest` repeats the edge (scipy 'nearest', OpenCV REPLICATE); `reflect` mirrors including the edge
    (scipy 'reflect', OpenCV REFLECT); `mirror` mirrors without repeating it (scipy 'mirror', OpenCV REFLECT_101,
    torch 'reflect').
    """
    i = torch.arange(-before, n + after, device=device)
    if mode == "nearest" or n == 1:
        return i.clamp(0, n - 1)
    if mode == "reflect":
        i = i % (2 * n)
        return torch.where(i < n, i, 2 * n - 1 - i)
    if mode == "mirror":
        i = i % (2 * n - 2)
        return torch.where(i < n, i, 2 * n - 2 - i)
    raise ValueError(f"unknown boundary mode {mode!r}")


def pad2d(x: torch.Tensor, ry: int, rx: int, mode: str) -> torch.Tensor:
    """Pad the last two axes by ry rows and rx columns on each side."""
    h, w = x.shape[-2:]
    x = x.index_select(-2, boundary_indices(h, ry, ry, mode, x.device))
    return x.index_select(-1, boundary_indices(w, rx, rx, mode, x.device))


def filter2d(x: torch.Tensor, kernel: torch.Tensor | np.ndarray, mode: str = "mirror") -> torch.Tensor:
    """Correlate every channel with one odd-sized 2-D kernel (OpenCV `filter2D`, whose default border is
    REFLECT_101 = `mirror`). Large kernels go through the FFT, as OpenCV's do: 4-5x faster on a CPU for the
    21 x 21 defocus disk, within 1e-6."""
    kernel = torch.as_tensor(np.asarray(kernel), dtype=x.dtype, device=x.device)
    kh, kw = kernel.shape
    shape = x.shape
    flat = pad2d(x.reshape(-1, 1, *shape[-2:]), kh // 2, kw // 2, mode)
    if kh * kw < FFT_MIN_TAPS:
        return F.conv2d(flat, kernel[None, None]).reshape(shape)
    # circular convolution of the padded picture with the flipped kernel; the last H x W outputs never wrap
    size = flat.shape[-2:]
    spectrum = torch.fft.rfft2(flat, s=size) * torch.fft.rfft2(kernel.flip(0, 1), s=size)
    return torch.fft.irfft2(spectrum, s=size)[..., kh - 1 :, kw - 1 :].reshape(shape)


def sampled_gaussian(taps: np.ndarray, sigma: float) -> np.ndarray:
    """A Gaussian sampled at `taps` (offsets from its centre) and normalised to sum 1: the kernel behind scipy's
    gaussian_filter, OpenCV's getGaussianKernel and the reference's motion blur alike."""
    k = np.exp(-0.5 * (np.asarray(taps, dtype=np.float64) / sigma) ** 2)
    return k / k.sum()


def gaussian_kernel1d(sigma: float, truncate: float = 4.0) -> np.ndarray:
    """scipy.ndimage's kernel: radius int(truncate * sigma + 0.5)."""
    radius = int(truncate * float(sigma) + 0.5)
    return sampled_gaussian(np.arange(-radius, radius + 1), sigma)


def correlate1d(x: torch.Tensor, kernel: np.ndarray, dim: int, mode: str) -> torch.Tensor:
    """Correlate one axis with an odd 1-D kernel, padding by `mode` (see `boundary_indices`). A sum of shifted
    slices: faster than conv1d on the CPU for these short kernels, and exact float arithmetic on the GPU (no TF32)."""
    radius = len(kernel) // 2
    n = x.shape[dim]
    padded = x.index_select(dim, boundary_indices(n, radius, radius, mode, x.device))
    out = torch.zeros_like(x)
    for i, weight in enumerate(np.asarray(kernel, dtype=np.float64).tolist()):
        out += weight * padded.narrow(dim, i, n)
    return out


def gaussian_filter(x: torch.Tensor, sigma: float | tuple[float, float], mode: str = "nearest",
                    truncate: float = 4.0) -> torch.Tensor:
    """Gaussian blur of the last two axes with scipy.ndimage.gaussian_filter's kernel and boundary (the skimage
    `gaussian` the reference calls defaults to mode 'nearest'). A sigma of 0 leaves its axis alone."""
    sy, sx = (sigma, sigma) if np.isscalar(sigma) else sigma
    if sy > 0:
        x = correlate1d(x, gaussian_kernel1d(sy, truncate), -2, mode)
    if sx > 0:
        x = correlate1d(x, gaussian_kernel1d(sx, truncate), -1, mode)
    return x


# --- geometry -----------------------------------------------------------------------------------------------


def _linear_axis(x: torch.Tensor, dim: int, start: int, length: int, size: int) -> torch.Tensor:
    """Resample `length` entries of axis `dim` from `start` to `size` samples, linearly, with scipy.ndimage.zoom's
    corner-aligned grid (output i reads input start + i * (length - 1) / (size - 1))."""
    if size == 1 or length == 1:
        coords = torch.full((size,), float(start), dtype=torch.float64)
    else:
        coords = start + torch.arange(size, dtype=torch.float64) * ((length - 1) / (size - 1))
    low = coords.floor().long().clamp(max=start + length - 1)
    high = (low + 1).clamp(max=start + length - 1)
    frac = (coords - low).to(x.dtype).to(x.device)
    shape = [1] * x.ndim
    shape[dim] = size
    a = x.index_select(dim, low.to(x.device))
    b = x.index_select(dim, high.to(x.device))
    return a + (b - a) * frac.reshape(shape)


def clipped_zoom(x: torch.Tensor, zoom: float, crop: bool = True) -> torch.Tensor:
    """Zoom into the centre of the last two axes by `zoom` and keep the top-left H x W, as the reference's
    `clipped_zoom` (a centre crop of ceil(n / zoom), scipy `zoom(order=1)` to round(crop * zoom)). Where the zoomed
    picture comes out smaller than H x W, the rest is 0, as in the reference's fallback. `crop=False` returns the
    whole zoomed picture (snow blurs it before cropping)."""
    h, w = x.shape[-2:]
    ch, cw = math.ceil(h / zoom), math.ceil(w / zoom)
    top, left = (h - ch) // 2, (w - cw) // 2
    oh, ow = round(ch * zoom), round(cw * zoom)
    y = _linear_axis(x, -2, top, ch, oh)
    y = _linear_axis(y, -1, left, cw, ow)
    if not crop:
        return y
    y = y[..., :h, :w]
    if y.shape[-2:] != (h, w):
        y = F.pad(y, (0, w - y.shape[-1], 0, h - y.shape[-2]))
    return y


def motion_kernel(radius: int, sigma: float) -> np.ndarray:
    """The reference's one-sided motion kernel: a half Gaussian over 2 * radius + 1 taps, normalised."""
    return sampled_gaussian(np.arange(2 * radius + 1), sigma)


def motion_blur(x: torch.Tensor, radius: int, sigma: float, angles: Sequence[float]) -> torch.Tensor:
    """The reference's `_motion_blur`: a weighted sum of copies of each picture shifted along its own angle (in
    degrees), each copy filling the vacated border with the edge pixels. A shift past the picture ends the sum for
    that picture, as in the reference. `x` is B x ... x H x W, one angle per picture."""
    kernel = motion_kernel(radius, sigma)
    width = len(kernel)
    h, w = x.shape[-2], x.shape[-1]
    out = torch.zeros_like(x)
    for n, angle in enumerate(angles):
        py, px = width * math.sin(math.radians(angle)), width * math.cos(math.radians(angle))
        hypot = math.hypot(py, px)
        # edge-replicated once, so every shifted copy is a view: shifted[i, j] = x[clamp(i - dy), clamp(j - dx)]
        padded = F.pad(x[n].reshape(1, -1, h, w), (width,) * 4, mode="replicate")
        padded = padded.reshape(*x.shape[1:-2], h + 2 * width, w + 2 * width)
        for i in range(width):
            dy = -math.ceil(i * py / hypot - 0.5)
            dx = -math.ceil(i * px / hypot - 0.5)
            if abs(dy) >= h or abs(dx) >= w:
                break
            out[n] += float(kernel[i]) * padded[..., width - dy : width - dy + h, width - dx : width - dx + w]
    return out


# --- colour -------------------------------------------------------------------------------------------------


def rgb_to_hsv(rgb: torch.Tensor) -> torch.Tensor:
    """B x 3 x H x W RGB in [0, 1] to HSV in [0, 1], as skimage.color.rgb2hsv (H = S = 0 for greys)."""
    r, g, b = rgb.unbind(1)
    v = rgb.amax(1)
    delta = v - rgb.amin(1)
    grey = delta == 0
    safe_delta = torch.where(grey, torch.ones_like(delta), delta)
    safe_v = torch.where(v == 0, torch.ones_like(v), v)
    s = torch.where(grey, torch.zeros_like(delta), delta / safe_v)
    # skimage assigns red-max, then green-max, then blue-max, so on ties the later channel wins
    h = torch.where(r == v, (g - b) / safe_delta, torch.zeros_like(v))
    h = torch.where(g == v, 2.0 + (b - r) / safe_delta, h)
    h = torch.where(b == v, 4.0 + (r - g) / safe_delta, h)
    h = torch.remainder(h / 6.0, 1.0)
    h = torch.where(grey, torch.zeros_like(h), h)
    return torch.stack([h, s, v], 1)


def hsv_to_rgb(hsv: torch.Tensor) -> torch.Tensor:
    """B x 3 x H x W HSV in [0, 1] to RGB, as skimage.color.hsv2rgb."""
    h, s, v = hsv.unbind(1)
    hi = torch.floor(h * 6)
    f = h * 6 - hi
    p = v * (1 - s)
    q = v * (1 - f * s)
    t = v * (1 - (1 - f) * s)
    sector = torch.remainder(hi.long(), 6)
    table = torch.stack([
        torch.stack([v, q, p, p, t, v]),
        torch.stack([t, v, v, q, p, p]),
        torch.stack([p, p, t, v, v, q]),
    ])  # channel x sector x B x H x W
    index = sector[None, None].expand(3, 1, *sector.shape)
    return table.gather(1, index)[:, 0].movedim(0, 1)


def rgb_to_gray(rgb: torch.Tensor) -> torch.Tensor:
    """B x 3 x H x W to B x 1 x H x W with ITU-R BT.601 weights (OpenCV's COLOR_RGB2GRAY)."""
    weights = torch.tensor([0.299, 0.587, 0.114], dtype=rgb.dtype, device=rgb.device)
    return (rgb * weights[None, :, None, None]).sum(1, keepdim=True)


# --- registration -------------------------------------------------------------------------------------------

CORRUPTIONS: dict[str, Corruption] = {}


def corruption(name: str, *, group: str, severities: Sequence[int] = (1, 2, 3, 4, 5)):
    """Register a batched corruption under `name`: one picture through `fn(x, severity, rng)`, many through the
    registry's batch path, both via `run_batched`, so the two give the same pixels."""

    def decorator(fn: Corruption) -> Corruption:
        @functools.wraps(fn)
        def one(picture: torch.Tensor, severity: int, rng: np.random.Generator) -> torch.Tensor:
            return run_batched(fn, [picture], severity, [rng])[0]

        def many(images, severity, rngs):
            return run_batched(fn, images, severity, rngs)

        register(name, modality="image", family=name, severities=severities, tags={"imagenet_c", group},
                 batch=many, takes="tensor")(one)
        CORRUPTIONS[name] = fn
        return fn

    return decorator
