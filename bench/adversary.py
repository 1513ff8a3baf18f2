"""The strongest adversary on the demo world (issue 38): per-meme image attacks against the universal pattern, the
joint attack against each channel's attack at equal budgets, and the transfer matrix between detectors.

    python bench/adversary.py --memes 48 --gallery docs/images/adversary-gallery.png

Prints Markdown tables (robust accuracy and attack success with Wilson intervals, seconds on this machine) and writes
a gallery PNG: per meme, the clean picture, each attack's picture and its difference from the clean one (x10).
"""
from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pytest_memerobust.data import demo_dataset  # noqa: E402
from pytest_memerobust.detectors import load_detector  # noqa: E402
from pytest_memerobust.engine import AttackState, Condition, Engine  # noqa: E402
from pytest_memerobust.judge.instructions import wilson_interval  # noqa: E402
from pytest_memerobust.judge.transfer import transfer_matrix  # noqa: E402
from pytest_memerobust.report.tables import transfer_table  # noqa: E402
from pytest_memerobust.run.analyses import transfer_cells  # noqa: E402


def share(count: int, n: int) -> str:
    lo, hi = wilson_interval(count, n)
    return f"{count / n:.2f} ({lo:.2f}..{hi:.2f})" if n else "–"


def run(engine, labels, clean, condition: str) -> tuple[str, str, float, dict | None]:
    """(robust accuracy with its interval, attack success among memes right clean, seconds, the attack's record)."""
    start = time.perf_counter()
    proba = engine.predict(Condition.parse(condition))
    seconds = time.perf_counter() - start
    right_clean = clean.argmax(1) == labels
    right = proba.argmax(1) == labels
    return (share(int(right.sum()), len(labels)), share(int((right_clean & ~right).sum()), int(right_clean.sum())),
            seconds, engine.picture_attack(Condition.parse(condition)))


def table(headers, rows) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    return "\n".join(lines + ["| " + " | ".join(str(c) for c in row) + " |" for row in rows])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memes", type=int, default=48)
    parser.add_argument("--gallery", type=Path)
    parser.add_argument("--skip-ensemble", action="store_true")
    args = parser.parse_args()
    data = demo_dataset("test").head(args.memes)
    train = demo_dataset("train").head(64)
    training = lambda: ([m.text for m in train.memes], train.labels("hate"), train.memes)  # noqa: E731
    labels = data.labels("hate")
    print(f"# bench/adversary.py --memes {args.memes}  ({datetime.date.today()}, {platform.processor() or 'cpu'}, "
          f"{os.cpu_count()} cores, CPU)\n")

    # 1. per-meme image attacks against the universal pattern, multimodal and image-only
    detector = load_detector("memeblip2-tda")
    rows = []
    for mode in ("multimodal", "image"):
        view = detector if mode == "multimodal" else detector.with_mode(mode)
        engine = Engine(view, data, attacks=AttackState(labels=labels, training=training))
        clean = engine.predict(Condition())
        conditions = ["image=uap@3", "image=pgd_linf@4", "image=pgd_l2@4", "image=apgd_ce@4", "image=apgd_dlr@4",
                      "image=square@4"] + ([] if args.skip_ensemble else ["image=strongest_image@4"])
        rows.append([mode, "clean", share(int((clean.argmax(1) == labels).sum()), len(labels)), "–", "–", "–"])
        for condition in conditions:
            accuracy, success, seconds, record = run(engine, labels, clean, condition)
            flags = "; ".join((record or {}).get("flags") or []) or "none"
            won = ", ".join(f"{k} {v}" for k, v in ((record or {}).get("won_by") or {}).items())
            rows.append([mode, condition.split("=")[1] + (f" (won: {won})" if won else ""), accuracy, success,
                         f"{seconds:.1f}", flags])
    print("## Per-meme image attacks vs the universal pattern (memeblip2-tda, 8/255: uap@3 = pgd@4)\n")
    print(table(["fusion", "condition", "robust accuracy (95% CI)", "success on memes right clean", "seconds",
                 "sanity flags"], rows) + "\n")

    # 2. joint vs each channel alone at equal budgets, per detector kind of the demo world
    rows = []
    for name in ("demo", "memeclip", "memeblip2-tda"):
        model = load_detector(name)
        engine = Engine(model, data, attacks=AttackState(labels=labels, training=training))
        clean = engine.predict(Condition())
        for severity in (1, 2):
            cells = {}
            for label, condition in (("caption only (hotflip)", f"text=hotflip@{severity}"),
                                     ("image only (pgd_linf)", f"image=pgd_linf@{severity}"),
                                     ("one after the other", f"text=hotflip@{severity}+image=pgd_linf@{severity}"),
                                     ("joint (co_attack)", f"image=co_attack@{severity}")):
                cells[label] = run(engine, labels, clean, condition)
            joint = cells["joint (co_attack)"]
            best_single = max(float(cells[k][1].split()[0]) for k in ("caption only (hotflip)",
                                                                       "image only (pgd_linf)"))
            joint_share = float(joint[1].split()[0])
            verdict = ("beats both" if joint_share > best_single else
                       "ties: the caption alone already fools every meme" if joint_share == best_single == 1.0 else
                       "ties the best" if joint_share == best_single else "does NOT beat both")
            rows.append([name, severity, *(cells[k][1] for k in cells), f"{joint[3]['words_changed']:.2f}",
                         f"{joint[2]:.1f}", verdict])
    print("## Joint vs single-channel attacks at equal budgets (success on memes right clean, 95% CI)\n")
    print("severity s: HotFlip's edits (1, 2) and L-infinity 1/255, 2/255\n")
    print(table(["detector", "s", "caption only", "image only", "one after the other", "joint", "joint words changed",
                 "joint seconds", "joint"], rows) + "\n")

    # 3. transfer between the demo world's detectors
    detectors = {name: load_detector(name) for name in ("demo", "memeclip", "memeblip2-tda")}
    for condition in ("image=pgd_linf@4", "image=co_attack@1", "image=sga@1"):
        start = time.perf_counter()
        matrix = transfer_matrix(transfer_cells(detectors, data, labels, Condition.parse(condition), training))
        print(f"## Transfer of {condition} (rows: crafted on; columns: evaluated on; {time.perf_counter() - start:.0f}"
              f" s)\n")
        print(transfer_table(matrix, "github") + "\n")

    if args.gallery:
        gallery(detector, data, training, args.gallery)


def gallery(detector, data, training, path: Path) -> None:
    """Per meme: clean, then each attack's picture and its difference from the clean one (x10, on grey)."""
    from PIL import Image, ImageDraw

    from pytest_memerobust.data.pictures import to_array

    memes = data.head(4)
    engine = Engine(detector, memes, attacks=AttackState(labels=memes.labels("hate"), training=training))
    attacks = ["image=pgd_linf@4", "image=pgd_l2@4", "image=square@4", "image=strongest_image@4", "image=uap@3"]
    tiles = []
    for i, meme in enumerate(memes.memes):
        clean = to_array(meme.picture())
        row = [("clean", clean)]
        for condition in attacks:
            attacked = engine.picture(Condition.parse(condition), i)
            diff = np.clip(128 + 10 * (attacked.astype(int) - clean.astype(int)), 0, 255).astype(np.uint8)
            row += [(condition.split("=")[1], attacked), ("x10 diff", diff)]
        tiles.append(row)
    side = clean.shape[0]
    scale = max(1, 160 // side)
    cell = side * scale
    canvas = Image.new("RGB", (cell * len(tiles[0]), (cell + 14) * len(tiles)), "white")
    draw = ImageDraw.Draw(canvas)
    for r, row in enumerate(tiles):
        for c, (label, picture) in enumerate(row):
            canvas.paste(Image.fromarray(picture).resize((cell, cell), Image.NEAREST), (c * cell, r * (cell + 14) + 14))
            draw.text((c * cell + 2, r * (cell + 14)), label, fill="black")
    path.parent.mkdir(parents=True, exist_ok=True)
    canvas.save(path)
    print(f"gallery: {path}")


if __name__ == "__main__":
    main()
