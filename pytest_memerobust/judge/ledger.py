"""The flip ledger: which memes a candidate checkpoint newly gets wrong, and which it newly gets right.

`memerobust compare` says whether a condition regressed; the ledger says on which memes, so a reviewer can look at
them. Per model, dataset and condition in both baselines: the memes right before and wrong after (and the
reverse), each with its id, caption and probability of its true label under both checkpoints, largest change
first, and McNemar's exact test on those discordant memes. Memes without labels (meme.Dataset.unlabelled) are
"right" where a checkpoint keeps its own clean prediction under the condition: the ledger is then of the memes the
candidate newly flips and no longer flips (`basis`). A pure function of the paired cells of two baselines,
which track/baseline.py reads, pairs and refuses as the gate does (`flip_ledger_of`).
"""
from __future__ import annotations

import numpy as np

from . import metrics
from ..errors import ConfigError
from .metrics import correct, true_probability
from .results import predicted_labels
from ..data.meme import unlabelled

CLEAN_PREDICTION = "clean prediction"  # the basis of an unlabelled cell: each checkpoint's own clean answer

FORMAT = "pytest-memerobust-ledger/1"


def flip_ledger(pairs, names=("baseline A", "baseline B"), models: dict | None = None) -> dict:
    """The ledger of two checkpoints' cells (`pairs`: (model, dataset, condition, the old checkpoint's cell, the
    candidate's, the memes' ids, their captions or None) per condition both hold), as plain JSON-serialisable values;
    `models` = {"before": ..., "after": ...}, the checkpoints' digests as the baselines record them."""
    conditions = []
    for model, spec, condition, then, now, ids, captions in pairs:
        y = np.asarray(now["y"])
        basis = CLEAN_PREDICTION if unlabelled(y) else None
        # what each side is held against: the labels, or (no labels) its own clean answer, kept (right) or flipped
        truths = ([predicted_labels(y, np.asarray(c["clean"], dtype=np.float64)) for c in (then, now)] if basis
                  else [y, y])
        right_before, right_after = (correct(truth, c["perturbed"]) for truth, c in zip(truths, (then, now)))
        p_before, p_after = (true_probability(np.asarray(c["perturbed"], dtype=np.float64), truth)
                             for truth, c in zip(truths, (then, now)))

        def entries(rows) -> list[dict]:
            out = [{"row": int(i), "id": ids[i], "caption": None if captions is None else captions[i],
                    "label": now["y"][i], "p_true_before": float(p_before[i]), "p_true_after": float(p_after[i]),
                    "change": float(p_after[i] - p_before[i]),
                    "proba_before": then["perturbed"][i], "proba_after": now["perturbed"][i]} for i in rows]
            return sorted(out, key=lambda e: (-abs(e["change"]), e["row"]))

        wrong, right = np.flatnonzero(right_before & ~right_after), np.flatnonzero(~right_before & right_after)
        conditions.append({
            "model": model, "dataset": spec, "condition": condition, "n": int(len(y)),
            "accuracy_before": float(right_before.mean()), "accuracy_after": float(right_after.mean()),
            "n_newly_wrong": int(len(wrong)), "n_newly_right": int(len(right)),
            "mcnemar_p": metrics.mcnemar_p_value(right_before, right_after),
            "newly_wrong": entries(wrong), "newly_right": entries(right), **({"basis": basis} if basis else {})})
    if not conditions:
        raise ConfigError(f"{names[0]} and {names[1]} share no model, dataset and condition: no flip ledger")
    return {"format": FORMAT, "before": str(names[0]), "after": str(names[1]),
            "models": models or {"before": {}, "after": {}},
            "conditions": conditions}
