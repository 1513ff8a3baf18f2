"""Caption corruptions of the adaptation-robustness benchmark (Chen et al., "Benchmarking Robustness of Adaptation
Methods on Pre-trained Vision-Language Models", appendix A.2 and table 4), which follows Qiu et al.'s MMRobustness
and textflint/nlpaug.

Every perturbation here carries the tag "adaptation_benchmark", a level tag ("char", "word" or "sentence") and the
paper's sub-category as its family. Where the paper's code (github.com/adarobustness/corruption,
text_corruption/corruption_methods.py) gives a table (error rates 0.1 .. 0.5 for its character corruptions, random
word insert/delete/swap and the synonym swaps) it is used; the paper runs Punct, InsertAdv, AppendIrr, the positional
drops and Shuffle Order at one level only, so their five levels here are this module's choice, documented on each
function. Differences from the reference code, on purpose: edits count exactly max(1, round(share * n)) sites
drawn without replacement (the reference flips a coin per character), drops remove words instead of writing
[UNK], whitespace between surviving words is kept, and a caption never becomes empty.

Perturbations that need a resource this package does not ship (WordNet, word vectors, a POS tagger, style-transfer
models) are registered with the tag "needs_backend" and raise `BackendMissing`; `BACKEND_REASONS` says why, so a
suite can skip them with that reason. Nothing is ever downloaded at run time.
"""
from __future__ import annotations

import re
from typing import Callable, Sequence

import numpy as np

from .. import errors
from .registry import register
from .text import _check_caption, _is_key, _neighbour, split_core

_LETTERS = "abcdefghijklmnopqrstuvwxyz"
_PAIR = re.compile(r"(\S+)(\s*)")


# --- shared helpers -----------------------------------------------------------------------------------------


def _count(share: float, n: int) -> int:
    """How many of n sites a share hits: max(1, round(share * n)), 0 when there is no site."""
    return max(1, round(share * n)) if n else 0


def _pick(rng: np.random.Generator, sites: Sequence, k: int, span: Callable | None = None) -> list:
    """Up to k of `sites`, drawn without replacement, in draw order. With `span` (site -> set of positions), a draw
    that overlaps an earlier one is passed over, so the edits never touch the same character twice."""
    if not sites or k <= 0:
        return []
    if span is None:
        return [sites[i] for i in rng.choice(len(sites), size=min(k, len(sites)), replace=False).tolist()]
    taken, used = [], set()
    for i in rng.permutation(len(sites)).tolist():
        if len(taken) == k:
            break
        if used.isdisjoint(s := span(sites[i])):
            used |= s
            taken.append(sites[i])
    return taken


def _splice(text: str, edits: list) -> str:
    """Apply non-overlapping (start, end, replacement) edits."""
    out, at = [], 0
    for start, end, new in sorted(edits):
        out += [text[at:start], new]
        at = end
    return "".join(out) + text[at:]


def _like(ch: str, letter: str) -> str:
    return letter.upper() if ch.isupper() else letter


def _letter(rng: np.random.Generator, other_than: str = "") -> str:
    options = _LETTERS.replace(other_than.lower(), "") if other_than.isalpha() else _LETTERS
    return options[int(rng.integers(len(options)))]


def split_words(text: str) -> tuple[str, list[tuple[str, str]]]:
    """(leading whitespace, [(word, whitespace after it), ...]); the last word's whitespace is the trailing one."""
    text = _check_caption(text)
    return re.match(r"\s*", text).group(), [(m.group(1), m.group(2)) for m in _PAIR.finditer(text)]


def rebuild_words(lead: str, pairs: list, drop=(), insert=()) -> str:
    """The caption without the words at indices `drop` and with each (index, word) of `insert` placed before that
    word (index len(pairs): at the end). A new word is followed by one space, surviving words keep their spacing
    and the caption's trailing whitespace stays at its end."""
    last, out = len(pairs) - 1, []
    for i, (word, gap) in enumerate(pairs):
        out += [(new, " ") for at, new in insert if at == i]
        if i not in drop:
            out.append((word, gap if i < last else " "))
    out += [(new, " ") for at, new in insert if at > last]
    out[-1] = (out[-1][0], pairs[-1][1])
    return lead + "".join(w + g for w, g in out)


# --- character level ----------------------------------------------------------------------------------------

# Common OCR confusions (pattern -> what a recogniser may read instead): glyph merges and splits (rn/m, cl/d,
# vv/w), the l/1/I and O/0 families, round letters (e/c, o/0), digit-letter look-alikes, and the r->k, b->6, t->l
# readings of the paper's figure 9 ("gkass", "6e", "shorl"). Case-sensitive, as glyphs are.
OCR_CONFUSIONS: dict[str, tuple[str, ...]] = {
    "rn": ("m",), "m": ("rn",), "cl": ("d",), "d": ("cl",), "vv": ("w",), "w": ("vv",),
    "l": ("1", "I"), "I": ("l", "1"), "1": ("l", "I"), "i": ("l", "1"), "t": ("l",),
    "O": ("0", "D"), "D": ("O",), "o": ("0",), "0": ("O", "o"), "e": ("c",), "c": ("e",),
    "S": ("5",), "s": ("5",), "5": ("S",), "B": ("8",), "8": ("B",), "b": ("6", "h"), "6": ("b",), "h": ("b",),
    "g": ("9", "q"), "9": ("g",), "q": ("g",), "Z": ("2",), "z": ("2",), "2": ("Z",), "r": ("k",), "u": ("v",),
}

# Misspelling rules (name, pattern on lowercase letters, replacement), each a habit of real writers.
SPELLING_RULES: tuple[tuple[str, str, str], ...] = (
    ("undouble", r"([a-z])\1", r"\1"),  # coffee -> cofee
    ("double", r"(?<=[aeiou])([bdfglmnprt])(?=[aeiouy])", r"\1\1"),  # later -> latter
    ("ie_ei", r"ie", "ei"),  # believe -> beleive
    ("ei_ie", r"ei", "ie"),  # receive -> recieve
    ("silent_e", r"(?<=[a-z][aeiou][b-df-hj-np-tv-z])e$", ""),  # make -> mak
    ("ph_f", r"ph", "f"),  # phone -> fone
    ("ck_k", r"ck", "k"),  # back -> bak
    ("soft_c", r"c(?=[ei])", "s"),  # necessary -> nesessary
    ("ight_ite", r"ight", "ite"),  # tonight -> tonite
    ("wh_w", r"^wh", "w"),  # when -> wen
    ("able_ible", r"able$", "ible"),
    ("ible_able", r"ible$", "able"),
    ("ance_ence", r"ance$", "ence"),
    ("ence_ance", r"ence$", "ance"),
)
_SPELLING = [(name, re.compile(pattern), repl) for name, pattern, repl in SPELLING_RULES]

PUNCTUATION_MARKS = (".", ",", "!", "?", ";", ":")  # AEDA's marks (Karimi et al., 2021)


def _char_sites(text: str, share: float, rng: np.random.Generator, sites: list, n: int, edit: Callable,
                span: Callable | None = None) -> str:
    """Hit max(1, round(share * n)) of `sites`; `edit(site, rng)` gives its (start, end, replacement)."""
    return _splice(text, [edit(s, rng) for s in _pick(rng, sites, _count(share, n), span)])


@register("ocr", modality="text", family="char_modification", label_preserving=True,
          tags={"adaptation_benchmark", "char"})
def ocr(text: str, severity: int, rng: np.random.Generator) -> str:
    """Replace a share of the characters that have an OCR confusion (rn<->m, l->1, O->0, e->c, ...)."""
    c = [0.1, 0.2, 0.3, 0.4, 0.5][severity - 1]
    text = _check_caption(text)
    sites = [(i, p) for i in range(len(text)) for p in OCR_CONFUSIONS if text.startswith(p, i)]

    def confuse(site, r):
        i, pattern = site
        options = OCR_CONFUSIONS[pattern]
        return i, i + len(pattern), options[int(r.integers(len(options)))]

    n = len({i for i, _ in sites})  # characters where a confusion can start
    return _char_sites(text, c, rng, sites, n, confuse, span=lambda s: set(range(s[0], s[0] + len(s[1]))))


@register("keyboard", modality="text", family="char_modification", label_preserving=True,
          tags={"adaptation_benchmark", "char"})
def keyboard(text: str, severity: int, rng: np.random.Generator) -> str:
    """Replace a share of all letters by a QWERTY neighbour (char_keyboard, by contrast, hits one letter per word)."""
    c = [0.1, 0.2, 0.3, 0.4, 0.5][severity - 1]
    text = _check_caption(text)
    sites = [i for i, ch in enumerate(text) if _is_key(ch)]
    return _char_sites(text, c, rng, sites, len(sites), lambda i, r: (i, i + 1, _neighbour(text[i], r)))


def _char_random(text: str, share: float, rng: np.random.Generator, op: str) -> str:
    """Random a-z edits on a share of the non-whitespace characters; whitespace and the word count are kept.

    insert: a letter after the character; replace: a different letter, in its case; delete: the character, never
    the first of a word (so no word vanishes); swap: the character and the next one of the same word, when they
    differ, each swap counting for two characters and no character swapped twice."""
    text = _check_caption(text)
    chars = [i for i, ch in enumerate(text) if not ch.isspace()]
    inside = [i for i in chars if i + 1 < len(text) and not text[i + 1].isspace()]  # not the last of its word
    if op == "insert":
        return _char_sites(text, share, rng, chars, len(chars), lambda i, r: (i + 1, i + 1, _like(text[i], _letter(r))))
    if op == "replace":
        return _char_sites(text, share, rng, chars, len(chars),
                           lambda i, r: (i, i + 1, _like(text[i], _letter(r, other_than=text[i]))))
    if op == "delete":
        return _char_sites(text, share, rng, [i + 1 for i in inside], len(chars), lambda i, r: (i, i + 1, ""))
    if op == "swap":
        sites = [i for i in inside if text[i] != text[i + 1]]
        return _char_sites(text, share / 2, rng, sites, len(chars), lambda i, r: (i, i + 2, text[i + 1] + text[i]),
                           span=lambda i: {i, i + 1})
    raise ValueError(f"unknown character operation {op!r}")


@register("char_random_insert", modality="text", family="char_modification", label_preserving=True,
          tags={"adaptation_benchmark", "char"})
def char_random_insert(text: str, severity: int, rng: np.random.Generator) -> str:
    """Insert a random letter a-z after a share of the characters (whitespace is never hit)."""
    c = [0.1, 0.2, 0.3, 0.4, 0.5][severity - 1]
    return _char_random(text, c, rng, "insert")


@register("char_random_replace", modality="text", family="char_modification", label_preserving=True,
          tags={"adaptation_benchmark", "char"})
def char_random_replace(text: str, severity: int, rng: np.random.Generator) -> str:
    """Replace a share of the characters by a different random letter a-z, keeping upper case upper."""
    c = [0.1, 0.2, 0.3, 0.4, 0.5][severity - 1]
    return _char_random(text, c, rng, "replace")


@register("char_random_swap", modality="text", family="char_modification", label_preserving=True,
          tags={"adaptation_benchmark", "char"})
def char_random_swap(text: str, severity: int, rng: np.random.Generator) -> str:
    """Swap adjacent characters inside words so that about a share of the characters move."""
    c = [0.1, 0.2, 0.3, 0.4, 0.5][severity - 1]
    return _char_random(text, c, rng, "swap")


@register("char_random_delete", modality="text", family="char_modification", label_preserving=True,
          tags={"adaptation_benchmark", "char"})
def char_random_delete(text: str, severity: int, rng: np.random.Generator) -> str:
    """Delete a share of the characters, never the first one of a word, so every word keeps at least one."""
    c = [0.1, 0.2, 0.3, 0.4, 0.5][severity - 1]
    return _char_random(text, c, rng, "delete")


@register("punctuation", modality="text", family="char_modification", label_preserving=True,
          tags={"adaptation_benchmark", "char"})
def punctuation(text: str, severity: int, rng: np.random.Generator) -> str:
    """Attach a random mark (. , ! ? ; :) after a share of the words, so between words or at the end (AEDA)."""
    c = [0.1, 0.2, 0.3, 0.4, 0.5][severity - 1]  # the paper has one level; AEDA inserts up to a third of n
    lead, pairs = split_words(text)
    for i in _pick(rng, range(len(pairs)), _count(c, len(pairs))):
        mark = PUNCTUATION_MARKS[int(rng.integers(len(PUNCTUATION_MARKS)))]
        pairs[i] = (pairs[i][0] + mark, pairs[i][1])
    return rebuild_words(lead, pairs)


def _misspellings(core: str) -> list[str]:
    """Every word one misspelling rule, applied at one place, makes of `core`."""
    return [core[:m.start()] + m.expand(repl) + core[m.end():]
            for _, rule, repl in _SPELLING for m in rule.finditer(core)]


@register("spelling_error", modality="text", family="char_modification", label_preserving=True,
          tags={"adaptation_benchmark", "char"})
def spelling_error(text: str, severity: int, rng: np.random.Generator) -> str:
    """Misspell a share of the words with one common misspelling rule each (doubling, ie/ei, silent e, ph->f, ...).

    A misspelling can land on another real word (hate -> hat by the silent-e rule); readers still read the
    intended one, so the label is taken to survive, as for typos."""
    c = [0.1, 0.2, 0.3, 0.4, 0.5][severity - 1]  # the paper's code: SpellingError(trans_p=0.1 .. 0.5) over words
    lead, pairs = split_words(text)
    eligible = [i for i, (word, _) in enumerate(pairs) if _misspellings(split_core(word)[1])]
    for i in _pick(rng, eligible, _count(c, len(eligible))):
        before, core, after = split_core(pairs[i][0])
        options = _misspellings(core)
        pairs[i] = (before + options[int(rng.integers(len(options)))] + after, pairs[i][1])
    return rebuild_words(lead, pairs)


# --- word level ---------------------------------------------------------------------------------------------

ADVERBS = ("really", "actually", "literally", "honestly", "basically", "totally", "seriously", "simply", "truly",
           "just", "clearly", "definitely", "certainly", "absolutely", "genuinely")
IRRELEVANT_PHRASES = ("anyway, that is all for today.", "posted on a tuesday.", "the weather was nice today.",
                      "no further comment.", "this picture was taken with a phone.", "seen somewhere online.",
                      "more at eleven.", "coffee first, then everything else.", "thanks for reading.",
                      "that is what the caption says.")
# Neutral function words for random_word_insert; no negation, so an insertion cannot flip a statement.
STOP_WORDS = ("the", "a", "an", "of", "to", "and", "in", "on", "at", "with", "that", "this", "it", "is", "was",
              "for", "as", "by", "from", "so", "then", "just", "also", "there", "some")
NEGATIONS = frozenset({"not", "no", "never", "nor", "none", "nobody", "nothing", "neither", "nowhere", "cannot",
                       "don't", "doesn't", "didn't", "isn't", "aren't", "wasn't", "weren't", "won't", "can't",
                       "shouldn't", "wouldn't", "couldn't", "ain't", "dont", "doesnt", "didnt", "isnt", "cant",
                       "wont"})


@register("insert_adverb", modality="text", family="text_addition", label_preserving=True,
          tags={"adaptation_benchmark", "word"})
def insert_adverb(text: str, severity: int, rng: np.random.Generator) -> str:
    """Insert an intensifying adverb from ADVERBS before a share of the words, chosen at random.

    The paper (textflint InsertAdv) puts one before each verb; without a POS tagger the word is a random one
    (`pos_aware_insert` is the tagged variant). Intensifiers add emphasis, not meaning."""
    c = [0.1, 0.2, 0.3, 0.4, 0.5][severity - 1]  # share of the words that get an adverb (paper: one level)
    lead, pairs = split_words(text)
    where = _pick(rng, range(len(pairs)), _count(c, len(pairs)))
    return rebuild_words(lead, pairs, insert=[(i, ADVERBS[int(rng.integers(len(ADVERBS)))]) for i in where])


@register("append_irrelevant_phrase", modality="text", family="text_addition", label_preserving=True,
          tags={"adaptation_benchmark", "word"})
def append_irrelevant_phrase(text: str, severity: int, rng: np.random.Generator) -> str:
    """Append distinct neutral phrases (a shipped list) after the caption, one per severity level."""
    k = [1, 2, 3, 4, 5][severity - 1]  # number of phrases (paper: AppendIrr, one level)
    lead, pairs = split_words(text)
    phrases = [IRRELEVANT_PHRASES[i] for i in _pick(rng, range(len(IRRELEVANT_PHRASES)), k)]
    return rebuild_words(lead, pairs, insert=[(len(pairs), " ".join(phrases))])


@register("random_word_insert", modality="text", family="text_addition", label_preserving=True,
          tags={"adaptation_benchmark", "word"})
def random_word_insert(text: str, severity: int, rng: np.random.Generator) -> str:
    """Insert words drawn from the caption's own words and function words at a share of the gaps (the paper: [UNK]).

    Negations are never drawn, so a statement cannot be flipped; a repeated word adds emphasis at most."""
    c = [0.1, 0.2, 0.3, 0.4, 0.5][severity - 1]  # the paper's code: int(n * 0.1 .. 0.5) insertions
    lead, pairs = split_words(text)
    own = [core.lower() for core in (split_core(w)[1] for w, _ in pairs) if core and core.lower() not in NEGATIONS]
    pool = own + list(STOP_WORDS)
    where = _pick(rng, range(len(pairs) + 1), _count(c, len(pairs)))
    return rebuild_words(lead, pairs, insert=[(i, pool[int(rng.integers(len(pool)))]) for i in where])


def _drop_ends(text: str, k: int, first: bool, last: bool) -> str:
    """Drop k words from the start and/or the end, keeping at least one word (with both ends, the start gives
    up its word first when only an odd number may go)."""
    lead, pairs = split_words(text)
    n = len(pairs)
    front = min(k, n - 1 if not last else -(-(n - 1) // 2)) if first else 0
    back = min(k, n - 1 - front) if last else 0
    return rebuild_words(lead, pairs, drop=set(range(front)) | set(range(n - back, n)))


@register("drop_first", modality="text", family="positional_drop", label_preserving=False,
          tags={"adaptation_benchmark", "word"})
def drop_first(text: str, severity: int, rng: np.random.Generator) -> str:
    """Drop the first k words (k = severity; one word always stays); the dropped words may carry the meaning."""
    k = [1, 2, 3, 4, 5][severity - 1]  # the paper drops one word, at one level
    return _drop_ends(text, k, first=True, last=False)


@register("drop_last", modality="text", family="positional_drop", label_preserving=False,
          tags={"adaptation_benchmark", "word"})
def drop_last(text: str, severity: int, rng: np.random.Generator) -> str:
    """Drop the last k words (k = severity; one word always stays); the dropped words may carry the meaning."""
    k = [1, 2, 3, 4, 5][severity - 1]
    return _drop_ends(text, k, first=False, last=True)


@register("drop_first_and_last", modality="text", family="positional_drop", label_preserving=False,
          tags={"adaptation_benchmark", "word"})
def drop_first_and_last(text: str, severity: int, rng: np.random.Generator) -> str:
    """Drop k words at each end (k = severity; one word always stays); the dropped words may carry the meaning."""
    k = [1, 2, 3, 4, 5][severity - 1]
    return _drop_ends(text, k, first=True, last=True)


@register("shuffle_order", modality="text", family="positional_drop", label_preserving=False,
          tags={"adaptation_benchmark", "sentence"})
def shuffle_order(text: str, severity: int, rng: np.random.Generator) -> str:
    """Move a share of the words along one random cycle (each moves); severity 5 shuffles all, as the paper does.

    Word order carries roles ("X hates Y" -> "Y hates X"), so the label may change."""
    c = [0.2, 0.4, 0.6, 0.8, 1.0][severity - 1]  # share of the words that move (paper: 1.0 only)
    lead, pairs = split_words(text)
    where = _pick(rng, range(len(pairs)), min(len(pairs), max(2, round(c * len(pairs)))))
    if len(where) < 2:
        return rebuild_words(lead, pairs)
    cycle = list(where)
    for i in range(len(cycle) - 1, 0, -1):  # Sattolo: a uniformly random single cycle, so no word stays put
        j = int(rng.integers(i))
        cycle[i], cycle[j] = cycle[j], cycle[i]
    words = [w for w, _ in pairs]
    for src, dst in zip(where, cycle):
        pairs[dst] = (words[src], pairs[dst][1])
    return rebuild_words(lead, pairs)


@register("random_delete", modality="text", family="positional_drop", label_preserving=False,
          tags={"adaptation_benchmark", "word"})
def random_delete(text: str, severity: int, rng: np.random.Generator) -> str:
    """Delete a share of the words, at least one stays; a deleted negation or target changes the meaning."""
    c = [0.1, 0.2, 0.3, 0.4, 0.5][severity - 1]  # the paper's code: int(n * 0.1 .. 0.5) deletions
    lead, pairs = split_words(text)
    n = len(pairs)
    return rebuild_words(lead, pairs, drop=set(_pick(rng, range(n), min(_count(c, n), n - 1))))


@register("random_swap", modality="text", family="text_swap", label_preserving=False,
          tags={"adaptation_benchmark", "word"})
def random_swap(text: str, severity: int, rng: np.random.Generator) -> str:
    """Swap disjoint random pairs of words so that a share of the words move; roles can swap, so can the label."""
    c = [0.1, 0.2, 0.3, 0.4, 0.5][severity - 1]  # share of the words moved: max(1, round(c * n / 2)) pairs
    lead, pairs = split_words(text)
    drawn = _pick(rng, range(len(pairs)), 2 * min(_count(c / 2, len(pairs)), len(pairs) // 2))
    words = [w for w, _ in pairs]
    for a, b in zip(drawn[0::2], drawn[1::2]):
        pairs[a], pairs[b] = (words[b], pairs[a][1]), (words[a], pairs[b][1])
    return rebuild_words(lead, pairs)


# --- needing a backend --------------------------------------------------------------------------------------


class BackendMissing(errors.BackendMissing):  # suite items turn errors.BackendMissing into a skip
    """A perturbation needs a resource (corpus, vectors, tagger, model) that is not installed here."""

    def __init__(self, name: str):
        super().__init__(name)  # args = (name,), so the error pickles
        self.name = name
        self.reason = BACKEND_REASONS.get(name, f"{name} needs a backend that is not installed")

    def __str__(self) -> str:
        return self.reason


BACKEND_REASONS: dict[str, str] = {
    "synonym_replace": "synonym_replace needs WordNet: pip install nltk and run python -m nltk.downloader wordnet "
                       "(no download happens at run time)",
    "word_embedding_swap": "word_embedding_swap needs word vectors (e.g. GloVe via gensim) that this package does "
                           "not ship; no backend is wired in yet",
    "pos_aware_insert": "pos_aware_insert needs a POS tagger (e.g. nltk's averaged perceptron or spaCy) to find "
                        "the verbs; no backend is wired in yet",
    "formal_style": "formal_style needs a casual-to-formal style-transfer model (e.g. Styleformer); "
                    "no backend is wired in yet",
    "casual_style": "casual_style needs a formal-to-casual style-transfer model (e.g. Styleformer); "
                    "no backend is wired in yet",
    "passive_voice": "passive_voice needs an active-to-passive rewriting model (e.g. Styleformer); "
                     "no backend is wired in yet",
    "active_voice": "active_voice needs a passive-to-active rewriting model (e.g. Styleformer); "
                    "no backend is wired in yet",
}
_NEEDS = {"adaptation_benchmark", "needs_backend"}


def _wordnet():
    """nltk's WordNet reader when nltk and its corpus are installed; never downloads."""
    try:
        import nltk

        nltk.data.find("corpora/wordnet")
        from nltk.corpus import wordnet

        wordnet.ensure_loaded()
        return wordnet
    except (ImportError, LookupError, OSError):
        raise BackendMissing("synonym_replace") from None


@register("synonym_replace", modality="text", family="text_swap", label_preserving=False,
          tags=_NEEDS | {"word"})
def synonym_replace(text: str, severity: int, rng: np.random.Generator) -> str:
    """Replace a share of the words by a one-word WordNet synonym; without sense disambiguation, meaning can shift."""
    c = [0.1, 0.2, 0.3, 0.4, 0.5][severity - 1]  # the paper's code: SwapSynWordNet(trans_p=0.1 .. 0.5)
    lead, pairs = split_words(text)
    wordnet = _wordnet()
    options = {}
    for i, (word, _) in enumerate(pairs):
        core = split_core(word)[1]
        if core.isalpha() and len(core) >= 3:
            found = {lemma.name() for s in wordnet.synsets(core.lower()) for lemma in s.lemmas()}
            found = sorted(x for x in found if x.isalpha() and x.lower() != core.lower())
            if found:
                options[i] = found
    for i in _pick(rng, sorted(options), _count(c, len(options))):
        before, core, after = split_core(pairs[i][0])
        new = options[i][int(rng.integers(len(options[i])))]
        pairs[i] = (before + (new.capitalize() if core[0].isupper() else new) + after, pairs[i][1])
    return rebuild_words(lead, pairs)


def _needs_backend(name: str, level: str, family: str, severities=(1, 2, 3, 4, 5), label_preserving=False):
    """Register `name` as a perturbation that checks its caption, then raises BackendMissing."""

    def missing(text: str, severity: int, rng: np.random.Generator) -> str:
        _check_caption(text)
        raise BackendMissing(name)

    missing.__name__ = name
    missing.__doc__ = f"Not available here: {BACKEND_REASONS[name]}."  # (what `memerobust list` prints)
    return register(name, modality="text", family=family, severities=severities, label_preserving=label_preserving,
                    tags=_NEEDS | {level})(missing)


# Severities follow table 4: five for the swaps, one for the sentence-level style rewrites; pos_aware_insert keeps
# insert_adverb's five. Style rewrites by a generative model are not filtered for fidelity here: label may change.
word_embedding_swap = _needs_backend("word_embedding_swap", "word", "text_swap")
pos_aware_insert = _needs_backend("pos_aware_insert", "word", "text_addition", label_preserving=True)
formal_style = _needs_backend("formal_style", "sentence", "text_style", severities=(1,))
casual_style = _needs_backend("casual_style", "sentence", "text_style", severities=(1,))
passive_voice = _needs_backend("passive_voice", "sentence", "text_style", severities=(1,))
active_voice = _needs_backend("active_voice", "sentence", "text_style", severities=(1,))
