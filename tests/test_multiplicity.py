"""Error control over a run's family of comparisons: known answers worked out by hand (Holm, Benjamini-Hochberg,
step-down max-T on a toy small enough to enumerate), and the family-wise error on simulated null families."""
import re

import numpy as np
import pytest

from pytest_memerobust.judge.gate import ErrorControl, PairedCell, RegressionCheck, judge_family, summarize
from pytest_memerobust.judge.metrics import benjamini_hochberg
from pytest_memerobust.judge.multiplicity import (bh_adjusted_p, binomial_upper_tail, holm_adjusted_p, marginal_p,
                                                  maxt_adjusted_p, maxt_critical_value, studentized)

P = np.array([0.01, 0.04, 0.03, 0.005])


def test_holm_by_hand():
    # sorted 0.005, 0.01, 0.03, 0.04 -> 4 x 0.005, 3 x 0.01, 2 x 0.03, 1 x 0.04 = 0.02, 0.03, 0.06, 0.04 -> monotone
    assert holm_adjusted_p(P) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    with_nan = holm_adjusted_p(np.array([np.nan, 0.01]))
    assert np.isnan(with_nan[0]) and with_nan[1] == 0.01


def test_benjamini_hochberg_by_hand_and_as_the_verdicts_rejections():
    # sorted 0.005 x 4/1, 0.01 x 4/2, 0.03 x 4/3, 0.04 x 4/4 = 0.02, 0.02, 0.04, 0.04 (already monotone)
    assert bh_adjusted_p(P) == pytest.approx([0.02, 0.04, 0.04, 0.02])
    for q in (0.01, 0.02, 0.035, 0.05):
        assert ((bh_adjusted_p(P) <= q) == benjamini_hochberg(P, q)).all()


def test_step_down_max_t_on_a_toy_enumerated_by_hand():
    draws = np.array([[0.0, 2.0, 4.0, 1.0],
                      [3.0, 0.0, -1.0, 0.5]])
    # z = (3, 1): both steps see the max over both rows (3, 2, 4, 1): 2 of 4 reach 3 -> 3/5; 1 -> monotone 3/5
    assert maxt_adjusted_p(np.array([3.0, 1.0]), draws) == pytest.approx([0.6, 0.6])
    # z = (5, 1): step 1: none of (3, 2, 4, 1) reaches 5 -> 1/5; step 2 drops row 1: (3, 0, -1, .5) >= 1 once -> 2/5
    # (single-step would give 5/5 for the second)
    assert maxt_adjusted_p(np.array([5.0, 1.0]), draws) == pytest.approx([0.2, 0.4])
    assert marginal_p(np.array([5.0, 1.0]), draws) == pytest.approx([0.2, 0.4])
    # rejects z > c exactly when p <= alpha: at 0.25 and B = 4 only a z above every max (4) has p 1/5
    assert maxt_critical_value(draws, 0.25) == 4.0 and maxt_critical_value(draws, 0.45) == 3.0
    assert np.isnan(maxt_adjusted_p(np.array([np.nan, 1.0]), draws)[0])


def test_studentized_handles_no_spread_and_undefined_resamples():
    samples = np.array([[0.2, 0.2, 0.2], [0.0, 0.0, 0.0], [0.1, np.nan, 0.3]])
    se, z, draws = studentized(np.array([0.2, 0.0, 0.2]), samples, np.zeros(3))
    assert se[0] == 0 and z[0] == np.inf and z[1] == -np.inf  # every resample past the null / at it
    assert se[2] == pytest.approx(np.std([0.1, 0.3], ddof=1)) and draws[2, 1] == -np.inf
    assert binomial_upper_tail(40, 40) == 2.0 ** -40 and binomial_upper_tail(0, 10) == 1.0


@pytest.mark.parametrize("text, control", [("fwer", ErrorControl("fwer", 0.05)), ("fdr:10%", ErrorControl("fdr", 0.1)),
                                           ("holm:0.01", ErrorControl("holm", 0.01)), ("none", ErrorControl("none"))])
def test_error_control_parses(text, control):
    assert ErrorControl.parse(text) == control


@pytest.mark.parametrize("text, says", [("fwe", "expected one of fwer, holm, fdr, none"), ("fwer:2", "(0, 0.5]"),
                                       ("fwer:-1%", "(0, 0.5]"), ("fdr:x", "a number")])
def test_error_control_refuses_what_a_user_cannot_mean(text, says):
    with pytest.raises(ValueError, match=re.escape(says)):
        ErrorControl.parse(text)


@pytest.mark.parametrize("spec, says", [("acc:1.5", "write 1.5% for 1.5 points"), ("acc:150%", "below 100%"),
                                       ("acc:-1%", "below 100%")])
def test_effect_sizes_a_user_cannot_mean_are_refused(spec, says):
    with pytest.raises(ValueError, match=says):
        RegressionCheck.parse(spec)


def _null_family(rng, n_memes=80, n_conditions=12):
    """Two checkpoints whose outputs are swapped at random per meme (the same memes across every condition):
    neither is better on any meme, so every rule's null is true."""
    y = rng.integers(0, 2, n_memes)
    skill = rng.normal(1.0, 1.0, (2, n_memes))  # per checkpoint and meme, how sure of the truth it is
    cells = []
    swap = rng.random(n_memes) < 0.5
    for k in range(n_conditions):
        sides = []
        for who in (0, 1):
            noise = rng.normal(0, 1.2, n_memes) - 0.1 * k
            margin = skill[who] + noise
            p_true = 1 / (1 + np.exp(-margin))
            proba = np.where(y[:, None] == np.arange(2), p_true[:, None], 1 - p_true[:, None])
            sides.append(proba)
        a, b = np.where(swap[:, None], sides[1], sides[0]), np.where(swap[:, None], sides[0], sides[1])
        clean_a, clean_b = (cells[0].now["perturbed"], cells[0].then["perturbed"]) if cells else (a, b)
        cells.append(PairedCell("m", "d", "clean" if not cells else f"c{k}", "clean" if not cells else "perturbed",
                                {"y": y, "clean": clean_a, "perturbed": a}, {"y": y, "clean": clean_b, "perturbed": b}))
    return cells


def test_null_families_fail_the_fwer_gate_rarely_and_the_uncorrected_one_often():
    """30 null families of 12 conditions x up to 4 rules: the family-wise gate fails about 5% of them (at most 4 of
    30 allows for chance: P(Bin(30, 0.05) >= 5) = 0.016), each rule alone fails far more."""
    rng = np.random.default_rng(7)
    failed = {"fwer": 0, "none": 0}
    for _ in range(30):
        cells = _null_family(rng)
        for method in failed:
            comparisons = judge_family(cells, control=ErrorControl(method), n_resamples=400, seed=1)
            failed[method] += summarize(comparisons)["regressed"] > 0
    assert failed["fwer"] <= 4 and failed["none"] >= 10, failed


def test_non_inferiority_says_how_many_memes_would_show_it():
    rng = np.random.default_rng(3)
    cells = _null_family(rng, n_memes=40, n_conditions=2)
    few = judge_family(cells, (RegressionCheck.parse("acc:2%"),), mode="non-inferiority", n_resamples=400)
    assert all(c.state == "not shown non-inferior" and c.regressed for c in few)
    shown = [c for c in few if c.memes_needed]
    assert shown and all(c.memes_needed > 40 and c.bound < -0.02 for c in shown)
    assert "memes would show it" in str(shown[0])
    wide = judge_family(cells, (RegressionCheck.parse("acc:60%"),), mode="non-inferiority", n_resamples=400)
    assert all(c.state == "non-inferior" and not c.regressed and c.bound > -0.6 for c in wide)


def test_what_cannot_be_judged_is_named_and_counted():
    y = np.array([1, 1, 1, 1])  # one class: AUROC undefined
    proba = np.array([[0.2, 0.8]] * 4)
    cell = PairedCell("m", "d", "clean", "clean", {"y": y, "clean": proba, "perturbed": proba},
                      {"y": y, "clean": proba, "perturbed": proba})
    declined = PairedCell("m", "d", "x", "perturbed", {"y": y, "clean": proba, "perturbed": proba,
                                                         "declined": [True] * 4},
                          {"y": y, "clean": proba, "perturbed": proba})
    out = judge_family([cell, declined], n_resamples=50)
    states = {(c.condition, c.rule): c.state for c in out}
    assert states[("clean", "auroc")] == "not judged: one class left"
    assert states[("x", "acc")] == "not judged: no answers"
    summary = summarize(out, new=["m on d: y"], missing=["m on d: z"])
    assert "5 not judged (one class left: 1, no answers: 4)" in summary["summary"]
    assert summary["summary"].endswith("; 1 new condition not gated; 1 baseline condition not run")


def test_a_condition_several_suites_run_counts_once():
    """Every suite has its own clean case: the same comparisons arrive once per case, and count once."""
    cells = _null_family(np.random.default_rng(5), n_memes=40, n_conditions=3)
    comparisons = judge_family(cells, n_resamples=100)
    clean = [c for c in comparisons if c.condition == "clean"]
    summary = summarize(comparisons + clean + clean)
    assert summary["conditions"] == 3 and summary["rules"] == len(comparisons) == 3 + 2 * 4
