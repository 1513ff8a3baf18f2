"""Minimal evasion budgets, the search: for each meme a predict function gets right, the smallest edit that flips
its decision. The statistics of the budgets (evasion curve, median, bootstrap intervals) are judge/budgets.py's.

A severity sweep says how accuracy falls on average; a budget says how little an evader needs for one meme. Each
edit family is a deterministic function `edit(caption_or_picture, budget, key)` over an ordered list of budget
levels, and its edits are NESTED: the edits at budget b are the first b of one per-meme plan (a key-seeded
permutation of the sites, fixed once per meme), so they are a subset of those at b + 1 and the minimal budget is
found by one scan up the levels. The scan is batched: at each level every meme not yet flipped is edited and the
predict function is called once on that batch. A meme still unflipped at the family's last level is censored
(budget inf).

Families (levels in the family's `unit`):
- `char_edits` (1..10): b typing slips from `perturb/text.py` (`ALL_OPS`: swap, middle shuffle, keyboard slip,
  insertion, deletion), one per word at b distinct words in plan order; past the number of eligible words the plan
  wraps and hits words a second time. A repeat edit is redrawn (a few tries) when it would give back the clean word.
- `lookalikes` (1..10): b letters become a Unicode look-alike (`perturb/evasion.py` `homoglyph_table`).
- `word_substitutions` (1..5): b words (alphabetic, two letters or more) replaced. The package ships no thesaurus
  offline (`synonym_replace` needs nltk's WordNet, the textattack recipes need their downloads), so the substitute
  is a neutral function word from `catalogue.STOP_WORDS` (no negation), in the case of the word it replaces. That
  erases a word's meaning where a synonym would keep it: these budgets are an attacker-friendly stand-in for
  synonym-swap budgets, not the same measure.
- `covered_caption` (1..10, tenths of the words): that share of the caption's words removed
  (max(1, round(share * n)) words; all of them at 10, leaving ""). Captions only: on pictures with a rendered
  caption the text boxes of `data/text_boxes.py` (`Meme.meta["text_boxes"]`) could cover the drawn words instead.
- `image_linf` (1, 2, 4, 8, 16, 32 in 1/255): a fixed per-meme sign pattern times epsilon added to the picture,
  clamped. The signs are counter-based draws of `data/keyed.py` made on the picture's device, so they are the
  same on a CPU and on any GPU, whatever the batch. Float pictures in [0, 1] stay float; uint8 pictures stay uint8
  (the edit is exact there, epsilon being whole steps of 1/255).
"""
from __future__ import annotations

import hashlib
import numbers
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from ..errors import UnknownNameError
from .catalogue import STOP_WORDS, rebuild_words, split_words
from .evasion import homoglyph_table
from .natural import with_case_of
from .text import ALL_OPS, WHITESPACE, perturb_word, split_core, usable_ops

__all__ = [
    "FAMILIES",
    "BudgetResult",
    "Family",
    "UnknownFamily",
    "char_edits",
    "covered_caption",
    "family_names",
    "get_family",
    "image_linf",
    "lookalikes",
    "meme_key",
    "minimal_budgets",
    "word_substitutions",
]

_REPEAT_TRIES = 8  # redraws of a second edit to a word that would give the clean word back


# --- keys ---------------------------------------------------------------------------------------------------


def _seed(*parts) -> int:
    """A 63-bit integer hashed from `parts`: the same on every machine, unlike Python's salted hash()."""
    digest = hashlib.blake2b("\0".join(map(str, parts)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1


def meme_key(key: int, index: int) -> int:
    """The key of the meme at `index` of a run keyed `key`: its edits depend on nothing else."""
    return _seed("meme", key, index)


def _plan(key: int, family_name: str, n_sites: int) -> list:
    """The meme's order of sites, drawn once; budget b edits the first b of it, which makes the edits nested."""
    return np.random.default_rng(_seed(key, family_name, "plan")).permutation(n_sites).tolist()


def _edit_rng(key: int, family_name: str, j: int) -> np.random.Generator:
    """The draws of the j-th edit alone, so they do not depend on how many edits follow."""
    return np.random.default_rng(_seed(key, family_name, "edit", j))


def _check_budget(budget) -> int:
    if not isinstance(budget, numbers.Integral) or isinstance(budget, bool) or budget < 0:
        raise ValueError(f"budget must be a whole number >= 0, got {budget!r}")
    return int(budget)


def _check_text(caption) -> str:
    if not isinstance(caption, str):
        raise ValueError(f"caption must be a str, got {type(caption).__name__}")
    return caption


# --- families -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Family:
    """One edit family: what the scan calls at each level, and what a level means (`unit`)."""

    name: str
    levels: tuple
    modality: str  # "text" edits the caption, "image" the picture
    edit: Callable[[Any, int, Any], Any]
    unit: str


FAMILIES: dict[str, Family] = {}


class UnknownFamily(UnknownNameError, ValueError):
    """No edit family has this name; the message lists those that exist."""


def _family(name: str, levels: Sequence[int], modality: str, unit: str):
    def record(edit):
        FAMILIES[name] = Family(name, tuple(levels), modality, edit, unit)
        return edit

    return record


def get_family(name: str | Family) -> Family:
    """The family called `name` (a Family passes through)."""
    if isinstance(name, Family):
        return name
    try:
        return FAMILIES[name]
    except (KeyError, TypeError):
        raise UnknownFamily("edit family", name, FAMILIES) from None


def family_names(modality: str | None = None) -> list[str]:
    return sorted(n for n, f in FAMILIES.items() if modality in (None, f.modality))


@_family("char_edits", levels=range(1, 11), modality="text", unit="character edits")
def char_edits(caption: str, budget: int, key: int) -> str:
    """`budget` typing slips, one per eligible word in plan order, wrapping to second slips past the last word."""
    tokens = WHITESPACE.split(_check_text(caption))  # words at even indices, separators at odd ones
    budget = _check_budget(budget)
    sites = [k for k in range(0, len(tokens), 2) if usable_ops(split_core(tokens[k])[1], ALL_OPS)]
    if not sites:
        return caption
    parts = {k: list(split_core(tokens[k])) for k in sites}
    clean = {k: parts[k][1] for k in sites}
    order = _plan(key, "char_edits", len(sites))
    for j in range(budget):
        k = sites[order[j % len(sites)]]
        parts[k][1] = _slip(parts[k][1], clean[k], _edit_rng(key, "char_edits", j))
    for k in sites:
        tokens[k] = "".join(parts[k])
    return "".join(tokens)


def _slip(core: str, clean: str, rng: np.random.Generator) -> str:
    """One slip that changes `core` and does not give back `clean` (a swap undone by a second swap); when a few
    draws all would, the word is left as it is, so the edits stay nested."""
    for _ in range(_REPEAT_TRIES):
        ops = usable_ops(core, ALL_OPS)
        if not ops:
            break
        new = perturb_word(core, ops, rng)
        if new != clean:
            return new
    return core


@_family("lookalikes", levels=range(1, 11), modality="text", unit="look-alike letters")
def lookalikes(caption: str, budget: int, key: int) -> str:
    """`budget` letters, in plan order, replaced by a look-alike from another script; fewer when fewer have one."""
    chars = list(_check_text(caption))
    budget = _check_budget(budget)
    table = homoglyph_table()
    sites = [i for i, ch in enumerate(chars) if ch in table]
    for j, s in enumerate(_plan(key, "lookalikes", len(sites))[:budget]):
        options = table[chars[sites[s]]]
        chars[sites[s]] = options[int(_edit_rng(key, "lookalikes", j).integers(len(options)))]
    return "".join(chars)


@_family("word_substitutions", levels=range(1, 6), modality="text", unit="words")
def word_substitutions(caption: str, budget: int, key: int) -> str:
    """`budget` words, in plan order, replaced by a neutral function word (the offline fallback for a synonym)."""
    tokens = WHITESPACE.split(_check_text(caption))
    budget = _check_budget(budget)
    sites = [k for k in range(0, len(tokens), 2) if _substitutable(split_core(tokens[k])[1])]
    for j, s in enumerate(_plan(key, "word_substitutions", len(sites))[:budget]):
        lead, core, trail = split_core(tokens[sites[s]])
        fillers = [w for w in STOP_WORDS if w != core.casefold()]
        new = fillers[int(_edit_rng(key, "word_substitutions", j).integers(len(fillers)))]
        tokens[sites[s]] = lead + with_case_of(core, new) + trail
    return "".join(tokens)


def _substitutable(core: str) -> bool:
    return len(core) >= 2 and core.isalpha()


@_family("covered_caption", levels=range(1, 11), modality="text", unit="tenths of the words")
def covered_caption(caption: str, budget: int, key: int) -> str:
    """Remove `budget` tenths of the words, in plan order; the whole caption at 10."""
    budget = _check_budget(budget)
    if budget == 0 or not _check_text(caption).strip():
        return caption
    lead, pairs = split_words(caption)
    k = min(len(pairs), max(1, round(budget / 10 * len(pairs))))
    if k == len(pairs):
        return ""
    return rebuild_words(lead, pairs, drop=set(_plan(key, "covered_caption", len(pairs))[:k]))


@_family("image_linf", levels=(1, 2, 4, 8, 16, 32), modality="image", unit="/255 (L-infinity)")
def image_linf(picture, budget: int, key):
    """Add budget/255 times a fixed per-picture +-1 pattern and clamp. `picture` is [3, H, W] or [N, 3, H, W],
    float in [0, 1] or uint8; `key` is one int (one pattern for all) or one int per picture."""
    import torch

    from ..data.keyed import field_keys, random_bits

    budget = _check_budget(budget)
    if not isinstance(picture, torch.Tensor) or picture.dim() not in (3, 4) or picture.shape[-3] != 3:
        shape = getattr(picture, "shape", type(picture).__name__)
        raise ValueError(f"picture must be a [3, H, W] or [N, 3, H, W] tensor, got {shape}")
    x = picture if picture.dim() == 4 else picture[None]
    keys = [key] * len(x) if isinstance(key, numbers.Integral) else list(key)
    if len(keys) != len(x):
        raise ValueError(f"image_linf got {len(keys)} keys for {len(x)} pictures")
    round_keys = torch.tensor([field_keys(int(k), "image_linf") for k in keys], dtype=torch.int32, device=x.device)
    sign = ((random_bits(round_keys, x[0].numel()) & 1) * 2 - 1).reshape(x.shape)
    if x.dtype == torch.uint8:
        out = (x.to(torch.int16) + sign.to(torch.int16) * budget).clamp(0, 255).to(torch.uint8)
    elif x.is_floating_point():
        out = (x + sign.to(x.dtype) * (budget / 255)).clamp(0.0, 1.0)
    else:
        raise ValueError(f"picture must be float in [0, 1] or uint8, got {x.dtype}")
    return out if picture.dim() == 4 else out[0]


# --- the search ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BudgetResult:
    """Minimal budgets of one family over the memes the detector got right when clean."""

    family: str
    levels: tuple
    budgets: np.ndarray  # one per searched meme, inf where not flipped by the last level
    searched: np.ndarray  # indices (into the inputs) of the memes searched
    n_misclassified_clean: int
    evasions: tuple  # the edited caption at the flipping budget; None when censored or for image families
    unit: str = ""


def minimal_budgets(predict: Callable, captions: Sequence[str], pictures, labels, family: str | Family, *,
                    key: int = 0, threshold: float = 0.5) -> BudgetResult:
    """Scan the family's levels; at each one, edit the memes not yet flipped and call `predict` once on them.

    `predict(captions, pictures) -> P(harmful) [N]`; `pictures` is None (caption-only), a tensor [N, 3, H, W] or a
    list of [3, H, W] tensors, passed on (subset, and edited for image families) as it came. A flip is any change
    of the decision `P >= threshold`, in either direction; memes misclassified when clean are left out and counted.
    """
    fam = get_family(family)
    captions = [_check_text(c) for c in captions]
    n = len(captions)
    labels = np.asarray(labels)
    if labels.shape != (n,) or not np.isin(labels, (0, 1)).all():
        raise ValueError(f"labels must be {n} values in {{0, 1}} (one per caption), got shape {labels.shape}")
    if pictures is not None and len(pictures) != n:
        raise ValueError(f"got {len(pictures)} pictures for {n} captions")
    if fam.modality == "image" and pictures is None:
        raise ValueError(f"family {fam.name!r} edits pictures, but pictures is None")

    clean = _decisions(predict(captions, pictures), n, threshold)
    searched = np.flatnonzero(clean == labels.astype(bool))
    keys = [meme_key(key, int(i)) for i in searched]
    budgets = np.full(len(searched), np.inf)
    evasions: list = [None] * len(searched)
    active = np.arange(len(searched))
    for level in fam.levels:
        if active.size == 0:
            break
        idx = searched[active].tolist()
        subset = _take(pictures, idx)
        if fam.modality == "text":
            texts = [fam.edit(captions[i], level, keys[a]) for a, i in zip(active.tolist(), idx)]
        else:
            texts = [captions[i] for i in idx]
            subset = _edit_pictures(fam, subset, level, [keys[a] for a in active.tolist()])
        flipped = _decisions(predict(texts, subset), len(idx), threshold) != clean[idx]
        for a, text in zip(active[flipped].tolist(), np.asarray(texts, dtype=object)[flipped]):
            budgets[a] = level
            evasions[a] = text if fam.modality == "text" else None
        active = active[~flipped]
    return BudgetResult(fam.name, fam.levels, budgets, searched, int(n - len(searched)), tuple(evasions), fam.unit)


def _decisions(proba, n: int, threshold: float) -> np.ndarray:
    proba = np.asarray(proba, dtype=float)
    if proba.shape != (n,):
        raise ValueError(f"predict must return P(harmful) of shape ({n},), got {proba.shape}")
    return proba >= threshold


def _take(pictures, idx: list):
    if pictures is None:
        return None
    if isinstance(pictures, (list, tuple)):
        return [pictures[i] for i in idx]
    return pictures[idx]


def _edit_pictures(fam: Family, pictures, level: int, keys: list):
    if isinstance(pictures, list):
        return [fam.edit(p, level, k) for p, k in zip(pictures, keys)]
    return fam.edit(pictures, level, keys)
