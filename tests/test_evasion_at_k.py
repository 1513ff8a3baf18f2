"""Evasion@k, the analysis added on the registry in its three files (judge/evasion_at_k.py,
run/analysis_kinds/evasion_at_k.py, suites/test_evasion_at_k.py): the judgement's counts and intervals, its first
draw against the run's own condition, and what it refuses."""
import numpy as np
import pytest

from pytest_memerobust.judge.evasion_at_k import evasion_at_k
from pytest_memerobust.judge.instructions import wilson_interval
from pytest_memerobust.run import analysis_registry
from pytest_memerobust.run.analysis_registry import analysed


def test_evasion_at_k_counts_the_memes_evaded_within_the_first_k_draws():
    evaded = np.array([[False, True, False],  # falls at the 2nd try
                       [False, False, False],  # never
                       [True, True, False],  # at the 1st
                       [False, False, True]])  # at the 3rd
    found = evasion_at_k(evaded, confidence=0.9)
    assert [row["evaded"] for row in found["curve"]] == [1, 2, 3]
    assert [row["share"] for row in found["curve"]] == [0.25, 0.5, 0.75]
    assert found["curve"][1]["ci"] == list(wilson_interval(2, 4, 0.9))
    assert found["mean_tries_to_evade"] == pytest.approx((2 + 1 + 3) / 3)
    assert found["memes"] == 4 and found["draws"] == 3
    nothing = evasion_at_k(np.zeros((0, 2), bool))
    assert nothing["memes"] == 0 and np.isnan(nothing["curve"][0]["share"]) and np.isnan(nothing["mean_tries_to_evade"])
    with pytest.raises(ValueError, match="memes x draws"):
        evasion_at_k([True, False])


def test_evasion_at_1_is_the_runs_own_condition_on_the_flagged_harmful_memes():
    """Draw 1 is keyed by the run's seed, as the suite's typos@3 condition is: its evaded memes are exactly those
    of the condition's predictions among the harmful memes flagged clean."""
    from pytest_memerobust.run.options import DataOptions, Options
    from pytest_memerobust.run.session import RobustnessSession

    session = RobustnessSession(Options(models=("demo",), data=DataOptions(limit=80), seed=3))
    record = analysed(session, "evasion_at_k", "demo", perturbation="typos", severity=3, k=4)
    result = session.evaluate("demo", "text=typos@3")
    flagged = (np.asarray(result.memes.y_true) == 1) & (np.asarray(result.answers.proba_clean)[:, 1] >= 0.5)
    evaded = flagged & (np.asarray(result.answers.proba)[:, 1] < 0.5)
    assert record["memes"] == int(flagged.sum()) > 10
    assert record["curve"][0]["evaded"] == int(evaded.sum())
    shares = [row["share"] for row in record["curve"]]
    assert shares == sorted(shares) and record["seed"] == 3
    again = analysed(session, "evasion_at_k", "demo", perturbation="typos", severity=3, k=4)
    assert again is record  # once per run: kept on the session
    table = analysis_registry.get("evasion_at_k").table(record)
    assert table.headers[0] == "tries k" and [row[0] for row in table.rows] == ["1", "2", "3", "4"]


def test_evasion_at_k_refuses_an_attack_or_a_picture_edit_naming_it():
    from pytest_memerobust.errors import ConfigError
    from pytest_memerobust.run.options import DataOptions, Options
    from pytest_memerobust.run.session import RobustnessSession

    session = RobustnessSession(Options(models=("demo",), data=DataOptions(limit=20)))
    for name in ("jpeg_compression", "hotflip"):
        with pytest.raises(ConfigError, match=name):
            analysed(session, "evasion_at_k", "demo", perturbation=name)
    assert not session.analyses  # nothing half-kept
