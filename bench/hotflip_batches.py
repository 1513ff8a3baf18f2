"""HotFlip per meme on PrideMM captions, this release against an earlier one, side by side in one run at one thread:
the seconds per meme of the rainbow-noise suite's severities (1, 3 and 5, in that order, on one attack context as
the engine runs them) and whether the attacked captions are the same.

    python bench/hotflip_batches.py --previous d0d65e3          # the first 32 PrideMM test memes
    python bench/hotflip_batches.py --memes 64 --previous d0d65e3

Each release runs in a process of its own (the earlier one unpacked from git, first on PYTHONPATH), one after the
other. The detector is the MiniLM caption-only card bench/cpu_scaling.py trains on PrideMM's train/val split
(trained once into its output folder), the same checkpoint for both.
"""
from __future__ import annotations

import argparse
import csv
import json
import time

from cpu_scaling import add_release_arguments, releases_side_by_side

SEVERITIES = (1, 3, 5)


def measure(card: str, memes: int) -> dict:
    """In this process: HotFlip at SEVERITIES on one context, seconds and captions per severity."""
    import numpy as np
    import torch

    from cpu_scaling import SHARED
    from pytest_memerobust.detectors.cards import load_card
    from pytest_memerobust.detectors.registry import load_detector
    from pytest_memerobust.perturb import attacks, get

    torch.set_num_threads(1)
    detector = load_detector(load_card(card))
    rows = [r for r in csv.DictReader(open(SHARED / "data" / "pridemm" / "PrideMM.csv", encoding="utf-8"))
            if r["split"] == "test"][:memes]
    texts, ids = [r["text"] for r in rows], [r["name"] for r in rows]
    labels = np.array([int(r["hate"]) for r in rows])
    context = attacks.AttackContext(detector, labels, attacks.CleanInputs(np.zeros((len(texts), 0), np.float32)))
    out = {}
    for severity in SEVERITIES:
        start = time.perf_counter()
        captions = get("hotflip").apply(texts, ids, severity, 0, context)
        out[severity] = {"seconds": time.perf_counter() - start, "captions": captions}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memes", type=int, default=32)
    add_release_arguments(parser)
    options = parser.parse_args()
    if options.child:
        print(json.dumps(measure(options.child, options.memes)))
        return
    results = releases_side_by_side(__file__, ["--memes", str(options.memes)], options.previous, options.out)
    print(f"HotFlip on the first {options.memes} PrideMM test memes, MiniLM card, one thread, severities "
          f"{', '.join(map(str, SEVERITIES))} in turn on one context")
    header = " ".join(f"{'sev ' + str(s) + ' s/meme':>14}" for s in SEVERITIES)
    print(f"{'release':<16} {header} {'all s/meme':>11}")
    for name, result in results.items():
        seconds = [result[str(s)]["seconds"] / options.memes for s in SEVERITIES]
        print(f"{name:<16} " + " ".join(f"{s:14.3f}" for s in seconds) + f" {sum(seconds):11.3f}")
    if len(results) == 2:
        (before, then), (_, now) = results.items()
        total = [sum(r[str(s)]["seconds"] for s in SEVERITIES) for r in (then, now)]
        same = {s: sum(a == b for a, b in zip(then[str(s)]["captions"], now[str(s)]["captions"])) for s in SEVERITIES}
        print(f"speed-up {total[0] / total[1]:.2f}x over the three severities; the same attacked caption as {before}: "
              + ", ".join(f"severity {s} {n} of {options.memes}" for s, n in same.items()))


if __name__ == "__main__":
    main()
