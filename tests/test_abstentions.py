"""A meme a detector declines to classify (a prompted vision-language model's refusal) is neither class: each result
scores only the memes answered both clean and under its condition, and says how often the detector declined."""
from __future__ import annotations

import numpy as np
import pytest

from pytest_memerobust.engine import Condition
from pytest_memerobust.judge.results import AbstainedTooOften, Answers, ConditionResult, Memes, StatsConfig

Y = np.array([0, 1, 0, 1, 0, 1])
CLEAN = np.array([[0.9, 0.1], [0.2, 0.8], [0.8, 0.2], [0.3, 0.7], [0.6, 0.4], [0.4, 0.6]])
NOW = np.array([[0.9, 0.1], [0.7, 0.3], [0.3, 0.7], [0.3, 0.7], [0.6, 0.4], [0.4, 0.6]])
TYPOS = Condition(text="typos", text_severity=3)


def result(clean_declined, declined) -> ConditionResult:
    answers = Answers(CLEAN, NOW, abstained_clean=np.array(clean_declined, bool), abstained=np.array(declined, bool))
    return ConditionResult("m", "d", TYPOS, Memes(Y), answers, StatsConfig(n_resamples=50))


def test_declined_memes_are_left_out_of_every_metric():
    # meme 1 flips (right -> wrong) but is declined under the condition; meme 2 flips and is answered
    r = result([0, 0, 0, 0, 0, 0], [0, 1, 0, 0, 0, 0])
    assert r.answered.tolist() == [True, False, True, True, True, True]
    assert r.flip_rate == pytest.approx(1 / 5) and r.values["accuracy"] == pytest.approx(4 / 5)
    assert r.clean_values["accuracy"] == pytest.approx(1.0)
    d = r.as_dict()
    assert d["n"] == 5 and d["n_declined"] == 1
    assert d["abstention_rate"] == pytest.approx(1 / 6) and d["abstention_increase"] == pytest.approx(1 / 6)
    low, high = d["abstention_increase_ci"]
    assert 0 <= low <= 1 / 6 <= high


def test_a_meme_declined_when_clean_is_left_out_too():
    r = result([0, 0, 1, 0, 0, 0], [0, 0, 0, 0, 0, 0])
    assert r.flip_rate == pytest.approx(1 / 5) and r.abstention_increase == pytest.approx(-1 / 6)


def test_without_abstentions_every_meme_is_scored_as_before():
    plain = ConditionResult("m", "d", TYPOS, Memes(Y), Answers(CLEAN, NOW), StatsConfig(n_resamples=50))
    none_declined = result([0] * 6, [0] * 6)
    assert plain.answered is None and none_declined.answered is None
    assert plain.as_dict()["metrics"] == none_declined.as_dict()["metrics"]
    assert "abstention_rate" not in plain.as_dict() and none_declined.as_dict()["abstention_rate"] == 0.0


def test_a_detector_that_declines_almost_everything_is_one_named_error():
    with pytest.raises(AbstainedTooOften, match=r"m declined 5 of 6 memes clean or under text=typos@3"):
        result([1, 1, 0, 0, 0, 0], [0, 0, 1, 1, 1, 0]).flip_rate


def test_abstentions_travel_between_workers():
    r = result([0, 0, 1, 0, 0, 0], [0, 1, 0, 0, 0, 0])
    back = ConditionResult.from_wire(r.to_wire(), r.stats)
    assert back.answers.abstained.tolist() == r.answers.abstained.tolist() and back.as_dict() == r.as_dict()


def test_the_tables_show_the_abstentions_only_for_a_detector_that_declines():
    from pytest_memerobust.report.tables import render

    clean = ConditionResult("m", "d", Condition(), Memes(Y),
                            Answers(CLEAN, CLEAN, abstained_clean=np.zeros(6, bool), abstained=np.zeros(6, bool)),
                            StatsConfig(n_resamples=50))
    rows = [clean.as_dict(), result([0] * 6, [0, 1, 0, 0, 0, 0]).as_dict()]
    group = {"model": "m", "dataset": "d", "task": "hate", "results": rows, "clean": rows[0]}
    text = render({"groups": [group]})
    assert "abstentions: memes the detector declined" in text
    line = next(row for row in text.splitlines() if row.startswith("text=typos@3") and "+0.167" in row)
    assert line.split()[1:2] == ["0.167"] and line.split()[-2:] == ["1", "5"]
    for r in rows:
        for key in ("abstention_rate", "abstention_increase", "abstention_increase_ci", "n_declined"):
            r.pop(key, None)
    assert "abstentions" not in render({"groups": [group]})


def test_a_suite_can_bound_the_abstention_rate_and_its_rise():
    from pytest_memerobust.judge.thresholds import Thresholds, assess

    bounds = Thresholds.from_mapping({"max_abstention_rate": 0.1, "max_abstention_increase": 0.05}, "suite")
    (rate, rise) = assess(result([0] * 6, [0, 1, 0, 0, 0, 0]), bounds)
    assert (rate.what, rate.value, rate.limit) == ("abstention rate", pytest.approx(1 / 6), 0.1)
    assert (rise.what, rise.value, rise.limit) == ("abstention increase", pytest.approx(1 / 6), 0.05)
    assert assess(result([0] * 6, [0] * 6), bounds) == []
    plain = ConditionResult("m", "d", TYPOS, Memes(Y), Answers(CLEAN, NOW), StatsConfig(n_resamples=50))
    assert not [v for v in assess(plain, bounds) if "abstention" in v.what]  # a detector that always answers
    with pytest.raises(ValueError, match=r"suite.max_abstention_rate: expected a number in \[0, 1\], got 2"):
        Thresholds.from_mapping({"max_abstention_rate": 2}, "suite")
