"""The bound printed beside each gate decision is the one the decision used: on families of many conditions, under
every error control and both questions, no printed line says a bound its decision contradicts."""
import re

import numpy as np
import pytest

from pytest_memerobust.judge.gate import ErrorControl, PairedCell, RegressionCheck, judge_family, summarize

NUMBER = r"([+-]?(?:\d+\.\d+|inf))"


def _family(rng, n_memes: int, n_conditions: int = 24):
    """Two checkpoints on the same memes; the new one is worse (up to 1.8 logits of skill) on a third of the
    conditions, so some rules regress, some are near the line and most do not."""
    y = rng.integers(0, 2, n_memes)
    skill = rng.normal(1.0, 1.0, n_memes)
    cells = []
    for k in range(n_conditions):
        loss = 0.3 * rng.random() if k % 3 == 0 else 0.0
        sides = []
        for who, shift in ((0, 0.0), (1, loss * 6)):
            margin = skill - shift + rng.normal(0, 1.0, n_memes)
            p_true = 1 / (1 + np.exp(-margin))
            sides.append(np.where(y[:, None] == np.arange(2), p_true[:, None], 1 - p_true[:, None]))
        then, now = sides
        name, kind = ("clean", "clean") if k == 0 else (f"edit{k % 6}@{1 + k // 6}", "perturbed")
        clean_then, clean_now = (cells[0].then["perturbed"], cells[0].now["perturbed"]) if cells else (then, now)
        cells.append(PairedCell("m", "d", name, kind, {"y": y, "clean": clean_now, "perturbed": now},
                                {"y": y, "clean": clean_then, "perturbed": then}))
    return cells


def _contradictions(comparisons) -> list[str]:
    """Printed lines whose bound says the opposite of their decision, read from the line itself."""
    bad = []
    for c in comparisons:
        if not c.judged:
            continue
        line = str(c)
        if c.procedure.mode == "non-inferiority":
            worst, margin = (float(x) for x in re.search(rf"(?:at most|may reach) {NUMBER} .*?margin {NUMBER}",
                                                          line).groups())
            shown = c.decision.state == "non-inferior"
            if shown and not worst <= margin or not shown and not worst >= margin:
                bad.append(line)
            exact = -c.decision.bound if c.subject.higher_is_better else c.decision.bound  # the unrounded: the same
            if shown != (exact <= c.procedure.min_effect):
                bad.append(f"{line} [bound {exact!r}]")
        else:
            bound = float(re.search(rf"bound {NUMBER}", line).group(1))
            effect = c.procedure.min_effect
            past = (lambda b: b < -effect) if c.subject.higher_is_better else (lambda b: b > effect)
            regressed = c.decision.state == "regressed"
            rounded_edge = abs(abs(bound) - c.procedure.min_effect) < 6e-5  # the printed digits cannot tell
            if regressed != past(c.decision.bound) or (not rounded_edge and regressed != past(bound)):
                bad.append(line)
    return bad


@pytest.mark.parametrize("control", ["fwer", "holm", "fdr", "none"])
@pytest.mark.parametrize("mode, rules", [("regressions", ("acc", "auroc", "f1", "flip")),
                                         ("regressions", ("acc:2%", "flip:1%")),
                                         ("non-inferiority", ("acc:4%", "auroc:5%", "flip:3%"))])
@pytest.mark.parametrize("memes, method", [(150, "bootstrap"), (60, "permutation")])
def test_no_printed_bound_contradicts_its_decision_on_a_family_of_24_conditions(control, mode, rules, memes,
                                                                                method):
    checks = tuple(RegressionCheck.parse(r) for r in rules)
    decided = {True: 0, False: 0}
    for seed in range(3):
        cells = _family(np.random.default_rng(seed), memes)
        comparisons = judge_family(cells, checks, control=ErrorControl.parse(control), mode=mode, n_resamples=3000,
                                   seed=seed, method=method)
        assert not _contradictions(comparisons)
        assert sum(1 for c in comparisons if c.subject.members) == 6 * len(checks)  # the family means are members
        assert all(c.procedure.method == method and c.procedure.resamples == 3000 for c in comparisons)
        for c in comparisons:
            if c.judged:
                decided[c.decision.regressed] += 1
    assert decided[True] and decided[False]  # both decisions were made, so both directions were checked


def test_a_uniform_small_loss_over_a_family_is_seen_by_its_mean_before_any_severity():
    """Every severity of one family loses a little: no severity alone regresses, their mean does."""
    rng = np.random.default_rng(11)
    n = 600
    y = rng.integers(0, 2, n)
    right = rng.random(n) < 0.8
    proba_of = lambda ok: np.where((y == 1) == ok, 0.9, 0.1)[:, None] * [-1, 1] + [1, 0]  # noqa: E731
    then_clean = proba_of(right)
    cells = [PairedCell("m", "d", "clean", "clean", {"y": y, "clean": then_clean, "perturbed": then_clean},
                        {"y": y, "clean": then_clean, "perturbed": then_clean})]
    for severity in range(1, 6):
        then_right = right & (rng.random(n) < 0.95)
        now_right = then_right & (rng.random(n) < 0.993)  # 0.7% of its right answers lost at every severity
        cells.append(PairedCell("m", "d", f"typos@{severity}", "perturbed",
                                {"y": y, "clean": then_clean, "perturbed": proba_of(now_right)},
                                {"y": y, "clean": then_clean, "perturbed": proba_of(then_right)}))
    comparisons = judge_family(cells, (RegressionCheck.parse("acc"),), n_resamples=2000, seed=3)
    by_condition = {c.subject.condition: c for c in comparisons}
    mean = by_condition["typos (mean of 5)"]
    assert mean.subject.members == tuple(f"typos@{s}" for s in range(1, 6)) and mean.decision.regressed
    assert mean.difference == pytest.approx(np.mean([by_condition[f"typos@{s}"].difference for s in range(1, 6)]))
    assert not any(by_condition[f"typos@{s}"].decision.regressed for s in range(1, 6))
    summary = summarize(comparisons)
    assert summary["summary"].startswith("0 of 6 conditions and 1 of 1 family mean regressed")
    assert summary["regressed"] == 1 and summary["resamples"] == 2000 and summary["method"] == "bootstrap"


def _binary(y, right):
    """Probabilities [N, 2] that put 0.8 on the truth where `right`, on the other class elsewhere."""
    p_true = np.where(right, 0.8, 0.2)
    return np.where(y[:, None] == np.arange(2), p_true[:, None], 1 - p_true[:, None])


def test_a_paired_permutation_p_matches_the_exact_sign_flip_p_worked_out_by_enumeration():
    """12 memes, 5 of them discordant (4 lost, 1 gained): accuracy's permutation p is the exact sign-flip p of the
    discordant memes, #{swaps with a loss >= 3/12} / 2^5 = 6/32, up to the Monte Carlo error of 20,000 swaps."""
    y = np.array([0, 1] * 6)
    then_right = np.array([1, 1, 1, 1, 0, 1, 1, 1, 0, 0, 1, 1], bool)
    now_right = np.array([0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 1, 1], bool)
    cell = PairedCell("m", "d", "c", "perturbed", {"y": y, "clean": _binary(y, then_right),
                                                    "perturbed": _binary(y, now_right)},
                      {"y": y, "clean": _binary(y, then_right), "perturbed": _binary(y, then_right)})
    (acc,) = judge_family([cell], (RegressionCheck.parse("acc"),), control=ErrorControl("none"), n_resamples=20_000)
    assert acc.procedure.method == "permutation" and acc.difference == pytest.approx(-3 / 12)
    exact = sum(1 for signs in np.ndindex(*(2,) * 5) if (np.array([1, 1, 1, 1, -1]) * (1 - 2 * np.array(signs))).sum()
                >= 3) / 32
    assert exact == 6 / 32 and acc.decision.p_raw == pytest.approx(exact, abs=0.01)


def test_permutation_null_families_of_30_memes_with_2_of_a_class_fail_about_5_percent():
    """Where resampling 30 memes cannot show a 2-meme class's variance, its AUROC and macro-F1 are not judged and the
    permutation max-T holds its level over the other rules (60 null families here; bench/gate_power.py runs 200 on
    PrideMM's captions)."""
    rng = np.random.default_rng(4)
    failed = 0
    for family in range(60):
        y = np.array([1, 1] + [0] * 28)
        rng.shuffle(y)
        skill = rng.normal(1.0, 1.0, (2, 30))
        sides = [_binary(y, skill[who] + rng.normal(0, 1, 30) > 0) for who in (0, 1)]
        coin = rng.random(30) < 0.5
        a, b = np.where(coin[:, None], sides[1], sides[0]), np.where(coin[:, None], sides[0], sides[1])
        cells = [PairedCell("m", "d", "clean", "clean", {"y": y, "clean": a, "perturbed": a},
                            {"y": y, "clean": b, "perturbed": b})]
        comparisons = judge_family(cells, n_resamples=1000, seed=family)
        assert {c.decision.state for c in comparisons if c.subject.rule in ("auroc", "f1")} == {
            "not judged: too few memes of class 1 (2 < 10)"}
        assert all(c.procedure.method == "permutation" for c in comparisons)
        failed += summarize(comparisons)["regressed"] > 0
    assert failed <= 7  # Binomial(60, 0.05): P(X > 7) < 2%


def _recipe(rng, n, k, shift_sd=0.3):
    """k checkpoints of one recipe on the same n memes: each seed moves its whole decision by a random shift, so
    seeds disagree on many memes at once (more than independent per-meme noise would)."""
    y = rng.integers(0, 2, n)
    skill = rng.normal(0.8, 1.0, n)
    runs = []
    for _ in range(k):
        margin = skill + rng.normal(0, shift_sd) * (2 * y - 1) + rng.normal(0, 0.3, n)
        runs.append(_binary(y, margin > 0))
    return y, runs


def test_a_new_seed_passes_against_a_recipe_and_a_checkpoint_8_points_worse_fails():
    """Four seeds of a recipe whose seeds shift together as the baseline: a fifth seed passes, the fifth made 8
    points worse (32 of 400 memes it got right made wrong) fails; the spread factor is read from the four."""
    passed, caught, inflations = 0, 0, []
    checks = (RegressionCheck.parse("acc"),)
    for trial in range(12):
        y, runs = _recipe(np.random.default_rng(100 + trial), 400, 5)

        def cells(now):
            return [PairedCell("m", "d", "clean", "clean", {"y": y, "clean": now, "perturbed": now},
                               [{"y": y, "clean": t, "perturbed": t} for t in runs[:4]])]

        out = judge_family(cells(runs[4]), checks, n_resamples=2000)
        procedure = out[0].procedure
        assert procedure.recipe == 4 and procedure.method == "bootstrap" and "against a recipe of 4" in procedure.test
        assert out[0].scores.before == pytest.approx(np.mean([(r.argmax(1) == y).mean() for r in runs[:4]]))
        inflations.append(out[0].procedure.inflation)
        passed += summarize(out)["regressed"] == 0
        right = np.flatnonzero(runs[4].argmax(1) == y)
        lost = runs[4].copy()
        lost[right[:32]] = lost[right[:32], ::-1]
        caught += summarize(judge_family(cells(lost), checks, n_resamples=2000))["regressed"] > 0
    assert min(inflations) >= 1 and np.median(inflations) > 1.2  # seeds differ more than the memes explain
    assert passed >= 11 and caught >= 9, (passed, caught)


def test_holm_draws_the_resamples_its_first_step_needs_and_says_so():
    """Holm's first step asks for p <= alpha / m, below 1 / (resamples + 1) when m is large: the decision draws
    m / alpha - 1 resamples at least, so a clear regression still fails under holm, and reports the count drawn."""
    cells = _family(np.random.default_rng(1), 150)  # 24 conditions x 4 rules - 3 flip-free clean + 24 means = 117
    m = sum(1 for c in judge_family(cells, n_resamples=300, method="bootstrap"))
    holm = judge_family(cells, control=ErrorControl("holm"), n_resamples=300, method="bootstrap")
    assert {c.procedure.resamples for c in holm} == {int(np.ceil(m / 0.05 - 1))}
    assert any(c.decision.regressed for c in holm)
