"""A universal trigger's fit on PrideMM captions, this release against an earlier one, side by side in one run at one
thread: the seconds of each fit (trigger length 1 to 5 are the severities of the built-in suites' universal_trigger)
and the trigger each release finds.

    python bench/trigger_fit.py --previous a4240c9                  # length 2: 64 fit memes, 2 rounds x 2 x 16
    python bench/trigger_fit.py --previous a4240c9 --lengths 1 2 3 4 5

Each release runs in a process of its own (the earlier one unpacked from git, first on PYTHONPATH), one after the
other, at one intra-op thread. The detector is the MiniLM caption-only card bench/cpu_scaling.py trains on PrideMM's
train/val split (trained once into its output folder), the same checkpoint for both; the fit memes are PrideMM's
train split, as a run on its test split fits them.
"""
from __future__ import annotations

import argparse
import csv
import json
import time

from cpu_scaling import add_release_arguments, releases_side_by_side



def measure(card: str, lengths: list[int]) -> dict:
    """In this process: one fit per length, its seconds and trigger."""
    import numpy as np
    import torch

    from cpu_scaling import SHARED
    from pytest_memerobust.detectors.cards import load_card
    from pytest_memerobust.detectors.registry import load_detector
    from pytest_memerobust.perturb import attacks

    torch.set_num_threads(1)
    detector = load_detector(load_card(card))
    assert "image" not in detector.modalities, "the bench's card reads captions alone (no pictures are loaded)"
    rows = [r for r in csv.DictReader(open(SHARED / "data" / "pridemm" / "PrideMM.csv", encoding="utf-8"))
            if r["split"] == "train"]
    texts, labels = [r["text"] for r in rows], np.array([int(r["hate"]) for r in rows])
    training = lambda: (texts, labels, [None] * len(texts))  # noqa: E731
    context = attacks.AttackContext(detector, labels[:1], attacks.CleanInputs(np.zeros((1, 0), np.float32)),
                                    training=training)
    out = {}
    for length in lengths:
        start = time.perf_counter()
        trigger = attacks.find_trigger(context, length, seed=0)
        out[length] = {"seconds": time.perf_counter() - start, "trigger": trigger}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[2])
    add_release_arguments(parser)
    options = parser.parse_args()
    if options.child:
        print(json.dumps(measure(options.child, options.lengths)))
        return
    results = releases_side_by_side(__file__, ["--lengths", *map(str, options.lengths)], options.previous, options.out)
    print("universal trigger fits on PrideMM's train split (64 fit memes, 2 rounds x length x 16 candidates), "
          "MiniLM card, one thread")
    print(f"{'release':<16} " + " ".join(f"{'length ' + str(n) + ' s':>12}" for n in options.lengths)
          + f" {'all s':>9}  triggers")
    for name, result in results.items():
        seconds = [result[str(n)]["seconds"] for n in options.lengths]
        print(f"{name:<16} " + " ".join(f"{s:12.1f}" for s in seconds) + f" {sum(seconds):9.1f}  "
              + " | ".join(result[str(n)]["trigger"] for n in options.lengths))
    if len(results) == 2:
        (before, then), (_, now) = results.items()
        total = [sum(r[str(n)]["seconds"] for n in options.lengths) for r in (then, now)]
        same = sum(then[str(n)]["trigger"] == now[str(n)]["trigger"] for n in options.lengths)
        print(f"speed-up {total[0] / total[1]:.2f}x; the same trigger as {before} for {same} of "
              f"{len(options.lengths)} lengths")


if __name__ == "__main__":
    main()
