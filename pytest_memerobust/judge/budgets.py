"""Minimal evasion budgets, the statistics: pure numpy functions of the budgets that perturb/budget_edits.py's
search found (`minimal_budgets`, a `BudgetResult`): the evasion curve (share of the searched memes evaded within
each level), its area, the median budget, and percentile bootstrap intervals over memes from `metrics.py`.
"""
from __future__ import annotations

import math
import numbers
from typing import Sequence

import numpy as np

from .metrics import paired_bootstrap_ci
from ..perturb.budget_edits import BudgetResult

__all__ = [
    "bootstrap_intervals",
    "budget_summary",
    "curve_area",
    "evasion_curve",
    "format_budget",
    "median_budget",
    "worst",
]


def budget_summary(result: BudgetResult, *, n_resamples: int = 1000, confidence: float = 0.95,
                   seed: int = 0) -> dict:
    """The numbers of one family's search for a report, JSON-ready: inf is written "inf" (a censored median:
    "> max" in `median_text`), NaN (nothing to measure, e.g. no meme searched) is written None."""
    n = len(result.budgets)
    intervals = (bootstrap_intervals(result.budgets, result.levels, n_resamples=n_resamples, confidence=confidence,
                                     seed=seed) if n else
                 {"median_ci": (math.nan,) * 2, "curve_ci": [(math.nan,) * 2] * len(result.levels),
                  "area_ci": (math.nan,) * 2})
    curve = evasion_curve(result.budgets, result.levels)
    median = median_budget(result.budgets)
    return _json({
        "family": result.family, "unit": result.unit, "levels": list(result.levels),
        "n": n, "n_censored": int(np.isinf(result.budgets).sum()),
        "n_misclassified_clean": result.n_misclassified_clean,
        "median": median, "median_text": format_budget(median, result.levels), **intervals,
        "curve": curve, "area": curve_area(curve, result.levels),
        "confidence": confidence, "n_resamples": n_resamples, "seed": seed,
    })


def _json(value):
    if isinstance(value, dict):
        return {k: _json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, np.ndarray)):
        return [_json(v) for v in value]
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        value = float(value)
        return None if math.isnan(value) else "inf" if math.isinf(value) else value
    return value


def worst(result: BudgetResult, k: int = 5) -> list[dict]:
    """The k evaded memes with the smallest budgets (ties: input order), with the caption that evaded."""
    order = sorted((b, int(i), e) for b, i, e in zip(result.budgets, result.searched, result.evasions)
                   if np.isfinite(b))
    return [{"index": i, "budget": float(b), "evasion": e} for b, i, e in order[:k]]


def evasion_curve(budgets, levels) -> np.ndarray:
    """Share of the memes evaded within each level ([..., N] budgets -> [..., L]); censored ones never are."""
    budgets, levels = np.asarray(budgets, dtype=float), np.asarray(levels, dtype=float)
    if budgets.shape[-1] == 0:
        return np.full(budgets.shape[:-1] + levels.shape, np.nan)
    return (budgets[..., None] <= levels).mean(axis=-2)


def curve_area(curve, levels) -> float | np.ndarray:
    """Area under the evasion curve, trapezoids over the level index scaled to [0, 1]: 1 when every meme falls
    at the first level, 0 when none falls by the last (levels equally spaced whatever their values, so 1/255 ..
    32/255 counts each doubling alike). One level: its share."""
    curve = np.asarray(curve, dtype=float)
    n_levels = len(levels)
    if curve.shape[-1] != n_levels:
        raise ValueError(f"curve has {curve.shape[-1]} points for {n_levels} levels")
    if n_levels == 1:
        return curve[..., 0]
    return (curve.sum(axis=-1) - (curve[..., 0] + curve[..., -1]) / 2) / (n_levels - 1)


def median_budget(budgets) -> float | np.ndarray:
    """The smallest budget that evades at least half of the memes (the lower median, the survival-analysis median
    of censored times): always a budget that occurred, inf when over half are censored, NaN with no meme."""
    budgets = np.sort(np.asarray(budgets, dtype=float), axis=-1)
    n = budgets.shape[-1]
    if n == 0:
        return np.full(budgets.shape[:-1], np.nan)[()]
    return budgets[..., (n + 1) // 2 - 1][()]


def format_budget(value: float, levels: Sequence) -> str:
    """A budget for a table: '> 10' when censored at a last level of 10."""
    if value is None or math.isnan(value):
        return "n/a"
    if math.isinf(value):
        return f"> {levels[-1]:g}"
    return f"{value:g}"


def _ranks(budgets, levels) -> np.ndarray:
    """Each budget's level index, len(levels) for censored: the statistics come out the same on these ranks with
    levels 0..L-1, and a bootstrap quantile never has to interpolate between a level and inf."""
    budgets, levels = np.asarray(budgets, dtype=float), np.asarray(levels, dtype=float)
    ranks = np.searchsorted(levels, budgets)
    finite = np.isfinite(budgets)
    if not (ranks[finite] < len(levels)).all() or not (levels[ranks[finite]] == budgets[finite]).all():
        raise ValueError(f"budgets must be levels {levels.tolist()} or inf")
    return np.where(finite, ranks, len(levels))


def bootstrap_intervals(budgets, levels, *, n_resamples: int = 1000, confidence: float = 0.95,
                        seed: int = 0) -> dict:
    """Percentile intervals over memes (metrics.paired_bootstrap_ci; one seed, so every statistic sees the same
    resamples) of the median, each curve point and the area. The median's ends are rounded outward to levels
    (an end past the last level is inf)."""
    levels = tuple(levels)
    ranks = _ranks(budgets, levels)
    index = np.arange(len(levels))

    def ci(statistic):
        return paired_bootstrap_ci(statistic, ranks, n_resamples=n_resamples, confidence=confidence, seed=seed,
                                   vectorized=True)

    low, high = ci(median_budget)
    level_or_inf = lambda r: levels[r] if r < len(levels) else math.inf  # noqa: E731
    return {
        "median_ci": (level_or_inf(math.floor(low)), level_or_inf(math.ceil(high))),
        "curve_ci": [ci(lambda r, i=i: evasion_curve(r, index[i:i + 1])[..., 0]) for i in index],
        "area_ci": ci(lambda r: curve_area(evasion_curve(r, index), index)),
    }
