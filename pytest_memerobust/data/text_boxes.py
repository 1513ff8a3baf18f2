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
    read or drawn there, and the reader's confidence (1 for drawn text)."""

    corners: tuple[tuple[float, float], ...]
    text: str = ""
    score: float = 1.0

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
        return TextBox(tuple((x * factor, y * factor) for x, y in self.corners), self.text, self.score)

    def to_json(self) -> list:
        return [[list(c) for c in self.corners], self.text, self.score]

    @classmethod
    def from_json(cls, value) -> "TextBox":
        """The inverse of `to_json`; ValueError on anything else (a damaged cache entry)."""
        try:
            corners, text, score = value
            corners = tuple((float(x), float(y)) for x, y in corners)
        except (TypeError, ValueError):
            raise ValueError(f"not a text box: {value!r}") from None
        if len(corners) != 4 or not isinstance(text, str):
            raise ValueError(f"not a text box: {value!r}")
        return cls(corners, text, float(score))


def reading_order(boxes: Iterable[TextBox]) -> tuple[TextBox, ...]:
    """Boxes by line (top edge, in steps of half a box height), then left to right, as a reader goes."""
    def order(box: TextBox):
        left, top, _, _ = box.bounds
        return (round(top / (box.height / 2)), left)

    return tuple(sorted(boxes, key=order))


def joined_text(boxes: Sequence[TextBox]) -> str:
    """The text of boxes in reading order, joined by single spaces."""
    return " ".join(box.text.strip() for box in reading_order(boxes) if box.text.strip())
