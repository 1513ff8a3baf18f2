"""Caption edits people really make to slip hate past a filter while every reader still gets it (HateProof's
"human-induced" perturbations), which the other caption edits (`evasion.py`, `catalogue.py`, `text.py`) do not make:

- `emoji_substitution`: a word written as the emoji of its meaning ("kill all women" -> "🔪 all 👩"), from
  EMOJI_WORDS, a small curated table after HatemojiCheck's identity, verb and descriptor swaps (Kirk et al., NAACL
  2022) plus body parts and everyday nouns;
- `emoji_leetspeak`: one inner vowel of a word written as an emoji (h❤️te, s🌟ck, Musl1️⃣ms), HatemojiCheck's
  "emoji leetspeak";
- `leet_mix`: leetspeak digits, look-alike punctuation (@ ! $) and case flips mixed inside one word (h4Te, MuSl!m$),
  from evasion's LEET table;
- `word_merge` and `word_split`: word boundaries moved, the two edits of Gröndahl et al. ("All you need is 'love'",
  AISec 2018): a space removed between two words ("killall"), or one put inside a word ("wo men");
- `filler_words` and `letter_repeat`: insertions that keep the meaning, internet fillers ("lol", "tbh", "ngl")
  and elongated letters ("soooo", "hateee").

All are modality "text", family "human_edits", severities 1-5, tagged "human_edit" (not "evasion", which names
evasion.py's set), a level ("char" inside words, "word" for whole words and boundaries) and "ascii" or "unicode".
Severity is the share of eligible units hit, max(1, round(share * n)) of them, [0.1 .. 0.5] as in evasion.py
([0.2 .. 1.0] for `emoji_substitution`, whose units are rare); each docstring says which units. A hit unit always
changes; a caption with nothing eligible comes back as it is; other words, and the whitespace not edited, are kept.

`human_candidates(word, rng, limit)` lists human-plausible rewrites of one word (these edits and evasion's
leetspeak, spacing and separators; no homoglyph, no zero-width character), the candidate set for an attack that
searches over word rewrites instead of random character flips.
"""
from __future__ import annotations

from types import MappingProxyType
from typing import Mapping

import numpy as np

from .catalogue import _count, rebuild_words, split_words
from .catalogue import _pick as _draw
from .evasion import _LEET_OPTIONS, INTRA_WORD_SEPARATORS, LEET, _edit_words, _flippable, _has_inner_gap, _pick
from .registry import register
from .text import WHITESPACE, _check_caption, _noise, _Op, split_core

# --- emoji for words ----------------------------------------------------------------------------------------

_KILL = ("🔪", "🔫", "💣", "👊", "💀")  # HatemojiCheck's verb swaps, all five for "kill"
_GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    # identity terms: HatemojiCheck's identity swaps (its six targets) and two religions' symbols
    ("woman women girl girls", ("👩",)),
    ("trans transgender", ("⚧️",)),
    ("gay gays lgbt lgbtq queer", ("🏳️\u200d🌈",)),
    ("disabled", ("♿",)),
    ("muslim muslims", ("👳🏾",)),
    ("blacks", ("🧑🏿",)),  # not "black": a colour far more often than a group
    ("jew jews jewish", ("✡️",)),
    ("christian christians", ("✝️",)),
    # verbs and states of hate speech
    ("kill kills killed killing murder", _KILL),
    ("stab stabbed knife", ("🔪",)),
    ("shoot shot gun guns", ("🔫",)),
    ("bomb bombs", ("💣",)),
    ("punch beat", ("👊",)),
    ("die dies died dead death skull", ("💀",)),
    ("burn burned fire", ("🔥",)),
    ("love loves", ("❤️",)),
    ("disgusting gross", ("🤮", "🤢")),  # HatemojiCheck's appended disgust
    ("vomit puke", ("🤮",)),
    ("angry mad", ("😡",)),
    # animals and descriptors used to dehumanise: HatemojiCheck's descriptor swaps
    ("rat rats", ("🐀",)),
    ("pig pigs", ("🐖",)),
    ("monkey monkeys", ("🐒",)),
    ("ape apes gorilla gorillas", ("🦍",)),
    ("goat goats", ("🐐",)),
    ("camel camels", ("🐪",)),
    ("snake snakes", ("🐍",)),
    ("cockroach cockroaches", ("🪳",)),
    ("parasite parasites mosquito mosquitoes", ("🦟",)),
    ("virus disease", ("🦠",)),
    ("shit crap poop", ("💩",)),
    ("trash garbage", ("🗑️",)),
    ("clown clowns", ("🤡",)),
    ("devil devils", ("😈",)),
    ("dog dogs", ("🐕",)),
    ("cat cats", ("🐈",)),
    # body parts
    ("eye", ("👁️",)),
    ("eyes", ("👀",)),
    ("hand hands", ("✋",)),
    ("brain brains", ("🧠",)),
    ("heart", ("❤️",)),
    ("mouth", ("👄",)),
    ("nose", ("👃",)),
    ("ear ears", ("👂",)),
    ("leg legs", ("🦵",)),
    ("foot feet", ("🦶",)),
    ("tongue", ("👅",)),
    ("tooth teeth", ("🦷",)),
    ("arm arms muscle muscles", ("💪",)),
    ("bone bones", ("🦴",)),
    # everyday nouns of memes
    ("money cash", ("💰",)),
    ("police cop cops", ("👮",)),
    ("king", ("👑",)),
    ("world earth", ("🌍",)),
)
# lower-case word -> the emoji that stand for it; every one fully-qualified in the Unicode emoji data
EMOJI_WORDS: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {word: emoji for words, emoji in _GROUPS for word in words.split()})


def _emoji_for(word: str, rng: np.random.Generator) -> str:
    lead, core, trail = split_core(word)
    options = EMOJI_WORDS[core.lower()]
    return lead + options[int(rng.integers(len(options)))] + trail


def _in_emoji_table(word: str) -> bool:
    return split_core(word)[1].lower() in EMOJI_WORDS


@register("emoji_substitution", modality="text", family="human_edits", label_preserving=True,
          tags=("human_edit", "unicode", "word"))
def emoji_substitution(text: str, severity: int, rng: np.random.Generator) -> str:
    """Write a share of the words of a curated table as their emoji: "kill all women" -> "🔪 all 👩" (Hatemoji).

    Severity: share of the words found in EMOJI_WORDS that are replaced, [0.2, 0.4, 0.6, 0.8, 1.0] (a caption has
    few such words; severity 5 swaps them all, like HatemojiCheck's double swaps). Case is ignored, edge
    punctuation kept; a word with several emoji (kill: 🔪 🔫 💣 👊 💀) gets one drawn.
    """
    c = [0.2, 0.4, 0.6, 0.8, 1.0][severity - 1]
    return _edit_words(text, c, rng, _in_emoji_table, _emoji_for)


# --- emoji inside words -------------------------------------------------------------------------------------

VOWELS = "aeiouAEIOU"
# HatemojiCheck's emoji for a vowel; a vowel with a leet digit may also become that digit's keycap
LETTER_EMOJI = ("❤️", "🌟")
_KEYCAP = "\ufe0f\u20e3"  # digit + VS16 + combining enclosing keycap: 4️⃣


def _emoji_letters(letter: str) -> tuple[str, ...]:
    digits = [d for d in LEET.get(letter.lower(), "") if d.isdigit()]
    return LETTER_EMOJI + tuple(d + _KEYCAP for d in digits)


def _inner_vowels(core: str) -> list[int]:
    return [i for i in range(1, len(core) - 1) if core[i] in VOWELS]


def _emoji_letter(core: str, i: int, rng: np.random.Generator) -> str:
    options = _emoji_letters(core[i])
    return core[:i] + options[int(rng.integers(len(options)))] + core[i + 1:]


# text.py's one-edit-per-word operations (`_noise` hits the share of words that have a site, one site drawn)
EMOJI_LETTER = _Op("emoji_letter", _inner_vowels, _emoji_letter)


@register("emoji_leetspeak", modality="text", family="human_edits", label_preserving=True,
          tags=("human_edit", "unicode", "char"))
def emoji_leetspeak(text: str, severity: int, rng: np.random.Generator) -> str:
    """Write one inner vowel of a share of the words as an emoji: h❤️te, s🌟ck, Musl1️⃣ms (HatemojiCheck).

    Severity: share of the eligible words, [0.1 .. 0.5]. Eligible: a vowel that is neither the first nor the last
    character of the word's core; it becomes ❤️, 🌟 or, for a e i o, the keycap of its LEET digit.
    """
    c = [0.1, 0.2, 0.3, 0.4, 0.5][severity - 1]
    return _noise(text, c, rng, (EMOJI_LETTER,))


# --- leetspeak, look-alike punctuation and case in one word -------------------------------------------------


def _leet_options(core: str, i: int) -> tuple[str, ...]:
    """LEET substitutes of core[i]; never "!" as the last character, where it reads as an exclamation mark."""
    options = _LEET_OPTIONS.get(core[i], ())
    return tuple(o for o in options if o != "!") if i == len(core) - 1 else options


def _mix_sites(core: str) -> tuple[list[int], list[int]]:
    leet = [i for i in range(len(core)) if _leet_options(core, i)]
    case = [i for i, ch in enumerate(core) if _flippable(ch)]
    return leet, case


def _mixable(word: str) -> bool:
    """Three characters or more, a LEET letter and another letter whose case can flip: both kinds fit."""
    core = split_core(word)[1]
    leet, case = _mix_sites(core)
    return len(core) >= 3 and bool(leet) and any(i != j for i in leet for j in case)


def _leet_mix(word: str, rng: np.random.Generator) -> str:
    """One LEET substitution, one case flip elsewhere, then more of either until 40% of the core has changed."""
    lead, core, trail = split_core(word)
    leet, case = _mix_sites(core)
    pairs = [(i, j) for i in leet for j in case if i != j]
    first, second = pairs[int(rng.integers(len(pairs)))]
    rest = sorted((set(leet) | set(case)) - {first, second})
    extra = max(0, min(len(rest), round(0.4 * len(core)) - 2))
    chosen = [first, second] + [rest[k] for k in sorted(rng.choice(len(rest), size=extra, replace=False).tolist())]
    chars = list(core)
    for i in chosen:
        as_leet = i == first or (i != second and i in leet and (i not in case or rng.random() < 0.5))
        if as_leet:
            options = _leet_options(core, i)
            chars[i] = options[int(rng.integers(len(options)))]
        else:
            chars[i] = core[i].swapcase()
    return lead + "".join(chars) + trail


@register("leet_mix", modality="text", family="human_edits", label_preserving=True,
          tags=("human_edit", "ascii", "char"))
def leet_mix(text: str, severity: int, rng: np.random.Generator) -> str:
    """Mix leetspeak digits, look-alike punctuation (@ ! $) and case flips inside a share of the words: h4Te, MuSl!m$.

    Severity: share of the eligible words, [0.1 .. 0.5]. In a hit word max(2, round(0.4 * length)) characters
    change, at least one to a LEET substitute and one by a case flip. Eligible: words of three characters or more
    with a LEET letter and another cased letter. The defence "leetspeak+case" reads the words back.
    """
    c = [0.1, 0.2, 0.3, 0.4, 0.5][severity - 1]
    return _edit_words(text, c, rng, _mixable, _leet_mix)


# --- word boundaries ----------------------------------------------------------------------------------------


@register("word_merge", modality="text", family="human_edits", label_preserving=True,
          tags=("human_edit", "ascii", "word"))
def word_merge(text: str, severity: int, rng: np.random.Generator) -> str:
    """Remove the whitespace between two words at a share of the gaps: "kill all women" -> "killall women".

    Severity: share of the gaps between two words, [0.1 .. 0.5] (Gröndahl et al.'s whitespace removal, in part).
    Adjacent merged gaps join three words or more; a one-word caption comes back as it is.
    """
    c = [0.1, 0.2, 0.3, 0.4, 0.5][severity - 1]
    tokens = WHITESPACE.split(_check_caption(text))  # words at even indices, separators at odd ones
    gaps = [k for k in range(1, len(tokens) - 1, 2) if tokens[k - 1] and tokens[k + 1]]
    if not gaps:
        return text
    for j in _pick(len(gaps), c, rng):
        tokens[gaps[j]] = ""
    return "".join(tokens)


def _split_sites(core: str) -> list[int]:
    """Positions where a space can go between two letters of a core of three characters or more."""
    if len(core) < 3:
        return []
    return [i for i in range(1, len(core)) if core[i - 1].isalpha() and core[i].isalpha()]


SPLIT = _Op("split", _split_sites, lambda core, i, _rng: core[:i] + " " + core[i:])


@register("word_split", modality="text", family="human_edits", label_preserving=True,
          tags=("human_edit", "ascii", "word"))
def word_split(text: str, severity: int, rng: np.random.Generator) -> str:
    """Put one space inside a share of the words: "women" -> "wo men" (Gröndahl et al.'s whitespace insertion).

    Severity: share of the eligible words, [0.1 .. 0.5]. Eligible: a core of three characters or more with two
    adjacent letters; the space goes between two letters, drawn. (`spaced_letters` spaces out every letter.)
    """
    c = [0.1, 0.2, 0.3, 0.4, 0.5][severity - 1]
    return _noise(text, c, rng, (SPLIT,))


# --- insertions that keep the meaning -----------------------------------------------------------------------

# Internet fillers that add tone, not content; none negates or hedges the statement ("idk", "jk", "no cap" would).
FILLERS = ("lol", "lmao", "tbh", "fr", "ngl", "smh", "imo", "bruh", "istg")


@register("filler_words", modality="text", family="human_edits", label_preserving=True,
          tags=("human_edit", "ascii", "word"))
def filler_words(text: str, severity: int, rng: np.random.Generator) -> str:
    """Insert internet fillers (lol, tbh, fr, ngl, smh...) at a share of the places between, before or after words.

    Severity: insertions = max(1, round(share * words)), share [0.1 .. 0.5], at distinct places among the n + 1;
    each filler drawn from FILLERS and followed by one space (`insert_adverb` inserts formal intensifiers).
    """
    c = [0.1, 0.2, 0.3, 0.4, 0.5][severity - 1]
    lead, pairs = split_words(text)
    where = _draw(rng, range(len(pairs) + 1), _count(c, len(pairs)))
    return rebuild_words(lead, pairs, insert=[(i, FILLERS[int(rng.integers(len(FILLERS)))]) for i in where])


def _repeat_sites(core: str) -> list[int]:
    """Letters people stretch: the vowels, and the last letter ("yesss")."""
    last = len(core) - 1
    return [i for i, ch in enumerate(core) if ch.isalpha() and (ch in VOWELS or i == last)]


def _repeat_letter(core: str, i: int, rng: np.random.Generator) -> str:
    return core[:i + 1] + core[i] * int(rng.integers(2, 5)) + core[i + 1:]


REPEAT = _Op("repeat", _repeat_sites, _repeat_letter)


@register("letter_repeat", modality="text", family="human_edits", label_preserving=True,
          tags=("human_edit", "ascii", "char"))
def letter_repeat(text: str, severity: int, rng: np.random.Generator) -> str:
    """Stretch one letter of a share of the words by 2 to 4 more of it: "so" -> "soooo", "hate" -> "hateee".

    Severity: share of the eligible words, [0.1 .. 0.5]. Eligible: a word whose core has a vowel or ends with a
    letter; the stretched letter is one of those, drawn.
    """
    c = [0.1, 0.2, 0.3, 0.4, 0.5][severity - 1]
    return _noise(text, c, rng, (REPEAT,))


# --- candidates for word-rewrite attacks --------------------------------------------------------------------

_MIX_DRAWS = 4  # leet_mix draws per word: the one edit here that is not a short enumeration


def human_candidates(word: str, rng: np.random.Generator, limit: int) -> list[str]:
    """Up to `limit` distinct human-plausible rewrites of one word, never the word itself, sorted before drawing.

    Every single-character LEET substitution (evasion's table), emoji substitution and emoji leetspeak, the word
    split by one space, its letters spaced or joined by . - _, each stretchable letter written three more times,
    and a few `leet_mix` draws; edge punctuation stays. More than `limit` of them: `limit` drawn with `rng`, in
    sorted order. The same word and generator state give the same list. No homoglyph and no invisible character,
    except the joiners inside an emoji sequence (🏳️‍🌈).
    """
    if not isinstance(word, str) or not word or any(ch.isspace() for ch in word):
        raise ValueError(f"human_candidates rewrites one word: a non-empty str without whitespace, got {word!r}")
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
        raise ValueError(f"limit must be a whole number >= 0, got {limit!r}")
    lead, core, trail = split_core(word)
    cores = set()
    for i in range(len(core)):
        cores |= {core[:i] + sub + core[i + 1:] for sub in _leet_options(core, i)}
    for i in _inner_vowels(core):
        cores |= {core[:i] + e + core[i + 1:] for e in _emoji_letters(core[i])}
    cores |= {core[:i] + " " + core[i:] for i in _split_sites(core)}
    cores |= {core[:i + 1] + core[i] * 3 + core[i + 1:] for i in _repeat_sites(core)}
    if _has_inner_gap(word):
        cores |= {sep.join(core) for sep in (" ",) + INTRA_WORD_SEPARATORS}
    cores |= set(EMOJI_WORDS.get(core.lower(), ()))
    out = {lead + c + trail for c in cores}
    if _mixable(word):
        out |= {_leet_mix(word, rng) for _ in range(_MIX_DRAWS)}
    out.discard(word)
    candidates = sorted(out)
    if len(candidates) > limit:
        candidates = [candidates[i] for i in sorted(rng.choice(len(candidates), limit, replace=False).tolist())]
    return candidates
