"""Transfer between detectors: do adversarial memes crafted on one model fool another? The question a trust-and-safety
team asks of an open model's attacks against its production one.

A cell (source, target) counts, of the memes the target classifies correctly clean, those it misclassifies once the
attack crafted on the source is applied (the transfer attack success rate of the literature: Co-Attack, SGA), with a
Wilson interval. The diagonal (source = target) is the white-box success rate, the ceiling the off-diagonal cells are
read against. run/analyses.py's `transfer_cells` runs the detectors; these are functions of their probabilities.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .instructions import wilson_interval


@dataclass(frozen=True)
class TransferCell:
    source: str
    target: str
    condition: str
    fooled: int
    out_of: int  # memes the target classified correctly clean
    share: float
    ci: tuple[float, float]


def transfer_cell(source: str, target: str, condition: str, labels, clean_proba, attacked_proba) -> TransferCell:
    """One cell from the target's clean and attacked probabilities of the same memes."""
    labels = np.asarray(labels)
    clean, attacked = np.asarray(clean_proba), np.asarray(attacked_proba)
    if clean.shape != attacked.shape or len(clean) != len(labels):
        raise ValueError(f"transfer {source} -> {target}: {len(labels)} labels, clean {clean.shape}, "
                         f"attacked {attacked.shape}")
    correct = clean.argmax(axis=1) == labels
    fooled = int((correct & (attacked.argmax(axis=1) != labels)).sum())
    out_of = int(correct.sum())
    share = fooled / out_of if out_of else float("nan")
    return TransferCell(source, target, condition, fooled, out_of, share, wilson_interval(fooled, out_of))


def transfer_matrix(cells: list[TransferCell]) -> dict:
    """The cells as a plain matrix (sources x targets, in first-seen order) for reports and JSON."""
    sources = list(dict.fromkeys(c.source for c in cells))
    targets = list(dict.fromkeys(c.target for c in cells))
    by = {(c.source, c.target): c for c in cells}
    conditions = sorted({c.condition for c in cells})
    return {"conditions": conditions, "sources": sources, "targets": targets,
            "cells": [[None if (s, t) not in by else {"fooled": by[s, t].fooled, "out_of": by[s, t].out_of,
                                                        "share": by[s, t].share, "ci": list(by[s, t].ci)}
                       for t in targets] for s in sources]}


def transfer_from_results(results) -> list[dict]:
    """The transfer matrices of a run (ConditionResults): one per (dataset, attack condition) that some model faced
    crafted on another (`condition.source`); a model's own white-box result of that condition, when the run has it,
    fills its diagonal."""
    from dataclasses import replace

    results = list(results)
    by_key = {(r.model, r.dataset, r.condition.id): r for r in results}
    out = []
    for dataset, plain_id in dict.fromkeys((r.dataset, replace(r.condition, source=None).id)
                                           for r in results if r.condition.source):
        crafted = [r for r in results if r.dataset == dataset and r.condition.source
                   and replace(r.condition, source=None).id == plain_id]
        sources = list(dict.fromkeys(r.condition.source for r in crafted))
        # every model shown a crafted attack, and each source the run also evaluated (its white-box diagonal)
        targets = list(dict.fromkeys([r.model for r in crafted]
                                     + [s for s in sources if (s, dataset, plain_id) in by_key]))
        cells = []
        for source in sources:
            for target in targets:
                r = (by_key.get((target, dataset, plain_id)) if source == target
                     else next((x for x in crafted if x.model == target and x.condition.source == source), None))
                if r is not None:
                    answers = r.answers
                    cells.append(transfer_cell(source, target, plain_id, r.memes.y_true, answers.proba_clean,
                                               answers.proba))
        out.append({"dataset": dataset, **transfer_matrix(cells)})
    return out
