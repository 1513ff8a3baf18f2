"""Evasion budgets as a suite assertion: a [budgets] table adds one case per model that holds the median budgets
to floors, and the report (terminal, JSON, HTML) shows them with the memes that fell first."""
import json
import tomllib
from pathlib import Path

import pytest
import torch  # noqa: F401  imported here once: pytester's in-process runs would otherwise re-import it and crash

from pytest_memerobust.errors import SuiteError
from pytest_memerobust.items import budget_violations
from pytest_memerobust.run.suite import BudgetCheck, parse_suite
from pytest_memerobust.judge.thresholds import failing

QUICK = ["--memerobust-limit=40", "--memerobust-bootstrap=100", "-p", "no:cacheprovider"]


def _parse(budgets: str):
    return parse_suite(tomllib.loads(f'[suite]\nname = "b"\n[budgets]\n{budgets}\n'), Path("memerobust-b.toml"))


def test_the_budgets_table_is_read_and_floors_add_their_families():
    suite = _parse('families = ["char_edits"]\nmin_median_budget = { lookalikes = 3 }')
    assert suite.checks.budgets == BudgetCheck(("char_edits",), (("lookalikes", 3),))
    assert suite.checks.budgets.searched(("text",)) == ["char_edits", "lookalikes"]
    assert BudgetCheck().searched(("text",)) == ["char_edits", "lookalikes", "word_substitutions", "covered_caption"]
    assert "image_linf" in BudgetCheck().searched(("image", "text"))
    assert _parse("").checks.budgets == BudgetCheck()


@pytest.mark.parametrize("budgets, says", [
    ('families = ["char_edit"]', "unknown edit family 'char_edit'"),
    ("min_median_budget = { char_edits = 0 }", r"expected a number in \(0, 10\]"),
    ("min_median_budget = { char_edits = 11 }", "last level"),
    ("min_median_budget = { word_substitutions = true }", "expected a number"),
    ("floor = 3", "takes 'families' and 'min_median_budget'"),
])
def test_a_bad_budgets_table_is_refused_naming_the_culprit(budgets, says):
    with pytest.raises(SuiteError, match=says):
        _parse(budgets)


def _entry(family, median, lo, hi):
    return {"family": family, "median": median, "median_ci": [lo, hi], "levels": list(range(1, 11)), "unit": "",
            "n": 10, "curve": [0.0] * 10, "area": 0.0, "area_ci": [0, 0], "n_censored": 0, "worst": []}


def test_a_median_below_its_floor_fails_and_only_a_whole_interval_below_fails_for_sure():
    entries = [_entry("char_edits", 2, 1, 4), _entry("lookalikes", 1, 1, 2), _entry("covered_caption", "inf", 8, "inf")]
    floors = (("char_edits", 3), ("lookalikes", 3), ("covered_caption", 9))
    violations = budget_violations(entries, floors, 0.95)
    assert [(v.what, v.value, v.ci, v.sure) for v in violations] == [
        ("median char_edits budget", 2.0, (1.0, 4.0), False), ("median lookalikes budget", 1.0, (1.0, 2.0), True)]
    assert [v.what for v in failing(violations, "confident")] == ["median lookalikes budget"]
    assert len(failing(violations, "estimate")) == 2
    [undefined] = budget_violations([_entry("char_edits", None, None, None)], (("char_edits", 1),), 0.95)
    assert undefined.sure  # no meme to search: nothing shows the floor is met


BUDGET_SUITE = """
[suite]
name = "budgets"
[text]
typos = [1]
[budgets]
families = ["char_edits", "covered_caption"]
min_median_budget = { char_edits = 1 }
"""


def test_a_suite_with_budgets_runs_one_budget_case_and_reports_it(pytester):
    pytester.makefile(".toml", **{"memerobust-budgets": BUDGET_SUITE})
    js, page = pytester.path / "r.json", pytester.path / "r.html"
    result = pytester.runpytest("--memerobust-model=demo", "-v", "--memerobust-tables=full", *QUICK, f"--memerobust-report={js}",
                                f"--memerobust-report={page}", ".")
    result.assert_outcomes(passed=3)
    out = result.stdout.str()
    assert "::demo::budgets PASSED" in out
    assert "demo: 3 cases: 3 pass" in out
    assert "evasion budgets: demo on demo" in out
    [entry] = json.loads(js.read_text())["budgets"]
    assert [e["family"] for e in entry["entries"]] == ["char_edits", "covered_caption"]
    assert all(e["n"] > 0 for e in entry["entries"])
    worst = [w for e in entry["entries"] for w in e["worst"]]
    assert worst and all(w["evasion"] and w["evasion"] != w["caption"] for w in worst)
    html = page.read_text()
    assert "caption that got past" in html and worst[0]["id"] in html


def test_a_budget_below_its_floor_fails_the_budget_case(pytester, monkeypatch):
    from pytest_memerobust.run import analyses

    def low_budgets(session, model, families, **kwargs):
        return [_entry(f, 1, 1, 1) for f in families]

    monkeypatch.setattr(analyses, "budgets", low_budgets)
    pytester.makefile(".toml", **{"memerobust-budgets": BUDGET_SUITE.replace("char_edits = 1", "char_edits = 3")})
    result = pytester.runpytest("--memerobust-model=demo", *QUICK, ".")
    result.assert_outcomes(passed=2, failed=1)
    out = result.stdout.str()
    assert "budgets" in out and "median char_edits budget 1.000 < 3.000" in out
    assert "1 fail for sure" in out
