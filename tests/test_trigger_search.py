"""A universal trigger's search asks each position's candidates as one set (issue 61: a fit was most of the main
job's time, its 16 candidates asked one after the other in batches padded to their longest caption), and finds what
asking them one by one finds: on a detector that pads captions by bucket, a caption's loss is the same bytes in any
fixed-shape batch, so the set changes what the search costs, not what it finds."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from pytest_memerobust.data.demo import demo_dataset
from pytest_memerobust.detectors import ModelCard, Network, load_detector
from pytest_memerobust.engine import AttackState, Engine
from pytest_memerobust.perturb.attacks import AttackContext, find_trigger
from tiny_backbones import KINDS

EXAMPLES, CANDIDATES, ROUNDS, LENGTH = 12, 5, 2, 2
LOSSES = AttackContext.losses  # as the package defines it, before any test wraps it


@pytest.fixture(scope="module")
def detector():
    """The tiny transformers CLIP (MiniLM's WordPiece tokenizer, random weights): white-box, padded by bucket."""
    architecture, params, backbone = KINDS["hf-clip"]
    torch.manual_seed(0)
    return load_detector(ModelCard(name="tiny-hf-clip", architecture=architecture, classes=("non-hateful", "hateful"),
                                   network=Network(params=dict(params), backbone=dict(backbone))))


def _context(detector) -> AttackContext:
    memes, train = demo_dataset("test").head(4), demo_dataset("train").head(40)
    training = lambda: ([m.text for m in train.memes], train.labels("hate"), train.memes)  # noqa: E731
    return Engine(detector, memes, attacks=AttackState(labels=memes.labels("hate"), training=training)).attack_context()


def _search(detector, monkeypatch, one_by_one: bool) -> tuple[str, list[int], list[bytes]]:
    """The trigger, the number of captions in each ask, and each ask's losses (bytes): asked as the search asks, or
    (`one_by_one`) each candidate's captions alone, as before issue 61."""
    sizes, answers = [], []

    def recorded(self, captions, rows, labels, per_query=True):
        sizes.append(len(captions))
        parts = range(0, len(captions), EXAMPLES) if one_by_one else [0]
        step = EXAMPLES if one_by_one else len(captions)
        out = np.concatenate([LOSSES(self, captions[k : k + step], rows[k : k + step], labels[k : k + step],
                                   per_query=per_query) for k in parts])
        answers.append(out.tobytes())
        return out

    monkeypatch.setattr(AttackContext, "losses", recorded)
    context = _context(detector)
    assert context.white_box  # candidates ranked by gradients, then their real losses compared
    trigger = find_trigger(context, LENGTH, seed=0, candidates=CANDIDATES, rounds=ROUNDS, examples=EXAMPLES)
    return trigger, sizes, answers


def test_a_positions_candidates_are_asked_as_one_set_and_found_as_one_by_one(detector, monkeypatch):
    together, sizes, answers = _search(detector, monkeypatch, one_by_one=False)
    # the start trigger's captions, then each position's candidates over the fit memes, in one ask per position
    assert sizes == [EXAMPLES] + [CANDIDATES * EXAMPLES] * (ROUNDS * LENGTH)
    apart, _, answers_apart = _search(detector, monkeypatch, one_by_one=True)
    assert answers == answers_apart  # every caption's loss is the same bytes beside other candidates or alone
    assert together == apart
    words = together.split()
    assert len(words) == LENGTH and all(w.isalpha() and w.islower() for w in words)
