"""Words that OCR ran together, split again.

Why: meme text is bold, outlined and tightly set, and the OCR reader often drops the spaces: `WHENSHESEES`,
`COMMENTSON`. A detector fed `commentson` sees one unknown token where the caption had two words. Two kinds of
evidence say where a space was:

- the reader's own character positions (rapidocr's `return_word_box`, data/ocr.py `Detection.char_centres`): after
  allowing for each letter's width, a space shows as a wider step from one character to the next;
- how often English uses each word: a run of letters that is no word itself is split into known words only where
  that reading is far likelier than the run as one unknown word (a unigram model, as Norvig's segmenter and the
  `wordsegment` package score them), and a run that is a word (`sexist`, `hijack`, `forgets`), or a word with an `s`
  whose apostrophe was lost (`todays`), is never split.

Before either, a dot the reader put between two words (`GO.TO`, `MAN·CAN`: the space, read as a mark) is read as
the space it was: an interpunct or bullet between letters always, a full stop between two words of two letters or
more unless the second is a domain's ending (`IMGFLIP.COM`, `U.S.` stay). A hyphen stays: captions hyphenate
(`X-RAY`), and tokenizers cut words at it anyway.

A run is split only where the evidence agrees: its likeliest segmentation into known words when it is clearly
likelier than the next, else the one whose cuts lie on clearly the widest steps; every cut on a step at least
WEAK_STEP wide where the positions are known; a step wide enough to be a space on its own splits without the word
list. The frequencies are SymSpell's English unigram list (82,765 words with their counts in Google's web corpus),
which the package `symspellpy` ships (a dependency: pure Python, maintained; wordfreq would add four packages and
wordsegment has had no release since 2018); without it only the character positions split.
"""
from __future__ import annotations

import math
import re
from dataclasses import replace
from functools import lru_cache
from typing import Mapping, Sequence

from .text_boxes import Detection, TextBox

MIN_RUN = 4  # shorter runs of letters are not split on the word list alone (`isit`, `ofthe` are)
MIN_GAP_RUN = 4  # shorter pieces of text (between the spaces the reader saw) are not split at all
# Steps between neighbouring characters, less their letters' widths, in em. Measured on 60 PrideMM train captions
# drawn bold and outlined over photographs (bench/ocr.py --reading-order) and read by rapidocr: inside words 95% of
# steps < 0.09 and 99% < 0.14; where a space was lost the median is 0.29 and 75% are > 0.22.
SPACE_STEP = 0.24  # this wide: a space on its own
# narrower: no space, whatever the word list says. Half the 0.08 it was before the frequencies: with them, on the same
# 60 drawn memes (bench/ocr.py --reading-order), 0.04 left 27 words run together where 0.08 left 33 and split no
# word the reader had read right; 0.0 split four (`polyglot platypus`, `sponge bob`).
WEAK_STEP = 0.04
CHOICE_MARGIN = 0.1  # between segmentations into known words, the gaps must favour one by this much
MAX_SEGMENTATIONS = 64
# the common two-letter words and the one-letter ones: the vocabulary's other short tokens are abbreviations and
# syllables that would let almost any run split in many ways
SHORT_WORDS = frozenset("a i am an as at be by do go he hi if in is it me my no of oh ok on or so to up us we ya yo"
                        .split())
CONTRACTIONS = ("s", "t", "m", "re", "ve", "ll", "d")
# Advance widths of the letters in em (Helvetica's, which bold meme fonts follow in proportion: I narrow, M and W wide)
WIDTHS = dict(zip("ABCDEFGHIJKLMNOPQRSTUVWXYZ", (.667, .667, .722, .722, .667, .611, .778, .722, .278, .5, .667, .556,
                                                  .833, .722, .778, .667, .778, .722, .667, .611, .722, .667, .944,
                                                  .667, .667, .611)))
WIDTHS.update(zip("abcdefghijklmnopqrstuvwxyz", (.556, .556, .5, .556, .556, .278, .556, .556, .222, .222, .5, .222,
                                                  .833, .556, .556, .556, .556, .333, .5, .278, .556, .5, .722, .5, .5,
                                                  .5)))
DEFAULT_WIDTH = 0.556  # digits and the rest
# A dot between letters that is a misread space: an interpunct or a bullet, or a full stop between two words of two
# letters or more (not `U.S.`) whose second is no domain's ending
DOT_FOR_SPACE = re.compile(r"(?<=[A-Za-z])[·•](?=[A-Za-z])|(?<=[A-Za-z]{2})\.(?=[A-Za-z]{2})")
DOMAIN_ENDINGS = frozenset("com net org edu gov io co uk us de fr ca au tv me ly gg info biz app".split())
PUNCT_WIDTH = 0.278


FREQUENCIES = "frequency_dictionary_en_82_765.txt"  # in the symspellpy package: `word count` per line
FAR_LIKELIER = 1e3  # a segmentation this many times likelier than the run as one unknown word may split it
CLEARLY_LIKELIER = 10.0  # between two segmentations: likelier by this factor decides without the positions
MIN_WORD_COUNT = 100_000  # rarer entries of the list (`fcntl`, `ll`) are left out: they would make runs words
# Contractions as memes and OCR write them, without the apostrophe; the list has none of them (it keeps no word with
# an apostrophe), so each counts as a common word does (`gonna`: 13.5 million)
APOSTROPHE_LOST = dict.fromkeys("im ive dont doesnt didnt wont wouldnt shouldnt couldnt isnt arent wasnt werent hasnt "
                                "havent hadnt thats whats theres youre theyre weve youve theyve hes shes youll theyll "
                                "aint yall".split(), 10_000_000)
# Words of gender and sexuality that the list (Google's web of about 2006) lacks, though memes about them use them
# every day; a hate classifier must never see them split (`trans phobic`), so each counts as a common word does
IDENTITY_TERMS = dict.fromkeys("lgbt lgbtq lgbtqia transphobic transphobia transphobe homophobe biphobic biphobia "
                               "cisgender nonbinary genderqueer genderfluid agender pansexual dysphoria misgender "
                               "misgendered misgendering deadname deadnaming heteronormative".split(), 1_000_000)


@lru_cache(maxsize=1)
def word_counts() -> Mapping[str, int]:
    """Lower-case English words with how often they occur: SymSpell's unigram list (three letters or more, at least
    MIN_WORD_COUNT times) with SHORT_WORDS, APOSTROPHE_LOST and IDENTITY_TERMS; empty when symspellpy is missing."""
    try:
        from importlib.resources import files

        text = (files("symspellpy") / FREQUENCIES).read_text(encoding="utf-8")
    except (ImportError, OSError):
        return {}
    counts = {}
    for line in text.split("\n"):
        word, _, count = line.partition(" ")
        if word.isascii() and word.isalpha() and count.strip().isdigit():
            counts[word] = int(count)
    kept = {w: c for w, c in counts.items() if (len(w) >= 3 and c >= MIN_WORD_COUNT) or w in SHORT_WORDS}
    return {**APOSTROPHE_LOST, **IDENTITY_TERMS, **kept}


@lru_cache(maxsize=1)
def _word_total() -> int:
    """The sum of `word_counts()`, the unigram model's denominator: summed once, not at every segmentation scored."""
    return sum(word_counts().values()) or 1


def known_words() -> frozenset[str]:
    """The words of `word_counts()`."""
    return frozenset(word_counts())


def _as_counts(words: Mapping[str, int] | frozenset[str] | None) -> Mapping[str, int]:
    """`words` as counts: a plain set of words counts each once (every word as likely); None: `word_counts()`."""
    if words is None:
        return word_counts()
    return words if isinstance(words, Mapping) else dict.fromkeys(words, 1)


def _count(piece: str, counts: Mapping[str, int]) -> int:
    """How often `piece` occurs, 0 when it is no word: `i'm`, `didn't` as their stems (the list has "didn")."""
    if piece in counts:
        return counts[piece]
    stem, apostrophe, suffix = piece.partition("'")
    return counts.get(stem, 0) if apostrophe and suffix in CONTRACTIONS else 0


def _is_word(piece: str, words: Mapping[str, int]) -> bool:
    """A word, a contraction of one, or a word with an `s` whose apostrophe was lost (`todays`, `moms`)."""
    return _count(piece, words) > 0 or (len(piece) > 4 and piece.endswith("s") and piece[:-1] in words)


def segmentations(run: str, words: Mapping[str, int] | frozenset[str] | None = None,
                  limit: int = MAX_SEGMENTATIONS) -> list[tuple[int, ...]]:
    """The ways to cut `run` (lower case) into known words, each as the positions of its cuts; at most `limit`."""
    counts = _as_counts(words)
    n = len(run)
    ends: list[list[tuple[int, ...]]] = [[] for _ in range(n + 1)]  # ends[i]: cut lists covering run[:i]
    ends[0] = [()]
    for i in range(n):
        if not ends[i]:
            continue
        for j in range(i + 1, n + 1):
            if _count(run[i:j], counts):
                ends[j].extend(cuts + ((i,) if i else ()) for cuts in ends[i][:limit])
                del ends[j][limit:]
    return ends[n]


def log_likelihood(run: str, cuts: tuple[int, ...], counts: Mapping[str, int], total: int) -> float:
    """The unigram log-probability of `run` cut at `cuts` (`total`: the sum of `counts`); no cuts in a run that is no
    word: Norvig's estimate for an unknown word, 10 / (total * 10 ** its length), which falls with every letter."""
    if not cuts and not _count(run, counts):
        return math.log(10 / total) - len(run) * math.log(10)
    bounds = (0, *cuts, len(run))
    return sum(math.log(_count(run[a:b], counts) / total) for a, b in zip(bounds, bounds[1:]))


def _width(char: str) -> float:
    return WIDTHS.get(char, PUNCT_WIDTH if not char.isalnum() else DEFAULT_WIDTH)


def extra_steps(text: str, centres: Sequence[float]) -> list[float] | None:
    """For each pair of neighbouring characters of `text`, how much wider the step between their centres is than
    their letters' widths account for, in em of the reading's own scale (the median step); None without positions."""
    if len(centres) != len(text) or len(text) < 3:
        return None
    expected = [(_width(a) + _width(b)) / 2 for a, b in zip(text, text[1:])]
    steps = [b - a for a, b in zip(centres, centres[1:])]
    ratios = sorted(s / e for s, e in zip(steps, expected))
    scale = ratios[len(ratios) // 2]  # pixels per em; the median, so the spaces themselves do not widen it
    if scale <= 0:
        return None
    return [s / scale - e for s, e in zip(steps, expected)]


def _choose(run: str, cuts_found: list[tuple[int, ...]], counts: Mapping[str, int], total: int,
            extra: list[float] | None, offset: int) -> tuple[int, ...] | None:
    """The cuts to make in a run that is no word (its first letter at `offset` of the text), among its segmentations
    into known words that are FAR_LIKELIER than the run whole: the likeliest, when CLEARLY_LIKELIER than the next, or
    else the one the gaps clearly favour. With character positions, every cut must sit on a step at least WEAK_STEP
    wide."""
    def support(cuts):  # the narrowest step among the cuts
        return min(extra[offset + c - 1] for c in cuts)

    if extra is not None:
        cuts_found = [cuts for cuts in cuts_found if support(cuts) >= WEAK_STEP]
    whole = log_likelihood(run, (), counts, total)
    scored = sorted(((log_likelihood(run, cuts, counts, total), cuts) for cuts in cuts_found), reverse=True)
    scored = [(score, cuts) for score, cuts in scored if score - whole >= math.log(FAR_LIKELIER)]
    if len(scored) == 1 or (len(scored) > 1 and scored[0][0] - scored[1][0] >= math.log(CLEARLY_LIKELIER)):
        return scored[0][1]
    if not scored or extra is None:
        return None
    best, second = sorted((cuts for _, cuts in scored), key=support, reverse=True)[:2]
    return best if support(best) - support(second) >= CHOICE_MARGIN else None


def _dots_as_spaces(text: str) -> str:
    """`text` with each DOT_FOR_SPACE a space (one character for one: the positions still line up)."""
    def space(match: re.Match) -> str:
        ending = re.match(r"[A-Za-z]+", text[match.end():]).group()
        return match.group() if match.group() == "." and ending.lower() in DOMAIN_ENDINGS else " "

    return DOT_FOR_SPACE.sub(space, text)


def split_text(text: str, centres: Sequence[float] = (),
               words: Mapping[str, int] | frozenset[str] | None = None) -> str:
    """`text` with its run-together words split (see the module's doc); `centres`, where each character of `text`
    sits along its line, in pixels, when the reader says; `words`: counts (a set: each word once), by default
    `word_counts()`."""
    counts = _as_counts(words)
    total = _word_total() if words is None else sum(counts.values()) or 1
    text = _dots_as_spaces(text)
    extra = extra_steps(text, centres)
    cut_at: set[int] = set()  # positions in `text` where a space goes
    if extra is not None:  # wide steps inside a run of MIN_GAP_RUN or more characters that is no known word
        for match in re.finditer(r"\S+", text):
            if match.end() - match.start() >= MIN_GAP_RUN and not _is_word(match.group().lower(), counts):
                cut_at |= {k + 1 for k in range(match.start(), match.end() - 1) if extra[k] >= SPACE_STEP}
    if counts:
        for match in re.finditer(r"[A-Za-z]+(?:'[A-Za-z]+)?", text):  # each run of letters, cut where the gaps cut it
            bounds = [match.start(), *sorted(c for c in cut_at if match.start() < c < match.end()), match.end()]
            for start, end in zip(bounds, bounds[1:]):
                run = text[start:end].lower()
                if len(run) >= MIN_RUN and not _is_word(run, counts):
                    chosen = _choose(run, segmentations(run, counts), counts, total, extra, start)
                    cut_at |= {start + c for c in chosen or ()}
    if not cut_at:
        return text
    pieces, last = [], 0
    for c in sorted(cut_at):
        pieces.append(text[last:c])
        last = c
    pieces.append(text[last:])
    return " ".join(p.strip() for p in pieces if p.strip())


def split_run_together(detection: "Detection") -> TextBox:
    """The detection's box with its run-together words split."""
    box = detection.box
    text = box.text.strip()
    lead = len(box.text) - len(box.text.lstrip())
    centres = detection.char_centres[lead : lead + len(text)] if detection.char_centres else ()
    return replace(box, text=split_text(text, centres))
