"""Gating checkpoints against a saved baseline: is the new checkpoint worse on the same memes, beyond noise?

A baseline holds, per model and condition, every meme's probabilities (clean and perturbed) plus what makes a
comparison meaningful: dataset fingerprint, seed, memes limit, task, model card and perturbation-library versions.
A baseline that does not match the run is refused before any case runs, naming the field.

The default rules judge, per condition (clean included), the metric itself under the perturbation (accuracy, AUROC,
macro-F1) and the flip rate, each as the paired change "how much worse now" on the same memes. Relative robustness
("loses less than it had") rewards a weaker model, so it is a rule to ask for (`rel_acc`), never the default.

Every rule of every condition of a run is one family (`judge_family`): one set of bootstrap resamples of the memes
per dataset (shared by every model scoring its memes), every statistic evaluated on it, and the run's error
controlled over the whole family (`--memerobust-gate-error`, default the family-wise error at 5% by the step-down
max-T; see multiplicity.py). A rule regresses when its adjusted one-sided p is at most the level, testing "worse by
more than its minimum effect" (`--memerobust-fail-on=acc:1%`). Under `--memerobust-gate=non-inferiority` the
question flips: a rule passes only when the simultaneous upper bound of its worsening stays within its margin (the
same `acc:2%`; 2 points unless given). What cannot be judged (one class left, no answers) is a named state, never
a silent pass.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from . import metrics
from .multiplicity import (CONTROLS, binomial_upper_tail, bh_adjusted_p, holm_adjusted_p, marginal_p,
                           maxt_adjusted_p, maxt_critical_value, studentized, upper_critical_value)
from ..atomic import atomic_write_text
from ..errors import ConfigError

FORMAT = "pytest-memerobust-baseline/1"
GATES = ("thresholds", "regressions", "both", "non-inferiority")
_METRICS = {"acc": "accuracy", "auroc": "auroc", "f1": "macro_f1", "flip": "flip_rate"}
_KINDS = {"rel": "relative", "abs": "absolute", "": "metric"}
_SHORT = {"relative": "rel. ", "absolute": "abs. ", "metric": "", "accuracy": "acc.", "auroc": "AUROC",
          "macro_f1": "macro-F1", "flip_rate": "flip rate"}
_VERSIONED = ("pytest-memerobust", "imagecorruptions", "textattack")  # what defines the perturbations
CLOSEST = 3  # conditions shown beside the regressed ones: those nearest to regressing


def gate_mode(requested: str | None, has_baseline: bool) -> str:
    """What fails the run: the suites' absolute thresholds, regressions against the baseline, or both. Unasked,
    `both` with a baseline and `thresholds` without; `regressions` without a baseline fails nothing (the run that
    saves the baseline). Non-inferiority without a baseline is refused: it passes only what it shows no worse than
    the baseline, and with none it would show nothing yet pass (an unset CI variable)."""
    if requested is not None:
        if requested not in GATES:
            raise ConfigError(f"--memerobust-gate={requested}: expected one of {', '.join(GATES)}")
        if requested == "non-inferiority" and not has_baseline:
            raise ConfigError("--memerobust-gate=non-inferiority needs --memerobust-baseline=FILE.json: it passes "
                              "only what is shown no worse than a baseline, and without one it would show nothing")
        return requested
    return "both" if has_baseline else "thresholds"


def check_resamples(control: "ErrorControl", n_resamples: int, option: str = "--memerobust-bootstrap") -> None:
    """Refuse a gate that could never fail: a bootstrap p-value is at least 1 / (resamples + 1), so with fewer than
    1 / level - 1 resamples no bootstrap rule can reach the level and the gate passes whatever the data."""
    needed = int(np.ceil(1 / control.alpha - 1 - 1e-9))
    if n_resamples < needed:
        raise ConfigError(f"{option}={n_resamples}: the gate's smallest p-value is 1/{n_resamples + 1}, above its "
                          f"level {control.alpha:g} ({control.spec}), so no bootstrap rule could ever fail; use at "
                          f"least {needed} resamples")


def gates_thresholds(mode: str) -> bool:
    return mode in ("thresholds", "both")


def gates_regressions(mode: str) -> bool:
    """Whether the baseline comparison fails the run: as regressions, or as conditions not shown non-inferior."""
    return mode in ("regressions", "both", "non-inferiority")


def comparison_mode(gate: str) -> str:
    """The question the comparisons answer: "is it worse beyond noise?" (regressions) or "is it shown to be no
    worse than the margin?" (non-inferiority)."""
    return "non-inferiority" if gate == "non-inferiority" else "regressions"


@dataclass(frozen=True)
class ErrorControl:
    """What a run's gate controls over every (model, condition, rule) it compares: `fwer` (the family-wise error:
    the chance that an unchanged or equally good checkpoint fails the job at all, by the bootstrap max-T), `holm`
    (the same by Holm on per-rule p-values: exact McNemar where it exists), `fdr` (the expected share of false alarms
    among the conditions flagged, Benjamini-Hochberg) or `none` (each rule alone), at `alpha`."""

    method: str = "fwer"
    alpha: float = 0.05

    @classmethod
    def parse(cls, text: str) -> "ErrorControl":
        method, colon, level = str(text).strip().partition(":")
        if method not in CONTROLS:
            raise ValueError(f"expected one of {', '.join(CONTROLS)}, optionally with a level: fwer, fwer:0.01, "
                             f"fdr:10%; got {text!r}")
        if not colon:
            return cls(method)
        try:  # `holm:` (a level left empty, an unset variable) is an error, not the default level
            alpha = _fraction(level)
        except ValueError:
            raise ValueError(f"bad level in {text!r}: expected a number such as 0.05 or 5%") from None
        if not 0.0 < alpha <= 0.5:
            raise ValueError(f"level {level!r} in {text!r} is not an error rate a gate can mean: expected a value in "
                             "(0, 0.5], e.g. 0.05 or 5%")
        return cls(method, alpha)

    @property
    def spec(self) -> str:
        return f"{self.method}:{self.alpha:g}"

    def short(self) -> str:
        """For summary lines: `family-wise error 5%`."""
        return {"fwer": f"family-wise error {self.alpha:.0%}", "holm": f"family-wise error {self.alpha:.0%} (Holm)",
                "fdr": f"false discovery rate {self.alpha:.0%}",
                "none": f"each rule alone at {self.alpha:.0%}"}[self.method]

    def describe(self) -> str:
        return {"fwer": f"family-wise error {self.alpha:.0%} (bootstrap max-T, step-down)",
                "holm": f"family-wise error {self.alpha:.0%} (Holm)",
                "fdr": f"false discovery rate {self.alpha:.0%} (Benjamini-Hochberg)",
                "none": f"no error control over the run (each rule alone at {self.alpha:.0%})"}[self.method]


def _fraction(text: str) -> float:
    """`0.05` or `5%` as a fraction; a ValueError for anything else (an empty text, a word)."""
    text = text.strip()
    return float(text[:-1]) / 100 if text.endswith("%") else float(text)


DEFAULT_CONTROL = ErrorControl()
DEFAULT_MARGIN = 0.02  # non-inferiority: how much worse a rule without its own margin may be (2 points)
POWER = 0.8
_Z_POWER = 0.8416212335729143  # the standard normal's 80% quantile: the minimum detectable effect at 80% power


@dataclass(frozen=True)
class Comparison:
    """One rule on one condition: the baseline's score and this run's, the paired difference (now - before), the
    one-sided test in the worse direction (`p_raw` alone, `p_value` adjusted for the run's family under `control`),
    the simultaneous bound on the difference (`bound`: under `regressions` the side nearest to "no worse", under
    `non-inferiority` the worst the data allow) and the decision. `regressed` is whether this rule fails the gate;
    `state` says what was decided ("regressed", "no regression", "non-inferior", "not shown non-inferior" or "not
    judged: why"). `low`..`high` is the per-rule percentile interval at the run's confidence, for reading only."""

    model: str
    dataset: str
    condition: str
    rule: str  # the rule's spec, e.g. "acc", "flip", "rel_acc:1%"
    what: str  # e.g. "accuracy", "flip rate", "relative robustness of accuracy"
    higher_is_better: bool
    before: float
    now: float
    low: float
    high: float
    p_value: float
    test: str
    min_effect: float
    regressed: bool
    p_raw: float = float("nan")
    bound: float = float("nan")
    state: str = ""
    control: str = ""
    mode: str = "regressions"
    memes: int = 0
    memes_needed: int | None = None  # non-inferiority not shown: memes that would show it at this difference
    detectable: float = float("nan")  # the worsening this test detects at 80% power under the run's control

    @property
    def difference(self) -> float:
        return self.now - self.before

    @property
    def judged(self) -> bool:
        return not self.state.startswith("not judged")

    @property
    def room(self) -> float:
        """How far the decision is from flipping to a failure, in adjusted p (negative: failing); inf if not
        judged."""
        if not self.judged:
            return float("inf")
        alpha = ErrorControl.parse(self.control).alpha
        return (self.p_value - alpha) * (-1 if self.mode == "non-inferiority" else 1)

    def as_dict(self) -> dict:
        d = asdict(self)
        d["difference"], d["ci"] = self.difference, [self.low, self.high]
        del d["low"], d["high"]
        return d

    def __str__(self) -> str:
        if not self.judged:
            return f"{self.what} {self.state}: baseline {self.before:.4f} -> now {self.now:.4f}"
        tests = (f"one-sided p {self.p_raw:.3g}, adjusted p {self.p_value:.3g} under "
                 f"{ErrorControl.parse(self.control).short()}")
        if self.mode == "non-inferiority":
            worst = -self.bound if self.higher_is_better else self.bound
            verb = "drop" if self.higher_is_better else "rise"
            if self.regressed:
                needed = (f"; about {self.memes_needed} memes would show it at this difference" if self.memes_needed
                          else "; no number of memes shows it: the observed change is past the margin")
                return (f"{self.what} not shown non-inferior with {self.memes} memes: baseline {self.before:.4f} -> "
                        f"now {self.now:.4f}, its {verb} may reach {worst:.4f} (simultaneous bound) > margin "
                        f"{self.min_effect:.4f} ({tests}){needed}")
            return (f"{self.what} non-inferior: baseline {self.before:.4f} -> now {self.now:.4f}, its {verb} is at "
                    f"most {worst:.4f} <= margin {self.min_effect:.4f} ({tests})")
        allowed = f", allowed {self.min_effect:.4f}" if self.min_effect else ""
        return (f"{self.what} {self.state}: baseline {self.before:.4f} -> now {self.now:.4f} "
                f"(difference {self.difference:+.4f}, simultaneous bound {self.bound:+.4f}{allowed}; {tests})")


@dataclass(frozen=True)
class RegressionCheck:
    """`acc:1%` = accuracy under the condition may not fall by more than 1 point beyond noise (the margin, under
    non-inferiority); `flip` = the flip rate may not rise beyond noise; `rel_acc` = relative robustness of accuracy
    (a secondary rule)."""

    kind: str  # "relative", "absolute" or "metric" (the score under the condition itself)
    metric: str  # accuracy, auroc, macro_f1, flip_rate
    min_effect: float = 0.0

    @classmethod
    def parse(cls, spec: str) -> "RegressionCheck":
        name, colon, effect = spec.partition(":")
        prefix, _, short = name.rpartition("_")
        if prefix not in _KINDS or short not in _METRICS or (short == "flip" and prefix):
            raise ValueError(f"bad regression spec {spec!r}: expected acc|auroc|f1|flip[:EFFECT] or "
                             f"rel_|abs_ + acc|auroc|f1, e.g. acc:1%, flip:2% or rel_auroc:0.02")
        if not colon:
            return cls(_KINDS[prefix], _METRICS[short], 0.0)
        try:  # `acc:` (an effect left empty) is an error, not no effect
            value = _fraction(effect)
        except ValueError:
            raise ValueError(f"bad effect size in {spec!r}: expected a number or a percentage") from None
        if not effect.endswith("%") and value >= 1:
            raise ValueError(f"effect size {effect!r} in {spec!r} is read as a fraction of 1 (scores lie in 0..1): "
                             f"write {value:g}% for {value:g} points, or {value / 100:g}")
        if not 0.0 <= value < 1.0 or value != value:
            raise ValueError(f"effect size {effect!r} in {spec!r} is not a change a score in 0..1 can make: expected "
                             "a value from 0 up to below 100%, e.g. 1% or 0.01")
        return cls(_KINDS[prefix], _METRICS[short], value)

    @property
    def spec(self) -> str:
        prefix = {"relative": "rel_", "absolute": "abs_", "metric": ""}[self.kind]
        short = {v: k for k, v in _METRICS.items()}[self.metric]
        return f"{prefix}{short}" + (f":{self.min_effect:g}" if self.min_effect else "")

    @property
    def higher_is_better(self) -> bool:
        return self.metric != "flip_rate"

    def applies_to(self, condition_kind: str) -> bool:
        """The clean condition is compared on the metrics themselves (robustness and flips are 0 by definition)."""
        return condition_kind != "clean" or (self.kind == "metric" and self.metric != "flip_rate")

    def label(self) -> str:
        what = {"relative": "relative robustness of ", "absolute": "absolute robustness of ", "metric": ""}[self.kind]
        return f"{what}{self.metric.replace('_', ' ')}"

    def short_label(self) -> str:
        """For table headers: `rel. acc.`, `abs. AUROC`, `macro-F1`, `flip rate`."""
        return _SHORT[self.kind] + _SHORT[self.metric]

    def _score(self, y, clean, perturbed, scale):
        if self.metric == "flip_rate":
            from .results import predicted_labels

            return metrics.flip_rate(predicted_labels(y, clean), predicted_labels(y, perturbed))
        value = metrics.METRICS[self.metric](y, perturbed)
        if self.kind == "metric":
            return value
        base = metrics.METRICS[self.metric](y, clean)
        if self.kind == "relative":
            return metrics.relative_robustness(base, value)
        return metrics.absolute_robustness(base, value, scale)

    def _resampled(self, side: "_Resampler", clean, perturbed, scale) -> np.ndarray:
        """The score on each of `side`'s resamples of the memes [B]: the same quantity as `_score`."""
        if self.metric == "flip_rate":
            return side.flip_rate(clean, perturbed)
        value = side.metric(self.metric, perturbed)
        if self.kind == "metric":
            return value
        return metrics._robustness_fn(self.kind, scale)(side.metric(self.metric, clean), value)

    def exact_p(self, y, now: tuple, before: tuple) -> float:
        """The exact one-sided McNemar p of "now is worse" for accuracy and the flip rate without an effect size (the
        discordant memes going the worse way, of all discordant); nan for rules without an exact test."""
        if self.kind != "metric" or self.metric not in ("accuracy", "flip_rate") or self.min_effect:
            return float("nan")
        good_now, good_before = (self._paired_outcomes(y, *side) for side in (now, before))
        worse, better = int(np.sum(good_before & ~good_now)), int(np.sum(~good_before & good_now))
        return binomial_upper_tail(worse, worse + better)

    def _paired_outcomes(self, y, clean, perturbed) -> np.ndarray:
        """Per meme, what McNemar pairs: right under the condition (accuracy), or kept its clean prediction (flip
        rate: a meme that flips counts as a failure)."""
        if self.metric == "accuracy":
            return correct(y, perturbed)
        from .results import predicted_labels

        return predicted_labels(y, clean) == predicted_labels(y, perturbed)


DEFAULT_CHECKS = tuple(RegressionCheck("metric", m) for m in ("accuracy", "auroc", "macro_f1", "flip_rate"))


@dataclass(frozen=True)
class PairedCell:
    """One condition of one model on one dataset in both runs: {"y", "clean", "perturbed"} (and optionally
    "declined": the memes the detector declined, clean or under the condition) over the same memes in the same
    order."""

    model: str
    dataset: str
    condition: str
    kind: str  # "clean" or not: which rules apply
    now: dict
    then: dict


class _Resampler:
    """The bootstrap resamples of one dataset's memes, drawn once and shared by every model, condition and rule that
    scores them: they share their memes, and the max-T procedure needs their statistics on the same resamples (two
    modes of one detector that give the same outputs then get the same decision). Keyed by the seed, the dataset and
    the memes' labels, never by model or condition. A resample is held as how often it draws each meme, so a
    metric over all resamples is a few matrix products of exact integer counts (the same bits on any thread count);
    metrics of a side are computed once (the clean side is shared by every condition of a run)."""

    BLOCK = 250  # resamples scored at once where a metric has no count form (multi-label)

    def __init__(self, y: np.ndarray, n_resamples: int, key: tuple):
        self.y, self.n = y, len(y)
        digest = hashlib.sha256(json.dumps([str(k) for k in key]).encode()).digest()
        rng = np.random.default_rng(int.from_bytes(digest[:8], "little"))
        self.index = rng.integers(0, self.n, size=(n_resamples, self.n))
        flat = (self.index + (np.arange(n_resamples) * self.n)[:, None]).ravel()
        self.counts = np.bincount(flat, minlength=n_resamples * self.n).reshape(n_resamples, self.n).astype(float)
        self._memo: dict[tuple, np.ndarray] = {}

    def _remember(self, key: tuple, compute) -> np.ndarray:
        if key not in self._memo:
            self._memo[key] = compute()
        return self._memo[key]

    @staticmethod
    def _digest(*arrays) -> str:
        h = hashlib.sha256()
        for a in arrays:
            h.update(np.ascontiguousarray(a).tobytes())
        return h.hexdigest()

    def metric(self, name: str, proba: np.ndarray) -> np.ndarray:
        """`name` (accuracy, auroc, macro_f1) on every resample [B], NaN where a resample leaves it undefined."""
        return self._remember((name, self._digest(proba)), lambda: self._metric(name, proba))

    def _metric(self, name: str, proba: np.ndarray) -> np.ndarray:
        y, counts = self.y, self.counts
        if y.ndim == 2:
            of_resamples = metrics.METRICS_OF_RESAMPLES[name]
            return np.concatenate([np.asarray(of_resamples(y[block], proba[block]), dtype=np.float64) for block in
                                   np.array_split(self.index, max(1, len(self.index) // self.BLOCK))])
        classes = np.arange(proba.shape[1])
        if name == "accuracy":
            return counts @ (proba.argmax(axis=1) == y).astype(float) / self.n
        if name == "macro_f1":
            predicted = proba.argmax(axis=1)
            is_true, is_predicted = y[:, None] == classes, predicted[:, None] == classes
            tp, true, said = np.split(counts @ np.hstack([is_true & is_predicted, is_true, is_predicted]).astype(float),
                                      3, axis=1)
            denominator = true + said
            seen = denominator > 0
            f1 = np.where(seen, 2.0 * tp / np.maximum(denominator, 1), 0.0)
            return f1.sum(axis=1) / seen.sum(axis=1)
        if proba.shape[1] == 2:
            return self._binary_auc(y == 1, proba[:, 1])
        per_class = np.stack([self._binary_auc(y == c, proba[:, c]) for c in classes])
        present = (counts @ (y[:, None] == classes).astype(float)).T > 0
        n_present = present.sum(axis=0)
        with np.errstate(invalid="ignore"):
            mean = np.where(present, per_class, 0.0).sum(axis=0) / n_present
        return np.where(n_present >= 2, mean, np.nan)

    def _binary_auc(self, positive: np.ndarray, scores: np.ndarray) -> np.ndarray:
        """Mann-Whitney's AUROC on every resample: each (positive, negative) pair of memes counts 1 when the positive
        scores higher and 1/2 on a tie, weighted by how often the resample draws each, over P x N. Per positive the
        weight of the negatives below it is a cumulative sum over the negatives sorted by score (exact integers)."""
        pos, neg = np.flatnonzero(positive), np.flatnonzero(~positive)
        order = neg[np.argsort(scores[neg], kind="stable")]
        below = np.zeros((len(self.counts), len(order) + 1))
        np.cumsum(self.counts[:, order], axis=1, out=below[:, 1:])
        sorted_scores = scores[order]
        lower = np.searchsorted(sorted_scores, scores[pos], side="left")
        upper = np.searchsorted(sorted_scores, scores[pos], side="right")
        w_pos = self.counts[:, pos]
        pairs = (w_pos * (below[:, lower] + below[:, upper])).sum(axis=1) / 2  # below + ties / 2, doubled then halved
        n_pos, n_neg = w_pos.sum(axis=1), below[:, -1]
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where((n_pos > 0) & (n_neg > 0), pairs / (n_pos * n_neg), np.nan)

    def flip_rate(self, clean: np.ndarray, perturbed: np.ndarray) -> np.ndarray:
        from .results import predicted_labels

        def compute():
            flipped = predicted_labels(self.y, clean) != predicted_labels(self.y, perturbed)
            return self.counts @ flipped.astype(np.float64) / self.n

        return self._remember(("flip", self._digest(clean, perturbed)), compute)


def _not_judged_reason(answered: np.ndarray | None) -> str | None:
    """Why a condition cannot be compared at all: the detector declined (nearly) every meme in one of the runs."""
    if answered is not None and answered.sum() < 2:
        return "not judged: no answers" if not answered.any() else "not judged: fewer than 2 memes answered"
    return None


def _why_undefined(check: RegressionCheck, y) -> str:
    if check.metric == "auroc" and len(np.unique(np.asarray(y), axis=0)) < 2:
        return "not judged: one class left"
    if check.kind == "relative":
        return "not judged: clean score 0 (relative robustness undefined)"
    return "not judged: undefined"


def judge_family(cells, checks=DEFAULT_CHECKS, *, control: ErrorControl = DEFAULT_CONTROL,
                 mode: str = "regressions", n_resamples: int = 1000, seed: int = 0, scale: str = "percent",
                 confidence: float = 0.95) -> list[Comparison]:
    """Every rule that applies to every `PairedCell` (baseline `then` against `now`), judged as one family under
    `control`: a pure function of the paired per-meme outputs. Per rule the statistic is w = how much worse now is
    (before - now; now - before for the flip rate) on the same memes, resampled on one index matrix per dataset
    (and labels); `regressions` tests "w <= the rule's minimum effect" one-sided, `non-inferiority` tests "w >= the
    margin" (passing only where the simultaneous upper bound of w stays within it)."""
    if mode not in ("regressions", "non-inferiority"):
        raise ValueError(f"mode must be 'regressions' or 'non-inferiority', got {mode!r}")
    inferiority = mode == "non-inferiority"
    resamplers: dict[tuple, _Resampler] = {}
    tests: list[dict] = []
    for cell in cells:
        y = np.asarray(cell.now["y"])
        arrays = [np.asarray(a, dtype=np.float64) for a in (cell.now["clean"], cell.now["perturbed"],
                                                            cell.then["clean"], cell.then["perturbed"])]
        declined = [np.asarray(c["declined"], bool) for c in (cell.now, cell.then) if c.get("declined") is not None]
        answered = ~np.logical_or.reduce(declined) if declined and np.logical_or.reduce(declined).any() else None
        reason = _not_judged_reason(answered)
        key = (seed, cell.dataset, _Resampler._digest(y))  # the memes, whichever model or condition scores them
        if answered is not None and reason is None:  # the memes answered in both runs: resampled on their own
            y, arrays = y[answered], [a[answered] for a in arrays]
            key += (_Resampler._digest(answered),)
        if reason is None and key not in resamplers:
            resamplers[key] = _Resampler(y, n_resamples, key)
        for check in checks:
            if not check.applies_to(cell.kind):
                continue
            sign = 1.0 if check.higher_is_better else -1.0
            margin = check.min_effect or (DEFAULT_MARGIN if inferiority else 0.0)
            test = {"cell": cell, "check": check, "sign": sign, "null": margin, "reason": reason, "n": len(y)}
            tests.append(test)
            if reason is not None:
                test.update(before=float("nan"), now=float("nan"), w=float("nan"), samples=None)
                continue
            now, before = (float(check._score(y, *arrays[i:i + 2], scale)) for i in (0, 2))
            side = resamplers[key]
            w = sign * (before - now)
            samples = sign * (check._resampled(side, *arrays[2:], scale) - check._resampled(side, *arrays[:2], scale))
            test.update(before=before, now=now, w=w, samples=samples)
            if control.method == "holm":  # the only control that reads exact p-values
                test["exact"] = check.exact_p(y, arrays[:2], arrays[2:])
            if w != w:
                test["reason"] = _why_undefined(check, y)
    return _decide(tests, control, mode, n_resamples, confidence)


def _decide(tests: list[dict], control: ErrorControl, mode: str, n_resamples: int, confidence: float):
    """The family's adjusted p-values, simultaneous bounds and decisions (see judge_family)."""
    inferiority = mode == "non-inferiority"
    judged = [t for t in tests if t["reason"] is None]
    direction = -1.0 if inferiority else 1.0  # the statistic whose large values are the evidence sought
    if judged:
        w = np.array([t["w"] for t in judged])
        samples = np.stack([t["samples"] for t in judged])
        nulls = np.array([t["null"] for t in judged])
        se, z, draws = studentized(direction * w, direction * samples, direction * nulls)
        raw = marginal_p(z, draws)
        exact = np.array([t.get("exact", np.nan) for t in judged])
        if control.method == "fwer":
            adjusted, c = maxt_adjusted_p(z, draws), np.full(len(judged), maxt_critical_value(draws, control.alpha))
        elif control.method == "holm":
            raw = np.where(np.isnan(exact) | inferiority, raw, exact)
            adjusted = holm_adjusted_p(raw)
            c = _quantiles(draws, control.alpha / max(1, int(np.sum(~np.isnan(z)))))
        else:
            adjusted = bh_adjusted_p(raw) if control.method == "fdr" else raw
            c = _quantiles(draws, control.alpha)
        with np.errstate(invalid="ignore"):
            detectable = np.where(se > 0, (c + _Z_POWER) * se, np.nan) + nulls
        for i, t in enumerate(judged):
            t.update(se=se[i], p_raw=float(raw[i]), p=float(adjusted[i]), c=float(c[i]),
                     detectable=float(detectable[i]))
            if np.isnan(z[i]):
                t["reason"] = "not judged: undefined on the resamples"
    out = []
    for t in tests:
        cell, check, sign = t["cell"], t["check"], t["sign"]
        where = (cell.model, cell.dataset, cell.condition)
        nan = float("nan")
        if t["reason"] is not None:
            out.append(Comparison(*where, check.spec, check.label(), check.higher_is_better, t["before"], t["now"],
                                  nan, nan, nan, _TESTS[control.method], t["null"], False, state=t["reason"],
                                  control=control.spec, mode=mode, memes=t["n"]))
            continue
        w, se, c = t["w"], t["se"], t["c"]
        spread = c * se if se > 0 and c == c else 0.0  # no spread: every resample gives the estimate
        bound_w = w + spread if inferiority else w - spread  # the worst / the least worsening the data allow
        low, high = metrics._percentile_interval(-sign * t["samples"], confidence)
        rejected = t["p"] <= control.alpha
        if inferiority:
            state = "non-inferior" if rejected else "not shown non-inferior"
            failing = not rejected
        else:
            state = "regressed" if rejected else "no regression"
            failing = rejected
        needed = None
        if inferiority and failing and w < t["null"] and se > 0 and c == c:
            needed = int(np.ceil(t["n"] * (c * se / (t["null"] - w)) ** 2))
        out.append(Comparison(*where, check.spec, check.label(), check.higher_is_better, t["before"], t["now"],
                              float(low), float(high), t["p"], _TESTS[control.method], t["null"], bool(failing),
                              p_raw=t["p_raw"], bound=float(-sign * bound_w) + 0.0, state=state, control=control.spec,
                              mode=mode, memes=t["n"], memes_needed=needed,
                              detectable=float(t["detectable"]) if not inferiority else nan))
    return out


_TESTS = {"fwer": "paired bootstrap, max-T", "holm": "McNemar / paired bootstrap, Holm",
          "fdr": "paired bootstrap, Benjamini-Hochberg", "none": "paired bootstrap"}


def _quantiles(draws: np.ndarray, alpha: float) -> np.ndarray:
    """Per test its own critical value at `alpha` (multiplicity.upper_critical_value of its draws)."""
    return np.array([upper_critical_value(row, alpha) for row in draws])


def compare_condition(now: dict, then: dict, where: tuple[str, str, str], condition_kind: str,
                      checks=DEFAULT_CHECKS, **options) -> list[Comparison]:
    """Every rule that applies to one condition, baseline `then` against `now`, as a family of its own."""
    return judge_family([PairedCell(*where, condition_kind, now, then)], checks, **options)


def summarize(comparisons: list[Comparison], closest: int = CLOSEST, *, new: list[str] = (),
              missing: list[str] = ()) -> dict:
    """The gate's verdict over a run: how many conditions were compared and failed it (and whether clean did), how
    many rules could not be judged and why, the conditions only one side has (`new`: run but not in the baseline;
    `missing`: in the baseline, not run), the error control, the power, and the failing comparisons plus the
    `closest` nearest to failing, for a side-by-side table. A condition several suites run (clean, in each) counts
    once."""
    comparisons = list({(c.model, c.dataset, c.condition, c.rule): c for c in comparisons}.values())
    conditions = list(dict.fromkeys((c.model, c.dataset, c.condition) for c in comparisons))
    failing = list(dict.fromkeys((c.model, c.dataset, c.condition) for c in comparisons if c.regressed))
    clean = [key for key in failing if key[2] == "clean"]
    mode = comparisons[0].mode if comparisons else "regressions"
    n = len(conditions)
    verb = "not shown non-inferior" if mode == "non-inferiority" else "regressed"
    line = f"{len(failing)} of {n} condition{'s' * (n != 1)} {verb}"
    if any(key[2] == "clean" for key in conditions):
        line += ", clean included" if clean else " (clean did not)"
    judged = [c for c in comparisons if c.judged]
    if judged:
        line += f"; {ErrorControl.parse(judged[0].control).short()} over {len(judged)} rule{'s' * (len(judged) != 1)}"
    unjudged = [c for c in comparisons if not c.judged]
    reasons: dict[str, int] = {}
    for c in unjudged:
        reasons[c.state.removeprefix("not judged: ")] = reasons.get(c.state.removeprefix("not judged: "), 0) + 1
    if unjudged:
        line += f"; {len(unjudged)} not judged (" + ", ".join(f"{why}: {k}" for why, k in reasons.items()) + ")"
    if new:
        line += f"; {len(new)} new condition{'s' * (len(new) != 1)} not gated"
    if missing:
        line += f"; {len(missing)} baseline condition{'s' * (len(missing) != 1)} not run"
    if not comparisons and not new and not missing:
        line = "nothing compared"
    bad = sorted((c for c in comparisons if c.regressed), key=lambda c: (c.condition != "clean", c.room))
    failing_keys = set(failing)
    nearest: dict[tuple, Comparison] = {}  # per condition that did not fail, its rule nearest to failing
    for c in judged:
        key = (c.model, c.dataset, c.condition)
        if key not in failing_keys and (key not in nearest or c.room < nearest[key].room):
            nearest[key] = c
    near = sorted(nearest.values(), key=lambda c: c.room)[:closest]
    return {"conditions": n, "regressed": len(failing), "clean_regressed": bool(clean), "summary": line,
            "mode": mode, "control": judged[0].control if judged else None,
            "control_text": ErrorControl.parse(judged[0].control).describe() if judged else None,
            "rules": len(judged), "not_judged": reasons, "new": list(new), "missing": list(missing),
            "power": _power(judged) if mode == "regressions" else {},
            "memes_needed": _memes_needed(comparisons) if mode == "non-inferiority" else None,
            "rows": [c.as_dict() for c in bad + near] + [c.as_dict() for c in unjudged]}


def _power(judged: list[Comparison]) -> dict:
    """Per rule the median worsening its tests detect at 80% power under the run's control (a normal
    approximation: (critical value + z_0.8) x standard error): what the run can and cannot see."""
    by_rule: dict[str, list[float]] = {}
    for c in judged:
        if c.detectable == c.detectable:
            by_rule.setdefault(c.what, []).append(c.detectable)
    return {what: float(np.median(values)) for what, values in by_rule.items()}


def _memes_needed(comparisons: list[Comparison]) -> dict:
    """Over the rules not shown non-inferior: the memes that would show them at their observed change (median and
    most), and how many no number of memes would (their change is already past the margin)."""
    failing = [c for c in comparisons if c.regressed and c.judged]
    needed = sorted(c.memes_needed for c in failing if c.memes_needed)
    return {"rules": len(failing), "median": int(np.median(needed)) if needed else None,
            "most": needed[-1] if needed else None, "never": len(failing) - len(needed),
            "memes": max((c.memes for c in comparisons), default=0)}


def memes_needed_line(summary: dict) -> str | None:
    """`9 rules not shown non-inferior with 160 memes: about 1,900 memes would show them (median; 12,000 the most);
    2 cannot be shown at any number (their change is past the margin)`."""
    needed = summary.get("memes_needed") or {}
    if not needed.get("rules"):
        return None
    parts = []
    if needed["median"]:
        parts.append(f"about {needed['median']:,} memes would show them at their observed change (median; "
                     f"{needed['most']:,} the most)")
    if needed["never"]:
        parts.append(f"{needed['never']} cannot be shown with any number of memes (the change is past the margin)")
    return f"{needed['rules']} rules not shown non-inferior with {needed['memes']} memes: " + "; ".join(parts)


def power_line(summary: dict) -> str | None:
    """`at 80% power this run detects a worsening of about: accuracy 0.061, AUROC 0.083, flip rate 0.050`."""
    power = summary.get("power") or {}
    if not power:
        return None
    return (f"at {POWER:.0%} power this run detects a worsening of about (median over conditions): "
            + ", ".join(f"{what} {value:.3f}" for what, value in power.items()))


def comparison_headers(confidence: float = 0.95) -> list[str]:
    """The decision first, so an 80-column CI log that crops a long row still shows it."""
    return ["verdict", "condition", "rule", "base → now", "Δ", "bound", "adj. p"]


VERDICT_CELLS = {"regressed": "REGRESSED", "no regression": "ok", "non-inferior": "ok",
                 "not shown non-inferior": "NOT SHOWN"}


def comparison_state(row: dict) -> str:
    """A comparison's decision (Comparison.as_dict), also from a report written before states were recorded."""
    return row.get("state") or ("regressed" if row.get("regressed") else "no regression")


def verdict_cell(row: dict) -> str:
    """A comparison's decision in a few letters: REGRESSED, NOT SHOWN (non-inferiority), ok, or not judged."""
    return VERDICT_CELLS.get(comparison_state(row), "not judged")


def comparison_rows(rows: list[dict], limit: int | None = None) -> list[list[str]]:
    """`summarize`'s rows (Comparison.as_dict) as table rows for `comparison_headers`, one per condition (its
    rule nearest to, or furthest past, failing) and at most `limit` of them (`comparison_conditions` counts
    them). With several models the condition is prefixed by the model (only its mode, `:text`, when every model is
    one detector's modes), with several datasets by the dataset."""
    chosen = _by_condition(rows)
    models = {r["model"] for r in chosen}
    one_detector = len({m.partition(":")[0] for m in models}) == 1
    several_data = len({r["dataset"] for r in chosen}) > 1

    def where(r):
        model = "" if len(models) == 1 else (r["model"].partition(":")[1] + r["model"].partition(":")[2]
                                             if one_detector else r["model"])
        return " ".join(filter(None, [model, r["dataset"] if several_data else "", short_condition(r["condition"])]))

    return [[verdict_cell(r), where(r), r["rule"], f"{r['before']:.3f} → {r['now']:.3f}", _signed(r["difference"]),
             _signed(r.get("bound", NAN)), _p(r["p_value"])] for r in chosen[:limit]]


NAN = float("nan")


def _p(value) -> str:
    return "-" if value is None or value != value else f"{value:.2g}"


def short_condition(condition_id: str) -> str:
    """A condition id without its modality prefixes, for narrow tables: `typos@3+uap@3`."""
    return "+".join(side.partition("=")[2] if side.startswith(("text=", "image=")) else side
                    for side in condition_id.split("+"))


def _signed(value: float, digits: int = 3) -> str:
    return "nan" if value != value else f"{value:+.{digits}f}".replace("-", "−")


def comparison_conditions(rows: list[dict]) -> int:
    return len(_by_condition(rows))


def _by_condition(rows: list[dict]) -> list[dict]:
    by_condition: dict[tuple, dict] = {}
    for r in rows:
        key = (r["model"], r["dataset"], r["condition"])
        if key not in by_condition or _worse_first(r) < _worse_first(by_condition[key]):
            by_condition[key] = r
    return list(by_condition.values())


def _worse_first(row: dict) -> tuple:
    """Failing before not, judged before not, then the nearest to (or furthest past) failing."""
    p = row.get("p_value")
    judged = p is not None and p == p
    toward = (p if row.get("mode") != "non-inferiority" else -p) if judged else float("inf")
    return (not row["regressed"], not judged, toward)


BASELINE_DECIMALS = 6  # probabilities are saved, and compared, at this precision


def baseline_cell(result) -> dict:
    """A condition's entry in a baseline (and the current run's side of a comparison, rounded alike, so an
    unchanged checkpoint compares equal to its own baseline to the last digit)."""
    cell = {"y": result.y_true.tolist(), "clean": np.round(result.proba_clean, BASELINE_DECIMALS).tolist(),
            "perturbed": np.round(result.proba, BASELINE_DECIMALS).tolist()}
    sides = (getattr(result, "abstained_clean", None), getattr(result, "abstained", None))
    declined = [np.asarray(a, bool) for a in sides if a is not None]
    if declined:  # a detector that can decline: the memes it declined clean or under the condition
        cell["declined"] = np.logical_or.reduce(declined).tolist()
    return cell


def card_digest(card: dict) -> str:
    """What defines a detector apart from its weights: a changed architecture, backbone or classes makes a
    comparison meaningless; another checkpoint is what the gate is for."""
    keep = ("architecture", "classes", "task", "multilabel", "params", "backbone", "text_backbone")
    text = json.dumps({k: card.get(k) for k in keep}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def baseline_data(session) -> dict:
    """Everything a later run needs to compare against this one, with the per-meme probabilities, and per model and
    dataset the memes' ids and captions in the results' order (`memes`), so a flip ledger can name the memes; `run`
    holds the facts a gated run must share (limit, task per model and dataset, model cards)."""
    report = session.report()
    results: dict = {}
    memes: dict = {}
    tasks: dict = {}
    for (model, spec, condition), result in session.results.items():
        entry = results.setdefault(model, {}).setdefault(spec, {})
        entry[condition] = baseline_cell(result)
        tasks.setdefault(model, {})[spec] = result.task
        if spec not in memes.get(model, {}) and (named := _scored_memes(session, spec, result)) is not None:
            memes.setdefault(model, {})[spec] = named
    return {
        "format": FORMAT, "seed": report["seed"],
        "versions": {k: report["versions"].get(k) for k in _VERSIONED},
        "datasets": {spec: info["fingerprint"] for spec, info in report["datasets"].items()},
        "models": {name: info["checkpoint_sha256"] for name, info in report["models"].items()},
        "run": {"limit": report.get("options", {}).get("limit"), "tasks": tasks,
                "cards": {name: card_digest(info.get("card", {})) for name, info in report["models"].items()}},
        "results": results,
        "memes": memes,
    }


def check_run(baseline: dict, *, path, seed: int, limit: int | None, cases, versions: dict,
              labels: dict | None = None) -> None:
    """Refuse, before any case runs, a baseline that does not match the run, naming the field: seed, memes limit,
    task, model card, dataset, perturbation versions, and the memes' labels (`labels`: (model, spec) -> the run's
    labels of the memes it scores, as lists; a baseline whose labels differ, hand-edited or flipped, would fail every
    case it holds). `cases` are (model, dataset spec, task, card digest, dataset fingerprint) of the run's cases; a
    baseline that shares no model and dataset with them is refused too (the gate would compare nothing and pass)."""
    where = f"baseline {path}"
    if baseline["seed"] != seed:
        raise ConfigError(f"{where} was made with --memerobust-seed={baseline['seed']}, this run uses {seed}: "
                          "the perturbations differ; save a new baseline or pass the same seed")
    run = baseline.get("run", {})
    if "limit" in run and run["limit"] != limit:
        made = f"--memerobust-limit={run['limit']}" if run["limit"] else "no --memerobust-limit (every meme)"
        now = f"--memerobust-limit={limit}" if limit else "no --memerobust-limit (every meme)"
        raise ConfigError(f"{where} was made with {made}, this run with {now}: the memes differ; pass the same "
                          "--memerobust-limit")
    shared = 0
    for model, spec, task, card, fingerprint in cases:
        if spec not in baseline["results"].get(model, {}):
            continue
        shared += 1
        made_task = run.get("tasks", {}).get(model, {}).get(spec)
        if made_task is not None and made_task != task:
            raise ConfigError(f"{where} scored {model} on {spec!r} for task {made_task!r}, this run for {task!r}: "
                              "pass the same --memerobust-task")
        made_card = run.get("cards", {}).get(model)
        if made_card is not None and made_card != card:
            raise ConfigError(f"{where} was made with another model card for {model!r} (architecture, backbone, "
                              "classes or task differ): a baseline compares checkpoints of one detector")
        made_data = baseline["datasets"].get(spec)
        if made_data is not None and made_data != fingerprint:
            raise ConfigError(f"{where} was made on other data for --memerobust-data={spec} (dataset fingerprint "
                              f"{str(made_data)[:12]}, this run {str(fingerprint)[:12]}): the memes differ")
        y = (labels or {}).get((model, spec))
        differ = [c for c, cell in baseline["results"][model][spec].items() if y is not None and cell["y"] != y]
        if differ:
            cell = baseline["results"][model][spec][differ[0]]["y"]
            first = next((i for i, (a, b) in enumerate(zip(cell, y)) if a != b), min(len(cell), len(y)))
            raise ConfigError(f"{where} holds other labels for {model} on {spec!r} than this run's data "
                              f"({len(differ)} condition{'s' * (len(differ) != 1)}, first {differ[0]}: "
                              f"{len(cell)} labels against {len(y)}, the first difference at meme {first}): it was "
                              "not made on these memes, or was edited; save a new baseline")
    if cases and not shared:
        held = sorted({f"{m} on {s}" for m, by_spec in baseline["results"].items() for s in by_spec})
        tested = sorted({f"{m} on {s}" for m, s, *_ in cases})
        raise ConfigError(f"{where} holds {', '.join(held) or 'nothing'}; this run tests {', '.join(tested)}: "
                          "nothing to compare (--memerobust-model or --memerobust-data differ)")
    for name in _VERSIONED:
        if baseline["versions"].get(name) != versions.get(name):
            raise ConfigError(f"{where} was made with {name} {baseline['versions'].get(name)}, this run has "
                              f"{versions.get(name)}: perturbation definitions may differ; save a new baseline")


def _scored_memes(session, spec: str, result) -> dict | None:
    """{"ids", "captions"} of the memes `result` scored, in its order (the dataset's memes labelled for its task, as
    the engine reads them); None from a session that cannot name them (one rebuilt from results alone)."""
    if getattr(session, "dataset", None) is None or result.task is None:
        return None
    scored = session.dataset(spec).labelled(result.task).memes
    if len(scored) != len(result.y_true):
        return None
    return {"ids": [m.id for m in scored], "captions": [m.text for m in scored]}


def baseline_memes(data: dict, model: str, spec: str) -> tuple[list[str], list[str] | None]:
    """(ids, captions) of the memes of `model` on `spec` in the results' order: as saved, or for a baseline saved
    without them (older versions) the row index as id and no captions."""
    named = data.get("memes", {}).get(model, {}).get(spec)
    if named is not None:
        return list(named["ids"]), list(named["captions"])
    n = len(next(iter(data["results"][model][spec].values()))["y"])
    return [str(i) for i in range(n)], None


def save_baseline(session, path: Path, write: Callable[[str], object] | None = None) -> dict:
    """Write the baseline and say so through `write` (e.g. `terminal_line(config)`): a baseline saved without a word
    is easily compared against the wrong file later. Returns what was saved."""
    data = baseline_data(session)
    atomic_write_text(Path(path), json.dumps(data) + "\n")
    if write is not None:
        write(baseline_saved_line(path, data))
    return {"path": Path(path), "conditions": _count_conditions(data), "models": list(data["results"]),
            "datasets": list(data["datasets"]), "seed": data["seed"]}


def terminal_line(config) -> Callable[[str], None]:
    """A writer of whole lines on pytest's terminal, for `save_baseline(..., write=terminal_line(session.config))`
    in pytest_sessionfinish: after -q's progress dots it starts a new line first; without the terminal plugin it
    prints."""
    if config.pluginmanager.get_plugin("terminalreporter") is None:
        return print
    writer = config.get_terminal_writer()

    def write(line: str) -> None:
        if writer.width_of_current_line:
            writer.line()
        writer.line(line)

    return write


def _count_conditions(data: dict) -> int:
    return sum(len(by_condition) for by_spec in data["results"].values() for by_condition in by_spec.values())


def baseline_saved_line(path, data: dict) -> str:
    """One line naming the file and what it holds, for the end of the run that saved it."""
    n = _count_conditions(data)
    models, specs = list(data["results"]), list(data["datasets"])
    memes = sorted({len(cell["y"]) for by_spec in data["results"].values() for by_condition in by_spec.values()
                    for cell in by_condition.values()})
    return (f"memerobust: baseline saved to {path}: {n} condition{'s' * (n != 1)} of "
            f"{len(models)} model{'s' * (len(models) != 1)} ({', '.join(models)}) on {', '.join(specs) or '-'} "
            f"({'/'.join(map(str, memes)) or 0} memes), seed {data['seed']}")


def read_json(path: Path, what: str):
    """The JSON in `path`, or a ConfigError naming the file and what is wrong (missing, unreadable, not JSON)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{what} {path}: no such file") from None
    except IsADirectoryError:
        raise ConfigError(f"{what} {path}: is a folder, not a JSON file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read {what} {path}: {getattr(exc, 'strerror', None) or exc}") from None
    if not text.strip():
        raise ConfigError(f"{what} {path} is empty")
    try:
        return json.loads(text)
    except RecursionError:  # arrays nested thousands deep: no file this tool writes
        raise ConfigError(f"{what} {path} nests its JSON too deeply to be one this tool wrote") from None
    except ValueError as exc:
        ends = getattr(exc, "pos", -1) >= len(text.rstrip()) or str(exc).startswith("Unterminated")
        hint = " (truncated?)" if ends else ""
        raise ConfigError(f"{what} {path} is not valid JSON{hint}: {exc}") from None


def load_baseline(path: Path) -> dict:
    data = read_json(path, "baseline")
    if isinstance(data, dict) and data.get("tool") == "pytest-memerobust":
        raise ConfigError(f"{path} is a pytest-memerobust report, not a baseline: save a baseline with "
                          f"--memerobust-save-baseline=PATH")
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        found = f"a JSON {type(data).__name__}" if not isinstance(data, dict) else f"format {data.get('format')!r}"
        raise ConfigError(f"{path} is not a pytest-memerobust baseline (format {FORMAT!r}); it holds {found}")
    _check_shape(path, data)
    return data


def _check_shape(path, data: dict) -> None:
    """Every key the gate and `compare` read, with its type, so a damaged baseline is named rather than a
    traceback."""
    for key, kind in (("seed", int), ("versions", dict), ("datasets", dict), ("results", dict)):
        if not isinstance(data.get(key), kind):
            raise ConfigError(f"baseline {path}: {key!r} is missing or not a JSON {_JSON_NAMES[kind]}")
    for model, by_spec in data["results"].items():
        for spec, by_condition in (by_spec.items() if isinstance(by_spec, dict) else [(None, by_spec)]):
            for condition, cell in (by_condition.items() if isinstance(by_condition, dict) else [(None, None)]):
                ok = isinstance(cell, dict) and all(isinstance(cell.get(k), list) for k in ("y", "clean", "perturbed"))
                where = "/".join(str(k) for k in (model, spec, condition) if k is not None)
                if not ok or not len(cell["y"]) == len(cell["clean"]) == len(cell["perturbed"]):
                    raise ConfigError(f"baseline {path}: results/{where} is not a condition entry (lists 'y', "
                                      f"'clean' and 'perturbed' of one length per meme)")
                _check_cell_values(path, where, cell)
    _check_memes(path, data)


PROBABILITY_SUM_TOLERANCE = 1e-3  # a single-label row's probabilities sum to 1 within this (saved at 6 decimals)


def _numbers(value) -> bool:
    """A JSON number, or a list (of lists) of them: not a string ("0.5" would be read as 0.5), not true/false."""
    if isinstance(value, list):
        return all(map(_numbers, value))
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _check_cell_values(path, where: str, cell: dict) -> None:
    """Probabilities that are numbers in 0..1, one row of the same classes per meme, summing to 1 for a single-label
    task; labels that are integers, one class index per meme within those classes (or one 0/1 per class,
    multi-label); a NaN or a string in a baseline is the file's fault, not the model's. `declined`, when present, is
    one true/false per meme."""
    for key in ("y", "clean", "perturbed"):
        if not _numbers(cell[key]):
            raise ConfigError(f"baseline {path}: results/{where}/{key} holds values that are not JSON numbers (a "
                              "string or true/false): the file is damaged; save the baseline again")
    try:
        proba = np.asarray([cell["clean"], cell["perturbed"]], dtype=np.float64)
        labels = np.asarray(cell["y"], dtype=np.float64)
    except (TypeError, ValueError):
        raise ConfigError(f"baseline {path}: results/{where} holds rows of unequal length") from None
    if proba.ndim != 3 or proba.shape[2] < 2 or labels.ndim not in (1, 2) or (
            labels.ndim == 2 and labels.shape[1] != proba.shape[2]):
        raise ConfigError(f"baseline {path}: results/{where} has the wrong shape: 'clean' and 'perturbed' must hold "
                          f"one row of 2 or more class probabilities per meme and 'y' one label per meme (got "
                          f"probabilities of shape {proba.shape[1:]}, labels of shape {labels.shape})")
    bad = np.argwhere(~np.isfinite(proba) | (proba < 0) | (proba > 1))
    if bad.size:
        side, meme = ("clean", "perturbed")[bad[0][0]], int(bad[0][1])
        value = float(proba[tuple(bad[0])])
        raise ConfigError(f"baseline {path}: results/{where}/{side}[{meme}] holds {value!r}, not a probability in "
                          "0..1: the file is damaged; save the baseline again")
    if not np.all(np.isfinite(labels) & (labels == np.round(labels))):
        raise ConfigError(f"baseline {path}: results/{where}/y holds a label that is not an integer")
    top = proba.shape[2] if labels.ndim == 1 else 2  # a class index, or multi-label 0/1
    outside = labels[(labels < 0) | (labels >= top)]
    if outside.size:
        raise ConfigError(f"baseline {path}: results/{where}/y holds label {int(outside[0])}, not one of the {top} "
                          f"{'classes' if labels.ndim == 1 else 'values 0 and 1'} of its rows")
    sums = proba.sum(axis=2)
    off = np.argwhere(np.abs(sums - 1) > PROBABILITY_SUM_TOLERANCE) if labels.ndim == 1 else np.empty((0, 2))
    if off.size:
        side, meme = ("clean", "perturbed")[off[0][0]], int(off[0][1])
        raise ConfigError(f"baseline {path}: results/{where}/{side}[{meme}] sums to {float(sums[tuple(off[0])]):g}, "
                          f"not 1 (within {PROBABILITY_SUM_TOLERANCE:g}): a single-label meme's class probabilities "
                          "sum to 1; the file is damaged; save the baseline again")
    declined = cell.get("declined")
    if declined is not None and not (isinstance(declined, list) and len(declined) == len(cell["y"])
                                     and all(isinstance(v, bool) for v in declined)):
        raise ConfigError(f"baseline {path}: results/{where}/declined is not one true/false per meme")


def _check_memes(path, data: dict) -> None:
    """The optional `memes` block (ids and captions per model and dataset): one string each per meme of the
    results it names."""
    memes = data.get("memes", {})
    if not isinstance(memes, dict) or not all(isinstance(v, dict) for v in memes.values()):
        raise ConfigError(f"baseline {path}: 'memes' is not a JSON object of model -> dataset -> ids and captions")
    for model, by_spec in memes.items():
        for spec, named in by_spec.items():
            sizes = {len(cell["y"]) for cell in data["results"].get(model, {}).get(spec, {}).values()}
            ok = isinstance(named, dict) and all(
                isinstance(named.get(k), list) and all(isinstance(v, str) for v in named[k]) and
                {len(named[k])} == sizes for k in ("ids", "captions"))
            if not ok:
                raise ConfigError(f"baseline {path}: memes/{model}/{spec} is not a memes entry (lists 'ids' and "
                                  f"'captions' of strings, one per meme of results/{model}/{spec})")


_JSON_NAMES = {int: "integer", dict: "object"}


def comparable(baseline: dict, *, seed: int, dataset_spec: str | None, dataset_fingerprint: str | None,
               versions: dict, baseline_name: str = "baseline", current_name: str = "this run") -> None:
    """Refuse a comparison that would be meaningless, saying which fact differs."""
    if baseline["seed"] != seed:
        raise ConfigError(f"{baseline_name} was made with seed {baseline['seed']}, {current_name} uses {seed}: "
                          "perturbations differ, so the comparison is refused")
    made = baseline["datasets"].get(dataset_spec)
    if made is not None and made != dataset_fingerprint:
        raise ConfigError(f"{baseline_name} was made on other data for {dataset_spec!r} (dataset fingerprint "
                          f"{str(made)[:12]}, {current_name} {str(dataset_fingerprint)[:12]}): "
                          "the comparison is refused")
    for name in _VERSIONED:
        if baseline["versions"].get(name) != versions.get(name):
            raise ConfigError(f"{baseline_name} was made with {name} {baseline['versions'].get(name)}, "
                              f"{current_name} has {versions.get(name)}: perturbation definitions may differ, "
                              "the comparison is refused")


def refuse_incomparable(before: dict, after: dict, names=("baseline A", "baseline B")) -> None:
    """`comparable` between two saved baselines, for every dataset of the later one: the same refusals as the
    pytest gate."""
    limits = [data.get("run", {}).get("limit", "?") for data in (before, after)]
    if "?" not in limits and limits[0] != limits[1]:
        raise ConfigError(f"{names[0]} was made with --memerobust-limit={limits[0]}, {names[1]} with "
                          f"--memerobust-limit={limits[1]}: the memes differ, the comparison is refused")
    for spec in after["datasets"] or [None]:
        comparable(before, seed=after["seed"], dataset_spec=spec, dataset_fingerprint=after["datasets"].get(spec),
                   versions=after["versions"], baseline_name=str(names[0]), current_name=str(names[1]))


def correct(y, proba) -> np.ndarray:
    """Per meme, whether the prediction is right: the argmax class; multi-label, every label at the threshold."""
    y, proba = np.asarray(y), np.asarray(proba, dtype=np.float64)
    if y.ndim == 2:
        return ((proba >= metrics.MULTILABEL_THRESHOLD) == (y == 1)).all(axis=1)
    return proba.argmax(axis=1) == y


def paired_cells(before: dict, after: dict, names=("baseline A", "baseline B")):
    """(model, dataset, condition, before's entry, after's entry) for every condition in both baselines, in the
    later one's order, after the gate's refusals: incomparable baselines, and other memes or labels in a cell."""
    refuse_incomparable(before, after, names)
    for model, by_spec in after["results"].items():
        for spec, by_condition in by_spec.items():
            for condition, now in by_condition.items():
                then = before["results"].get(model, {}).get(spec, {}).get(condition)
                if then is None:
                    continue
                ids = [data.get("memes", {}).get(model, {}).get(spec, {}).get("ids") for data in (before, after)]
                if then["y"] != now["y"] or (None not in ids and ids[0] != ids[1]):
                    raise ConfigError(f"{names[0]} and {names[1]} hold other memes or labels for {model} on "
                                      f"{spec!r} ({condition}): the comparison is refused")
                yield model, spec, condition, then, now


def compare_baselines(before: dict, after: dict, checks=DEFAULT_CHECKS, *, names=("baseline A", "baseline B"),
                      **options) -> list[Comparison]:
    """The gate's comparisons of two saved baselines (B = now, A = the baseline), every rule on every condition in
    both, judged as one family: what `memerobust compare` prints. Baselines the gate would not compare are refused
    the same way."""
    cells = [PairedCell(model, spec, condition, "clean" if condition == "clean" else "perturbed", now, then)
             for model, spec, condition, then, now in paired_cells(before, after, names)]
    if not cells:
        raise ConfigError(f"{names[0]} and {names[1]} share no model, dataset and condition to compare "
                          f"({', '.join(c.spec for c in checks)})")
    return judge_family(cells, checks, **options)


def condition_name(model: str, spec: str, condition: str) -> str:
    """How the gate names a condition it cannot compare: `model on spec: condition`."""
    return f"{model} on {spec}: {condition}"


def baseline_condition_names(data: dict) -> list[str]:
    """Every condition a baseline holds, by `condition_name`."""
    return [condition_name(m, s, c) for m, by_spec in data["results"].items() for s, by_c in by_spec.items()
            for c in by_c]


def baseline_entry(data: dict, model: str, spec: str, condition: str) -> dict | None:
    """The baseline's cell of `model` on `spec` under `condition`, or None when it holds none."""
    return data["results"].get(model, {}).get(spec, {}).get(condition)


def unmatched_conditions(before: dict, after: dict) -> tuple[list[str], list[str]]:
    """(conditions in `after` but not in `before`, conditions in `before` but not in `after`), as
    `model on dataset: condition`: what the gate cannot compare, named rather than silently skipped."""
    made, run = baseline_condition_names(before), baseline_condition_names(after)
    return [k for k in run if k not in set(made)], [k for k in made if k not in set(run)]
