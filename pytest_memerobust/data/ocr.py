"""Reading a meme's caption off its picture, for datasets that give none (8.5% of FigMemes has no text) and for runs
that evaluate image perturbations end to end (picture -> OCR -> caption -> detector), as a deployed moderation
pipeline that OCRs uploads would see them.

The backend is `rapidocr-onnxruntime` (`pip install "pytest-memerobust[ocr]"`): it ships its ONNX detection and
recognition models inside the wheel, so it runs offline. Results are cached by picture content, in memory and as
small JSON files under the cache directory, written atomically.
"""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Protocol, Sequence

import numpy as np

from ..atomic import atomic_write_text
from ..errors import BackendMissing
from ..features import input_digest
from .meme import Dataset

OCR_BACKENDS = ("rapidocr",)
MIN_SIDE = 384  # smaller pictures are upscaled first: the detector misses text only a few pixels high


class OcrBackend(Protocol):
    name: str

    def read(self, image: np.ndarray) -> str: ...


class RapidOcr:
    """rapidocr-onnxruntime: text boxes in reading order, joined by single spaces."""

    name = "rapidocr"

    def __init__(self, cache_dir: Path | None = None):
        try:
            from rapidocr_onnxruntime import RapidOCR
        except ImportError:
            raise BackendMissing("OCR needs rapidocr-onnxruntime: pip install \"pytest-memerobust[ocr]\"") from None
        self._engine = RapidOCR()
        self.cache_dir = Path(cache_dir) / "ocr" if cache_dir is not None else None
        self._memory: dict[str, str] = {}

    def read(self, image) -> str:
        """The text on a picture (a tensor 3 x H x W or an array H x W x 3), cached by its content."""
        key = input_digest(image)
        if key not in self._memory:
            path = self.cache_dir / key[:2] / f"{key}.json" if self.cache_dir is not None else None
            text = _read_entry(path, self.name)
            if text is None:
                if not isinstance(image, np.ndarray):  # the OCR engine reads arrays: an edge
                    from ..pictures import to_array

                    image = to_array(image)
                boxes, _ = self._engine(_upscaled(np.asarray(image, dtype=np.uint8)))
                text = _join(boxes or [])
                if path is not None:
                    try:
                        atomic_write_text(path, json.dumps({"backend": self.name, "text": text}))
                    except OSError:  # a read-only cache costs time, not the run
                        pass
            self._memory[key] = text
        return self._memory[key]


def _read_entry(path: Path | None, backend: str) -> str | None:
    """A cached reading, or None when absent or damaged (then the picture is read again)."""
    if path is None or not path.is_file():
        return None
    try:
        entry = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    ok = isinstance(entry, dict) and entry.get("backend") == backend and isinstance(entry.get("text"), str)
    return entry["text"] if ok else None


def _join(boxes: Sequence) -> str:
    """Text boxes [(corners, text, score)] in reading order: by line (top edge, in steps of half a box height),
    then left to right."""
    def order(box):
        corners = np.asarray(box[0], dtype=float)
        height = max(1.0, corners[:, 1].max() - corners[:, 1].min())
        return (round(corners[:, 1].min() / (height / 2)), corners[:, 0].min())

    return " ".join(str(box[1]).strip() for box in sorted(boxes, key=order) if str(box[1]).strip())


def _upscaled(image: np.ndarray) -> np.ndarray:
    h, w = image.shape[:2]
    scale = MIN_SIDE / min(h, w)
    if scale <= 1:
        return image
    from PIL import Image

    return np.asarray(Image.fromarray(image).resize((round(w * scale), round(h * scale)), Image.BICUBIC))


def ocr_backend(name: str, cache_dir: Path | None = None) -> OcrBackend:
    if name != "rapidocr":
        raise ValueError(f"unknown OCR backend {name!r}; known: {', '.join(OCR_BACKENDS)}")
    return RapidOcr(cache_dir)


def fill_missing_captions(dataset: Dataset, ocr: OcrBackend) -> Dataset:
    """The dataset with every empty caption read off its picture; those memes get meta["caption_source"] = "ocr"."""
    memes = []
    for meme in dataset.memes:
        if meme.text.strip():
            memes.append(meme)
        else:
            memes.append(replace(meme, text=ocr.read(meme.image), meta={**meme.meta, "caption_source": ocr.name}))
    return replace(dataset, memes=memes)
