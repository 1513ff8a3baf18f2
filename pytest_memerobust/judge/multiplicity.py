"""Error control over many one-sided tests at once: the run's gate compares hundreds of (condition, rule) pairs, and
a run fails if any of them does, so the error a team feels is the run's, not one rule's.

Pure numpy on arrays of statistics, so every procedure can be checked against answers worked out by hand:
- `maxt_adjusted_p`: Westfall & Young's (1993) step-down max-T, on bootstrap draws of the centred, studentized
  statistics (Romano & Wolf 2005 show the bootstrap version controls the family-wise error asymptotically). It uses
  the correlation of the statistics (conditions share their memes), so it is sharper than Bonferroni or Holm.
- `holm_adjusted_p`: Holm's (1979) step-down Bonferroni, on p-values of any valid test: the fallback where no
  resampled statistic exists.
- `bh_adjusted_p`: Benjamini & Hochberg's (1995) step-up false discovery rate, as adjusted p-values
  (`benjamini_hochberg`: which to reject at a rate q, the run verdict's control over its confident cases).
- `marginal_p`: each test alone, from the same bootstrap draws.
- `decision_critical_values`: per test the critical value its decision used (the step it was rejected at, or the
  step where the procedure stopped), so the bound printed beside a decision never contradicts it.
Every test here is one-sided: a large statistic is evidence against the null (e.g. "no worse than the baseline").
A draw where a resample leaves its statistic undefined (NaN: AUROC on a one-class resample) is dropped: every p-value
and critical value is read over the defined draws only, as metrics.bootstrap_one_sided_p reads its resamples.
"""
from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from .metrics import _plain

CONTROLS = ("fwer", "holm", "fdr", "none")


def studentized(estimates: np.ndarray, samples: np.ndarray, nulls: np.ndarray, centres: np.ndarray | None = None,
                inflation: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(se, z, draws) for K one-sided tests of "theta_k <= null_k": `estimates` [K], their resampled `samples`
    [K, B] (NaN where a resample leaves the statistic undefined), `nulls` [K]. se is the resamples' standard error
    (times sqrt(`inflation`) where given: a variance known to exceed the memes' own, the recipe's seed-to-seed
    spread), z = (estimate - null) / se, and draws [K, B] = (sample - centre) / the resamples' own standard error:
    the centred statistic, whose law under the null the resampling imitates. The centre is the estimate for
    bootstrap resamples and 0 for paired permutations (`centres`), whose draws are already the null's. An undefined
    draw stays NaN, and the readers of the draws drop it. A test whose samples do not vary has se 0: z is +inf when
    its estimate is past the null (every resample says so) and -inf otherwise, and its defined draws are -inf (they
    never exceed anything)."""
    estimates, samples, nulls = (np.asarray(a, dtype=np.float64) for a in (estimates, samples, nulls))
    centres = estimates if centres is None else np.asarray(centres, dtype=np.float64)
    scale = np.ones(estimates.shape) if inflation is None else np.sqrt(np.asarray(inflation, dtype=np.float64))
    with np.errstate(invalid="ignore", divide="ignore"):
        defined = ~np.isnan(samples)
        n = defined.sum(axis=1)
        mean = np.where(defined, samples, 0.0).sum(axis=1) / np.maximum(n, 1)
        var = np.where(defined, (samples - mean[:, None]) ** 2, 0.0).sum(axis=1) / np.maximum(n - 1, 1)
        constant = np.where(defined, samples, -np.inf).max(axis=1) == np.where(defined, samples, np.inf).min(axis=1)
        spread = np.where(n >= 2, np.where(constant, 0.0, np.sqrt(var)), np.nan)  # equal samples: no spread
        se = spread * scale
        gap = estimates - nulls
        z = np.where(se > 0, gap / se, np.where(gap > 0, np.inf, -np.inf))
        z = np.where(np.isnan(se) | np.isnan(estimates), np.nan, z)
        draws = np.where(defined, np.where(spread[:, None] > 0, (samples - centres[:, None]) / spread[:, None],
                                           -np.inf), np.nan)
    return se, z, draws


def maxt_adjusted_p(z: np.ndarray, draws: np.ndarray) -> np.ndarray:
    """Step-down max-T adjusted p-values (Westfall & Young 1993, algorithm 2.8): for the tests ordered from the
    largest z down, p_(j) = (1 + #{b: max_{i >= j} draws_(i),b >= z_(j)}) / (B_j + 1), made monotone, where the max
    is over the defined draws and B_j counts the resamples with one (a resample undefined for every test from j down
    is dropped). Rejecting where p <= alpha controls the family-wise error at alpha. NaN z (a test that cannot be
    judged) gets NaN and takes no part."""
    z, draws = np.asarray(z, dtype=np.float64), np.asarray(draws, dtype=np.float64)
    out = np.full(z.shape, np.nan)
    judged = np.flatnonzero(~np.isnan(z))
    if judged.size == 0:
        return out
    order = judged[np.argsort(-z[judged], kind="stable")]
    tail_max = np.fmax.accumulate(draws[order][::-1], axis=0)[::-1]  # row j: max over the tests from j down
    exceed = (tail_max >= z[order][:, None]).sum(axis=1)
    out[order] = np.maximum.accumulate((exceed + 1) / ((~np.isnan(tail_max)).sum(axis=1) + 1))
    return out


def upper_critical_value(values: np.ndarray, alpha: float) -> float:
    """The (r + 1)-th largest of `values` (B defined draws, NaN dropped), r = floor(alpha (B + 1)) - 1: a statistic z
    is beyond it exactly when its bootstrap p (1 + #{values >= z}) / (B + 1) is at most alpha."""
    values = np.asarray(values, dtype=np.float64).reshape(-1)
    values = np.sort(values[~np.isnan(values)])[::-1]
    if values.size == 0:
        return float("nan")
    r = int(np.floor(alpha * (values.size + 1) + 1e-9)) - 1
    return float(values[r]) if r >= 0 else float("inf")


def decision_critical_values(method: str, z: np.ndarray, draws: np.ndarray, raw: np.ndarray, adjusted: np.ndarray,
                             alpha: float) -> np.ndarray:
    """Per test the critical value c of the step that decided it, so that z > c exactly when it is rejected (adjusted
    p <= alpha) and estimate - c x se is a bound that agrees with the decision:
    - `fwer` (step-down max-T): a rejected test uses the quantile of the maxima over the tests from its own step
      down; every other test the step where the procedure stopped (the first not rejected, in order of z).
    - `holm`: the same steps, each test's own draws at alpha / (tests left at the step), in order of raw p.
    - `fdr`: each test's own draws at alpha R / m (R rejected of m): Benjamini & Yekutieli's (2005) false coverage
      rate bound, which Benjamini-Hochberg's rejections match exactly.
    - `none`: each test's own draws at alpha.
    NaN for a test without a z."""
    z, draws, raw, adjusted = (np.asarray(a, dtype=np.float64) for a in (z, draws, raw, adjusted))
    out = np.full(z.shape, np.nan)
    judged = np.flatnonzero(~np.isnan(z))
    m = judged.size
    if m == 0:
        return out
    rejected = adjusted <= alpha
    if method in ("fdr", "none"):
        level = alpha * max(1, int(rejected[judged].sum())) / m if method == "fdr" else alpha
        for k in judged:
            out[k] = upper_critical_value(draws[k], level)
        return out
    order = judged[np.argsort(-z[judged] if method == "fwer" else raw[judged], kind="stable")]
    stop = next((step for step, k in enumerate(order) if not rejected[k]), m)
    tail_max = np.fmax.accumulate(draws[order][::-1], axis=0)[::-1] if method == "fwer" else None
    for step, k in enumerate(order):
        at = min(step, stop)
        if method == "fwer":
            out[k] = upper_critical_value(tail_max[at], alpha)
        else:
            out[k] = upper_critical_value(draws[k], alpha / (m - at))
    return out


def marginal_p(z: np.ndarray, draws: np.ndarray) -> np.ndarray:
    """Each test alone: (1 + #{b: draws_k,b >= z_k}) / (B_k + 1) over its B_k defined draws; NaN where z is."""
    z, draws = np.asarray(z, dtype=np.float64), np.asarray(draws, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        p = ((draws >= z[:, None]).sum(axis=1) + 1) / ((~np.isnan(draws)).sum(axis=1) + 1)
    return np.where(np.isnan(z), np.nan, p)


def _sorted_judged(p: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(p as float, an all-NaN output of its shape, the indices of its defined p-values sorted ascending)."""
    p = np.asarray(p, dtype=np.float64)
    judged = np.flatnonzero(~np.isnan(p))
    return p, np.full(p.shape, np.nan), judged[np.argsort(p[judged], kind="stable")]


def holm_adjusted_p(p: np.ndarray) -> np.ndarray:
    """Holm's step-down adjusted p-values: sorted ascending, p~_(i) = max_{j <= i} min(1, (m - j + 1) p_(j)). NaN
    p-values take no part (and stay NaN)."""
    p, out, order = _sorted_judged(p)
    m = order.size
    if m:
        out[order] = np.minimum(1.0, np.maximum.accumulate((m - np.arange(m)) * p[order]))
    return out


def bh_adjusted_p(p: np.ndarray) -> np.ndarray:
    """Benjamini-Hochberg adjusted p-values: sorted ascending, p~_(i) = min_{j >= i} min(1, m p_(j) / j); rejecting
    where p~ <= q keeps the expected share of false rejections at q (independent or positively dependent tests).
    NaN p-values take no part."""
    p, out, order = _sorted_judged(p)
    m = order.size
    if m:
        scaled = p[order] * (m / np.arange(1, m + 1))  # scipy's false_discovery_control computes it so
        out[order] = np.minimum(1.0, np.minimum.accumulate(scaled[::-1])[::-1])
    return out


def benjamini_hochberg(p_values: ArrayLike, q: float = 0.05) -> np.ndarray:
    """Which hypotheses to reject so that the expected share of false rejections among them stays at most `q`
    (Benjamini & Hochberg 1995, step-up): a suite of hundreds of cases judged at 5% each fails some by chance.

    With the m defined p-values sorted, p(1) <= ... <= p(m), the k smallest are rejected for the largest k with
    p(k) <= k q / m: those whose adjusted p (`bh_adjusted_p`) is at most q. A NaN p-value (an undefined test) is
    never rejected and not counted in m, so it neither hides nor adds a discovery. Returns a boolean array of the
    input's shape.
    """
    if isinstance(q, bool) or not isinstance(q, (int, float, np.number)) or not 0.0 < q < 1.0:
        raise ValueError(f"q (the false discovery rate) must lie strictly between 0 and 1, got {_plain(q)!r}")
    p = np.asarray(p_values, dtype=float)
    flat = p.reshape(-1)
    outside = np.flatnonzero(~np.isnan(flat) & ~((flat >= 0.0) & (flat <= 1.0)))
    if outside.size:
        i = int(outside[0])
        raise ValueError(f"p-values must lie in [0, 1] (or be NaN); p_values[{i}] is {float(flat[i])!r}"
                         + (f" and {outside.size - 1} more" if outside.size > 1 else ""))
    with np.errstate(invalid="ignore"):
        return (bh_adjusted_p(flat) <= q).reshape(p.shape)
