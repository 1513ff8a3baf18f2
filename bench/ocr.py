"""OCR and the typographic edits on real captions at real size, measured in one run:

- real PrideMM captions drawn as meme text (white capitals, black outline, top and bottom) on 512 px pictures
  (data/render.py `draw_meme`), read back by the OCR backend: throughput (pictures/s), word and character error rates
  against the drawn caption, and how often the reader's boxes sit on the drawn text;
- each typographic edit on those pictures (rendered_caption with typos, caption_cover, counter_text): its cost per
  picture, and what OCR reads off the result (character error rate against the caption the picture should show).

    python bench/ocr.py --data pridemm:../shared/data/pridemm:test --memes 40
    python bench/ocr.py --device cuda      # the OCR models on the GPU where onnxruntime-gpu is installed

PrideMM ships its captions, not its pictures, so the pictures are drawn; their text is the real captions'.
"""
from __future__ import annotations

import argparse
import time

import numpy as np
import torch
from tabulate import tabulate

from pytest_memerobust.data import load_dataset
from pytest_memerobust.data.ocr import gpu_available, ocr_backend
from pytest_memerobust.data.render import draw_meme
from pytest_memerobust.judge.ocr_view import character_error_rate, word_recall
from pytest_memerobust.perturb import get
from pytest_memerobust.data.pictures import as_picture


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default="pridemm:../shared/data/pridemm:test")
    parser.add_argument("--memes", type=int, default=40)
    parser.add_argument("--size", type=int, default=512)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()

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
        captions = ([typos(m.text, 3, typos.rng(0, m.id, 3)) for m in memes] if p.caption_source else None)
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


if __name__ == "__main__":
    main()
