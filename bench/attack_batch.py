"""Our per-meme image attacks given a batch of memes on one device, against torchattacks given the same batch as one
tensor: robust accuracy side by side (Wilson intervals) and memes per second, L-infinity 8/255.

    python bench/attack_batch.py --device cuda --memes 32 --size 512
    python bench/attack_batch.py --memes 2 --size 64                    # a CPU smoke run

Ours is the registered attack's batch entry (`get(name).apply`), as a run calls it: each meme attacked alone with its
own keyed generator, so a meme's picture is the same in any batch. torchattacks attacks the whole batch at once and
re-batches the memes it has not fooled yet, so its model cannot hold one caption per row: every meme here shows the
first meme's caption, and a meme's true class is the detector's clean prediction for its picture with that caption
(clean robust accuracy 1 on both sides). bench/attack_reference.py compares meme by meme on the CPU, each with its
own caption; this reuses its torchattacks settings. Both sides' pictures are rounded to uint8 and judged through the
detector's real path.
"""
from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from attack_reference import LINF, CaptionFixed, rows

from pytest_memerobust.data import demo_dataset
from pytest_memerobust.detectors import load_detector
from pytest_memerobust.judge.instructions import wilson_interval
from pytest_memerobust.perturb import get
from pytest_memerobust.perturb.attacks import AttackContext, CleanInputs
from pytest_memerobust.perturb.image_attacks import LINF_LEVELS, targets

SEVERITY = LINF_LEVELS.index(LINF) + 1  # our severity of torchattacks' eps 8/255
ATTACKS = {"pgd_linf": "pgd", "apgd_ce": "apgd_ce", "square": "square"}  # ours -> attack_reference's row


def synchronize(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def predictions(detector, pictures: list, captions: list[str]) -> np.ndarray:
    return np.asarray(detector.predict_proba(pictures, captions)).argmax(1)


def accuracy(right: np.ndarray) -> tuple[str, tuple[float, float]]:
    lo, hi = wilson_interval(int(right.sum()), len(right))
    return f"{right.mean():.2f} ({lo:.2f}..{hi:.2f})", (lo, hi)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="memeblip2-tda")
    parser.add_argument("--memes", type=int, default=32)
    parser.add_argument("--size", type=int, default=512, help="draw the demo memes this many pixels square")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--attacks", default=",".join(ATTACKS),
                        help=f"comma-separated, of {', '.join(ATTACKS)}, with parameters as a run names them "
                             f"(square:queries=20: torchattacks' Square keeps its 500)")
    args = parser.parse_args()
    try:
        import torchattacks
    except ImportError:
        torchattacks = None

    detector = load_detector(args.model, None, args.device)
    memes = demo_dataset("test", size=args.size).head(args.memes).memes
    pictures, ids = [m.picture(args.device) for m in memes], [m.id for m in memes]
    captions = [memes[0].text] * len(memes)
    labels = predictions(detector, pictures, captions)
    context = AttackContext(detector, labels, CleanInputs(None, pictures, captions), ids=ids)
    theirs = rows(context, 2) if torchattacks else {}
    print(f"{args.model} on {args.device}, {len(memes)} demo memes of {args.size} px, one caption, L-infinity "
          f"{LINF:g}/255 (severity {SEVERITY}); torch {torch.__version__}, "
          + (f"torchattacks {torchattacks.__version__}" if torchattacks else
             "torchattacks not installed (pip install --no-deps -c constraints-torchattacks.txt torchattacks): "
             "ours only"))
    print("attack | ours: robust acc (95% CI) | torchattacks: robust acc (95% CI) | memes/s ours / theirs | "
          "target: intervals overlap")
    for name in args.attacks.split(","):
        synchronize(args.device)
        start = time.perf_counter()
        ours = get(name).apply(pictures, ids, SEVERITY, seed=0, context=context)
        synchronize(args.device)
        ours_s = time.perf_counter() - start
        ours_cell, (ours_lo, ours_hi) = accuracy(predictions(detector, ours, captions) == labels)
        if not torchattacks:
            print(f"{name} | {ours_cell} | not run | {len(memes) / ours_s:.2f} / - | not judged", flush=True)
            continue
        attack = theirs[ATTACKS[name.partition(":")[0]]][2](CaptionFixed(targets(context, [0])[0]).eval())
        attack.set_device(torch.device(args.device))  # (a module without parameters: torchattacks cannot tell)
        batch = torch.stack(pictures).float() / 255.0
        torch.manual_seed(0)
        synchronize(args.device)
        start = time.perf_counter()
        attacked = attack(batch, torch.as_tensor(labels, device=args.device))
        synchronize(args.device)
        theirs_s = time.perf_counter() - start
        attacked = list(torch.round(attacked * 255).clamp(0, 255).to(torch.uint8))
        theirs_cell, (theirs_lo, theirs_hi) = accuracy(predictions(detector, attacked, captions) == labels)
        overlap = "met" if ours_lo <= theirs_hi and theirs_lo <= ours_hi else "not met"
        print(f"{name} | {ours_cell} | {theirs_cell} | {len(memes) / ours_s:.2f} / {len(memes) / theirs_s:.2f} | "
              f"{overlap}", flush=True)
    print("(no target is set for the time: docs/benchmarks.md has none for the attacks on a GPU)")


if __name__ == "__main__":
    main()
