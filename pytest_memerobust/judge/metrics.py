"""Classification metrics, robustness scores and paired statistics for perturbation suites.

Pure numpy on purpose: the plugin must score predictions without scikit-learn or scipy installed, and the
numbers must agree with scikit-learn where both exist (the tests check that). Every random step takes a seed
or a ``numpy.random.Generator`` so that a report can be reproduced bit for bit.
"""

from __future__ import annotations

import hashlib
import math
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence

import numpy as np
from numpy.typing import ArrayLike

from ..errors import UnknownNameError

__all__ = [
    "METRICS",
    "METRICS_OF_COUNTS",
    "ROBUSTNESS_KINDS",
    "ROBUSTNESS_SCALES",
    "Resamples",
    "absolute_robustness",
    "accuracy",
    "auroc",
    "average_drop",
    "binomial_upper_tail",
    "bootstrap_one_sided_p",
    "compute_all",
    "correct",
    "dropping_rate",
    "flip_rate",
    "flip_rate_ci",
    "flip_rate_samples",
    "macro_f1",
    "mcnemar_p_value",
    "metric_ci",
    "metric_samples",
    "paired_bootstrap_ci",
    "paired_bootstrap_samples",
    "relative_robustness",
    "resample_counts",
    "robustness_ci",
    "robustness_samples",
]

ROBUSTNESS_SCALES = ("percent", "paper")
ROBUSTNESS_KINDS = ("relative", "absolute")

MetricFn = Callable[[ArrayLike, ArrayLike], float]
SeedLike = int | np.random.Generator

# Bootstrap indices are drawn in blocks of at most this many entries, so memory stays bounded for large N
# while the vectorised and the looping paths still see exactly the same resamples.
_MAX_INDEX_BLOCK = 1 << 20


# --------------------------------------------------------------------------------------------------------
# input checks


def _labels(values: ArrayLike, name: str) -> np.ndarray:
    array = np.asarray(values)
    if array.ndim != 1:
        raise ValueError(f"{name} must be 1-D (one label per item), got shape {array.shape}")
    return array


def _paired_labels(a: ArrayLike, b: ArrayLike, name_a: str, name_b: str) -> tuple[np.ndarray, np.ndarray]:
    first, second = _labels(a, name_a), _labels(b, name_b)
    if first.shape != second.shape:
        raise ValueError(f"{name_a} and {name_b} must have the same length, got {first.size} and {second.size}")
    if first.size == 0:
        raise ValueError(f"{name_a} and {name_b} are empty; a score over zero items is undefined")
    return first, second


def _class_indices_and_proba(y_true: ArrayLike, proba: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """Labels index proba's columns, so they must be integers in [0, C): anything else is a schema bug."""
    labels = _labels(y_true, "y_true")
    scores = np.asarray(proba, dtype=float)
    if scores.ndim != 2:
        raise ValueError(f"proba must be 2-D [N, C] class probabilities, got shape {scores.shape}")
    if scores.shape[0] != labels.size:
        raise ValueError(f"y_true has {labels.size} items but proba has {scores.shape[0]} rows")
    if labels.size == 0:
        raise ValueError("y_true is empty; a score over zero items is undefined")
    if not np.all(np.isfinite(scores)):
        raise ValueError("proba contains NaN or infinite values")
    if labels.dtype.kind == "f" and np.all(np.isfinite(labels)) and np.all(labels == np.round(labels)):
        labels = labels.astype(np.int64)  # integral floats, e.g. labels read from a CSV column
    if labels.dtype.kind not in "iu":
        raise ValueError(f"y_true must hold integer class indices, got dtype {labels.dtype}")
    if labels.min() < 0 or labels.max() >= scores.shape[1]:
        raise ValueError(f"y_true holds labels outside [0, {scores.shape[1]}) for proba with {scores.shape[1]} columns")
    return labels, scores


MULTILABEL_THRESHOLD = 0.5  # a label is predicted when its own probability reaches this


def _multilabel(y_true: ArrayLike, proba: ArrayLike) -> tuple[np.ndarray, np.ndarray] | None:
    """(labels, scores) as [N, K] when `y_true` is a multi-label 0/1 matrix (FigMemes, MAMI's misogyny types),
    scored by one independent probability per label; None for one class index per item."""
    labels = np.asarray(y_true)
    if labels.ndim != 2:
        return None
    scores = np.asarray(proba, dtype=float)
    if scores.shape != labels.shape:
        raise ValueError(f"multi-label y_true {labels.shape} needs one probability per label, got proba {scores.shape}")
    if labels.shape[0] == 0:
        raise ValueError("y_true is empty; a score over zero items is undefined")
    if not np.isin(labels, (0, 1)).all():
        raise ValueError("multi-label y_true must hold only 0 and 1")
    if not np.all(np.isfinite(scores)):
        raise ValueError("proba contains NaN or infinite values")
    return labels.astype(np.int64), scores


def _checked(y_true: ArrayLike, proba: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    return _multilabel(y_true, proba) or _class_indices_and_proba(y_true, proba)


# --------------------------------------------------------------------------------------------------------
# classification metrics


def accuracy(y_true: ArrayLike, y_pred: ArrayLike) -> float:
    """Fraction correct, in 0..1, so that it plugs straight into the robustness formulas."""
    truth, predicted = _paired_labels(y_true, y_pred, "y_true", "y_pred")
    return float(np.mean(truth == predicted))


def auroc(y_true: ArrayLike, proba: ArrayLike) -> float:
    """AUROC from the Mann-Whitney rank statistic: exact with ties and no scikit-learn needed.

    Two columns score column 1; more columns give the macro one-vs-rest mean over the classes present in
    ``y_true`` (scikit-learn's ``multi_class="ovr", average="macro"``). A single class present makes the
    score undefined, which is NaN rather than an exception because bootstrap resamples hit it routinely.
    """
    labels, scores = _checked(y_true, proba)
    return float(_auroc_counts(labels, scores, np.ones((1, labels.shape[0])))[0])


def macro_f1(y_true: ArrayLike, y_pred: ArrayLike) -> float:
    """Unweighted mean F1 over labels seen in either vector, so a minority class counts as much as the rest.

    A label that is predicted but never true (or the reverse) has F1 0, as scikit-learn's zero_division=0.
    """
    truth, predicted = _paired_labels(y_true, y_pred, "y_true", "y_pred")
    labels, codes = np.unique(np.concatenate([truth, predicted]), return_inverse=True)
    codes = codes.reshape(-1)
    true_codes, pred_codes = codes[: truth.size], codes[truth.size :]
    n_labels = labels.size
    hits = true_codes == pred_codes
    true_positive = np.bincount(true_codes[hits], minlength=n_labels)
    support = np.bincount(true_codes, minlength=n_labels)
    predicted_count = np.bincount(pred_codes, minlength=n_labels)
    denominator = support + predicted_count  # = 2TP + FP + FN, never 0 for a label seen somewhere
    return float(np.mean(2.0 * true_positive / denominator))


def _accuracy_of_proba(y_true: ArrayLike, proba: ArrayLike) -> float:
    """Multi-label: exact match, every label right (scikit-learn's subset accuracy, FigMemes' EM)."""
    multilabel = _multilabel(y_true, proba)
    if multilabel is not None:
        return float(_accuracy_counts(*multilabel, np.ones((1, multilabel[0].shape[0])))[0])
    labels, scores = _class_indices_and_proba(y_true, proba)
    return accuracy(labels, scores.argmax(axis=1))


def _macro_f1_of_proba(y_true: ArrayLike, proba: ArrayLike) -> float:
    """Multi-label: the mean F1 of the K binary tasks, as FigMemes defines it (scikit-learn's macro average)."""
    multilabel = _multilabel(y_true, proba)
    if multilabel is not None:
        return float(_macro_f1_counts(*multilabel, np.ones((1, multilabel[0].shape[0])))[0])
    labels, scores = _class_indices_and_proba(y_true, proba)
    return macro_f1(labels, scores.argmax(axis=1))


# Every entry takes (y_true, proba [N, C]) so suites can name metrics uniformly; hard labels come from
# argmax, whose ties go to the lowest class index.
METRICS: dict[str, MetricFn] = {
    "accuracy": _accuracy_of_proba,
    "auroc": auroc,
    "macro_f1": _macro_f1_of_proba,
}


# --- the same metrics over many bootstrap resamples at once --------------------------------------------------------
# A resample is held as how often it draws each item (`resample_counts`: [R, N] exact integer counts), so a metric
# over a block of resamples is a few matrix products of exact integers (the same bits on any thread count) and AUROC
# one sort of the items. Each takes labels [N] (or [N, K] multi-label), probabilities [N, C] and counts [R, N], and
# returns [R]; counts of one row of ones give the metric itself.


def resample_counts(index: np.ndarray, n_items: int) -> np.ndarray:
    """[R, N]: how often each resample (a row of `index`, item indices) draws each of the `n_items` items."""
    rows = index.shape[0]
    flat = (index + (np.arange(rows) * n_items)[:, None]).ravel()
    return np.bincount(flat, minlength=rows * n_items).reshape(rows, n_items).astype(float)


def _binary_auc(positive: np.ndarray, scores: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Mann-Whitney's AUROC on every resample: each (positive, negative) pair of items counts 1 when the positive
    scores higher and 1/2 on a tie, weighted by how often the resample draws each, over P x N; NaN where a resample
    holds no positive or no negative. Per positive the weight of the negatives below it is a cumulative sum over the
    negatives sorted by score (exact integers)."""
    pos, neg = np.flatnonzero(positive), np.flatnonzero(~positive)
    order = neg[np.argsort(scores[neg], kind="stable")]
    below = np.zeros((len(counts), len(order) + 1))
    np.cumsum(counts[:, order], axis=1, out=below[:, 1:])
    sorted_scores = scores[order]
    lower = np.searchsorted(sorted_scores, scores[pos], side="left")
    upper = np.searchsorted(sorted_scores, scores[pos], side="right")
    w_pos = counts[:, pos]
    pairs = np.einsum("ij,ij->i", w_pos, below[:, lower])  # the negatives strictly below each positive
    tied = np.flatnonzero(upper != lower)
    if tied.size:  # and half of those tied with it (exact: integer sums, halved once)
        pairs += np.einsum("ij,ij->i", w_pos[:, tied], below[:, upper[tied]] - below[:, lower[tied]]) / 2
    n_pos, n_neg = w_pos.sum(axis=1), below[:, -1]
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where((n_pos > 0) & (n_neg > 0), pairs / (n_pos * n_neg), np.nan)


def _auroc_counts(labels: np.ndarray, scores: np.ndarray, counts: np.ndarray) -> np.ndarray:
    if labels.ndim == 2:  # multi-label: the mean AUROC of the labels both present and absent in the resample
        per_label = np.stack([_binary_auc(labels[:, k] == 1, scores[:, k], counts) for k in range(labels.shape[1])])
        defined = ~np.isnan(per_label)
        with np.errstate(invalid="ignore"):
            return np.where(defined.any(0), np.where(defined, per_label, 0).sum(0) / defined.sum(0), np.nan)
    if scores.shape[1] == 2:
        return _binary_auc(labels == 1, scores[:, 1], counts)
    classes = np.arange(scores.shape[1])
    per_class = np.stack([_binary_auc(labels == c, scores[:, c], counts) for c in classes])
    present = (counts @ (labels[:, None] == classes).astype(float)).T > 0
    n_present = present.sum(axis=0)
    with np.errstate(invalid="ignore"):
        mean = np.where(present, per_class, 0.0).sum(axis=0) / n_present
    return np.where(n_present >= 2, mean, np.nan)


def _macro_f1_counts(labels: np.ndarray, scores: np.ndarray, counts: np.ndarray) -> np.ndarray:
    if labels.ndim == 2:  # multi-label: F1 of each label's positive class, 0 where it is neither true nor predicted
        is_predicted, is_true = scores >= MULTILABEL_THRESHOLD, labels == 1
        tp, true, said = np.split(counts @ np.hstack([is_predicted & is_true, is_true, is_predicted]).astype(float),
                                  3, axis=1)
        denominator = said + true
        return np.where(denominator > 0, 2.0 * tp / np.maximum(denominator, 1), 0.0).mean(axis=-1)
    classes = np.arange(scores.shape[1])
    predicted = scores.argmax(axis=1)
    is_true, is_predicted = labels[:, None] == classes, predicted[:, None] == classes
    tp, true, said = np.split(counts @ np.hstack([is_true & is_predicted, is_true, is_predicted]).astype(float), 3,
                              axis=1)
    denominator = true + said
    seen = denominator > 0
    f1 = np.where(seen, 2.0 * tp / np.maximum(denominator, 1), 0.0)
    return f1.sum(axis=1) / seen.sum(axis=1)


def correct(y_true, proba) -> np.ndarray:
    """Per item, whether the prediction is right: the argmax class; multi-label, every label at the threshold."""
    y_true, proba = np.asarray(y_true), np.asarray(proba, dtype=np.float64)
    if y_true.ndim == 2:
        return ((proba >= MULTILABEL_THRESHOLD) == (y_true == 1)).all(axis=1)
    return proba.argmax(axis=1) == y_true


def _accuracy_counts(labels: np.ndarray, scores: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Multi-label: exact match, every label right. Over the items each row weighs (a bootstrap row sums to N)."""
    return counts @ correct(labels, scores).astype(float) / counts.sum(axis=1)


METRICS_OF_COUNTS: dict[str, Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]] = {
    "accuracy": _accuracy_counts,
    "auroc": _auroc_counts,
    "macro_f1": _macro_f1_counts,
}


def _metric(name: str) -> MetricFn:
    try:
        return METRICS[name]
    except KeyError:
        raise UnknownNameError("metric", name, METRICS) from None


def compute_all(y_true: ArrayLike, proba: ArrayLike) -> dict[str, float]:
    """Every registered metric at once, keyed by name, for reports that show them side by side."""
    return {name: fn(y_true, proba) for name, fn in METRICS.items()}


# --------------------------------------------------------------------------------------------------------
# robustness scores (Schiappa et al. 2022; Rainbow Noise, Tong et al. 2025)


def _check_scale(scale: str) -> None:
    if scale not in ROBUSTNESS_SCALES:
        valid = ", ".join(repr(s) for s in ROBUSTNESS_SCALES)
        raise ValueError(f"unknown robustness scale {scale!r}; valid scales: {valid}")


def _absolute(clean, perturbed, scale: str):
    # eq. 8 is written for accuracies in percent; "paper" keeps the /100 applied to fractions, as printed.
    divisor = 100.0 if scale == "paper" else 1.0
    return 1.0 - (clean - perturbed) / divisor


def _relative(clean, perturbed):
    clean = np.asarray(clean, dtype=float)
    perturbed = np.asarray(perturbed, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        score = 1.0 - (clean - perturbed) / clean
    return np.where(clean == 0, np.nan, score)


def absolute_robustness(clean: float, perturbed: float, scale: str = "percent") -> float:
    """gamma_a = 1 - (A_clean - A_pert)/100 with A in percent; inputs here are fractions (0..1).

    ``scale="percent"`` is the formula as defined (1 - drop). ``scale="paper"`` reproduces the numbers the
    Rainbow Noise paper prints, which divided a fractional drop by 100 again (values all near 0.999).
    """
    _check_scale(scale)
    return float(_absolute(float(clean), float(perturbed), scale))


def relative_robustness(clean: float, perturbed: float) -> float:
    """gamma_r = 1 - (A_clean - A_pert)/A_clean: the drop measured against what the model had to lose.

    NaN when the clean score is 0, where the ratio means nothing.
    """
    return float(_relative(float(clean), float(perturbed)))


def _robustness_fn(kind: str, scale: str) -> Callable:
    _check_scale(scale)
    if kind == "relative":
        return _relative
    if kind == "absolute":
        return lambda clean, perturbed: _absolute(clean, perturbed, scale)
    valid = ", ".join(repr(k) for k in ROBUSTNESS_KINDS)
    raise ValueError(f"unknown robustness kind {kind!r}; valid kinds: {valid}")


def average_drop(clean: float, perturbed: Sequence[float]) -> float:
    """Mean of clean - cell over a perturbation grid (Rainbow Noise table 5): one number per model."""
    cells = np.asarray(perturbed, dtype=float).reshape(-1)
    if cells.size == 0:
        raise ValueError("perturbed is empty; the average drop over no cells is undefined")
    return float(np.mean(float(clean) - cells))


def dropping_rate(clean: float, perturbed: Sequence[float]) -> float:
    """Average drop as a fraction of the clean score, so models with different baselines compare.

    Returned as a fraction; table 5 prints it times 100. NaN when the clean score is 0.
    """
    if float(clean) == 0.0:
        return float("nan")
    return average_drop(clean, perturbed) / float(clean)


def flip_rate(pred_clean: ArrayLike, pred_perturbed: ArrayLike) -> float:
    """Share of items whose predicted label changed: instability that accuracy hides when flips cancel."""
    before, after = _paired_labels(pred_clean, pred_perturbed, "pred_clean", "pred_perturbed")
    return float(np.mean(before != after))


def attack_success_rate(truth: ArrayLike, pred_clean: ArrayLike, pred_perturbed: ArrayLike) -> float:
    """Share of the items predicted right when clean that are predicted wrong when perturbed: TextAttack's attack
    success rate (items already wrong are skipped, not counted), here for any perturbation. nan when none was right."""
    truth = np.asarray(truth)
    before, after = _paired_labels(pred_clean, pred_perturbed, "pred_clean", "pred_perturbed")
    if truth.shape != before.shape:
        raise ValueError(f"truth has shape {truth.shape} but the predictions {before.shape}")
    right = before == truth
    return float(np.mean(after[right] != truth[right])) if right.any() else float("nan")


# --------------------------------------------------------------------------------------------------------
# paired bootstrap


def _index_blocks(rng: np.random.Generator, n_items: int, n_resamples: int) -> Iterator[np.ndarray]:
    rows_per_block = max(1, _MAX_INDEX_BLOCK // n_items)
    remaining = n_resamples
    while remaining > 0:
        rows = min(rows_per_block, remaining)
        yield rng.integers(0, n_items, size=(rows, n_items))
        remaining -= rows


class Resamples:
    """`n_resamples` bootstrap resamples of `n_items` items, the judge's one resampler: every interval, one-sided
    p-value and gate statistic reads its resamples from here. They are drawn from `seed` in blocks of at most
    `_MAX_INDEX_BLOCK` item indices, so memory stays bounded for large N and the blocks are the same however they are
    read: an integer seed draws them again on each pass, a Generator is drawn from once and its blocks (and their
    counts) kept. A statistic undefined on a resample is NaN there; its readers drop it (`_percentile_interval`,
    `bootstrap_one_sided_p`, multiplicity.studentized)."""

    def __init__(self, n_items: int, n_resamples: int, seed: SeedLike = 0):
        if n_resamples < 1:
            raise ValueError(f"n_resamples must be at least 1, got {n_resamples}")
        if n_items == 0:
            raise ValueError("cannot bootstrap zero items")
        self.n_items, self.n_resamples, self.seed = n_items, n_resamples, seed
        self._kept = None
        if isinstance(seed, np.random.Generator):
            self._kept = [(block, None) for block in _index_blocks(seed, n_items, n_resamples)]

    def _blocks(self) -> Iterator[np.ndarray]:
        if self._kept is not None:
            return (block for block, _ in self._kept)
        return _index_blocks(np.random.default_rng(self.seed), self.n_items, self.n_resamples)

    def values(self, statistic: Callable[[np.ndarray], ArrayLike]) -> np.ndarray:
        """[n_resamples]: `statistic(block)` of each block of resamples (item indices [rows, n_items]), one value
        per resample."""
        out = np.empty(self.n_resamples, dtype=float)
        filled = 0
        for block in self._blocks():
            values = np.asarray(statistic(block), dtype=float).reshape(-1)
            if values.size != block.shape[0]:
                raise ValueError(f"vectorized statistic returned {values.size} values for {block.shape[0]} resamples")
            out[filled : filled + block.shape[0]] = values
            filled += block.shape[0]
        return out

    def counts(self) -> Iterator[np.ndarray]:
        """Each block as `resample_counts` [rows, n_items], computed once where the blocks are kept."""
        if self._kept is None:
            return (resample_counts(block, self.n_items) for block in self._blocks())
        for i, (block, counts) in enumerate(self._kept):
            if counts is None:
                self._kept[i] = (block, resample_counts(block, self.n_items))
        return (counts for _, counts in self._kept)

    def metric(self, name: str, labels: np.ndarray, scores: np.ndarray) -> np.ndarray:
        """The named metric (METRICS_OF_COUNTS) of (labels [N], scores [N, C]) on every resample [n_resamples]."""
        of_counts = METRICS_OF_COUNTS[name]
        return np.concatenate([np.asarray(of_counts(labels, scores, counts), dtype=float) for counts in self.counts()])

    def mean(self, values: np.ndarray) -> np.ndarray:
        """The mean of per-item `values` [N] on every resample [n_resamples] (a rate of 0/1 values)."""
        values = np.asarray(values, dtype=np.float64)
        return np.concatenate([counts @ values / self.n_items for counts in self.counts()])


def paired_bootstrap_ci(
    statistic: Callable[..., float],
    *arrays: ArrayLike,
    n_resamples: int = 1000,
    confidence: float = 0.95,
    seed: SeedLike = 0,
    vectorized: bool = False,
) -> tuple[float, float]:
    """Percentile bootstrap interval that resamples items, with the same items for every array.

    Pairing matters: clean and perturbed predictions of one meme must stay together, or the interval of a
    difference absorbs the between-item variance twice. NaN resamples (e.g. AUROC on a one-class resample)
    are dropped; if all are NaN the interval is (nan, nan).

    With ``vectorized=True`` the statistic is called once per block with arrays of shape
    [resamples, N, ...] and must return one value per resample; the resamples are identical either way.
    """
    _check_confidence(confidence)
    return _percentile_interval(paired_bootstrap_samples(statistic, *arrays, n_resamples=n_resamples, seed=seed,
                                                         vectorized=vectorized), confidence)


def paired_bootstrap_samples(
    statistic: Callable[..., float],
    *arrays: ArrayLike,
    n_resamples: int = 1000,
    seed: SeedLike = 0,
    vectorized: bool = False,
) -> np.ndarray:
    """The statistic on each resample behind `paired_bootstrap_ci` ([n_resamples], NaN where undefined): what a
    one-sided p-value (`bootstrap_one_sided_p`) reads, from the very resamples the interval was read from."""
    if not arrays:
        raise ValueError("paired_bootstrap_ci needs at least one array to resample")
    data = [np.asarray(a) for a in arrays]
    if any(a.ndim == 0 for a in data):
        raise ValueError("every array must have a first (item) dimension")
    n_items = data[0].shape[0]
    if any(a.shape[0] != n_items for a in data):
        raise ValueError(f"arrays must share their first dimension, got {[a.shape[0] for a in data]}")
    resamples = Resamples(n_items, n_resamples, seed)
    if vectorized:
        return resamples.values(lambda block: statistic(*[a[block] for a in data]))
    return resamples.values(lambda block: [statistic(*[a[indices] for a in data]) for indices in block])


_RESAMPLED_CACHE: "OrderedDict[tuple, np.ndarray]" = OrderedDict()
_RESAMPLED_CACHE_SIZE = 4096  # entries of n_resamples floats: a few tens of MB at most


def _resampled(metric: str, labels: np.ndarray, scores: np.ndarray, n_resamples: int, seed: SeedLike,
               resamples: Resamples | None = None) -> np.ndarray:
    """`metric` on each bootstrap resample of (labels, scores), [n_resamples] with NaN where undefined; memoised
    by content for an integer seed. Every condition of a run shares the clean predictions and the resampled memes
    (same seed, same N), so a robustness interval computes the clean side once per run, and a condition's metric
    interval and robustness interval share its perturbed side: the same numbers, a third of the work."""
    if resamples is not None or isinstance(seed, np.random.Generator):
        return (resamples or Resamples(labels.shape[0], n_resamples, seed)).metric(metric, labels, scores)
    digest = hashlib.sha256()
    for a in (labels, scores):
        digest.update(f"{a.dtype.str}{a.shape}".encode())
        digest.update(np.ascontiguousarray(a).tobytes())
    key = (metric, n_resamples, int(seed), digest.hexdigest())
    if key in _RESAMPLED_CACHE:
        _RESAMPLED_CACHE.move_to_end(key)
        return _RESAMPLED_CACHE[key]
    values = Resamples(labels.shape[0], n_resamples, seed).metric(metric, labels, scores)
    values.setflags(write=False)
    _RESAMPLED_CACHE[key] = values
    if len(_RESAMPLED_CACHE) > _RESAMPLED_CACHE_SIZE:
        _RESAMPLED_CACHE.popitem(last=False)
    return values


def _check_confidence(confidence: float) -> None:
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must lie strictly between 0 and 1, got {confidence}")


def _percentile_interval(values: np.ndarray, confidence: float) -> tuple[float, float]:
    """The percentile interval of bootstrap values, NaN resamples dropped (paired_bootstrap_ci's rule)."""
    _check_confidence(confidence)
    defined = values[~np.isnan(values)]
    if defined.size == 0:
        return float("nan"), float("nan")
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(defined, [tail, 1.0 - tail])
    return float(low), float(high)


def metric_ci(
    metric: str,
    y_true: ArrayLike,
    proba: ArrayLike,
    n_resamples: int = 1000,
    confidence: float = 0.95,
    seed: SeedLike = 0,
) -> tuple[float, float]:
    """Bootstrap interval of one named metric, so a report can say whether a gap is noise."""
    _check_confidence(confidence)
    return _percentile_interval(metric_samples(metric, y_true, proba, n_resamples, seed), confidence)


def metric_samples(metric: str, y_true: ArrayLike, proba: ArrayLike, n_resamples: int = 1000,
                   seed: SeedLike = 0) -> np.ndarray:
    """The named metric on each resample behind `metric_ci` ([n_resamples], NaN where undefined; read-only)."""
    _metric(metric)
    labels, scores = _checked(y_true, proba)
    _check_resamples(labels, n_resamples)
    return _resampled(metric, labels, scores, n_resamples, seed)


def robustness_ci(
    metric: str,
    y_true: ArrayLike,
    proba_clean: ArrayLike,
    proba_perturbed: ArrayLike,
    kind: str = "relative",
    scale: str = "percent",
    n_resamples: int = 1000,
    confidence: float = 0.95,
    seed: SeedLike = 0,
) -> tuple[float, float]:
    """Paired bootstrap interval of the relative or absolute robustness of a named metric.

    Clean and perturbed scores come from the same resample each time, which is what makes the interval
    of their ratio (or difference) tight enough to be useful.
    """
    _check_confidence(confidence)
    return _percentile_interval(robustness_samples(metric, y_true, proba_clean, proba_perturbed, kind, scale,
                                                   n_resamples, seed), confidence)


def robustness_samples(
    metric: str,
    y_true: ArrayLike,
    proba_clean: ArrayLike,
    proba_perturbed: ArrayLike,
    kind: str = "relative",
    scale: str = "percent",
    n_resamples: int = 1000,
    seed: SeedLike = 0,
) -> np.ndarray:
    """The robustness on each resample behind `robustness_ci` ([n_resamples], NaN where undefined)."""
    _metric(metric)
    robustness = _robustness_fn(kind, scale)
    labels, clean_scores = _checked(y_true, proba_clean)
    _, perturbed_scores = _checked(labels, proba_perturbed)
    if clean_scores.shape != perturbed_scores.shape:
        raise ValueError(f"proba_clean {clean_scores.shape} and proba_perturbed {perturbed_scores.shape} differ in shape")
    _check_resamples(labels, n_resamples)
    # the same memes for both, resample by resample (a Generator is drawn from once)
    shared = Resamples(labels.shape[0], n_resamples, seed) if isinstance(seed, np.random.Generator) else None
    clean = _resampled(metric, labels, clean_scores, n_resamples, seed, shared)
    perturbed = _resampled(metric, labels, perturbed_scores, n_resamples, seed, shared)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.asarray(robustness(clean, perturbed), dtype=float)


def _check_resamples(labels: np.ndarray, n_resamples: int) -> None:
    if n_resamples < 1:
        raise ValueError(f"n_resamples must be at least 1, got {n_resamples}")
    if labels.shape[0] == 0:
        raise ValueError("cannot bootstrap zero items")


def flip_rate_ci(
    pred_clean: ArrayLike,
    pred_perturbed: ArrayLike,
    n_resamples: int = 1000,
    confidence: float = 0.95,
    seed: SeedLike = 0,
) -> tuple[float, float]:
    """Bootstrap interval of the flip rate, vectorised since it is the mean of a 0/1 vector."""
    _check_confidence(confidence)
    return _percentile_interval(flip_rate_samples(pred_clean, pred_perturbed, n_resamples, seed), confidence)


def flip_rate_samples(pred_clean: ArrayLike, pred_perturbed: ArrayLike, n_resamples: int = 1000,
                      seed: SeedLike = 0) -> np.ndarray:
    """The flip rate on each resample behind `flip_rate_ci` ([n_resamples])."""
    before, after = _paired_labels(pred_clean, pred_perturbed, "pred_clean", "pred_perturbed")
    return paired_bootstrap_samples(lambda flipped: flipped.mean(axis=-1), before != after,
                                    n_resamples=n_resamples, seed=seed, vectorized=True)


# --------------------------------------------------------------------------------------------------------
# paired significance test


def _binomial_half_cdf_numerator(k: int, n: int) -> int:
    """sum_{i<=k} C(n, i) as an exact integer, so the tail never loses precision however small it is."""
    term = total = 1
    for i in range(1, k + 1):
        term = term * (n - i + 1) // i  # C(n, i) from C(n, i-1); exact because C(n, i) is an integer
        total += term
    return total


def binomial_upper_tail(k: int, n: int) -> float:
    """P(X >= k) for X ~ Binomial(n, 1/2), exactly: the one-sided McNemar p of k discordant pairs of n going the
    worse way (by symmetry, P(X <= n - k))."""
    if k <= 0:
        return 1.0
    if k > n:
        return 0.0
    return _binomial_half_cdf_numerator(n - k, n) / (1 << n)  # int / int division is correctly rounded in Python


def mcnemar_p_value(correct_a: ArrayLike, correct_b: ArrayLike) -> float:
    """Exact two-sided McNemar test: did two systems (or clean vs perturbed) err on different items?

    Only the discordant pairs carry information: b = items A got right and B wrong, c = the reverse.
    Under H0 b ~ Binomial(b + c, 1/2); p = min(1, 2 P(X <= min(b, c))), and 1.0 when b + c == 0.
    Exact integer arithmetic avoids the chi-square approximation, which is poor for the small b + c
    typical of a single perturbation.
    """
    first, second = (_labels(v, name) for v, name in ((correct_a, "correct_a"), (correct_b, "correct_b")))
    if first.shape != second.shape:
        raise ValueError(f"correct_a and correct_b must have the same length, got {first.size} and {second.size}")
    first, second = first.astype(bool), second.astype(bool)
    only_a = int(np.count_nonzero(first & ~second))
    only_b = int(np.count_nonzero(~first & second))
    n_discordant = only_a + only_b
    if n_discordant == 0:
        return 1.0
    numerator = 2 * _binomial_half_cdf_numerator(min(only_a, only_b), n_discordant)
    return min(1.0, numerator / (1 << n_discordant))  # int / int division is correctly rounded in Python


# --------------------------------------------------------------------------------------------------------
# many cases at once: one-sided bootstrap p-values and the false discovery rate

THRESHOLD_DIRECTIONS = ("min", "max")


def _plain(value):
    """A numpy scalar as the Python number it holds, so a message says 0.5, not np.float64(0.5)."""
    return value.item() if isinstance(value, np.generic) else value


def bootstrap_one_sided_p(samples: ArrayLike, limit: float, direction: str) -> float:
    """One-sided p-value of "this case meets its threshold", from its bootstrap: the share of resamples on the
    passing side of `limit` (>= for a floor, direction "min"; <= for a ceiling, "max"; equality passes, as in
    thresholds.py), as (k + 1) / (n + 1), the usual correction for a p-value read off n resamples (never 0).

    Small means the whole bootstrap distribution is past the limit, which is what `decision = "confident"` asks of
    an interval; unlike the interval it is one number per case, so many cases can share an error budget
    (multiplicity.benjamini_hochberg). NaN resamples are dropped, as the intervals drop them; all NaN gives nan.
    """
    if direction not in THRESHOLD_DIRECTIONS:
        raise ValueError(f"direction must be 'min' (a floor) or 'max' (a ceiling), got {direction!r}")
    values = np.asarray(samples, dtype=float)
    if values.ndim != 1 or values.size == 0:
        raise ValueError(f"samples must be a non-empty 1-D array of bootstrap values, got shape {values.shape}")
    if isinstance(limit, bool) or not isinstance(limit, (int, float, np.number)) or not math.isfinite(limit):
        raise ValueError(f"limit must be a finite number, got {_plain(limit)!r}")
    defined = values[~np.isnan(values)]
    if defined.size == 0:
        return float("nan")
    passing = np.count_nonzero(defined >= limit if direction == "min" else defined <= limit)
    return (passing + 1) / (defined.size + 1)


def true_probability(proba: np.ndarray, y_true: np.ndarray) -> np.ndarray:
    """Per meme, the probability the detector gives its true label: of the true class, or for a multi-label task
    ([N, K] labels and probabilities) the mean over labels of the probability of each label's true value."""
    proba, y_true = np.asarray(proba), np.asarray(y_true)
    if y_true.ndim == 1:
        return proba[np.arange(len(y_true)), y_true]
    return np.where(y_true == 1, proba, 1 - proba).mean(axis=1)
