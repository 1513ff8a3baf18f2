"""The meme edits (scribble, occlusion, caption_cover, sticker, recompression, screenshot) with numpy and PIL, one
picture at a time: the reference the registered edits (pytest_memerobust/perturb/meme_edits_tensor.py, on picture
tensors) are tested against, pixel for pixel. Each draws from `rng` with the same calls in the same order as its
tensor version, and starts with the same severity table."""
from __future__ import annotations

from io import BytesIO

import numpy as np
from PIL import Image, ImageDraw

from pytest_memerobust.data.pictures import check_array
from pytest_memerobust.perturb.meme_edits_tensor import _random_colour


def scribble(x: np.ndarray, severity: int, rng: np.random.Generator) -> np.ndarray:
    """Freehand strokes across the picture (random walks of thick lines), as people scribble on a meme."""
    strokes = [1, 2, 4, 6, 9][severity - 1]
    img = Image.fromarray(check_array(x))
    draw, (w, h) = ImageDraw.Draw(img), img.size
    width = max(1, round(min(w, h) / 40))
    for _ in range(strokes):
        point = rng.uniform([0, 0], [w, h])
        path = [tuple(point)]
        for _ in range(12):
            point = np.clip(point + rng.normal(0, min(w, h) / 8, 2), 0, [w - 1, h - 1])
            path.append(tuple(point))
        draw.line(path, fill=_random_colour(rng), width=width, joint="curve")
    return np.asarray(img, dtype=np.uint8)


def occlusion(x: np.ndarray, severity: int, rng: np.random.Generator) -> np.ndarray:
    """Cover a share of the picture's area with one solid box at a random place (it may hide the caption band)."""
    share = [0.05, 0.1, 0.2, 0.3, 0.45][severity - 1]
    out = check_array(x).copy()
    h, w = out.shape[:2]
    aspect = rng.uniform(0.5, 2.0)
    bh = min(h, max(1, round(np.sqrt(share * h * w / aspect))))
    bw = min(w, max(1, round(share * h * w / bh)))
    top, left = int(rng.integers(0, h - bh + 1)), int(rng.integers(0, w - bw + 1))
    out[top : top + bh, left : left + bw] = _random_colour(rng)
    return out


def caption_cover(x: np.ndarray, severity: int, rng: np.random.Generator) -> np.ndarray:
    """Paint over a share of the bottom band of the picture, where meme captions sit, so rendered text is hidden."""
    share = [0.1, 0.15, 0.2, 0.25, 0.35][severity - 1]  # height of the covered band, as a share of the picture
    out = check_array(x).copy()
    h = out.shape[0]
    band = max(1, round(share * h))
    out[h - band :] = _random_colour(rng)
    return out


def sticker(x: np.ndarray, severity: int, rng: np.random.Generator) -> np.ndarray:
    """Paste round, emoji-like stickers (a filled face with eyes and a smile) at random places."""
    count = [1, 2, 3, 5, 8][severity - 1]
    img = Image.fromarray(check_array(x))
    draw, (w, h) = ImageDraw.Draw(img), img.size
    for _ in range(count):
        r = max(2, round(min(w, h) * rng.uniform(0.06, 0.14)))
        cx, cy = int(rng.integers(0, w)), int(rng.integers(0, h))
        draw.ellipse([cx - r, cy - r, cx + r, cy + r], fill=_random_colour(rng), outline=(0, 0, 0))
        e = max(1, r // 5)
        for dx in (-r // 3, r // 3):
            draw.ellipse([cx + dx - e, cy - r // 3 - e, cx + dx + e, cy - r // 3 + e], fill=(0, 0, 0))
        draw.arc([cx - r // 2, cy - r // 4, cx + r // 2, cy + r // 2], 20, 160, fill=(0, 0, 0), width=max(1, e))
    return np.asarray(img, dtype=np.uint8)


def recompression(x: np.ndarray, severity: int, rng: np.random.Generator) -> np.ndarray:
    """A chain of re-uploads: each one shrinks the picture a little, JPEG-encodes it at a random platform quality
    and restores its size, as repeated sharing does."""
    uploads = [1, 2, 4, 6, 10][severity - 1]
    img = Image.fromarray(check_array(x))
    size = img.size
    for _ in range(uploads):
        scale = rng.uniform(0.6, 0.95)
        img = img.resize((max(1, round(size[0] * scale)), max(1, round(size[1] * scale))), Image.BILINEAR)
        buffer = BytesIO()
        img.save(buffer, format="JPEG", quality=int(rng.integers(55, 86)))
        img = Image.open(BytesIO(buffer.getvalue())).convert("RGB").resize(size, Image.BILINEAR)
    return np.asarray(img, dtype=np.uint8)


def screenshot(x: np.ndarray, severity: int, rng: np.random.Generator) -> np.ndarray:
    """The meme as a screenshot of a feed: shrunk into a frame with top and bottom bars (app chrome) and side
    margins, then brought back to the original size."""
    share = [0.1, 0.2, 0.3, 0.4, 0.5][severity - 1]  # share of the height taken by chrome and margins
    img = Image.fromarray(check_array(x))
    w, h = img.size
    inner_h = max(1, round(h * (1 - share)))
    inner_w = max(1, round(w * inner_h / h))
    frame = Image.new("RGB", (w, h), (250, 250, 250) if rng.random() < 0.5 else (24, 24, 28))
    top = int(rng.integers(0, h - inner_h + 1))
    frame.paste(img.resize((inner_w, inner_h), Image.BILINEAR), ((w - inner_w) // 2, top))
    draw = ImageDraw.Draw(frame)
    bar = max(1, round(h * share / 4))
    for y0 in (0, h - bar):  # status bar and bottom navigation
        draw.rectangle([0, y0, w, y0 + bar - 1], fill=_random_colour(rng))
    return np.asarray(frame, dtype=np.uint8)
