"""Pictures and captions people can look at: one meme under every image perturbation (rows) and severity
(columns); and, for the reports' worst examples, one entry per meme with its caption edit spelled out character by
character (what changed, and every character outside ASCII with its code point, so a look-alike letter or an
invisible one shows)."""
from __future__ import annotations

import difflib
import unicodedata
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from ..atomic import atomic_path
from ..errors import BackendMissing


def gallery(image: np.ndarray, meme_id: str, names: list[str], seed: int = 0, tile: int = 128,
            caption: str = "", text_boxes=None) -> Image.Image:
    """Tiles of `image` perturbed by each name at each of its severities, each captioned `name@severity`; the
    first column is the clean picture. `caption` is what the caption-drawing edits draw; `text_boxes` where the
    picture shows its text (data/text_boxes.py), for the typographic edits."""
    from ..perturb import get

    rows = []
    for name in names:
        p = get(name)
        cells = [("clean", image)]
        for severity in p.parameters.severities or (None,):
            try:
                cells.append((f"{name}@{severity}" if severity else name,
                              p.apply([image], [meme_id], severity, seed,
                                      captions=[caption] if p.traits.caption_source else None,
                                      text_boxes=[text_boxes] if p.traits.reads_text_boxes else None)[0]))
            except BackendMissing:
                break
        rows.append(cells)
    columns = max(len(r) for r in rows)
    label_h = 14
    sheet = Image.new("RGB", (columns * tile, len(rows) * (tile + label_h)), "white")
    draw, font = ImageDraw.Draw(sheet), ImageFont.load_default()
    for i, cells in enumerate(rows):
        for j, (label, picture) in enumerate(cells):
            x, y = j * tile, i * (tile + label_h)
            shown = Image.fromarray(picture)  # kept in proportion: an edit may change the shape (FigStep's square)
            scale = tile / max(shown.size)
            shown = shown.resize((max(1, round(shown.width * scale)), max(1, round(shown.height * scale))),
                                 Image.BILINEAR)
            sheet.paste(shown, (x + (tile - shown.width) // 2, y + label_h + (tile - shown.height) // 2))
            draw.text((x + 2, y + 1), label, fill="black", font=font)
    return sheet


def save_gallery(sheet: Image.Image, path: Path) -> None:
    with atomic_path(Path(path)) as tmp:
        sheet.save(tmp, format="PNG")


def distinct_memes(examples: list[dict]) -> list[dict]:
    """One entry per meme, under the condition that hurt it most (the largest drop in the probability of its true
    class), worst meme first; `also` lists the other conditions among the examples that hurt it, worst first (after
    those the entry listed already)."""
    def drop(e):
        return e.get("p_true_clean", 0.0) - e.get("p_true_perturbed", 0.0)

    by_meme: dict[str, list[dict]] = {}
    for e in sorted(examples, key=drop, reverse=True):
        by_meme.setdefault(str(e.get("id")), []).append(e)
    return [{**hurt[0], "also": list(dict.fromkeys([*hurt[0].get("also", []), *(h["condition"] for h in hurt[1:])]))}
            for hurt in by_meme.values()]


def visible(ch: str) -> bool:
    """Whether a character is plain ASCII a reader sees as itself (printable, or a plain space)."""
    return " " <= ch <= "~"


def code_point(ch: str) -> str:
    """`U+0430 CYRILLIC SMALL LETTER A`; characters without a name get their category (`U+200B (Cf)`)."""
    name = unicodedata.name(ch, "")
    return f"U+{ord(ch):04X} {name}" if name else f"U+{ord(ch):04X} ({unicodedata.category(ch)})"


def caption_diff(before: str, after: str) -> list[tuple[str, str, str]]:
    """The character edit that turns `before` into `after`, as runs (op, before_text, after_text): op is `same`,
    `replace`, `delete` or `insert` (difflib's opcodes, without autojunk so every character counts)."""
    matcher = difflib.SequenceMatcher(None, before, after, autojunk=False)
    return [("same" if op == "equal" else op, before[i1:i2], after[j1:j2])
            for op, i1, i2, j1, j2 in matcher.get_opcodes()]


def caption_pair(before: str, after: str, text, gap=None) -> tuple[str, str]:
    """The clean and perturbed captions for a renderer: what the edit removed in <del> in the first, what it put in
    in <ins> in the second; `text` renders a run of characters in the renderer's escaping; `gap(side, other)`, where
    the renderer can show one, marks on the side with nothing where the other side's edit sits (`side` is "before"
    or "after", `other` the other side's text)."""
    left, right = [], []
    for op, a, b in caption_diff(before, after):
        if op == "same":
            left.append(text(a))
            right.append(text(b))
            continue
        if a:
            left.append(f"<del>{text(a)}</del>")
        elif gap is not None:
            left.append(gap("before", b))
        if b:
            right.append(f"<ins>{text(b)}</ins>")
        elif gap is not None:
            right.append(gap("after", a))
    return "".join(left), "".join(right)
