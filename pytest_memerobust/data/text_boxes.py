"""Where a picture shows text: the boxes an OCR reader found (data/ocr.py) or a renderer drew (data/render.py).

Why: typographic edits act on the text the picture really shows (erase it, draw another caption into the same place,
cover it), and an OCR reading keeps where each piece of text was. A meme carries its boxes in
`meta[TEXT_BOXES]`; every coordinate is in the pixels of the meme's own picture.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

TEXT_BOXES = "text_boxes"  # Meme.meta key: a tuple of TextBox in reading order


@dataclass(frozen=True)
class TextBox:
    """One line (or piece) of text on a picture: its four corners (x, y), clockwise from the top left, the text
    read or drawn there, the reader's confidence (1 for drawn text), the panel it was read in (data/ocr.py
    `panel_cuts`: panels side by side, numbered left to right, each read whole before the next; 0 for one) and
    whether it is scene text (data/ocr.py `scene_text`: a T-shirt's, a sign's, a watermark's, not the caption's;
    kept, and noted, but out of the caption and never erased, covered or re-typed)."""

    corners: tuple[tuple[float, float], ...]
    text: str = ""
    score: float = 1.0
    region: int = 0
    scene: bool = False

    @classmethod
    def from_rect(cls, left: float, top: float, right: float, bottom: float, text: str = "",
                  score: float = 1.0) -> "TextBox":
        return cls(((left, top), (right, top), (right, bottom), (left, bottom)), text, score)

    @property
    def bounds(self) -> tuple[int, int, int, int]:
        """(left, top, right, bottom) of the enclosing rectangle in whole pixels; right and bottom exclusive."""
        xs, ys = [c[0] for c in self.corners], [c[1] for c in self.corners]
        return int(min(xs)), int(min(ys)), int(-(-max(xs) // 1)), int(-(-max(ys) // 1))

    @property
    def height(self) -> int:
        left, top, right, bottom = self.bounds
        return max(1, bottom - top)

    @property
    def width(self) -> int:
        left, top, right, bottom = self.bounds
        return max(1, right - left)

    def scaled(self, factor: float) -> "TextBox":
        """The box on a picture resized by `factor` (OCR reads an upscaled copy of small pictures)."""
        return TextBox(tuple((x * factor, y * factor) for x, y in self.corners), self.text, self.score, self.region,
                       self.scene)

    def shifted(self, dx: float, region: int) -> "TextBox":
        """The box moved `dx` pixels right, in panel `region`: from a panel's own pixels to the picture's."""
        return TextBox(tuple((x + dx, y) for x, y in self.corners), self.text, self.score, region, self.scene)

    def to_json(self) -> list:
        return ([[list(c) for c in self.corners], self.text, self.score]
                + ([self.region] if self.region or self.scene else []) + ([True] if self.scene else []))

    @classmethod
    def from_json(cls, value) -> "TextBox":
        """The inverse of `to_json`; ValueError on anything else (a damaged cache entry)."""
        try:
            corners, text, score, *more = value
            corners = tuple((float(x), float(y)) for x, y in corners)
            region, scene = (int(more[0]) if more else 0), (more[1] if len(more) > 1 else False)
        except (TypeError, ValueError):
            raise ValueError(f"not a text box: {value!r}") from None
        if len(corners) != 4 or not isinstance(text, str) or len(value) > 5 or not isinstance(scene, bool):
            raise ValueError(f"not a text box: {value!r}")
        return cls(corners, text, float(score), region, scene)


# Lines and blocks. A box joins a line when its vertical extent overlaps the line's (at the box's place along the
# line, so a tilted caption still groups) by at least LINE_OVERLAP of the smaller height; a gap between consecutive
# lines wider than BLOCK_GAP times their height starts a new block (a meme's top and bottom captions), and so does a
# line more than BLOCK_SIZE times taller or shorter than the one above (text of another size).
LINE_OVERLAP = 0.5
BLOCK_GAP = 1.0
BLOCK_SIZE = 1.5


@dataclass(frozen=True)
class _Band:
    """A box's centre line: its centre (x, y), its height across the text and the slope of its edges."""

    x: float
    y: float
    height: float
    slope: float

    @classmethod
    def of(cls, box: TextBox) -> "_Band":
        (x0, y0), (x1, y1), (x2, y2), (x3, y3) = box.corners[:4]  # clockwise from the top left
        dx = ((x1 - x0) + (x2 - x3)) / 2
        slope = ((y1 - y0) + (y2 - y3)) / 2 / dx if dx > 0 else 0.0
        # the height across the text: the left and right edges, less the tilt
        height = (abs(y3 - y0) + abs(y2 - y1)) / 2 / (1 + slope * slope) ** 0.5
        return cls((x0 + x1 + x2 + x3) / 4, (y0 + y1 + y2 + y3) / 4, max(1.0, height), slope)

    def span_at(self, x: float, slope: float) -> tuple[float, float]:
        """(top, bottom) of this band carried along `slope` to `x`."""
        y = self.y + slope * (x - self.x)
        return y - self.height / 2, y + self.height / 2


@dataclass(frozen=True)
class Detection:
    """One piece of text as the OCR reader found it: its box (in the picture's pixels) with the text as read, and
    where along the box each character of that text sits (its centre, in pixels from the box's left edge; empty
    when the reader does not say)."""

    box: TextBox
    char_centres: tuple[float, ...] = ()


def _line_span(bands: Sequence[_Band], x: float) -> tuple[float, float]:
    """(top, bottom) of a line at `x`: its boxes' extents carried there along their mean slope."""
    slope = sum(b.slope for b in bands) / len(bands)
    spans = [b.span_at(x, slope) for b in bands]
    return min(t for t, _ in spans), max(b for _, b in spans)


def text_lines(boxes: Iterable[TextBox]) -> tuple[tuple[TextBox, ...], ...]:
    """The boxes grouped into lines (vertical overlap of their centre lines, tilt allowed), lines top to bottom,
    boxes in a line left to right."""
    boxes = list(boxes)
    bands = {id(b): _Band.of(b) for b in boxes}
    lines: list[list[TextBox]] = []
    for box in sorted(boxes, key=lambda b: (bands[id(b)].y, bands[id(b)].x)):
        band = bands[id(box)]
        best, best_overlap = None, 0.0
        for line in lines:
            top, bottom = _line_span([bands[id(b)] for b in line], band.x)
            overlap = min(bottom, band.y + band.height / 2) - max(top, band.y - band.height / 2)
            if overlap >= LINE_OVERLAP * min(band.height, bottom - top) and overlap > best_overlap:
                best, best_overlap = line, overlap
        if best is None:
            lines.append([box])
        else:
            best.append(box)

    def middle(line):
        return sum(bands[id(b)].y for b in line) / len(line)

    return tuple(tuple(sorted(line, key=lambda b: bands[id(b)].x)) for line in sorted(lines, key=middle))


def caption_blocks(boxes: Iterable[TextBox]) -> tuple[tuple[tuple[TextBox, ...], ...], ...]:
    """The lines of `text_lines` cut into blocks where the gap to the next line is wider than BLOCK_GAP times the
    taller of the two lines' heights, or where the text changes size by more than BLOCK_SIZE times: a classic meme's
    top and bottom captions come out as two blocks, each in one size."""
    blocks: list[list[tuple[TextBox, ...]]] = []
    previous = None
    for line in text_lines(boxes):
        bands = [_Band.of(b) for b in line]
        top, bottom = min(b.y - b.height / 2 for b in bands), max(b.y + b.height / 2 for b in bands)
        height = max(b.height for b in bands)
        if (previous is None or top - previous[1] > BLOCK_GAP * max(height, previous[2])
                or max(height, previous[2]) > BLOCK_SIZE * min(height, previous[2])):
            blocks.append([])
        blocks[-1].append(line)
        previous = (top, bottom, height)
    return tuple(tuple(block) for block in blocks)


# Panels. Two panels side by side, each with its own caption, are read one after the other: a recursive X-Y cut
# (Nagy and Seth, 1984) cuts the boxes where an empty band runs down between them (a column, first) or across between
# their lines, and reads the parts left to right, top to bottom. A band down counts only when it is wider than
# PANEL_GAP times the text's median height: the gaps between the words of one line never cut it, and a caption that
# runs across both panels (a top line over both) leaves no band down until it is cut off across.
PANEL_GAP = 2.0


def _gaps(spans: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    """(width, middle) of each empty band between the intervals `spans` cover, along one axis."""
    ordered = sorted(spans)
    out, reach = [], ordered[0][1]
    for start, end in ordered[1:]:
        if start > reach:
            out.append((start - reach, (start + reach) / 2))
        reach = max(reach, end)
    return out


def text_regions(boxes: Iterable[TextBox]) -> tuple[tuple[TextBox, ...], ...]:
    """The boxes cut into the regions a reader takes one after another: the panels they were read in (TextBox.region),
    then the recursive X-Y cut above: a column band down first (panels side by side), else the widest band across
    between lines (text_lines, so a tilted line is never cut), each part cut again."""
    boxes = list(boxes)
    if len(boxes) < 2:
        return (tuple(boxes),) if boxes else ()
    panels = sorted({b.region for b in boxes})
    if len(panels) > 1:  # read in panels of their own (TextBox.region): each whole, left to right
        return tuple(r for panel in panels for r in text_regions(b for b in boxes if b.region == panel))
    heights = sorted(b.height for b in boxes)
    down = [g for g in _gaps((b.bounds[0], b.bounds[2]) for b in boxes)
            if g[0] >= PANEL_GAP * heights[len(heights) // 2]]
    if down:
        cut = max(down)[1]
        parts = [[b for b in boxes if b.bounds[2] <= cut], [b for b in boxes if b.bounds[0] >= cut]]
    else:
        lines = text_lines(boxes)
        across = _gaps((min(b.bounds[1] for b in line), max(b.bounds[3] for b in line)) for line in lines)
        if not across:
            return (tuple(boxes),)
        cut = max(across)[1]
        parts = [[b for line in lines for b in line if min(x.bounds[1] for x in line) < cut],
                 [b for line in lines for b in line if min(x.bounds[1] for x in line) >= cut]]
    return tuple(region for part in parts for region in text_regions(part))


def reading_order(boxes: Iterable[TextBox]) -> tuple[TextBox, ...]:
    """Boxes region by region (text_regions: panels one after the other), block by block, line by line (top to
    bottom), left to right within a line, as a reader goes."""
    return tuple(box for region in text_regions(boxes) for block in caption_blocks(region) for line in block
                 for box in line)


def caption_boxes(boxes: Iterable[TextBox] | None) -> list[TextBox]:
    """The boxes of the caption: scene text (TextBox.scene) is the picture's own, never erased, covered or re-typed."""
    return [box for box in boxes or () if not box.scene]


def joined_text(boxes: Sequence[TextBox], scene: bool = False) -> str:
    """The caption's text: the boxes in reading order, joined by single spaces, scene text left out (`scene`: the
    scene text's instead)."""
    return " ".join(box.text.strip() for box in reading_order(boxes) if box.text.strip() and box.scene == scene)
