"""Seconds each model-free image perturbation takes on the demo test memes at severity 3, through the registry's
`apply` on picture tensors (what the engine's background thread does for each condition side).

    python bench/image_perturbations.py                  # 96 px demo memes, on the CPU
    python bench/image_perturbations.py --size 512 --device cuda
"""
from __future__ import annotations

import argparse
import time

import torch

from pytest_memerobust.data.demo import demo_dataset
from pytest_memerobust.perturb import get, names


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=96, help="demo memes drawn this many pixels square")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--severity", type=int, default=3)
    args = parser.parse_args()
    data = demo_dataset(size=args.size)
    ids, pictures = [m.id for m in data.memes], [m.picture(args.device) for m in data.memes]
    seconds = {}
    for name in names("image"):
        perturbation = get(name)
        if perturbation.needs_model or perturbation.traits.caption_source:
            continue
        severity = args.severity if perturbation.severities else None
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        start = time.perf_counter()
        perturbation.apply(pictures, ids, severity, seed=0)
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        seconds[name] = time.perf_counter() - start
    print(f"{len(pictures)} pictures of {args.size} px on {args.device}, severity {args.severity} "
          f"(torch {torch.__version__}, {torch.get_num_threads()} threads); seconds per perturbation:")
    print(" ".join(f"{k}={v:.2f}" for k, v in sorted(seconds.items(), key=lambda kv: -kv[1])))
    print(f"total {sum(seconds.values()):.2f} s")


if __name__ == "__main__":
    main()
