"""Image attacks on the tiny prompted vision-language models of tests/tiny_vlms.py, per family: clean accuracy, and
robust accuracy under pgd_linf@4 (8/255, white box through the label-word logits where the processor is reproduced
in torch), square@4 (queries only) and co_attack@2 (HotFlip + PGD, or + Square for a family without gradients), on
demo memes of the test split, with seconds and the queries of the black-box attacks. Prints a Markdown table.

    python bench/vlm_attacks.py [--memes 16] [--square-queries 500]
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from test_vlm import vlm_card  # noqa: E402
from tiny_vlms import FAMILIES, save_tiny_vlm  # noqa: E402

from pytest_memerobust.data import demo_dataset  # noqa: E402
from pytest_memerobust.detectors import load_detector  # noqa: E402
from pytest_memerobust.perturb import get, image_attacks  # noqa: E402
from pytest_memerobust.perturb.attacks import AttackContext, CleanInputs  # noqa: E402
from pytest_memerobust.perturb.image_attacks import NoGradient, margin  # noqa: E402
from pytest_memerobust.perturb.joint import joint_captions  # noqa: E402

ATTACKS = (("pgd_linf", 4), ("square", 4), ("co_attack", 2))


def accuracy(detector, pictures, captions, labels) -> str:
    """k/n right, and the mean true-class margin of the log-probabilities (a tiny random model's verdicts rarely
    flip, and the margin shows how far an attack moved them)."""
    proba = detector.predict_proba(pictures, captions)
    right = int((proba.argmax(axis=1) == labels).sum())
    log_proba = np.log(np.clip(proba, 1e-12, 1.0))
    mean_margin = float(np.mean([margin(row, label) for row, label in zip(log_proba, labels)]))
    return f"{right}/{len(labels)} ({mean_margin:+.3f})"


def attack(detector, memes, name: str, severity: int) -> tuple[str, float, str]:
    """(robust accuracy k/n, seconds, queries asked) of one attack on all memes."""
    labels = np.asarray([m.labels["hate"] for m in memes])
    pictures, captions, ids = [m.picture() for m in memes], [m.text for m in memes], [m.id for m in memes]
    context = AttackContext(detector, labels, CleanInputs(None, pictures, captions), ids=ids, seed=0)
    start = time.perf_counter()
    try:
        attacked = get(name).apply(pictures, ids, severity, 0, context)
    except NoGradient:
        return "n/a (no gradient)", time.perf_counter() - start, "-"
    seconds = time.perf_counter() - start
    if name == "co_attack":
        captions = joint_captions(context, name, severity, range(len(memes)))
    records = context.outcomes[("image", name, severity)].values()
    white_box = name == "pgd_linf" or all(r.get("white_box") for r in records)
    queries = sum(int(r.get("queries", 0)) for r in records)
    return accuracy(detector, attacked, captions, labels), seconds, ("-" if white_box and not queries else
                                                                    str(queries))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memes", type=int, default=16)
    parser.add_argument("--square-queries", type=int, default=image_attacks.SQUARE_QUERIES)
    args = parser.parse_args()
    image_attacks.SQUARE_QUERIES = args.square_queries
    memes = demo_dataset("test").head(args.memes).memes
    labels = np.asarray([m.labels["hate"] for m in memes])
    rows = []
    for family in FAMILIES:
        detector = load_detector(vlm_card(save_tiny_vlm(family, Path(tempfile.mkdtemp()))))
        clean = accuracy(detector, [m.picture() for m in memes], [m.text for m in memes], labels)
        cells = []
        for name, severity in ATTACKS:
            robust, seconds, queries = attack(detector, memes, name, severity)
            cells.append(f"{robust} | {seconds:.1f} s | {queries}")
        path = "white box" if detector.no_gradient_reason is None else "queries only"
        rows.append(f"| {family} ({path}) | {clean} | " + " | ".join(cells) + " |")
    print(f"`python bench/vlm_attacks.py --memes {args.memes} --square-queries {args.square_queries}`, "
          f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, CPU, tiny random models (robust accuracy k/n; "
          f"in brackets the mean true-class margin of the log-probabilities; queries: the black-box attacks' and "
          f"co_attack's caption queries)\n")
    header = " | ".join(f"{n}@{s} acc | s | queries" for n, s in ATTACKS)
    print(f"| family | clean acc | {header} |")
    print("|" + "---|" * (2 + 3 * len(ATTACKS)))
    print("\n".join(rows))


if __name__ == "__main__":
    main()
