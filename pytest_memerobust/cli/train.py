"""`memerobust train`: fit a card's trainable head and write its checkpoint (the run itself: run/training.py)."""
from __future__ import annotations

import sys
from pathlib import Path

from .common import CACHE_DIR, OCR_OPTION, OUTSIDE_PATHS, Progress, ocr_reader


def add_parser(sub) -> None:
    from ..data.ocr import OCR_BACKENDS
    from ..options import device, workers

    train = sub.add_parser("train", help="fit a card's trainable head and write its checkpoint")
    train.add_argument("card", help="model card name or .toml path")
    train.add_argument("--data", help="'demo' or NAME:PATH: use its train and val splits")
    train.add_argument("--train", help="dataset spec of the training split, e.g. pridemm:/data/PrideMM:train")
    train.add_argument("--val", help="dataset spec of the validation split")
    train.add_argument("--demo", action="store_true",
                       help="use the card's small [demo] configuration and recipe, on the demo memes unless --data "
                            "says otherwise; without --out, write the card's own checkpoint file (refused for a "
                            "card shipped inside a package: pass --out)")
    train.add_argument("--out", help="checkpoint path (.safetensors); metrics and a card are written beside it; never "
                                     "inside the installed package")
    train.add_argument("--name", help="the name of the card written beside the checkpoint (default: the --out "
                       "file's name without .safetensors; a registered card's name gets -trained)")
    train.add_argument("--init", help="start from the weights of this checkpoint")
    train.add_argument("--resume", action="store_true", help="continue an interrupted run of the same command")
    train.add_argument("--force", action="store_true", help="replace a finished checkpoint at --out (refused without)")
    train.add_argument("--task")
    train.add_argument("--epochs", type=int, help="default: the card's [training] (with --demo, updated by its [demo] "
                       "training), else 10")
    train.add_argument("--lr", type=float, help="default: the card's [training] (with --demo, updated by its [demo] "
                       "training), else 1e-4")
    train.add_argument("--weight-decay", dest="weight_decay", type=float, help="default: card, else 1e-4")
    train.add_argument("--batch-size", dest="batch_size", type=int, help="default: card, else 16")
    train.add_argument("--seed", type=int, default=0)
    train.add_argument("--device", type=device, default="cpu", help="cpu (default), auto, cuda, cuda:N or mps")
    train.add_argument("--workers", type=workers, default=None, metavar="N",
                       help="on a CPU, encode the inputs on N worker processes, each at one thread (default auto: the "
                            "usable cores), the same checkpoint bytes at any N; the epochs run in this process")
    train.add_argument("--cache-dir", dest="cache_dir", default=CACHE_DIR,
                       help="where encoded features are kept, by backbone, for later heads and pytest runs (default: "
                            "the plugin's, .pytest_cache/d/memerobust)")
    train.add_argument("--no-cache", dest="no_cache", action="store_true", help="keep features in memory only")
    train.add_argument("--quiet", action="store_true", help="no progress (by default a bar on a terminal while it "
                       "encodes and trains, else a line every 10%%, on standard error)")
    train.add_argument("--ocr", choices=OCR_BACKENDS, help="read the captions memes lack off their pictures with "
                       "this OCR backend, as a pytest run with --memerobust-ocr does")
    train.add_argument(OUTSIDE_PATHS, dest="allow_outside_paths", action="store_true",
                       help="let the data's image paths lead outside its folder")
    train.add_argument("--augment", action="append", metavar="SPEC",
                       help="train on a registered perturbation as augmentation: NAME[@S|@LOW-HIGH][:P], e.g. "
                            "typos@1-5:0.5 (each meme edited with probability P per epoch, default 0.5, at a severity "
                            "drawn from the range); repeatable; default: the card's [training] augment")
    train.add_argument("--adversarial", metavar="SPEC",
                       help="attack each batch against the current weights and train on it: ATTACK@S[:KEEP], e.g. "
                            "hotflip@1 or pgd_linf@2:0.5 (KEEP: the share of memes kept clean)")
    train.add_argument("--adversarial-loss", dest="adversarial_loss", metavar="LOSS",
                       help="ce (default: cross-entropy on the attacked memes) or trades[:BETA] (clean cross-entropy "
                            "plus BETA x KL(clean || attacked); BETA default 6)")
    train.add_argument("--adaptation", metavar="METHOD",
                       help="what is trained: head (default: frozen encoders, the trainable head), linear, "
                            "adapter[:reduction=R], compacter[:phm=N,reduction=R], lora[:rank=R,alpha=A], "
                            "prompt[:tokens=N] or full; default: the card's [training] adaptation")
    train.add_argument("--download", action="store_true", help="let a backbone named by hub id that is not on this "
                       "machine download (into the Hugging Face cache); without it such a backbone is an error")


def run(args) -> int:
    from ..detectors.cards import allow_downloads

    with allow_downloads(args.download):
        return _run_allowed(args)


def _run_allowed(args) -> int:
    from ..run.training import (TRAINING_DEFAULTS, MemeSource, OutputTarget, RecipeFlags, StartingPoint,
                                TrainingCompute, TrainingRequest, describe_recipe, fit_head, load_training,
                                plan_training, resumable, save_head)

    request = TrainingRequest(
        card=args.card, demo=args.demo, output=OutputTarget(out=args.out, name=args.name, force=args.force),
        memes=MemeSource(data=args.data, train=args.train, val=args.val, task=args.task,
                         allow_outside_paths=args.allow_outside_paths, ocr_option=OCR_OPTION),
        start=StartingPoint(init=args.init, resume=args.resume, seed=args.seed),
        recipe=RecipeFlags(augment=tuple(args.augment) if args.augment else None, adversarial=args.adversarial,
                           adversarial_loss=args.adversarial_loss, adaptation=args.adaptation),
        compute=TrainingCompute(device=args.device, workers=args.workers,
                               cache_dir=None if args.no_cache else Path(args.cache_dir)),
        flags={k: getattr(args, k) for k in TRAINING_DEFAULTS})
    plan = plan_training(request)
    data = load_training(plan, request, ocr=lambda: ocr_reader(args))
    card, hyper = data.card, plan.hyper
    if not args.quiet:
        print(describe_recipe(plan, data), file=sys.stderr)
    shown = Progress(disabled=args.quiet)

    def encoding(what, n, total):
        shown.advance(f"encoding {what}", n, total, unit="input")

    def progress(row):
        shown.advance(f"training {card.name}", 1, hyper["epochs"], unit="epoch", at=row["epoch"],
                      loss=f"{row['loss']:.4f}", val_auroc=f"{row['val_auroc']:.4f}",
                      val_acc=f"{row['val_accuracy']:.4f}", val_f1=f"{row['val_macro_f1']:.4f}")

    with resumable(plan):  # a full disk is one line naming the file, and what to run once space is freed
        try:
            result = fit_head(plan, request, data, encoding=encoding, progress=progress)
        finally:
            shown.close()
    cached, cost, trained = result.feature_cache, result.cost, result.recipe
    if cost.encoders_in_loop:
        print(f"the encoders trained ({trained.adaptation}), so they ran on every batch and nothing was cached")
    elif cached:
        read, encoded = sum(cached["disk_hits"].values()), sum(cached["encoded"].values())
        cache_dir = request.compute.cache_dir
        where = f"the feature cache in {cache_dir}" if cache_dir else "no feature cache (--no-cache)"
        on = (f" on {cost.encoding_workers} worker processes in {cost.encoding_seconds:.0f} s"
              if cost.encoding_workers > 1 else "")
        print(f"encoded {encoded} inputs{on} and read {read} from {where}: features are kept by backbone, so every "
              f"head on this backbone reuses them")
    with resumable(plan):
        written = save_head(plan, request, data, result)
    print(f"best epoch {result.best_epoch} (val AUROC {result.best_val_auroc:.4f}); adaptation {trained.adaptation}, "
          f"{trained.trainable_parameters:,} trainable parameters; wrote {', '.join(written)} in {plan.out.parent}")
    if result.diverged is not None:
        from ..run.training.loop import divergence_line

        print(f"memerobust: training diverged at {divergence_line(result.diverged)}: stopped there; the checkpoint "
              f"holds epoch {result.best_epoch}'s weights, the best before it; try a lower --lr "
              f"(this run's: {hyper['lr']:g})", file=sys.stderr)
        return 1
    return 0
