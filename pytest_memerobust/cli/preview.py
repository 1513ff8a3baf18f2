"""`memerobust preview`: a PNG gallery of one meme under every image perturbation and severity."""
from __future__ import annotations

from pathlib import Path

from ..errors import MemeRobustError
from .common import OCR_OPTION, OUTSIDE_PATHS, ocr_reader


def add_parser(sub) -> None:
    from ..data.ocr import OCR_BACKENDS

    preview = sub.add_parser("preview", help="a PNG gallery of one meme under every image perturbation and severity")
    preview.add_argument("--data", default="demo", help="dataset spec to take the meme from (default: demo)")
    preview.add_argument("--index", type=int, default=0, help="which meme of the dataset (default 0)")
    preview.add_argument("--image", help="or a picture file")
    preview.add_argument("--caption", default="", help="the caption the caption-drawing edits draw (default: the "
                         "meme's own; with --image, none, and those edits are left out)")
    preview.add_argument("--render", type=int, metavar="SIZE", help="draw the meme's caption as meme text (white "
                         "capitals, black outline, top and bottom) on a SIZE px picture and preview that: for "
                         "caption-only data, or to see the typographic edits at real size")
    preview.add_argument("--ocr", choices=OCR_BACKENDS, help="find where the picture shows its text with this OCR "
                         "backend, when the dataset does not say (the typographic edits act there), and read the "
                         "caption off the picture when the dataset has none")
    preview.add_argument(OUTSIDE_PATHS, dest="allow_outside_paths", action="store_true",
                         help="read a dataset whose files lie outside its folder")
    preview.add_argument("--perturbations", nargs="+", help="names (default: every model-free image perturbation)")
    preview.add_argument("--seed", type=int, default=0)
    preview.add_argument("--tile", type=int, default=128, help="tile side in pixels")
    preview.add_argument("--out", default="gallery.png")


def run(args) -> int:
    from ..data import load_rgb
    from ..data.reading import read_memes
    from ..data.render import draw_meme
    from ..data.text_boxes import TEXT_BOXES
    from ..perturb import get, names
    from ..report.gallery import gallery, save_gallery

    boxes = None
    if args.image:
        image, meme_id, caption = load_rgb(Path(args.image)), Path(args.image).name, args.caption
    else:
        dataset = read_memes(args.data, ocr=ocr_reader(args), require_images=not args.render,
                             allow_outside_paths=args.allow_outside_paths, ocr_option=OCR_OPTION)
        if not 0 <= args.index < len(dataset):
            raise MemeRobustError(f"--index {args.index} is outside {args.data!r} ({len(dataset)} memes)")
        meme = dataset.memes[args.index]
        meme_id, caption = meme.id, args.caption or meme.text
        if args.render:  # the caption drawn as meme text on a picture of that size; the boxes are where it went
            image, boxes = draw_meme(meme.text, args.render, seed=args.index)
        else:
            image, boxes = meme.image, meme.meta.get(TEXT_BOXES)
    if boxes is None and args.ocr:
        boxes = ocr_reader(args).read_boxes(image)
    chosen = args.perturbations or [n for n in names("image")
                                    if not get(n).needs_model and (caption or not get(n).traits.caption_source)]
    for name in chosen:
        if get(name).modality != "image":
            raise MemeRobustError(f"{name!r} is not an image perturbation")
    save_gallery(gallery(image, meme_id, chosen, seed=args.seed, tile=args.tile, caption=caption, text_boxes=boxes),
                 Path(args.out))
    where = ("its text boxes unknown: the typographic edits use the bottom band (--ocr rapidocr finds them)"
             if boxes is None else f"{len(boxes)} text boxes")
    print(f"wrote {args.out}: {len(chosen)} perturbations x their severities of {meme_id} ({where})")
    return 0
