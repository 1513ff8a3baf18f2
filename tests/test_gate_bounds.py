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
        if c.mode == "non-inferiority":
            worst, margin = (float(x) for x in re.search(rf"(?:at most|may reach) {NUMBER} .*?margin {NUMBER}",
                                                          line).groups())
            shown = c.state == "non-inferior"
            if shown and not worst <= margin or not shown and not worst >= margin:
                bad.append(line)
            exact = -c.bound if c.higher_is_better else c.bound  # the unrounded values say the same
            if shown != (exact <= c.min_effect):
                bad.append(f"{line} [bound {exact!r}]")
        else:
            bound = float(re.search(rf"bound {NUMBER}", line).group(1))
            past = (lambda b: b < -c.min_effect) if c.higher_is_better else (lambda b: b > c.min_effect)
            regressed = c.state == "regressed"
            rounded_edge = abs(abs(bound) - c.min_effect) < 6e-5  # the printed digits cannot tell
            if regressed != past(c.bound) or (not rounded_edge and regressed != past(bound)):
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
        assert sum(1 for c in comparisons if c.members) == 6 * len(checks)  # the family means are members
        assert all(c.method == method and c.resamples == 3000 for c in comparisons)
        for c in comparisons:
            if c.judged:
                decided[c.regressed] += 1
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
    by_condition = {c.condition: c for c in comparisons}
    mean = by_condition["typos (mean of 5)"]
    assert mean.members == tuple(f"typos@{s}" for s in range(1, 6)) and mean.regressed
    assert mean.difference == pytest.approx(np.mean([by_condition[f"typos@{s}"].difference for s in range(1, 6)]))
    assert not any(by_condition[f"typos@{s}"].regressed for s in range(1, 6))
    summary = summarize(comparisons)
    assert summary["summary"].startswith("0 of 6 conditions and 1 of 1 family mean regressed")
    assert summary["regressed"] == 1 and summary["resamples"] == 2000 and summary["method"] == "bootstrap"
