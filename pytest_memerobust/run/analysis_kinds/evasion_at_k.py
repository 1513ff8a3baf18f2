"""Evasion@k (judge/evasion_at_k.py): the harmful memes the detector flags clean, each caption edited k times by
the same text perturbation at the same severity under k keys (the run's seed, then the next ones: draw 1 is the
run's own condition), each edited meme asked through the engine."""
from __future__ import annotations

import numpy as np

from ...judge.evasion_at_k import evasion_at_k
from ...perturb import get as get_perturbation
from ...perturb.conditions import Condition
from ..analysis_registry import Analysis, AnalysisTable, register

SHOWN_K = (1, 2, 3, 5, 10, 20, 50)  # the rows the table shows (and the last draw)


def run_evasion_at_k(session, model: str, spec: str, task: str, perturbation: str = "typos", severity: int = 3,
                     k: int = 10) -> dict:
    """The record: which flagged harmful memes each of the k draws got past the detector, and its judgement."""
    from ...errors import ConfigError

    edit = get_perturbation(perturbation)
    if edit.modality != "text" or edit.needs_model:
        raise ConfigError(f"evasion@k draws a caption edit again and again: {perturbation!r} is not a plain text "
                          f"perturbation (modality {edit.modality}{', an attack' if edit.needs_model else ''})")
    if k < 1:
        raise ConfigError(f"evasion@k needs at least one draw, got k={k}")
    engine = session.engine(model, spec, task)
    labels = engine.held_against(session.scored_dataset(model, spec, task).labels(task))
    texts = engine.inputs("text", None, None)
    images = (engine.inputs("image", None, None) if "image" in getattr(engine.detector, "modalities", ("image", "text"))
              else [None] * len(texts))
    flagged = engine.predict(Condition(defence=engine.defence_id))[:, 1] >= 0.5  # the run's own clean answers
    searched = np.flatnonzero((labels == 1) & flagged)
    captions, pictures = [texts[i] for i in searched], [images[i] for i in searched]
    ids = [engine.ids[i] for i in searched]
    seed = session.options.seed
    evaded = np.zeros((len(searched), k), bool)
    for draw in range(k):
        edited = edit.apply(captions, ids, severity, seed + draw)
        if len(searched):
            evaded[:, draw] = engine.probabilities(pictures, list(edited))[:, 1] < 0.5
    return {"perturbation": perturbation, "severity": severity, "seed": seed,
            "evaded_memes": [ids[i] for i in np.flatnonzero(evaded.any(axis=1))],
            **evasion_at_k(evaded, session.options.judging.stats.confidence)}


def evasion_table(record: dict) -> AnalysisTable:
    shown = [row for row in record["curve"] if row["k"] in SHOWN_K or row["k"] == record["draws"]]
    level = f"{record['confidence']:.0%}"
    rows = tuple((str(r["k"]), f"{r['evaded']} of {record['memes']}",
                  f"{r['share']:.3f} ({r['ci'][0]:.3f}..{r['ci'][1]:.3f})") for r in shown)
    tries = record["mean_tries_to_evade"]
    notes = (f"Each try is a fresh draw of {record['perturbation']}@{record['severity']} on the caption of a harmful "
             f"meme the detector flags clean (keys {record['seed']}..{record['seed'] + record['draws'] - 1}); "
             + (f"a meme that fell needed {tries:.1f} tries on average." if tries == tries else "none fell."),)
    return AnalysisTable(f"evasion@k of {record['perturbation']}@{record['severity']}",
                         ("tries k", "flagged harmful memes evaded", f"share ({level} Wilson CI)"), rows, notes)


register(Analysis("evasion_at_k", run_evasion_at_k, table=evasion_table))
