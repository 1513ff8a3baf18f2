"""The run's side of the detector comparison: a run with several models on the same memes says, in its verdict, which
loses less to the edits beyond noise (judge/detectors.py decides; the reports render `verdict["detectors"]`)."""
from __future__ import annotations


def detectors_verdict(session) -> dict | None:
    """Every pair of the run's detectors on each dataset they share, judged on the conditions both ran (each
    condition with its model's label, as `memerobust compare` names it); None for a run of one detector. Resampled
    with the run's intervals' count (`--memerobust-bootstrap`)."""
    from ..judge.detectors import DetectorOutputs, compare_detectors, verdict
    from ..track.baseline import baseline_cell
    from .options import split_model

    by_model: dict[tuple, dict] = {}
    for (model, spec, condition), result in session.outcomes.results.items():
        if result.memes.y_true is None or getattr(result, "multilabel", False):
            continue
        if split_model(model)[1] is None:  # a detector's channel (`:text`, the ablation) is not another detector
            by_model.setdefault((session.model_label(model), spec), {})[condition] = baseline_cell(result)
    if len({label for label, _ in by_model}) < 2:
        return None
    outputs = [DetectorOutputs(label, spec, cells) for (label, spec), cells in by_model.items()]
    shared = {}
    for o in outputs:
        shared[o.dataset] = set(o.cells) if o.dataset not in shared else shared[o.dataset] & set(o.cells)
    outputs = [DetectorOutputs(o.name, o.dataset, {c: v for c, v in o.cells.items() if c in shared[o.dataset]})
               for o in outputs]
    if not any(len(cells) > 1 for cells in shared.values()):
        return None
    from ..perturb.conditions import attack_conditions
    from ..judge.gate import DEFAULT_CONTROL

    stats = session.options.judging.stats
    try:
        comparisons = compare_detectors(outputs, attacks=attack_conditions(set().union(*shared.values())),
                                        control=session.options.judging.gate_error or DEFAULT_CONTROL,
                                        n_resamples=stats.n_resamples, seed=stats.seed, confidence=stats.confidence)
    except ValueError:  # no two detectors share a dataset
        return None
    control = session.options.judging.gate_error or DEFAULT_CONTROL
    return {"detectors": [o.name for o in outputs], "control": control.spec,
            "resamples": stats.n_resamples,
            "comparisons": [{**c.as_dict(), "verdict": verdict(c)} for c in comparisons]}
