"""Summaries of a report's result records: the grid's average drop and dropping rate (Rainbow Noise's Table 5), and
what each text defence costs and takes away. Pure functions of the result dicts."""
from __future__ import annotations

from . import metrics
from .results import METRIC_NAMES

def grid_summary(clean: dict, cells: list[dict]) -> dict:
    """Table 5's bottom rows: mean drop over the grid cells and that mean over the clean value."""
    return {
        "cells": len(cells),
        "average_drop": {m: metrics.average_drop(clean[m], [c["metrics"][m] for c in cells]) for m in METRIC_NAMES},
        "dropping_rate": {m: metrics.dropping_rate(clean[m], [c["metrics"][m] for c in cells]) for m in METRIC_NAMES},
    }


# leaving it standing (defence_summary's verdicts)
NEUTRALISED_SHARE, SURVIVES_SHARE = 0.9, 0.1


def defence_verdict(flip_undefended: float, flip_defended: float) -> str:
    """`neutralised` when the defence takes away at least NEUTRALISED_SHARE of the attack's flips, `survives` when at
    most SURVIVES_SHARE, `partly` between; `no effect` for an attack that flips nothing even undefended."""
    if flip_undefended != flip_undefended or flip_defended != flip_defended:
        return "undefined"
    if flip_undefended == 0:
        return "no effect"
    removed = 1 - flip_defended / flip_undefended
    return "neutralised" if removed >= NEUTRALISED_SHARE else "survives" if removed <= SURVIVES_SHARE else "partly"


def defence_summary(clean: dict, results: list[dict], defended: list[dict]) -> list[dict]:
    """Per text defence: what it costs on the clean memes (metrics without and behind it) and, per attack that
    ran both ways, the relative robustness of accuracy and the flip rate without and behind it, with
    `defence_verdict`. Behind the defence both are measured against the defended clean predictions: the defended
    detector is the system under test. Pure: reads the report's result dicts."""
    from ..perturb.conditions import Condition

    by_defence: dict[str, dict] = {}
    for r in defended:
        by_defence.setdefault(r["defence"], {})[Condition.parse(r["condition"]).undefended.id] = r
    out = []
    for defence, rows in by_defence.items():
        clean_defended = rows.get("clean")
        if clean_defended is None:
            continue
        entry = {"defence": defence, "clean": {
            m: {"undefended": clean["metrics"][m], "defended": clean_defended["metrics"][m],
                "cost": clean["metrics"][m] - clean_defended["metrics"][m]} for m in METRIC_NAMES}, "rows": []}
        for r in results:
            d = rows.get(r["condition"])
            if d is None or r["kind"] == "clean":
                continue
            sides = {name: {"relative_accuracy": x["relative_robustness"]["accuracy"],
                            "relative_accuracy_ci": x["relative_robustness_ci"]["accuracy"],
                            "flip_rate": x["flip_rate"], "flip_rate_ci": x["flip_rate_ci"],
                            "accuracy": x["metrics"]["accuracy"]} for name, x in (("undefended", r), ("defended", d))}
            entry["rows"].append({"condition": r["condition"], **sides,
                                  "verdict": defence_verdict(r["flip_rate"], d["flip_rate"])})
        out.append(entry)
    return out
