"""A picture people can look at: one meme under every image perturbation (rows) and severity (columns)."""
from __future__ import annotations

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
        for severity in p.severities or (None,):
            try:
                cells.append((f"{name}@{severity}" if severity else name,
                              p.apply([image], [meme_id], severity, seed,
                                      captions=[caption] if p.caption_source else None,
                                      text_boxes=[text_boxes] if p.reads_text_boxes else None)[0]))
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
            sheet.paste(Image.fromarray(picture).resize((tile, tile), Image.BILINEAR), (x, y + label_h))
            draw.text((x + 2, y + 1), label, fill="black", font=font)
    return sheet


def save_gallery(sheet: Image.Image, path: Path) -> None:
    with atomic_path(Path(path)) as tmp:
        sheet.save(tmp, format="PNG")
