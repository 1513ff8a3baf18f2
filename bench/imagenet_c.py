"""Throughput of each ImageNet-C corruption: the reference (`imagecorruptions` 1.1.2, one picture at a time, with
the numpy-2 shims of tests/imagenet_c_reference.py) against ours, one picture at a time and in batches, measured in
the same run so the ratios hold on a noisy machine.

    python bench/imagenet_c.py                       # 224 x 224, batch 32, on the CPU
    python bench/imagenet_c.py --size 512 --device cuda --batch 128

Our pictures are uint8 tensors already on the device (as the engine holds them); the reference gets arrays, one at a
time, on one CPU core as it runs. Prints pictures per second and the speed-up of our batched path over the reference
(the issue's target on a GPU: >= 50x for every corruption).
"""
from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import torch
from tabulate import tabulate

from pytest_memerobust.perturb.imagenet_c import COMMON, CORRUPTIONS, EXTRA, run_batched  # noqa: E402
from pytest_memerobust.data.pictures import as_picture  # noqa: E402


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _rate(fn, pictures: int, min_seconds: float) -> float:
    """Pictures per second of `fn`, repeated until `min_seconds` have passed (after one warm-up call)."""
    fn()
    _sync()
    runs, start = 0, time.perf_counter()
    while True:
        fn()
        _sync()
        runs += 1
        elapsed = time.perf_counter() - start
        if elapsed >= min_seconds:
            return runs * pictures / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=224, help="picture side in pixels")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--severity", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=1.0, help="minimum time per measurement")
    parser.add_argument("--names", nargs="+", default=list(COMMON + EXTRA))
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from imagenet_c_reference_pictures import test_picture

    on_device = as_picture(test_picture(args.size, args.size), args.device)
    batch = [as_picture(test_picture(args.size, args.size, seed=i), args.device) for i in range(args.batch)]
    rngs = lambda n: [np.random.default_rng(i) for i in range(n)]  # noqa: E731
    ours = {}
    # Ours first, then the reference (which needs the dev extra): torch's CPU threads spin at barriers, so keep the
    # machine otherwise idle while this runs: with a busy core, ours measured up to 100x slower here.
    for name in args.names:
        fn = CORRUPTIONS[name]
        one = _rate(lambda: run_batched(fn, [on_device], args.severity, rngs(1)), 1, args.seconds)
        many = _rate(lambda: run_batched(fn, batch, args.severity, rngs(len(batch))), len(batch), args.seconds)
        ours[name] = (one, many)
    try:
        from imagenet_c_reference import reference
    except BaseException:  # pytest's Skipped when the dev extra is missing
        reference = None
    picture = test_picture(args.size, args.size)
    rows = []
    for name in args.names:
        ref = _rate(lambda: reference(name, picture, args.severity, 0), 1, args.seconds) if reference else float("nan")
        one, many = ours[name]
        rows.append([name, f"{ref:,.1f}", f"{one:,.1f}", f"{many:,.1f}", f"{many / ref:.2f}x"])
        print(*rows[-1], sep="\t", flush=True)
    print()
    print(f"{args.size}x{args.size} pictures, severity {args.severity}, ours on {args.device} "
          f"(torch {torch.__version__}, {torch.get_num_threads()} threads), batch {args.batch}; pictures/s")
    print(tabulate(rows, headers=["corruption", "reference", "ours, 1 at a time", f"ours, batch {args.batch}",
                                  "batch / reference"], colalign=("left", "right", "right", "right", "right")))


if __name__ == "__main__":
    main()
