"""The feature store's caption encoding against a plain transformers loop, and `memerobust train`'s encoding, on
PrideMM's train and val captions (4,556), side by side in one run (issue 61):

    python bench/encoder_store.py                      # every row below
    python bench/encoder_store.py --limit 600          # the first 600 captions only
    python bench/encoder_store.py --previous d0d65e3   # also the train command of an earlier release

Rows, each timed alone on this machine, one after the other:
- loop: all-MiniLM-L6-v2 straight from transformers, the captions sorted by length, batches of 32 padded to their
  longest, mean-pooled, at one torch thread: what a careful user's own loop costs.
- store, buckets: the feature store as runs use it now (determinism.encode_fixed: each caption padded to its bucket,
  batches of 16 rows of one bucket: determinism.caption_rows), one process at one thread.
- store, full length: the same store with every caption padded to MiniLM's 128 tokens: how it encoded before.
- store, 2 workers: the bucketed store's batches on the worker pool (LocalPool.encode_batches), spawn included.
- train: `memerobust train memeblip2-minilm --data pridemm:... --epochs 1 --no-cache` as a user runs it (auto
  workers), wall time of the whole command; `--previous REF` adds the same command from that release.

Each row's ratio is the loop's seconds over its own (higher is faster); the store's rows also check that their
features are the same bytes as each other's.
"""
from __future__ import annotations

import argparse
import csv
import functools
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
from cpu_scaling import SHARED, unpack  # noqa: E402

from pytest_memerobust.detectors import load_detector  # noqa: E402
from pytest_memerobust.detectors.backbones import minilm_path  # noqa: E402
from pytest_memerobust.determinism import caption_buckets, caption_rows, fixed_threads  # noqa: E402
from pytest_memerobust.engine.executors import LocalPool  # noqa: E402
from pytest_memerobust.engine.features import FeatureStore  # noqa: E402

CARD = "memeblip2-minilm"


def plain_loop(captions: list[str], batch_size: int = 32) -> np.ndarray:
    """all-MiniLM-L6-v2 as its model card shows it, the captions sorted by length and batched."""
    from transformers import AutoModel, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(minilm_path())
    model = AutoModel.from_pretrained(minilm_path()).eval()
    order = sorted(range(len(captions)), key=lambda i: len(tokenizer.tokenize(captions[i])))
    out = np.zeros((len(captions), model.config.hidden_size), np.float32)
    with torch.no_grad():
        for k in range(0, len(order), batch_size):
            rows = order[k : k + batch_size]
            batch = tokenizer([captions[i] for i in rows], padding=True, truncation=True, max_length=128,
                              return_tensors="pt")
            hidden = model(**batch).last_hidden_state
            mask = batch["attention_mask"].unsqueeze(-1).float()
            out[rows] = torch.nn.functional.normalize((hidden * mask).sum(1) / mask.sum(1), dim=-1).numpy()
    return out


def timed(fn):
    start = time.perf_counter()
    value = fn()
    return time.perf_counter() - start, value


def train_command(data: str, pythonpath: Path | None = None) -> float:
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    with tempfile.TemporaryDirectory() as folder:
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "pytest_memerobust.cli", "train", CARD, "--data", data,
                        "--epochs", "1", "--no-cache", "--quiet", "--out", str(Path(folder) / "m.safetensors")],
                       check=True, cwd=folder, env=env, capture_output=True)
        return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=None, help="the first N captions only")
    parser.add_argument("--previous", help="a git ref: also time its train command")
    parser.add_argument("--skip-train", action="store_true")
    options = parser.parse_args()
    folder = SHARED / "data" / "pridemm"
    rows = [r for r in csv.DictReader(open(folder / "PrideMM.csv", encoding="utf-8")) if r["split"] in ("train", "val")]
    captions = [r["text"] for r in rows][: options.limit]
    torch.set_num_threads(1)
    detector = load_detector(CARD)
    buckets = caption_buckets(detector)
    lengths = detector.text_backbone.caption_buckets(captions)
    print(f"{len(captions)} PrideMM train+val captions, MiniLM; padded length: mean {np.mean(lengths):.1f} tokens "
          f"(full length 128); {os.cpu_count()} cores")
    rows = caption_rows("cpu", 64)  # what a run's store uses on a CPU at the default batch size
    seconds, features = {}, {}
    seconds["loop"], _ = timed(lambda: plain_loop(captions))
    with fixed_threads():
        seconds["store, buckets"], features["buckets"] = timed(
            lambda: FeatureStore("a").features("text", captions, detector.encode_texts, rows, buckets=buckets))
        seconds["store, full length"], features["full"] = timed(
            lambda: FeatureStore("b").features("text", captions, detector.encode_texts, rows))
    pool = LocalPool(2)
    try:
        run = pool.encode_batches(functools.partial(load_detector, CARD))
        with fixed_threads():
            seconds["store, 2 workers"], features["pool"] = timed(lambda: FeatureStore("c").features(
                "text", captions, detector.encode_texts, rows, buckets=buckets,
                run_batches=lambda *work: run("text", *work)))
        print(f"pool: {pool.batches} batches on {pool.size} workers, {pool.batches_here} here while they started")
    finally:
        pool.close()
    if not options.skip_train and options.limit is None:
        data = f"pridemm:{folder}"
        seconds["train --epochs 1"] = train_command(data)
        if options.previous:
            previous = unpack(options.previous, Path(tempfile.gettempdir()) / "memerobust-encoder-store")
            seconds[f"train --epochs 1 ({options.previous})"] = train_command(data, previous)
    print(f"{'row':<28} {'seconds':>8} {'loop / row':>11}")
    for name, s in seconds.items():
        print(f"{name:<28} {s:8.1f} {seconds['loop'] / s:10.2f}x")
    same = np.array_equal(features["buckets"], features["pool"])
    gap = float(np.abs(features["buckets"] - features["full"]).max())
    print(f"store at 2 workers: the same bytes as one process: {same}; bucketed vs full length: max |diff| {gap:.2e}")
    print("targets: store, buckets >= 0.9x; store, 2 workers >= 1.6x; train --epochs 1 >= 1.25x (at most 0.8x the "
          "loop's time)")


if __name__ == "__main__":
    main()
