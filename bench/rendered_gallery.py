"""What `rendered_caption` does to memes over real photographs, before and after a change: a gallery.

Each meme is a photograph of `skimage.data` (astronaut, coffee, chelsea, rocket...) with a caption drawn as meme
text is (white capitals outlined in black, top and bottom; `data/render.py::draw_meme_text`) in DejaVu Sans Bold
(matplotlib's copy), or with `--font anton` in Anton (Impact's kind, as most memes are). Its text boxes are read
back by the OCR reader (rapidocr; `--boxes drawn` takes where the caption was drawn instead; `--drop-word` leaves
the last word of the first line out of its box, as when OCR misses a word). Then `rendered_caption` draws the
caption with typos (`typos@3`) back in, as typography.py did at the
revision `--before` (loaded from git) and as it does in the working tree. One row per meme: the meme | before |
after, three memes a row, written as a JPEG.

    python bench/rendered_gallery.py --out docs/images/rendered-caption-gallery.jpg
    python bench/rendered_gallery.py --before dc20813 --font anton --memes 10 --tile 240 \
        --out docs/images/rendered-caption-anton.jpg
"""
from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFont

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pytest_memerobust.data.pictures import as_picture, to_array  # noqa: E402
from pytest_memerobust.data.render import draw_meme_text  # noqa: E402
from pytest_memerobust.data.text_boxes import TextBox  # noqa: E402
from pytest_memerobust.perturb import get, typography  # noqa: E402

PHOTOS = ("astronaut", "coffee", "chelsea", "rocket", "camera", "hubble_deep_field", "immunohistochemistry",
          "retina", "coins", "moon", "brick", "grass", "gravel", "colorwheel", "clock", "stereo_motorcycle", "cell",
          "page", "text", "astronaut")
CAPTIONS = (
    "nobody wants drag queens near our children",
    "when the coffee kicks in and you remember you have no plans",
    "i can has cheezburger",
    "one does not simply launch on a friday",
    "this is fine",
    "look at all those galaxies and still no one texts back",
    "they said it was only a phase",
    "me staring into the void at 3 am",
    "keep your change we want our country back",
    "that moment when the moon is closer than your paycheck",
    "those people should leave our town",
    "touch grass they said it will be fun they said",
    "the road to success is always under construction",
    "love is love and always will be",
    "time flies when you are having fun",
    "ride or die",
    "cells at work but not me",
    "reading the terms and conditions like",
    "i read it on the internet so it must be true",
    "same picture different caption",
)
LONG_SIDE = 420  # the memes are drawn this many pixels on their longer side


def photo(name: str) -> np.ndarray:
    import skimage.data

    picture = getattr(skimage.data, name)()
    if isinstance(picture, tuple):  # stereo pairs
        picture = picture[0]
    picture = np.asarray(picture)
    if picture.dtype == bool:
        picture = picture.astype(np.uint8) * 255
    if picture.ndim == 2:
        picture = np.repeat(picture[..., None], 3, axis=2)
    img = Image.fromarray(picture[..., :3].astype(np.uint8))
    scale = LONG_SIDE / max(img.size)
    return np.asarray(img.resize((round(img.size[0] * scale), round(img.size[1] * scale)), Image.LANCZOS))


MEME_FONTS = {"dejavu": "DejaVu Sans Bold (matplotlib's)", "anton": "Anton (fontpkg-anton: Impact's kind)"}


def bold_font(size: float, face: str = "dejavu"):
    """The face the memes' captions are drawn in (--font), at `size`."""
    if face == "anton":
        from pytest_memerobust.perturb.typography import _packaged_anton

        return ImageFont.truetype(_packaged_anton(), max(6, int(size)))
    import matplotlib

    return ImageFont.truetype(str(Path(matplotlib.get_data_path()) / "fonts" / "ttf" / "DejaVuSans-Bold.ttf"),
                              max(6, int(size)))


def typography_at(revision: str):
    """perturb/typography.py as it was at `revision`, imported beside the working tree's (its relative imports
    resolve to the working tree's modules)."""
    source = subprocess.run(["git", "show", f"{revision}:pytest_memerobust/perturb/typography.py"], cwd=ROOT,
                            check=True, capture_output=True, text=True).stdout
    name = "pytest_memerobust.perturb._typography_before"
    spec = importlib.util.spec_from_loader(name, loader=None)
    module = importlib.util.module_from_spec(spec)
    module.__package__ = "pytest_memerobust.perturb"
    sys.modules[name] = module
    exec(compile(source, f"{revision}:typography.py", "exec"), module.__dict__)
    return module


def without_last_word(box: TextBox) -> TextBox:
    """The box of a line shrunk to leave its last word out (about its share of the characters)."""
    words = box.text.split()
    if len(words) < 2:
        return box
    left, top, right, bottom = box.bounds
    kept = " ".join(words[:-1])
    return TextBox.from_rect(left, top, left + (right - left) * len(kept) / len(box.text), bottom, kept)


def labelled(picture: np.ndarray, label: str, tile: int) -> Image.Image:
    img = Image.fromarray(picture)
    img.thumbnail((tile, tile), Image.LANCZOS)
    cell = Image.new("RGB", (tile, tile + 16), (255, 255, 255))
    cell.paste(img, ((tile - img.size[0]) // 2, 16 + (tile - img.size[1]) // 2))
    ImageDraw.Draw(cell).text((3, 2), label, fill=(0, 0, 0))
    return cell


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", default="d599e35", help="the git revision of typography.py to compare with")
    parser.add_argument("--memes", type=int, default=20)
    parser.add_argument("--boxes", choices=("ocr", "drawn"), default="ocr")
    parser.add_argument("--drop-word", action="store_true", help="leave a word of each meme's first line unboxed")
    parser.add_argument("--tile", type=int, default=210)
    parser.add_argument("--out", type=Path, default=Path("rendered-caption-gallery.jpg"))
    parser.add_argument("--pngs", type=Path, help="also write each meme's three pictures here, full size")
    parser.add_argument("--font", choices=MEME_FONTS, default="dejavu", help="the face the memes are drawn in")
    args = parser.parse_args()

    before = typography_at(args.before)
    typos = get("typos")
    reader = None
    if args.boxes == "ocr":
        from pytest_memerobust.data.ocr import RapidOcr

        reader = RapidOcr()
    cells, seconds = [], {"before": 0.0, "after": 0.0}
    for k in range(args.memes):
        caption = CAPTIONS[k % len(CAPTIONS)]
        meme, drawn = draw_meme_text(photo(PHOTOS[k % len(PHOTOS)]), caption,
                                     lambda size: bold_font(size, args.font))
        boxes = reader.read_boxes(meme) if reader else drawn
        if args.drop_word and boxes:
            boxes = (without_last_word(boxes[0]), *boxes[1:])
        typo = typos(caption, 3, np.random.default_rng(k))
        row = [labelled(meme, f"{PHOTOS[k % len(PHOTOS)]}: {len(boxes)} boxes", args.tile)]
        for label, module in (("before", before), ("after", typography)):
            start = time.perf_counter()
            shown = to_array(module.render_caption(as_picture(meme), typo, boxes))
            seconds[label] += time.perf_counter() - start
            row.append(labelled(shown, label, args.tile))
            if args.pngs:
                args.pngs.mkdir(parents=True, exist_ok=True)
                Image.fromarray(shown).save(args.pngs / f"{k:02d}-{label}.png")
        if args.pngs:
            Image.fromarray(meme).save(args.pngs / f"{k:02d}-meme.png")
        cells.append(row)
    per_row = 3
    width, height = cells[0][0].size
    rows = -(-len(cells) // per_row)
    sheet = Image.new("RGB", (per_row * 3 * width + (per_row - 1) * 8, rows * height), (255, 255, 255))
    for k, row in enumerate(cells):
        for j, cell in enumerate(row):
            sheet.paste(cell, ((k % per_row) * (3 * width + 8) + j * width, (k // per_row) * height))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    sheet.save(args.out, format="JPEG", quality=72, optimize=True)
    print(f"{args.out}: {len(cells)} memes drawn in {MEME_FONTS[args.font]}, boxes from {args.boxes}"
          f"{' less a word' if args.drop_word else ''}; "
          f"before ({args.before}) {seconds['before']:.1f} s, after {seconds['after']:.1f} s; "
          f"bold captions drawn in {typography.caption_font_name()}; {args.out.stat().st_size // 1024} KiB")


if __name__ == "__main__":
    main()
