"""Image-scaling attack per backbone preprocessing: is the resize vulnerable (scaling.scaling_vulnerable at severity
5), median full-size PSNR, median error of the detector's view against the target, the share of memes whose verdict
follows the target's (among those whose clean verdict differs from the target's), and the same behind area_resize.
Detectors: the demo detector (Pillow BOX thumbnails), and the tiny open_clip, HF CLIP and BLIP-2 configs of
tests/tiny_backbones.py (heads trained on the demo memes) with their default resize and with bilinear and nearest.
Prints a Markdown table and writes a gallery PNG (original | attacked | attacked as the detector sees it | target).

    python bench/image_scaling.py gallery.png [--memes 6] [--size 1024]
"""
from __future__ import annotations

import argparse
import copy
import sys
import time
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from tiny_backbones import trained_detector  # noqa: E402

from pytest_memerobust.data import demo_dataset  # noqa: E402
from pytest_memerobust.detectors.defences import Defence  # noqa: E402
from pytest_memerobust.detectors import load_detector  # noqa: E402
from pytest_memerobust.determinism import fixed_threads  # noqa: E402
from pytest_memerobust.perturb import get  # noqa: E402
from pytest_memerobust.perturb.attacks import AttackContext  # noqa: E402
from pytest_memerobust.perturb.scaling import _targets, detector_resize, measure, scaling_vulnerable  # noqa: E402
from pytest_memerobust.data.pictures import to_array  # noqa: E402

SEVERITY = 5


def with_resize(detector, resize: str):
    """The same trained detector, its backbone resizing pictures another way (weights shared)."""
    variant = copy.copy(detector)
    variant.backbone = copy.copy(detector.backbone)
    variant.backbone.resize, variant.backbone._fingerprint = resize, None
    return variant


def verdicts(detector, pictures, captions) -> np.ndarray:
    return detector.predict_proba(pictures, captions).argmax(axis=1)


def follows(detector, attacked, targets, clean, captions) -> str:
    """k/n: of the n memes whose clean verdict differs from the target's, the k whose attacked verdict is the
    target's."""
    to, at, cl = (verdicts(detector, p, captions) for p in (targets, attacked, clean))
    moved = to != cl
    return f"{int((at[moved] == to[moved]).sum())}/{int(moved.sum())}"


def evaluate(name, detector, test, training, gallery):
    ids, captions = [m.id for m in test.memes], [m.text for m in test.memes]
    clean = [m.picture() for m in test.memes]
    perturbation = get("image_scaling")
    context = AttackContext(detector, test.labels("hate"), training=training)
    start = time.perf_counter()
    attacked = perturbation.apply(clean, ids, SEVERITY, seed=0, context=context)
    seconds = (time.perf_counter() - start) / len(clean)
    records = context.outcomes[("image", "image_scaling", SEVERITY)]
    targets = _targets(clean, [perturbation.rng(0, i, SEVERITY) for i in ids], context)
    fit = detector_resize(detector)
    defence = Defence.parse("area_resize")
    behind = [defence.pictures(p, detector) for p in (attacked, targets, clean)]
    aim = fit.view(targets)  # severity 5: the whole target
    error_behind = float(np.median((fit.view(behind[0]) - aim).abs().mean(dim=(1, 2, 3)).numpy())) / 255
    gallery.append((name, clean[0], attacked[0], fit.view(attacked[:1])[0], targets[0]))
    return (f"| {name} | {'yes' if scaling_vulnerable(records) else 'no'} | {np.median(measure(records, 'psnr_full')):.1f} | "
            f"{np.median(measure(records, 'target_error')) * 255:.1f} | {follows(detector, attacked, targets, clean, captions)} "
            f"| {error_behind * 255:.1f} | {follows(detector, *behind, captions)} | {seconds:.1f} |")


def write_gallery(rows, path: Path, cell: int = 256) -> None:
    from PIL import Image, ImageDraw

    import torch

    titles = ("original", "attacked (full size)", "as the detector sees it", "target")
    sheet = Image.new("RGB", (4 * cell, len(rows) * (cell + 18) + 18), "white")
    draw = ImageDraw.Draw(sheet)
    for k, title in enumerate(titles):
        draw.text((k * cell + 4, 2), title, fill="black")
    for r, (name, *pictures) in enumerate(rows):
        y = 18 + r * (cell + 18)
        draw.text((4, y + 2), name, fill="black")
        for k, picture in enumerate(pictures):
            picture = picture.round().clamp(0, 255).to(torch.uint8) if picture.is_floating_point() else picture
            tile = Image.fromarray(to_array(picture))
            resample = Image.NEAREST if k == 2 else Image.BILINEAR  # the view's pixels shown as they are
            sheet.paste(tile.resize((cell, cell), resample), (k * cell, y + 16))
    sheet.save(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("gallery", type=Path)
    parser.add_argument("--memes", type=int, default=6)
    parser.add_argument("--size", type=int, default=1024, help="picture side in pixels (the attack needs a large "
                        "scale factor: 1024 px is 16 times the tiny encoders' 64 px)")
    args = parser.parse_args()
    began = time.perf_counter()
    test = demo_dataset("test", size=args.size)  # hateful memes: a benign target can flip their verdict
    hateful = [m for m, label in zip(test.memes, test.labels("hate")) if label == 1][: args.memes]
    test = replace(test, memes=hateful)
    train = demo_dataset("train", size=args.size).head(64)
    training = lambda: ([m.text for m in train.memes], train.labels("hate"), train.memes)  # noqa: E731
    detectors = [("demo (Pillow BOX thumbnails)", load_detector("demo"))]
    for kind in ("open_clip", "hf-clip", "hf-blip2"):
        trained = trained_detector(kind)
        detectors += [(f"tiny {kind} ({trained.backbone.resize})", trained)]
        detectors += [(f"tiny {kind} ({resize})", with_resize(trained, resize)) for resize in ("bilinear", "nearest")]
    lines, gallery = [], []
    with fixed_threads():
        for name, detector in detectors:
            lines.append(evaluate(name, detector, test, training, gallery))
            print(lines[-1], flush=True)
    write_gallery(gallery, args.gallery)
    print(f"\n`python bench/image_scaling.py {args.gallery} --memes {args.memes} --size {args.size}`, "
          f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, CPU, {time.perf_counter() - began:.0f} s; "
          f"{len(test)} hateful demo test memes at {args.size} px, severity {SEVERITY} (the whole target)\n")
    print("| preprocessing | vulnerable | median PSNR full (dB) | median view error (/255) | verdict follows target "
          "| behind area_resize: view error (/255) | behind area_resize: follows | s per meme |")
    print("|---|---|---|---|---|---|---|---|")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
