"""Pictures as uint8 tensors (3 x H x W, RGB) on the detector's device, from decode to encoder.

Moving pictures through numpy and PIL one at a time is what kept a GPU idle: here a picture is decoded once (on the
GPU with torchvision's nvjpeg decoder where torchvision is installed, else by PIL), stays a tensor on its device
through every perturbation, and is resized, cropped and normalised for the encoder on that device. numpy arrays
(H x W x 3) are accepted and returned only at the edges: files, PNGs, and library users who hand in arrays.
"""
from __future__ import annotations

import functools
import hashlib
import math
import warnings
from pathlib import Path
from typing import Sequence

import numpy as np
import PIL
import torch
import torch.nn.functional as F

from ..errors import DataError
from .image_files import check_picture_size, load_rgb

DIGEST_CHUNK = 16  # pictures hashed per pass: bounds the int64 temporaries of a batch of large pictures


def check_picture(x) -> torch.Tensor:
    """Reject what is not an RGB uint8 picture tensor of shape 3 x H x W, naming the problem."""
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"picture must be a torch.Tensor (3xHxW) or a numpy.ndarray (HxWx3), got {type(x).__name__}")
    if x.ndim != 3 or x.shape[0] != 3:
        raise ValueError(f"picture must have shape 3xHxW (RGB), got shape {tuple(x.shape)}")
    if x.shape[1] == 0 or x.shape[2] == 0:
        raise ValueError(f"picture is empty: shape {tuple(x.shape)}")
    if x.dtype != torch.uint8:
        raise ValueError(f"picture dtype must be uint8, got {x.dtype}")
    return x


def check_array(x) -> np.ndarray:
    """Reject what is not an RGB uint8 picture array of shape H x W x 3, naming the problem (the contract of every
    picture at the edges, and of the perturbations written for numpy)."""
    if not isinstance(x, np.ndarray):
        raise ValueError(f"image must be a numpy.ndarray, got {type(x).__name__}")
    if x.ndim != 3 or x.shape[2] != 3:
        raise ValueError(f"image must have shape HxWx3 (RGB), got shape {x.shape}")
    if x.shape[0] == 0 or x.shape[1] == 0:
        raise ValueError(f"image is empty: shape {x.shape}")
    if x.dtype != np.uint8:
        raise ValueError(f"image dtype must be uint8, got {x.dtype}")
    return x


def as_picture(x, device: torch.device | str | None = None) -> torch.Tensor:
    """A picture tensor from a tensor (3 x H x W) or an array (H x W x 3), on `device` (default: where it is)."""
    if isinstance(x, np.ndarray):
        array = np.ascontiguousarray(check_array(x))
        x = torch.from_numpy(array if array.flags.writeable else array.copy()).permute(2, 0, 1)
    x = check_picture(x)
    return x if device is None else x.to(device, non_blocking=True)


def to_array(picture: torch.Tensor) -> np.ndarray:
    """The H x W x 3 uint8 array of a picture tensor, for the edges (PIL, PNGs, OCR)."""
    return np.ascontiguousarray(check_picture(picture).permute(1, 2, 0).cpu().numpy())


def is_tensor_batch(items: Sequence) -> bool:
    """Whether pictures came as tensors (then they go back as tensors), rather than as arrays."""
    return len(items) > 0 and isinstance(items[0], torch.Tensor)


def torchvision_io():
    """torchvision.io when a torchvision that loads beside this torch is installed, else None."""
    try:
        from torchvision import io
    except Exception:  # not installed, or built for another torch (its operators fail to register)
        return None
    return io


def decode(path: Path, device: torch.device | str = "cpu") -> torch.Tensor:
    """Read an image file as an RGB picture tensor on `device`: JPEGs on a GPU through nvjpeg, everything else by
    PIL (so a CPU run decodes the same pixels whether torchvision is installed or not), naming the file when it is
    missing, unreadable or too large to decode."""
    device = torch.device(device)
    path = Path(path)
    if not path.is_file():
        raise DataError(f"image file not found: {path}")
    io = torchvision_io() if device.type == "cuda" and path.suffix.lower() in (".jpg", ".jpeg") else None
    if io is not None:
        check_picture_size(path)  # nvjpeg has no decompression-bomb limit: PIL reads the header first
        try:
            with warnings.catch_warnings():  # torchvision 0.29 deprecates its decoders in favour of TorchCodec
                warnings.simplefilter("ignore", DeprecationWarning)
                data = io.read_file(str(path))
                return check_picture(io.decode_jpeg(data, mode=io.ImageReadMode.RGB, device=device))
        except (RuntimeError, ValueError):
            pass  # a file nvjpeg cannot read (CMYK, progressive...): PIL decides, and names the problem
    return as_picture(load_rgb(path), device)


# --- content digests ----------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=8)
def _digest_weights(numel: int, device: torch.device) -> torch.Tensor:
    """[2, numel] odd 64-bit weights, fixed for all runs: the two lanes of the picture digest."""
    from .keyed import field_keys, random_bits

    keys = torch.tensor([field_keys(0, lane) for lane in range(4)], dtype=torch.int32, device=device)
    bits = random_bits(keys, numel).long() & 0xFFFFFFFF
    return ((bits[0::2] << 32) | bits[1::2]) | 1


def digests(pictures: Sequence[torch.Tensor]) -> list[str]:
    """Content digest of each picture, computed where the pictures are (no copy off a GPU): two 64-bit lanes of
    sum(w_i * byte_i) mod 2^64 with fixed random odd weights, joined with the shape. Integer sums are exact in any
    order, so a picture has one digest on every device and in every batch; two different pictures share one with
    probability about 2^-126."""
    out: list[str | None] = [None] * len(pictures)
    for (h, w), rows in groups_by_size(pictures).items():
        device = pictures[rows[0]].device
        weights = _digest_weights(3 * h * w, device)
        for start in range(0, len(rows), DIGEST_CHUNK):
            part = rows[start : start + DIGEST_CHUNK]
            flat = torch.stack([pictures[i] for i in part]).reshape(len(part), 1, -1).long()
            lanes = (flat * weights[None]).sum(dim=-1).cpu().tolist()
            for i, (a, b) in zip(part, lanes):
                out[i] = hashlib.blake2b(f"image\0{h}x{w}\0{a}\0{b}".encode(), digest_size=16).hexdigest()
    return out  # type: ignore[return-value]


def groups_by_size(pictures: Sequence[torch.Tensor]) -> dict[tuple[int, int], list[int]]:
    """Indices of the pictures of each size (H, W), in order: the batches pictures of one size can be stacked into.
    (A white-box attack's float 0-255 values pass too: they are pictures on their way to uint8.)"""
    groups: dict[tuple[int, int], list[int]] = {}
    for i, picture in enumerate(pictures):
        if not (isinstance(picture, torch.Tensor) and picture.is_floating_point() and picture.ndim == 3):
            check_picture(picture)
        groups.setdefault(tuple(picture.shape[1:]), []).append(i)
    return groups


# --- the encoder's input ------------------------------------------------------------------------------------


def fitted_size(height: int, width: int, size: int, center_crop: bool) -> tuple[int, int]:
    """The size a picture is resized to before the crop: shorter side to `size` (CLIP), or `size` x `size`."""
    if not center_crop:
        return size, size
    scale = size / min(height, width)
    return max(size, round(height * scale)), max(size, round(width * scale))


# How a backbone resizes a picture for its encoder (its spec's `resize`):
#   "bicubic-antialias"  PIL's BICUBIC (a = -0.5, kernel widened by the scale factor), as open_clip and the HF CLIP
#                        processor do: every input pixel is read, so a hidden picture cannot survive it
#   "bilinear"           two taps per axis, no antialiasing (cv2.INTER_LINEAR, torch's default): image-scaling prey
#   "nearest"            one tap per axis (torch's legacy nearest, floor(i * scale), as cv2.INTER_NEAREST)
#   "area"               each output pixel the mean of the input cell it covers (torch's adaptive average pooling)
RESIZES = ("bicubic-antialias", "bilinear", "nearest", "area")
DEFAULT_RESIZE = "bicubic-antialias"


def check_resize(resize) -> str:
    """`resize` if it names a known resize, else a ConfigError naming it and the known ones."""
    if resize not in RESIZES:
        from ..errors import ConfigError

        raise ConfigError(f"unknown resize {resize!r}; known: {', '.join(RESIZES)}")
    return resize


def resize_pictures(batch: torch.Tensor, height: int, width: int, resize: str = DEFAULT_RESIZE) -> torch.Tensor:
    """A batch [N, 3, H, W] (uint8, or float in pixel units) resized to height x width with the named resize. The
    default resizes uint8 on a CPU directly (its vectorised path, rounding between passes as PIL does) and floats
    elsewhere; the others compute in float32, so they are exactly the linear maps perturb/scaling.py reads."""
    check_resize(resize)
    if resize == DEFAULT_RESIZE:
        batch = batch if batch.device.type == "cpu" else batch.float()
        return F.interpolate(batch, size=(height, width), mode="bicubic", antialias=True, align_corners=False)
    if resize == "bilinear":
        return F.interpolate(batch.float(), size=(height, width), mode="bilinear", antialias=False, align_corners=False)
    return F.interpolate(batch.float(), size=(height, width), mode=resize)


def encoder_view(pictures: Sequence[torch.Tensor], size: int, center_crop: bool, resize: str = DEFAULT_RESIZE,
                 device: torch.device | str | None = None) -> torch.Tensor:
    """What the encoder sees [N, 3, size, size] (float32, pixel units 0-255, before normalising) on `device`: the
    named resize, then a centre crop (CLIP) or none (BLIP-2), in batches of one size."""
    if not len(pictures):
        raise ValueError("no pictures to encode")
    check_resize(resize)
    device = torch.device(device) if device is not None else pictures[0].device
    out = torch.empty((len(pictures), 3, size, size), dtype=torch.float32, device=device)
    for (h, w), rows in groups_by_size(pictures).items():
        batch = torch.stack([pictures[i].to(device, non_blocking=True) for i in rows])
        rh, rw = fitted_size(h, w, size, center_crop)
        if (rh, rw) != (h, w):
            batch = resize_pictures(batch, rh, rw, resize)
        top, left = (rh - size) // 2, (rw - size) // 2
        out[torch.tensor(rows, device=device)] = batch[:, :, top : top + size, left : left + size].float().clamp(0, 255)
    return out


def fit_to_encoder(pictures: Sequence[torch.Tensor], size: int, center_crop: bool, mean: Sequence[float],
                   std: Sequence[float], device: torch.device | str | None = None,
                   resize: str = DEFAULT_RESIZE) -> torch.Tensor:
    """The encoder's input [N, 3, size, size] (float32, normalised) on `device`: `encoder_view` (by default an
    antialiased bicubic resize, the kernel of PIL's BICUBIC, a = -0.5), normalised."""
    view = encoder_view(pictures, size, center_crop, resize, device)
    mean_t = torch.tensor(mean, dtype=torch.float32, device=view.device).view(1, 3, 1, 1)
    std_t = torch.tensor(std, dtype=torch.float32, device=view.device).view(1, 3, 1, 1)
    return (view / 255.0 - mean_t) / std_t


# --- Pillow's BOX resize, exactly (pixelate, the demo detector's thumbnails) ---------------------------------

PRECISION_BITS = 22  # Pillow's fixed-point weights for 8-bit pictures (32 - 8 - 2)
# Pillow 13 (python-pillow/Pillow#9549) resizes rows first when that removes more than twice as many rows as the
# column pass removes columns; older Pillow always resized columns first. Each pass rounds to uint8, so the order
# shows in the last bit. (The rule was measured against Pillow 13.0.0; tests check it against the installed Pillow.)
PILLOW_ROWS_FIRST = int(PIL.__version__.split(".")[0]) >= 13


@functools.lru_cache(maxsize=256)
def pillow_box_taps(n_in: int, n_out: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Pillow's BOX resampling of one axis (Resample.c `precompute_coeffs`, `normalize_coeffs_8bpc`): for each
    output, the input indices it reads (n_out x taps) and their fixed-point weights (0 for padding taps)."""
    scale = n_in / n_out
    filterscale = max(scale, 1.0)
    support = 0.5 * filterscale
    ss = 1.0 / filterscale
    taps = math.ceil(support) * 2 + 1
    index = np.zeros((n_out, taps), dtype=np.int64)
    weight = np.zeros((n_out, taps), dtype=np.int64)
    for out in range(n_out):
        center = (out + 0.5) * scale
        first = max(int(center - support + 0.5), 0)
        end = min(int(center + support + 0.5), n_in)
        # the box filter: 1 for the input pixels whose centres fall in the output pixel, else 0
        inside = [1.0 if -0.5 < (i - center + 0.5) * ss <= 0.5 else 0.0 for i in range(first, end)]
        for k, v in enumerate(inside):
            index[out, k] = first + k
            weight[out, k] = int(0.5 + v / sum(inside) * (1 << PRECISION_BITS))
    return torch.from_numpy(index), torch.from_numpy(weight)


def box_resize_last_axis(x: torch.Tensor, n_out: int) -> torch.Tensor:
    """Resize the last axis of an int32 uint8-valued tensor with Pillow's BOX filter, rounding as Pillow does."""
    index, weight = (t.to(x.device) for t in pillow_box_taps(x.shape[-1], n_out))
    total = torch.full((*x.shape[:-1], n_out), 1 << (PRECISION_BITS - 1), dtype=torch.int32, device=x.device)
    for k in range(index.shape[1]):
        total += x[..., index[:, k]] * weight[:, k].to(torch.int32)
    return (total >> PRECISION_BITS).clamp(0, 255)


def pillow_box_resize(pixels: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """Pillow's BOX resize of the last two axes of an int32 uint8-valued tensor, its two passes in Pillow's order."""
    h, w = pixels.shape[-2:]

    def columns(p: torch.Tensor) -> torch.Tensor:
        return box_resize_last_axis(p, width)

    def rows(p: torch.Tensor) -> torch.Tensor:
        return box_resize_last_axis(p.transpose(-1, -2), height).transpose(-1, -2)

    if PILLOW_ROWS_FIRST and h - height > 2 * (w - width):
        return columns(rows(pixels))
    return rows(columns(pixels))


def box_resize_values(values: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """Pillow's BOX resize of float 0-255 values, without its rounding: the same weights, differentiable (the path
    white-box image attacks follow through the demo detector's thumbnails)."""
    def axis(x: torch.Tensor, n_out: int) -> torch.Tensor:
        index, weight = (t.to(x.device) for t in pillow_box_taps(x.shape[-1], n_out))
        return (x[..., index] * (weight.to(x.dtype) / (1 << PRECISION_BITS))).sum(dim=-1)

    h, w = values.shape[-2:]
    if PILLOW_ROWS_FIRST and h - height > 2 * (w - width):
        return axis(axis(values.transpose(-1, -2), height).transpose(-1, -2), width)
    return axis(axis(values, width).transpose(-1, -2), height).transpose(-1, -2)
