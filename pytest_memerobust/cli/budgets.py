"""`memerobust budgets`: the smallest edit that gets each harmful meme past a detector, per edit family (median
budget, evasion curve, intervals)."""
from __future__ import annotations

from pathlib import Path

from .common import OCR_OPTION, OUTSIDE_PATHS, ocr_reader


def add_parser(sub) -> None:
    from ..data.ocr import OCR_BACKENDS
    from ..options import device

    budgets = sub.add_parser("budgets", help="the smallest edit that gets each harmful meme past a detector, per "
                             "edit family (median budget, evasion curve, intervals)")
    budgets.add_argument("card", help="model card name or .toml path")
    budgets.add_argument("--data", required=True, help="dataset spec, e.g. pridemm:../shared/data/pridemm:test")
    budgets.add_argument("--checkpoint", help="the head to test (default: the card's)")
    budgets.add_argument("--family", action="append", help="edit family (repeatable; default: every family the "
                         "detector reads: char_edits, lookalikes, word_substitutions, covered_caption, image_linf)")
    budgets.add_argument("--task")
    budgets.add_argument("--limit", type=int, help="the first N memes")
    budgets.add_argument("--seed", type=int, default=0)
    budgets.add_argument("--bootstrap", type=int, default=1000, help="bootstrap resamples for the intervals")
    budgets.add_argument("--batch-size", dest="batch_size", type=int, default=64)
    budgets.add_argument("--device", type=device, default="cpu", help="cpu (default), auto, cuda, cuda:N or mps")
    budgets.add_argument("--ocr", choices=OCR_BACKENDS, help="read the captions memes lack off their pictures "
                         "with this OCR backend, as a pytest run with --memerobust-ocr does")
    budgets.add_argument(OUTSIDE_PATHS, dest="allow_outside_paths", action="store_true",
                         help="read a dataset whose files lie outside its folder")
    budgets.add_argument("--json", help="write the budgets (with the worst memes) to this JSON file")


def run(args) -> int:
    """The smallest edit that gets each harmful meme past a detector, per edit family (budgets.py)."""
    from ..detectors import find_card
    from ..detectors.cards import check_local_weights

    card = find_card(args.card)
    if args.checkpoint is None and not card.network.demo_weights:
        check_local_weights(card)  # before torch loads: weights missing here are said at once
    import json

    from ..atomic import atomic_write_text
    from ..perturb.budget_edits import get_family
    from ..run.analyses import evaluate_budgets
    from ..data.reading import read_memes
    from ..detectors import load_detector
    from ..engine import EncodingSettings, Engine
    from ..report.tables import budget_table

    for name in args.family or ():
        get_family(name)  # an unknown family is said before anything loads
    detector = load_detector(card, checkpoint=args.checkpoint, device=args.device)
    reads_pictures = "image" in getattr(detector, "modalities", ("image", "text"))
    task = args.task or card.task
    ocr = ocr_reader(args)
    data = read_memes(args.data, ocr=ocr, require_images=reads_pictures or ocr is not None,
                      allow_outside_paths=args.allow_outside_paths, ocr_option=OCR_OPTION,
                      limit=args.limit).labelled(task)
    engine = Engine(detector, data, seed=args.seed, asking=EncodingSettings(batch_size=args.batch_size))
    entries = evaluate_budgets(engine, data.labels(task), args.family, seed=args.seed, n_resamples=args.bootstrap)
    print(f"evasion budgets: {card.name} on {args.data} ({sum(data.labels(task) == 1)} harmful memes; the searched "
          f"ones are those it flags when clean)")
    print(budget_table(entries))
    for e in entries:
        for w in e["worst"][:3]:
            print(f"  {e['family']} {w['budget']:g}: {w['id']}: {w['caption'][:60]!r} -> "
                  f"{(w['evasion'] or '(picture edited)')[:60]!r}")
    if args.json:
        atomic_write_text(Path(args.json), json.dumps({"model": card.name, "data": args.data, "task": task,
                                                       "budgets": entries}, indent=2) + "\n")
        print(f"wrote {args.json}")
    return 0
