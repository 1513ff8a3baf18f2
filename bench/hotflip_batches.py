"""HotFlip's candidate queries, batched as before (256 captions in the order the search made them) and as now
(shortest caption first, attacks.QUERY_BATCH per batch), side by side in one run on one thread: the seconds each
takes and whether the attacked captions are the same.

    python bench/hotflip_batches.py                     # the first 32 PrideMM test memes, severity 3
    python bench/hotflip_batches.py --memes 64 --severity 5

The detector is the MiniLM caption-only card bench/cpu_scaling.py trains on PrideMM's train/val split (trained once
into its output folder). A query batch is padded to its longest caption, so the batch's composition is the cost.
"""
from __future__ import annotations

import argparse
import csv
import time
from pathlib import Path

import numpy as np
import torch

from cpu_scaling import SHARED, minilm_card
from pytest_memerobust.detectors.cards import load_card
from pytest_memerobust.detectors.registry import load_detector
from pytest_memerobust.perturb import attacks


class InSearchOrder(attacks.AttackContext):
    """The queries as the release before: batches of 256 in the order the search made them."""

    def probabilities(self, captions, rows, batch_size=None):
        det, rows, captions = self.detector, list(rows), list(captions)
        return np.concatenate([det.head(self.image_features[rows[k : k + 256]], det.encode_texts(captions[k : k + 256]))
                               for k in range(0, len(captions), 256)])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memes", type=int, default=32)
    parser.add_argument("--severity", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path("/tmp/memerobust-cpu-scaling"))
    options = parser.parse_args()
    torch.set_num_threads(1)
    folder = SHARED / "data" / "pridemm"
    detector = load_detector(load_card(minilm_card(options.out, f"pridemm:{folder}")))
    memes = [r for r in csv.DictReader(open(folder / "PrideMM.csv")) if r["split"] == "test"][: options.memes]
    texts, labels = [m["text"] for m in memes], np.array([int(m["hate"]) for m in memes])
    print(f"HotFlip severity {options.severity} on the first {len(texts)} PrideMM test memes, MiniLM card, 1 thread")
    outcomes, seconds = {}, {}
    for name, context_type in (("256 in search order", InSearchOrder), ("sorted, QUERY_BATCH", attacks.AttackContext)):
        context = context_type(detector, labels, np.zeros((len(texts), 0), np.float32), None)
        rngs = [np.random.default_rng(i) for i in range(len(texts))]
        start = time.perf_counter()
        outcomes[name] = attacks.hotflip_batch(texts, range(len(texts)), options.severity, rngs, context)
        seconds[name] = time.perf_counter() - start
        print(f"{name:<22} {seconds[name]:7.1f} s")
    before, now = outcomes["256 in search order"], outcomes["sorted, QUERY_BATCH"]
    print(f"speed-up {seconds['256 in search order'] / seconds['sorted, QUERY_BATCH']:.2f}x; the same attacked "
          f"caption for {sum(a == b for a, b in zip(before, now))} of {len(now)} memes")


if __name__ == "__main__":
    main()
