"""Memes read the one way the whole tool reads them: the run, the fits of universal attacks, `memerobust train`,
`budgets` and `preview` alike.

Why: a caption a meme lacks is read off its picture by OCR. A part of the tool that loaded memes its own way (the
fits of universal triggers did) failed on exactly the memes the run had read, or saw other captions than the run.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Sequence

from ..errors import ConfigError, DataError
from .loaders import load_dataset
from .meme import Dataset

CAPTIONS_BY_OCR = "#ocr-captions"  # appended to a data spec whose captions are read off the (perturbed) pictures
OCR_OPTION = "--memerobust-ocr=rapidocr"  # how the plugin asks for OCR; the command line passes its own


def read_memes(spec: str, *, ocr=None, require_images: bool = True, allow_outside_paths: bool = False,
               limit: int | None = None, outside: Sequence[str] = (), ocr_option: str = OCR_OPTION) -> Dataset:
    """The memes of `spec` (less those whose id is in `outside`; the first `limit`), every missing caption read
    off its picture by `ocr` (an OcrBackend; data/ocr.py): `load_memes`, then `read_missing_captions`, whose
    refusal of a missing caption names `ocr_option`."""
    dataset = load_memes(spec, require_captions=False, require_images=require_images,
                         allow_outside_paths=allow_outside_paths, limit=limit, outside=outside)
    return read_missing_captions(dataset, spec, ocr, ocr_option)


def load_memes(spec: str, *, require_captions: bool, require_images: bool = True, allow_outside_paths: bool = False,
               limit: int | None = None, outside: Sequence[str] = ()) -> Dataset:
    """The memes of `spec` less `outside` (ids), the first `limit`, as the files hold them: no picture read, so
    what needs none (the task, the classes) is checked before OCR's long work."""
    dataset = load_dataset(spec, require_images=require_images, allow_outside_paths=allow_outside_paths,
                           require_captions=require_captions)
    if outside:
        skip = set(outside)
        dataset = replace(dataset, memes=[m for m in dataset.memes if m.id not in skip])
    return dataset.head(limit)


def read_missing_captions(dataset: Dataset, spec: str, ocr=None, ocr_option: str = OCR_OPTION) -> Dataset:
    """`dataset` with every missing caption read off its picture by `ocr`. Without `ocr`, a missing caption is a
    ConfigError that names `ocr_option`; a meme with neither caption nor picture is a DataError."""
    missing = [m.id for m in dataset.memes if not m.text.strip()]
    if not missing:
        return dataset
    if ocr is None:
        raise ConfigError(f"{len(missing)} memes of {spec!r} have no caption (e.g. {', '.join(missing[:3])}): read "
                          f"them off the pictures with {ocr_option} (pip install \"pytest-memerobust[ocr]\")")
    unreadable = [m.id for m in dataset.memes if not m.text.strip() and not m.has_picture]
    if unreadable:
        raise DataError(f"{len(unreadable)} memes of {spec!r} have neither a caption nor a picture to read it from "
                        f"(e.g. {', '.join(unreadable[:3])})")
    from .ocr import fill_missing_captions

    return fill_missing_captions(dataset, ocr)
