"""The `memerobust` command: train a card's detector, list what is registered, re-render a saved report."""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

from .errors import MemeRobustError


def _train(args) -> int:
    from .data import load_dataset
    from .detectors import find_card, load_detector
    from .training import save_trained, train_head

    card = find_card(args.card)
    out = Path(args.out) if args.out else card.checkpoint_path()
    if out is None:
        raise MemeRobustError(f"card {card.name!r} names no checkpoint file; pass --out PATH")
    import torch

    torch.manual_seed(args.seed)  # the head's initial weights, so a retrain reproduces the shipped checkpoint
    # From scratch unless --resume names starting weights: the card's own checkpoint is what this writes.
    detector = load_detector(replace(card, checkpoint=None, checkpoint_sha256=None), checkpoint=args.resume,
                             device=args.device)
    train = load_dataset(f"{args.data}:train" if args.data == "demo" else args.train)
    val = load_dataset(f"{args.data}:val" if args.data == "demo" else args.val)

    def progress(row):
        print(f"epoch {row['epoch']:3d}  loss {row['loss']:.4f}  val AUROC {row['val_auroc']:.4f}  "
              f"val acc {row['val_accuracy']:.4f}", flush=True)

    result = train_head(detector, train, val, task=args.task or card.task, epochs=args.epochs, lr=args.lr,
                        batch_size=args.batch_size, seed=args.seed, progress=progress)
    save_trained(detector, out, card.name, result)
    print(f"best epoch {result.best_epoch} (val AUROC {result.best_val_auroc:.4f}); wrote {out}")
    return 0


def _list(args) -> int:
    from .data import LOADERS
    from .detectors import architectures, available_cards
    from .perturb import get, names
    from .suite import builtin_suite_paths

    print("models:", ", ".join(available_cards()))
    print("architectures:", ", ".join(sorted(architectures())))
    print("datasets:", ", ".join(sorted(LOADERS)))
    for modality in ("text", "image"):
        print(f"{modality} perturbations:")
        for name in names(modality):
            p = get(name)
            print(f"  {name:22s} severities {list(p.severities) or '-'}  {p.doc}")
    print("built-in suites:", ", ".join(p.name for p in builtin_suite_paths()))
    return 0


def _report(args) -> int:
    from .report import render, write_report

    report = json.loads(Path(args.json).read_text(encoding="utf-8"))
    print(render(report))
    if args.md:
        write_report(Path(args.md), report)
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="memerobust", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    train = sub.add_parser("train", help="fit a card's trainable head and write its checkpoint")
    train.add_argument("card", help="model card name or .toml path")
    train.add_argument("--data", default="demo", help="'demo' (its train/val splits), or use --train/--val")
    train.add_argument("--train", help="dataset spec of the training split")
    train.add_argument("--val", help="dataset spec of the validation split")
    train.add_argument("--out", help="checkpoint path (default: the card's checkpoint)")
    train.add_argument("--resume", help="start from this checkpoint")
    train.add_argument("--task")
    train.add_argument("--epochs", type=int, default=30)
    train.add_argument("--lr", type=float, default=1e-3)
    train.add_argument("--batch-size", type=int, default=16)
    train.add_argument("--seed", type=int, default=0)
    train.add_argument("--device", default="cpu")
    train.set_defaults(run=_train)
    sub.add_parser("list", help="models, datasets, perturbations and suites").set_defaults(run=_list)
    report = sub.add_parser("report", help="print the tables of a saved JSON report (and write Markdown)")
    report.add_argument("json")
    report.add_argument("--md", help="also write the tables to this .md file")
    report.set_defaults(run=_report)
    args = parser.parse_args(argv)
    try:
        return args.run(args)
    except MemeRobustError as exc:
        print(f"memerobust: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
