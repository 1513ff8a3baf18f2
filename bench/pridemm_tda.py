"""Does the Text Denoising Adapter make a caption-only MemeBLIP2-style detector more robust on real PrideMM captions?

Trains the MemeBLIP2 head (projection, adapter, product-free text path, pre-output block, linear classifier;
paper hyperparameters: AdamW lr 1e-4, weight decay 1e-4, batch 16, epoch chosen by validation AUROC) on frozen
all-MiniLM-L6-v2 caption embeddings, with and without TDA, for several seeds, on PrideMM's own train/val/test split
(hate task). Reports clean accuracy / AUROC / macro-F1 on the test split and relative robustness under typos at each
severity, each with a paired bootstrap interval, and the paired difference TDA - no TDA.

    python bench/pridemm_tda.py [--data ../shared/data/pridemm] [--seeds 0 1 2] [--epochs 10]
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch

from pytest_memerobust.judge import metrics
from pytest_memerobust.data.loaders import load_pridemm
from pytest_memerobust.detectors import find_card
from pytest_memerobust.detectors.backbones import MiniLMBackbone
from pytest_memerobust.detectors.meme_models import MemeDetector, resolve_config
from pytest_memerobust.engine import AttackState, Condition, Engine
from pytest_memerobust.run.training.loop import train_head

SEVERITIES = (1, 2, 3, 4, 5)


class MemoisedMiniLM(MiniLMBackbone):
    """Encode each distinct caption once across every detector and condition of the benchmark."""

    def __init__(self):
        super().__init__({"kind": "minilm"})
        self.memo: dict[str, torch.Tensor] = {}

    def encode_texts(self, texts):
        if torch.is_grad_enabled():  # a white-box attack needs the real forward pass, not a cached vector
            return super().encode_texts(texts)
        todo = [t for t in dict.fromkeys(texts) if t not in self.memo]
        for i in range(0, len(todo), 128):
            batch = todo[i : i + 128]
            with torch.no_grad():
                for text, vector in zip(batch, super().encode_texts(batch)):
                    self.memo[text] = vector
        return torch.stack([self.memo[t] for t in texts])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default=str(Path(__file__).resolve().parents[2] / "shared/data/pridemm"))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--bootstrap", type=int, default=1000)
    parser.add_argument("--hotflip-limit", type=int, default=0,
                        help="also attack the first N test captions with white-box HotFlip@1 and @3 (slow on a CPU)")
    args = parser.parse_args()

    splits = {s: load_pridemm(Path(args.data), s, require_images=False) for s in ("train", "val", "test")}
    print("PrideMM caption-only, hate task: " + ", ".join(f"{s} {len(d)}" for s, d in splits.items()))
    card = find_card("memeblip2")
    params, _, _ = resolve_config(card)
    backbone = MemoisedMiniLM()
    test = splits["test"]
    y = test.labels("hate")
    start = time.perf_counter()
    runs = {}
    for tda in (False, True):
        for seed in args.seeds:
            torch.manual_seed(seed)
            detector = MemeDetector(card.classes, None, backbone, {**params, "tda": tda})
            result = train_head(detector, splits["train"], splits["val"], epochs=args.epochs, lr=1e-4,
                                weight_decay=1e-4, batch_size=16, seed=seed)
            engine = Engine(detector, test, seed=seed)
            runs[(tda, seed)] = {"best_epoch": result.best_epoch, "clean": engine.predict(Condition()),
                                 **{s: engine.predict(Condition(text="typos", text_severity=s)) for s in SEVERITIES}}
            if args.hotflip_limit:
                head = test.head(args.hotflip_limit)
                attacked = Engine(detector, head, seed=seed, attacks=AttackState(labels=head.labels("hate")))
                runs[(tda, seed)]["hotflip"] = {s: attacked.predict(Condition(text="hotflip", text_severity=s))
                                                for s in (1, 3)}
                runs[(tda, seed)]["hotflip_clean"] = attacked.predict(Condition())
            print(f"  trained {'TDA' if tda else 'no TDA'} seed {seed}: best epoch {result.best_epoch}, "
                  f"val AUROC {result.best_val_auroc:.4f}", flush=True)
    print(f"({time.perf_counter() - start:.0f} s, {len(backbone.memo)} distinct captions encoded)\n")

    boot = {"n_resamples": args.bootstrap, "seed": 0}
    print("clean test metrics (95% paired bootstrap CI over test memes)")
    for tda in (False, True):
        for seed in args.seeds:
            p = runs[(tda, seed)]["clean"]
            cells = [f"{m} {metrics.METRICS[m](y, p):.3f} [{lo:.3f}, {hi:.3f}]" for m in ("accuracy", "auroc", "macro_f1")
                     for lo, hi in [metrics.metric_ci(m, y, p, **boot)]]
            print(f"  {'TDA   ' if tda else 'no TDA'} seed {seed}: " + "; ".join(cells))
    print("\nrelative robustness of accuracy / AUROC under typos (95% CI)")
    for s in SEVERITIES:
        for tda in (False, True):
            row = []
            for seed in args.seeds:
                r = runs[(tda, seed)]
                for m in ("accuracy", "auroc"):
                    value = metrics.relative_robustness(metrics.METRICS[m](y, r["clean"]), metrics.METRICS[m](y, r[s]))
                    lo, hi = metrics.robustness_ci(m, y, r["clean"], r[s], **boot)
                    row.append(f"seed {seed} {m[:3]} {value:.3f} [{lo:.3f}, {hi:.3f}]")
            print(f"  typos@{s} {'TDA   ' if tda else 'no TDA'}: " + " | ".join(row))
    print("\nTDA minus no TDA, same seed: difference of relative robustness (accuracy), paired bootstrap 95% CI;"
          " McNemar p on typos@s correctness")
    for s in SEVERITIES:
        cells = []
        for seed in args.seeds:
            a, b = runs[(False, seed)], runs[(True, seed)]

            def gap(yy, ac, ap, bc, bp):
                rr = lambda c, p: metrics.relative_robustness(metrics.accuracy(yy, c.argmax(1)), metrics.accuracy(yy, p.argmax(1)))
                return rr(bc, bp) - rr(ac, ap)

            diff = gap(y, a["clean"], a[s], b["clean"], b[s])
            lo, hi = metrics.paired_bootstrap_ci(gap, y, a["clean"], a[s], b["clean"], b[s], **boot)
            p_value = metrics.mcnemar_p_value(a[s].argmax(1) == y, b[s].argmax(1) == y)
            cells.append(f"seed {seed}: {diff:+.3f} [{lo:+.3f}, {hi:+.3f}] p={p_value:.3f}")
        print(f"  typos@{s}: " + " | ".join(cells))

    if args.hotflip_limit:
        yh = test.head(args.hotflip_limit).labels("hate")
        print(f"\nwhite-box HotFlip on the first {args.hotflip_limit} test captions: relative robustness of accuracy "
              "(95% CI), and TDA minus no TDA (paired 95% CI)")
        for s in (1, 3):
            for seed in args.seeds:
                cells = []
                for tda in (False, True):
                    r = runs[(tda, seed)]
                    value = metrics.relative_robustness(metrics.accuracy(yh, r["hotflip_clean"].argmax(1)),
                                                        metrics.accuracy(yh, r["hotflip"][s].argmax(1)))
                    lo, hi = metrics.robustness_ci("accuracy", yh, r["hotflip_clean"], r["hotflip"][s], **boot)
                    cells.append(f"{'TDA' if tda else 'no TDA'} {value:.3f} [{lo:.3f}, {hi:.3f}]")
                a, b = runs[(False, seed)], runs[(True, seed)]

                def gap(yy, ac, ap, bc, bp):
                    rr = lambda c, p: metrics.relative_robustness(metrics.accuracy(yy, c.argmax(1)),
                                                                  metrics.accuracy(yy, p.argmax(1)))
                    return rr(bc, bp) - rr(ac, ap)

                arrays = (a["hotflip_clean"], a["hotflip"][s], b["hotflip_clean"], b["hotflip"][s])
                lo, hi = metrics.paired_bootstrap_ci(gap, yh, *arrays, **boot)
                cells.append(f"difference {gap(yh, *arrays):+.3f} [{lo:+.3f}, {hi:+.3f}]")
                print(f"  hotflip@{s} seed {seed}: " + " | ".join(cells))


if __name__ == "__main__":
    main()
