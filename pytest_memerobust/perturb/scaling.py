"""Image-scaling attack against the detector's own resize (Xiao et al., USENIX Security 2019; Quiring et al., USENIX
Security 2020), and the picture defences that close it.

A resize is separable: the detector's view of a picture X (per channel, h x w) is D(X) = L @ X @ R, with L
(out_h x h) and R (w x out_w) read off the detector's real preprocessing (`detector_resize`). A resize that reads
few input pixels (nearest; bilinear or bicubic without antialiasing, at a large scale factor) lets an attacker change
only those pixels: the full-size picture still looks like the original while its view becomes another picture (the
target). Per column, then per row, the smallest change (least squares) such that the view is within EPSILON of the
target and the pixels stay in [0, 255] is a small quadratic programme, solved here for all columns (rows) of a
picture at once by accelerated projected gradient on its dual, on the picture's device.

An antialiased resize reads every pixel with a kernel as wide as the scale factor, and area scaling averages whole
cells: hiding a picture there takes a visible change everywhere. Those are the documented defences; `area_resize`
(area scaling to the encoder's size before the detector's own resize) and `median_filter` (Quiring's selective
median over the pixels the resize reads) join the defences registry (detectors/defences.py).

Cost on one CPU thread (2 x SOLVER_STEPS products of the read pixels with the resize's matrix, per pass): 0.05-0.5 s
a 512-1024 px picture under a resize that reads few pixels, 1-10 s under one that reads them all (antialiased, area).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from ..determinism import fixed_threads
from .attacks import AttackContext
from .image_attacks import keep_records
from .registry import register

BLENDS = [0.2, 0.4, 0.6, 0.8, 1.0]  # severity 1-5: the share of the target in the view the attack aims at
EPSILON = 1.0  # allowed distance of each solved view pixel to its aim, in pixel units (0-255), per pass
SOLVER_STEPS = 200  # accelerated dual steps per pass: a fixed count, so the bytes never depend on timing
GREY = 128  # the blank target when the run has no benign training meme
# scaling_vulnerable's rule: the hidden picture is both invisible at full size and what the detector sees
MIN_PSNR = 25.0  # dB, median over memes, full-size attacked picture against the original
MAX_TARGET_ERROR = 8 / 255  # median over memes of the view's mean absolute error against the aim, in [0, 1]


# --- the detector's resize ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class EncoderResize:
    """A picture encoder's fit (pictures.encoder_view): the named resize to `fitted_size`, then a centre crop or
    none."""

    size: int
    center_crop: bool
    resize: str

    def fitted(self, height: int, width: int) -> tuple[int, int]:
        from ..data.pictures import fitted_size

        return fitted_size(height, width, self.size, self.center_crop)

    def view(self, pictures: list):
        """The detector's view [N, 3, S, S] (float32, 0-255), computed by the detector's own code."""
        from ..data.pictures import encoder_view

        return encoder_view(pictures, self.size, self.center_crop, self.resize)

    def operator(self, height: int, width: int, device):
        """(L, R) of this fit for a height x width picture: identity rows and columns resized by the same
        resize, in float32 (the default's CPU path resizes uint8 and rounds between its passes: within a pixel
        level of L @ X @ R)."""
        import torch

        from ..data.pictures import resize_pictures

        rh, rw = self.fitted(height, width)
        top, left = (rh - self.size) // 2, (rw - self.size) // 2
        left_map = torch.eye(height, device=device)
        right_map = torch.eye(width, device=device)
        if (rh, rw) != (height, width):
            left_map = resize_pictures(left_map[None, None], rh, height, self.resize)[0, 0]
            right_map = resize_pictures(right_map[None, None], width, rw, self.resize)[0, 0]
        return left_map[top : top + self.size].contiguous(), right_map[:, left : left + self.size].contiguous()


@dataclass(frozen=True)
class PillowBoxResize:
    """The demo detector's thumbnails: Pillow's BOX resize to side x side (area scaling)."""

    side: int

    def fitted(self, height: int, width: int) -> tuple[int, int]:
        return self.side, self.side

    def view(self, pictures: list):
        import torch

        from ..data.pictures import groups_by_size, pillow_box_resize

        out = torch.empty((len(pictures), 3, self.side, self.side), device=pictures[0].device)
        for rows in groups_by_size(pictures).values():
            stacked = torch.stack([pictures[i] for i in rows]).to(torch.int32)
            out[rows] = pillow_box_resize(stacked, self.side, self.side).float()
        return out

    def operator(self, height: int, width: int, device):
        """(L, R) from Pillow's own taps and fixed-point weights (pictures.pillow_box_taps)."""
        return _box_map(height, self.side, device), _box_map(width, self.side, device).T.contiguous()


def _box_map(n_in: int, n_out: int, device):
    import torch

    from ..data.pictures import PRECISION_BITS, pillow_box_taps

    index, weight = pillow_box_taps(n_in, n_out)
    out = torch.zeros((n_out, n_in), dtype=torch.float64)
    out.scatter_add_(1, index, weight.double() / (1 << PRECISION_BITS))
    return out.float().to(device)


PIL_BICUBIC = 3


def _processor_resize(processor) -> EncoderResize:
    """The fit of a transformers image processor that resizes like CLIP's (PIL BICUBIC, antialiased): the shorter
    side to `size.shortest_edge` then a square centre crop of that side, or straight to a square `size`. Others
    (Qwen2-VL's per-picture multiples of 28, Idefics3's tiles, other kernels) are declined, naming why."""
    image_processor = getattr(processor, "image_processor", processor)
    name = type(image_processor).__name__
    size = dict(getattr(image_processor, "size", None) or {})
    crop = dict(getattr(image_processor, "crop_size", None) or {})
    resample = getattr(image_processor, "resample", None)
    if resample is None or int(resample) != PIL_BICUBIC:
        raise ValueError(f"image_scaling: {name} resizes with PIL resample {resample!r}; only BICUBIC (3) is "
                         f"modelled")
    if "shortest_edge" in size and getattr(image_processor, "do_center_crop", False) \
            and crop.get("height") == crop.get("width") == size["shortest_edge"]:
        return EncoderResize(int(size["shortest_edge"]), True, "bicubic-antialias")
    if size.get("height") is not None and size.get("height") == size.get("width") \
            and not getattr(image_processor, "do_center_crop", False):
        return EncoderResize(int(size["height"]), False, "bicubic-antialias")
    raise ValueError(f"image_scaling: {name} fits pictures by a rule this attack does not model (size {size}, "
                     f"crop {crop}): declined rather than solved for the wrong resize")


def detector_resize(detector) -> EncoderResize | PillowBoxResize:
    """The resize `detector` really applies to a picture: its backbone's fit (size, crop, `resize` spec key), the
    demo detector's BOX thumbnails, or a prompted model's image processor. A detector whose resize happens out of
    sight (a hosted model resizes on its server) is an error naming it: no picture can be solved for an unknown
    resize."""
    backbone = getattr(detector, "backbone", None)
    if backbone is not None and getattr(backbone, "image_dim", 0):
        return EncoderResize(int(backbone.image_size), bool(backbone.center_crop), backbone.resize)
    side = getattr(detector, "thumbnail_side", None)
    if side is not None:
        return PillowBoxResize(int(side))
    processor = getattr(detector, "processor", None)
    if processor is not None:
        return _processor_resize(processor)
    kind = type(getattr(detector, "wrapped", detector)).__name__
    raise ValueError(f"image_scaling needs the resize {kind} applies to pictures, and it cannot be read (a hosted "
                     f"model resizes on its server; a caption-only detector reads no picture): leave image_scaling "
                     f"out for this detector")


@lru_cache(maxsize=32)
def _operator(resize, height: int, width: int, device: str):
    return resize.operator(height, width, device)


# --- the quadratic programme ----------------------------------------------------------------------------------


def closest_in_band(matrix, start, lower, upper, steps: int = SOLVER_STEPS):
    """Per row b of `start` [B, m]: x minimising |x - start_b|^2 with lower_b <= matrix @ x <= upper_b and
    0 <= x <= 255 (matrix [k, m], bounds [B, k]). FISTA on the dual: x(y) = clip(start - y @ matrix); the band's
    multipliers take a proximal step (Moreau: v - t * clip(v / t, lower, upper)). Deterministic: fixed steps."""
    import torch

    step = 1.0 / max(float(torch.linalg.matrix_norm(matrix, ord=2)) ** 2, 1e-12)
    dual = torch.zeros_like(lower)
    ahead, momentum = dual, 1.0
    for _ in range(steps):
        x = (start - ahead @ matrix).clamp(0, 255)
        v = ahead + step * (x @ matrix.T)
        new = v - step * torch.minimum(torch.maximum(v / step, lower), upper)
        next_momentum = (1 + (1 + 4 * momentum**2) ** 0.5) / 2
        ahead = new + ((momentum - 1) / next_momentum) * (new - dual)
        dual, momentum = new, next_momentum
    return (start - dual @ matrix).clamp(0, 255)


def hide(picture, aim, left, right, epsilon: float = EPSILON):
    """`picture` (uint8 3 x h x w) changed as little as the two passes allow so that left @ it @ right is within
    `epsilon` of `aim` (3 x S x S, pixel units): first each output column's pixels (the rows L reads), then each
    row L reads (the columns R reads). Pixels the resize never reads stay as they are."""
    import torch

    x = picture.float()
    rows = torch.nonzero(left.abs().sum(0) > 0).flatten()
    cols = torch.nonzero(right.abs().sum(1) > 0).flatten()
    # pass 1: the columns of X @ R, on the rows L reads
    half = x @ right  # [3, h, S]
    column_start = half[:, rows, :].permute(0, 2, 1).reshape(-1, len(rows))  # [3 * S, read rows]
    column_aim = aim.permute(0, 2, 1).reshape(-1, aim.shape[1])  # [3 * S, S]
    solved = closest_in_band(left[:, rows], column_start, column_aim - epsilon, column_aim + epsilon)
    half_aim = solved.reshape(3, aim.shape[2], len(rows)).permute(0, 2, 1)  # [3, read rows, S]
    # pass 2: each read row, on the columns R reads, towards pass 1's columns
    row_start = x[:, rows][:, :, cols].reshape(-1, len(cols))
    row_aim = half_aim.reshape(-1, aim.shape[2])
    solved = closest_in_band(right[cols].T.contiguous(), row_start, row_aim - epsilon, row_aim + epsilon)
    out = x.clone()
    out[:, rows[:, None], cols[None, :]] = solved.reshape(3, len(rows), len(cols))
    return out.round().clamp(0, 255).to(torch.uint8)


# --- the perturbation -----------------------------------------------------------------------------------------


def _targets(pictures: list, rngs, context: AttackContext) -> list:
    """Per picture, the picture to hide: a benign training meme (label 0) drawn with the meme's keyed generator,
    else a blank mid-grey picture of its size."""
    import torch

    benign = np.array([], dtype=np.int64)
    if context.training is not None:
        _, labels, memes = context.training()
        labels = np.asarray(labels)
        benign = np.flatnonzero(labels == 0 if labels.ndim == 1 else ~labels.astype(bool).any(axis=1))
    out = []
    for picture, rng in zip(pictures, rngs):
        if len(benign):
            out.append(memes[int(benign[int(rng.integers(len(benign)))])].picture(picture.device))
        else:
            out.append(torch.full_like(picture, GREY))
    return out


@fixed_threads()  # the solver's sums in one order however it is called (determinism.py)
def image_scaling_batch(images, rows, severity, rngs, context: AttackContext):
    """Each picture with a target hidden in what the detector's resize reads; records per meme (the context's
    outcomes, key ("image", "image_scaling", severity)): psnr_full and linf_full (the full-size picture against
    the original; linf in [0, 1]) and target_error (the view's mean absolute error against its aim, in [0, 1])."""
    from ..data.pictures import as_picture, is_tensor_batch, to_array

    blend = BLENDS[severity - 1]
    resize = detector_resize(context.detector)
    arrays = not is_tensor_batch(images)
    pictures = [as_picture(x) for x in images]
    targets = _targets(pictures, rngs, context)
    records = []
    out = []
    for row, picture, target in zip(rows, pictures, targets):  # one picture at a time: its bytes never depend
        clean_view, target_view = resize.view([picture])[0], resize.view([target])[0]  # on the other pictures
        aim = (1 - blend) * clean_view + blend * target_view
        left, right = _operator(resize, picture.shape[1], picture.shape[2], str(picture.device))
        attacked = hide(picture, aim, left, right)
        change = attacked.float() - picture.float()
        mse = float((change**2).mean())
        record = {"psnr_full": 10 * np.log10(255.0**2 / mse) if mse > 0 else np.inf,
                  "linf_full": float(change.abs().max()) / 255,
                  "target_error": float((resize.view([attacked])[0] - aim).abs().mean()) / 255}
        # hidden: hard to see at full size, yet what the detector sees (the rule of scaling_vulnerable, per meme)
        record["hidden"] = bool(record["psnr_full"] >= MIN_PSNR and record["target_error"] <= MAX_TARGET_ERROR)
        records.append(record)
        out.append(to_array(attacked) if arrays else attacked)
    keep_records(context, "image_scaling", severity, rows, records)
    return out


def measure(records: dict, key: str) -> np.ndarray:
    """One measure of image_scaling's per-meme records (context.outcomes), in meme order."""
    return np.array([float(records[row][key]) for row in sorted(records)], dtype=float)


def scaling_vulnerable(records: dict) -> bool:
    """Whether a detector's resize lets a picture be hidden, from image_scaling's records at severity 5 (the whole
    target): the median full-size PSNR is at least MIN_PSNR dB (the change is hard to see) and the median view error
    at most MAX_TARGET_ERROR (the detector sees the target). Either alone is no hole: a visible change hides
    nothing, and an invisible one the detector does not see changes nothing."""
    psnr, error = measure(records, "psnr_full"), measure(records, "target_error")
    if not np.isfinite(error).any():
        raise ValueError("scaling_vulnerable: the records hold no attacked meme")
    return bool(np.nanmedian(psnr) >= MIN_PSNR and np.nanmedian(error) <= MAX_TARGET_ERROR)


@register("image_scaling", modality="image", family="image_scaling", needs_model=True, label_preserving=False,
          tags=("white_box", "preprocessing"), batch=image_scaling_batch, takes="tensor")
def image_scaling(x, severity: int, rng: np.random.Generator, context: AttackContext, index: int):
    """Hide a benign meme (or a blank) in the pixels the detector's resize reads; severity = its share of the view."""
    return image_scaling_batch([x], [index], severity, [rng], context)[0]


# --- picture defences (detectors/defences.py registers them) --------------------------------------------------


def area_resize(pictures: list, detector) -> list:
    """Each picture area-scaled (cell means, rounded to uint8) to the size the detector's resize fits it to, so that
    resize has nothing left to drop: every pixel counts, equally."""
    import torch

    from ..data.pictures import groups_by_size, resize_pictures

    resize = detector_resize(detector)
    out = list(pictures)
    for (h, w), rows in groups_by_size(pictures).items():
        rh, rw = resize.fitted(h, w)
        if (rh, rw) == (h, w):
            continue
        batch = resize_pictures(torch.stack([pictures[i] for i in rows]), rh, rw, "area")
        for i, small in zip(rows, batch.round().clamp(0, 255).to(torch.uint8)):
            out[i] = small
    return out


MEDIAN_CHUNK = 64  # read rows filtered per pass: bounds the windows held at once


def median_filter(pictures: list, detector) -> list:
    """Quiring et al.'s selective median: each pixel the detector's resize reads replaced by the median of the
    window around it, a scale factor wide (at least 3 x 3); the pixels it never reads stay. (The other read pixels
    are not left out of the window, as in the paper: at a large scale factor they are a few of its pixels.)"""
    import torch

    resize = detector_resize(detector)
    out = list(pictures)
    for i, picture in enumerate(pictures):
        h, w = picture.shape[1:]
        left, right = _operator(resize, h, w, str(picture.device))
        rows = torch.nonzero(left.abs().sum(0) > 0).flatten()
        cols = torch.nonzero(right.abs().sum(1) > 0).flatten()
        rh, rw = resize.fitted(h, w)
        ky, kx = max(1, h // rh // 2), max(1, w // rw // 2)
        padded = torch.nn.functional.pad(picture[None].float(), (kx, kx, ky, ky), mode="replicate")[0]
        filtered = picture.clone()
        for start in range(0, len(rows), MEDIAN_CHUNK):
            part = rows[start : start + MEDIAN_CHUNK]
            windows = torch.stack([padded[:, part + ky + dy][:, :, cols + kx + dx]
                                   for dy in range(-ky, ky + 1) for dx in range(-kx, kx + 1)], dim=-1)
            filtered[:, part[:, None], cols[None, :]] = windows.median(dim=-1).values.to(torch.uint8)
        out[i] = filtered
    return out
