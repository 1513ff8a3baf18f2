"""Caption perturbations that imitate the edits people make to slip a caption past a moderation filter while a
human still reads the same words: look-alike letters from other scripts, leetspeak, invisible characters, letters
split by spaces or dots, mixed case, "fancy font" letters and emoji between the words.

All of them are registered with modality "text", family "evasion" and the tag "evasion", plus "unicode" when the
output leaves ASCII (homoglyphs, zero-width characters, fancy fonts, emoji) or "ascii" when it stays in it
(leetspeak, split letters, mixed case), and a level tag like the other catalogues: "char" for the edits inside
words, "word" for `emoji_insertion`, which adds tokens between them.

Severity is the share of eligible units hit, [0.1, 0.2, 0.3, 0.4, 0.5], at least one unit when any is eligible:
- characters for `homoglyphs` and `leetspeak` (an eligible character is one the table has a substitute for);
- gaps between two words for `emoji_insertion`;
- words for all the others. Words are the runs of non-whitespace, split as in `text.py`; a word's leading and
  trailing punctuation ("(hate)," -> core "hate") is left alone where the edit works on letters.
A hit unit always changes, so the output differs from the input exactly when something is eligible; a caption with
nothing eligible comes back as it is. The whitespace between words is kept exactly; `spaced_letters` (spaces inside
a word) and `emoji_insertion` (one emoji and one space after a gap) only add to it.

Tables that must not be hand-typed come from maintained data: look-alikes from the Unicode consortium's
confusables.txt as shipped by the `confusable-homoglyphs` package, math letters from `unicodedata` names, emoji from
the `emoji` package. Each is built once, on first use, and sorted, so an output depends only on the rng and on the
version of that data.
"""
from __future__ import annotations

import string
import unicodedata
from functools import lru_cache
from types import MappingProxyType
from typing import Callable, Mapping, Sequence

import numpy as np

from .registry import register
from .text import WHITESPACE, _check_caption, split_core

# --- shared helpers -----------------------------------------------------------------------------------------


def _pick(n: int, share: float, rng: np.random.Generator) -> list:
    """Indices of max(1, round(share * n)) of `n` eligible units, drawn without replacement, in order."""
    k = max(1, round(share * n))
    return sorted(rng.choice(n, size=k, replace=False).tolist())


def _edit_chars(text: str, share: float, rng: np.random.Generator, options: Mapping[str, Sequence[str]]) -> str:
    """Replace a share of the characters that `options` knows by one of their options (never themselves)."""
    chars = list(_check_caption(text))
    sites = [i for i, ch in enumerate(chars) if ch in options]
    if not sites:
        return text
    for j in _pick(len(sites), share, rng):
        opts = options[chars[sites[j]]]
        chars[sites[j]] = opts[int(rng.integers(len(opts)))]
    return "".join(chars)


def _edit_words(
    text: str,
    share: float,
    rng: np.random.Generator,
    eligible: Callable[[str], bool],
    edit: Callable[[str, np.random.Generator], str],
) -> str:
    """Apply `edit` to a share of the whitespace-separated words for which `eligible` holds; `edit` must change them."""
    tokens = WHITESPACE.split(_check_caption(text))  # words at even indices, separators at odd ones
    candidates = [k for k in range(0, len(tokens), 2) if tokens[k] and eligible(tokens[k])]
    if not candidates:
        return text
    for j in _pick(len(candidates), share, rng):
        k = candidates[j]
        tokens[k] = edit(tokens[k], rng)
    return "".join(tokens)


def _has_inner_gap(word: str) -> bool:
    """The word's core (punctuation stripped) has two or more characters, at least one of them a letter."""
    core = split_core(word)[1]
    return len(core) >= 2 and any(ch.isalpha() for ch in core)


# --- homoglyphs ---------------------------------------------------------------------------------------------

# Scripts whose look-alikes are drawn: everyday fonts cover them, unlike e.g. Lisu, Warang Citi or Old Italic.
HOMOGLYPH_SCRIPTS = frozenset({"CYRILLIC", "GREEK", "ARMENIAN", "CHEROKEE"})
_HOMOGLYPH_CATEGORIES = frozenset({"Lu", "Ll", "Lo"})  # letters that render as one glyph: no marks, no modifiers


def _confusable_class(letter: str, data: Mapping[str, list]) -> set:
    """Single code points with the same confusables.txt prototype as `letter` (e.g. "I" -> "l" -> Cyrillic "І").

    The package stores each line "source -> prototype" of confusables.txt in both directions, so the connected
    component of `letter` over single-code-point entries is its confusability class.
    """
    seen, todo = {letter}, [letter]
    while todo:
        for entry in data.get(todo.pop(), ()):
            ch = entry["c"]
            if len(ch) == 1 and ch not in seen:
                seen.add(ch)
                todo.append(ch)
    seen.discard(letter)
    return seen


@lru_cache(maxsize=None)
def homoglyph_table() -> Mapping[str, tuple]:
    """ASCII letter -> its look-alikes from other scripts, sorted by code point (built once, on first use).

    A look-alike is one code point of the Basic Multilingual Plane, a letter (Lu, Ll, Lo) of one of
    HOMOGLYPH_SCRIPTS, unchanged by NFKC (so no compatibility form that stands for another letter). Letters without
    one (k, m, t, Q, ...) are absent.
    """
    try:
        from confusable_homoglyphs import categories, confusables
    except ImportError as err:
        raise ImportError(
            "the 'homoglyphs' perturbation needs the 'confusable-homoglyphs' package "
            "(pip install confusable-homoglyphs): it ships the Unicode confusables data"
        ) from err
    table = {}
    for letter in string.ascii_letters:
        picks = sorted(
            ch for ch in _confusable_class(letter, confusables.confusables_data)
            if ord(ch) <= 0xFFFF
            and unicodedata.category(ch) in _HOMOGLYPH_CATEGORIES
            and unicodedata.normalize("NFKC", ch) == ch
            and categories.alias(ch) in HOMOGLYPH_SCRIPTS
        )
        if picks:
            table[letter] = tuple(picks)
    return MappingProxyType(table)


@register("homoglyphs", modality="text", family="evasion", severities=(1, 2, 3, 4, 5), label_preserving=True,
          tags=("evasion", "unicode", "char"))
def homoglyphs(text: str, severity: int, rng: np.random.Generator) -> str:
    """Swap a share of the letters for look-alikes from Cyrillic, Greek, Armenian or Cherokee (Unicode confusables).

    Eligible: the ASCII letters that have a look-alike (see `homoglyph_table`); needs `confusable-homoglyphs`.
    """
    c = [0.1, 0.2, 0.3, 0.4, 0.5][severity - 1]
    _check_caption(text)
    return _edit_chars(text, c, rng, homoglyph_table())


# --- leetspeak ----------------------------------------------------------------------------------------------

LEET: Mapping[str, str] = MappingProxyType({
    "a": "4@", "b": "8", "e": "3", "g": "9", "i": "1!", "o": "0", "s": "5$", "t": "7",
})
_LEET_OPTIONS = MappingProxyType({
    **{k: tuple(v) for k, v in LEET.items()},
    **{k.upper(): tuple(v) for k, v in LEET.items()},
})


@register("leetspeak", modality="text", family="evasion", severities=(1, 2, 3, 4, 5), label_preserving=True,
          tags=("evasion", "ascii", "char"))
def leetspeak(text: str, severity: int, rng: np.random.Generator) -> str:
    """Write a share of the letters a, b, e, g, i, o, s, t (either case) as digits or symbols: h4t3, k!ll, 5ay.

    Eligible: the characters in LEET; when a letter has two substitutes (a: 4 @, i: 1 !, s: 5 $) the rng picks one.
    """
    c = [0.1, 0.2, 0.3, 0.4, 0.5][severity - 1]
    return _edit_chars(text, c, rng, _LEET_OPTIONS)


# --- zero-width characters ----------------------------------------------------------------------------------

# zero width space, non-joiner, joiner, word joiner, zero width no-break space (BOM): none is whitespace to Python
ZERO_WIDTH = ("\u200b", "\u200c", "\u200d", "\u2060", "\ufeff")


def _insert_zero_width(word: str, rng: np.random.Generator) -> str:
    lead, core, trail = split_core(word)
    at = 1 + int(rng.integers(len(core) - 1))  # a gap strictly inside the core
    zw = ZERO_WIDTH[int(rng.integers(len(ZERO_WIDTH)))]
    return lead + core[:at] + zw + core[at:] + trail


@register("zero_width", modality="text", family="evasion", severities=(1, 2, 3, 4, 5), label_preserving=True,
          tags=("evasion", "unicode", "char"))
def zero_width(text: str, severity: int, rng: np.random.Generator) -> str:
    """Hide one zero-width character (U+200B/200C/200D/2060/FEFF) inside a share of the words; the text looks the same.

    Eligible: words whose core has two or more characters, one a letter; the gap and the character are drawn.
    """
    c = [0.1, 0.2, 0.3, 0.4, 0.5][severity - 1]
    return _edit_words(text, c, rng, _has_inner_gap, _insert_zero_width)


# --- letters split by a separator ---------------------------------------------------------------------------

INTRA_WORD_SEPARATORS = (".", "-", "_")


def _split_letters(text: str, share: float, rng: np.random.Generator, separators: Sequence[str]) -> str:
    """Put a separator between every two characters of the core of a share of the words; one drawn per word."""

    def edit(word: str, rng: np.random.Generator) -> str:
        lead, core, trail = split_core(word)
        sep = separators[int(rng.integers(len(separators)))] if len(separators) > 1 else separators[0]
        return lead + sep.join(core) + trail

    return _edit_words(text, share, rng, _has_inner_gap, edit)


@register("spaced_letters", modality="text", family="evasion", severities=(1, 2, 3, 4, 5), label_preserving=True,
          tags=("evasion", "ascii", "char"))
def spaced_letters(text: str, severity: int, rng: np.random.Generator) -> str:
    """Space out the letters of a share of the words: "hate" -> "h a t e" (adds spaces, so words, inside them).

    Eligible: words whose core has two or more characters, one a letter; leading/trailing punctuation stays put.
    """
    c = [0.1, 0.2, 0.3, 0.4, 0.5][severity - 1]
    return _split_letters(text, c, rng, (" ",))


@register("dotted_letters", modality="text", family="evasion", severities=(1, 2, 3, 4, 5), label_preserving=True,
          tags=("evasion", "ascii", "char"))
def dotted_letters(text: str, severity: int, rng: np.random.Generator) -> str:
    """Put dots between the letters of a share of the words: "hate" -> "h.a.t.e".

    Eligible: words whose core has two or more characters, one a letter; leading/trailing punctuation stays put.
    """
    c = [0.1, 0.2, 0.3, 0.4, 0.5][severity - 1]
    return _split_letters(text, c, rng, (".",))


@register("intra_word_punctuation", modality="text", family="evasion", severities=(1, 2, 3, 4, 5),
          label_preserving=True, tags=("evasion", "ascii", "char"))
def intra_word_punctuation(text: str, severity: int, rng: np.random.Generator) -> str:
    """Put one of . - _ (drawn per word) between the letters of a share of the words: h.a.t.e, h-a-t-e, h_a_t_e.

    Eligible: words whose core has two or more characters, one a letter; leading/trailing punctuation stays put.
    """
    c = [0.1, 0.2, 0.3, 0.4, 0.5][severity - 1]
    return _split_letters(text, c, rng, INTRA_WORD_SEPARATORS)


# --- mixed case ---------------------------------------------------------------------------------------------


def _flippable(ch: str) -> bool:
    """A letter with a one-character upper and lower case that map back to each other (not "ß", "ſ", "İ")."""
    up, low = ch.upper(), ch.lower()
    return up != low and len(up) == len(low) == 1 and up.lower() == low and low.upper() == up


def _mixable(word: str) -> bool:
    return sum(_flippable(ch) for ch in word) >= 2


def _mix_case(word: str, rng: np.random.Generator) -> str:
    sites = [i for i, ch in enumerate(word) if _flippable(ch)]
    upper = rng.random(len(sites)) < 0.5
    chars = list(word)
    for i, up in zip(sites, upper):
        chars[i] = chars[i].upper() if up else chars[i].lower()
    if chars == list(word):  # the draw reproduced the word: flip one letter so that a hit word always changes
        i = sites[int(rng.integers(len(sites)))]
        chars[i] = chars[i].lower() if chars[i].isupper() else chars[i].upper()
    return "".join(chars)


@register("case_mixing", modality="text", family="evasion", severities=(1, 2, 3, 4, 5), label_preserving=True,
          tags=("evasion", "ascii", "char"))
def case_mixing(text: str, severity: int, rng: np.random.Generator) -> str:
    """Give each letter of a share of the words a random case: "hate" -> "hAtE"; lower-casing gives the word back.

    Eligible: words with two or more letters that have a simple upper/lower pair.
    """
    c = [0.1, 0.2, 0.3, 0.4, 0.5][severity - 1]
    return _edit_words(text, c, rng, _mixable, _mix_case)


# --- fancy fonts --------------------------------------------------------------------------------------------

# Styles of the Mathematical Alphanumeric Symbols block (U+1D400-1D7FF). Digits exist only in bold, double-struck,
# sans-serif, sans-serif bold and monospace; the other styles leave digits as they are.
FONT_STYLES = (
    "BOLD", "ITALIC", "BOLD ITALIC", "SCRIPT", "BOLD SCRIPT", "FRAKTUR", "BOLD FRAKTUR", "DOUBLE-STRUCK",
    "SANS-SERIF", "SANS-SERIF BOLD", "SANS-SERIF ITALIC", "SANS-SERIF BOLD ITALIC", "MONOSPACE",
)
# The one reserved hole of the block whose Letterlike Symbols stand-in is not named "<style> <case> <letter>".
_LETTERLIKE_NAMES = {"ITALIC SMALL H": "PLANCK CONSTANT"}


def _math_char(style: str, ch: str) -> str | None:
    """The `style` form of ASCII letter or digit `ch`, or None where the style has none.

    Some letters are reserved holes in the math block because Unicode already had them in Letterlike Symbols
    (script e g o B E F H I L M R, fraktur C H I R Z, double-struck C H N P Q R Z, italic h): there the name loses
    "MATHEMATICAL" and fraktur is called BLACK-LETTER ("SCRIPT SMALL E", "BLACK-LETTER CAPITAL C").
    """
    if ch.isdigit():
        names = [f"MATHEMATICAL {style} {unicodedata.name(ch)}"]  # "... DIGIT ZERO"
    else:
        short = f"{style} {'CAPITAL' if ch.isupper() else 'SMALL'} {ch.upper()}"
        names = [f"MATHEMATICAL {short}", short.replace("FRAKTUR", "BLACK-LETTER"),
                 _LETTERLIKE_NAMES.get(short, "")]
    for name in names:
        try:
            out = unicodedata.lookup(name)
        except KeyError:
            continue
        if unicodedata.normalize("NFKC", out) == ch:
            return out
    return None


@lru_cache(maxsize=None)
def _font_tables() -> tuple:
    """One read-only map ASCII letter/digit -> styled character per FONT_STYLES entry (built once)."""
    tables = []
    for style in FONT_STYLES:
        table = {ch: _math_char(style, ch) for ch in string.ascii_letters + string.digits}
        tables.append(MappingProxyType({k: v for k, v in table.items() if v is not None}))
    return tuple(tables)


@register("fancy_fonts", modality="text", family="evasion", severities=(1, 2, 3, 4, 5), label_preserving=True,
          tags=("evasion", "unicode", "char"))
def fancy_fonts(text: str, severity: int, rng: np.random.Generator) -> str:
    """Write a share of the words in one "fancy font" (math bold, script, fraktur...) drawn per caption; NFKC undoes it.

    Eligible: words with an ASCII letter, or a digit when the style has digits; other characters stay as they are.
    """
    c = [0.1, 0.2, 0.3, 0.4, 0.5][severity - 1]
    _check_caption(text)
    table = _font_tables()[int(rng.integers(len(FONT_STYLES)))]

    def eligible(word: str) -> bool:
        return any(ch in table for ch in word)

    def edit(word: str, _rng: np.random.Generator) -> str:
        return "".join(table.get(ch, ch) for ch in word)

    return _edit_words(text, c, rng, eligible, edit)


# --- emoji between words ------------------------------------------------------------------------------------

# Emoji versions up to 1.0 only: a fixed set, so newer releases of the `emoji` package do not change the outputs.
EMOJI_MAX_VERSION = 1.0
# Used when the `emoji` package is not installed: single code points, all fully-qualified emoji.
FALLBACK_EMOJI = tuple(sorted("😂😅😭😎😴🙄🤔👀👍👏🙏🔥💯✨🎉🌈"))


@lru_cache(maxsize=None)
def _emoji_pool() -> tuple:
    """Sorted single-code-point, fully-qualified emoji of version <= EMOJI_MAX_VERSION from the `emoji` package, or
    FALLBACK_EMOJI without it."""
    try:
        import emoji
    except ImportError:
        return FALLBACK_EMOJI
    fully_qualified = emoji.STATUS["fully_qualified"]
    pool = sorted(
        e for e, data in emoji.EMOJI_DATA.items()
        if len(e) == 1 and data.get("status") == fully_qualified and data.get("E", 99) <= EMOJI_MAX_VERSION
    )
    return tuple(pool) or FALLBACK_EMOJI


@register("emoji_insertion", modality="text", family="evasion", severities=(1, 2, 3, 4, 5), label_preserving=True,
          tags=("evasion", "unicode", "word"))
def emoji_insertion(text: str, severity: int, rng: np.random.Generator) -> str:
    """Put an emoji and a space after a share of the gaps between words: "i hate you" -> "i 🔥 hate you".

    Emoji: the sorted fully-qualified single-code-point emoji of Emoji 1.0 or earlier in the `emoji` package's
    EMOJI_DATA (807 in emoji 2.16), or the 16 of FALLBACK_EMOJI when that package is missing. Eligible: whitespace
    runs with a word on both sides; a one-word caption comes back as it is.
    """
    c = [0.1, 0.2, 0.3, 0.4, 0.5][severity - 1]
    tokens = WHITESPACE.split(_check_caption(text))  # words at even indices, separators at odd ones
    gaps = [k for k in range(1, len(tokens) - 1, 2) if tokens[k - 1] and tokens[k + 1]]
    if not gaps:
        return text
    pool = _emoji_pool()
    for j in _pick(len(gaps), c, rng):
        tokens[gaps[j]] += pool[int(rng.integers(len(pool)))] + " "
    return "".join(tokens)
