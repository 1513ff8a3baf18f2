"""Caption perturbations: synthetic typing noise after Belinkov & Bisk (2018), "Synthetic and natural noise
both break neural machine translation".

`typos` hits a share of the caption's words (the severity), each with one operation drawn from: swap of two
adjacent inner letters, shuffle of the inner letters, QWERTY-neighbour substitution, insertion of a
QWERTY-neighbour letter, deletion of an inner letter. Each operation is also registered on its own
(`char_swap`, `char_shuffle_middle`, `char_keyboard`, `char_insert`, `char_delete`). All of them share one
helper, `_noise`, that takes the list of allowed operations.

Words are the runs of non-whitespace; the whitespace between them is kept exactly. Leading and trailing
punctuation of a word ("hello," "(lol)") is left alone: the operations act on its core. A word is eligible when
its core has at least two characters, at least one of them a letter, and at least one allowed operation can
change it; a hit word always changes, so the output differs from the input exactly when an eligible word exists.
"""
from __future__ import annotations

import re
from typing import Callable, NamedTuple, Sequence

import numpy as np

from .natural import shipped_misspellings, with_case_of
from .registry import register

# QWERTY adjacency (same row left/right, plus the overlapping keys of the rows above and below on a
# staggered keyboard). Symmetric: b is a neighbour of a exactly when a is a neighbour of b.
QWERTY_NEIGHBOURS: dict[str, str] = {
    "q": "wa", "w": "qeas", "e": "wrsd", "r": "etdf", "t": "ryfg",
    "y": "tugh", "u": "yihj", "i": "uojk", "o": "ipkl", "p": "ol",
    "a": "qwsz", "s": "weadzx", "d": "ersfxc", "f": "rtdgcv", "g": "tyfhvb",
    "h": "yugjbn", "j": "uihknm", "k": "iojlm", "l": "opk",
    "z": "asx", "x": "sdzc", "c": "dfxv", "v": "fgcb", "b": "ghvn",
    "n": "hjbm", "m": "jkn",
}

WHITESPACE = re.compile(r"(\s+)")
_EDGE_PUNCT = re.compile(r"^(\W*)(.*?)(\W*)$", re.DOTALL)


def _check_caption(text) -> str:
    """Reject what is not a caption: a non-str, or a caption that is empty or only whitespace."""
    if not isinstance(text, str):
        raise ValueError(f"caption must be a str, got {type(text).__name__}")
    if not text.strip():
        raise ValueError("caption is empty (or only whitespace): nothing to perturb")
    return text


# --- the five operations ------------------------------------------------------------------------------------
# Each operation is `sites(core) -> list of positions where it would change the word` plus
# `apply(core, site, rng) -> new core`. An operation with no site cannot change the word, so it is never drawn
# for it; this is what makes every hit word change without an unbounded retry loop.


class _Op(NamedTuple):
    name: str
    sites: Callable[[str], list]
    apply: Callable[[str, int, np.random.Generator], str]


def _is_key(ch: str) -> bool:
    return ch.isascii() and ch.lower() in QWERTY_NEIGHBOURS


def _neighbour(ch: str, rng: np.random.Generator) -> str:
    """A QWERTY neighbour of `ch`, in the case of `ch`."""
    options = QWERTY_NEIGHBOURS[ch.lower()]
    new = options[int(rng.integers(len(options)))]
    return new.upper() if ch.isupper() else new


def _swap_sites(core: str) -> list:
    # pairs (i, i+1) of different letters, both inner (neither the first nor the last character)
    return [i for i in range(1, len(core) - 2)
            if core[i].isalpha() and core[i + 1].isalpha() and core[i] != core[i + 1]]


def _swap(core: str, i: int, rng: np.random.Generator) -> str:
    return core[:i] + core[i + 1] + core[i] + core[i + 2:]


def _inner_letters(core: str) -> list:
    return [i for i in range(1, len(core) - 1) if core[i].isalpha()]


def _shuffle_sites(core: str) -> list:
    # one site (the whole middle) when the word has >= 4 characters and at least two different inner letters
    if len(core) >= 4 and len({core[i] for i in _inner_letters(core)}) >= 2:
        return [0]
    return []


def _shuffle_middle(core: str, _site: int, rng: np.random.Generator) -> str:
    pos = _inner_letters(core)
    letters = [core[i] for i in pos]
    perm = [letters[j] for j in rng.permutation(len(letters))]
    if perm == letters:  # identity draw: rotate by one, which changes any sequence that is not constant
        perm = letters[1:] + letters[:1]
    chars = list(core)
    for i, ch in zip(pos, perm):
        chars[i] = ch
    return "".join(chars)


def _key_sites(core: str) -> list:
    return [i for i, ch in enumerate(core) if _is_key(ch)]


def _keyboard(core: str, i: int, rng: np.random.Generator) -> str:
    return core[:i] + _neighbour(core[i], rng) + core[i + 1:]


def _insert(core: str, i: int, rng: np.random.Generator) -> str:
    new = _neighbour(core[i], rng)
    at = i + int(rng.integers(2))  # before or after the letter it was typed next to
    return core[:at] + new + core[at:]


def _delete(core: str, i: int, rng: np.random.Generator) -> str:
    return core[:i] + core[i + 1:]


SWAP = _Op("swap", _swap_sites, _swap)
SHUFFLE_MIDDLE = _Op("shuffle_middle", _shuffle_sites, _shuffle_middle)
KEYBOARD = _Op("keyboard", _key_sites, _keyboard)
INSERT = _Op("insert", _key_sites, _insert)
DELETE = _Op("delete", _inner_letters, _delete)
ALL_OPS = (SWAP, SHUFFLE_MIDDLE, KEYBOARD, INSERT, DELETE)


def _natural_op(table: dict[str, tuple[str, ...]]) -> _Op:
    """Replace the word by one of the misspellings people really type for it (in `table`), keeping its case."""

    def sites(core: str) -> list:
        return [0] if core.lower() in table else []

    def apply(core: str, _site: int, rng: np.random.Generator) -> str:
        options = table[core.lower()]
        return with_case_of(core, options[int(rng.integers(len(options)))])

    return _Op("natural", sites, apply)


# --- the shared helper --------------------------------------------------------------------------------------


def split_core(word: str) -> tuple[str, str, str]:
    """(leading punctuation, core, trailing punctuation) of one whitespace-free word."""
    lead, core, trail = _EDGE_PUNCT.match(word).groups()
    return lead, core, trail


def usable_ops(core: str, ops: Sequence[_Op]) -> list:
    if len(core) < 2 or not any(ch.isalpha() for ch in core):
        return []
    return [op for op in ops if op.sites(core)]


def perturb_word(core: str, ops: list, rng: np.random.Generator, prefer: _Op | None = None) -> str:
    """Apply one operation drawn from `ops` (`prefer` first, when it is usable); if it left the word unchanged,
    draw another one."""
    ops = list(ops)
    if prefer is not None and prefer in ops:
        ops.remove(prefer)
        new = prefer.apply(core, prefer.sites(core)[0], rng)
        if new != core:
            return new
    while ops:
        op = ops.pop(int(rng.integers(len(ops))))
        sites = op.sites(core)
        if not sites:
            continue
        new = op.apply(core, sites[int(rng.integers(len(sites)))], rng)
        if new != core:
            return new
    return core  # not reached for a word that had a usable operation


def _noise(text: str, share: float, rng: np.random.Generator, ops: Sequence[_Op], prefer: _Op | None = None) -> str:
    """Hit max(1, round(share * eligible words)) eligible words, drawn without replacement, one op each."""
    tokens = WHITESPACE.split(_check_caption(text))  # words at even indices, separators at odd ones
    eligible = []
    for k in range(0, len(tokens), 2):
        lead, core, trail = split_core(tokens[k])
        usable = usable_ops(core, ops)
        if usable:
            eligible.append((k, lead, core, trail, usable))
    if not eligible:
        return text
    n_hit = max(1, round(share * len(eligible)))
    for j in sorted(rng.choice(len(eligible), size=n_hit, replace=False).tolist()):
        k, lead, core, trail, usable = eligible[j]
        tokens[k] = lead + perturb_word(core, usable, rng, prefer) + trail
    return "".join(tokens)


# --- registered perturbations -------------------------------------------------------------------------------


NATURAL = _natural_op(shipped_misspellings())


@register("typos", modality="text", family="typos", severities=(1, 2, 3, 4, 5), label_preserving=True)
def typos(text: str, severity: int, rng: np.random.Generator) -> str:
    """Natural + synthetic typos (Rainbow Noise's text noise 1) on a share of the words: a real-world misspelling
    where the word has one in the shipped table, otherwise typing noise (swap, middle shuffle, keyboard slip,
    insertion, deletion). Readers skim past such noise, so the label should survive it."""
    c = [0.1, 0.2, 0.3, 0.4, 0.5][severity - 1]
    return _noise(text, c, rng, (NATURAL,) + ALL_OPS, prefer=NATURAL)


@register("natural_typos", modality="text", family="typos", severities=(1, 2, 3, 4, 5), label_preserving=True)
def natural_typos(text: str, severity: int, rng: np.random.Generator) -> str:
    """Only real-world misspellings from the shipped table, on a share of the words that have one."""
    c = [0.1, 0.2, 0.3, 0.4, 0.5][severity - 1]
    return _noise(text, c, rng, (NATURAL,))


def register_natural_typos(name: str, table: dict[str, tuple[str, ...]]) -> None:
    """Register `name` as natural typos drawn from your own corpus (see natural.load_misspellings)."""
    op = _natural_op(table)

    def corpus_typos(text: str, severity: int, rng: np.random.Generator) -> str:
        c = [0.1, 0.2, 0.3, 0.4, 0.5][severity - 1]
        return _noise(text, c, rng, (op,))

    corpus_typos.__doc__ = f"Real-world misspellings from a user corpus ({len(table)} words), on a share of words."
    register(name, modality="text", family="typos", severities=(1, 2, 3, 4, 5))(corpus_typos)


@register("char_swap", modality="text", family="typos", severities=(1, 2, 3, 4, 5), label_preserving=True)
def char_swap(text: str, severity: int, rng: np.random.Generator) -> str:
    """Swap two adjacent inner letters of a share of the words (fast-typing transposition: noise -> nosie)."""
    c = [0.1, 0.2, 0.3, 0.4, 0.5][severity - 1]
    return _noise(text, c, rng, (SWAP,))


@register("char_shuffle_middle", modality="text", family="typos", severities=(1, 2, 3, 4, 5),
          label_preserving=True)
def char_shuffle_middle(text: str, severity: int, rng: np.random.Generator) -> str:
    """Shuffle the inner letters of a share of the words, first and last fixed: humans still read them."""
    c = [0.1, 0.2, 0.3, 0.4, 0.5][severity - 1]
    return _noise(text, c, rng, (SHUFFLE_MIDDLE,))


@register("char_keyboard", modality="text", family="typos", severities=(1, 2, 3, 4, 5), label_preserving=True)
def char_keyboard(text: str, severity: int, rng: np.random.Generator) -> str:
    """Replace one letter of a share of the words by a QWERTY neighbour, the commonest real typo."""
    c = [0.1, 0.2, 0.3, 0.4, 0.5][severity - 1]
    return _noise(text, c, rng, (KEYBOARD,))


@register("char_insert", modality="text", family="typos", severities=(1, 2, 3, 4, 5), label_preserving=True)
def char_insert(text: str, severity: int, rng: np.random.Generator) -> str:
    """Insert a QWERTY neighbour next to one letter of a share of the words (a finger hitting two keys)."""
    c = [0.1, 0.2, 0.3, 0.4, 0.5][severity - 1]
    return _noise(text, c, rng, (INSERT,))


@register("char_delete", modality="text", family="typos", severities=(1, 2, 3, 4, 5), label_preserving=True)
def char_delete(text: str, severity: int, rng: np.random.Generator) -> str:
    """Drop one inner letter of a share of the words (a missed key); never a whole word."""
    c = [0.1, 0.2, 0.3, 0.4, 0.5][severity - 1]
    return _noise(text, c, rng, (DELETE,))
