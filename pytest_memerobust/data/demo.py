"""Demo memes the project draws itself, so the main job runs on a fresh machine with no download.

Labels are known by construction: a hostile caption is hateful, a supportive one benign, and a neutral caption
takes its label from the picture's symbol (a cross is hateful, a heart benign). The symbol also agrees with the
caption's label three times in four, so the picture carries signal without deciding alone, and a detector needs
both channels, leaning on the text, as the Rainbow Noise detectors do. A few labels are flipped as annotation noise.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np

from .meme import Dataset, Meme
from .text_boxes import TEXT_BOXES

CLASSES = ("non-hateful", "hateful")
SPLITS = {"train": 480, "val": 160, "test": 160}
IMAGE_SIZE = 96

_GROUPS = ["gay men", "trans women", "lesbians", "bisexual people", "queer kids", "drag queens", "trans men",
           "nonbinary folks", "the lgbtq community", "pride marchers"]
_HOSTILE = ["{g} are disgusting freaks", "nobody wants {g} near our children", "{g} should go back in the closet",
            "keep {g} away from normal people", "{g} are a sick mental illness", "ban {g} from every school",
            "{g} ruin everything they touch", "i am tired of {g} shoving it in our faces"]
_SUPPORTIVE = ["{g} deserve love and respect", "proud to stand with {g}", "{g} are valid and welcome here",
               "happy pride to all {g}", "protect {g} and their rights", "{g} make this world brighter",
               "love is love and {g} belong", "sending hugs to {g} today"]
_NEUTRAL = ["when the {t} finally arrives", "me explaining {t} to my grandma", "nobody: absolutely nobody: {t}",
            "that moment when {t} happens", "my face when someone mentions {t}", "how it started {t} how it is going"]
_THINGS = ["monday morning", "the group chat", "tax season", "the wifi password", "leftover pizza", "the bus",
           "my cat", "final exams", "a new haircut", "the weekend"]
_BACKGROUNDS = [(66, 135, 245), (245, 197, 66), (120, 200, 120), (200, 120, 200), (90, 90, 90), (240, 240, 240)]
LABEL_NOISE = 0.04
SYMBOL_AGREEMENT = 0.75


def _draw(caption: str, symbol: str, background, place, size: int = IMAGE_SIZE):
    """One demo picture, `size` pixels square, and the boxes of its caption's lines: the same layout at any size (the
    symbol at `place`, its centre and radius at 96 px, the caption band and its font scale with it), so benchmarks
    can run on memes of real size (512 px) with the same random draws."""
    from PIL import Image, ImageDraw, ImageFont

    from .render import draw_caption_band

    img = Image.new("RGB", (size, size), tuple(int(c) for c in background))
    draw = ImageDraw.Draw(img)
    scale = size / IMAGE_SIZE
    cx, cy, r = (round(v * scale) for v in place)
    if symbol == "cross":
        w = max(3, r // 3)
        draw.line([(cx - r, cy - r), (cx + r, cy + r)], fill=(170, 20, 20), width=w)
        draw.line([(cx - r, cy + r), (cx + r, cy - r)], fill=(170, 20, 20), width=w)
    else:
        draw.ellipse([cx - r, cy - r // 2, cx, cy + r // 2], fill=(255, 105, 180))
        draw.ellipse([cx, cy - r // 2, cx + r, cy + r // 2], fill=(255, 105, 180))
        draw.polygon([(cx - r, cy), (cx + r, cy), (cx, cy + r)], fill=(255, 105, 180))
    # The caption goes in a white band at the bottom, as meme text does; wrapped to the picture's width.
    if size == IMAGE_SIZE:  # the shipped demo pictures, byte for byte
        boxes = draw_caption_band(draw, caption, (size, size), band=22, line_height=10)
    else:
        font = ImageFont.load_default(size=max(6, round(10 * scale)))
        boxes = draw_caption_band(draw, caption, (size, size), band=round(22 * scale), line_height=round(10 * scale),
                                  font=font, margin=max(2, round(2 * scale)))
    return np.asarray(img, dtype=np.uint8), boxes


def _caption(kind: str, rng: np.random.Generator) -> str:
    templates = {"hostile": _HOSTILE, "supportive": _SUPPORTIVE, "neutral": _NEUTRAL}[kind]
    template = templates[rng.integers(len(templates))]
    return template.format(g=_GROUPS[rng.integers(len(_GROUPS))], t=_THINGS[rng.integers(len(_THINGS))])


@lru_cache(maxsize=4)
def _plan(seed: int) -> tuple[dict, ...]:
    """Every demo meme's draws (split, kind, symbol, caption, background, the symbol's place, label), in the one
    random stream of `seed`, without drawing a picture: drawing is most of the cost (1.75 s for all 800 memes), and a
    run that reads one split draws only that split's pictures, the same bytes as when all are drawn."""
    rng = np.random.default_rng(seed)
    plan = []
    for split, count in SPLITS.items():
        for _ in range(count):
            kind = ("hostile", "supportive", "neutral")[rng.choice(3, p=[0.35, 0.35, 0.3])]
            if kind == "neutral":
                symbol = ("heart", "cross")[rng.integers(2)]
                label = int(symbol == "cross")
            else:
                label = int(kind == "hostile")
                agrees = rng.random() < SYMBOL_AGREEMENT
                symbol = ("heart", "cross")[label if agrees else 1 - label]
            caption = _caption(kind, rng)
            background = _BACKGROUNDS[rng.integers(len(_BACKGROUNDS))]
            place = tuple(int(v) for v in rng.integers([28, 30, 14], [68, 56, 22]))
            if rng.random() < LABEL_NOISE:
                label = 1 - label
            plan.append({"id": f"demo-{len(plan):04d}", "split": split, "kind": kind, "symbol": symbol,
                         "caption": caption, "background": background, "place": place, "label": label})
    return tuple(plan)


@lru_cache(maxsize=16)
def _memes(seed: int, size: int, split: str | None) -> tuple[Meme, ...]:
    """The demo memes of `split` (every split when None), drawn `size` pixels square; cached, as the session asks
    more than once."""
    memes = []
    for meme in _plan(seed):
        if split is not None and meme["split"] != split:
            continue
        image, boxes = _draw(meme["caption"], meme["symbol"], meme["background"], meme["place"], size)
        memes.append(Meme(id=meme["id"], text=meme["caption"], labels={"hate": meme["label"]}, image_array=image,
                          meta={"split": meme["split"], "kind": meme["kind"], "symbol": meme["symbol"],
                                TEXT_BOXES: boxes}))
    return tuple(memes)


def generate(seed: int = 0, size: int = IMAGE_SIZE) -> tuple[Meme, ...]:
    """All demo memes (every split), deterministic in `seed`, drawn `size` pixels square."""
    return _memes(seed, size, None)


def demo_dataset(split: str | None = "test", seed: int = 0, size: int = IMAGE_SIZE) -> Dataset:
    """The demo memes of one split (all splits when None), drawn `size` pixels square (the same memes at any size:
    benchmarks draw them at 512 px)."""
    if split is not None and split not in SPLITS:
        from ..errors import DataError

        raise DataError(f"demo data has no split {split!r}; splits: {', '.join(SPLITS)}")
    memes = list(_memes(seed, size, split))
    name = ("demo" if split is None else f"demo:{split}") + ("" if size == IMAGE_SIZE else f"@{size}px")
    return Dataset(name=name, memes=memes, classes={"hate": list(CLASSES)}, source="generated")


def load_demo(path, split: str | None = None, **_) -> Dataset:
    """`demo[:SPLIT]` as a dataset spec: the loader syntax has no path here, so the word after ':' is the split."""
    if split is None and str(path) not in ("", "."):
        split = str(path)
    return demo_dataset(split or "test")
