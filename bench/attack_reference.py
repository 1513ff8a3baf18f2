"""Our per-meme image attacks against torchattacks' (Kim 2020, the field's reference PyTorch implementations), on the
same detector, memes and budget: robust accuracy side by side with Wilson intervals, PGD without random start step
for step, and the share of the L2 budget each L2 attack's picture uses.

torchattacks 3.5.1 pins requests~=2.25.1, which would downgrade this project's requests, and never imports it; so it
is installed beside the project without its dependencies (its others, torch, torchvision, scipy, numpy, tqdm, are
already here):

    .venv/bin/pip install --no-deps -c constraints-torchattacks.txt torchattacks
    .venv/bin/python bench/attack_reference.py --memes 40
    .venv/bin/python bench/attack_reference.py --memes 40 --classes 4 --rows apgd_t,autoattack

torchattacks attacks `model(x) -> logits` on float pictures in [0, 1] of one size: the wrapper below is our
detector's white-box path (`picture_logits`) with the meme's caption fixed, one meme at a time. Its pictures are then
rounded to uint8 and judged through the detector's real path, as ours are (an L2 picture of theirs is rounded to the
nearest level only, so it may leave its ball: the budget column says by how much).

`--classes 2` (default) attacks the shipped memeblip2-tda detector on the demo memes' two classes. The demo memes have
no task of three classes or more, so `--classes N` (N >= 3) attacks an untrained demo head of N classes (its weights
drawn with torch's seed 0) whose true class for a meme is its own clean prediction: a fixed function to compare
attacks on, not a detector of anything. torchattacks' targeted DLR reads a fourth class, so APGD-T and AutoAttack are
compared at N >= 4.
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
from pytest_memerobust.perturb.attacks import AttackContext, CleanInputs  # noqa: E402
from pytest_memerobust.perturb.image_attacks import L2_RMS_LEVELS, margin, targets  # noqa: E402

LINF = 8.0  # L-infinity budget of the L-infinity rows, in levels (8/255, severity 4)


class CaptionFixed(torch.nn.Module):
    """picture in [0, 1] -> class logits of one meme, its caption's features fixed."""

    def __init__(self, target):
        super().__init__()
        self.target = target

    def forward(self, x):
        return self.target.logits(x * 255.0)


def fooled(target, picture) -> bool:
    return bool(margin(target.scores([picture])[0], target.label) < 0)


def l2_eps(severity: int, picture) -> float:
    return float(L2_RMS_LEVELS[severity - 1]) * float(np.sqrt(picture.numel()))


def rows(context, classes: int) -> dict:
    """name -> (ours(target, picture, rng, row) -> picture, theirs(model) -> torchattacks attack, L2 eps or None)."""
    import torchattacks

    ia, e = image_attacks, LINF / 255
    out = {
        "pgd0": ("PGD, no random start (10 x 2/255)",
                 lambda t, p, rng, i: ia.pgd(t, p, LINF, "linf", rng, random_start=False)[0],
                 lambda m: torchattacks.PGD(m, eps=e, alpha=2 / 255, steps=10, random_start=False), None),
        "pgd": ("PGD (random start)", lambda t, p, rng, i: ia.pgd(t, p, LINF, "linf", rng)[0],
                lambda m: torchattacks.PGD(m, eps=e, alpha=2 / 255, steps=10, random_start=True), None),
        "apgd_ce": ("APGD-CE (100 steps)", lambda t, p, rng, i: ia.apgd(t, p, LINF, "ce", rng)[0],
                    lambda m: torchattacks.APGD(m, eps=e, steps=100, loss="ce", n_restarts=1, seed=0), None),
        "apgd_ce_r5": ("APGD-CE, 5 restarts",
                       lambda t, p, rng, i: ia.restarted(lambda g: ia.apgd(t, p, LINF, "ce", g), t, rng, 5)[0],
                       lambda m: torchattacks.APGD(m, eps=e, steps=100, loss="ce", n_restarts=5, seed=0), None),
        "square": ("Square (500 queries)", lambda t, p, rng, i: ia.square(t, p, LINF, rng, queries=500)[0],
                   lambda m: torchattacks.Square(m, eps=e, n_queries=500, n_restarts=1, p_init=0.8, loss="margin",
                                                 seed=0), None),
        "square5000": ("Square (5,000 queries)", lambda t, p, rng, i: ia.square(t, p, LINF, rng, queries=5000)[0],
                       lambda m: torchattacks.Square(m, eps=e, n_queries=5000, n_restarts=1, p_init=0.8,
                                                     loss="margin", seed=0), None),
    }
    for severity in (1, 2, 3):
        rms = L2_RMS_LEVELS[severity - 1]
        out[f"pgd_l2@{severity}"] = (
            f"PGD-L2, {rms:g}/255 RMS (severity {severity})",
            lambda t, p, rng, i, s=severity: ia.pgd(t, p, l2_eps(s, p), "l2", rng)[0],
            lambda m, p, s=severity: torchattacks.PGDL2(m, eps=l2_eps(s, p) / 255, alpha=2.5 * l2_eps(s, p) / 2550,
                                                        steps=10, random_start=True), severity)
    out["apgd_l2"] = ("APGD-CE in L2, 2/255 RMS (severity 3, 100 steps)",
                      lambda t, p, rng, i: ia.apgd(t, p, l2_eps(3, p), "ce", rng, norm="l2")[0],
                      lambda m, p: torchattacks.APGD(m, norm="L2", eps=l2_eps(3, p) / 255, steps=100, loss="ce",
                                                     n_restarts=1, seed=0), 3)
    if classes >= 4:
        out["apgd_t"] = ("APGD-T (targeted DLR, 3 target classes x 100 steps)",
                         lambda t, p, rng, i: ia.apgd_targeted(t, p, LINF, rng)[0],
                         lambda m: torchattacks.APGDT(m, eps=e, steps=100, n_restarts=1, n_classes=classes, seed=0),
                         None)
        out["autoattack"] = ("autoattack (ours: no FAB-T) vs AutoAttack standard (with FAB-T)",
                             lambda t, p, rng, i: ia.autoattack_batch([p], [i], 4, [rng], context)[0],
                             lambda m: torchattacks.AutoAttack(m, norm="Linf", eps=e, version="standard",
                                                               n_classes=classes, seed=0), None)
    else:
        out["autoattack"] = ("autoattack, 2 classes: APGD-CE then Square-5000 (both sides)",
                             lambda t, p, rng, i: ia.autoattack_batch([p], [i], 4, [rng], context)[0],
                             lambda m: torchattacks.MultiAttack([
                                 torchattacks.APGD(m, eps=e, steps=100, loss="ce", n_restarts=1, seed=0),
                                 torchattacks.Square(m, eps=e, n_queries=5000, n_restarts=1, p_init=0.8,
                                                     loss="margin", seed=0)]), None)
    return out


def world(model: str, mode: str, classes: int, n: int):
    """(detector, memes, labels): the shipped detector and the memes' hate labels, or an untrained demo head of
    `classes` classes and its own clean predictions."""
    memes = demo_dataset("test").head(n).memes
    if classes == 2:
        detector = load_detector(model)
        if mode != "multimodal":
            detector = detector.with_mode(mode)
        return detector, memes, np.asarray([m.labels["hate"] for m in memes])
    from pytest_memerobust.detectors.demo import DemoDetector

    torch.manual_seed(0)
    detector = DemoDetector([f"class {k}" for k in range(classes)])
    proba = detector.predict_proba([m.picture() for m in memes], [m.text for m in memes])
    return detector, memes, np.asarray(proba).argmax(1)


def main() -> None:
    import torchattacks

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memes", type=int, default=48)
    parser.add_argument("--model", default="memeblip2-tda")
    parser.add_argument("--mode", default="multimodal")
    parser.add_argument("--classes", type=int, default=2)
    parser.add_argument("--rows", default="pgd0,pgd,apgd_ce,square", help="comma-separated row names")
    parser.add_argument("--ours-only", action="store_true", help="skip torchattacks (ours before and after a change)")
    args = parser.parse_args()
    detector, memes, labels = world(args.model, args.mode, args.classes, args.memes)
    clean = CleanInputs(None, [m.picture() for m in memes], captions=[m.text for m in memes])
    context = AttackContext(detector, labels, clean, ids=[m.id for m in memes])
    table = rows(context, args.classes)
    unknown = [r for r in args.rows.split(",") if r not in table]
    if unknown:
        raise SystemExit(f"unknown rows {unknown}; known here: {', '.join(table)}")
    model = args.model if args.classes == 2 else f"untrained demo head, {args.classes} classes"
    print(f"# bench/attack_reference.py --memes {args.memes} --classes {args.classes} --rows {args.rows}"
          f"{' --ours-only (the torchattacks columns repeat ours)' if args.ours_only else ''} "
          f"({model}, {args.mode}; {datetime.date.today()}, CPU, torchattacks {torchattacks.__version__}); "
          f"L-infinity rows at 8/255\n")
    print("| attack | ours: robust acc (95% CI) | torchattacks: robust acc (95% CI) | same verdict per meme | "
          "identical pixels | L2 budget used, ours / theirs (min..max) | seconds ours / theirs |")
    print("|---|---|---|---|---|---|---|")
    n = len(memes)
    for key in args.rows.split(","):
        name, ours, theirs, l2_severity = table[key]
        right_ours, right_theirs, used_ours, used_theirs = [], [], [], []
        same_pixels, total_pixels, t_ours, t_theirs = 0, 0, 0.0, 0.0
        for i, (target, meme) in enumerate(zip(targets(context, range(n)), memes)):
            picture = meme.picture()
            start = time.perf_counter()
            a = ours(target, picture, np.random.default_rng(i), i)
            t_ours += time.perf_counter() - start
            torch.manual_seed(i)
            start = time.perf_counter()
            if args.ours_only:
                b = a
            else:
                model = CaptionFixed(target).eval()
                attack = theirs(model, picture) if l2_severity else theirs(model)
                attack.set_device(torch.device("cpu"))  # (a module without parameters: torchattacks cannot tell)
                b = attack((picture.float()[None] / 255.0).contiguous(), torch.tensor([target.label]))[0]
                b = torch.round(b * 255).clamp(0, 255).to(torch.uint8)
            t_theirs += time.perf_counter() - start
            right_ours.append(not fooled(target, a))
            right_theirs.append(not fooled(target, b))
            same_pixels += int((a == b).sum())
            total_pixels += a.numel()
            if l2_severity and not fooled(target, picture):  # (torchattacks' APGD returns a meme wrong clean as it is)
                eps = l2_eps(l2_severity, picture)
                used_ours.append(float((a.float() - picture.float()).norm()) / eps)
                used_theirs.append(float((b.float() - picture.float()).norm()) / eps)

        def cell(right):
            lo, hi = wilson_interval(sum(right), n)
            return f"{sum(right) / n:.2f} ({lo:.2f}..{hi:.2f})"

        def used(shares):
            return f"{np.mean(shares):.3f} ({min(shares):.3f}..{max(shares):.3f})" if shares else "none right clean"

        agree = sum(x == y for x, y in zip(right_ours, right_theirs))
        budget = f"{used(used_ours)} / {used(used_theirs)}" if l2_severity else "–"
        print(f"| {name} | {cell(right_ours)} | {cell(right_theirs)} | {agree} of {n} | "
              f"{same_pixels / total_pixels:.3f} | {budget} | {t_ours:.1f} / {t_theirs:.1f} |", flush=True)
    if args.classes == 2:
        print("\ntorchattacks' APGD with loss='dlr', APGD-T and AutoAttack need three classes or more (their DLR reads "
              "the third-largest logit, the targeted one the fourth), so on this two-class task they cannot run; ours "
              "uses the Carlini-Wagner margin for APGD-DLR, and autoattack runs APGD-CE then Square there.")


if __name__ == "__main__":
    main()
