"""The memes a universal attack (a caption trigger, a picture pattern) is fitted on, kept apart from the memes it is
judged on.

Why: a trigger fitted on the memes it then attacks is tuned to them (a test-set leak): its success overstates what
it would do to memes it has never seen. So an attack fits on the dataset's train split when it has one, else on the
memes of the same file outside the evaluated ones (those `--memerobust-limit` leaves out), never on an evaluated
meme; the choice has a digest that is part of every fit's cache key, and a description the run's notes show.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import cached_property
from typing import Sequence

import numpy as np

from .meme import Meme

SHOWN_IDS = 5  # meme ids the run's note names before "..."


@dataclass(frozen=True)
class FitMemes:
    """Memes to fit a universal attack on, labelled for one task. Unpacks as the (captions, labels, memes) triple
    the attacks read."""

    source: str  # what they are: "the train split demo:train", "the 32 memes of x.csv outside the 16 evaluated"
    memes: tuple[Meme, ...]
    task: str

    def __iter__(self):
        return iter(([m.text for m in self.memes], np.array([m.labels[self.task] for m in self.memes], dtype=np.int64),
                     list(self.memes)))

    def __len__(self) -> int:
        return len(self.memes)

    @cached_property
    def digest(self) -> str:
        """A digest of the memes' ids, captions and labels: a fit on other memes (another dataset, another split,
        captions read otherwise) is another fit."""
        return fit_digest([m.id for m in self.memes], [m.text for m in self.memes],
                          [m.labels[self.task] for m in self.memes])

    def note(self, spec: str) -> str:
        """One line for the run's notes: what the universal attacks on `spec` were fitted on."""
        ids = [m.id for m in self.memes[:SHOWN_IDS]]
        more = ", ..." if len(self.memes) > SHOWN_IDS else ""
        return (f"{spec}: universal attacks (triggers, patterns) fitted on {self.source}: {len(self.memes)} memes "
                f"({', '.join(ids)}{more}; digest {self.digest[:12]}), none of them evaluated")


def fit_digest(ids: Sequence[str], captions: Sequence[str], labels) -> str:
    """A digest of memes' ids, captions and labels (a label: a class index or a 0/1 tuple)."""
    h = hashlib.sha256()
    for meme_id, text, label in zip(ids, captions, labels):
        label = np.asarray(label).tolist()
        h.update(f"{meme_id}\0{text}\0{label!r}\0".encode())
    return h.hexdigest()

