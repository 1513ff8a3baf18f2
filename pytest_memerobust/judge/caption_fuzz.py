"""What the shipped caption-fuzzing suite (suites/test_caption_fuzz.py) judges: a detector's probabilities of a
meme's caption before and after an edit from `perturb/fuzz.py`, flipped or not (run/analyses.py's CaptionFuzzer asks
the detector). Users import it from `pytest_memerobust.fuzz`."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..perturb.fuzz import Edit


@dataclass
class FlipCheck:
    """What a flipped prediction looks like in a failure message."""

    caption: str
    edited: str
    edits: Sequence[Edit]
    before: np.ndarray
    after: np.ndarray
    classes: Sequence[str]

    @property
    def flipped(self) -> bool:
        return int(self.before.argmax()) != int(self.after.argmax())

    def __str__(self) -> str:
        fmt = lambda p: ", ".join(f"{c} {v:.3f}" for c, v in zip(self.classes, p))
        return (f"a label-preserving edit flipped a confident prediction\n"
                f"  original: {self.caption!r}\n  edited:   {self.edited!r}\n"
                f"  edits:    {'; '.join(map(str, self.edits))}\n"
                f"  before:   {fmt(self.before)}\n  after:    {fmt(self.after)}")
