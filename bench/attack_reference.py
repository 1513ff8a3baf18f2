"""Our per-meme image attacks against torchattacks' (Kim 2020, the field's reference PyTorch implementations), on the
same detector, memes and budget: robust accuracy side by side, and PGD without random start step for step.

torchattacks 3.5.1 pins requests~=2.25.1, which would downgrade this project's requests, and never imports it; so it
is installed beside the project without its dependencies (its others, torch, torchvision, scipy, numpy, tqdm, are
already here):

    .venv/bin/pip install --no-deps -c constraints-torchattacks.txt torchattacks
    .venv/bin/python bench/attack_reference.py --memes 48

torchattacks attacks `model(x) -> logits` on float pictures in [0, 1] of one size: the wrapper below is our
detector's white-box path (`picture_logits`) with the meme's caption fixed, one meme at a time. Its pictures are then
rounded to uint8 and judged through the detector's real path, as ours are.
"""
from __future__ import annotations

import argparse
import datetime
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pytest_memerobust.data import demo_dataset  # noqa: E402
from pytest_memerobust.detectors import load_detector  # noqa: E402
from pytest_memerobust.judge.instructions import wilson_interval  # noqa: E402
from pytest_memerobust.perturb import image_attacks  # noqa: E402
from pytest_memerobust.perturb.attacks import AttackContext  # noqa: E402
from pytest_memerobust.perturb.image_attacks import margin, targets  # noqa: E402


class CaptionFixed(torch.nn.Module):
    """picture in [0, 1] -> class logits of one meme, its caption's features fixed."""

    def __init__(self, target):
        super().__init__()
        self.target = target

    def forward(self, x):
        return self.target.logits(x * 255.0)


def fooled(target, picture) -> bool:
    return bool(margin(target.scores([picture])[0], target.label) < 0)


def main() -> None:
    import torchattacks

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memes", type=int, default=48)
    parser.add_argument("--model", default="memeblip2-tda")
    parser.add_argument("--mode", default="multimodal")
    args = parser.parse_args()
    detector = load_detector(args.model)
    if args.mode != "multimodal":
        detector = detector.with_mode(args.mode)
    memes = demo_dataset("test").head(args.memes).memes
    context = AttackContext(detector, np.asarray([m.labels["hate"] for m in memes]), None,
                            [m.picture() for m in memes], captions=[m.text for m in memes],
                            ids=[m.id for m in memes])
    eps = 8.0
    print(f"# bench/attack_reference.py --memes {args.memes} --model {args.model} --mode {args.mode} "
          f"({datetime.date.today()}, CPU, torchattacks {torchattacks.__version__}), L-infinity 8/255\n")
    ours = {
        "PGD, no random start (10 x 2/255)": lambda t, p, rng: image_attacks.pgd(t, p, eps, "linf", rng,
                                                                                random_start=False)[0],
        "PGD (random start)": lambda t, p, rng: image_attacks.pgd(t, p, eps, "linf", rng)[0],
        "APGD-CE (100 steps)": lambda t, p, rng: image_attacks.apgd(t, p, eps, "ce", rng)[0],
        "Square (500 queries)": lambda t, p, rng: image_attacks.square(t, p, eps, rng, queries=500)[0],
    }
    theirs = {
        "PGD, no random start (10 x 2/255)": lambda m: torchattacks.PGD(m, eps=8 / 255, alpha=2 / 255, steps=10,
                                                                        random_start=False),
        "PGD (random start)": lambda m: torchattacks.PGD(m, eps=8 / 255, alpha=2 / 255, steps=10,
                                                         random_start=True),
        "APGD-CE (100 steps)": lambda m: torchattacks.APGD(m, eps=8 / 255, steps=100, loss="ce", n_restarts=1,
                                                           seed=0),
        "Square (500 queries)": lambda m: torchattacks.Square(m, eps=8 / 255, n_queries=500, n_restarts=1, p_init=0.8,
                                                              loss="margin", seed=0),
    }
    print("| attack | ours: robust acc (95% CI) | torchattacks: robust acc (95% CI) | same verdict per meme | "
          "identical pixels | seconds ours / theirs |")
    print("|---|---|---|---|---|---|")
    for name in ours:
        right_ours, right_theirs, same_pixels, total_pixels, t_ours, t_theirs = [], [], 0, 0, 0.0, 0.0
        for i, (target, meme) in enumerate(zip(targets(context, range(len(memes))), memes)):
            picture = meme.picture()
            start = time.perf_counter()
            a = ours[name](target, picture, np.random.default_rng(i))
            t_ours += time.perf_counter() - start
            torch.manual_seed(i)
            start = time.perf_counter()
            attack = theirs[name](CaptionFixed(target).eval())
            attack.set_device(torch.device("cpu"))  # (a module without parameters: torchattacks cannot tell)
            b = attack(picture.float()[None] / 255.0, torch.tensor([target.label]))[0]
            t_theirs += time.perf_counter() - start
            b = torch.round(b * 255).clamp(0, 255).to(torch.uint8)
            right_ours.append(not fooled(target, a))
            right_theirs.append(not fooled(target, b))
            same_pixels += int((a == b).sum())
            total_pixels += a.numel()
        n = len(memes)

        def cell(right):
            lo, hi = wilson_interval(sum(right), n)
            return f"{sum(right) / n:.2f} ({lo:.2f}..{hi:.2f})"

        agree = sum(x == y for x, y in zip(right_ours, right_theirs))
        print(f"| {name} | {cell(right_ours)} | {cell(right_theirs)} | {agree} of {n} | "
              f"{same_pixels / total_pixels:.3f} | {t_ours:.1f} / {t_theirs:.1f} |")
    print("\ntorchattacks' APGD with loss='dlr' needs three classes (its DLR reads the third-largest logit), so on this "
          "two-class task it cannot run; ours uses the Carlini-Wagner margin there.")


if __name__ == "__main__":
    main()
