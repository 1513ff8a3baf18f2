"""Caption text drawn onto a picture the way meme text sits, returning where it went (data/text_boxes.py).

Two layouts: wrapped lines in a plain band at the bottom (the demo memes), and the classic meme: white capitals
with a black outline over the picture, top and bottom (`draw_meme`, for real-size memes drawn from caption-only
data, e.g. the gallery of `memerobust preview --render`). The typographic edits read the boxes these return.
"""
from __future__ import annotations

import numpy as np
from PIL import ImageDraw, ImageFont

from .text_boxes import TextBox


def wrap(caption: str, draw: ImageDraw.ImageDraw, font, width: float) -> list[str]:
    """Greedy word wrap to `width` pixels; a single word wider than that keeps a line of its own."""
    lines, line = [], ""
    for word in caption.split():
        trial = f"{line} {word}".strip()
        if draw.textlength(trial, font=font) > width and line:
            lines.append(line)
            line = word
        else:
            line = trial
    lines.append(line)
    return lines


def draw_caption_band(draw: ImageDraw.ImageDraw, caption: str, size: tuple[int, int], band: int, line_height: int,
                      font=None, max_lines: int = 2, margin: int = 2) -> tuple[TextBox, ...]:
    """Paint a white band `band` pixels high at the bottom of a `size` (w, h) picture and write `caption` in it,
    black, wrapped, at most `max_lines` lines; the boxes of the lines drawn."""
    w, h = size
    font = font or ImageFont.load_default()
    draw.rectangle([0, h - band, w, h], fill=(255, 255, 255))
    boxes = []
    for i, text in enumerate(wrap(caption, draw, font, w - 2 * margin)[:max_lines]):
        at = (margin, h - band + 1 + line_height * i)
        draw.text(at, text, fill=(0, 0, 0), font=font)
        if text:
            boxes.append(TextBox.from_rect(*draw.textbbox(at, text, font=font), text=text))
    return tuple(boxes)


def meme_font(size: int):
    """The font the edits draw with: Pillow's own scalable font, so no system font is needed."""
    return ImageFont.load_default(size=max(6, int(size)))


def draw_outlined_lines(draw: ImageDraw.ImageDraw, lines: list[str], centre_x: float, top: float, font,
                        fill, outline, stroke: int, line_height: float) -> list[TextBox]:
    """Centred lines from `top` down, `line_height` apart, each outlined (`stroke` pixels of `outline`); the boxes
    of the lines."""
    boxes = []
    y = top
    for text in lines:
        left, t, right, bottom = draw.textbbox((0, 0), text, font=font, stroke_width=stroke)
        at = (centre_x - (right - left) / 2 - left, y - t)
        draw.text(at, text, fill=fill, font=font, stroke_width=stroke, stroke_fill=outline)
        boxes.append(TextBox.from_rect(*draw.textbbox(at, text, font=font, stroke_width=stroke), text=text))
        y += line_height
    return boxes


def draw_meme(caption: str, size: int = 512, seed: int = 0) -> tuple[np.ndarray, tuple[TextBox, ...]]:
    """A picture `size` pixels square with `caption` drawn as meme text is: white capitals outlined in black, the
    first half of the words at the top and the rest at the bottom, over a busy background (a colour gradient, soft
    shapes and grain, deterministic in `seed`), so erasing the text must restore texture, not a flat band."""
    from PIL import Image, ImageFilter

    rng = np.random.default_rng(seed)
    ys, xs = np.mgrid[0:size, 0:size] / size
    a, b = rng.integers(30, 226, (2, 3))
    angle = rng.uniform(0, np.pi)
    t = (np.cos(angle) * xs + np.sin(angle) * ys)[..., None]
    base = (a * (1 - t) + b * t).clip(0, 255)
    img = Image.fromarray(base.astype(np.uint8))
    shapes = ImageDraw.Draw(img)
    for _ in range(12):
        cx, cy, r = rng.uniform(0, size), rng.uniform(0, size), rng.uniform(size / 20, size / 5)
        shapes.ellipse([cx - r, cy - r, cx + r, cy + r], fill=tuple(int(v) for v in rng.integers(0, 256, 3)))
    img = img.filter(ImageFilter.GaussianBlur(size / 100))
    grain = rng.normal(0, 6, (size, size, 3))
    img = Image.fromarray((np.asarray(img, dtype=np.float64) + grain).clip(0, 255).astype(np.uint8))

    return draw_meme_text(np.asarray(img, dtype=np.uint8), caption)


def draw_meme_text(picture: np.ndarray, caption: str, font=meme_font) -> tuple[np.ndarray, tuple[TextBox, ...]]:
    """`caption` drawn over a copy of `picture` (h x w x 3 uint8) as meme text is: white capitals outlined in black,
    the first half of the words centred at the top and the rest at the bottom, in `font` (size -> font; Pillow's
    own by default), an eleventh of the shorter side high or smaller, so each half fits in 45% of the height."""
    from PIL import Image

    img = Image.fromarray(np.ascontiguousarray(picture, dtype=np.uint8))
    w, h = img.size
    draw = ImageDraw.Draw(img)
    words = caption.upper().split()
    halves = [" ".join(words[: (len(words) + 1) // 2]), " ".join(words[(len(words) + 1) // 2:])]
    margin = min(w, h) / 24
    font_size = min(w, h) / 11
    while True:  # a long caption gets a smaller font, so each half fits in 45% of the picture's height
        face = font(font_size)
        stroke = max(1, round(font_size / 15))
        probe = draw.textbbox((0, 0), "HGQ", font=face, stroke_width=stroke)
        line_height = (probe[3] - probe[1]) * 1.1
        blocks = [wrap(half, draw, face, w - 2 * margin) if half else [] for half in halves]
        if max(len(lines) for lines in blocks) * line_height <= 0.45 * h or font_size <= 8:
            break
        font_size *= 0.85
    white, black = (255, 255, 255), (0, 0, 0)
    boxes = draw_outlined_lines(draw, blocks[0], w / 2, margin, face, white, black, stroke, line_height)
    if blocks[1]:
        boxes += draw_outlined_lines(draw, blocks[1], w / 2, h - margin - line_height * len(blocks[1]), face,
                                     white, black, stroke, line_height)
    return np.asarray(img, dtype=np.uint8), tuple(b for b in boxes if b.text)
