"""A suite's assertions: robustness floors and a flip-rate ceiling, judged with their confidence intervals."""
from __future__ import annotations

import math
from dataclasses import dataclass, field, fields

import numpy as np

from .results import LABEL_BOUND, METRIC_NAMES, ConditionResult
from ..data.meme import unlabelled

DECISIONS = ("estimate", "confident")
NOT_JUDGED = "not judged"  # a case measured whose thresholds are undefined on its memes (`verdict`)
NO_LABELS = f"{NOT_JUDGED}: no labels"  # a label-bound threshold of unlabelled memes: left out, by design


def _is_finite_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


@dataclass(frozen=True)
class MetricThresholds:
    """The thresholds set per metric (accuracy, auroc, macro_f1), each a table of metric = limit: floors on relative
    and absolute robustness and on the clean score, and a ceiling on the gap between groups. An override replaces
    them metric by metric (`Thresholds.merged`)."""

    min_relative_robustness: dict[str, float] = field(default_factory=dict)
    min_absolute_robustness: dict[str, float] = field(default_factory=dict)
    min_clean: dict[str, float] = field(default_factory=dict)
    max_group_gap: dict[str, float] = field(default_factory=dict)  # best minus worst group's relative robustness


PER_METRIC = tuple(f.name for f in fields(MetricThresholds))
# every key of a suite's [thresholds] table, in the order a case's record holds them
KEYS = ("min_relative_robustness", "min_absolute_robustness", "max_flip_rate", "max_confidence_drop", "min_clean",
        "max_group_gap", "max_abstention_rate", "max_abstention_increase", "max_inconsistency", "decision")


@dataclass(frozen=True)
class Thresholds:
    """`decision="estimate"` fails when the point estimate crosses a threshold; `"confident"` only when the whole
    confidence interval does (use it on small datasets, where one unlucky draw should not fail CI). A suite's table
    sets them as flat keys (`KEYS`), which `from_mapping` reads and `mapping` gives back."""

    per_metric: MetricThresholds = field(default_factory=MetricThresholds)
    max_flip_rate: float | None = None
    # the mean drop in the probability of each meme's clean prediction (ConditionResult.confidence_drop): label-free,
    # as the flip rate, and it moves before predictions flip
    max_confidence_drop: float | None = None
    # for detectors that can decline (prompted vision-language models): the share of memes declined, and its rise
    # from clean; ignored for detectors that always answer
    max_abstention_rate: float | None = None
    max_abstention_increase: float | None = None
    # for repeat-sampled detectors (a card with samples/temperature): the share of memes whose answered samples
    # disagree, 1 - the consistency rate (judge/sampling.py); ignored for detectors asked once
    max_inconsistency: float | None = None
    decision: str = "estimate"

    @classmethod
    def from_mapping(cls, data: dict, where: str) -> "Thresholds":
        """Validated construction from a suite's flat keys; `where` names the file and table for the error message."""
        unknown = set(data) - set(KEYS)
        if unknown:
            raise ValueError(f"{where}: unknown threshold key(s) {sorted(unknown)}; valid: {sorted(KEYS)}")
        for key in PER_METRIC:
            floors = data.get(key, {})
            if not isinstance(floors, dict):
                raise ValueError(f"{where}.{key}: expected a table of metric = number, got {floors!r}")
            bad = set(floors) - set(METRIC_NAMES)
            if bad:
                raise ValueError(f"{where}.{key}: unknown metric(s) {sorted(bad)}; valid: {list(METRIC_NAMES)}")
            for metric, value in floors.items():
                if not _is_finite_number(value):
                    raise ValueError(f"{where}.{key}.{metric}: expected a number, got {value!r}")
        for key, low in (("max_flip_rate", 0), ("max_abstention_rate", 0), ("max_abstention_increase", -1),
                         ("max_inconsistency", 0), ("max_confidence_drop", -1)):
            if key in data and not (_is_finite_number(data[key]) and low <= data[key] <= 1):
                raise ValueError(f"{where}.{key}: expected a number in [{low}, 1], got {data[key]!r}")
        if data.get("decision", "estimate") not in DECISIONS:
            raise ValueError(f"{where}.decision: expected one of {DECISIONS}, got {data['decision']!r}")
        return cls._of(data)

    @classmethod
    def _of(cls, data: dict) -> "Thresholds":
        """Built from flat keys (`KEYS`), unchecked: the per-metric tables into their part."""
        per_metric = MetricThresholds(**{key: value for key, value in data.items() if key in PER_METRIC})
        return cls(per_metric, **{key: value for key, value in data.items() if key not in PER_METRIC})

    def mapping(self) -> dict:
        """Every key as a suite's table sets it (flat), in the order of a case's record."""
        return {key: getattr(self.per_metric if key in PER_METRIC else self, key) for key in KEYS}

    def as_dict(self) -> dict:
        """Every key and value, for a case's record; `max_inconsistency` and `max_confidence_drop` only where set (a
        run without them keeps the record it had before the keys existed)."""
        d = {key: dict(value) if isinstance(value, dict) else value for key, value in self.mapping().items()}
        for key in ("max_inconsistency", "max_confidence_drop"):
            if d[key] is None:
                del d[key]
        return d

    def merged(self, override: "Thresholds | dict") -> "Thresholds":
        """These thresholds with an override's keys replacing (per metric) the ones it sets."""
        o = override if isinstance(override, dict) else override.mapping()
        mine = self.mapping()
        for key in KEYS:
            if key in o:
                mine[key] = {**mine[key], **o[key]} if isinstance(o[key], dict) else o[key]
        return self._of(mine)


@dataclass(frozen=True)
class Violation:
    what: str  # e.g. "relative robustness of accuracy"
    value: float
    limit: float
    comparison: str  # ">=" or "<=": what was required
    ci: tuple[float, float]
    confidence: float

    @property
    def sure(self) -> bool:
        """The whole interval is past the limit (or the value is undefined): another seed would fail it too. A
        violation that is not sure fails within noise: its interval straddles the limit."""
        if math.isnan(self.value):
            return True
        lo, hi = self.ci
        return hi < self.limit if self.comparison == ">=" else lo > self.limit

    @property
    def shortfall(self) -> float:
        """How far the value is on the wrong side of the limit, in the metric's own units (nan counts as 1)."""
        if math.isnan(self.value):
            return 1.0
        return self.limit - self.value if self.comparison == ">=" else self.value - self.limit

    def short(self) -> str:
        """One clause for the compact failure line: `flip rate 0.175 > 0.100 (CI 0.119..0.238)`,
        `rel. accuracy 0.801 < 0.900 (CI ...)`."""
        what = self.what.replace("relative robustness of ", "rel. ").replace("absolute robustness of ", "abs. ")
        if math.isnan(self.value):
            return f"{what} undefined (nan)"
        lo, hi = self.ci
        wrong = "<" if self.comparison == ">=" else ">"
        return f"{what} {self.value:.3f} {wrong} {self.limit:.3f} (CI {lo:.3f}..{hi:.3f})"

    def __str__(self) -> str:
        lo, hi = self.ci
        if math.isnan(self.value):
            return (f"{self.what} is undefined (nan: e.g. only one class among the memes), required "
                    f"{self.comparison} {self.limit:.4f}")
        return (f"{self.what} = {self.value:.4f}, required {self.comparison} {self.limit:.4f} "
                f"({self.confidence:.0%} CI {lo:.4f}..{hi:.4f})")


def why_undefined(metric: str, kind: str, y) -> str:
    """Why a measure of the memes labelled `y` is undefined (NaN), as the verdict words it: the one wording of the
    suites' thresholds (`not_judged`) and the gate's rules (gate.py), so that both name the same cause alike."""
    y = np.asarray(y)
    if unlabelled(y) and kind in LABEL_BOUND:
        return NO_LABELS
    if metric == "auroc" and len(np.unique(y, axis=0)) < 2:
        n = len(y)
        return f"not judged: the {n} meme{'s' * (n != 1)} hold{'s' * (n == 1)} one class"
    if kind == "relative":
        return "not judged: clean score 0 (relative robustness undefined)"
    return "not judged: undefined"


def check(result: ConditionResult, thresholds: Thresholds) -> list[Violation]:
    """Every threshold `result` violates under the suite's decision (empty when it passes): with "estimate" every
    point estimate past its limit, with "confident" only the violations whose whole interval is past it."""
    return failing(assess(result, thresholds), thresholds.decision)


def failing(violations: list[Violation], decision: str) -> list[Violation]:
    """The violations that fail a case under `decision`: all of them with "estimate", the sure ones with
    "confident"."""
    return [v for v in violations if decision == "estimate" or v.sure]


VERDICTS = ("pass", "fail for sure", "fail within noise", NOT_JUDGED)


def verdict(violations: list[Violation], unjudged: list[tuple[str, str]] = (), judged: int = 0) -> str:
    """A case's verdict from `assess` and `not_judged`: it fails for sure (some interval wholly past its limit),
    fails within noise (its point estimates fail, but each interval straddles the limit), is not judged (it fails
    nothing, but a threshold is undefined on its memes: neither a pass nor a failure), or passes. A label-bound
    threshold of unlabelled memes (NO_LABELS) is left out by design: the case passes on the `judged` thresholds
    that remain (the flip rate), and is not judged only when none does."""
    if violations:
        return "fail for sure" if any(v.sure for v in violations) else "fail within noise"
    blocking = [why for _, why in unjudged if why != NO_LABELS]
    return NOT_JUDGED if blocking or (unjudged and not judged) else "pass"


def not_judged_reason(unjudged: list[tuple[str, str]]) -> str | None:
    """The case's one line for its undefined thresholds (`not_judged`), each cause once: `not judged: the 50 memes
    hold one class`; None when every threshold is defined."""
    causes = dict.fromkeys(reason.removeprefix(f"{NOT_JUDGED}: ") for _, reason in unjudged)
    return f"{NOT_JUDGED}: " + "; ".join(causes) if causes else None


def _checks(result: ConditionResult, thresholds: Thresholds) -> list[tuple]:
    """Every threshold `result` is judged on, as (what, value, limit, required comparison, (name, kind) of its
    bootstrap in ConditionResult.ci/samples): what `assess` and `case_p_value` both read."""
    out = []
    if result.answers.abstained is not None and thresholds.max_abstention_rate is not None:
        out.append(("abstention rate", result.abstention_rate, thresholds.max_abstention_rate, "<=",
                    ("abstention", "abstention_rate")))
    sampled = result.answers.sampled
    if sampled is not None and thresholds.max_inconsistency is not None:
        out.append((f"inconsistency (memes whose {sampled.shape[1]} answers disagree)", result.inconsistency,
                    thresholds.max_inconsistency, "<=", ("sampling", "inconsistency")))
    if result.condition.kind == "clean":
        return out + [(f"clean {metric}", result.metric(metric), limit, ">=", (metric, "metric"))
                      for metric, limit in thresholds.per_metric.min_clean.items()]
    if result.abstention_increase is not None and thresholds.max_abstention_increase is not None:
        out.append(("abstention increase", result.abstention_increase, thresholds.max_abstention_increase, "<=",
                    ("abstention", "abstention_increase")))
    out += [(f"relative robustness of {metric}", result.relative_robustness(metric), limit, ">=", (metric, "relative"))
            for metric, limit in thresholds.per_metric.min_relative_robustness.items()]
    out += [(f"absolute robustness of {metric}", result.absolute_robustness(metric), limit, ">=", (metric, "absolute"))
            for metric, limit in thresholds.per_metric.min_absolute_robustness.items()]
    if result.memes.groups is not None:
        out += [(f"group gap in relative robustness of {metric}", result.group_gap(metric), limit, "<=",
                 (metric, "group_gap")) for metric, limit in thresholds.per_metric.max_group_gap.items()]
    if thresholds.max_flip_rate is not None:
        out.append(("flip rate", result.flip_rate, thresholds.max_flip_rate, "<=", ("flip_rate", "flip_rate")))
    if thresholds.max_confidence_drop is not None:
        out.append(("confidence drop", result.confidence_drop, thresholds.max_confidence_drop, "<=",
                    ("confidence_drop", "confidence_drop")))
    return out


def assess(result: ConditionResult, thresholds: Thresholds) -> list[Violation]:
    """Every threshold `result` violates by its point estimate or by its whole interval, whatever the decision;
    `Violation.sure` tells which are beyond noise. A threshold whose value is undefined is no violation: it is not
    judged (`not_judged`)."""
    conf = result.stats.confidence
    out = []
    for what, value, limit, comparison, bootstrap in _checks(result, thresholds):
        if _undefined(value, bootstrap, result):
            continue
        ci = result.ci(*bootstrap)
        if bootstrap[1] == "group_gap":
            if value == value and (value > limit or ci[0] > limit):  # no gap (one group) is not a failure
                metric = bootstrap[0]
                scores = result.group_scores(metric)
                worst = min(scores, key=lambda g: scores[g]["relative_robustness"])
                best = max(scores, key=lambda g: scores[g]["relative_robustness"])
                out.append(Violation(f"{what} (worst {worst}, best {best})", value, limit, comparison, ci, conf))
        elif comparison == ">=" and not (value >= limit and ci[1] >= limit):  # an undefined interval cannot meet it
            out.append(Violation(what, value, limit, comparison, ci, conf))
        elif comparison == "<=" and not (value <= limit and ci[0] <= limit):
            out.append(Violation(what, value, limit, comparison, ci, conf))
    return out


def not_judged(result: ConditionResult, thresholds: Thresholds) -> list[tuple[str, str]]:
    """(what, why) of every threshold whose value is undefined on the memes scored (AUROC of memes of one class, a
    relative robustness from a clean score of 0): neither met nor violated (STYLE.md rule 12). An undefined group
    gap (one group) is not among them: `assess` passes it."""
    y = result.scored_truth
    return [(what, why_undefined(*bootstrap, y)) for what, value, _limit, _comparison, bootstrap
            in _checks(result, thresholds) if _undefined(value, bootstrap, result)]


def judged_count(result: ConditionResult, thresholds: Thresholds) -> int:
    """How many of the case's thresholds are defined on its memes (met or violated): what `verdict` reads."""
    return sum(not _undefined(value, bootstrap, result) for _, value, _, _, bootstrap in _checks(result, thresholds))


def _undefined(value: float, bootstrap: tuple, result: ConditionResult) -> bool:
    """A threshold not judged: its value is NaN (a group gap's is not: one group has no gap, and passes; but
    unlabelled memes have no gap to measure)."""
    return value != value and (bootstrap[1] != "group_gap" or not result.labelled)


def case_p_value(result: ConditionResult, thresholds: Thresholds) -> float | None:
    """One-sided p-value of "this case meets all its thresholds": per threshold, the share of its bootstrap
    resamples on the passing side (metrics.bootstrap_one_sided_p, from the resamples its interval came from),
    Bonferroni-adjusted over the case's k thresholds: min(1, k * smallest). A threshold whose value is undefined is
    not judged and takes no part (None when none is defined: the case has no p, and the run's false-discovery-rate
    control leaves it out); one defined on the memes but on no resample counts as p = 0; a group gap that is
    undefined (one group) as p = 1, as `assess` passes it. 1.0 without thresholds. What the run's
    false-discovery-rate control (verdict.py) ranks."""
    from .metrics import bootstrap_one_sided_p

    p_values = []
    checks = _checks(result, thresholds)
    for _what, value, limit, comparison, bootstrap in checks:
        if _undefined(value, bootstrap, result):
            continue
        p = bootstrap_one_sided_p(result.samples(*bootstrap), limit, "min" if comparison == ">=" else "max")
        if p != p:
            p = 1.0 if bootstrap[1] == "group_gap" else 0.0
        p_values.append(p)
    if not p_values:
        return None if checks else 1.0
    return float(min(1.0, len(p_values) * min(p_values)))  # plain float: xdist sends it
