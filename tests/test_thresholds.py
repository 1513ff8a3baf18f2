"""`check()` on hand-built results whose metrics are known exactly: floors, the flip-rate ceiling, the violation
record and message, and the "confident" decision that judges by the confidence interval."""
from __future__ import annotations

import numpy as np
import pytest

from pytest_memerobust.judge import metrics
from pytest_memerobust.engine import Condition
from pytest_memerobust.judge.results import Answers, ConditionResult, Memes, StatsConfig
from pytest_memerobust.judge.thresholds import MetricThresholds, Thresholds, Violation, check

STATS = StatsConfig(n_resamples=200)
N = 20
Y = np.array([0] * 10 + [1] * 10)
# Graded, all-correct clean scores: negatives 0.05..0.455, positives 0.55..0.955 -> accuracy, AUROC, macro-F1 = 1.
P1_CLEAN = np.concatenate([0.05 + 0.045 * np.arange(10), 0.55 + 0.045 * np.arange(10)])
TYPOS = Condition(text="typos", text_severity=2)


def proba(p1: np.ndarray) -> np.ndarray:
    return np.stack([1.0 - p1, p1], axis=1)


def flipped(indices) -> np.ndarray:
    """Clean scores with the items at `indices` mirrored (p1 -> 1 - p1), so exactly those predictions flip."""
    p1 = P1_CLEAN.copy()
    p1[list(indices)] = 1.0 - p1[list(indices)]
    return proba(p1)


def result(perturbed: np.ndarray, condition=TYPOS, clean: np.ndarray | None = None, stats=STATS) -> ConditionResult:
    clean = proba(P1_CLEAN) if clean is None else clean
    return ConditionResult("toy", "hand", condition, Memes(Y), Answers(clean, perturbed), stats)


def brute_auroc(y, p1) -> float:
    pos, neg = p1[y == 1], p1[y == 0]
    wins = sum((a > b) + 0.5 * (a == b) for a in pos for b in neg)
    return wins / (len(pos) * len(neg))


# Two flips, one per class: 18/20 right, confusion TN=9 FP=1 FN=1 TP=9.
TWO = [0, 10]
# Ten flips, five per class: 10/20 right.
TEN = [0, 1, 2, 3, 4, 10, 11, 12, 13, 14]


def test_hand_built_numbers_are_what_they_should_be():
    r = result(flipped(TWO))
    assert r.clean_values == {"accuracy": 1.0, "auroc": 1.0, "macro_f1": 1.0}
    assert r.metric("accuracy") == pytest.approx(0.9)
    assert r.metric("macro_f1") == pytest.approx(0.9)  # both classes: 2*9 / (10 + 10)
    assert r.metric("auroc") == pytest.approx(brute_auroc(Y, flipped(TWO)[:, 1]))
    assert r.relative_robustness("accuracy") == pytest.approx(0.9)
    assert r.absolute_robustness("accuracy") == pytest.approx(0.9)
    assert r.flip_rate == pytest.approx(0.1)


def test_passes_when_above_every_floor():
    r = result(flipped(TWO))
    t = Thresholds(MetricThresholds(min_relative_robustness={"accuracy": 0.85, "auroc": 0.8, "macro_f1": 0.85},
                                    min_absolute_robustness={"accuracy": 0.85, "macro_f1": 0.85},
                                    min_clean={"accuracy": 1.0}),
                   max_flip_rate=0.1)  # equal to the flip rate: a ceiling is inclusive
    assert check(r, t) == []


def test_no_thresholds_no_violations():
    assert check(result(flipped(TEN)), Thresholds()) == []
    assert check(result(flipped(TEN), condition=Condition(), clean=flipped(TEN)), Thresholds()) == []


def test_each_violation_records_value_limit_comparison_and_ci():
    r = result(flipped(TWO))
    t = Thresholds(MetricThresholds(min_relative_robustness={"accuracy": 0.95},
                                    min_absolute_robustness={"macro_f1": 0.95}),
                   max_flip_rate=0.05)
    rel, ab, flip = check(r, t)
    boot = dict(n_resamples=200, confidence=0.95, seed=0)

    assert rel.what == "relative robustness of accuracy"
    assert rel.value == pytest.approx(0.9) and rel.limit == 0.95 and rel.comparison == ">="
    assert rel.ci == metrics.robustness_ci("accuracy", Y, proba(P1_CLEAN), flipped(TWO), kind="relative", **boot)
    assert rel.ci[0] <= rel.value <= rel.ci[1]
    assert rel.confidence == 0.95

    assert ab.what == "absolute robustness of macro_f1"
    assert ab.value == pytest.approx(0.9) and ab.limit == 0.95 and ab.comparison == ">="
    assert ab.ci == metrics.robustness_ci("macro_f1", Y, proba(P1_CLEAN), flipped(TWO), kind="absolute", **boot)

    assert flip.what == "flip rate"
    assert flip.value == pytest.approx(0.1) and flip.limit == 0.05 and flip.comparison == "<="
    pred_clean, pred = proba(P1_CLEAN).argmax(1), flipped(TWO).argmax(1)
    assert flip.ci == metrics.flip_rate_ci(pred_clean, pred, **boot)


def test_violation_message_names_metric_value_limit_and_ci():
    r = result(flipped(TWO))
    (v,) = check(r, Thresholds(MetricThresholds(min_relative_robustness={"accuracy": 0.95})))
    text = str(v)
    lo, hi = v.ci
    assert "relative robustness of accuracy" in text
    assert "= 0.9000" in text
    assert "required >= 0.9500" in text
    assert f"95% CI {lo:.4f}..{hi:.4f}" in text


def test_violation_str_format_exactly():
    v = Violation("flip rate", 0.125, 0.1, "<=", (0.05, 0.2), 0.9)
    assert str(v) == "flip rate = 0.1250, required <= 0.1000 (90% CI 0.0500..0.2000)"


def test_violation_uses_the_session_confidence():
    r = result(flipped(TWO), stats=StatsConfig(n_resamples=200, confidence=0.8))
    (v,) = check(r, Thresholds(MetricThresholds(min_relative_robustness={"accuracy": 0.95})))
    assert v.confidence == 0.8 and "80% CI" in str(v)
    assert v.ci == metrics.robustness_ci("accuracy", Y, proba(P1_CLEAN), flipped(TWO), n_resamples=200,
                                         confidence=0.8, seed=0)


# --- decision = "confident" -------------------------------------------------------------------------------------


def test_confident_does_not_fail_while_the_ci_reaches_the_floor():
    r = result(flipped(TWO))
    lo, hi = r.ci("accuracy", "relative")
    assert r.relative_robustness("accuracy") < 0.95 < hi  # the estimate is below, the interval is not
    floors = MetricThresholds(min_relative_robustness={"accuracy": 0.95})
    assert len(check(r, Thresholds(floors))) == 1
    assert check(r, Thresholds(floors, decision="confident")) == []


def test_confident_fails_when_the_whole_ci_is_below_the_floor():
    r = result(flipped(TEN))
    lo, hi = r.ci("accuracy", "relative")
    assert hi < 0.95
    (v,) = check(r, Thresholds(MetricThresholds(min_relative_robustness={"accuracy": 0.95}), decision="confident"))
    assert v.value == pytest.approx(0.5) and v.limit == 0.95 and v.ci == (lo, hi)


def test_confident_absolute_floor():
    r = result(flipped(TWO))
    assert r.ci("accuracy", "absolute")[1] > 0.95
    t = Thresholds(MetricThresholds(min_absolute_robustness={"accuracy": 0.95}), decision="confident")
    assert check(r, t) == []
    assert [v.what for v in check(result(flipped(TEN)), t)] == ["absolute robustness of accuracy"]


def test_confident_flip_rate_judges_the_lower_bound():
    r = result(flipped(TWO))
    lo, hi = r.ci("flip_rate", "flip_rate")
    assert lo < 0.05 < r.flip_rate
    assert len(check(r, Thresholds(max_flip_rate=0.05))) == 1
    assert check(r, Thresholds(max_flip_rate=0.05, decision="confident")) == []
    many = result(flipped(TEN))
    assert many.ci("flip_rate", "flip_rate")[0] > 0.05
    (v,) = check(many, Thresholds(max_flip_rate=0.05, decision="confident"))
    assert v.what == "flip rate" and v.value == pytest.approx(0.5) and v.comparison == "<="


# --- clean condition and flip-rate ceiling ----------------------------------------------------------------------


def test_clean_condition_uses_min_clean_only():
    worse = flipped(TWO)  # used as the clean predictions: accuracy 0.9
    r = result(worse, condition=Condition(), clean=worse)
    t = Thresholds(MetricThresholds(min_clean={"accuracy": 0.95, "auroc": 0.5},
                                    min_relative_robustness={"accuracy": 1.5}), max_flip_rate=0.0)
    (v,) = check(r, t)  # relative floor and flip ceiling do not apply to the clean condition
    assert v.what == "clean accuracy"
    assert v.value == pytest.approx(0.9) and v.limit == 0.95 and v.comparison == ">="
    assert v.ci == metrics.metric_ci("accuracy", Y, worse, n_resamples=200, confidence=0.95, seed=0)
    assert check(r, Thresholds(MetricThresholds(min_clean={"accuracy": 0.85}))) == []


def test_clean_confident_uses_the_metric_ci():
    worse = flipped(TWO)
    r = result(worse, condition=Condition(), clean=worse)
    assert r.ci("accuracy", "metric")[1] > 0.95
    assert check(r, Thresholds(MetricThresholds(min_clean={"accuracy": 0.95}), decision="confident")) == []


def test_perturbed_condition_ignores_min_clean():
    r = result(flipped(TWO), clean=flipped(TEN))  # clean accuracy 0.5, far below the floor
    assert check(r, Thresholds(MetricThresholds(min_clean={"accuracy": 0.99}))) == []


def test_flip_rate_counts_changed_predictions_even_when_accuracy_improves():
    # clean gets items 0 and 10 wrong; the perturbation fixes them: accuracy rises, yet 2 predictions changed
    r = result(proba(P1_CLEAN), clean=flipped(TWO))
    assert r.relative_robustness("accuracy") == pytest.approx(1 / 0.9)
    assert r.flip_rate == pytest.approx(0.1)
    assert check(r, Thresholds(MetricThresholds(min_relative_robustness={"accuracy": 1.0}))) == []
    (v,) = check(r, Thresholds(MetricThresholds(min_relative_robustness={"accuracy": 1.0}), max_flip_rate=0.05))
    assert (v.what, v.comparison, v.limit) == ("flip rate", "<=", 0.05)
    assert check(r, Thresholds(max_flip_rate=0.1)) == []


def test_no_flip_no_flip_violation():
    assert check(result(proba(P1_CLEAN)), Thresholds(max_flip_rate=0.0)) == []


def test_an_undefined_metric_is_not_judged_never_a_failure():
    """Issue 62: AUROC of memes of one class is undefined: no violation (let alone a sure one), the case not judged."""
    from pytest_memerobust.judge.thresholds import case_p_value, not_judged, verdict

    y = np.zeros(N, dtype=int)
    p = proba(P1_CLEAN)
    r = ConditionResult("toy", "hand", Condition(), Memes(y), Answers(p, p), STATS)
    assert np.isnan(r.metric("auroc"))
    thresholds = Thresholds(MetricThresholds(min_clean={"auroc": 0.9}))
    assert check(r, thresholds) == []
    unjudged = not_judged(r, thresholds)
    assert unjudged == [("clean auroc", f"not judged: the {N} memes hold one class")]
    assert verdict([], unjudged) == "not judged" and case_p_value(r, thresholds) is None


def test_group_gap_is_best_minus_worst_group_and_fails_past_its_limit():
    # two groups of 10: group "a" keeps every prediction, group "b" loses half of them
    y = np.array([0, 1] * 10)
    clean = np.where(y[:, None] == np.arange(2), 0.9, 0.1)
    perturbed = clean.copy()
    perturbed[[1, 3, 5, 7, 9]] = perturbed[[1, 3, 5, 7, 9]][:, ::-1]
    groups = np.array(["a"] * 10 + ["b"] * 10)
    groups = groups[np.r_[10:20, 0:10]]  # the flipped memes (rows 1..9) belong to group "b"
    r = ConditionResult("toy", "hand", Condition(text="typos", text_severity=1), Memes(y, groups),
                        Answers(clean, perturbed), STATS)
    scores = r.group_scores("accuracy")
    assert scores["a"]["relative_robustness"] == 1.0 and scores["b"]["relative_robustness"] == 0.5
    assert r.group_gap("accuracy") == 0.5
    [violation] = check(r, Thresholds(MetricThresholds(max_group_gap={"accuracy": 0.2})))
    assert "group gap in relative robustness of accuracy (worst b, best a)" in str(violation)
    assert check(r, Thresholds(MetricThresholds(max_group_gap={"accuracy": 0.6}))) == []


def test_small_groups_and_memes_without_a_group_are_left_out():
    y = np.array([0, 1] * 10)
    clean = np.where(y[:, None] == np.arange(2), 0.9, 0.1)
    groups = np.array(["a"] * 12 + ["b"] * 3 + [""] * 5)
    r = ConditionResult("toy", "hand", Condition(text="typos", text_severity=1), Memes(y, groups),
                        Answers(clean, clean), STATS)
    assert set(r.group_scores("accuracy")) == {"a"}
    assert np.isnan(r.group_gap("accuracy"))
    assert check(r, Thresholds(MetricThresholds(max_group_gap={"accuracy": 0.0}))) == []  # one group: no gap to judge
