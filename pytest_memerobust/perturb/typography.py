"""Typographic edits that act on the text a picture really shows, from its text boxes (data/text_boxes.py: an OCR
reading, or where a renderer drew the caption).

- `rendered_caption`: erase the caption's pixels (each box's ink, filled in from the surrounding background) and draw
  the condition's caption back into the same boxes, in the size and colours measured there, so
  `text=typos@3+image=rendered_caption` is the meme a user would really post, with its caption shown once;
- `caption_cover`: a solid patch over every box;
- `counter_text`: a short benign phrase typed onto the picture, away from the caption, to talk a detector round.

Everything runs on the picture's device; PIL only rasterises glyphs into coverage masks the picture's size (no picture
pixel leaves the device), which are blended there. A picture without boxes falls back to the old layout
(a caption band at the bottom), which a run reports.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image, ImageDraw

from ..data.render import meme_font, wrap
from ..data.text_boxes import TextBox, reading_order
from ..data.pictures import check_picture

RING = 0.35  # the background is measured on a ring this share of the box height around the box
INK_LEVEL = 40.0  # a pixel this far (RGB distance) from the background, or further, is ink


def _colour(colour: tuple[int, int, int], device: torch.device) -> torch.Tensor:
    """An RGB colour as a 3 x 1 x 1 uint8 tensor, to fill a region of a picture."""
    return torch.tensor(colour, dtype=torch.uint8, device=device)[:, None, None]


def _clipped(box: TextBox, pad: float, h: int, w: int) -> tuple[int, int, int, int]:
    """The box grown by `pad` x its height on every side, within the picture; may be empty."""
    left, top, right, bottom = box.bounds
    p = round(pad * box.height)
    return max(0, left - p), max(0, top - p), min(w, right + p), min(h, bottom + p)


def _eroded(mask: torch.Tensor, by: int) -> torch.Tensor:
    return -F.max_pool2d(-mask.float()[None, None], 2 * by + 1, stride=1, padding=by)[0, 0] > 0


def visible(boxes: Sequence[TextBox], h: int, w: int) -> list[TextBox]:
    """The boxes that show on an h x w picture (a box may lie partly or, from a stale reading, wholly off it)."""
    out = []
    for box in boxes:
        left, top, right, bottom = _clipped(box, 0.0, h, w)
        if right > left and bottom > top:
            out.append(box)
    return out


def box_colours(x: torch.Tensor, box: TextBox, others: Sequence[TextBox] = ()):
    """(background, ink, outline) of the text in one box, colours as float tensors of 3; outline is None for text
    without one. The background is the median colour of a ring around the box (less the `others`: the lines above
    and below hold text too); the glyphs are the box pixels far from it. Meme text is often white capitals outlined
    in black: when the glyphs hold many near-white and many near-black pixels, the deeper of the two (surviving more
    erosions of the glyph mask: an outline only borders the glyphs) is the ink and the other the outline. Otherwise
    the ink is the median of the glyph pixels furthest from the background."""
    h, w = x.shape[1:]
    L, T, R, B = _clipped(box, RING, h, w)
    l, t, r, b = _clipped(box, 0.0, h, w)
    if r <= l or b <= t:
        raise ValueError(f"text box {box.bounds} lies outside the {w} x {h} picture")
    region = x[:, T:B, L:R].float()
    inside = torch.zeros(B - T, R - L, dtype=torch.bool, device=x.device)
    inside[t - T : b - T, l - L : r - L] = True
    text = inside.clone()
    for other in others:
        ol, ot, orr, ob = _clipped(other, 0.0, h, w)
        text[max(0, ot - T) : max(0, ob - T), max(0, ol - L) : max(0, orr - L)] = True
    ring = region[:, ~text] if (~text).any() else region.reshape(3, -1)
    background = ring.median(dim=1).values
    distance = (region - background[:, None, None]).norm(dim=0)
    glyphs = (distance > INK_LEVEL) & inside
    if not glyphs.any():
        return background, background, None
    depth = torch.zeros_like(distance)
    for by in range(1, max(1, round(box.height / 10)) + 1):
        depth += _eroded(glyphs, by).float()
    clear = glyphs & (distance > 2.5 * INK_LEVEL)  # not the anti-aliased edge between glyph and background
    light = clear & (region.min(dim=0).values > 190)
    dark = clear & (region.max(dim=0).values < 70)
    count = glyphs.sum()
    if light.sum() >= 0.1 * count and dark.sum() >= 0.1 * count:
        ink, outline = (light, dark) if depth[light].mean() >= depth[dark].mean() else (dark, light)
        return background, region[:, ink].median(dim=1).values, region[:, outline].median(dim=1).values
    furthest = glyphs & (distance >= torch.quantile(distance[glyphs], 0.9))
    return background, region[:, furthest].median(dim=1).values, None


def _window_sum(t: torch.Tensor, radius: int) -> torch.Tensor:
    """Sums of `t` (1 x C x h x w) over the (2 radius + 1)-wide square around each pixel (zeros beyond the edges),
    from an integral image: the same cost for any window."""
    side = 2 * radius + 1
    table = F.pad(t, (radius + 1, radius, radius + 1, radius)).cumsum(-1).cumsum(-2)
    return table[..., side:, side:] - table[..., :-side, side:] - table[..., side:, :-side] + table[..., :-side, :-side]


def _inpaint(region: torch.Tensor, hole: torch.Tensor) -> torch.Tensor:
    """`region` (3 x h x w float) with the `hole` pixels filled from the known pixels around them: the mean of the
    known pixels in a window around each (normalised box filtering), the window doubling until every hole pixel has
    known neighbours, then smoothed inside the hole. A few pooling passes, whatever the hole's size."""
    known = (~hole).float()[None, None]
    values = region[None] * known
    filled = values
    reached = known > 0
    side = 3
    while not bool(reached.all()) and side < 4 * max(region.shape[1:]):
        total, count = _window_sum(values, side // 2), _window_sum(known, side // 2)
        new = (count > 0) & ~reached
        filled = torch.where(new, total / count.clamp(min=1e-6), filled)
        reached = reached | new
        side = 2 * side + 1
    for _ in range(2):  # soften the seams between windows of different sizes
        smooth = F.avg_pool2d(F.pad(filled, (1, 1, 1, 1), mode="replicate"), 3, stride=1)
        filled = torch.where(hole[None, None], smooth, filled)
    return filled[0]


def erase_text(x: torch.Tensor, boxes: Sequence[TextBox], styles: Sequence | None = None) -> torch.Tensor:
    """The picture with the ink of every box removed: pixels far from the box's background colour (grown by a
    tenth of the box height, to take anti-aliasing and outlines along) are filled in from what surrounds them.
    `styles`: each box's `box_colours`, when already measured."""
    out = check_picture(x).float()
    h, w = out.shape[1:]
    if styles is None:
        boxes = visible(boxes, h, w)
        styles = [box_colours(x, box, [other for other in boxes if other is not box]) for box in boxes]
    for box, (background, ink, _) in zip(boxes, styles):
        L, T, R, B = _clipped(box, RING, h, w)
        left, top, right, bottom = _clipped(box, 0.0, h, w)
        region = out[:, T:B, L:R]
        level = max(INK_LEVEL, 0.4 * float((ink - background).norm()))
        far = (region - background[:, None, None]).norm(dim=0) > level
        inside = torch.zeros_like(far)
        inside[top - T : bottom - T, left - L : right - L] = True
        grow = max(1, round(box.height / 10))
        hole = F.max_pool2d((far & inside).float()[None, None], 2 * grow + 1, stride=1, padding=grow)[0, 0] > 0
        if hole.any():
            out[:, T:B, L:R] = _inpaint(region, hole)
    return out.round().clamp(0, 255).to(torch.uint8)


def _share_words(caption: str, boxes: Sequence[TextBox]) -> list[str]:
    """The caption's words spread over the boxes in reading order, each box taking a share of the characters as
    long as the text it held (its width when it held none), so the new caption keeps the old one's lines; a word
    goes to the box its middle falls in."""
    words = caption.split()
    if not words:
        return [""] * len(boxes)
    weights = np.array([len(b.text) or b.width for b in boxes], dtype=float)
    ends = np.cumsum(weights) / weights.sum()
    lengths = np.array([len(word) + 1 for word in words], dtype=float)
    middles = (np.cumsum(lengths) - lengths / 2) / lengths.sum()
    which = np.minimum(np.searchsorted(ends, middles), len(boxes) - 1)
    return [" ".join(word for word, k in zip(words, which) if k == box) for box in range(len(boxes))]


def _fitted_font(draw: ImageDraw.ImageDraw, text: str, height: int, width: float, stroke: int = 0):
    """The largest font whose line of `text` (outline included) is about `height` pixels high and at most `width`
    wide."""
    size = max(6, height)
    probe = draw.textbbox((0, 0), text, font=meme_font(size), stroke_width=stroke)
    size = max(6, round(size * height / max(1, probe[3] - probe[1])))
    probe = draw.textbbox((0, 0), text, font=meme_font(size), stroke_width=stroke)
    if probe[2] - probe[0] > width:
        size = max(6, int(size * width / (probe[2] - probe[0])))
    return meme_font(size)


def _alpha(canvas: Image.Image, device) -> torch.Tensor:
    """An "L" canvas as coverage in [0, 1] on `device`."""
    return torch.from_numpy(np.asarray(canvas, dtype=np.uint8).copy()).to(device).float().div_(255)


def _over(picture: torch.Tensor, canvas: Image.Image, colour) -> torch.Tensor:
    """`colour` laid over a float picture where the "L" canvas covers it (anti-aliased edges blend), in place on
    the canvas's inked rectangle only."""
    inked = canvas.getbbox()
    if inked is None:
        return picture
    left, top, right, bottom = inked
    coverage = _alpha(canvas.crop(inked), picture.device)
    colour = torch.as_tensor(colour, dtype=torch.float32, device=picture.device)[:, None, None]
    region = picture[:, top:bottom, left:right]
    picture[:, top:bottom, left:right] = region * (1 - coverage) + colour * coverage
    return picture


def draw_text(x: torch.Tensor, lines: Sequence[tuple[str, TextBox]], inks, outlines=None,
              match_case: bool = True) -> torch.Tensor:
    """Write each (text, box) into its box: centred on it, as high as the box (smaller when the text is longer than
    the box may grow to: 1.5 x its width, within the picture), in capitals when the box held capitals, in its
    ink colour, outlined when its outline colour is not None. `inks` and `outlines` hold one RGB tuple (or None)
    per line. Glyphs are anti-aliased masks from PIL, blended on the picture's device."""
    x = check_picture(x)
    h, w = x.shape[1:]
    out = x.float()
    outlines = outlines or [None] * len(lines)
    for (text, box), ink, outline in zip(lines, inks, outlines):
        if match_case and box.text and box.text == box.text.upper() and box.text != box.text.lower():
            text = text.upper()
        if not text:
            continue
        glyphs, rim = Image.new("L", (w, h), 0), Image.new("L", (w, h), 0)
        draw = ImageDraw.Draw(glyphs)
        stroke = max(1, round(box.height / 14)) if outline is not None else 0
        room = min(w - 2, 1.5 * box.width)
        font = _fitted_font(draw, text, box.height, room, stroke)
        left, top, right, bottom = draw.textbbox((0, 0), text, font=font, stroke_width=stroke)
        bl, bt, br, bb = box.bounds
        cx = min(max((bl + br) / 2, (right - left) / 2 + 1), w - (right - left) / 2 - 1)
        at = (cx - (right - left) / 2 - left, (bt + bb) / 2 - (bottom - top) / 2 - top)
        if stroke:
            ImageDraw.Draw(rim).text(at, text, fill=255, font=font, stroke_width=stroke, stroke_fill=255)
            out = _over(out, rim, outline)
        draw.text(at, text, fill=255, font=font)
        out = _over(out, glyphs, ink)
    return out.round().clamp(0, 255).to(torch.uint8)


def _band_caption(x: torch.Tensor, caption: str) -> torch.Tensor:
    """Without text boxes: a white band at the bottom with the caption in black, wrapped, up to three lines."""
    h, w = x.shape[1:]
    glyphs = Image.new("L", (w, h), 0)
    draw = ImageDraw.Draw(glyphs)
    size = max(6, round(h / 16))
    font = meme_font(size)
    line_height = round(size * 1.2)
    lines = wrap(caption, draw, font, w - 4)[:3]
    band = min(h, line_height * len(lines) + 3)
    out = x.float()
    out[:, h - band :] = 255.0
    for i, text in enumerate(lines):
        draw.text((2, h - band + 1 + line_height * i), text, fill=255, font=font)
    return _over(out, glyphs, (0, 0, 0)).round().clamp(0, 255).to(torch.uint8)


def render_caption(x: torch.Tensor, caption: str, text_boxes: Sequence[TextBox] | None) -> torch.Tensor:
    """The picture showing `caption` instead of the text it shows: erased from its boxes and drawn back into them
    in the colours measured there; without boxes, in a band at the bottom."""
    x = check_picture(x)
    boxes = visible(reading_order(text_boxes or ()), *x.shape[1:])
    if not boxes:
        return _band_caption(x, caption)
    styles = [box_colours(x, box, [other for other in boxes if other is not box]) for box in boxes]
    erased = erase_text(x, boxes, styles)
    lines = list(zip(_share_words(caption, boxes), boxes))
    inks = [tuple(ink.round().tolist()) for _, ink, _ in styles]
    outlines = [None if outline is None else tuple(outline.round().tolist()) for _, _, outline in styles]
    return draw_text(erased, lines, inks, outlines)


def cover_boxes(x: torch.Tensor, boxes: Sequence[TextBox], pad: float, colour) -> torch.Tensor:
    """A solid `colour` patch over every box, grown by `pad` x its height."""
    out = check_picture(x).clone()
    h, w = out.shape[1:]
    for box in boxes:
        left, top, right, bottom = _clipped(box, pad, h, w)
        out[:, top:bottom, left:right] = _colour(colour, out.device)
    return out


COUNTER_PHRASES = ("just a joke", "love is love", "this is satire", "be kind", "no hate here", "peace and love",
                   "wholesome meme", "respect everyone", "all in good fun", "spread love")


def _overlaps(a: tuple[float, float, float, float], b: tuple[float, float, float, float]) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def free_spot(rng: np.random.Generator, width: float, height: float, w: int, h: int,
              taken: Sequence[tuple[float, float, float, float]]) -> tuple[float, float, float, float]:
    """(left, top, right, bottom) of a `width` x `height` rectangle at a random place on a w x h picture, clear of
    the `taken` rectangles when one of 20 draws is (else the last draw)."""
    for _ in range(20):
        left, top = rng.uniform(0, max(1, w - width)), rng.uniform(0, max(1, h - height))
        rect = (left, top, left + width, top + height)
        if not any(_overlaps(rect, t) for t in taken):
            break
    return rect


def counter_text(x: torch.Tensor, severity: int, rng: np.random.Generator,
                 text_boxes: Sequence[TextBox] | None = None) -> torch.Tensor:
    """Type short benign phrases ("just a joke", "love is love"...) onto the picture, away from its caption where
    the text boxes say where that is: the counter-speech an evader adds to talk a detector round."""
    count = [1, 1, 2, 2, 3][severity - 1]
    share = [0.06, 0.075, 0.09, 0.11, 0.13][severity - 1]  # glyph height, as a share of the picture's shorter side
    x = check_picture(x)
    h, w = x.shape[1:]
    height = max(6, round(share * min(h, w)))
    taken = [b.bounds for b in text_boxes or ()]
    lines, inks, outlines = [], [], []
    probe = ImageDraw.Draw(Image.new("L", (1, 1)))
    for choice in rng.choice(len(COUNTER_PHRASES), size=count, replace=False):
        phrase = COUNTER_PHRASES[int(choice)]
        stroke = max(1, round(height / 14))
        left, top, right, bottom = probe.textbbox((0, 0), phrase, font=_fitted_font(probe, phrase, height, w - 2,
                                                                                    stroke), stroke_width=stroke)
        width = min(w - 2, right - left)
        rect = free_spot(rng, width, height, w, h, taken)
        taken.append(rect)
        lines.append((phrase, TextBox.from_rect(*rect, text=phrase)))
        light = rng.random() < 0.7  # white on black, as meme text is, or black on white
        inks.append((255, 255, 255) if light else (0, 0, 0))
        outlines.append((0, 0, 0) if light else (255, 255, 255))
    return draw_text(x, lines, inks, outlines)
