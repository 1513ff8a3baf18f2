"""How much does each registered caption perturbation change real PrideMM captions, and how fast is it?

For every registered text perturbation, on the PrideMM test captions at one severity (default 3; a perturbation
with a single severity, or none, runs at that), reports the share of captions changed, the mean character edit
distance (Levenshtein: insertions, deletions, substitutions, counted on code points), the mean relative edit distance
(distance / original length) and the throughput (captions per second, timed around `Perturbation.apply` in this
run). Perturbations that need a backend missing here (BackendMissing) are listed with the reason, once.

The attacks that query a detector (hotflip, universal_trigger) run against a caption-only detector built here: the
memeblip2-tda card's head (TDA on) on the all-MiniLM-L6-v2 caption encoder, trained for one epoch on the first 800
training captions, attacked on the first --attack-limit test captions. Their throughput includes everything the
attack does in that call (universal_trigger: the one-off trigger search on training memes, then prepending).

    python bench/text_perturbations.py [--data ../shared/data/pridemm] [--severity 3] [--attack-limit 60]
"""
from __future__ import annotations

import argparse
import os
import platform
import time
from pathlib import Path

import numpy as np
import torch
from tabulate import tabulate

from pytest_memerobust.data.loaders import load_pridemm
from pytest_memerobust.detectors import find_card
from pytest_memerobust.detectors.backbones import MiniLMBackbone
from pytest_memerobust.detectors.meme_models import MemeDetector, resolve_config
from pytest_memerobust.errors import BackendMissing
from pytest_memerobust.perturb import get, names
from pytest_memerobust.perturb.attacks import AttackContext, CleanInputs
from pytest_memerobust.perturb.distance import levenshtein
from pytest_memerobust.run.training.loop import train_head

TASK = "hate"


# --- rows -------------------------------------------------------------------------------------------------------


def _severity(p, wanted: int):
    if not p.parameters.severities:
        return None
    if wanted in p.parameters.severities:
        return wanted
    return min(p.parameters.severities, key=lambda s: (abs(s - wanted), s))  # the only one, or the nearest


def _row(label: str, family: str, severity, before: list[str], after: list[str], seconds: float) -> list:
    distances = np.array([levenshtein(a, b) for a, b in zip(before, after)], dtype=float)
    lengths = np.array([max(len(a), 1) for a in before], dtype=float)
    changed = np.mean([a != b for a, b in zip(before, after)])
    return [label, family, "-" if severity is None else severity, f"{changed:.1%}", f"{distances.mean():.2f}",
            f"{(distances / lengths).mean():.3f}", _rate(len(before) / seconds) if seconds > 0 else "inf"]


def _rate(per_second: float) -> str:
    return f"{per_second:,.0f}" if per_second >= 100 else f"{per_second:.3g}"


class ChunkedMiniLM(MiniLMBackbone):
    """all-MiniLM-L6-v2 encoding at most 128 captions per forward pass: an attack step scores a thousand candidate
    captions at once, and one forward pass over all of them would hold every attention map in memory."""

    def __init__(self):
        super().__init__({"kind": "minilm"})

    def encode_texts(self, texts):
        texts = list(texts)
        return torch.cat([super(ChunkedMiniLM, self).encode_texts(texts[i : i + 128])
                          for i in range(0, len(texts), 128)])


def caption_detector(train, val, n_train: int, seed: int = 0):
    card = find_card("memeblip2-tda")
    params, _, _ = resolve_config(card)
    torch.manual_seed(seed)
    detector = MemeDetector(card.classes, None, ChunkedMiniLM(), params)
    detector.fingerprint = f"bench-minilm-{card.name}-{n_train}-seed{seed}"
    training = card.network.training
    result = train_head(detector, train.head(n_train), val, task=TASK, epochs=1, lr=training.get("lr", 1e-4),
                        weight_decay=training.get("weight_decay", 1e-4), batch_size=training.get("batch_size", 16),
                        seed=seed)
    return detector, result, params


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default=str(Path(__file__).resolve().parents[2] / "shared/data/pridemm"))
    parser.add_argument("--severity", type=int, default=3)
    parser.add_argument("--attack-limit", type=int, default=60)
    parser.add_argument("--train-captions", type=int, default=800)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's own choice)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(f"machine: {platform.machine()} {platform.system()}, os.cpu_count() {os.cpu_count()}, usable CPUs "
          f"{affinity}, torch {torch.__version__} with {torch.get_num_threads()} intra-op threads "
          f"({torch.get_num_interop_threads()} inter-op), CUDA {'yes' if torch.cuda.is_available() else 'no'} "
          f"(not used), python {platform.python_version()}, numpy {np.__version__}")
    load_avg = os.getloadavg() if hasattr(os, "getloadavg") else None
    if load_avg:
        print(f"load average at start: {load_avg[0]:.2f} {load_avg[1]:.2f} {load_avg[2]:.2f}")

    data = Path(args.data)
    test = load_pridemm(data, "test", require_images=False)
    captions = [m.text for m in test.memes]
    ids = [m.id for m in test.memes]
    lengths = np.array([len(c) for c in captions])
    print(f"PrideMM test split: {len(captions)} captions, length mean {lengths.mean():.0f} / median "
          f"{np.median(lengths):.0f} / max {lengths.max()} characters; severity {args.severity}; seed {args.seed}\n")

    rows, missing, attacks = [], {}, []
    start_all = time.perf_counter()
    for name in names("text"):
        p = get(name)
        severity = _severity(p, args.severity)
        if p.needs_model:
            attacks.append((name, p, severity))
            continue
        try:
            p(captions[0], severity, p.rng(args.seed, ids[0], severity))  # a missing backend fails here, once
            start = time.perf_counter()
            out = p.apply(captions, ids, severity, args.seed)
            seconds = time.perf_counter() - start
        except BackendMissing as exc:
            missing.setdefault(str(exc), []).append(name)
            continue
        rows.append(_row(name, p.family, severity, captions, out, seconds))
    print(f"{len(rows)} perturbations without a model applied in {time.perf_counter() - start_all:.1f} s", flush=True)

    if attacks:
        start = time.perf_counter()
        train = load_pridemm(data, "train", require_images=False)
        val = load_pridemm(data, "val", require_images=False)
        detector, result, params = caption_detector(train, val, args.train_captions, args.seed)
        n = min(args.attack_limit, len(captions))
        y = test.labels(TASK)[:n]
        subset = train.head(args.train_captions)
        context = AttackContext(detector, y, CleanInputs(np.zeros((n, 0), dtype=np.float32)),
                                training=lambda: ([m.text for m in subset.memes], subset.labels(TASK), subset.memes))
        clean_pred = context.probabilities(captions[:n], range(n)).argmax(1)
        print(f"caption-only detector: memeblip2-tda head (map_dim {params['map_dim']}, tda {params['tda']}) on "
              f"all-MiniLM-L6-v2, 1 epoch on the first {len(subset)} training captions "
              f"(val AUROC {result.best_val_auroc:.3f}) in {time.perf_counter() - start:.1f} s; white box: "
              f"{context.white_box}; clean accuracy on the first {n} test captions {np.mean(clean_pred == y):.3f}",
              flush=True)
        for name, p, severity in attacks:
            start = time.perf_counter()
            out = p.apply(captions[:n], ids[:n], severity, args.seed, context)
            seconds = time.perf_counter() - start
            rows.append(_row(f"{name} (model, n={n})", p.family, severity, captions[:n], out, seconds))
            pred = context.probabilities(out, range(n)).argmax(1)
            note = ""
            if name == "universal_trigger":  # the search is done once; applying a found trigger is a prefix
                again = time.perf_counter()
                assert p.apply(captions[:n], ids[:n], severity, args.seed, context) == out
                note = (f"; trigger {next(iter(context.memo.values()))!r}; with the trigger already found: "
                        f"{_rate(n / (time.perf_counter() - again))} captions/s")
            print(f"  {name}@{severity}: {seconds:.1f} s ({_rate(n / seconds)} captions/s); accuracy "
                  f"{np.mean(clean_pred == y):.3f} -> {np.mean(pred == y):.3f}, predictions flipped "
                  f"{np.mean(pred != clean_pred):.1%}" + note, flush=True)

    rows.sort(key=lambda r: (r[1], r[0]))
    print()
    print(tabulate(rows, headers=["perturbation", "family", "severity", "changed", "mean edit distance",
                                  "mean relative distance", "captions/s"],
                   colalign=("left", "left", "right", "right", "right", "right", "right"), disable_numparse=True))
    if missing:
        print("\nnot run here (BackendMissing):")
        for reason, skipped in missing.items():
            print(f"  {', '.join(skipped)}: {reason}")
    print(f"\ntotal {time.perf_counter() - start_all:.0f} s")


if __name__ == "__main__":
    main()
