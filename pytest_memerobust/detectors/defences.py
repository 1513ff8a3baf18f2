"""Input normalisers a trust-and-safety team puts in front of a detector, and an adaptive attacker that re-chooses
the evasion edits they undo.

A normaliser is a pure, deterministic `fn(text) -> text` registered by name; a `Defence` chains some of them
(`Defence.parse("nfkc+confusables+zero_width")`). Each built-in undoes one family of `perturb/evasion.py` edits and
builds on that module's tables (look-alikes, leetspeak, zero-width characters) rather than keeping its own, so an
edit and its undoing cannot drift apart. Third parties add normalisers through the entry-point group
`pytest_memerobust.defences`: an entry point loads a module that calls `register`, or a callable registered under the
entry point's name.

Picture defences (`fn(pictures, detector) -> pictures`, run before the detector's own resize: `area_resize` and
`median_filter` against the image-scaling attack, perturb/scaling.py) are registered with `register_picture` and
join a Defence by name like normalisers (`Defence.parse("nfkc+area_resize")`); captions pass only through the
normalisers, pictures only through the picture defences.

A robustness number measured behind a defence is an overestimate if the attack keeps edits the defence undoes while
the same perturbation had edits it does not undo. `adaptive_perturb` re-chooses each undone edit among the
perturbation's other draws, so the defended number is what an attacker who knows the defence gets.
"""
from __future__ import annotations

import hashlib
import re
import unicodedata
from dataclasses import dataclass, field
from functools import lru_cache
from importlib.metadata import entry_points
from typing import Callable, Iterable, Mapping

from ..errors import BackendMissing, UnknownNameError
from ..perturb import evasion, scaling
from ..perturb.text import WHITESPACE, split_core

__all__ = [
    "ENTRY_POINT_GROUP", "DefendedDetector", "Defence", "Normaliser", "PictureDefence", "UnknownDefenceError",
    "adaptive_perturb", "check_defences", "get", "names", "parse", "picture_names", "register", "register_picture",
    "undoes",
]

ENTRY_POINT_GROUP = "pytest_memerobust.defences"
SEPARATOR = "+"  # joins normaliser names in a defence spec and its id


class UnknownDefenceError(UnknownNameError, ValueError):
    """An unknown normaliser name: a KeyError to registry callers, a ValueError to spec parsers."""


# --- registry -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Normaliser:
    name: str
    fn: Callable[[str], str] = field(repr=False)
    description: str = ""

    def __call__(self, text: str) -> str:
        return self.fn(text)


_REGISTRY: dict[str, Normaliser] = {}
_entry_points_loaded = False


def register(name: str, fn: Callable[[str], str], description: str = "") -> Callable[[str], str]:
    """Record `fn` under `name`; `description` defaults to its docstring's first line. Returns `fn`."""
    if not isinstance(name, str) or not name.strip() or SEPARATOR in name:
        raise ValueError(f"a normaliser name must be a non-empty str without {SEPARATOR!r}, got {name!r}")
    if not callable(fn):
        raise ValueError(f"normaliser {name!r} must be callable str -> str, got {type(fn).__name__}")
    old = _REGISTRY.get(name)
    # The same function registered again (a reloaded module) replaces its entry; another function may not.
    if old is not None and _origin(old.fn) != _origin(fn):
        raise ValueError(f"normaliser {name!r} is already registered by {old.fn.__module__}")
    doc = (fn.__doc__ or "").strip()
    _REGISTRY[name] = Normaliser(name, fn, description or (doc.splitlines()[0] if doc else ""))
    return fn


def _origin(fn) -> tuple:
    return getattr(fn, "__module__", None), getattr(fn, "__qualname__", repr(fn))


def _ensure_loaded() -> None:
    """Load every third-party entry point, once (the built-ins register when this module is imported)."""
    global _entry_points_loaded
    if _entry_points_loaded:
        return
    _entry_points_loaded = True
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        loaded = ep.load()  # a module registers on import; a bare callable is registered under the entry's name
        if callable(loaded) and ep.name not in _REGISTRY:
            register(ep.name, loaded)


@dataclass(frozen=True)
class PictureDefence:
    """A picture defence: `fn(pictures, detector)` -> the pictures the detector then reads (uint8 tensors)."""

    name: str
    fn: Callable = field(repr=False)
    description: str = ""

    def __call__(self, pictures: list, detector) -> list:
        return self.fn(pictures, detector)


_PICTURES: dict[str, PictureDefence] = {}


def register_picture(name: str, fn: Callable, description: str = "") -> Callable:
    """Record a picture defence `fn(pictures, detector) -> pictures` under `name`. Returns `fn`."""
    if not isinstance(name, str) or not name.strip() or SEPARATOR in name or name in _REGISTRY:
        raise ValueError(f"a picture defence name must be a new non-empty str without {SEPARATOR!r}, got {name!r}")
    doc = (fn.__doc__ or "").strip()
    _PICTURES[name] = PictureDefence(name, fn, description or (doc.splitlines()[0] if doc else ""))
    return fn


def get(name: str) -> Normaliser | PictureDefence:
    _ensure_loaded()
    found = _REGISTRY.get(name) or _PICTURES.get(name)
    if found is None:
        raise UnknownDefenceError("normaliser", name, {**_REGISTRY, **_PICTURES})
    return found


def names() -> list[str]:
    """The caption normalisers' names."""
    _ensure_loaded()
    return sorted(_REGISTRY)


def picture_names() -> list[str]:
    """The picture defences' names."""
    return sorted(_PICTURES)


# --- built-in normalisers -----------------------------------------------------------------------------------


def nfkc(text: str) -> str:
    """Unicode NFKC: folds fullwidth forms and math alphanumerics (fancy fonts) to plain letters and digits."""
    return unicodedata.normalize("NFKC", text)


@lru_cache(maxsize=None)
def _latin_of() -> tuple[Mapping[str, str], Mapping[str, str]]:
    """(look-alike -> the one Latin letter it imitates, ambiguous look-alike -> its lowercase reading): the
    inverse of evasion's homoglyph table. Three glyphs are ambiguous (Greek Iota, Cyrillic I and palochka imitate
    both "I" and "l"): one reads as the letter of its own case, and as the
    lowercase letter after a lowercase letter ("heΙΙo" is "hello", "Ιt" is "It")."""
    letters: dict[str, list] = {}
    for letter, glyphs in evasion.homoglyph_table().items():
        for glyph in glyphs:
            letters.setdefault(glyph, []).append(letter)
    single, after_lower = {}, {}
    for glyph, options in letters.items():
        same_case = sorted(x for x in options if x.isupper() == glyph.isupper()) or sorted(options)
        single[glyph] = same_case[0]
        lower = sorted(x for x in options if x.islower())
        if len(options) > 1 and lower:
            after_lower[glyph] = lower[0]
    return single, after_lower


def _foreign(ch: str, single: Mapping[str, str]) -> bool:
    """A letter of a look-alike script that imitates no Latin letter (Cyrillic "п"): the word is really in it."""
    from confusable_homoglyphs import categories  # installed with evasion's table

    return ch.isalpha() and not ch.isascii() and ch not in single \
        and categories.alias(ch) in evasion.HOMOGLYPH_SCRIPTS


def _latin_word(word: str, single: Mapping[str, str], after_lower: Mapping[str, str]) -> str:
    if any(_foreign(ch, single) for ch in word):
        return word  # "привет" stays Russian; a disguised word is Latin letters and look-alikes only
    out: list[str] = []
    for ch in word:
        if ch in after_lower and out and out[-1].islower():
            out.append(after_lower[ch])
        else:
            out.append(single.get(ch, ch))
    return "".join(out)


def confusables(text: str) -> str:
    """Map Cyrillic, Greek, Armenian and Cherokee look-alikes to the Latin letters they imitate (homoglyphs), in
    the words made of Latin letters and look-alikes only; a word with another letter of those scripts is kept."""
    single, after_lower = _latin_of()
    tokens = WHITESPACE.split(text)  # words at even indices, separators at odd ones
    return "".join(tok if k % 2 else _latin_word(tok, single, after_lower) for k, tok in enumerate(tokens))


# evasion's zero-width characters, the soft hyphen, and the bidi embeddings, overrides, isolates and marks
INVISIBLE = (*evasion.ZERO_WIDTH, "\u00ad", *map(chr, range(0x202A, 0x202F)), *map(chr, range(0x2066, 0x206A)),
             "\u200e", "\u200f", "\u061c")
_DROP_INVISIBLE = dict.fromkeys(map(ord, INVISIBLE))


def zero_width(text: str) -> str:
    """Delete zero-width characters, soft hyphens and bidi controls: none shows, all split a word for a tokenizer."""
    return text.translate(_DROP_INVISIBLE)


# leet character -> the (lowercase) letter it stands for: evasion's table inverted ("4" and "@" -> "a")
_UNLEET = {sub: letter.lower() for letter, subs in evasion._LEET_OPTIONS.items() for sub in subs}
_LEET_SYMBOLS = "".join(sorted(ch for ch in _UNLEET if not ch.isalnum()))  # "!$@"
_SENTENCE_END = "!"  # at the end of a word it is punctuation, not an "i"
# A word's edges: leading punctuation that is no leet symbol; trailing punctuation, a final "!" included.
_LEET_EDGES = re.compile(rf"^([^\w{re.escape(_LEET_SYMBOLS)}]*)(.*?)"
                         rf"([^\w{re.escape(_LEET_SYMBOLS.replace(_SENTENCE_END, ''))}]*)$", re.DOTALL)
_NUMBER_WORD = re.compile(r"(\d+)(st|nd|rd|th|s)", re.IGNORECASE)


def _is_number_word(core: str) -> bool:
    """An ordinal or a decade (1st, 22nd, 13th, 90s, 1980s), not leetspeak ("4nd" is "and")."""
    m = _NUMBER_WORD.fullmatch(core)
    if not m:
        return False
    digits, suffix = m[1], m[2].lower()
    if suffix == "s":
        return digits.endswith("0")
    n = int(digits)
    return suffix == ("th" if n % 100 in (11, 12, 13) else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th"))


def _unleet_word(word: str) -> str:
    lead, core, trail = _LEET_EDGES.match(word).groups()
    if not any(ch.isalpha() for ch in core) or _is_number_word(core):
        return word
    return lead + "".join(_UNLEET.get(ch, ch) for ch in core) + trail


def leetspeak(text: str) -> str:
    """Read digits and symbols inside words as the letters they stand for (h4t3 -> hate); "2024", "5 cats", "3rd"
    and a trailing "!" stay. Folded letters come out lowercase; a word with no letter left is kept as written."""
    tokens = WHITESPACE.split(text)  # words at even indices, separators at odd ones
    return "".join(tok if k % 2 else _unleet_word(tok) for k, tok in enumerate(tokens))


_SPLIT_WORD = re.compile(r"[^\W\d_](?:[.\-_][^\W\d_]){2,}")  # h.a.t.e, h-a-t-e, h_a_t_e: >= 3 single letters
MIN_SPACED_LETTERS = 3  # "h a t e" joins, "i s" does not: two single letters are too often real words


def _joined_letters(word: str) -> str:
    lead, core, trail = split_core(word)
    if _SPLIT_WORD.fullmatch(core):
        core = re.sub(r"[.\-_]", "", core)
    return lead + core + trail


def whitespace(text: str) -> str:
    """Collapse whitespace runs to one space (trimming the ends) and join spaced, dotted, hyphenated or underscored
    letters back into words: "h a t e them" -> "hate them", "h.a.t.e" -> "hate"."""
    words = [_joined_letters(w) for w in text.split()]
    parts = [split_core(w) for w in words]  # (lead, core, trail)

    def letter(k: int) -> bool:
        return len(parts[k][1]) == 1 and parts[k][1].isalpha()

    out, i = [], 0
    while i < len(words):
        j = i + 1  # words[i:j]: a run of single letters, punctuation only before its first and after its last
        if letter(i):
            while j < len(words) and letter(j) and not parts[j][0] and not parts[j - 1][2]:
                j += 1
        out.extend(["".join(words[i:j])] if j - i >= MIN_SPACED_LETTERS else words[i:j])
        i = j
    return " ".join(out)


def case(text: str) -> str:
    """Casefold: mixed case (hAtE) reads as one word to a cased tokenizer."""
    return text.casefold()


SPELLING_EXTRA = "pip install 'pytest-memerobust[defences]'"


@lru_cache(maxsize=None)
def _spell_checker():
    try:
        from spellchecker import SpellChecker
    except ImportError as err:
        raise BackendMissing(f"the 'spelling' normaliser needs pyspellchecker, which the [defences] extra installs: "
                             f"{SPELLING_EXTRA} (its English dictionary ships inside the wheel)") from err
    return SpellChecker(language="en")


@lru_cache(maxsize=1 << 16)
def _corrected(core: str) -> str:
    """The spell checker's best word for `core` (slow: edit distance 2), with the case of its first letter."""
    checker = _spell_checker()
    lower = core.lower()
    if lower in checker:
        return core
    best = checker.correction(lower)
    if not best:
        return core
    return best[:1].upper() + best[1:] if core[:1].isupper() else best


def _spell_word(word: str) -> str:
    lead, core, trail = split_core(word)
    return lead + _corrected(core) + trail if core.isalpha() else word


def spelling(text: str) -> str:
    """Correct each all-letter word with pyspellchecker's English dictionary, keeping punctuation and whitespace."""
    _spell_checker()  # the missing extra is said even for a caption with nothing to correct
    tokens = WHITESPACE.split(text)
    return "".join(tok if k % 2 else _spell_word(tok) for k, tok in enumerate(tokens))


for _fn in (nfkc, confusables, zero_width, leetspeak, whitespace, case, spelling):
    register(_fn.__name__, _fn)
for _fn in (scaling.area_resize, scaling.median_filter):
    register_picture(_fn.__name__, _fn)


# --- composed defences --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Defence:
    """Normalisers (and picture defences) applied in order; `id` ("nfkc+confusables") names it in reports and
    specs. `names` may be given as a "+"-joined str too."""

    names: tuple[str, ...]

    def __post_init__(self):
        given = self.names.split(SEPARATOR) if isinstance(self.names, str) else self.names
        chosen = tuple(n.strip() if isinstance(n, str) else n for n in given)
        if not chosen:
            raise ValueError(f"a defence needs at least one normaliser; known: {', '.join(names())}")
        for name in chosen:
            get(name)  # an unknown one raises UnknownDefenceError, naming it and listing the known ones
        object.__setattr__(self, "names", chosen)

    @classmethod
    def parse(cls, spec: str | Iterable[str]) -> "Defence":
        """A defence from "nfkc+confusables" or ["nfkc", "confusables"]."""
        return cls(spec)

    @property
    def id(self) -> str:
        return SEPARATOR.join(self.names)

    def __call__(self, text: str) -> str:
        for name in self.names:
            if name in _REGISTRY:
                text = _REGISTRY[name](text)
        return text

    @property
    def guards_pictures(self) -> bool:
        return any(name in _PICTURES for name in self.names)

    def pictures(self, pictures: list, detector) -> list:
        """`pictures` as `detector` reads them behind this defence (None, a caption-only row, stays None)."""
        rows = [i for i, x in enumerate(pictures) if x is not None]
        out = list(pictures)
        if rows:
            kept = [pictures[i] for i in rows]
            for name in self.names:
                if name in _PICTURES:
                    kept = _PICTURES[name](kept, detector)
            for i, x in zip(rows, kept):
                out[i] = x
        return out

    def check(self) -> None:
        """Raise BackendMissing naming this defence when one of its normalisers cannot run on this machine (its
        extra is not installed): a run says so once, before any case, instead of skipping every defended case. A
        normaliser that needs a backend says so even on an empty caption (as `spelling` does)."""
        for name in (n for n in self.names if n in _REGISTRY):
            try:
                _REGISTRY[name]("")
            except BackendMissing as exc:
                raise BackendMissing(f"the defence {self.id!r} cannot run here: {exc}") from None


parse = Defence.parse


def check_defences(used: Iterable[tuple[str | None, str]]) -> None:
    """Before a run: each (defence id or None, the suite file that asks for it) can run here; the first that
    cannot raises BackendMissing naming the defence, the suite, and what to install."""
    seen = set()
    for defence_id, suite in used:
        if defence_id is None or defence_id in seen:
            continue
        seen.add(defence_id)
        try:
            Defence.parse(defence_id).check()
        except BackendMissing as exc:
            raise BackendMissing(f"{suite}: {exc}; install it, or leave out the defended cases (e.g. -k 'not "
                                 f"defended')") from None


class DefendedDetector:
    """A detector behind a defence, for the attacks that query it: every caption it is asked about is normalised
    first (and every picture passes its picture defences), so a search over edits only keeps the ones the defence
    lets through. Everything else is the wrapped
    detector's; its `fingerprint` names the defence too, so a trigger or pattern fitted behind it is cached apart.
    (Gradient attacks that read token embeddings directly still see the raw caption; the engine normalises their
    output before the detector reads it.)"""

    def __init__(self, detector, defence: Defence):
        self.wrapped, self.defence = detector, defence

    def __getattr__(self, name: str):
        found = getattr(self.wrapped, name)
        if name == "predict_with_abstentions":  # only a detector that can decline has it
            return lambda images, texts, *rest, **kw: found(self._pictures(images), self._normalised(texts), *rest,
                                                            **kw)
        if name == "encode_images":  # only a detector with its own image encoder has it
            return lambda images, *rest, **kw: found(self._pictures(images), *rest, **kw)
        return found

    @property
    def fingerprint(self) -> str:
        return f"{getattr(self.wrapped, 'fingerprint', type(self.wrapped).__name__)}+defence={self.defence.id}"

    def _normalised(self, texts) -> list:
        return [None if text is None else self.defence(text) for text in texts]

    def _pictures(self, images) -> list:
        return self.defence.pictures(list(images), self.wrapped) if self.defence.guards_pictures else images

    def encode_texts(self, texts, *args, **kwargs):
        return self.wrapped.encode_texts(self._normalised(texts), *args, **kwargs)

    @property
    def caption_buckets(self):
        """The wrapped detector's caption buckets (engine/features.shaped_batches) of the captions as it reads them,
        normalised; None when it pads no caption by bucket."""
        buckets = getattr(self.wrapped, "caption_buckets", None)
        return None if buckets is None else (lambda texts: buckets(self._normalised(texts)))

    def predict_proba(self, images, texts, *args, **kwargs):
        return self.wrapped.predict_proba(self._pictures(images), self._normalised(texts), *args, **kwargs)


def _as_defence(defence) -> Callable[[str], str]:
    """A Defence, a normaliser or any str -> str callable as it is; a spec parsed."""
    return defence if callable(defence) else Defence.parse(defence)


def undoes(defence, clean: str, perturbed: str) -> bool:
    """The defence maps the perturbed caption to what it maps the clean one to: the edit is lost on the detector."""
    defence = _as_defence(defence)
    return defence(perturbed) == defence(clean)


# --- adaptive attack ----------------------------------------------------------------------------------------

ADAPTIVE_TRIES = 8


def _sub_id(meme_id, *where) -> str:
    """The meme id of one re-draw: a hash of the meme's own id and (word index, try), so no two draws share one."""
    return hashlib.blake2b("\0".join(map(str, ("adaptive", meme_id, *where))).encode(), digest_size=12).hexdigest()


def adaptive_perturb(perturbation_name: str, text: str, severity: int | None, key, defence,
                     tries: int = ADAPTIVE_TRIES) -> str:
    """The perturbation's edit of `text`, with each edit the defence undoes re-chosen among those it does not.

    `key` is what `Perturbation.rng` takes besides the severity: a (seed, meme id) pair, or a meme id alone
    (seed 0); the first draw is exactly the one `Perturbation.apply` gives that meme. Then, when the caption keeps
    its number of words, each word whose edit the defence undoes (defence(edited) == defence(clean word)) is
    re-drawn by applying the perturbation to the clean word alone, at the same severity, with the generators of
    keys derived from (key, word index, try); the first draw the defence does not undo replaces it. When none of
    the `tries` does (e.g. `confusables` against a word with no ambiguous letter), the word keeps its first,
    undone edit: the perturbation has nothing better to offer there, and the caption stays the non-adaptive one.
    When the perturbation changes the number of words (spaced letters, emoji), the whole caption is re-drawn
    instead: the first draw whose defended form differs from the defended clean caption, else the first draw.
    """
    from ..perturb import get as get_perturbation

    p = get_perturbation(perturbation_name)
    if p.modality != "text" or p.needs_model or p.traits.caption_source:
        raise ValueError(f"adaptive_perturb re-draws a caption edit: {perturbation_name!r} is not a caption "
                         f"perturbation that works without a detector")
    if not isinstance(tries, int) or tries < 0:
        raise ValueError(f"tries must be a whole number >= 0, got {tries!r}")
    defend = _as_defence(defence)
    seed, meme_id = key if isinstance(key, tuple) and len(key) == 2 else (0, key)

    def draw(x: str, *where) -> str:
        sub = _sub_id(meme_id, *where) if where else meme_id
        return p(x, severity, p.rng(seed, sub, severity))

    first = draw(text)
    clean_tokens, edited_tokens = WHITESPACE.split(text), WHITESPACE.split(first)
    if len(clean_tokens) == len(edited_tokens):
        for k in range(0, len(clean_tokens), 2):  # words at even indices
            word = clean_tokens[k]
            if edited_tokens[k] == word or defend(edited_tokens[k]) != defend(word):
                continue  # not edited, or an edit the defence leaves
            target = defend(word)
            for t in range(tries):
                redrawn = draw(word, "word", k // 2, t)
                if defend(redrawn) != target:
                    edited_tokens[k] = redrawn
                    break
        return "".join(edited_tokens)
    target = defend(text)
    if defend(first) != target:
        return first
    for t in range(tries):
        redrawn = draw(text, "caption", t)
        if defend(redrawn) != target:
            return redrawn
    return first
