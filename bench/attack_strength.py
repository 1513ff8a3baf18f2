"""Flip rate of each white-box attack against a random edit of the same budget, on a tiny random config of every
backbone kind (the detectors of tests/test_attack_strength.py: heads trained 40 epochs on the demo memes; the 160
demo test memes attacked), with 95% paired bootstrap intervals. Prints a Markdown table.

    python bench/attack_strength.py
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from test_attack_strength import Attacked, random_char_edits  # noqa: E402
from tiny_backbones import KINDS  # noqa: E402

from pytest_memerobust.judge.metrics import paired_bootstrap_ci  # noqa: E402
from pytest_memerobust.perturb import get  # noqa: E402
from pytest_memerobust.perturb.attacks import vocabulary_words  # noqa: E402
from pytest_memerobust.perturb.uap import add_pattern_batch, pattern_for  # noqa: E402


def _interval(*arrays, statistic, signed: bool = False) -> str:
    low, high = paired_bootstrap_ci(statistic, *arrays, n_resamples=2000)
    return f"{low:+.3f}..{high:+.3f}" if signed else f"{low:.3f}..{high:.3f}"


def row(kind: str, attack: str, flips: np.ndarray, random: np.ndarray) -> str:
    mean = lambda a: float(a.mean())  # noqa: E731
    difference = lambda a, b: float(a.mean() - b.mean())  # noqa: E731
    return (f"| {kind} | {attack} | {flips.mean():.3f} ({_interval(flips, statistic=mean)}) "
            f"| {random.mean():.3f} ({_interval(random, statistic=mean)}) "
            f"| {difference(flips, random):+.3f} ({_interval(flips, random, statistic=difference, signed=True)}) |")


def rows(kind: str):
    run = Attacked(kind)
    rng = np.random.default_rng(0)
    flipped = get("hotflip").apply(run.texts, run.ids, 3, 0, run.context)
    random = [random_char_edits(t, 4, rng) for t in run.texts]
    yield row(kind, "hotflip@3 (4 char edits)", run.flips(texts=flipped), run.flips(texts=random))
    triggered = get("universal_trigger").apply(run.texts, run.ids, 3, 0, run.context)
    vocabulary = [w for _, w in vocabulary_words(run.detector.text_backbone)]
    words = " ".join(vocabulary[int(i)] for i in np.random.default_rng(0).choice(len(vocabulary), 3, replace=False))
    yield row(kind, "universal_trigger@3 (3 words)", run.flips(texts=triggered),
              run.flips(texts=[f"{words} {t}" for t in run.texts]))
    if KINDS[kind][2]["kind"] == "minilm":
        return
    image = Attacked(kind, "image", train_mode="image")
    pattern = pattern_for(image.context, 16 / 255)
    noise = (np.sign(np.random.default_rng(0).standard_normal(pattern.shape)) * 16 / 255).astype(np.float32)
    accuracy = float((image.clean == image.context.labels).mean())
    yield row(kind, f"uap@5 (16/255), image channel (clean accuracy {accuracy:.2f})",
              image.flips(pictures=add_pattern_batch(image.pictures, pattern)),
              image.flips(pictures=add_pattern_batch(image.pictures, noise)))
    multimodal = pattern_for(run.context, 16 / 255)
    yield row(kind, "uap@5 (16/255), multimodal", run.flips(pictures=add_pattern_batch(run.pictures, multimodal)),
              run.flips(pictures=add_pattern_batch(run.pictures, noise)))


def main() -> None:
    print("| backbone kind | attack | flip rate | random edit, same budget | difference (95% paired bootstrap) |")
    print("| --- | --- | ---: | ---: | ---: |")
    for kind in KINDS:
        for line in rows(kind):
            print(line, flush=True)


if __name__ == "__main__":
    main()
