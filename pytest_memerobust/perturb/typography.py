"""Typographic edits that act on the text a picture really shows, from its text boxes (data/text_boxes.py: an OCR
reading, or where a renderer drew the caption).

- `rendered_caption`: erase the caption's pixels and draw the condition's caption back where it was, looking as
  it looked, so `text=typos@3+image=rendered_caption` is the meme a user would really post, with its caption shown
  once. Its control `rendered_clean_caption` re-renders the clean caption the same way: what flips under it is
  the re-rendering's doing, not the typos';
- `caption_cover`: a solid patch over every box;
- `counter_text`: a short benign phrase typed onto the picture, away from the caption, to talk a detector round.

Re-rendering, step by step:
- the boxes are grouped into lines and the lines into caption blocks (the top and the bottom caption of a classic
  meme: `text_boxes.caption_blocks`), and every block is drawn at one font size, fitted to its lines' height;
- the font matches the meme's: bold text (Impact's kind; told by its strokes' width) comes back in a bold face,
  the first bold condensed one installed (`BOLD_CAPTION_FONTS`), matplotlib's DejaVu Sans Bold or the packaged
  Anton (Impact-like), whichever is nearest the caption's width, regular text in Pillow's own font, and outlined
  text outlined as thick;
  `caption_font_name()` names them, which a run should report (pixels differ between machines with different fonts);
- the erase takes every box's ink and also the caption's ink the boxes missed (a word OCR did not read): for
  outlined text, strokes of the ink's colour wholly ringed by the outline's on the block's lines or a line above or
  below (`_aligned_words`); for plain text, pixels of the ink's colour on the plain band around the block;
- each line sits on the old line's baseline, centred where it was (or flush left, as a caption band's lines).

Everything runs on the picture's device; PIL only rasterises glyphs into coverage masks the picture's size (no picture
pixel leaves the device), which are blended there. A picture without boxes falls back to the old layout
(a caption band at the bottom), which a run reports.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image, ImageDraw, ImageFont

from ..data.render import meme_font, wrap
from ..data.text_boxes import TextBox, caption_blocks, caption_boxes, reading_order
from ..data.pictures import check_picture

RING = 0.35  # the background is measured on a ring this share of the box height around the box
INK_LEVEL = 40.0  # a pixel this far (RGB distance) from the background, or further, is ink
# Faces like meme text's (Impact: bold, condensed), by preference; the first Pillow finds in the system's font folders
# draws bold captions. matplotlib, a dependency, always ships DejaVu Sans Bold: the last resort before Pillow's own.
BOLD_CAPTION_FONTS = ("Impact.ttf", "impact.ttf", "Anton-Regular.ttf", "NotoSans-CondensedBlack.ttf",
                      "BebasNeue-Regular.ttf", "BebasNeue-Regular.otf", "DejaVuSansCondensed-Bold.ttf")
PILLOW_DEFAULT = "Pillow default"
# The caption's ink the boxes missed is looked for in its block's rows and this many line heights above and below
# (a whole line OCR missed), for outlined text; text without an outline, which must sit on a plain band to be
# told from the picture, only in the block's own rows and half a line around them.
BAND_PAD_OUTLINED, BAND_PAD_PLAIN = 1.2, 0.5


def _bold_face(names: Sequence[str]) -> str | None:
    for name in names:
        try:
            return ImageFont.truetype(name, 10).path
        except OSError:
            continue
    return None


def _packaged_anton() -> str | None:
    """Anton (an open face drawn after Impact: bold, narrow) from the package fontpkg-anton, a dependency: the same
    file on every machine, where system fonts differ."""
    try:
        from importlib.resources import files

        path = files("fontpkg_anton") / "files" / "Anton-Regular.ttf"
    except ImportError:
        return None
    return _bold_face([str(path)]) if path.is_file() else None


@lru_cache(maxsize=None)
def caption_faces() -> tuple[str, ...]:
    """The font files bold captions may be re-rendered in: the first of `BOLD_CAPTION_FONTS` installed, matplotlib's
    DejaVuSans-Bold.ttf (of normal width) and the packaged Anton (narrowest: Impact's kind, the classic meme face);
    each caption block takes the one whose width is nearest its own. The first also decides a block's weight
    (`block_face`). Empty when none is there (bold captions then come back in Pillow's own font)."""
    faces = [_bold_face(BOLD_CAPTION_FONTS)]
    try:
        import matplotlib

        faces.append(_bold_face([str(Path(matplotlib.get_data_path()) / "fonts" / "ttf" / "DejaVuSans-Bold.ttf")]))
    except ImportError:
        pass
    faces.append(_packaged_anton())
    return tuple(dict.fromkeys(face for face in faces if face))


def caption_font(size: int, face: str = PILLOW_DEFAULT):
    """A caption font at `size` pixels (6 at least): the font file `face` (one of `caption_faces`), or
    `PILLOW_DEFAULT`, Pillow's own scalable font (Aileron Regular), in which captions of regular weight come back
    (the demo memes are drawn in it)."""
    return meme_font(size) if face == PILLOW_DEFAULT else _truetype(face, max(6, int(size)))


@lru_cache(maxsize=256)
def _truetype(path: str, size: int):
    return ImageFont.truetype(path, size)


def face_name(face: str) -> str:
    """"DejaVu Sans Condensed Bold (/usr/share/fonts/truetype/dejavu/DejaVuSansCondensed-Bold.ttf)"."""
    if face == PILLOW_DEFAULT:
        return f"{PILLOW_DEFAULT} (Aileron Regular)"
    family, style = _truetype(face, 10).getname()
    return f"{family} {style} ({face})"


def caption_font_name() -> str:
    """The fonts re-rendered captions are drawn in, in one line for a run's notes: the pixels of `rendered_caption`
    differ between machines with different fonts installed."""
    faces = caption_faces()
    bold = " or ".join(face_name(face) for face in faces) if faces else face_name(PILLOW_DEFAULT)
    which = ", whichever is nearest the caption's width" if len(faces) > 1 else ""
    return f"bold captions in {bold}{which}; regular ones in {face_name(PILLOW_DEFAULT)}"


def _colour(colour: tuple[int, int, int], device: torch.device) -> torch.Tensor:
    """An RGB colour as a 3 x 1 x 1 uint8 tensor, to fill a region of a picture."""
    return torch.tensor(colour, dtype=torch.uint8, device=device)[:, None, None]


def _clipped(box: TextBox, pad: float, h: int, w: int) -> tuple[int, int, int, int]:
    """The box grown by `pad` x its height on every side, within the picture; may be empty."""
    left, top, right, bottom = box.bounds
    p = round(pad * box.height)
    return max(0, left - p), max(0, top - p), min(w, right + p), min(h, bottom + p)


def _square_max(t: torch.Tensor, by: int) -> torch.Tensor:
    """The maximum of a float h x w map over the (2 by + 1)-wide square around each pixel (the edges left out), as
    a row pass and a column pass: the same, at a cost that grows with `by`, not its square."""
    side = 2 * by + 1
    t = F.max_pool2d(t[None, None], (1, side), stride=1, padding=(0, by))
    return F.max_pool2d(t, (side, 1), stride=1, padding=(by, 0))[0, 0]


def _eroded(mask: torch.Tensor, by: int) -> torch.Tensor:
    return -_square_max(-mask.float(), by) > 0


def visible(boxes: Sequence[TextBox], h: int, w: int) -> list[TextBox]:
    """The caption's boxes (text_boxes.caption_boxes) that show on an h x w picture (a box may lie partly or, from a
    stale reading, wholly off it)."""
    out = []
    for box in caption_boxes(boxes):
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


def _dilated(mask: torch.Tensor, by: int) -> torch.Tensor:
    if by <= 0:
        return mask
    return _square_max(mask.float(), by) > 0


def _distance(region: torch.Tensor, colour: torch.Tensor) -> torch.Tensor:
    """The RGB distance of every pixel of a 3 x h x w float region from `colour`."""
    return (region - colour[:, None, None]).norm(dim=0)


def _stem(mask: torch.Tensor) -> float:
    """The mean width of the strokes of the shapes in a mask, in pixels: twice their area over their edge (their
    pixels with a neighbour outside them). For a ring, as an outline is, its thickness."""
    area = mask.sum()
    edge = area - _eroded(mask, 1).sum()
    return float(2 * area / edge.clamp(min=1))


@dataclass
class _Block:
    """One caption block as measured on the picture: its lines (one box around each line's boxes, top to bottom, and
    where its glyphs really are: `_glyph_extent`), colours and outline thickness (0 without one)."""

    lines: list[TextBox]
    glyphs: list[tuple[int, int, int, int]]
    background: torch.Tensor
    ink: torch.Tensor
    outline: torch.Tensor | None
    stroke: int

    @property
    def rows(self) -> list[tuple[int, int]]:
        return [(top, bottom) for _, top, _, bottom in self.glyphs]

    @property
    def line_height(self) -> int:
        return max(1, int(np.median([bottom - top for top, bottom in self.rows])))

    def tolerance(self) -> float:
        """How far (RGB distance) from its ink or outline colour a pixel may be and still be of that colour."""
        other = self.outline if self.outline is not None else self.background
        return min(120.0, max(INK_LEVEL, 0.3 * float((self.ink - other).norm())))


def _union(boxes: Sequence[TextBox]) -> TextBox:
    """One box around `boxes` (left to right), holding their texts joined by spaces."""
    bounds = [b.bounds for b in boxes]
    return TextBox.from_rect(min(b[0] for b in bounds), min(b[1] for b in bounds), max(b[2] for b in bounds),
                             max(b[3] for b in bounds), " ".join(b.text.strip() for b in boxes if b.text.strip()))


def _strokes(mask: torch.Tensor, height: int) -> torch.Tensor:
    """The pixels of `mask` in strokes no thicker than 0.3 x a line `height` (glyphs, not a wall of their colour):
    those a square that wide, wholly inside the mask, does not reach."""
    thick = max(1, math.ceil(0.15 * height))
    return mask & ~_dilated(_eroded(mask, thick), thick)


def _enclosed(ink: torch.Tensor, rim: torch.Tensor) -> torch.Tensor:
    """The `ink` pixels from which the first pixel out of the ink, going left, right, up and down, is a `rim` pixel:
    glyphs wholly ringed by their outline. A white stone on gravel, a highlight on a helmet or a white strap touch
    something else than black on some side."""
    enclosed = ink.clone()
    for dim in (0, 1):
        for backwards in (False, True):
            inside, ring = (ink.flip(dim), rim.flip(dim)) if backwards else (ink, rim)
            n = inside.shape[dim]
            shape = [1, 1]
            shape[dim] = n
            index = torch.arange(n, device=ink.device).view(shape).expand_as(inside)
            out = torch.where(inside, torch.full_like(index, n), index)  # where the ink ends, n past the edge
            exit_at = out.flip(dim).cummin(dim).values.flip(dim)  # the first pixel out of the ink from each pixel on
            hit = torch.gather(torch.cat([ring, torch.zeros_like(ring.narrow(dim, 0, 1))], dim), dim, exit_at)
            enclosed &= hit.flip(dim) if backwards else hit
    return enclosed


def _outlined_strokes(region: torch.Tensor, ink: torch.Tensor, outline: torch.Tensor, tolerance: float,
                      height: int) -> torch.Tensor:
    """The pixels of outlined glyphs in a region of the picture: `_strokes` of the ink's colour, `_enclosed` by the
    outline's colour (or a pixel next to it: the anti-aliased edge between the two)."""
    near_ink = _distance(region, ink) < tolerance
    rim = _dilated(_distance(region, outline) < tolerance, 1)
    return _strokes(near_ink, height) & _enclosed(near_ink, rim)


ROW_SHARE = 0.3  # a line's glyphs take the rows around its fullest one holding this share of its glyph pixels
ROW_GAP = 2  # ... or with one this many rows away or closer


def _ink_extent(mask: torch.Tensor, first: int = 0, last: int | None = None) -> tuple[int, int, int, int] | None:
    """(left, top, right, bottom) in `mask` of a line of glyphs whose fullest row is among rows first:last: the run
    of rows around that row holding `ROW_SHARE` of its glyph pixels or more, across gaps of `ROW_GAP` rows (a round
    letter's overshoot, a descender's tail and a stray pixel of the picture above or below are left out: only the
    line's body counts, the same on a picture as on a rendered line), and the columns holding two or more in those
    rows. None: no glyphs."""
    counts = mask.float().sum(dim=1)
    inside = counts[first:last]
    if not bool((inside > 0).any()):
        return None
    full = (counts >= ROW_SHARE * inside.max()).tolist()
    top = bottom = first + int(inside.argmax())
    while any(full[max(0, top - ROW_GAP - 1) : top]):  # a row or two short of glyph pixels do not end the line
        top -= 1
    while any(full[bottom + 1 : bottom + ROW_GAP + 2]):
        bottom += 1
    columns = (mask[top : bottom + 1].sum(dim=0) >= 2).nonzero().flatten().tolist() or [0, mask.shape[1] - 1]
    return columns[0], top, columns[-1] + 1, bottom + 1


def _glyph_extent(x: torch.Tensor, box: TextBox, glyph) -> tuple[int, int, int, int]:
    """(left, top, right, bottom) of a line's glyphs on the picture (`_ink_extent`; `glyph` tells the glyph pixels
    of a 3 x h x w region and the box), found in its box grown by a quarter of its height (a reader's box may cut
    the glyphs or leave room around them). The box itself when it holds none."""
    h, w = x.shape[1:]
    left, top, right, bottom = _clipped(box, 0.0, h, w)
    grow = round(0.25 * box.height)
    outer_left, outer_top = max(0, left - grow), max(0, top - grow)
    m = math.ceil(0.15 * box.height) + 1  # context around, so that a wall cut by the crop still looks a wall
    start_row, start_col = max(0, outer_top - m), max(0, outer_left - m)
    mask = glyph(x[:, start_row : bottom + grow + m, start_col : right + grow + m].float(), box)
    mask = mask[outer_top - start_row : bottom + grow - start_row, outer_left - start_col : right + grow - start_col]
    found = _ink_extent(mask, top - outer_top, bottom - outer_top)
    if found is None:
        return left, top, right, bottom
    return outer_left + found[0], outer_top + found[1], outer_left + found[2], outer_top + found[3]


def _median(colours: Sequence[torch.Tensor]) -> torch.Tensor:
    return torch.stack(list(colours)).median(dim=0).values


def _rim(x: torch.Tensor, block: _Block) -> torch.Tensor | None:
    """The colour of an outline `box_colours` could not tell from a background near its colour (black around white
    capitals over a dark picture), or None: the median of the pixels bordering the glyphs (1 pixel from the pixels
    of the ink's colour, in the lines' boxes; else 2 pixels, past the anti-aliased edge; else both) when most of them
    are near it and it is not the background's."""
    h, w = x.shape[1:]
    rings: dict[tuple[int, int], list[torch.Tensor]] = {(1, 0): [], (2, 1): [], (2, 0): []}
    for line in block.lines:
        left, top, right, bottom = _clipped(line, 0.0, h, w)
        region = x[:, top:bottom, left:right].float()
        ink = _distance(region, block.ink) < INK_LEVEL
        for (outer, inner), found in rings.items():
            found.append(region[:, _dilated(ink, outer) & ~_dilated(ink, inner)])
    for found in rings.values():
        rim = torch.cat(found, dim=1)
        if rim.shape[1] == 0:
            return None
        colour = rim.median(dim=1).values
        steady = float(((rim - colour[:, None]).norm(dim=0) < INK_LEVEL).float().mean()) >= 0.6
        apart = (float((colour - block.background).norm()) > INK_LEVEL
                 and float((colour - block.ink).norm()) > 2.5 * INK_LEVEL)
        if steady and apart:
            return colour
    return None


def measure_blocks(x: torch.Tensor, boxes: Sequence[TextBox], styles: Sequence) -> list[_Block]:
    """The caption blocks of the visible `boxes` (their `box_colours` in `styles`), measured: colours are the
    medians of their boxes' (outlined when half of its boxes are or more), the outline's thickness that of the
    pixels of the outline's colour around the glyphs, and each line's `_glyph_extent`."""
    style_of = {id(box): style for box, style in zip(boxes, styles)}
    h, w = x.shape[1:]
    blocks = []
    for lines in caption_blocks(boxes):
        members = [style_of[id(box)] for line in lines for box in line]
        outlines = [outline for _, _, outline in members if outline is not None]
        # outlined when half its boxes are, or more: an outline does not show against a background of its colour
        outline = _median(outlines) if 2 * len(outlines) >= len(members) else None
        block = _Block([_union(line) for line in lines], [], _median([m[0] for m in members]),
                       _median([m[1] for m in members]), outline, 0)
        if outline is None:
            block.outline = _rim(x, block)
        tolerance, outline = block.tolerance(), block.outline
        if outline is None:
            level = max(INK_LEVEL, 0.4 * float((block.ink - block.background).norm()))
            block.glyphs = [_glyph_extent(x, line, lambda r, _: _distance(r, block.background) > level)
                            for line in block.lines]
        else:
            def strokes(region, line):
                return _outlined_strokes(region, block.ink, outline, tolerance, line.height)

            block.glyphs = [_glyph_extent(x, line, strokes) for line in block.lines]
            most = max(1, round(block.line_height / 8))
            stems = []
            for line in block.lines:  # the outline's pixels near the glyphs; the thinnest ring is the truest (the
                # outline merges with a background of its colour)
                left, top, right, bottom = _clipped(line, 0.25, h, w)
                region = x[:, top:bottom, left:right].float()
                near_glyphs = _dilated(_distance(region, block.ink) < tolerance, most)
                stems.append(_stem((_distance(region, outline) < tolerance) & near_glyphs))
            block.stroke = max(1, min(round(min(stems)), most))
        blocks.append(block)
    return blocks


def _plain_glyphs(band: torch.Tensor, block: _Block) -> torch.Tensor:
    """The pixels of a block of plain (not outlined) text's ink colour in `band` (rows of the picture around it)
    where most of a window half a line high around them is the block's background: its glyphs on a plain band,
    whether or not a box holds them."""
    tolerance, half = block.tolerance(), max(1, block.line_height // 4)
    near_background = (_distance(band, block.background) < tolerance).float()[None, None]
    plain = _window_sum(near_background, half)[0, 0] / (2 * half + 1) ** 2 > 0.5
    return (_distance(band, block.ink) < tolerance) & plain


def _runs(columns: Sequence[int], gap: int) -> list[tuple[int, int]]:
    """Runs (start, stop) of sorted column numbers, a run going on across gaps up to `gap` columns."""
    runs: list[list[int]] = []
    for c in columns:
        if runs and c - runs[-1][1] <= gap:
            runs[-1][1] = c + 1
        else:
            runs.append([c, c + 1])
    return [(start, stop) for start, stop in runs]


def _aligned_words(glyphs: torch.Tensor, block: _Block, band_top: int) -> torch.Tensor:
    """The outlined glyphs in `glyphs` (a mask of rows of the picture from `band_top`) that sit on one of the block's
    lines, or on a line one line pitch above or below them (a line OCR missed altogether): runs of glyph columns
    (letters and words: gaps under a quarter of the body height) in the line's rows whose own body
    (`_ink_extent`) starts and ends within a fifth of the body height of the line's. What is not text, a highlight or
    a white strap bordered with black, seldom fits a line of capitals so."""
    out = torch.zeros_like(glyphs)
    rows = block.rows
    pitch = float(np.median([b[0] - a[0] for a, b in zip(rows, rows[1:])])) if len(rows) > 1 else 1.3 * (
        rows[0][1] - rows[0][0])
    lines = [(round(rows[0][0] - pitch), round(rows[0][1] - pitch)), *rows,
             (round(rows[-1][0] + pitch), round(rows[-1][1] + pitch))]
    for top, bottom in lines:
        body = bottom - top
        start, stop = max(0, top - band_top - round(0.25 * body)), min(len(glyphs), bottom - band_top + round(0.4 * body))
        if stop - start < body:
            continue
        line = glyphs[start:stop]
        columns = (line.sum(dim=0) > 0).nonzero().flatten().tolist()
        for left, right in _runs(columns, max(1, round(0.25 * body))):
            if right - left < 0.1 * body:
                continue
            found = _ink_extent(line[:, left:right], top - band_top - start, bottom - band_top - start)
            if found and abs(found[1] - (top - band_top - start)) <= 0.2 * body and \
                    abs(found[3] - (bottom - band_top - start)) <= 0.2 * body:
                out[start:stop, left:right] |= line[:, left:right]
    return out


def _fill_holes(out: torch.Tensor, hole: torch.Tensor, margin: int) -> torch.Tensor:
    """`out` (3 x h x w float) with the `hole` pixels inpainted, a span of rows at a time: each run of rows holding
    holes, grown by `margin` rows (the known pixels they are filled from)."""
    rows = hole.any(dim=1).nonzero().flatten().tolist()
    spans: list[list[int]] = []
    for row in rows:
        if spans and row - margin <= spans[-1][1]:
            spans[-1][1] = row + margin + 1
        else:
            spans.append([row - margin, row + margin + 1])
    for start, stop in spans:
        start, stop = max(0, start), min(out.shape[1], stop)
        out[:, start:stop] = _inpaint(out[:, start:stop], hole[start:stop])
    return out


def text_mask(x: torch.Tensor, boxes: Sequence[TextBox], styles: Sequence,
              blocks: Sequence[_Block] | None = None) -> torch.Tensor:
    """The pixels of the caption, an h x w bool mask, block by block, in the rows of its band (`BAND_PAD_*`).
    Outlined text: in its lines' boxes, the strokes of its ink's colour near its outline's colour and near wholly
    outlined glyphs (`_outlined_strokes`); outside them, the outlined glyphs on its lines, or a line above or below,
    that the boxes missed (`_aligned_words`). Plain text: the pixels far from its background in its boxes, and its
    glyphs on a plain band around them (`_plain_glyphs`). Grown to take anti-aliasing and the outline along."""
    h, w = x.shape[1:]
    picture = x.float()
    blocks = measure_blocks(x, boxes, styles) if blocks is None else blocks
    grown = torch.zeros(h, w, dtype=torch.bool, device=x.device)
    for block in blocks:
        pad = round((BAND_PAD_PLAIN if block.outline is None else BAND_PAD_OUTLINED) * block.line_height)
        top = max(0, min(block.rows[0][0] - pad, block.lines[0].bounds[1]))
        bottom = min(h, max(block.rows[-1][1] + pad, block.lines[-1].bounds[3]))
        band = picture[:, top:bottom]
        in_boxes = torch.zeros(bottom - top, w, dtype=torch.bool, device=x.device)
        for line in block.lines:
            left, line_top, right, line_bottom = _clipped(line, 0.0, h, w)
            in_boxes[max(0, line_top - top) : line_bottom - top, left:right] = True
        if block.outline is None:
            level = max(INK_LEVEL, 0.4 * float((block.ink - block.background).norm()))
            glyphs = (in_boxes & (_distance(band, block.background) > level)) | _plain_glyphs(band, block)
        else:
            tolerance = block.tolerance()
            near_ink = _distance(band, block.ink) < tolerance
            reach = math.ceil(0.15 * block.line_height) + block.stroke + 1  # from a stroke's middle to the outline
            near_outline = _dilated(_distance(band, block.outline) < tolerance, reach)
            outlined = _outlined_strokes(band, block.ink, block.outline, tolerance, block.line_height)
            # in the boxes, looser: strokes near the outline's colour and near glyphs wholly outlined (an anti-aliased
            # pixel or a letter touching another can break the ring)
            loose = _strokes(near_ink, block.line_height) & near_outline & _dilated(outlined, reach)
            glyphs = (loose & in_boxes) | _aligned_words(outlined, block, top)
        grow = max(1, round(block.line_height / 10)) + block.stroke
        grown[top:bottom] |= _dilated(glyphs, grow)
    return grown


def erase_text(x: torch.Tensor, boxes: Sequence[TextBox], styles: Sequence | None = None,
               blocks: Sequence[_Block] | None = None) -> torch.Tensor:
    """The picture with its caption removed: the pixels of `text_mask` filled in from what surrounds them.
    `styles`: each box's `box_colours`, `blocks`: `measure_blocks`, when already measured."""
    x = check_picture(x)
    h, w = x.shape[1:]
    if styles is None:
        boxes = visible(boxes, h, w)
        styles = [box_colours(x, box, [other for other in boxes if other is not box]) for box in boxes]
    if not boxes:
        return x.clone()
    blocks = measure_blocks(x, boxes, styles) if blocks is None else blocks
    hole = text_mask(x, boxes, styles, blocks)
    margin = max(1, round(RING * max(block.line_height for block in blocks)))
    return _fill_holes(x.float(), hole, margin).round().clamp(0, 255).to(torch.uint8)


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


def _draw_line(out: torch.Tensor, text: str, at: tuple[float, float], font, ink, outline=None,
               stroke: int = 0) -> torch.Tensor:
    """`text` drawn at `at` (PIL's origin) in `font`, in the `ink` colour, outlined `stroke` pixels wide in the
    `outline` colour when that is not None, blended into the float picture `out` in place."""
    h, w = out.shape[1:]
    if stroke and outline is not None:
        rim = Image.new("L", (w, h), 0)
        ImageDraw.Draw(rim).text(at, text, fill=255, font=font, stroke_width=stroke, stroke_fill=255)
        out = _over(out, rim, outline)
    glyphs = Image.new("L", (w, h), 0)
    ImageDraw.Draw(glyphs).text(at, text, fill=255, font=font)
    return _over(out, glyphs, ink)


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
    probe = ImageDraw.Draw(Image.new("L", (1, 1)))
    for (text, box), ink, outline in zip(lines, inks, outlines):
        if match_case and _capitals(box.text):
            text = text.upper()
        if not text:
            continue
        stroke = max(1, round(box.height / 14)) if outline is not None else 0
        room = min(w - 2, 1.5 * box.width)
        font = _fitted_font(probe, text, box.height, room, stroke)
        left, top, right, bottom = probe.textbbox((0, 0), text, font=font, stroke_width=stroke)
        bl, bt, br, bb = box.bounds
        cx = min(max((bl + br) / 2, (right - left) / 2 + 1), w - (right - left) / 2 - 1)
        at = (cx - (right - left) / 2 - left, (bt + bb) / 2 - (bottom - top) / 2 - top)
        out = _draw_line(out, text, at, font, ink, outline, stroke)
    return out.round().clamp(0, 255).to(torch.uint8)


def _capitals(text: str) -> bool:
    return text == text.upper() and text != text.lower()


@lru_cache(maxsize=1024)
def _rendered(text: str, size: int, face: str) -> tuple[float, int, int, int, int]:
    """`text` drawn at `size` in `face`, measured as a line on a picture is: its strokes' width (`_stem`) and its
    `_ink_extent` (left, top, right, bottom), from the point it is drawn at."""
    font = caption_font(size, face)
    left, top, right, bottom = font.getbbox(text)
    canvas = Image.new("L", (right - left + 2, bottom - top + 2), 0)
    ImageDraw.Draw(canvas).text((1 - left, 1 - top), text, fill=255, font=font)
    mask = torch.from_numpy(np.asarray(canvas) >= 128)
    extent = _ink_extent(mask) or (1, 1, 2, 2)
    return (_stem(mask), extent[0] + left - 1, extent[1] + top - 1, extent[2] + left - 1, extent[3] + top - 1)


@lru_cache(maxsize=1024)
def _size_for(text: str, height: int, face: str) -> int:
    """The font size at which a line of `text` in `face` is `height` pixels high (its `_ink_extent`)."""
    size = max(6, height)
    for _ in range(3):
        _, _, top, _, bottom = _rendered(text, size, face)
        size = max(6, round(size * height / max(1, bottom - top)))
    return size


def _nearest(measured: float, candidates: dict[str, float]) -> str:
    """The key of the candidate value nearest `measured`, as ratios."""
    return min(candidates, key=lambda key: abs(math.log(max(measured, 1e-3) / max(candidates[key], 1e-3))))


def block_face(x: torch.Tensor, block: _Block) -> str:
    """The face a block's caption comes back in, from its longest line. Its weight: the stroke width of its ink
    (the pixels nearer its ink colour than its background's and outline's) is compared with that of the line's text
    drawn in Pillow's own regular font and in the first of `caption_faces`, each as high as the line's glyphs. Bold:
    of `caption_faces`, the one whose line of that text, as high, is nearer the line's glyphs' width."""
    faces = caption_faces()
    k = max(range(len(block.lines)), key=lambda i: block.lines[i].width)
    line, (left, top, right, bottom) = block.lines[k], block.glyphs[k]
    if not faces or not line.text:
        return PILLOW_DEFAULT
    region = x[:, top:bottom, left:right].float()
    others = [_distance(region, block.background)]
    if block.outline is not None:
        others.append(_distance(region, block.outline))
    ink = _distance(region, block.ink) < torch.stack(others).min(dim=0).values
    if not ink.any():
        return PILLOW_DEFAULT
    height = max(1, bottom - top)
    stems = {face: _rendered(line.text, _size_for(line.text, height, face), face)[0]
             for face in (PILLOW_DEFAULT, faces[0])}
    if _nearest(_stem(ink), stems) == PILLOW_DEFAULT:
        return PILLOW_DEFAULT
    widths = {}
    for face in faces:
        _, glyph_left, _, glyph_right, _ = _rendered(line.text, _size_for(line.text, height, face), face)
        widths[face] = glyph_right - glyph_left
    return _nearest(right - left, widths)


WIDTH_SLACK = 1.1  # a re-rendered line may be this much wider than its old text would be at the block's size


def _block_size(block: _Block, texts: Sequence[str], face: str, w: int) -> int:
    """The one font size of a block, fitted to its lines as the original was: the median of the sizes that make each
    line's old text as high as it is on the picture (weighted by the lines' widths), no larger than makes any line's
    old text WIDTH_SLACK times as wide as its glyphs are (a face wider than the meme's comes back smaller, in the
    same place, not over the picture's edge), and smaller still where a new line would be wider than its line may
    grow (1.5 x its glyphs' width, within the picture)."""
    sizes = [_size_for(line.text or text or "H", max(1, bottom - top), face)
             for line, (_, top, _, bottom), text in zip(block.lines, block.glyphs, texts)]
    weights = [right - left for left, _, right, _ in block.glyphs]  # a long line is measured the more surely
    order = np.argsort(sizes)
    size = sizes[order[np.searchsorted(np.cumsum(np.array(weights)[order]), sum(weights) / 2)]]
    for line, (left, _, right, _) in zip(block.lines, block.glyphs):
        if line.text:
            _, old_left, _, old_right, _ = _rendered(line.text, size, face)
            if old_right - old_left > WIDTH_SLACK * (right - left):
                size = max(6, int(size * WIDTH_SLACK * (right - left) / (old_right - old_left)))
    for (left, _, right, _), text in zip(block.glyphs, texts):
        if text:
            _, text_left, _, text_right, _ = _rendered(text, size, face)
            room = min(w - 2 - 2 * block.stroke, 1.5 * (right - left))
            if text_right - text_left > room:
                size = max(6, min(size, int(size * room / (text_right - text_left))))
    return size


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


def _flush_left(block: _Block, w: int) -> bool:
    """Whether a block is set flush left, as a caption band's text is, rather than centred, as meme text is: its
    lines start within half a line height of each other and their middles do not (one line: it starts in the
    picture's left tenth and its middle is away from the picture's)."""
    lefts = [left for left, _, _, _ in block.glyphs]
    middles = [(left + right) / 2 for left, _, right, _ in block.glyphs]
    if len(lefts) == 1:
        return lefts[0] < 0.1 * w and abs(middles[0] - w / 2) > 0.1 * w
    spread = block.line_height / 2
    return max(lefts) - min(lefts) <= spread < max(middles) - min(middles)


def render_caption(x: torch.Tensor, caption: str, text_boxes: Sequence[TextBox] | None) -> torch.Tensor:
    """The picture showing `caption` instead of the text it shows: erased (`erase_text`) and drawn back into its
    lines (its words shared as the old lines held theirs), in the colours measured there, one font size a caption
    block, in the face `block_face` picks; without boxes, in a band at the bottom."""
    x = check_picture(x)
    h, w = x.shape[1:]
    boxes = visible(reading_order(text_boxes or ()), h, w)
    if not boxes:
        return _band_caption(x, caption)
    styles = [box_colours(x, box, [other for other in boxes if other is not box]) for box in boxes]
    blocks = measure_blocks(x, boxes, styles)
    out = erase_text(x, boxes, styles, blocks).float()
    texts = _share_words(caption, [line for block in blocks for line in block.lines])
    for block in blocks:
        texts_here, texts = texts[: len(block.lines)], texts[len(block.lines):]
        if _capitals(" ".join(line.text for line in block.lines)):
            texts_here = [text.upper() for text in texts_here]
        face = block_face(x, block)
        size = _block_size(block, texts_here, face, w)
        font = caption_font(size, face)
        ink = tuple(block.ink.round().tolist())
        outline = None if block.outline is None else tuple(block.outline.round().tolist())
        flush_left = _flush_left(block, w)
        for line, (left, top, right, bottom), text in zip(block.lines, block.glyphs, texts_here):
            if not text:
                continue
            # the new text sits on the old text's baseline (the bottom of its body), centred where the old one was
            # (starting where it started, in a block set flush left)
            _, _, _, _, old_bottom = _rendered(line.text or text, size, face)
            _, text_left, _, text_right, _ = _rendered(text, size, face)
            half = (text_right - text_left) / 2 + block.stroke + 1
            cx = left + (text_right - text_left) / 2 if flush_left else (left + right) / 2
            cx = min(max(cx, half), w - half)
            out = _draw_line(out, text, (cx - (text_left + text_right) / 2, bottom - old_bottom), font, ink, outline,
                             block.stroke)
    return out.round().clamp(0, 255).to(torch.uint8)


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
