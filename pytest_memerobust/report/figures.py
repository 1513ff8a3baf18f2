"""How a figure reads in the terminal and every report, whatever it is: a minus sign that reads as one, and words
for a figure that is no number. Below outline.py and gate_tables.py, which both word figures."""
from __future__ import annotations


def minus(text: str) -> str:
    """A typographic minus sign in a formatted number: `−0.031` reads as negative at a glance; `-` looks like a
    dash."""
    return text.replace("-", "−")


NOT_MEASURED, UNDEFINED = "not measured", "undefined"
NO_LABELS = "no labels"  # a label-bound figure (accuracy, AUROC, F1, their robustness) of unlabelled memes


def unnumbered(value) -> str | None:
    """How a figure that is no number reads wherever the terminal or a report prints one (headlines, tables): `not
    measured` where there is none (None), `undefined` where it is NaN (AUROC of memes of one class, a relative
    robustness from a clean score of 0), never `nan`; None for a number, which its formatter prints."""
    if value is None:
        return NOT_MEASURED
    return UNDEFINED if value != value else None
