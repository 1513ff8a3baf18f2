"""`memerobust augment`: an augmented training set as a Hugging Face datasets set, each meme with N augmented copies
drawn as `memerobust train --augment` draws its epochs (track/augmented.py)."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .common import OUTSIDE_PATHS, Progress

DESCRIPTION = """\
Each meme of --data gives --copies augmented copies. Copy k uses the draws of epoch k of training: `memerobust train
CARD --train SPEC --val VAL --augment X --seed S` trains at epoch k on exactly copy k of `memerobust augment --data
SPEC --augment X --seed S` (draws are keyed by seed, epoch, meme id and perturbation, so the other memes of the data do
not change a meme's copies). Copy 0 is the clean meme (--no-with-clean leaves it out). Rows: id (<meme id>#<copy>),
meme_id, copy, caption, image (PNG bytes; no image column for caption-only data), labels of every task, split,
applied (e.g. ["typos@3", "augmix@2"]); the recipe is in the set's README.md and recipe.json.

The PrideMM-Aug recipe of Rainbow Noise (10,000 samples: back-translation on captions, AugMix on pictures):
  memerobust augment --data pridemm:/data/PrideMM --split all \\
      --augment back_translation:1 --augment augmix@1-5:1 --copies 2 --no-with-clean --out PrideMM-Aug
with --split all gives 2 x 5,063 = 10,126 rows (every split; the split column tells them apart); without it, the
training split's 2 x 4,328. --copies is at most 1,000; the rows and an estimate of their size are said first.
Back-translation needs MarianMT models (MEMEROBUST_MARIAN_DIR); without them the command stops before writing
anything. It is greedy, so both copies carry the same paraphrase and differ in AugMix.
"""


def add_parser(sub) -> None:
    from ..options import device

    augment = sub.add_parser("augment", help="an augmented training set as a Hugging Face datasets set: each meme "
                             "with N augmented copies, copy k as epoch k of `memerobust train --augment` sees it",
                             description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    augment.add_argument("--data", required=True, help="the memes, a dataset spec as --memerobust-data takes: demo, "
                         "pridemm:PATH[:SPLIT], csv:FILE, ...")
    augment.add_argument("--out", required=True, help="a new or empty folder to write the set into")
    augment.add_argument("--augment", action="append", required=True, metavar="SPEC",
                         help="a registered perturbation as augmentation, as `memerobust train --augment` takes it: "
                              "NAME[@S|@LOW-HIGH][:P], e.g. typos@1-5:0.5 (each copy of a meme edited with "
                              "probability P, default 0.5, at a severity drawn from the range); repeatable, applied "
                              "in the order given")
    augment.add_argument("--copies", type=int, required=True, metavar="N",
                         help="augmented copies of each meme; copy k holds the draws of training epoch k (1..N)")
    augment.add_argument("--split", default="train",
                         help="the split to augment where --data names none and its loader has splits (default "
                              "train: a fine-tuning set is made of training memes; `all`: the loader's default, "
                              "e.g. every split of PrideMM, the demo's test split)")
    augment.add_argument("--seed", type=int, default=0, help="the draws' seed, as `memerobust train --seed` "
                         "(default 0)")
    augment.add_argument("--with-clean", dest="with_clean", action=argparse.BooleanOptionalAction, default=True,
                         help="also write each clean meme as copy 0 (default: yes; a robustness fine-tuning set "
                              "keeps the clean memes, as training with a probability below 1 does, so clean "
                              "accuracy is not traded away; drop them with --no-with-clean)")
    augment.add_argument("--format", choices=("parquet", "imagefolder"), default="parquet",
                         help="parquet (default: one file, pictures as PNG bytes inside) or imagefolder (PNG files "
                              "and a metadata.jsonl; needs pictures)")
    augment.add_argument("--device", type=device, default="cpu",
                         help="where pictures are augmented: cpu (default), auto, cuda, cuda:N or mps; give the "
                              "device training runs on, so the pictures are those it draws")
    augment.add_argument("--quiet", action="store_true", help="no progress on standard error")
    augment.add_argument(OUTSIDE_PATHS, dest="allow_outside_paths", action="store_true",
                         help="read a dataset whose files lie outside its folder")


def run(args) -> int:
    """The augmented set written (track/augmented.py), and one line saying what."""
    from ..track.augmented import augment_dataset, summary_line

    shown = Progress(disabled=args.quiet)
    try:
        info = augment_dataset(args.data, Path(args.out), args.augment, args.copies, seed=args.seed,
                               layout=args.format, with_clean=args.with_clean, device=args.device,
                               allow_outside_paths=args.allow_outside_paths, split=args.split,
                               say=None if args.quiet else lambda line: print(line, file=sys.stderr),
                               progress=lambda done, total: shown.advance("augmenting", 1, total, unit="row"))
    finally:
        shown.close()
    print(summary_line(info, Path(args.out)))
    print(info["training"])
    return 0
