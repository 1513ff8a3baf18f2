"""OCR and the typographic edits on real captions at real size, measured in one run:

- real PrideMM captions drawn as meme text (white capitals, black outline, top and bottom) on 512 px pictures
  (data/render.py `draw_meme`), read back by the OCR backend: throughput (pictures/s), word and character error rates
  against the drawn caption, and how often the reader's boxes sit on the drawn text;
- each typographic edit on those pictures (rendered_caption with typos, caption_cover, counter_text): its cost per
  picture, and what OCR reads off the result (character error rate against the caption the picture should show).

    python bench/ocr.py --data pridemm:../shared/data/pridemm:test --memes 40
    python bench/ocr.py --device cuda      # the OCR models on the GPU where onnxruntime-gpu is installed
    python bench/ocr.py --reading-order --memes 60   # reading order and run-together words, before and after
    python bench/ocr.py --panels --memes 40          # two panels side by side: read column by column?
    python bench/ocr.py --scene --memes 60           # scene text (signs, watermarks, logos) kept out of the caption?

PrideMM ships its captions, not its pictures, so the pictures are drawn; their text is the real captions'.

`--reading-order` draws real captions the way memes show them over real photographs (scikit-image's sample
pictures, 512 px): white capitals with a black outline in bold and condensed fonts at several sizes, one to three
lines in a top and a bottom block. Each picture is read once; the boxes are then put in order by the reading order
this package had before (kept verbatim below as `reading_order_before`) and by today's, and today's also with the
run-together words split (data/words.py). Per variant: character error rate and words kept against the drawn
caption, and the share of multi-line captions whose boxes come out in the drawn lines' order.

`--panels` draws two such memes side by side (two photographs at 512 px with a white rule between them, each
with its own real caption cut to 12 words, one to three lines at the top and often a bottom block; `--rule 0`: no
rule, the photographs touch) and reads them back: by lines across the picture (the reading order before the X-Y cut,
kept below as `lines_across`) and by today's, which reads one panel after the other. Per order: character error
rate against the left panel's caption followed by the right's, and the share of pictures whose panels' captions come
out whole, one after the other.

`--scene` draws the reading-order memes again with one piece of scene text each, in turn: dark text on a light sign
or T-shirt mid-picture, a grey watermark in a corner, coloured text printed on the photograph (words from SCENE).
Per picture: the caption read with every box (before) and without the boxes told as scene text (data/ocr.py
`scene_text`), the character error rate against the drawn caption, how many captions take in scene text, and how
many caption boxes were wrongly told as scene text.

`--seed` and `--first` draw other memes (another layout and fonts; other captions, from the first-th on) to check a
threshold chosen on the default draw on memes it was not chosen on.
"""
from __future__ import annotations

import argparse
import time
from typing import Sequence

import numpy as np
import torch
from tabulate import tabulate

from pytest_memerobust.data import load_dataset
from pytest_memerobust.data.ocr import gpu_available, ocr_backend
from pytest_memerobust.data.render import draw_meme
from pytest_memerobust.judge.ocr_view import character_error_rate, word_recall
from pytest_memerobust.perturb import get
from pytest_memerobust.data.pictures import as_picture
from pytest_memerobust.data.text_boxes import TextBox


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default="pridemm:../shared/data/pridemm:test")
    parser.add_argument("--memes", type=int, default=40)
    parser.add_argument("--size", type=int, default=512)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--reading-order", action="store_true",
                        help="measure the reading order and the word splits on captions drawn over photographs")
    parser.add_argument("--tilt", type=float, default=0.0,
                        help="with --reading-order: turn each meme's text by up to this many degrees")
    parser.add_argument("--scene", action="store_true",
                        help="memes with scene text besides their caption: is it kept out of the caption?")
    parser.add_argument("--seed", type=int, default=None,
                        help="the draws of layouts, fonts and scene text (default: 0, with --scene 11)")
    parser.add_argument("--splitter-at", metavar="REVISION",
                        help="with --reading-order: also split words with data/words.py as it was at this git "
                             "revision (734879b: the WordPiece list, before the word frequencies)")
    parser.add_argument("--first", type=int, default=0, help="with --reading-order or --scene: the first caption drawn")
    parser.add_argument("--panels", action="store_true",
                        help="two panels side by side, each with its own caption: read one after the other?")
    parser.add_argument("--shown", type=int, default=3, help="with --panels: how many misread pictures to print")
    parser.add_argument("--rule", type=int, default=8,
                        help="with --panels: the white rule between the panels, in pixels (0: the photographs touch)")
    args = parser.parse_args()
    if args.reading_order:
        return reading_order_bench(args)
    if args.panels:
        return panels_bench(args)
    if args.scene:
        return scene_bench(args)

    memes = load_dataset(args.data, require_images=False).memes[: args.memes]
    drawn = [draw_meme(m.text, args.size, seed=i) for i, m in enumerate(memes)]
    truths = [" ".join(b.text for b in boxes) for _, boxes in drawn]
    reader = ocr_backend("rapidocr", None, args.device)
    reader.read_boxes(drawn[0][0])  # load the models before timing
    reader._memory.clear()

    start = time.perf_counter()
    found = [reader.read_boxes(picture) for picture, _ in drawn]
    seconds = time.perf_counter() - start
    readings = [" ".join(b.text for b in boxes) for boxes in found]
    cer = np.mean([min(1.0, character_error_rate(r, t)) for r, t in zip(readings, truths)])
    wer = np.mean([1 - word_recall(r, t) for r, t in zip(readings, truths)])
    on_text = []
    for (picture, boxes), reading in zip(drawn, found):
        mask = np.zeros(picture.shape[:2], bool)
        for box in boxes:
            left, top, right, bottom = box.bounds
            mask[max(0, top) : bottom, max(0, left) : right] = True
        for box in reading:
            left, top, right, bottom = box.bounds
            on_text.append(bool(mask[min(mask.shape[0] - 1, (top + bottom) // 2),
                                     min(mask.shape[1] - 1, (left + right) // 2)]))
    print(f"{len(memes)} real captions drawn at {args.size} px; OCR {len(memes) / seconds:.2f} pictures/s "
          f"({seconds / len(memes):.3f} s each), OCR on {'the GPU' if reader.use_cuda else 'the CPU'} "
          f"(onnxruntime GPU provider: {gpu_available()}); CER {cer:.3f}, words missed {wer:.3f}, "
          f"boxes on drawn text {np.mean(on_text):.3f}")

    typos = get("typos")
    rows = []
    for name, severity in (("rendered_caption", None), ("caption_cover", 3), ("counter_text", 3)):
        p = get(name)
        pictures = [as_picture(picture, args.device) for picture, _ in drawn]
        captions = ([typos(m.text, 3, typos.rng(0, m.id, 3)) for m in memes] if p.traits.caption_source else None)
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()
        start = time.perf_counter()
        out = p.apply(pictures, [m.id for m in memes], severity, 0, captions=captions,
                      text_boxes=[boxes for _, boxes in drawn])
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()
        seconds = time.perf_counter() - start
        shown = [c.upper() for c in captions] if captions else truths
        read = [reader.read(o) for o in out]
        rows.append([f"{name}@{severity}" if severity else f"typos@3 + {name}", f"{1000 * seconds / len(out):.1f}",
                     f"{np.mean([min(1.0, character_error_rate(r, s)) for r, s in zip(read, shown)]):.3f}",
                     f"{np.mean([word_recall(r, s) for r, s in zip(read, shown)]):.3f}"])
    print(tabulate(rows, headers=["edit", "ms / picture", "OCR CER vs caption shown", "words kept"]))


def reading_order_before(boxes) -> tuple[TextBox, ...]:
    """data/text_boxes.py `reading_order` before lines were grouped by overlap, verbatim."""
    def order(box: TextBox):
        left, top, _, _ = box.bounds
        return (round(top / (box.height / 2)), left)

    return tuple(sorted(boxes, key=order))


PHOTOS = ("astronaut", "coffee", "chelsea", "rocket", "camera", "immunohistochemistry", "hubble_deep_field",
          "retina", "moon", "clock", "coins")
CAPTIONS = ("when you finally understand the assignment", "nobody: absolutely nobody: me at three in the morning",
            "they said it was just a phase but here we are ten years later", "me explaining my whole life story "
            "to the cashier", "when she sees comments on her post about pride month",
            "say i'm good at handball but when i tried out for the team i didn't make it")


def meme_fonts() -> list[tuple[str, str]]:
    """(name, path) of the bold and condensed fonts here: DejaVu Sans Bold ships with matplotlib; the others where
    installed."""
    import glob
    import os

    import matplotlib

    found = [("DejaVu Sans Bold", os.path.join(matplotlib.get_data_path(), "fonts/ttf/DejaVuSans-Bold.ttf"))]
    for name, pattern in (("DejaVu Sans Condensed Bold", "/usr/share/fonts/**/DejaVuSansCondensed-Bold.ttf"),
                          ("Bebas Neue", "/usr/share/fonts/**/BebasNeue*.[ot]tf"),
                          ("Noto Sans Condensed Black", "/usr/share/fonts/**/NotoSans*Condensed*Black*.[ot]tf")):
        paths = sorted(glob.glob(pattern, recursive=True))
        if paths:
            found.append((name, paths[0]))
    return [(name, path) for name, path in found if os.path.isfile(path)]


def photographs(size: int) -> list[np.ndarray]:
    """scikit-image's sample photographs, centre-cropped square and resized to `size` pixels, in colour."""
    import skimage.data
    from PIL import Image

    out = []
    for name in PHOTOS:
        a = np.asarray(getattr(skimage.data, name)())
        a = np.repeat(a[..., None], 3, axis=2) if a.ndim == 2 else a[..., :3]
        h, w = a.shape[:2]
        side = min(h, w)
        a = a[(h - side) // 2 : (h - side) // 2 + side, (w - side) // 2 : (w - side) // 2 + side]
        out.append(np.asarray(Image.fromarray(a.astype(np.uint8)).resize((size, size), Image.LANCZOS)))
    return out


def _balanced_lines(words: list[str], count: int) -> list[str]:
    """`words` cut into `count` lines of about equal length in characters."""
    count = max(1, min(count, len(words)))
    total = sum(len(w) + 1 for w in words)
    lines, line, used = [], [], 0
    for i, word in enumerate(words):
        line.append(word)
        used += len(word) + 1
        left_lines = count - len(lines) - 1
        if left_lines and used >= total * (len(lines) + 1) / count and len(words) - i - 1 >= left_lines:
            lines.append(" ".join(line))
            line = []
    if line:
        lines.append(" ".join(line))
    return lines


def draw_photo_meme(caption: str, photo: np.ndarray, font_path: str, rng: np.random.Generator, tilt: float = 0.0):
    """`caption` (at most 18 words) in white capitals with a black outline on `photo`: the first part in a top block,
    the rest in a bottom block (one in five captions: all at the top), 1-3 lines each, each block in its own size:
    as large as its widest line allows, at most a size drawn from 26-60 px (a block that does not fit at 12 px is
    wrapped onto one more line, as meme makers wrap, so that no letter is drawn past the picture's edges); with
    `tilt`, all the text turned by an angle drawn from +-tilt degrees about the picture's centre. The picture, the
    drawn lines as (block, line, rectangle before the turn, text), and the angle."""
    from PIL import Image, ImageDraw, ImageFont

    size = photo.shape[0]
    words = caption.upper().split()[:18]
    cut = int(rng.integers(1, len(words))) if len(words) > 1 and rng.random() < 0.8 else len(words)
    blocks = [_balanced_lines(part, int(rng.integers(1, 4))) for part in (words[:cut], words[cut:]) if part]
    layer = Image.new("RGBA", (size, size), (0, 0, 0, 0))
    draw = ImageDraw.Draw(layer)
    drawn = []
    for b, block in enumerate(blocks):
        largest = font_size = float(rng.choice([26, 32, 40, 48, 60]))
        while True:
            font = ImageFont.truetype(font_path, round(font_size))
            stroke = max(2, round(font_size / 12))
            widest = max(draw.textlength(line, font=font) + 2 * stroke for line in block)
            ascent, descent = font.getmetrics()
            line_height = (ascent + descent) * 1.05
            if widest <= 0.94 * size and len(block) * line_height <= 0.45 * size:
                break
            if font_size <= 12 and len(block) < len(" ".join(block).split()):  # wrapped onto one more line, as a
                block = _balanced_lines(" ".join(block).split(), len(block) + 1)  # meme maker wraps a long caption
                font_size = largest
            elif font_size <= 12:
                break
            else:
                font_size *= 0.92
        top = size * 0.03 if b == 0 else size * 0.97 - len(block) * line_height
        for i, line in enumerate(block):
            x = (size - draw.textlength(line, font=font)) / 2
            y = top + i * line_height
            draw.text((x, y), line, font=font, fill=(255, 255, 255, 255), stroke_width=stroke,
                      stroke_fill=(0, 0, 0, 255))
            drawn.append((b, i, draw.textbbox((x, y), line, font=font, stroke_width=stroke), line))
    angle = float(rng.uniform(-tilt, tilt)) if tilt else 0.0
    if angle:  # PIL turns counter-clockwise, about the centre
        layer = layer.rotate(angle, resample=Image.BICUBIC, center=(size / 2, size / 2))
    img = Image.alpha_composite(Image.fromarray(photo.copy()).convert("RGBA"), layer).convert("RGB")
    return np.asarray(img), drawn, angle


def lines_in_order(ordered: Sequence[TextBox], drawn, angle: float = 0.0, size: int = 512) -> bool:
    """Whether boxes in this order go through the drawn lines top to bottom, left to right within each (a box
    belongs to the drawn line its centre lies in, turned back by `angle`; boxes on no drawn line, e.g. read off the
    photograph, are left out)."""
    seen = []
    a, c = np.radians(angle), size / 2
    for box in ordered:
        x, y = np.mean(box.corners, axis=0) - c
        cx, cy = c + x * np.cos(a) - y * np.sin(a), c + x * np.sin(a) + y * np.cos(a)
        hits = [k for k, (_, _, (l, t, r, btm), _) in enumerate(drawn) if t <= cy <= btm and l - 4 <= cx <= r + 4]
        if hits:
            seen.append((hits[0], cx))
    return all(a[0] < b[0] or (a[0] == b[0] and a[1] < b[1]) for a, b in zip(seen, seen[1:]))


def word_boundaries(read: str, truth: str) -> tuple[list[str], list[str]]:
    """Where the read text's word boundaries differ from the drawn caption's: the read tokens that are two or more
    drawn words run together (`instemfields`), and the drawn words read as two or more tokens (`sex ist`); letters
    only, lower case, aligned by difflib."""
    import difflib
    import re

    def tokens(text):
        return [t for t in (re.sub(r"[^a-z]", "", w) for w in text.lower().split()) if t]

    a, b = tokens(read), tokens(truth)
    together, split = [], []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes():
        if op != "replace" or "".join(a[i1:i2]) != "".join(b[j1:j2]):
            continue
        if i2 - i1 == 1 and j2 - j1 > 1:
            together.append(a[i1])
        elif i2 - i1 > 1 and j2 - j1 == 1:
            split.append(" ".join(a[i1:i2]))
    return together, split


def splitter_at(revision: str):
    """`split_run_together` of data/words.py as it was at a git revision, loaded beside today's module."""
    import subprocess
    import types
    from pathlib import Path

    source = subprocess.run(["git", "show", f"{revision}:pytest_memerobust/data/words.py"], check=True,
                            capture_output=True, text=True, cwd=Path(__file__).resolve().parents[1]).stdout
    module = types.ModuleType(f"pytest_memerobust.data.words_at_{revision}")
    module.__package__ = "pytest_memerobust.data"
    exec(compile(source, f"words.py at {revision}", "exec"), module.__dict__)
    return module.split_run_together


def reading_order_bench(args) -> None:
    from pytest_memerobust.data.ocr import RapidOcr
    from pytest_memerobust.data.text_boxes import reading_order
    from pytest_memerobust.data.words import split_run_together

    try:
        captions = [m.text for m in load_dataset(args.data, require_images=False).memes if m.text.strip()]
        source = args.data
    except Exception as error:  # no PrideMM here: the built-in captions
        captions, source = list(CAPTIONS), f"built-in captions ({type(error).__name__})"
    rng = np.random.default_rng(0 if args.seed is None else args.seed)
    fonts, photos = meme_fonts(), photographs(args.size)
    memes = []
    for i in range(args.memes):
        name, path = fonts[i % len(fonts)]
        picture, drawn, angle = draw_photo_meme(captions[(args.first + i) % len(captions)], photos[i % len(photos)],
                                                path, rng, args.tilt)
        memes.append((name, picture, drawn, angle))
    reader = RapidOcr(None, use_cuda=args.device.startswith("cuda"))
    start = time.perf_counter()
    found = [reader.detections(picture) for _, picture, _, _ in memes]
    seconds = time.perf_counter() - start
    variants = {"before (top / half its own height)": lambda ds: reading_order_before(d.box for d in ds),
                "lines by overlap": lambda ds: reading_order(d.box for d in ds),
                "lines by overlap + words split": lambda ds: reading_order(split_run_together(d) for d in ds)}
    if args.splitter_at:
        split_then = splitter_at(args.splitter_at)
        variants[f"lines by overlap + words split at {args.splitter_at}"] = \
            lambda ds: reading_order(split_then(d) for d in ds)
    truths = [" ".join(text for *_, text in drawn) for _, _, drawn, _ in memes]
    multi = [len(drawn) > 1 for _, _, drawn, _ in memes]
    # a caption too long for the picture at the smallest size is drawn past its edges: letters no reader can see
    inside = [not angle and all(l >= 0 and t >= 0 and r <= args.size and b <= args.size
                                for _, _, (l, t, r, b), _ in drawn) for _, _, drawn, angle in memes]
    rows, wrong, boundaries = [], {}, {}
    for variant, order in variants.items():
        ordered = [order(ds) for ds in found]
        read = [" ".join(b.text for b in boxes) for boxes in ordered]
        right = [lines_in_order(boxes, drawn, angle, args.size) for boxes, (_, _, drawn, angle) in zip(ordered, memes)]
        wrong[variant] = [i for i, (r, m) in enumerate(zip(right, multi)) if m and not r]
        together, split = map(lambda lists: [w for ws in lists for w in ws],
                              zip(*(word_boundaries(r, t) for r, t in zip(read, truths))))
        boundaries[variant] = together, split
        cer = [min(1.0, character_error_rate(r, t)) for r, t in zip(read, truths)]
        rows.append([variant, f"{np.mean(cer):.3f}", f"{np.mean([c for c, k in zip(cer, inside) if k]):.3f}",
                     f"{np.mean([word_recall(r, t) for r, t in zip(read, truths)]):.3f}",
                     f"{sum(r for r, m in zip(right, multi) if m)} / {sum(multi)}", len(together), len(split)])
    lines = [len(drawn) for _, _, drawn, _ in memes]
    turned = f", text turned by up to {args.tilt:g} degrees" if args.tilt else ""
    print(f"{len(memes)} captions from {source} drawn over {len(photos)} photographs at {args.size} px in "
          f"{', '.join(name for name, _ in fonts)}{turned}; {sum(multi)} with more than one line (1-6 lines, mean "
          f"{np.mean(lines):.1f}); OCR {seconds / len(memes):.3f} s per picture on the "
          f"{'GPU' if reader.use_cuda else 'CPU'}")
    print(f"{sum(inside)} of the {len(memes)} captions lie wholly inside the picture; the others were drawn past its "
          f"edges (too long at the smallest size)")
    print(tabulate(rows, headers=["reading order", "CER vs drawn caption", "CER, caption inside the picture",
                                  "words kept",
                                  "multi-line captions in line order", "words run together", "words split"]))
    for variant, (together, split) in boundaries.items():
        print(f"  {variant}: run together: {', '.join(together) or '(none)'}")
        print(f"  {variant}: split: {', '.join(split) or '(none)'}")
    for variant, indices in wrong.items():
        for i in indices[:5]:
            read = " ".join(b.text for b in variants[variant](found[i]))
            print(f"  {variant}: meme {i} ({memes[i][0]}): read {read!r}")


SCENE = ("BIBLE", "STOP", "FEMINIST", "OPEN", "EXIT", "PRIDE", "COFFEE", "NEWS", "SALE", "POLICE", "TEAM USA",
         "THIS IS WHAT A FEMINIST LOOKS LIKE", "imgflip.com", "@memes_daily", "HOLY BIBLE", "NO PARKING")


def with_scene_text(picture: np.ndarray, rng: np.random.Generator, font_path: str, k: int):
    """The picture with scene text of kind k % 3 (a sign, a watermark, a logo) and the text."""
    from PIL import Image, ImageDraw, ImageFont

    img = Image.fromarray(picture.copy())
    draw, size, text = ImageDraw.Draw(img), img.size[0], SCENE[k % len(SCENE)]
    if k % 3 == 1:  # a grey watermark in a corner
        font = ImageFont.truetype(font_path, 14)
        draw.text((size - draw.textlength(text, font=font) - 6, size - 20), text, font=font, fill=(200, 200, 200))
        return np.asarray(img), text
    font = ImageFont.truetype(font_path, int(rng.integers(16, 32)))
    width = draw.textlength(text, font=font)
    x = int(rng.integers(20, max(21, size - width - 20)))
    y = int(rng.integers(int(size * 0.35), int(size * 0.6)))
    if k % 3 == 0:  # dark text on a light sign or T-shirt
        fill = tuple(int(v) for v in rng.integers(200, 256, 3))
        draw.rectangle([x - 8, y - 6, x + width + 8, y + font.size + 10], fill=fill)
        draw.text((x, y), text, font=font, fill=(20, 20, 20))
    else:  # coloured text printed on the photograph
        draw.text((x, y), text, font=font, fill=tuple(int(v) for v in rng.integers(0, 256, 3)))
    return np.asarray(img), text


def scene_bench(args) -> None:
    from pytest_memerobust.data.ocr import RapidOcr
    from pytest_memerobust.data.text_boxes import joined_text

    captions = [m.text for m in load_dataset(args.data, require_images=False).memes if m.text.strip()]
    rng = np.random.default_rng(11 if args.seed is None else args.seed)  # the thresholds were chosen on seeds 1 and 7
    fonts, photos = meme_fonts(), photographs(args.size)
    reader = RapidOcr(None, use_cuda=args.device.startswith("cuda"))
    rows = {"every box (before)": [], "scene text kept out (after)": []}
    leaked = {name: 0 for name in rows}
    lost, told, seconds = 0, 0, 0.0
    for i in range(args.memes):
        picture, drawn, _ = draw_photo_meme(captions[(args.first + i) % len(captions)], photos[i % len(photos)],
                                            fonts[i % len(fonts)][1], rng)
        picture, scene = with_scene_text(picture, rng, fonts[0][1], i)
        truth = " ".join(text for *_, text in drawn)
        start = time.perf_counter()
        boxes = reader.reading(picture)
        seconds += time.perf_counter() - start
        squeezed = lambda t: "".join(t.lower().split())  # noqa: E731
        for name, read in (("every box (before)", " ".join(b.text for b in boxes)),
                           ("scene text kept out (after)", joined_text(boxes))):
            rows[name].append(min(1.0, character_error_rate(read, truth)))
            leaked[name] += squeezed(scene) in squeezed(read) and squeezed(scene) not in squeezed(truth)
        for box in boxes:
            if box.scene:
                caption_box = squeezed(box.text) in squeezed(truth) and squeezed(box.text) not in squeezed(scene)
                lost += caption_box
                told += not caption_box
    print(f"{args.memes} real captions from {args.data} drawn over photographs at {args.size} px, each with scene "
          f"text (a sign, a watermark or a logo, in turn); OCR {seconds / args.memes:.3f} s per picture")
    print(tabulate([[name, f"{np.mean(cer):.3f}", f"{leaked[name]} / {args.memes}"] for name, cer in rows.items()],
                   headers=["caption read from", "CER vs drawn caption", "captions with the scene text in them"]))
    print(f"boxes told as scene text: {told} of scene text, {lost} of the caption (its words lost)")


def lines_across(boxes) -> tuple[TextBox, ...]:
    """The reading order before panels (text_boxes.reading_order without text_regions), kept for the comparison."""
    from pytest_memerobust.data.text_boxes import caption_blocks

    return tuple(box for block in caption_blocks(boxes) for line in block for box in line)


def one_after_the_other(read: str, left: str, right: str) -> bool:
    """Whether the words read come from the left caption first, then the right (a word in both captions, or in
    neither, says nothing): the panels read one after the other, not line by line across them."""
    words = [set(t.lower().split()) for t in (left, right)]
    sides = [0 if w in words[0] else 1 for w in read.lower().split() if (w in words[0]) != (w in words[1])]
    return sides == sorted(sides)


def panels_bench(args) -> None:
    from pytest_memerobust.data.ocr import RapidOcr
    from pytest_memerobust.data.text_boxes import reading_order
    from pytest_memerobust.data.words import split_run_together

    captions = [m.text for m in load_dataset(args.data, require_images=False).memes if m.text.strip()]
    rng = np.random.default_rng(0)
    fonts, photos = meme_fonts(), photographs(args.size)
    memes = []
    for i in range(args.memes):
        name, path = fonts[i % len(fonts)]
        halves, truths = [], []
        for side in range(2):
            caption = " ".join(captions[(2 * i + side) % len(captions)].split()[:12])  # a panel's share of words
            picture, drawn, _ = draw_photo_meme(caption, photos[(2 * i + side) % len(photos)], path, rng)
            halves.append(picture)
            truths.append(" ".join(text for *_, text in drawn))
        gap = np.full((args.size, args.rule, 3), 255, np.uint8)  # a white rule between the panels
        memes.append((name, np.concatenate([halves[0], gap, halves[1]], axis=1), truths))
    reader = RapidOcr(None, use_cuda=args.device.startswith("cuda"))
    start = time.perf_counter()
    found = [reader.detections(picture) for _, picture, _ in memes]
    seconds = time.perf_counter() - start
    rows = []
    start = time.perf_counter()
    panelled = [reader.reading(picture) for _, picture, _ in memes]  # panels cut at their rule, each read alone
    panel_seconds = time.perf_counter() - start
    for variant, order in (("lines across the picture (before)", lambda ds, _: lines_across(
                                [split_run_together(d) for d in ds])),
                           ("X-Y cut of the boxes", lambda ds, _: reading_order(split_run_together(d) for d in ds)),
                           ("panels cut at their rule, each read alone, then X-Y", lambda _, boxes: boxes)):
        read = [" ".join(b.text for b in order(ds, boxes)) for ds, boxes in zip(found, panelled)]
        truth = [" ".join(t) for _, _, t in memes]
        whole = [one_after_the_other(r, *t) for r, (_, _, t) in zip(read, memes)]
        rows.append([variant, f"{np.mean([min(1.0, character_error_rate(r, t)) for r, t in zip(read, truth)]):.3f}",
                     f"{sum(whole)} / {len(memes)}"])
        for i in [i for i, w in enumerate(whole) if not w][:args.shown]:
            print(f"  {variant}, meme {i}: read {read[i]!r}; drawn {' | '.join(memes[i][2])!r}")
    print(f"{len(memes)} pictures of two panels ({args.size} px each, at most 12 words each, a {args.rule} px rule, "
          f"real captions from {args.data}); OCR "
          f"{seconds / len(memes):.3f} s per picture read whole, {panel_seconds / len(memes):.3f} s in panels")
    print(tabulate(rows, headers=["reading order", "CER vs left then right caption",
                                  "panels read one after the other"]))


if __name__ == "__main__":
    main()
