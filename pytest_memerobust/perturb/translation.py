"""Back-translation (Rainbow Noise's text noise 4): English -> pivot language -> English with MarianMT models.

The models are never downloaded here: they are read from the folder in $MEMEROBUST_MARIAN_DIR (one subfolder per
direction, named like the hub models, e.g. `opus-mt-en-de` and `opus-mt-de-en`) or from the local Hugging Face
cache. Without them the perturbation raises BackendMissing, which suites turn into a skip saying what to do.
Translations are cached in memory and on disk (beside the models, in `translations-<pivot>.json`), since
translating is the slow part and the output is deterministic (greedy decoding).
"""
from __future__ import annotations

import json
import os
from functools import lru_cache
from pathlib import Path

import numpy as np

from ..atomic import atomic_write_text
from ..errors import BackendMissing
from .registry import register
from .text import _check_caption

PIVOTS = ("de", "fr", "ru")
_HOW = ("back-translation needs MarianMT models {names}: save them (e.g. with transformers' save_pretrained on a "
        "machine that can download Helsinki-NLP/{first}) into a folder and set MEMEROBUST_MARIAN_DIR to it")


def _model_source(name: str) -> str:
    folder = os.environ.get("MEMEROBUST_MARIAN_DIR")
    if folder and (Path(folder) / name).is_dir():
        return str(Path(folder) / name)
    return f"Helsinki-NLP/{name}"


@lru_cache(maxsize=4)
def _translator(name: str):
    from ..data.hub import in_hf_cache

    source = _model_source(name)
    if not Path(source).is_dir() and not in_hf_cache(source, ("config.json",)):
        # not here: said without asking transformers, whose loaders look the hub up even with local_files_only
        raise BackendMissing(_HOW.format(names=name, first=name) + " (not in MEMEROBUST_MARIAN_DIR or the cache)")
    try:
        from transformers import AutoTokenizer, MarianMTModel

        from ..data.hub import hub_offline

        with hub_offline():
            tokenizer = AutoTokenizer.from_pretrained(source, local_files_only=True)
            model = MarianMTModel.from_pretrained(source, local_files_only=True).eval()
    except (OSError, ValueError, ImportError) as exc:
        raise BackendMissing(_HOW.format(names=name, first=name) + f" ({type(exc).__name__})") from None
    return tokenizer, model


def translate(texts: list[str], name: str) -> list[str]:
    import torch

    tokenizer, model = _translator(name)
    batch = tokenizer(texts, return_tensors="pt", padding=True, truncation=True, max_length=256)
    with torch.no_grad():
        out = model.generate(**batch, num_beams=1, do_sample=False, max_new_tokens=256)
    return tokenizer.batch_decode(out, skip_special_tokens=True)


class _Cache:
    """caption -> back-translation for one pivot, kept in memory and in a JSON file when a model folder is set."""

    def __init__(self, pivot: str):
        self.pivot, self.data = pivot, {}
        folder = os.environ.get("MEMEROBUST_MARIAN_DIR")
        self.path = Path(folder) / f"translations-{pivot}.json" if folder else None
        if self.path is not None and self.path.is_file():
            try:
                data = json.loads(self.path.read_text(encoding="utf-8"))
            except (ValueError, OSError):
                data = None
            # Only a {caption: translation} object is trusted; anything else is rebuilt.
            if isinstance(data, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in data.items()):
                self.data = data

    def get(self, text: str) -> str:
        if text not in self.data:
            pivot = translate([text], f"opus-mt-en-{self.pivot}")
            self.data[text] = translate(pivot, f"opus-mt-{self.pivot}-en")[0]
            if self.path is not None:
                atomic_write_text(self.path, json.dumps(self.data, ensure_ascii=False))
        return self.data[text]


@lru_cache(maxsize=len(PIVOTS))
def _cache(pivot: str) -> _Cache:
    return _Cache(pivot)


def _register(pivot: str):
    def back_translate(text: str, severity, rng: np.random.Generator) -> str:
        return _cache(pivot).get(_check_caption(text))

    back_translate.__doc__ = (f"Paraphrase by translating to {pivot!r} and back with MarianMT: meaning kept, "
                              "wording changed.")
    name = "back_translation" if pivot == PIVOTS[0] else f"back_translation_{pivot}"
    register(name, modality="text", family="back_translation", severities=(), tags=("needs_backend", "sentence"))(
        back_translate)


for _pivot in PIVOTS:
    _register(_pivot)
