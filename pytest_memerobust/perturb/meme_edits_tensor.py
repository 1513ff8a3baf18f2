"""The meme edits registered in `meme_edits.py` (scribble, occlusion, caption_cover, sticker, recompression,
screenshot) on picture tensors (3 x H x W uint8) on their own device.

Why tensors: pictures stay on the detector's device from decode to encoder; numpy edits would pull each picture to
the CPU and back. Each edit draws from `rng` with the same calls in the same order as its numpy version
(tests/meme_edits_reference.py, the reference the tests compare with), so a generator state gives the same edit:

- occlusion and caption_cover are tensor fills, equal to the numpy versions;
- scribble and sticker let PIL draw only their shapes, on the CPU, into a canvas of paint indices the picture's
  size (no picture pixel leaves the device); the indices are then painted onto the picture on its device. PIL's
  drawing does not blend, so the result equals the numpy version;
- screenshot resizes on the device with `interpolate(bilinear, antialias=True)`, one axis at a time and rounded in
  between (half up), as PIL's BILINEAR resize does; PIL's fixed-point weights leave a few percent of the resized
  pixels one level apart (mean difference below 0.1 level measured, see the tests). Frame and bars are fills.
"""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image, ImageDraw

from ..data.pictures import check_picture
from ..data.text_boxes import caption_boxes
from .typography import _colour, cover_boxes


def _random_colour(rng: np.random.Generator) -> tuple[int, int, int]:
    return tuple(int(v) for v in rng.integers(0, 256, 3))


def _paint(x: torch.Tensor, canvas: Image.Image, colours: list[tuple[int, int, int]]) -> torch.Tensor:
    """Paint the picture where the "L" canvas holds an index k > 0 with colours[k - 1]; elsewhere keep it."""
    index = torch.from_numpy(np.asarray(canvas, dtype=np.uint8).copy()).to(x.device).long()
    palette = torch.tensor([(0, 0, 0), *colours], dtype=torch.uint8, device=x.device)
    return torch.where(index[None] > 0, palette[index].permute(2, 0, 1), x)


def scribble(x: torch.Tensor, severity: int, rng: np.random.Generator) -> torch.Tensor:
    """Freehand strokes across the picture (random walks of thick lines), as people scribble on a meme."""
    strokes = [1, 2, 4, 6, 9][severity - 1]
    x = check_picture(x)
    h, w = x.shape[1:]
    canvas = Image.new("L", (w, h), 0)
    draw = ImageDraw.Draw(canvas)
    width = max(1, round(min(w, h) / 40))
    colours = []
    for stroke in range(strokes):
        point = rng.uniform([0, 0], [w, h])
        path = [tuple(point)]
        for _ in range(12):
            point = np.clip(point + rng.normal(0, min(w, h) / 8, 2), 0, [w - 1, h - 1])
            path.append(tuple(point))
        colours.append(_random_colour(rng))
        draw.line(path, fill=stroke + 1, width=width, joint="curve")
    return _paint(x, canvas, colours)


def occlusion(x: torch.Tensor, severity: int, rng: np.random.Generator) -> torch.Tensor:
    """Cover a share of the picture's area with one solid box at a random place (it may hide the caption band)."""
    share = [0.05, 0.1, 0.2, 0.3, 0.45][severity - 1]
    out = check_picture(x).clone()
    h, w = out.shape[1:]
    aspect = rng.uniform(0.5, 2.0)
    bh = min(h, max(1, round(np.sqrt(share * h * w / aspect))))
    bw = min(w, max(1, round(share * h * w / bh)))
    top, left = int(rng.integers(0, h - bh + 1)), int(rng.integers(0, w - bw + 1))
    out[:, top : top + bh, left : left + bw] = _colour(_random_colour(rng), out.device)
    return out


def caption_cover(x: torch.Tensor, severity: int, rng: np.random.Generator, text_boxes=None) -> torch.Tensor:
    """Paint over the caption so the picture's text is hidden: every text box (grown with the severity), or without
    boxes a share of the bottom band of the picture, where meme captions sit."""
    text_boxes = caption_boxes(text_boxes)  # the caption's, not the scene's
    if text_boxes:
        pad = [0.1, 0.2, 0.3, 0.45, 0.6][severity - 1]  # growth of each box, as a share of its height
        return cover_boxes(x, text_boxes, pad, _random_colour(rng))
    share = [0.1, 0.15, 0.2, 0.25, 0.35][severity - 1]  # height of the covered band, as a share of the picture
    out = check_picture(x).clone()
    h = out.shape[1]
    band = max(1, round(share * h))
    out[:, h - band :] = _colour(_random_colour(rng), out.device)
    return out


def sticker(x: torch.Tensor, severity: int, rng: np.random.Generator) -> torch.Tensor:
    """Paste round, emoji-like stickers (a filled face with eyes and a smile) at random places."""
    count = [1, 2, 3, 5, 8][severity - 1]
    x = check_picture(x)
    h, w = x.shape[1:]
    canvas = Image.new("L", (w, h), 0)
    draw = ImageDraw.Draw(canvas)
    black, colours = 1, [(0, 0, 0)]  # index 1 is black; sticker k's face is index k + 2
    for k in range(count):
        r = max(2, round(min(w, h) * rng.uniform(0.06, 0.14)))
        cx, cy = int(rng.integers(0, w)), int(rng.integers(0, h))
        colours.append(_random_colour(rng))
        draw.ellipse([cx - r, cy - r, cx + r, cy + r], fill=k + 2, outline=black)
        e = max(1, r // 5)
        for dx in (-r // 3, r // 3):
            draw.ellipse([cx + dx - e, cy - r // 3 - e, cx + dx + e, cy - r // 3 + e], fill=black)
        draw.arc([cx - r // 2, cy - r // 4, cx + r // 2, cy + r // 2], 20, 160, fill=black, width=max(1, e))
    return _paint(x, canvas, colours)


def _round_half_up(x: torch.Tensor) -> torch.Tensor:
    return (x + 0.5).floor().clamp(0, 255)


def resize_bilinear(x: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    """PIL's BILINEAR resize of a picture tensor to `size` (H, W), on its device: antialiased, the width first,
    each pass rounded half up to uint8 levels as PIL's 8-bit passes are; an axis of unchanged length is skipped."""
    out = x[None].float()
    if size[1] != x.shape[2]:
        out = _round_half_up(F.interpolate(out, size=(x.shape[1], size[1]), mode="bilinear", antialias=True,
                                           align_corners=False))
    if size[0] != x.shape[1]:
        out = _round_half_up(F.interpolate(out, size=size, mode="bilinear", antialias=True, align_corners=False))
    return out[0].to(torch.uint8)


def screenshot(x: torch.Tensor, severity: int, rng: np.random.Generator) -> torch.Tensor:
    """The meme as a screenshot of a feed: shrunk into a frame with top and bottom bars (app chrome) and side
    margins, then brought back to the original size."""
    share = [0.1, 0.2, 0.3, 0.4, 0.5][severity - 1]  # share of the height taken by chrome and margins
    x = check_picture(x)
    h, w = x.shape[1:]
    inner_h = max(1, round(h * (1 - share)))
    inner_w = max(1, round(w * inner_h / h))
    frame_colour = (250, 250, 250) if rng.random() < 0.5 else (24, 24, 28)
    out = _colour(frame_colour, x.device).expand(3, h, w).clone()
    top, left = int(rng.integers(0, h - inner_h + 1)), (w - inner_w) // 2
    out[:, top : top + inner_h, left : left + inner_w] = resize_bilinear(x, (inner_h, inner_w))
    bar = max(1, round(h * share / 4))
    for y0 in (0, h - bar):  # status bar and bottom navigation
        out[:, y0 : y0 + bar] = _colour(_random_colour(rng), x.device)
    return out


def recompression(x: torch.Tensor, severity: int, rng: np.random.Generator) -> torch.Tensor:
    """A chain of re-uploads: each one shrinks the picture a little, JPEG-encodes it at a random platform quality
    and restores its size, as repeated sharing does; resizes and JPEG (libjpeg's, exactly) on the device."""
    uploads = [1, 2, 4, 6, 10][severity - 1]
    from .imagenet_c.jpeg import jpeg_roundtrip

    x = check_picture(x)
    h, w = x.shape[1:]
    for _ in range(uploads):
        scale = rng.uniform(0.6, 0.95)
        x = resize_bilinear(x, (max(1, round(h * scale)), max(1, round(w * scale))))
        x = resize_bilinear(jpeg_roundtrip(x[None], int(rng.integers(55, 86)))[0], (h, w))
    return x


EDITS = {"scribble": scribble, "occlusion": occlusion, "caption_cover": caption_cover, "sticker": sticker,
         "screenshot": screenshot, "recompression": recompression}
