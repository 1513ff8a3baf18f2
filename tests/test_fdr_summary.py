"""False discovery rate over a run's confident cases: one-sided p-values from the very resamples of the intervals,
Benjamini-Hochberg over the run, and the summary line that says how many failures survive."""
import numpy as np
import pytest
import torch  # noqa: F401  imported here once: pytester's in-process runs would otherwise re-import it and crash

from pytest_memerobust.judge import metrics
from pytest_memerobust.engine import Condition
from pytest_memerobust.judge.results import Answers, ConditionResult, Memes, StatsConfig
from pytest_memerobust.judge.thresholds import MetricThresholds, Thresholds, case_p_value
from pytest_memerobust.judge.verdict import CaseOutcome, run_verdict
from pytest_memerobust.report.tables import verdict_lines


def _result(flip_share: float, n: int = 200):
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, n)
    clean = np.eye(2)[y] * 0.8 + 0.1
    flipped = np.arange(n) < int(flip_share * n)
    perturbed = np.where(flipped[:, None], clean[:, ::-1], clean)
    return ConditionResult("m", "d", Condition(text="typos", text_severity=1), Memes(y), Answers(clean, perturbed),
                           StatsConfig(n_resamples=400))


def test_the_interval_is_the_percentile_interval_of_the_samples():
    r = _result(0.2)
    for name, kind in (("accuracy", "relative"), ("flip_rate", "flip_rate"), ("auroc", "metric")):
        lo, hi = np.nanpercentile(r.samples(name, kind), [2.5, 97.5])
        assert r.ci(name, kind) == pytest.approx((lo, hi))


def test_a_case_far_past_its_limit_has_a_small_p_and_one_well_within_a_large_one():
    assert case_p_value(_result(0.3), Thresholds(max_flip_rate=0.1)) == pytest.approx(1 / 401)
    assert case_p_value(_result(0.02), Thresholds(max_flip_rate=0.1)) == 1.0
    assert case_p_value(_result(0.3), Thresholds()) == 1.0  # nothing to judge


def test_a_case_p_is_bonferroni_over_its_thresholds():
    r = _result(0.1)
    one = case_p_value(r, Thresholds(max_flip_rate=0.11))
    p_flip = metrics.bootstrap_one_sided_p(r.samples("flip_rate", "flip_rate"), 0.11, "max")
    p_acc = metrics.bootstrap_one_sided_p(r.samples("accuracy", "relative"), 0.5, "min")
    assert one == pytest.approx(p_flip)
    both = case_p_value(r, Thresholds(MetricThresholds(min_relative_robustness={"accuracy": 0.5}), max_flip_rate=0.11))
    assert both == pytest.approx(min(1.0, 2 * min(p_flip, p_acc)))


def _record(k, failed, p, decision="confident"):
    violations = [{"what": "flip rate", "value": 0.3, "limit": 0.1, "comparison": "<=", "ci": [0.2, 0.4],
                   "sure": True, "fails": True}] if failed else []
    return {"nodeid": f"s::m::c{k}", "model": "m", "family": "typos", "condition": f"c{k}", "decision": decision,
            "p_value": p, "outcome": "failed" if failed else "passed",
            "verdict": "fail for sure" if failed else "pass", "violations": violations, "regressions": [],
            "regressed": False, "fdr_survives": None}


def test_the_summary_counts_the_failures_that_survive_benjamini_hochberg():
    # 10 confident cases at q = 0.05: the step-up keeps the two smallest (0.001 <= 0.005, 0.008 <= 0.01, but
    # 0.04 > 0.015); the third failure may be chance
    ps = [0.001, 0.008, 0.04, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 1.0]
    records = [_record(k, k < 3, p) for k, p in enumerate(ps)] + [_record(99, True, 0.0, "estimate")]
    verdict = run_verdict(records, gate="thresholds", baseline=None)
    assert verdict["fdr"] == {"q": 0.05, "confident": 10, "failing": 3, "surviving": 2}
    assert [r["fdr_survives"] for r in records[:4]] == [True, True, False, False] and records[-1]["fdr_survives"] is None
    assert ("false discovery rate: 2 of 3 failing cases survive Benjamini-Hochberg at q = 0.05 over 10 confident "
            "cases (1 may be chance)") in verdict_lines(verdict)
    assert run_verdict([_record(0, True, 0.0, "estimate")], gate="thresholds", baseline=None)["fdr"] is None


def test_case_outcomes_read_their_p_value_and_decision_back_from_the_report():
    o = CaseOutcome.from_properties("n", "failed", [("memerobust.model", "m"), ("memerobust.decision", "confident"),
                                                     ("memerobust.p_value", 0.002)])
    assert (o.decision, o.p_value) == ("confident", 0.002)
    assert CaseOutcome.from_properties("n", "passed", []).p_value is None


CONFIDENT_SUITE = """
[suite]
name = "confident"
[thresholds]
max_flip_rate = 0.0
decision = "confident"
[text]
typos = [1, 5]
hotflip = [3]
"""


def test_a_confident_run_says_how_many_failures_survive(pytester):
    pytester.makefile(".toml", **{"memerobust-confident": CONFIDENT_SUITE})
    result = pytester.runpytest("--memerobust-model=demo", "--memerobust-limit=40", "--memerobust-bootstrap=100",
                                "-p", "no:cacheprovider", ".")
    out = result.stdout.str()
    [line] = [x for x in out.splitlines() if x.startswith("false discovery rate:")]
    failed = result.parseoutcomes().get("failed", 0)
    assert failed >= 1  # hotflip flips memes: its whole interval is above 0
    assert f"of {failed} failing cases survive" in line and "over 4 confident cases" in line
