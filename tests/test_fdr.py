"""Many cases at once: Benjamini-Hochberg, one-sided bootstrap p-values of thresholds, and the bootstrap samples."""
import numpy as np
import pytest

from pytest_memerobust.judge import metrics
from pytest_memerobust.judge.metrics import bootstrap_one_sided_p
from pytest_memerobust.judge.multiplicity import benjamini_hochberg

TEXTBOOK = [0.01, 0.04, 0.03, 0.005, 0.5]


def test_benjamini_hochberg_on_the_textbook_example():
    """m = 5, q = 0.05: sorted 0.005, 0.01, 0.03, 0.04, 0.5 against k q / m = 0.01, 0.02, 0.03, 0.04, 0.05; the
    largest k with p(k) <= k q / m is 4 (0.04 <= 0.04, on the line: BH's <= rejects it), so all but 0.5 go."""
    assert benjamini_hochberg(TEXTBOOK, q=0.05).tolist() == [True, True, True, True, False]
    # q = 0.03: thresholds 0.006, 0.012, 0.018, 0.024, 0.03; only 0.005 and 0.01 are below theirs
    assert benjamini_hochberg(TEXTBOOK, q=0.03).tolist() == [True, False, False, True, False]
    # q = 0.02: 0.005 > 0.004 and no later p(k) makes it under k q / m: nothing rejected
    assert not benjamini_hochberg(TEXTBOOK, q=0.02).any()
    # step-up: 0.03 misses its own threshold (0.025) but is rejected with 0.04 (<= 0.05)
    assert benjamini_hochberg([0.03, 0.04]).tolist() == [True, True]
    # the order of the hypotheses does not matter
    order = np.random.default_rng(0).permutation(5)
    expected = np.array([True, True, True, True, False])
    assert benjamini_hochberg(np.array(TEXTBOOK)[order]).tolist() == expected[order].tolist()


def test_benjamini_hochberg_agrees_with_scipy():
    stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(1)
    for _ in range(200):
        m = int(rng.integers(1, 40))
        p = np.concatenate([rng.uniform(size=m), rng.uniform(0, 0.01, size=int(rng.integers(0, 5)))])
        p = np.round(p, int(rng.integers(2, 6)))  # ties
        for q in (0.01, 0.05, 0.2):
            assert (benjamini_hochberg(p, q) == (stats.false_discovery_control(p, method="bh") <= q)).all()


def test_benjamini_hochberg_is_monotone():
    rng = np.random.default_rng(2)
    for _ in range(300):
        p = rng.uniform(size=int(rng.integers(1, 30))) ** 3
        rejected = benjamini_hochberg(p, 0.05)
        assert (benjamini_hochberg(p, 0.1) >= rejected).all()  # a larger q rejects at least as much
        if rejected.any():  # whatever is rejected, every smaller p-value is too
            assert rejected[p <= p[rejected].max()].all()
        i = int(rng.integers(len(p)))
        smaller = p.copy()
        smaller[i] *= rng.uniform()
        assert (benjamini_hochberg(smaller, 0.05) >= rejected).all()  # lowering one p-value undoes no rejection


def test_nan_p_values_are_never_rejected_and_not_counted():
    with_nan = [0.01, np.nan, 0.04, 0.03, np.nan, 0.005, 0.5]
    assert benjamini_hochberg(with_nan).tolist() == [True, False, True, True, False, True, False]
    # m = 2, not 3: 0.03 <= 1 * 0.05 / 2 fails, 0.04 <= 2 * 0.05 / 2 holds, both rejected; counting the NaN
    # (thresholds 0.017, 0.033) would reject neither
    assert benjamini_hochberg([0.03, 0.04, np.nan]).tolist() == [True, True, False]
    assert not benjamini_hochberg([np.nan, np.nan]).any()
    assert benjamini_hochberg([]).tolist() == []
    assert benjamini_hochberg([[0.001, np.nan], [0.9, 0.002]]).tolist() == [[True, False], [False, True]]


def test_uniform_null_p_values_reject_about_nothing():
    """Under the global null BH rejects anything with probability q (it is then Simes' test): seeded, 400 suites
    of 200 null cases each."""
    rng = np.random.default_rng(3)
    counts = np.array([benjamini_hochberg(rng.uniform(size=200), 0.05).sum() for _ in range(400)])
    assert 0.02 <= np.mean(counts > 0) <= 0.08
    assert counts.sum() <= 40


def test_false_discoveries_stay_below_q():
    rng = np.random.default_rng(4)
    shares = []
    for _ in range(200):
        null = rng.uniform(size=180)
        real = rng.uniform(size=20) * 1e-3
        rejected = benjamini_hochberg(np.concatenate([null, real]), 0.1)
        shares.append(rejected[:180].sum() / max(1, rejected.sum()))
        assert rejected[180:].all()
    assert np.mean(shares) <= 0.1


@pytest.mark.parametrize("p, q, says", [
    (TEXTBOOK, 0, "q .*strictly between 0 and 1, got 0"),
    (TEXTBOOK, 1.5, "got 1.5"),
    (TEXTBOOK, True, "got True"),
    ([0.1, 1.2, -0.1], 0.05, r"p-values must lie in \[0, 1\] \(or be NaN\); p_values\[1\] is 1.2 and 1 more"),
    ([np.inf], 0.05, r"p_values\[0\] is inf"),
])
def test_benjamini_hochberg_refuses_bad_input(p, q, says):
    with pytest.raises(ValueError, match=says):
        benjamini_hochberg(p, q)


def test_one_sided_p_counts_resamples_on_the_passing_side():
    samples = np.arange(1, 100) / 100  # 0.01 .. 0.99, n = 99
    assert bootstrap_one_sided_p(samples, 0.9, "min") == pytest.approx(11 / 100)  # 0.90 .. 0.99 pass a floor
    assert bootstrap_one_sided_p(samples, 0.1, "max") == pytest.approx(11 / 100)  # 0.01 .. 0.10 meet a ceiling
    assert bootstrap_one_sided_p(samples, 0.0, "min") == 1.0  # all pass
    assert bootstrap_one_sided_p(np.zeros(999), 0.5, "min") == 1 / 1000  # none pass: 1 / (n + 1), never 0
    assert bootstrap_one_sided_p(np.ones(999), 0.5, "max") == 1 / 1000
    assert bootstrap_one_sided_p([0.5] * 9, 0.5, "min") == bootstrap_one_sided_p([0.5] * 9, 0.5, "max") == 1.0
    assert bootstrap_one_sided_p([np.nan, 0.2, 0.8, np.nan], 0.5, "min") == pytest.approx(2 / 3)  # NaN dropped
    assert np.isnan(bootstrap_one_sided_p([np.nan, np.nan], 0.5, "min"))


@pytest.mark.parametrize("args, says", [
    (([0.5], 0.5, "floor"), "direction must be 'min' .* or 'max' .*, got 'floor'"),
    (([], 0.5, "min"), r"non-empty 1-D .*shape \(0,\)"),
    (([[0.5]], 0.5, "min"), r"shape \(1, 1\)"),
    (([0.5], float("nan"), "min"), "limit must be a finite number, got nan"),
    (([0.5], None, "max"), "limit must be a finite number, got None"),
])
def test_one_sided_p_refuses_bad_input(args, says):
    with pytest.raises(ValueError, match=says):
        bootstrap_one_sided_p(*args)


def _predictions(n=150, seed=5):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, n)
    clean = np.clip(np.where(y[:, None] == np.arange(2), 0.8, 0.2) + rng.normal(0, 0.25, (n, 1)) * [1, -1], 0, 1)
    perturbed = np.clip(clean + rng.normal(0, 0.3, (n, 1)) * [1, -1], 0, 1)
    return y, clean, perturbed


def test_the_samples_are_those_behind_the_intervals():
    """A p-value and an interval must read the same resamples, or a case could be sure by one and not the other."""
    y, clean, perturbed = _predictions()
    boot = {"n_resamples": 300, "seed": 7}

    def interval(values):
        values = values[~np.isnan(values)]
        return tuple(np.quantile(values, [0.025, 0.975]))

    assert interval(metrics.metric_samples("auroc", y, perturbed, **boot)) == metrics.metric_ci(
        "auroc", y, perturbed, **boot)
    for kind in ("relative", "absolute"):
        samples = metrics.robustness_samples("accuracy", y, clean, perturbed, kind, **boot)
        assert interval(samples) == metrics.robustness_ci("accuracy", y, clean, perturbed, kind, **boot)
    flips = (clean.argmax(1), perturbed.argmax(1))
    assert interval(metrics.flip_rate_samples(*flips, **boot)) == metrics.flip_rate_ci(*flips, **boot)
    samples = metrics.paired_bootstrap_samples(lambda a: float(np.mean(a)), y.astype(float), **boot)
    assert interval(samples) == metrics.paired_bootstrap_ci(lambda a: float(np.mean(a)), y.astype(float), **boot)


def test_a_floor_whose_whole_interval_is_below_has_a_small_one_sided_p():
    y, clean, perturbed = _predictions()
    samples = metrics.robustness_samples("accuracy", y, clean, perturbed, n_resamples=1000, seed=0)
    low, high = metrics.robustness_ci("accuracy", y, clean, perturbed, n_resamples=1000, seed=0)
    for limit in np.linspace(low - 0.05, high + 0.05, 41):
        p = bootstrap_one_sided_p(samples, float(limit), "min")
        if high < limit:  # "confident" would fail it: under 2.5% of resamples reach the floor
            assert p <= 0.025 + 1 / 1001
        if low >= limit:  # the whole interval meets the floor
            assert p >= 0.975
