"""Run an attack crafted on each detector against every other one (judge/transfer.py judges the matrix)."""
from __future__ import annotations

from typing import Mapping

from .conditions import Condition
from .engine import Engine


def transfer_cells(detectors: Mapping[str, object], dataset, labels, condition: Condition, training=None,
                   seed: int = 0) -> list:
    """Every (source, target) cell of `condition`'s attack: crafted on the source (its gradients or queries, its
    fitted patterns), evaluated by the target on the same memes."""
    from ..judge.transfer import transfer_cell

    clean = {name: Engine(det, dataset, seed=seed, labels=labels).predict(Condition()) for name, det in
             detectors.items()}
    cells = []
    for source, crafted_on in detectors.items():
        for target, detector in detectors.items():
            engine = Engine(detector, dataset, seed=seed, labels=labels, training=training,
                            attack_source=None if source == target else crafted_on)
            cells.append(transfer_cell(source, target, condition.id, labels, clean[target],
                                       engine.predict(condition)))
    return cells
