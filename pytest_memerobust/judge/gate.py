"""Gating checkpoints against a saved baseline: is the new checkpoint worse on the same memes, beyond noise?

The rules, the paired statistics and the decision, as pure functions of the per-meme outputs of both checkpoints
(`PairedCell`): the baseline file is track/baseline.py's, the session's side run/gate.py's, the tables
report/gate_tables.py's.

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

import numpy as np

from . import metrics
from .metrics import binomial_upper_tail
from .multiplicity import (CONTROLS, bh_adjusted_p, holm_adjusted_p, marginal_p, maxt_adjusted_p, maxt_critical_value,
                           studentized, upper_critical_value)
from ..errors import ConfigError

GATES = ("thresholds", "regressions", "both", "non-inferiority")
_METRICS = {"acc": "accuracy", "auroc": "auroc", "f1": "macro_f1", "flip": "flip_rate"}
_KINDS = {"rel": "relative", "abs": "absolute", "": "metric"}
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
            return metrics.correct(y, perturbed)
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
    """The bootstrap resamples of one dataset's memes (metrics.Resamples), drawn once and shared by every model,
    condition and rule that scores them: they share their memes, and the max-T procedure needs their statistics on
    the same resamples (two modes of one detector that give the same outputs then get the same decision). Keyed by
    the seed, the dataset and the memes' labels, never by model or condition. Metrics of a side are computed once
    (the clean side is shared by every condition of a run)."""

    def __init__(self, y: np.ndarray, n_resamples: int, key: tuple):
        self.y = y
        digest = hashlib.sha256(json.dumps([str(k) for k in key]).encode()).digest()
        self.resamples = metrics.Resamples(len(y), n_resamples,
                                           np.random.default_rng(int.from_bytes(digest[:8], "little")))
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
        return self._remember((name, self._digest(proba)), lambda: self.resamples.metric(name, self.y, proba))

    def flip_rate(self, clean: np.ndarray, perturbed: np.ndarray) -> np.ndarray:
        from .results import predicted_labels

        def compute():
            return self.resamples.mean(predicted_labels(self.y, clean) != predicted_labels(self.y, perturbed))

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


def compare_baselines(pairs, checks=DEFAULT_CHECKS, *, names=("baseline A", "baseline B"),
                      **options) -> list[Comparison]:
    """The gate's comparisons of two saved baselines (B = now, A = the baseline), every rule on every condition in
    both, judged as one family: what `memerobust compare` prints. `pairs` are (model, dataset, condition, A's cell,
    B's cell) per condition both hold, as track/baseline.paired_cells reads them after the gate's refusals."""
    cells = [PairedCell(model, spec, condition, "clean" if condition == "clean" else "perturbed", now, then)
             for model, spec, condition, then, now in pairs]
    if not cells:
        raise ConfigError(f"{names[0]} and {names[1]} share no model, dataset and condition to compare "
                          f"({', '.join(c.spec for c in checks)})")
    return judge_family(cells, checks, **options)


