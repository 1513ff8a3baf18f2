"""What people do to memes to slip past moderation or simply by sharing them: scribbles over the picture, covering
part of it (the caption included), stickers on top, repeated re-upload compression, screenshot framing, and the
typographic edits of the text the picture shows (typography.py: re-rendering the caption, counter-text).

Every edit keeps the picture's size and mode (RGB uint8 in, the same shape out), draws all its randomness from the
explicit `rng`, and starts with its severity table. The registered edits run on picture tensors on their device
(meme_edits_tensor.py; PIL draws only the masks of strokes and stickers); the numpy versions here are the reference
they are tested against, pixel for pixel.
"""
from __future__ import annotations

from io import BytesIO

import numpy as np
from PIL import Image, ImageDraw

from . import meme_edits_tensor, typography
from ..data.pictures import check_array
from .meme_edits_tensor import _random_colour
from .registry import register

_TAGS = ("meme_edit",)
_TYPOGRAPHIC = (*_TAGS, "typographic")  # edits of the text the picture shows


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


@register("rendered_caption", modality="image", family="meme_edit", severities=None, tags=_TYPOGRAPHIC,
          caption_source="condition", reads_text_boxes=True, takes="tensor")
def rendered_caption(x, severity, rng: np.random.Generator, caption: str, text_boxes=None):
    """Show the caption the text channel gets (perturbed, in a combined condition) in the picture: the picture's
    own caption erased from its text boxes and this one drawn into them, so pixels and caption agree, as when an
    attacker edits the meme's own text (a band at the bottom when the boxes are unknown)."""
    return typography.render_caption(x, caption, text_boxes)


@register("rendered_clean_caption", modality="image", family="meme_edit", severities=None, tags=_TYPOGRAPHIC,
          caption_source="clean", reads_text_boxes=True, takes="tensor")
def rendered_clean_caption(x, severity, rng: np.random.Generator, caption: str, text_boxes=None):
    """Show the clean caption in the picture, re-rendered in its text boxes exactly as `rendered_caption` renders
    (the same erase, font and layout). On its own it is the control of `text=typos@k+image=rendered_caption`: what
    flips here is the re-rendering's doing, not the typos'. Under a caption attack the pixels keep the original
    words while the text channel gets the edited ones, a deliberate disagreement between the inputs."""
    return typography.render_caption(x, caption, text_boxes)


@register("counter_text", modality="image", family="meme_edit", tags=_TYPOGRAPHIC, reads_text_boxes=True,
          takes="tensor")
def counter_text(x, severity: int, rng: np.random.Generator, text_boxes=None):
    """Type short benign phrases ("just a joke", "love is love") onto the picture, clear of its caption."""
    return typography.counter_text(x, severity, rng, text_boxes)


def _register_device_edits() -> None:
    """The edits as registered perturbations: their tensor versions, which draw from `rng` as the ones above."""
    for name, fn in meme_edits_tensor.EDITS.items():
        reads_boxes = name == "caption_cover"  # it covers the text boxes when they are known
        register(name, modality="image", family="meme_edit", tags=_TYPOGRAPHIC if reads_boxes else _TAGS,
                 takes="tensor", reads_text_boxes=reads_boxes)(fn)


_register_device_edits()
