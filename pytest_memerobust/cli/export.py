"""`memerobust export`: the perturbed memes of a saved report's run as a Hugging Face datasets set (parquet, or an
imagefolder), checked against the report (track/export.py)."""
from __future__ import annotations

from pathlib import Path

from .common import CACHE_DIR, OUTSIDE_PATHS


def add_parser(sub) -> None:
    from ..options import device

    export = sub.add_parser("export", help="the perturbed memes of a saved report's run as a Hugging Face datasets "
                            "set (parquet, or an imagefolder): pictures and captions as the detector read them, with "
                            "its clean and perturbed probabilities, checked against the report")
    export.add_argument("json", help="the run's JSON report (--memerobust-report=FILE.json)")
    export.add_argument("--out", required=True, help="a new or empty folder to write the set into")
    export.add_argument("--conditions", nargs="+", metavar="ID", help="condition ids of the report, e.g. "
                        "text=typos@3 image=jpeg_compression@3 (default: every condition that perturbs the memes)")
    export.add_argument("--model", action="append", help="only this model's results (its label in the report); "
                        "repeatable")
    export.add_argument("--counterexamples", action="store_true",
                        help="only the memes that flipped: right clean, wrong under the condition")
    export.add_argument("--format", choices=("parquet", "imagefolder"), default="parquet",
                        help="parquet (default: one file, pictures as PNG bytes inside) or imagefolder (PNG files "
                             "and a metadata.jsonl)")
    export.add_argument("--device", type=device, help="where the detector runs (default: the run's); the predictions "
                        "must match the report's, so a GPU run is exported on a GPU")
    export.add_argument("--checkpoint", action="append", metavar="[MODEL=]PATH",
                        help="the run's checkpoint where it has moved (its sha256 is checked); repeatable")
    export.add_argument("--cache-dir", dest="cache_dir", default=CACHE_DIR,
                        help="the runs' cache: encoded features, fitted attacks and a hosted model's answers are "
                             "read from it rather than computed or asked again (default: the plugin's, "
                             ".pytest_cache/d/memerobust)")
    export.add_argument("--no-cache", dest="no_cache", action="store_true",
                        help="compute everything again, in memory only")
    export.add_argument(OUTSIDE_PATHS, dest="allow_outside_paths", action="store_true",
                        help="read a dataset whose files lie outside its folder")


def run(args) -> int:
    """The perturbed memes of a saved report's run as a `datasets` set (run/export.py)."""
    from ..options import checkpoints
    from ..run.export import export_report
    from ..track.export import summary_line

    info = export_report(Path(args.json), Path(args.out), conditions=args.conditions, models=args.model,
                         counterexamples=args.counterexamples, layout=args.format, device=args.device,
                         checkpoints=checkpoints(args.checkpoint or []),
                         cache_dir=None if args.no_cache else Path(args.cache_dir),
                         allow_outside_paths=args.allow_outside_paths)
    print(summary_line(info, Path(args.out)))
    print(f"every condition's predictions, and the clean ones, match {args.json}'s digests")
    return 0
