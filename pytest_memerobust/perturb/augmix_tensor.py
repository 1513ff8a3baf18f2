"""AugMix (Hendrycks et al., ICLR 2020), Rainbow Noise's image noise 3, on picture tensors (3 x H x W uint8) on
their own device: `width` chains of 1-3 random operations, mixed with Dirichlet weights, then mixed with the original
with a Beta weight.

The operation set is the paper's (autocontrast, equalize, posterize, rotate, solarize, shear and translate along
x and y); it leaves out the colour, contrast, brightness and sharpness operations on purpose, since those overlap
the ImageNet-C corruptions AugMix is evaluated against. Magnitudes follow the paper's code: an operation's level is
drawn uniformly in [0.1, aug_severity] on a 0-10 scale. All randomness comes from the explicit `rng`.

Pictures stay on the detector's device from decode to encoder, so the paper's PIL operations are reproduced on
tensors; tests/augmix_reference.py keeps the paper's PIL code as the reference. Every random number is drawn from
`rng` with the same calls in the same order as its `augment_and_mix`, so a generator state gives the same chain of
operations; each operation reproduces its Pillow counterpart:

- autocontrast, equalize, posterize and solarize are per-channel lookup tables built exactly as `ImageOps` builds
  them (from the channel's histogram where needed); the tables are 256 entries, built in float64 / int64 as
  Pillow's Python does, so these four are exact;
- rotate, shear and translate are Pillow's affine BILINEAR transform (`Geometry.c`): output pixel (x, y) samples
  the input at matrix @ (x + 0.5, y + 0.5); a sample outside [0, W) x [0, H) is black, one inside interpolates the
  four nearest pixel centres (edge pixels repeated) and is truncated to uint8, as Pillow stores it between ops.
  Translations (whole pixels) are exact; for rotate and shear the float32 coordinates and weights leave about 0.2%
  of the pixels one level apart from Pillow's doubles (`affine(..., dtype=torch.float64)` is bit-exact);
- the final mix is float32 and rounded half to even like `np.rint`: the whole AugMix is within 0.002 levels of the
  PIL version on average, and equal to it for most pictures (tests/test_augmix_tensor.py).

Pictures are processed as batches: the chains of all pictures of one size advance together, one lookup-table pass
and one affine pass per chain step, so a batch costs a few dozen kernels on a GPU whatever its size (see
`augmix_batch`).
"""
from __future__ import annotations

import math
from typing import NamedTuple, Sequence

import numpy as np
import torch

from ..data.pictures import as_picture, check_picture, groups_by_size, is_tensor_batch, to_array
from .registry import register

# The paper's operations, in the order `rng.integers` picks from.
OPERATION_NAMES = ("autocontrast", "equalize", "posterize", "rotate", "solarize", "shear_x", "shear_y", "translate_x",
                   "translate_y")
LUT_OPERATIONS = frozenset({"autocontrast", "equalize", "posterize", "solarize"})
AFFINE_OPERATIONS = frozenset({"rotate", "shear_x", "shear_y", "translate_x", "translate_y"})
IDENTITY = (1.0, 0.0, 0.0, 0.0, 1.0, 0.0)
SEVERITY_TO_AUG_SEVERITY = (1, 3, 5, 7, 10)  # augmix(): aug_severity on the paper's 0-10 scale per severity
# Pixels of the pictures batched together: a GPU wants many pictures per kernel (64 at 224 x 224: at most about
# 2.5 GB of temporaries); a CPU measured fastest one picture at a time (its temporaries stay in cache).
PIXELS_PER_CHUNK = {"cuda": 64 * 224 * 224, "cpu": 0}


def draw_level(rng: np.random.Generator, severity: float) -> float:
    """An operation's level, uniform in [0.1, severity] on the paper's 0-10 scale."""
    return float(rng.uniform(0.1, severity))


def scaled_int(level: float, maxval: int) -> int:
    return int(level * maxval / 10)


def scaled_float(level: float, maxval: float) -> float:
    return level * maxval / 10


def signed(value: float, rng: np.random.Generator) -> float:
    """`value` with a random sign (one draw)."""
    return -value if rng.random() > 0.5 else value


class Step(NamedTuple):
    """One drawn operation of a chain, with the parameters its draws gave."""

    name: str
    bits: int = 8  # posterize: bits kept
    threshold: int = 256  # solarize: values at or above it are inverted
    matrix: tuple[float, ...] = IDENTITY  # affine ops: output (x, y) -> input (a x + b y + c, d x + e y + f)


class Plan(NamedTuple):
    """Everything `augment_and_mix` draws for one picture: chain weights, the mixing weight and the chains."""

    weights: tuple[float, ...]
    m: float
    chains: tuple[tuple[Step, ...], ...]


# --- drawing: the same calls, in the same order, as the paper's augment_and_mix -----------------------------


def rotation_matrix(angle: float, size: tuple[int, int]) -> tuple[float, ...]:
    """The inverse matrix `Image.rotate(angle)` hands to `Image.transform` (about the centre, no expand)."""
    w, h = size
    angle = -math.radians(angle % 360.0)
    a, b, d, e = (round(math.cos(angle), 15), round(math.sin(angle), 15), round(-math.sin(angle), 15),
                  round(math.cos(angle), 15))
    cx, cy = w / 2, h / 2
    return (a, b, a * -cx + b * -cy + 0.0 + cx, d, e, d * -cx + e * -cy + 0.0 + cy)


def draw_step(name: str, level: float, rng: np.random.Generator, size: tuple[int, int]) -> Step:
    """The parameters operation `name` draws at `level` for a picture of `size` (W, H)."""
    w, h = size
    if name in ("autocontrast", "equalize"):
        return Step(name)
    if name == "posterize":
        return Step(name, bits=4 - scaled_int(level, 4))
    if name == "solarize":
        return Step(name, threshold=256 - scaled_int(level, 256))
    if name == "rotate":
        return Step(name, matrix=rotation_matrix(signed(scaled_int(level, 30), rng), size))
    if name == "shear_x":
        return Step(name, matrix=(1.0, signed(scaled_float(level, 0.3), rng), 0.0, 0.0, 1.0, 0.0))
    if name == "shear_y":
        return Step(name, matrix=(1.0, 0.0, 0.0, signed(scaled_float(level, 0.3), rng), 1.0, 0.0))
    if name == "translate_x":
        return Step(name, matrix=(1.0, 0.0, float(signed(scaled_int(level, w // 3), rng)), 0.0, 1.0, 0.0))
    if name == "translate_y":
        return Step(name, matrix=(1.0, 0.0, 0.0, 0.0, 1.0, float(signed(scaled_int(level, h // 3), rng))))
    raise ValueError(f"unknown AugMix operation {name!r}; known: {OPERATION_NAMES}")


def draw_plan(rng: np.random.Generator, size: tuple[int, int], aug_severity: float = 3, width: int = 3,
              depth: int = -1, alpha: float = 1.0) -> Plan:
    """What `augment_and_mix` draws for a picture of `size` (W, H): dirichlet, beta, then per chain its length
    (depth -1: 1 to 3) and per operation its index, its level and its own draws."""
    weights = rng.dirichlet([alpha] * width)
    m = rng.beta(alpha, alpha)
    chains = []
    for _ in weights:
        steps = []
        for _ in range(depth if depth > 0 else int(rng.integers(1, 4))):
            name = OPERATION_NAMES[int(rng.integers(len(OPERATION_NAMES)))]
            steps.append(draw_step(name, draw_level(rng, aug_severity), rng, size))
        chains.append(tuple(steps))
    return Plan(tuple(float(v) for v in weights), float(m), tuple(chains))


# --- lookup-table operations (ImageOps), on a batch N x 3 x H x W -----------------------------------------------


def histograms(x: torch.Tensor) -> torch.Tensor:
    """Per-channel histograms of a uint8 batch, N x 3 x 256 int64 (integer counts: the same on every device)."""
    n = x.shape[0] * 3
    offsets = torch.arange(n, device=x.device)[:, None] * 256
    counts = torch.bincount((x.reshape(n, -1).long() + offsets).reshape(-1), minlength=n * 256)
    return counts.reshape(x.shape[0], 3, 256)


def _last_nonzero(hist: torch.Tensor) -> torch.Tensor:
    return 255 - (hist.flip(-1) > 0).to(torch.uint8).argmax(-1)


def autocontrast_luts(hist: torch.Tensor) -> torch.Tensor:
    """`ImageOps.autocontrast` tables (cutoff 0): [lo, hi] stretched to [0, 255] with Pillow's float64 arithmetic
    and truncation; a channel of one value keeps the identity."""
    lo = (hist > 0).to(torch.uint8).argmax(-1)
    hi = _last_nonzero(hist)
    spread = hi > lo
    scale = 255.0 / (hi - lo).clamp(min=1).double()
    offset = -lo.double() * scale
    ix = torch.arange(256, dtype=torch.float64, device=hist.device)
    stretched = (ix * scale[..., None] + offset[..., None]).trunc().clamp(0, 255)
    return torch.where(spread[..., None], stretched, ix).to(torch.uint8)


def equalize_luts(hist: torch.Tensor) -> torch.Tensor:
    """`ImageOps.equalize` tables: step = (pixels - count of the top value) // 255, value i -> (step // 2 + pixels
    below i) // step, clipped to 255 as `Image.point` does; the identity for one value or a zero step."""
    total = hist.sum(-1)
    top = hist.gather(-1, _last_nonzero(hist)[..., None])[..., 0]
    step = (total - top) // 255
    below = hist.cumsum(-1) - hist
    equalized = ((step // 2)[..., None] + below) // step.clamp(min=1)[..., None]
    keep = ((hist > 0).sum(-1) <= 1) | (step == 0)
    ix = torch.arange(256, device=hist.device)
    return torch.where(keep[..., None], ix, equalized.clamp(max=255)).to(torch.uint8)


def posterize_luts(bits: torch.Tensor) -> torch.Tensor:
    """`ImageOps.posterize` tables, one per entry of `bits` (1 to 8 bits kept): value & ~(2 ** (8 - bits) - 1)."""
    mask = 255 - ((1 << (8 - bits)) - 1)
    return (torch.arange(256, device=bits.device) & mask[..., None]).to(torch.uint8)


def solarize_luts(threshold: torch.Tensor) -> torch.Tensor:
    """`ImageOps.solarize` tables: values at or above `threshold` become 255 - value."""
    ix = torch.arange(256, device=threshold.device)
    return torch.where(ix < threshold[..., None], ix, 255 - ix).to(torch.uint8)


def apply_luts(x: torch.Tensor, luts: torch.Tensor) -> torch.Tensor:
    """Map each channel of a uint8 batch N x 3 x H x W through its table (N x 3 x 256 uint8)."""
    n, c, h, w = x.shape
    return luts.gather(-1, x.reshape(n, c, h * w).long()).reshape(n, c, h, w)


def step_luts(x: torch.Tensor, steps: Sequence[Step]) -> torch.Tensor:
    """The tables of lookup-table steps (one per picture of the batch `x`), built together per kind."""
    luts = torch.empty((len(steps), 3, 256), dtype=torch.uint8, device=x.device)
    for name in sorted({s.name for s in steps}):
        rows = [i for i, s in enumerate(steps) if s.name == name]
        index = torch.tensor(rows, device=x.device)
        if name == "autocontrast":
            luts[index] = autocontrast_luts(histograms(x[index]))
        elif name == "equalize":
            luts[index] = equalize_luts(histograms(x[index]))
        elif name == "posterize":
            bits = [steps[i].bits for i in rows]
            if not all(1 <= b <= 8 for b in bits):
                raise ValueError(f"posterize keeps 1 to 8 bits, got {bits}")  # as ImageOps.posterize
            luts[index] = posterize_luts(torch.tensor(bits, device=x.device))[:, None].expand(-1, 3, -1)
        elif name == "solarize":
            threshold = torch.tensor([steps[i].threshold for i in rows], device=x.device)
            luts[index] = solarize_luts(threshold)[:, None].expand(-1, 3, -1)
        else:
            raise ValueError(f"{name!r} is not a lookup-table operation")
    return luts


# --- affine operations (Image.transform AFFINE, BILINEAR) -------------------------------------------------------


def affine(x: torch.Tensor, matrices: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Pillow's `transform(size, AFFINE, matrix, resample=BILINEAR)` of a uint8 batch N x 3 x H x W, one matrix
    (a, b, c, d, e, f) per picture (N x 6): output pixel (x, y) samples the input at (a x' + b y' + c,
    d x' + e y' + f), x' = x + 0.5, y' = y + 0.5; samples outside [0, W) x [0, H) are 0, the others interpolate the
    pixel centres around them, edge pixels repeated, truncated to uint8. `dtype` float64 computes as Pillow's
    doubles do and matches it bit for bit; float32 leaves about 0.2% of the pixels of a sheared picture one level
    apart."""
    n, c, h, w = x.shape
    m = matrices.to(x.device, dtype)[:, :, None, None]
    xs = torch.arange(w, device=x.device, dtype=dtype)[None, None, :] + 0.5
    ys = torch.arange(h, device=x.device, dtype=dtype)[None, :, None] + 0.5
    xin = m[:, 0] * xs + m[:, 1] * ys + m[:, 2]  # N x H x W
    yin = m[:, 3] * xs + m[:, 4] * ys + m[:, 5]
    inside = (xin >= 0) & (xin < w) & (yin >= 0) & (yin < h)
    xf, yf = xin - 0.5, yin - 0.5
    x0, y0 = xf.floor(), yf.floor()
    dx, dy = (xf - x0)[:, None], (yf - y0)[:, None]
    x0, y0 = x0.long(), y0.long()
    cols = (x0.clamp(0, w - 1), (x0 + 1).clamp(0, w - 1))
    rows = (y0.clamp(0, h - 1) * w, (y0 + 1).clamp(0, h - 1) * w)
    flat = x.reshape(n, c, h * w).to(dtype)

    def pixel(row, col):
        return flat.gather(-1, (row + col).reshape(n, 1, h * w).expand(n, c, h * w)).reshape(n, c, h, w)

    top = pixel(rows[0], cols[0])
    top = top + (pixel(rows[0], cols[1]) - top) * dx
    bottom = pixel(rows[1], cols[0])
    bottom = bottom + (pixel(rows[1], cols[1]) - bottom) * dx
    value = (top + (bottom - top) * dy).trunc().clamp(0, 255)
    return torch.where(inside[:, None], value, 0).to(torch.uint8)


# --- chains and the mix ---------------------------------------------------------------------------------------


def apply_steps(x: torch.Tensor, steps: Sequence[Step | None]) -> torch.Tensor:
    """One chain step for every picture of the batch `x` (None: that picture's chain has ended): the lookup-table
    steps in one pass, the affine steps in another."""
    out = x.clone()
    lut_rows = [i for i, s in enumerate(steps) if s is not None and s.name in LUT_OPERATIONS]
    affine_rows = [i for i, s in enumerate(steps) if s is not None and s.name in AFFINE_OPERATIONS]
    if lut_rows:
        index = torch.tensor(lut_rows, device=x.device)
        out[index] = apply_luts(x[index], step_luts(x[index], [steps[i] for i in lut_rows]))
    if affine_rows:
        index = torch.tensor(affine_rows, device=x.device)
        matrices = torch.tensor([steps[i].matrix for i in affine_rows], dtype=torch.float64)
        out[index] = affine(x[index], matrices)
    return out


def augment_and_mix_batch(x: torch.Tensor, plans: Sequence[Plan]) -> torch.Tensor:
    """AugMix of a uint8 batch N x 3 x H x W with one drawn plan per picture: all chains advance together."""
    width = len(plans[0].weights)
    if any(len(p.weights) != width for p in plans):
        raise ValueError("every plan of a batch must have the same number of chains")
    chains = x.repeat_interleave(width, dim=0)  # picture i's chain j is row i * width + j
    steps = [chain for plan in plans for chain in plan.chains]
    for k in range(max(len(chain) for chain in steps)):
        chains = apply_steps(chains, [chain[k] if k < len(chain) else None for chain in steps])
    weights = torch.tensor([p.weights for p in plans], dtype=torch.float32, device=x.device)
    m = torch.tensor([p.m for p in plans], dtype=torch.float32, device=x.device)[:, None, None, None]
    chains = chains.reshape(x.shape[0], width, *x.shape[1:]).float()
    mix = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
    for j in range(width):
        mix += weights[:, j, None, None, None] * chains[:, j]
    mixed = (1 - m) * x.float() + m * mix
    return mixed.round().clamp(0, 255).to(torch.uint8)


def augment_and_mix_tensor(x: torch.Tensor, rng: np.random.Generator, aug_severity: float = 3, width: int = 3,
                           depth: int = -1, alpha: float = 1.0) -> torch.Tensor:
    """`augment_and_mix` of a picture tensor (3 x H x W uint8) on its device; same draws, same chain."""
    x = check_picture(x)
    plan = draw_plan(rng, (x.shape[2], x.shape[1]), aug_severity, width, depth, alpha)
    return augment_and_mix_batch(x[None], [plan])[0]


def augmix_batch(pictures: Sequence[torch.Tensor], severity: int,
                 rngs: Sequence[np.random.Generator]) -> list[torch.Tensor]:
    """`augmix` of many picture tensors, each with its own generator (results as if one at a time); pictures of
    one size and device are processed together. H x W x 3 arrays are accepted too and come back as arrays."""
    if len(pictures) != len(rngs):
        raise ValueError(f"{len(pictures)} pictures but {len(rngs)} generators")
    if len(pictures) and not is_tensor_batch(pictures):
        return [to_array(y) for y in augmix_batch([as_picture(x) for x in pictures], severity, rngs)]
    if severity not in range(1, len(SEVERITY_TO_AUG_SEVERITY) + 1):
        raise ValueError(f"augmix has severities 1 to {len(SEVERITY_TO_AUG_SEVERITY)}, got {severity!r}")
    aug_severity = SEVERITY_TO_AUG_SEVERITY[severity - 1]
    plans = [draw_plan(rng, (check_picture(x).shape[2], x.shape[1]), aug_severity) for x, rng in zip(pictures, rngs)]
    out: list[torch.Tensor | None] = [None] * len(pictures)
    groups: dict[tuple, list[int]] = {}
    for size, rows in groups_by_size(pictures).items():
        for i in rows:
            groups.setdefault((size, pictures[i].device), []).append(i)
    for ((h, w), device), rows in groups.items():
        chunk = max(1, PIXELS_PER_CHUNK.get(device.type, 0) // (h * w))
        for start in range(0, len(rows), chunk):
            part = rows[start : start + chunk]
            mixed = augment_and_mix_batch(torch.stack([pictures[i] for i in part]), [plans[i] for i in part])
            for i, picture in zip(part, mixed):
                out[i] = picture
    return out  # type: ignore[return-value]


# --- one operation at a time (single pictures) ---------------------------------------------------------------


def apply_operation(x: torch.Tensor, name: str, level: float, rng: np.random.Generator) -> torch.Tensor:
    """AugMix operation `name` at `level` on one picture tensor, drawing what the paper's `name` draws."""
    x = check_picture(x)
    return apply_steps(x[None], [draw_step(name, level, rng, (x.shape[2], x.shape[1]))])[0]


def _augmix_on_device(x, severity: int, rng: np.random.Generator):
    """AugMix compositional noise; severity sets the operations' magnitude (the paper's default, 3, is severity 2)."""
    return augmix_batch([x], severity, [rng])[0]


def _augmix_batch(pictures, severity, rngs):
    return augmix_batch(pictures, severity, rngs)


register("augmix", modality="image", family="augmix", severities=(1, 2, 3, 4, 5), tags=("compositional",),
         batch=_augmix_batch, takes="tensor")(_augmix_on_device)
