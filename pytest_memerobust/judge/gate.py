"""Gating checkpoints against a saved baseline: is the new checkpoint worse on the same memes, beyond noise?

The rules, the paired statistics and the decision, as pure functions of the per-meme outputs of both checkpoints
(`PairedCell`): the baseline file is track/baseline.py's, the session's side run/gate.py's, the tables
report/gate_tables.py's.

The default rules judge, per condition (clean included), the metric itself under the perturbation (accuracy, AUROC,
macro-F1) and the flip rate, each as the paired change "how much worse now" on the same memes. Relative robustness
("loses less than it had") rewards a weaker model, so it is a rule to ask for (`rel_acc`), never the default.

Every rule of every condition of a run is one family (`judge_family`): one set of resamples of the memes per dataset
(shared by every model scoring its memes), every statistic evaluated on it, and the run's error controlled over the
whole family (`--memerobust-gate-error`, default the family-wise error at 5% by the step-down max-T; see
multiplicity.py). Beside each condition, each perturbation family of several severities has its mean change over
them as a member of the family (`typos (mean of 5)`): a checkpoint that loses a little everywhere is seen sooner.

The resamples are paired bootstrap draws of the memes, or, below `PERMUTATION_BELOW` memes (or asked for), paired
permutations: each meme's outputs swapped between the two checkpoints by one fair coin, the same coin in every
condition, the null's law without a normal approximation. A rule regresses when its adjusted one-sided p is at most
the level, testing "worse by more than its minimum effect" (`--memerobust-fail-on=acc:1%`); its printed bound is
the one the decision used (multiplicity.decision_critical_values), so they never disagree. Under
`--memerobust-gate=non-inferiority` the question flips: a rule passes only when that upper bound of its worsening
stays within its margin (the same `acc:2%`; 2 points unless given).

A baseline of several checkpoints of one recipe (`then` a list) asks "worse than the recipe's own seed-to-seed
spread?": the candidate against the checkpoints' mean, its standard error inflated by how much more the
checkpoints differ from each other than the memes' resampling alone explains (`_recipe_inflation`).

Beside the regressions, the same rules are tested one-sided in the better direction as a family of their own
(`improved`): the same draws, statistics and error control, on the mirrored differences (`_mirrored`), so what
improved beyond noise comes with its bound as what regressed does. An improvement never fails or passes a run; under
non-inferiority it means better than the baseline at all (superiority), not better than the margin.

What cannot be judged (one class left, too few memes of a class, no answers) is a named state, never a silent pass.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, replace

import numpy as np

from . import metrics
from .multiplicity import (CONTROLS, bh_adjusted_p, decision_critical_values, holm_adjusted_p, marginal_p,
                           maxt_adjusted_p, studentized)
from ..data.meme import unlabelled
from ..errors import ConfigError

GATES = ("thresholds", "regressions", "both", "non-inferiority")
METHODS = ("auto", "bootstrap", "permutation")
DEFAULT_RESAMPLES = 10_000  # the decision's resamples: p near the level moves by ~0.005, not ~0.02 as at 1,000
PERMUTATION_BELOW = 100  # `auto` below this many memes: resampling them cannot show the variance of a small sample
FEWEST_OF_A_CLASS = 10  # AUROC and macro-F1 of a class with fewer memes are not judged
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
        return {"fwer": f"family-wise error {self.alpha:.0%} (max-T, step-down)",
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
class Subject:
    """What a comparison compares: one rule on one condition of one model on one dataset. A family mean's condition
    is `typos (mean of 5)` and `members` lists the conditions it averages."""

    model: str
    dataset: str
    condition: str
    rule: str  # the rule's spec, e.g. "acc", "flip", "rel_acc:1%"
    what: str  # e.g. "accuracy", "flip rate", "relative robustness of accuracy"
    higher_is_better: bool
    members: tuple = ()

    @property
    def case(self) -> tuple[str, str, str]:
        """(model, dataset, condition): the case a comparison belongs to, whichever its rule."""
        return self.model, self.dataset, self.condition


@dataclass(frozen=True)
class Scores:
    """The baseline's score (`before`) and this run's (`now`); `low`..`high` is the per-rule percentile interval of
    their difference at the run's confidence, for reading only."""

    before: float
    now: float
    low: float = float("nan")
    high: float = float("nan")


@dataclass(frozen=True)
class Decision:
    """The one-sided test in the worse direction (`p_raw` alone, `p_value` adjusted for the run's family under its
    control), the bound on the difference the decision used (`bound`: under `regressions` the side nearest to "no
    worse", under `non-inferiority` the worst the data allow) and the decision: `regressed` is whether the rule
    fails the gate, `state` says what was decided ("regressed", "no regression", "non-inferior", "not shown
    non-inferior" or "not judged: why")."""

    state: str
    regressed: bool = False
    p_value: float = float("nan")
    p_raw: float = float("nan")
    bound: float = float("nan")


@dataclass(frozen=True)
class Improvement:
    """The other direction's decision, in the improvement family (the same rules one-sided toward better, its own
    error control at the same level): whether the rule `improved`, its p-values as `Decision`'s, and `bound`, the
    side of the change nearest to "no better" that its decision used."""

    improved: bool = False
    p_raw: float = float("nan")
    p_value: float = float("nan")
    bound: float = float("nan")


@dataclass(frozen=True)
class Procedure:
    """How a rule was tested: the test's name, the minimum effect it tests against (the margin, under
    non-inferiority), the run's error control, the question (`mode`: "regressions" or "non-inferiority"), the
    resampling (`method`: "bootstrap", "permutation", "recipes") and its count; against a recipe, `recipe` is its
    count of checkpoints and `inflation` the factor on the variance that its spread adds."""

    test: str
    min_effect: float
    control: ErrorControl = DEFAULT_CONTROL
    mode: str = "regressions"
    method: str = "bootstrap"
    resamples: int = 0
    recipe: int = 0
    inflation: float = 1.0

    @property
    def improvement_margin(self) -> float:
        """How much better a rule must be shown to count as improved: its minimum effect under `regressions` (the
        regression test mirrored), 0 under non-inferiority (where the effect is a margin of tolerated worsening)."""
        return 0.0 if self.mode == "non-inferiority" else self.min_effect


@dataclass(frozen=True)
class Power:
    """What the memes compared can show: how many there are, the worsening the test detects at 80% power under the
    run's control (`detectable`), and, where non-inferiority is not shown, the memes that would show it with 80%
    power at the observed difference (`memes_needed`)."""

    memes: int = 0
    detectable: float = float("nan")
    memes_needed: int | None = None


@dataclass(frozen=True)
class Comparison:
    """One rule on one condition (`subject`): the baseline's score and this run's (`scores`), the paired difference
    (now - before), the decision in the worse direction (`decision`), how it was tested (`procedure`), what the
    memes could show (`power`), and the other direction's decision (`improvement`: an improvement beyond
    `procedure.improvement_margin`). `as_dict` is the one flat record JSON holds, and `from_dict` reads it back."""

    subject: Subject
    scores: Scores
    decision: Decision
    procedure: Procedure
    power: Power = Power()
    improvement: Improvement = Improvement()

    @property
    def difference(self) -> float:
        return self.scores.now - self.scores.before

    @property
    def judged(self) -> bool:
        return not self.decision.state.startswith("not judged")

    @property
    def room(self) -> float:
        """How far the decision is from flipping to a failure, in adjusted p (negative: failing); inf if not
        judged."""
        if not self.judged:
            return float("inf")
        inferiority = self.procedure.mode == "non-inferiority"
        return (self.decision.p_value - self.procedure.control.alpha) * (-1 if inferiority else 1)

    def as_dict(self) -> dict:
        """As JSON holds it, flat, in the order reports have always held it: the error control as its spec
        (`fwer:0.05`), which `ErrorControl.parse` reads back; the interval as `ci`."""
        s, scores, d, p, power, better = (self.subject, self.scores, self.decision, self.procedure, self.power,
                                          self.improvement)
        return {"model": s.model, "dataset": s.dataset, "condition": s.condition, "rule": s.rule, "what": s.what,
                "higher_is_better": s.higher_is_better, "before": scores.before, "now": scores.now,
                "p_value": d.p_value, "test": p.test, "min_effect": p.min_effect, "regressed": d.regressed,
                "p_raw": d.p_raw, "bound": d.bound, "state": d.state, "control": p.control.spec, "mode": p.mode,
                "memes": power.memes, "memes_needed": power.memes_needed, "detectable": power.detectable,
                "method": p.method, "resamples": p.resamples, "members": list(s.members), "recipe": p.recipe,
                "inflation": p.inflation, "improved": better.improved, "improved_p_raw": better.p_raw,
                "improved_p_value": better.p_value, "improved_bound": better.bound,
                "difference": self.difference, "ci": [scores.low, scores.high]}

    @classmethod
    def from_dict(cls, row: dict) -> "Comparison":
        """`as_dict`'s record read back, also one written before a key existed (its default then)."""
        nan = float("nan")
        return cls(Subject(row["model"], row["dataset"], row["condition"], row["rule"], row["what"],
                           row["higher_is_better"], tuple(row.get("members", ()))),
                   Scores(row["before"], row["now"], *row["ci"]),
                   Decision(row.get("state", ""), row["regressed"], row["p_value"], row.get("p_raw", nan),
                            row.get("bound", nan)),
                   Procedure(row["test"], row["min_effect"], ErrorControl.parse(row["control"]),
                             row.get("mode", "regressions"), row.get("method", "bootstrap"),
                             row.get("resamples", 0), row.get("recipe", 0), row.get("inflation", 1.0)),
                   Power(row.get("memes", 0), row.get("detectable", nan), row.get("memes_needed")),
                   Improvement(row.get("improved", False), row.get("improved_p_raw", nan),
                               row.get("improved_p_value", nan), row.get("improved_bound", nan)))

    def __str__(self) -> str:
        """The decision in one line; a family mean names itself (it fails each of its members' cases)."""
        s, d, p = self.subject, self.decision, self.procedure
        before, now = self.scores.before, self.scores.now
        what = f"{s.condition} {s.what}" if s.members else s.what
        if not self.judged:
            return f"{what} {d.state}: baseline {before:.4f} -> now {now:.4f}"
        tests = f"one-sided p {d.p_raw:.3g}, adjusted p {d.p_value:.3g} under {p.control.short()}"
        if p.mode == "non-inferiority":
            worst = -d.bound if s.higher_is_better else d.bound
            verb = "drop" if s.higher_is_better else "rise"
            if d.regressed:
                needed = (f"; about {self.power.memes_needed} memes would show it with 80% power at this difference"
                          if self.power.memes_needed
                          else "; no number of memes shows it: the observed change is past the margin")
                return (f"{what} not shown non-inferior with {self.power.memes} memes: baseline {before:.4f} -> "
                        f"now {now:.4f}, its {verb} may reach {worst:.4f} (the decision's bound) > margin "
                        f"{p.min_effect:.4f} ({tests}){needed}")
            return (f"{what} non-inferior: baseline {before:.4f} -> now {now:.4f}, its {verb} is at "
                    f"most {worst:.4f} <= margin {p.min_effect:.4f} ({tests})")
        allowed = f", allowed {p.min_effect:.4f}" if p.min_effect else ""
        return (f"{what} {d.state}: baseline {before:.4f} -> now {now:.4f} "
                f"(difference {self.difference:+.4f}, bound {d.bound:+.4f}{allowed}; {tests})")


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

    def _resampled(self, side, now: tuple, then: tuple, scale) -> tuple[np.ndarray, np.ndarray]:
        """The score of (then, now) on each of `side`'s resamples [B] each: the same quantity as `_score`. `now` and
        `then` are (clean, perturbed) probabilities of the same memes."""
        if self.metric == "flip_rate":
            return side.flip_rates(now, then)
        values = side.metrics(self.metric, now[1], then[1])
        if self.kind == "metric":
            return values
        robustness = metrics._robustness_fn(self.kind, scale)
        clean = side.metrics(self.metric, now[0], then[0])
        return robustness(clean[0], values[0]), robustness(clean[1], values[1])


DEFAULT_CHECKS = tuple(RegressionCheck("metric", m) for m in ("accuracy", "auroc", "macro_f1", "flip_rate"))


@dataclass(frozen=True)
class PairedCell:
    """One condition of one model on one dataset in both runs: {"y", "clean", "perturbed"} (and optionally
    "declined": the memes the detector declined, clean or under the condition) over the same memes in the same
    order. `then` is one checkpoint's cell, or a list of the cells of k >= 2 checkpoints of one recipe."""

    model: str
    dataset: str
    condition: str
    kind: str  # "clean" or not: which rules apply
    now: dict
    then: dict | list

    @property
    def thens(self) -> list[dict]:
        return list(self.then) if isinstance(self.then, (list, tuple)) else [self.then]


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
        def compute():
            return self.resamples.mean(_flips(self.y, clean, perturbed))

        return self._remember(("flip", self._digest(clean, perturbed)), compute)

    def metrics(self, name: str, now: np.ndarray, then: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(then's, now's) metric on every resample: each side on the same drawn memes."""
        return self.metric(name, then), self.metric(name, now)

    def flip_rates(self, now: tuple, then: tuple) -> tuple[np.ndarray, np.ndarray]:
        return self.flip_rate(*then), self.flip_rate(*now)


def _flips(y, clean, perturbed) -> np.ndarray:
    from .results import predicted_labels

    return predicted_labels(y, clean) != predicted_labels(y, perturbed)


class _Permuter:
    """Paired permutations of one dataset's memes: per resample one fair coin per meme swaps its outputs between
    the two checkpoints, the same coin for the meme in every condition and rule. Under "neither is better" the two
    are exchangeable meme by meme, so the permuted differences are draws of the null's own law, exact however few
    the memes (where resampling memes cannot show a small class's variance). The two sides' outputs are stacked (now
    then before, 2N items) and each permuted side is a 0/1 weighting of them, so every metric is
    metrics.METRICS_OF_COUNTS' on exact integers, as for the bootstrap. Keyed like `_Resampler`."""

    def __init__(self, y: np.ndarray, n_resamples: int, key: tuple):
        self.y = y
        self.labels = np.concatenate([y, y])
        digest = hashlib.sha256(json.dumps([str(k) for k in key] + ["permutation"]).encode()).digest()
        swap = np.random.default_rng(int.from_bytes(digest[:8], "little")).random((n_resamples, len(y))) < 0.5
        self.then_weights = np.hstack([swap, ~swap]).astype(np.float64)  # then's side: now's output where swapped
        self.now_weights = 1.0 - self.then_weights
        self._memo: dict[tuple, tuple] = {}

    def metrics(self, name: str, now: np.ndarray, then: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        key = (name, _Resampler._digest(now, then))
        if key not in self._memo:
            of_counts = metrics.METRICS_OF_COUNTS[name]
            stacked = np.concatenate([now, then])
            self._memo[key] = (of_counts(self.labels, stacked, self.then_weights),
                               of_counts(self.labels, stacked, self.now_weights))
        return self._memo[key]

    def flip_rates(self, now: tuple, then: tuple) -> tuple[np.ndarray, np.ndarray]:
        key = ("flip", _Resampler._digest(*now, *then))
        if key not in self._memo:
            flips = np.concatenate([_flips(self.y, *now), _flips(self.y, *then)]).astype(np.float64)
            n = len(self.y)
            self._memo[key] = (self.then_weights @ flips / n, self.now_weights @ flips / n)
        return self._memo[key]


def _not_judged_reason(answered: np.ndarray | None) -> str | None:
    """Why a condition cannot be compared at all: the detector declined (nearly) every meme in one of the runs."""
    if answered is not None and answered.sum() < 2:
        return "not judged: no answers" if not answered.any() else "not judged: fewer than 2 memes answered"
    return None


def _why_undefined(check: RegressionCheck, y) -> str:
    """Worded as the suites' thresholds word it (thresholds.why_undefined)."""
    from .thresholds import why_undefined

    return why_undefined(check.metric, check.kind, y)


def _no_labels(check: RegressionCheck, y: np.ndarray) -> str | None:
    """An unlabelled dataset's memes (meme.Dataset.unlabelled): every rule but the flip rate reads their labels.
    Worded as the suites' thresholds word it (thresholds.NO_LABELS)."""
    from .thresholds import NO_LABELS

    return NO_LABELS if check.metric != "flip_rate" and unlabelled(y) else None


def _too_few_of_a_class(check: RegressionCheck, y: np.ndarray) -> str | None:
    """AUROC and macro-F1 read each class on its own: with a handful of memes of one class, neither resampling nor
    permuting the memes shows how much the class's few memes could vary (1-3 memes of a class false-alarm 6-40%)."""
    if check.metric not in ("auroc", "macro_f1") or y.ndim != 1:
        return None
    classes, counts = np.unique(y, return_counts=True)
    if len(classes) < 2:
        return None  # one class: _why_undefined names it
    fewest = int(np.argmin(counts))
    if counts[fewest] < FEWEST_OF_A_CLASS:
        return (f"not judged: too few memes of class {classes[fewest]} ({counts[fewest]} < "
                f"{FEWEST_OF_A_CLASS})")
    return None


def resampling_method(method: str, memes: int, recipe: bool = False) -> str:
    """The resampling a family uses: `auto` is paired permutations below PERMUTATION_BELOW memes and the bootstrap
    above; a recipe baseline is judged on bootstrap draws (its spread is read from the checkpoints' resampled
    scores), and a permutation of a recipe is refused."""
    if method not in METHODS:
        raise ConfigError(f"gate method {method!r}: expected one of {', '.join(METHODS)}")
    if recipe:
        if method == "permutation":
            raise ConfigError("the permutation gate compares two checkpoints; a baseline of several checkpoints of "
                              "one recipe is judged by the bootstrap (--memerobust-gate-method=auto or bootstrap)")
        return "bootstrap"
    if method == "auto":
        return "permutation" if memes < PERMUTATION_BELOW else "bootstrap"
    return method


def _family_of(condition: str) -> tuple[str, int] | None:
    """(perturbation family, severity) of a condition named `family@severity`; None for clean and composites."""
    family, at, severity = condition.rpartition("@")
    return (family, int(severity)) if at and family and severity.isdigit() else None


@dataclass(frozen=True)
class _Sample:
    """What a test's draws are of: `n` memes, resampled by `method` on the draws keyed `side` (shared by every test
    of the same memes), against a recipe of `recipe` checkpoints (0: one checkpoint); a family mean's draws average
    those of the conditions it lists (`members`)."""

    n: int
    side: tuple | None = None
    method: str = "bootstrap"
    recipe: int = 0
    members: tuple = ()


@dataclass(frozen=True, eq=False)  # compared by identity: it holds arrays
class _Change:
    """A test's observed change: the scores, w = how much worse now is, its resampled values [B], and a recipe's
    (D_l^2, var) per left-out checkpoint (`spread`). All NaN until measured, and for a test not judged."""

    before: float = float("nan")
    now: float = float("nan")
    w: float = float("nan")
    samples: np.ndarray | None = None
    spread: tuple = ()


@dataclass(eq=False)  # compared by identity: it holds arrays
class _Test:
    """One rule on one condition (or family mean) as the family's decision sees it, filled in as it goes: the
    change w = how much worse now is (`sign` makes worse positive) and its resampled values, the null it is tested
    against, and what its draws are of. `reason` says why it is not judged (None: judged)."""

    where: tuple[str, str, str]  # (model, dataset, condition)
    check: RegressionCheck
    sign: float
    sample: _Sample
    null: float = 0.0
    reason: str | None = None
    change: _Change = field(default_factory=_Change)

    def subject(self) -> Subject:
        """What was compared: where, which rule, and a family mean's members."""
        check = self.check
        return Subject(*self.where, check.spec, check.label(), check.higher_is_better, self.sample.members)


def judge_family(cells, checks=DEFAULT_CHECKS, *, control: ErrorControl = DEFAULT_CONTROL,
                 mode: str = "regressions", n_resamples: int = DEFAULT_RESAMPLES, seed: int = 0,
                 scale: str = "percent", confidence: float = 0.95, method: str = "auto",
                 family_means: bool = True) -> list[Comparison]:
    """Every rule that applies to every `PairedCell` (baseline `then` against `now`), judged as one family under
    `control`: a pure function of the paired per-meme outputs. Per rule the statistic is w = how much worse now is
    (before - now; now - before for the flip rate) on the same memes, resampled on one set of draws per dataset
    (and labels): bootstrap or paired permutations (`method`, see `resampling_method`); `regressions` tests "w <= the
    rule's minimum effect" one-sided, `non-inferiority` tests "w >= the margin" (passing only where the decision's
    upper bound of w stays within it). Each perturbation family of several severities adds, per rule, its mean w
    over them (`family_means`). Against a recipe (`then` a list), before is the checkpoints' mean."""
    if mode not in ("regressions", "non-inferiority"):
        raise ValueError(f"mode must be 'regressions' or 'non-inferiority', got {mode!r}")
    inferiority = mode == "non-inferiority"
    cells = list(cells)
    recipe = any(len(cell.thens) > 1 for cell in cells)
    if control.method == "holm":
        n_resamples = max(n_resamples, _holm_resamples(cells, checks, control.alpha, family_means))
    sides: dict[tuple, object] = {}
    tests: list[_Test] = []
    for cell in cells:
        y = np.asarray(cell.now["y"])
        thens = cell.thens
        now_arrays = [np.asarray(cell.now[k], dtype=np.float64) for k in ("clean", "perturbed")]
        then_arrays = [[np.asarray(t[k], dtype=np.float64) for k in ("clean", "perturbed")] for t in thens]
        declined = [np.asarray(c["declined"], bool) for c in [cell.now, *thens] if c.get("declined") is not None]
        answered = ~np.logical_or.reduce(declined) if declined and np.logical_or.reduce(declined).any() else None
        reason = _not_judged_reason(answered)
        key = (seed, cell.dataset, _Resampler._digest(y))  # the memes, whichever model or condition scores them
        if answered is not None and reason is None:  # the memes answered in both runs: resampled on their own
            y = y[answered]
            now_arrays = [a[answered] for a in now_arrays]
            then_arrays = [[a[answered] for a in t] for t in then_arrays]
            key += (_Resampler._digest(answered),)
        used = resampling_method(method, len(y), recipe)
        key += (used,)
        if reason is None and key not in sides:
            sides[key] = (_Permuter if used == "permutation" else _Resampler)(y, n_resamples, key)
        for check in checks:
            if not check.applies_to(cell.kind):
                continue
            sign = 1.0 if check.higher_is_better else -1.0
            margin = check.min_effect or (DEFAULT_MARGIN if inferiority else 0.0)
            sample = _Sample(len(y), key, used, len(thens) if len(thens) > 1 else 0)
            test = _Test((cell.model, cell.dataset, cell.condition), check, sign, sample, null=margin,
                         reason=reason or _no_labels(check, y) or _too_few_of_a_class(check, y))
            tests.append(test)
            if test.reason is not None:
                continue
            side = sides[key]
            now = float(check._score(y, *now_arrays, scale))
            befores = np.array([float(check._score(y, *t, scale)) for t in then_arrays])
            pairs = [check._resampled(side, tuple(now_arrays), tuple(t), scale) for t in then_arrays]
            then_samples = np.stack([then_s for then_s, _ in pairs])  # [k, B]
            before = float(befores.mean())
            spread = _leave_one_out(sign * befores, sign * then_samples) if len(thens) > 1 else ()
            test.change = _Change(before, now, sign * (before - now),
                                  sign * (then_samples.mean(axis=0) - pairs[0][1]), spread)
            if test.change.w != test.change.w:
                test.reason = _why_undefined(check, y)
    if family_means:
        tests += _family_means(tests)
    inflation = _recipe_inflation(tests) if recipe else 1.0
    mirrored = _mirrored(tests, inferiority)
    worse = _decide(tests, control, mode, n_resamples, confidence, inflation)
    better = _decide(mirrored, control, "regressions", n_resamples, confidence, inflation)
    return _with_improvements(worse, better)


def _with_improvements(worse: list[Comparison], better: list[Comparison]) -> list[Comparison]:
    """Each comparison of the worse direction with the same test's decision in the better one (the mirrored family)
    as its improvement."""
    return [replace(w, improvement=Improvement(b.decision.regressed, b.decision.p_raw, b.decision.p_value,
                                               b.decision.bound)) for w, b in zip(worse, better)]


def _mirrored(tests: list[_Test], inferiority: bool) -> list[_Test]:
    """The family's tests in the better direction, for the improvement family: each difference and its draws
    negated (as if the two checkpoints swapped roles; the draws are the same resamples, so exactly the swap's), the
    rule's sign flipped so that bounds still read as now - before, and the null the rule's minimum effect (0 under
    non-inferiority: better at all). `_decide` then answers "better beyond noise?" exactly as it answers "worse?"."""
    out = []
    for t in tests:
        change = replace(t.change, w=-t.change.w, samples=-t.change.samples) if t.reason is None else t.change
        out.append(replace(t, sign=-t.sign, null=0.0 if inferiority else t.check.min_effect, change=change))
    return out


def _holm_resamples(cells, checks, alpha: float, family_means: bool) -> int:
    """The resamples Holm needs to reject anything among m tests: its first step asks for p <= alpha / m, and a
    resampled p is at least 1 / (B + 1), so B >= m / alpha - 1 (817 rules at 5%: 16,339). Fewer would make a gate
    that cannot fail; the decision draws at least this many and says how many it drew."""
    tests = [(cell, check) for cell in cells for check in checks if check.applies_to(cell.kind)]
    m = len(tests)
    if family_means:
        severities: dict[tuple, set] = {}
        for cell, check in tests:
            family = _family_of(cell.condition)
            if family is not None:
                severities.setdefault((cell.model, cell.dataset, family[0], check.spec), set()).add(family[1])
        m += sum(len(levels) >= 2 for levels in severities.values())
    return int(np.ceil(m / alpha - 1 - 1e-9))


def _leave_one_out(befores: np.ndarray, samples: np.ndarray) -> tuple[tuple[float, float], ...]:
    """Per checkpoint l of a recipe, (D_l^2, the resamples' variance of D_l) for D_l = the others' mean - l's score:
    how far one checkpoint falls from the rest, against how far resampling the memes alone would put it."""
    out = []
    k = len(befores)
    for left in range(k):
        others = [i for i in range(k) if i != left]
        d = befores[others].mean() - befores[left]
        draws = samples[others].mean(axis=0) - samples[left]
        draws = draws[~np.isnan(draws)]
        if draws.size >= 2 and d == d:
            out.append((float(d) ** 2, float(np.var(draws, ddof=1))))
    return tuple(out)


def _recipe_inflation(tests: list[_Test]) -> float:
    """How much more a recipe's checkpoints differ from each other than resampling the memes explains: the mean over
    every judged rule and left-out checkpoint of D_l^2 / var(D_l), at least 1. The candidate against the k
    checkpoints' mean then has variance (this factor) x its resampled variance: a new seed that differs from the
    others as much as they differ from each other is no regression. One factor for the family, pooled over its
    rules, so that four checkpoints estimate it on many comparisons, not on four numbers per rule."""
    ratios = [d2 / var for t in tests if t.reason is None for d2, var in t.change.spread if var > 0]
    return max(1.0, float(np.mean(ratios))) if ratios else 1.0


def _family_means(tests: list[_Test], average=None) -> list[_Test]:
    """Per (model, dataset, perturbation family, rule) with two or more severities judged on the same draws, the mean
    of their changes as one more test: its resampled values are the row means of the severities' (already drawn).
    A family any of whose severities cannot be judged has its mean not judged, naming it. `average(members)` gives
    the judged mean's fields (default: the gate's change, its scores, w and samples averaged; judge/recipes.py
    averages each checkpoint's scores and draws)."""
    groups: dict[tuple, list[tuple[int, _Test]]] = {}
    for t in tests:
        family = _family_of(t.where[2])
        if family is not None:
            groups.setdefault((*t.where[:2], family[0], t.check.spec, t.sample.side), []).append((family[1], t))
    means = []
    for (model, dataset, family, _, _), severities in groups.items():
        if len({severity for severity, _ in severities}) < 2:
            continue
        members = [t for _, t in sorted(severities, key=lambda pair: pair[0])]
        unjudged = [t for t in members if t.reason is not None]
        if unjudged:
            why = unjudged[0].reason.removeprefix("not judged: ")
            fields = dict(reason=f"not judged: {unjudged[0].where[2]} {why}", change=_Change())
        else:
            fields = {"reason": None, "change": _Change(), **(average or _mean_change)(members)}
        sample = replace(members[0].sample, members=tuple(t.where[2] for t in members))
        means.append(replace(members[0], where=(model, dataset, f"{family} (mean of {len(members)})"), sample=sample,
                             **fields))
    return means


def _mean_change(members: list[_Test]) -> dict:
    """A family mean's fields in the gate: the mean of its severities' scores, changes and resampled changes."""
    changes = [t.change for t in members]
    return dict(change=_Change(float(np.mean([c.before for c in changes])), float(np.mean([c.now for c in changes])),
                               float(np.mean([c.w for c in changes])),
                               np.mean([c.samples for c in changes], axis=0)))


def _decide(tests: list[_Test], control: ErrorControl, mode: str, n_resamples: int, confidence: float,
            inflation: float = 1.0):
    """The family's adjusted p-values, the bounds their decisions used, and the decisions (see judge_family)."""
    inferiority = mode == "non-inferiority"
    judged = [t for t in tests if t.reason is None]
    direction = -1.0 if inferiority else 1.0  # the statistic whose large values are the evidence sought
    index = {id(t): i for i, t in enumerate(judged)}  # each judged test's place in the statistics' arrays
    if judged:
        w = np.array([t.change.w for t in judged])
        samples = np.stack([t.change.samples for t in judged])
        nulls = np.array([t.null for t in judged])
        centres = np.array([t.change.w if t.sample.method == "bootstrap" else 0.0 for t in judged])
        inflations = np.array([inflation if t.sample.recipe else 1.0 for t in judged])
        se, z, draws = studentized(direction * w, direction * samples, direction * nulls, direction * centres,
                                   inflations)
        raw = marginal_p(z, draws)
        adjusted = {"fwer": lambda: maxt_adjusted_p(z, draws), "holm": lambda: holm_adjusted_p(raw),
                    "fdr": lambda: bh_adjusted_p(raw), "none": lambda: raw}[control.method]()
        critical = decision_critical_values(control.method, z, draws, raw, adjusted, control.alpha)
        with np.errstate(invalid="ignore"):
            detectable = np.where(se > 0, (critical + _Z_POWER) * se, np.nan) + nulls
        for i, t in enumerate(judged):
            if np.isnan(z[i]):
                t.reason = "not judged: undefined on the resamples"
    out = []
    nan = float("nan")
    for t in tests:
        procedure = Procedure(_test_name(control, t), t.null, control, mode, t.sample.method, n_resamples,
                              t.sample.recipe, inflation if t.sample.recipe else 1.0)
        if t.reason is not None:
            out.append(Comparison(t.subject(), Scores(t.change.before, t.change.now), Decision(t.reason), procedure,
                                  Power(t.sample.n)))
            continue
        i = index[id(t)]
        w, t_se, c, p = t.change.w, se[i], float(critical[i]), float(adjusted[i])
        spread = c * t_se if t_se > 0 and c == c else 0.0  # no spread: every resample gives the estimate
        bound_w = w + spread if inferiority else w - spread  # the worst / the least worsening the data allow
        low, high = metrics._percentile_interval(-t.sign * _interval_draws(t), confidence)
        rejected = p <= control.alpha
        if inferiority:
            state = "non-inferior" if rejected else "not shown non-inferior"
            failing = not rejected
        else:
            state = "regressed" if rejected else "no regression"
            failing = rejected
        needed = None
        if inferiority and failing and w < t.null and t_se > 0 and c == c and c < np.inf:
            needed = int(np.ceil(t.sample.n * ((c + _Z_POWER) * t_se / (t.null - w)) ** 2))
        decision = Decision(state, bool(failing), p, float(raw[i]), float(-t.sign * bound_w) + 0.0)
        power = Power(t.sample.n, nan if inferiority else float(detectable[i]), needed)
        out.append(Comparison(t.subject(), Scores(t.change.before, t.change.now, float(low), float(high)), decision,
                              procedure, power))
    return out


def _interval_draws(test: _Test) -> np.ndarray:
    """The draws a per-rule percentile interval reads: the bootstrap's as they are; a permutation's (the null's law,
    centred at 0) moved to the estimate, the interval of a shift model."""
    change = test.change
    return change.samples if test.sample.method == "bootstrap" else change.samples + change.w


def _test_name(control: ErrorControl, test: _Test) -> str:
    resampling = {"bootstrap": "paired bootstrap", "permutation": "paired permutation"}[test.sample.method]
    if test.sample.recipe:
        resampling += f" against a recipe of {test.sample.recipe}"
    return resampling + {"fwer": ", max-T", "holm": ", Holm", "fdr": ", Benjamini-Hochberg", "none": ""}[control.method]


def compare_condition(now: dict, then: dict, where: tuple[str, str, str], condition_kind: str,
                      checks=DEFAULT_CHECKS, **options) -> list[Comparison]:
    """Every rule that applies to one condition, baseline `then` against `now`, as a family of its own."""
    return judge_family([PairedCell(*where, condition_kind, now, then)], checks, **options)


def summarize(comparisons: list[Comparison], closest: int = CLOSEST, *, new: list[str] = (),
              missing: list[str] = ()) -> dict:
    """The gate's verdict over a run: how many conditions were compared and failed it (and whether clean did), how
    many rules could not be judged and why, the conditions only one side has (`new`: run but not in the baseline;
    `missing`: in the baseline, not run), the error control, the power, and the failing comparisons plus the
    `closest` nearest to failing, for a side-by-side table. Beside them the improvement family's: how many
    conditions improved (`improved`, `improved_summary`, and its count alone, `improved_count`, which
    `improved_count_clause` puts after the summary where a verdict names the baseline in one line) and the improved
    comparisons (`improvements`, also in the table's rows). A condition several suites
    run (clean, in each) counts once."""
    comparisons = list({(*c.subject.case, c.subject.rule): c for c in comparisons}.values())
    conditions = list(dict.fromkeys(c.subject.case for c in comparisons if not c.subject.members))
    means = list(dict.fromkeys(c.subject.case for c in comparisons if c.subject.members))
    failing = list(dict.fromkeys(c.subject.case for c in comparisons if c.decision.regressed))
    better = list(dict.fromkeys(c.subject.case for c in comparisons if c.improvement.improved))
    clean = [key for key in failing if key[2] == "clean"]
    mode = comparisons[0].procedure.mode if comparisons else "regressions"
    verb = "not shown non-inferior" if mode == "non-inferiority" else "regressed"
    line = _count_line(failing, conditions, means, verb)
    judged = [c for c in comparisons if c.judged]
    control = judged[0].procedure.control if judged else None
    if judged:
        line += f"; {control.short()} over {len(judged)} rule{'s' * (len(judged) != 1)}"
    unjudged = [c for c in comparisons if not c.judged]
    reasons: dict[str, int] = {}
    for c in unjudged:
        why = c.decision.state.removeprefix("not judged: ")
        reasons[why] = reasons.get(why, 0) + 1
    if unjudged:
        line += f"; {len(unjudged)} not judged (" + ", ".join(f"{why}: {k}" for why, k in reasons.items()) + ")"
    if new:
        line += f"; {len(new)} new condition{'s' * (len(new) != 1)} not gated"
    if missing:
        line += f"; {len(missing)} baseline condition{'s' * (len(missing) != 1)} not run"
    if not comparisons and not new and not missing:
        line = "nothing compared"
    bad = sorted((c for c in comparisons if c.decision.regressed),
                 key=lambda c: (c.subject.condition != "clean", c.room))
    failing_keys = set(failing)
    nearest: dict[tuple, Comparison] = {}  # per condition that did not fail, its rule nearest to failing
    for c in judged:
        key = c.subject.case
        if key not in failing_keys and (key not in nearest or c.room < nearest[key].room):
            nearest[key] = c
    near = sorted(nearest.values(), key=lambda c: c.room)[:closest]
    improved = sorted((c for c in comparisons if c.improvement.improved),
                      key=lambda c: (c.subject.condition != "clean", c.improvement.p_value, c.subject.condition))
    shown = list({(*c.subject.case, c.subject.rule): c for c in bad + improved + near}.values())
    improved_line = improved_count = None
    if judged:
        improved_count = _count_line(better, conditions, means, "improved")
        improved_line = (improved_count
                         + f"; {control.short()} over the same {len(judged)} "
                         + "rules one-sided toward better" + (" (beyond 0, not the margin)" if mode ==
                                                              "non-inferiority" else "")
                         + ", a family of its own")
    methods = list(dict.fromkeys(c.procedure.method for c in judged))
    recipes = [c.procedure for c in judged if c.procedure.recipe]
    return {"conditions": len(conditions), "family_means": len(means), "regressed": len(failing),
            "clean_regressed": bool(clean), "summary": line,
            "improved": len(better), "improved_summary": improved_line,
            "improved_count": improved_count,
            "improvements": [c.as_dict() for c in improved],
            "mode": mode, "control": control.spec if judged else None,
            "method": " and ".join(methods) if methods else None,
            "resamples": judged[0].procedure.resamples if judged else None,
            "recipe": {"checkpoints": recipes[0].recipe, "inflation": recipes[0].inflation} if recipes else None,
            "control_text": control.describe() if judged else None,
            "rules": len(judged), "not_judged": reasons, "new": list(new), "missing": list(missing),
            "power": _power(judged) if mode == "regressions" else {},
            "memes_needed": _memes_needed(comparisons) if mode == "non-inferiority" else None,
            "rows": [c.as_dict() for c in shown] + [c.as_dict() for c in unjudged]}


def improved_count_clause(summary: dict) -> str:
    """`; 5 of 5 conditions and 1 of 1 family mean improved, clean included`: the improvement family's count, to follow
    the regressed count where a verdict or report names the baseline in one line; empty when nothing was judged. A
    summary from before `improved_count` was kept (an older JSON report) gives it from its `improved_summary`."""
    line = summary.get("improved_count") or (summary.get("improved_summary") or "").partition(";")[0]
    return f"; {line}" if line else ""


def _count_line(found: list[tuple], conditions: list[tuple], means: list[tuple], verb: str) -> str:
    """`2 of 6 conditions and 1 of 1 family mean regressed (clean did not)`: how many of the conditions and of the
    family means (model, dataset, condition keys) are among `found`, and whether clean is."""
    found_means = [key for key in found if key in set(means)]
    n = len(conditions)
    line = f"{len(found) - len(found_means)} of {n} condition{'s' * (n != 1)}"
    if means:
        line += f" and {len(found_means)} of {len(means)} family mean{'s' * (len(means) != 1)}"
    line += f" {verb}"
    if any(key[2] == "clean" for key in conditions):
        line += ", clean included" if any(key[2] == "clean" for key in found) else " (clean did not)"
    return line


def _power(judged: list[Comparison]) -> dict:
    """Per rule the median worsening its tests detect at 80% power under the run's control (a normal
    approximation: (critical value + z_0.8) x standard error): what the run can and cannot see."""
    by_rule: dict[str, list[float]] = {}
    for c in judged:
        if c.power.detectable == c.power.detectable:
            by_rule.setdefault(c.subject.what, []).append(c.power.detectable)
    return {what: float(np.median(values)) for what, values in by_rule.items()}


def _memes_needed(comparisons: list[Comparison]) -> dict:
    """Over the rules not shown non-inferior: the memes that would show them with 80% power at their observed change
    (median and most; the power line's formula), and how many no number of memes would (their change is already past
    the margin)."""
    failing = [c for c in comparisons if c.decision.regressed and c.judged]
    needed = sorted(c.power.memes_needed for c in failing if c.power.memes_needed)
    return {"rules": len(failing), "median": int(np.median(needed)) if needed else None,
            "most": needed[-1] if needed else None, "never": len(failing) - len(needed),
            "memes": max((c.power.memes for c in comparisons), default=0)}


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


