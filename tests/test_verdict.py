"""The run as a newcomer meets it: ids that are `-k` expressions and re-runnable node ids, a compact verdict, one
table per suite, McNemar's p-value next to the intervals, and option errors reported once before any case runs."""
import json
import math
import xml.etree.ElementTree as ET

import numpy as np
import pytest
import torch  # noqa: F401  imported once here: pytester's in-process runs would otherwise re-import it

from pytest_memerobust import DataOptions, JudgingOptions, Options, RobustnessSession
from pytest_memerobust.engine import Condition
from pytest_memerobust.judge.metrics import mcnemar_p_value
from pytest_memerobust.report import render
from pytest_memerobust.run.report import build_report
from pytest_memerobust.report.html import to_html
from pytest_memerobust.judge.results import Answers, ConditionResult, Memes, StatsConfig
from pytest_memerobust.run.suite import builtin_suite_arg, builtin_suite_paths, load_suite
from pytest_memerobust.judge.thresholds import Thresholds, Violation, assess, check, verdict
from pytest_memerobust.judge.verdict import CaseOutcome, failure_lines, run_verdict
from pytest_memerobust.report.tables import verdict_lines

QUICK = ["--memerobust-limit=40", "--memerobust-bootstrap=100", "-p", "no:cacheprovider"]

MIXED_SUITE = """
[suite]
name = "mixed"
[thresholds]
decision = "confident"
min_relative_robustness = { accuracy = 1.5 }
[text]
typos = [2]
"""


def test_case_names_are_k_expressions_without_at_or_equals():
    assert Condition(text="typos", text_severity=3).test_name == "typos-3"
    assert Condition(image="uap", image_severity=3).test_name == "uap-3"
    assert Condition("typos", 3, "uap", 3).test_name == "typos-3+uap-3"
    assert Condition(text="back_translation", image="augmix", image_severity=2).test_name == "back_translation+augmix-2"
    assert Condition().test_name == "clean"


def test_k_selects_a_case_by_its_printed_name(pytester):
    result = pytester.runpytest("--memerobust-model=demo", "--collect-only", "-q", "-k", "typos-1", *QUICK)
    ids = [line for line in result.stdout.lines if "::" in line]
    assert ids == ["channel-ablation::demo:text::typos-1", "channel-ablation::demo:image::typos-1",
                   "meme-edits::demo::typos-1+rendered_caption", "rainbow-noise::demo::typos-1"]


def test_a_printed_node_id_reruns_from_any_directory(pytester):
    result = pytester.runpytest("--memerobust-model=demo", "rainbow-noise::demo::typos-1",
                                "rainbow-noise.toml::demo::typos-2", *QUICK)
    result.assert_outcomes(passed=2)
    assert builtin_suite_arg("nothing-like-a-suite::x") == "nothing-like-a-suite::x"
    fuzz = next(p for p in builtin_suite_paths() if p.name == "test_caption_fuzz.py")
    assert builtin_suite_arg("test_caption_fuzz.py::test_x") == f"{fuzz}::test_x"


def test_the_main_job_from_a_project_runs_the_robustness_cases_only(pytester):
    """With a model and no paths, the project's unit tests (testpaths) are not robustness cases."""
    pytester.makeini("[pytest]\ntestpaths = tests\n")
    pytester.mkdir("tests")
    (pytester.path / "tests" / "test_unit.py").write_text("def test_unit():\n    raise AssertionError('ran')\n")
    (pytester.path / "tests" / "memerobust-mine.toml").write_text(MIXED_SUITE)
    result = pytester.runpytest("--memerobust-model=demo", "--collect-only", "-q", *QUICK)
    ids = [line for line in result.stdout.lines if "::" in line]
    assert "tests/memerobust-mine.toml::demo::typos-2" in ids  # the user's own suites still run
    assert not any("test_unit" in i for i in ids)
    assert len(ids) == 194 + 2
    named = pytester.runpytest("--memerobust-model=demo", "--collect-only", "-q", "tests", *QUICK)
    assert any("test_unit" in line for line in named.stdout.lines)  # named paths run as given


def test_a_failure_is_one_line_by_default_and_the_table_with_v(pytester):
    pytester.makefile(".toml", **{"memerobust-mixed": MIXED_SUITE})
    result = pytester.runpytest("--memerobust-model=demo", *QUICK, ".")
    result.assert_outcomes(passed=1, failed=1)
    out = result.stdout.str()
    result.stdout.fnmatch_lines([
        "*memerobust: 1 failing robustness test (-v for details)*",
        "memerobust-mixed.toml::demo::",
        "  typos-2  rel. accuracy * < 1.500 (CI *..*); McNemar p *",
        "*memerobust verdict*",
        "demo: 2 cases: 1 pass, 1 fail for sure, 0 fail within noise",
        "*",
        "FAILED: 1 robustness test failed the gate (--memerobust-gate=thresholds)",
        "*= 1 failed, 1 passed in *",
    ])
    assert "_ memerobust-mixed" not in out and "short test summary" not in out  # no section, no summary line
    # pytest's convention: the last screen says what failed; the tables come first
    assert out.index("memerobust tables") < out.index("failing robustness test") < out.index(
        "memerobust verdict")
    table = out[out.index("\nfamily ") + 1:out.index("fail: cases below")].splitlines()
    assert table and all(len(line) <= 80 for line in table), table  # the roll-up fits an 80-column CI log
    verbose = pytester.runpytest("--memerobust-model=demo", "-v", *QUICK, ".")
    verbose.stdout.fnmatch_lines(["*demo under text=typos@2 is below the suite's robustness thresholds:*",
                                  "*McNemar p*", "FAILED memerobust-mixed.toml::demo::typos-2*"])


def test_builtin_python_suite_failures_are_compact_and_named(pytester):
    """The fuzz suite's Hypothesis traceback is folded into its message; its id has its file name."""
    result = pytester.runpytest("--memerobust-model=memeblip2-tda", "--memerobust-limit=60",
                                "--memerobust-fuzz-examples=30", "-p", "no:cacheprovider", "-k", "fuzz")
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert "Traceback" not in out and "def fuzz" not in out
    result.stdout.fnmatch_lines(["test_caption_fuzz.py::",
                                 "  test_label_preserving_edits_do_not_flip_confident_predictions*",
                                 "built-in Python suites: 1 case: 0 pass, 1 fail for sure, 0 fail within noise"])


def _violation(value, lo, hi, limit=0.9, comparison=">="):
    return Violation("relative robustness of accuracy", value, limit, comparison, (lo, hi), 0.95)


def test_a_violation_is_sure_only_when_its_whole_interval_is_past_the_limit():
    assert _violation(0.85, 0.80, 0.89).sure and not _violation(0.85, 0.80, 0.93).sure
    assert _violation(0.15, 0.11, 0.20, 0.1, "<=").sure and not _violation(0.15, 0.09, 0.20, 0.1, "<=").sure
    assert _violation(math.nan, math.nan, math.nan).sure
    assert verdict([]) == "pass"
    assert verdict([_violation(0.85, 0.80, 0.93)]) == "fail within noise"
    assert verdict([_violation(0.85, 0.80, 0.93), _violation(0.15, 0.11, 0.2, 0.1, "<=")]) == "fail for sure"
    assert _violation(0.85, 0.80, 0.93).shortfall == pytest.approx(0.05)
    assert _violation(0.801, 0.74, 0.86).short() == "rel. accuracy 0.801 < 0.900 (CI 0.740..0.860)"


def _result(clean_correct, perturbed_correct):
    """A two-class result whose clean and perturbed predictions are right exactly where the masks say."""
    y = np.array([0, 1] * (len(clean_correct) // 2))
    def proba(correct):
        pred = np.where(correct, y, 1 - y)
        return np.eye(2)[pred] * 0.8 + 0.1
    return ConditionResult("m", "d", Condition(text="typos", text_severity=1), Memes(y),
                           Answers(proba(clean_correct), proba(np.asarray(perturbed_correct))),
                           StatsConfig(n_resamples=200))


def test_confident_decisions_fail_only_for_sure_and_estimate_on_the_point():
    rng = np.random.default_rng(0)
    clean = np.ones(40, bool)
    perturbed = clean.copy()
    perturbed[rng.choice(40, 3, replace=False)] = False  # accuracy 1.0 -> 0.925: inside the noise of 40 memes
    result = _result(clean, perturbed)
    floor = {"min_relative_robustness": {"accuracy": 0.95}}
    within = assess(result, Thresholds.from_mapping(floor, "t"))
    assert verdict(within) == "fail within noise"
    assert check(result, Thresholds.from_mapping(floor, "t")) == within  # estimate: the point fails
    assert check(result, Thresholds.from_mapping({**floor, "decision": "confident"}, "t")) == []


def test_mcnemar_p_value_of_a_result_is_the_exact_test_on_its_memes():
    clean = np.array([True] * 30 + [False] * 10)
    perturbed = clean.copy()
    perturbed[:8] = False  # 8 right -> wrong
    perturbed[-2:] = True  # 2 wrong -> right
    result = _result(clean, perturbed)
    assert result.mcnemar_p == pytest.approx(mcnemar_p_value(clean, perturbed))
    assert result.mcnemar_p == pytest.approx(0.109375)  # 2 * P(Binomial(10, 1/2) <= 2) = 2 * 56 / 1024
    assert result.as_dict()["mcnemar_p"] == result.mcnemar_p


def _record(name, outcome, verdict, family="typos", shortfall=0.0):
    violations = [] if verdict in ("pass", "skipped") else [
        {"what": "flip rate", "value": 0.1 + shortfall, "limit": 0.1, "comparison": "<=", "ci": [0.1, 0.5],
         "sure": verdict == "fail for sure", "fails": verdict == "fail for sure"}]
    return {"nodeid": f"s::m::{name}", "model": "m", "family": family, "condition": name, "outcome": outcome,
            "verdict": verdict, "violations": violations, "regressions": [], "regressed": False,
            "decision": "confident", "p_value": None, "fdr_survives": None}


def test_the_run_verdict_counts_per_model_and_names_the_weakest_families():
    records = [_record(f"case-{i}", "failed", "fail for sure", f"family-{i}", i / 10) for i in range(7)]
    records += [_record("ok", "passed", "pass"), _record("noisy", "passed", "fail within noise", "noisy", 0.01),
                _record("skipped", "skipped", "skipped")]
    verdict = run_verdict(records, gate="thresholds", baseline=None)
    (m,) = verdict["models"]
    assert (m["cases"], m["pass"], m["fail for sure"], m["fail within noise"], m["skipped"], m["failed"]) == (
        10, 1, 7, 1, 1, 7)
    assert [w["family"] for w in m["weakest_families"]] == ["family-6", "family-5", "family-4", "family-3",
                                                            "family-2"]
    assert not verdict["passed"] and verdict["failing"] == [f"s::m::case-{i}" for i in range(7)]
    lines = verdict_lines(verdict)
    assert lines[0] == "m: 10 cases: 1 pass, 7 fail for sure, 1 fail within noise, 1 skipped"  # they add up
    assert lines[-1] == "FAILED: 7 robustness tests failed the gate (--memerobust-gate=thresholds)"
    outcomes = [CaseOutcome(r["nodeid"], r["outcome"], "m", r["verdict"], line=f"why {r['condition']}")
                for r in records]
    assert failure_lines(outcomes)[:2] == ["s::m::", "  case-0  why case-0"]


def test_an_interrupted_run_has_no_verdict_and_says_how_far_it_got():
    """4 cases of 26 passed, then Ctrl-C: never PASSED, in the data and in every rendering of it."""
    from pytest_memerobust.report.markdown import markdown
    from pytest_memerobust.report.outline import verdict_lines as report_lines

    records = [_record(f"case-{i}", "passed", "pass") for i in range(4)]
    verdict = run_verdict(records, gate="thresholds", baseline=None, interrupted=True, collected=26)
    assert verdict["passed"] is False and verdict["interrupted"] is True
    assert (verdict["cases_run"], verdict["cases_collected"]) == (4, 26)
    assert verdict["summary"].startswith("interrupted: 4 of 26 cases ran, no verdict; so far m: 0 of 4 cases")
    assert verdict_lines(verdict)[-1] == "INTERRUPTED: 4 of 26 cases ran; no verdict"
    report = {"verdict": verdict, "cases": records, "groups": [], "partial": "the run was interrupted"}
    assert report_lines(report)[0].startswith("INTERRUPTED: interrupted: 4 of 26 cases ran")
    assert "> **⚠ INTERRUPTED**" in markdown(report) and "PASS" not in markdown(report)
    page = to_html(report)
    assert "⚠ INTERRUPTED" in page and "PASS" not in page and "the run was interrupted. This report holds" in page
    nothing_ran = run_verdict([], gate="thresholds", baseline=None, interrupted=True, collected=26)
    assert nothing_ran["summary"] == "interrupted: 0 of 26 cases ran, no verdict"  # no dangling "so far"
    finished = run_verdict(records, gate="thresholds", baseline=None, collected=4)
    assert finished["passed"] and not finished["interrupted"] and verdict_lines(finished)[-1].startswith("PASSED")


@pytest.fixture(scope="module")
def two_suite_session():
    """Two suites that share a condition, run the way the plugin runs them."""
    session = RobustnessSession(Options(models=("demo",), data=DataOptions(limit=40),
                                        judging=JudgingOptions(stats=StatsConfig(n_resamples=50))))
    suites = {"first": (["text=typos@2"], ["image=contrast@2"], ["clean", "text=typos@2", "image=contrast@2",
                                                                  "text=typos@2+image=contrast@2"]),
              "second": ((), (), ["clean", "image=contrast@2", "image=brightness@1"])}
    for name, (text, image, conditions) in suites.items():
        session.declare_grid("demo", None, text, image, suite=name, conditions=conditions)
        for condition in conditions:
            session.evaluate("demo", condition)
    return session


def test_each_suite_has_its_own_tables_and_grid(two_suite_session):
    report = build_report(two_suite_session)
    groups = {g["suite"]: g for g in report["groups"]}
    assert list(groups) == ["first", "second"]
    assert [r["condition"] for r in groups["first"]["results"]] == [
        "text=typos@2", "image=contrast@2", "text=typos@2+image=contrast@2"]
    assert [r["condition"] for r in groups["second"]["results"]] == ["image=contrast@2", "image=brightness@1"]
    assert groups["first"]["grid_text"] == ["text=typos@2"] and "grid_summary" not in groups["second"]
    text = render(report)
    assert text.count("combined text x image perturbations") == 1
    assert "first: demo on demo (n=40, task=hate): image-only perturbations" in text
    assert "second: demo on demo (n=40, task=hate): image-only perturbations" in text
    page = to_html(report)
    # one heat map (the first suite's grid), one bar chart and one figure of robustness curves per suite
    assert page.count("<svg") == 1 + 2 + 2 and page.count("<figure class='plot'>") == 2
    assert page.count("McNemar p") >= 2


def test_a_grid_side_without_any_cell_is_left_out():
    session = RobustnessSession(Options(models=("demo",), data=DataOptions(limit=40),
                                        judging=JudgingOptions(stats=StatsConfig(n_resamples=50))))
    session.declare_grid("demo", None, ["text=typos@2", "text=back_translation"], ["image=contrast@2"],
                         suite="grid", conditions=["text=typos@2+image=contrast@2"])
    session.evaluate("demo", "text=typos@2+image=contrast@2")  # back_translation skipped: no cell of its own
    group = build_report(session)["groups"][0]
    assert group["grid_text"] == ["text=typos@2"] and group["grid_image"] == ["image=contrast@2"]


def test_a_card_given_by_path_is_named_by_its_name(pytester, tmp_path):
    from pytest_memerobust.detectors.cards import available_cards

    card = tmp_path / "cards" / "copy.toml"
    card.parent.mkdir()
    source = available_cards()["demo"]
    card.write_text(source.read_text())
    for sibling in source.parent.glob("demo.*"):
        if sibling.suffix != ".toml":
            (card.parent / sibling.name).write_bytes(sibling.read_bytes())
    result = pytester.runpytest(f"--memerobust-model={card}", "--collect-only", "-q", "-k", "rainbow and typos-1",
                                *QUICK)
    assert [line for line in result.stdout.lines if "::" in line] == ["rainbow-noise::demo::typos-1"]


@pytest.mark.parametrize("option, culprit", [
    ("--memerobust-data=nosuch:/x", "unknown dataset loader 'nosuch'"),
    ("--memerobust-data=pridemm:/does/not/exist", "/does/not/exist"),
    ("--memerobust-task=nothere", "has no task 'nothere'"),
    ("--memerobust-checkpoint=dmeo=w.safetensors", "'dmeo' is not a model of this run"),
])
def test_an_option_error_stops_the_run_once_at_the_start(pytester, option, culprit):
    result = pytester.runpytest("--memerobust-model=demo", option, *QUICK)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str()
    assert err.count(culprit) == 1 and "Traceback" not in err + result.stdout.str()
    assert "passed" not in result.stdout.str() and "failed" not in result.stdout.str()


def test_a_wrong_mode_stops_the_run_once(pytester):
    result = pytester.runpytest("--memerobust-model=demo:sideways", "-k", "rainbow", *QUICK)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert result.stderr.str().count("unknown mode 'sideways'") == 1


def test_junit_properties_carry_intervals_mcnemar_and_the_verdict(pytester, tmp_path):
    pytester.makefile(".toml", **{"memerobust-mixed": MIXED_SUITE})
    xml = tmp_path / "junit.xml"
    pytester.runpytest("--memerobust-model=demo", *QUICK, f"--junitxml={xml}", ".")
    cases = {case.get("name"): (case.get("classname"), {p.get("name"): p.get("value") for p in case.iter("property")})
             for case in ET.parse(xml).getroot().iter("testcase")}
    classname, props = cases["typos-2"]
    assert classname == "memerobust-mixed.toml.demo"
    lo, value, hi = (float(props[f"memerobust.relative_robustness.accuracy{k}"]) for k in (".ci_low", "", ".ci_high"))
    assert lo <= value <= hi
    assert 0 <= float(props["memerobust.mcnemar_p"]) <= 1
    assert props["memerobust.verdict"] == "fail for sure"


def test_python_suite_cases_have_a_classname(pytester, tmp_path):
    xml = tmp_path / "junit.xml"
    pytester.runpytest("--memerobust-model=demo", "-k", "reliance", *QUICK, f"--junitxml={xml}")
    (case,) = ET.parse(xml).getroot().iter("testcase")
    assert case.get("classname") == "test_modality_reliance" and case.get("name") == "test_both_channels_decide"


def test_builtin_toml_suites_decide_with_intervals():
    for path in builtin_suite_paths():
        if path.suffix == ".toml":
            suite = load_suite(path)
            assert suite.checks.thresholds.decision == "confident", path.name
            assert all(suite.checks.thresholds_for(c).decision == "confident" for c in suite.conditions)


def test_report_json_names_each_groups_suite(pytester, tmp_path):
    js = tmp_path / "r.json"
    pytester.runpytest("--memerobust-model=demo", "-k", "typos-3 and not ablation", *QUICK, f"--memerobust-report={js}")
    groups = json.loads(js.read_text())["groups"]
    assert [g["suite"] for g in groups] == ["imagenet-c", "meme-edits", "rainbow-noise"]
    assert all(r["mcnemar_p"] is not None for g in groups for r in g["results"])
