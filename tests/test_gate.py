"""Baselines and regression gating: round trip, injected regression, noise tolerance, refusals, compare."""
import json
import re

import numpy as np
import pytest
import torch  # noqa: F401  (imported once, before pytester runs: see tests/test_plugin.py)

from pytest_memerobust.cli import main as cli_main
from pytest_memerobust.errors import ConfigError
from pytest_memerobust.judge.gate import (DEFAULT_CHECKS, ErrorControl, RegressionCheck, check_resamples,
                                         compare_condition, gate_mode, summarize)
from pytest_memerobust.judge.results import Answers, Memes
from pytest_memerobust.report.gate_tables import baseline_saved_line
from pytest_memerobust.run.gate import save_baseline
from pytest_memerobust.track.baseline import baseline_contents, load_baseline, refuse_mismatch

QUICK = ["--memerobust-limit=60", "--memerobust-bootstrap=200", "-p", "no:cacheprovider"]
SUITE = """
[suite]
name = "gate"
[text]
typos = [2, 5]
[image]
contrast = [3]
"""


def _results(n=400, flip_share=0.0, seed=0):
    """A confident detector's clean and perturbed probabilities, with `flip_share` of the perturbed ones flipped
    from right to wrong."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, n)
    clean = np.where(y[:, None] == np.arange(2), 0.9, 0.1)
    perturbed = clean.copy()
    flip = rng.choice(n, int(flip_share * n), replace=False)
    perturbed[flip] = perturbed[flip][:, ::-1]
    return {"y": y, "clean": clean, "perturbed": perturbed}


@pytest.mark.parametrize("spec, expected", [
    ("rel_acc:1%", RegressionCheck("relative", "accuracy", 0.01)),
    ("abs_auroc", RegressionCheck("absolute", "auroc", 0.0)),
    ("f1:0.02", RegressionCheck("metric", "macro_f1", 0.02)),
    ("flip:2%", RegressionCheck("metric", "flip_rate", 0.02)),
])
def test_specs_parse(spec, expected):
    assert RegressionCheck.parse(spec) == expected
    assert RegressionCheck.parse(expected.spec) == expected


@pytest.mark.parametrize("spec, says", [("rel_accuracy", "acc|auroc|f1|flip"), ("foo_acc", "acc|auroc|f1|flip"),
                                       ("rel_flip", "acc|auroc|f1|flip"), ("rel_acc:lots", "a number or a percentage"),
                                       ("acc:", "a number or a percentage")])  # an empty effect: not no effect
def test_bad_specs_are_refused_with_the_expected_form(spec, says):
    with pytest.raises(ValueError, match=re.escape(says)):
        RegressionCheck.parse(spec)


def test_the_default_rules_are_the_metrics_themselves_and_the_flip_rate():
    assert [c.spec for c in DEFAULT_CHECKS] == ["acc", "auroc", "f1", "flip"]
    assert [c.applies_to("clean") for c in DEFAULT_CHECKS] == [True, True, True, False]
    assert not RegressionCheck.parse("rel_acc").applies_to("clean")


def _one(check, now, then, where=("demo", "demo", "text=typos@5"), **options):
    """One rule on one perturbed condition, as a family of its own."""
    return compare_condition(now, then, where, "perturbed", (check,), **options)[0]


def test_an_injected_regression_fails_with_old_new_bound_and_one_sided_p():
    before, after = _results(flip_share=0.02), _results(flip_share=0.15)
    c = _one(DEFAULT_CHECKS[0], after, before, n_resamples=300)
    decision = c.decision  # alone: nothing to adjust
    assert decision.regressed and decision.state == "regressed" and decision.p_value == decision.p_raw == 1 / 301
    assert (c.scores.before, c.scores.now) == (0.98, 0.85) and c.scores.high < 0 and c.decision.bound < 0
    assert "accuracy regressed: baseline 0.9800 -> now 0.8500 (difference -0.1300" in str(c)
    assert "one-sided p 0.00332, adjusted p 0.00332 under family-wise error 5%" in str(c)
    flips = _one(DEFAULT_CHECKS[3], after, before, n_resamples=300)  # the flip rate rose from 0.02 to 0.15
    assert flips.decision.regressed and flips.scores.low > 0 and flips.decision.bound > 0
    assert (flips.scores.before, flips.scores.now) == (0.02, 0.15)


def test_an_equal_run_does_not_regress_and_a_small_drop_is_within_the_allowed_effect():
    same = _results(flip_share=0.05)
    for check in DEFAULT_CHECKS:
        c = _one(check, same, same, n_resamples=200)
        assert not c.decision.regressed and (c.scores.low, c.scores.high) == (0.0, 0.0) and c.decision.p_value == 1.0
    slightly_worse = _results(flip_share=0.08)
    assert not _one(RegressionCheck("relative", "accuracy", 0.05), slightly_worse,
                    _results(flip_share=0.05)).decision.regressed


def test_a_weaker_checkpoint_is_caught_where_relative_robustness_rewards_it():
    """The issue's trap: a checkpoint that is worse everywhere loses less under the perturbation, so relative
    robustness says "better" while every metric fell."""
    rng = np.random.default_rng(1)
    n = 300
    y = rng.integers(0, 2, n)
    right = np.where(y[:, None] == np.arange(2), 0.9, 0.1)
    strong_clean = right.copy()
    strong_pert = right.copy()
    strong_pert[:30] = strong_pert[:30, ::-1]  # 0.9 clean accuracy under the condition... 1.0 -> 0.9
    weak_clean = right.copy()
    weak_clean[:90] = weak_clean[:90, ::-1]  # 0.7 clean
    weak_pert = weak_clean.copy()
    weak_pert[90:100] = weak_pert[90:100, ::-1]  # 0.7 -> 0.667
    strong = {"y": y, "clean": strong_clean, "perturbed": strong_pert}
    weak = {"y": y, "clean": weak_clean, "perturbed": weak_pert}
    assert not _one(RegressionCheck.parse("rel_acc"), weak, strong, n_resamples=300).decision.regressed
    assert _one(DEFAULT_CHECKS[0], weak, strong, n_resamples=300).decision.regressed
    clean = [c for c in compare_condition({**weak, "perturbed": weak_clean}, {**strong, "perturbed": strong_clean},
                                          ("m", "d", "clean"), "clean", n_resamples=300)]
    assert [c.subject.rule for c in clean] == ["acc", "auroc", "f1"] and clean[0].decision.regressed
    summary = summarize(clean)
    assert summary["summary"].startswith("1 of 1 condition regressed, clean included; family-wise error 5% over 3 "
                                         "rules")


@pytest.mark.parametrize("text", ["holm:", "fwer: ", "fdr:%", "none:nan", "fwer:0", "fdr:60%"])
def test_an_error_control_level_left_empty_or_meaningless_is_refused(text):
    """Issue 50: `holm:` (an unset variable after the colon) was read as holm at 5%."""
    with pytest.raises(ValueError, match=re.escape(repr(text))):
        ErrorControl.parse(text)


def test_a_gate_whose_bootstrap_could_never_reach_its_level_is_refused():
    """With B resamples the smallest bootstrap p is 1/(B+1): below 1/level - 1 resamples no rule could fail."""
    check_resamples(ErrorControl("fwer", 0.05), 19)
    with pytest.raises(ConfigError, match=r"--memerobust-bootstrap=18: .*1/19.*at least 19 resamples"):
        check_resamples(ErrorControl("fwer", 0.05), 18)
    with pytest.raises(ConfigError, match=r"at least 99 resamples"):
        check_resamples(ErrorControl("holm", 0.01), 50)


def test_non_inferiority_without_a_baseline_is_refused():
    """Issue 50: it ended PASSED, exit 0, having shown nothing non-inferior."""
    assert gate_mode("non-inferiority", True) == "non-inferiority"
    with pytest.raises(ConfigError, match="--memerobust-gate=non-inferiority needs --memerobust-baseline"):
        gate_mode("non-inferiority", False)


def test_the_gate_mode_defaults_to_both_with_a_baseline_and_thresholds_without():
    assert gate_mode(None, True) == "both" and gate_mode(None, False) == "thresholds"
    assert gate_mode("regressions", False) == "regressions"
    with pytest.raises(ConfigError, match="--memerobust-gate=lenient: expected one of thresholds, regressions"):
        gate_mode("lenient", True)


def _facts(**change):
    case = {"model": "demo", "spec": "demo", "task": "hate", "card": {"name": "demo", "digest": "c" * 16},
            "fingerprint": "a" * 64}
    case.update(change)
    return [tuple(case.values())]


@pytest.mark.parametrize("field, change, says", [
    ("seed", {"seed": 1}, "--memerobust-seed=0, this run uses 1"),
    ("limit", {"limit": 40}, "--memerobust-limit=80, this run with --memerobust-limit=40"),
    ("limit", {"limit": None}, "this run with no --memerobust-limit (every meme)"),
    ("task", {"cases": _facts(task="target")}, "for task 'hate', this run for 'target': pass the same --memerobust-task"),
    ("card", {"cases": _facts(card={"name": "demo", "digest": "d" * 16})}, "another model card for 'demo'"),
    ("data", {"cases": _facts(fingerprint="b" * 64)}, "other data for --memerobust-data=demo"),
    ("model", {"cases": _facts(model="memeclip")}, "holds demo on demo; this run tests memeclip on demo"),
    ("versions", {"versions": {"pytest-memerobust": "0.2.0"}}, "pytest-memerobust 0.1.0, this run has 0.2.0"),
])
def test_a_baseline_that_does_not_match_the_run_is_refused_naming_the_field(field, change, says):
    baseline = {"seed": 0, "datasets": {"demo": "a" * 64}, "versions": {"pytest-memerobust": "0.1.0"},
                "run": {"limit": 80, "tasks": {"demo": {"demo": "hate"}}, "cards": {"demo": "c" * 16}},
                "results": {"demo": {"demo": {"clean": {}}}}}
    facts = {"names": ("baseline base.json", "this run"), "seed": 0, "limit": 80, "cases": _facts(),
             "versions": {"pytest-memerobust": "0.1.0", "imagecorruptions": None, "textattack": None}}
    baseline["versions"].update(imagecorruptions=None, textattack=None)
    refuse_mismatch(baseline, **facts)  # the same facts: fine
    with pytest.raises(ConfigError, match=re.escape(says)):
        refuse_mismatch(baseline, **{**facts, **change})


def test_comparisons_of_two_baselines_that_would_be_meaningless_are_refused():
    """The same refusals as the run's, in the words for two files."""
    baseline = {"seed": 0, "datasets": {"demo": "a" * 64}, "versions": {"pytest-memerobust": "0.1.0"}}
    facts = {"seed": 0, "fingerprints": {"demo": "a" * 64}, "versions": {"pytest-memerobust": "0.1.0"},
             "names": ("a.json", "b.json"), "run": False}
    refuse_mismatch(baseline, **facts)  # same facts: fine
    with pytest.raises(ConfigError, match="a.json was made with seed 0, b.json uses 1: perturbations differ"):
        refuse_mismatch(baseline, **{**facts, "seed": 1})
    with pytest.raises(ConfigError, match="a.json was made on other data for 'demo'"):
        refuse_mismatch(baseline, **{**facts, "fingerprints": {"demo": "b" * 64}})
    with pytest.raises(ConfigError, match="pytest-memerobust 0.1.0, b.json has 0.2.0"):
        refuse_mismatch(baseline, **{**facts, "versions": {"pytest-memerobust": "0.2.0"}})


def test_saving_a_baseline_says_where_and_what(tmp_path):
    """Saving used to print nothing: the run's last line now names the file, its conditions and models."""
    from types import SimpleNamespace

    from pytest_memerobust.run.options import BaselineOptions, JudgingOptions, Options
    from pytest_memerobust.run.session_parts import Outcomes

    def result(n, flip_share):
        r = _results(n, flip_share)
        return SimpleNamespace(memes=Memes(r["y"]), answers=Answers(r["clean"], r["perturbed"]), task="hate")

    results = {("demo", "demo", "clean"): result(50, 0.0), ("demo", "demo", "text=typos@5"): result(50, 0.1),
               ("memeclip", "demo", "clean"): result(50, 0.0)}
    report = {"seed": 7, "versions": {"pytest-memerobust": "0.1.0", "numpy": "2"},
              "datasets": {"demo": {"fingerprint": "f" * 64}},
              "models": {"demo": {"checkpoint_sha256": "a" * 64, "card": {"architecture": "demo"}},
                         "memeclip": {"checkpoint_sha256": "b" * 64, "card": {"architecture": "memeclip"}}},
              "options": {"limit": 50}}
    session = SimpleNamespace(outcomes=Outcomes(results=results), report=lambda: report,
                              model_label=lambda model: model,
                              options=Options(judging=JudgingOptions(baseline=BaselineOptions(add=False))))
    lines = []
    saved = save_baseline(session, tmp_path / "base.json", write=lines.append)
    assert saved == {"path": tmp_path / "base.json", "conditions": 3, "models": ["demo", "memeclip"],
                     "datasets": ["demo"], "memes": [50], "seed": 7, "checkpoints": 1}
    assert lines == [f"memerobust: baseline saved to {tmp_path / 'base.json'}: 3 conditions of 2 models "
                     f"(demo, memeclip) on demo (50 memes), seed 7"]
    data = load_baseline(tmp_path / "base.json")
    assert data["versions"] == {"pytest-memerobust": "0.1.0", "imagecorruptions": None, "textattack": None}
    assert data["run"]["limit"] == 50 and data["run"]["tasks"] == {"demo": {"demo": "hate"}, "memeclip": {"demo": "hate"}}
    assert data["run"]["cards"]["demo"]["digest"] != data["run"]["cards"]["memeclip"]["digest"]
    assert data["checkpoints"] == [{"models": {"demo": "a" * 64, "memeclip": "b" * 64},
                                    "paths": {"demo": None, "memeclip": None}}]
    assert data["results"]["demo"]["demo"]["text=typos@5"]["perturbed"] == results[
        ("demo", "demo", "text=typos@5")].answers.proba.tolist()
    assert save_baseline(session, tmp_path / "quiet.json")["conditions"] == 3  # no writer: nothing said


def test_the_saved_line_starts_a_line_of_its_own_on_the_terminal():
    """In pytest_sessionfinish the terminal may still be on -q's progress line."""
    import io
    from types import SimpleNamespace

    from _pytest._io import TerminalWriter

    from pytest_memerobust.terminal import terminal_line

    out = io.StringIO()
    writer = TerminalWriter(out)
    writer.write("....  [100%]")
    config = SimpleNamespace(pluginmanager=SimpleNamespace(get_plugin=lambda name: object()),
                             get_terminal_writer=lambda: writer)
    write = terminal_line(config)
    write("memerobust: baseline saved to b.json")
    write("second")
    assert out.getvalue() == "....  [100%]\nmemerobust: baseline saved to b.json\nsecond\n"
    no_terminal = SimpleNamespace(pluginmanager=SimpleNamespace(get_plugin=lambda name: None))
    assert terminal_line(no_terminal) is print


def test_a_file_that_is_not_a_baseline_is_refused(tmp_path):
    path = tmp_path / "report.json"
    path.write_text(json.dumps({"tool": "pytest-memerobust"}))
    with pytest.raises(ConfigError, match="is a pytest-memerobust report, not a baseline"):
        load_baseline(path)
    path.write_text(json.dumps({"format": "something else"}))
    with pytest.raises(ConfigError, match="not a pytest-memerobust baseline.*format 'something else'"):
        load_baseline(path)


@pytest.mark.parametrize("damage, says", [
    (lambda cell: cell["perturbed"][3].__setitem__(0, float("nan")), r"results/demo/demo/text=typos@5/perturbed\[3\] "
                                                                      r"holds nan, not a probability in 0..1"),
    (lambda cell: cell["clean"][0].__setitem__(1, 1.5), r"clean\[0\] holds 1.5, not a probability"),
    (lambda cell: cell["y"].__setitem__(2, 0.5), r"results/demo/demo/text=typos@5/y holds a label that is not an integer"),
    (lambda cell: cell.__setitem__("declined", [True]), r"declined is not one true/false per meme"),
    # issue 50: strings were read as numbers, rows that do not sum to 1 and labels outside the classes were taken
    (lambda cell: cell["clean"][1].__setitem__(0, "0.2"), r"results/demo/demo/text=typos@5/clean holds values that "
                                                          r"are not JSON numbers"),
    (lambda cell: cell["y"].__setitem__(1, "1"), r"text=typos@5/y holds values that are not JSON numbers"),
    (lambda cell: cell["perturbed"].__setitem__(2, [0.3, 0.3]), r"perturbed\[2\] sums to 0.6, not 1"),
    (lambda cell: cell.update(clean=[[1.0]] * 4, perturbed=[[1.0]] * 4), r"has the wrong shape"),
    (lambda cell: cell.__setitem__("y", [[0], [1], [1], [0]]), r"has the wrong shape"),
    (lambda cell: cell["perturbed"].__setitem__(0, [0.5, 0.25, 0.25]), r"rows of unequal length"),
    (lambda cell: cell["y"].__setitem__(0, 2), r"y holds label 2, not one of the 2 classes"),
])
def test_a_damaged_baseline_is_named_as_the_files_fault_before_any_case(tmp_path, damage, says):
    """A NaN in a baseline was reported as the model's error; now it is the file's, naming the entry and meme."""
    y = [0, 1, 1, 0]
    cell = {"y": y, "clean": [[0.9, 0.1], [0.2, 0.8], [0.3, 0.7], [0.6, 0.4]],
            "perturbed": [[0.9, 0.1], [0.2, 0.8], [0.3, 0.7], [0.6, 0.4]]}
    damage(cell)
    data = {"format": "pytest-memerobust-baseline/1", "seed": 0, "versions": {}, "datasets": {},
            "results": {"demo": {"demo": {"text=typos@5": cell}}}}
    path = tmp_path / "base.json"
    path.write_text(json.dumps(data))  # NaN as Python's json writes it
    with pytest.raises(ConfigError, match=says):
        load_baseline(path)


def test_round_trip_passes_and_a_worse_checkpoint_fails(pytester, tmp_path):
    pytester.makefile(".toml", **{"memerobust-gate": SUITE})
    base = tmp_path / "base.json"
    first = pytester.runpytest("--memerobust-model=demo", *QUICK, f"--memerobust-save-baseline={base}", ".")
    first.assert_outcomes(passed=4)
    saved = json.loads(base.read_text())
    assert set(saved["results"]["demo"]["demo"]) == {"clean", "text=typos@2", "text=typos@5", "image=contrast@3"}
    assert baseline_saved_line(f"baseline saved to {base}", baseline_contents(saved)) == (
        f"memerobust: baseline saved to {base}: 4 conditions of 1 model (demo) on demo (60 memes), seed 0")
    assert len(saved["results"]["demo"]["demo"]["text=typos@2"]["perturbed"]) == 60

    again = pytester.runpytest("--memerobust-model=demo", *QUICK, f"--memerobust-baseline={base}", ".")
    again.assert_outcomes(passed=4)  # the same checkpoint does not regress from itself

    worse = tmp_path / "worse.safetensors"  # one epoch of training: a checkpoint that has not learnt the task
    assert cli_main(["train", "demo", "--no-cache", "--data", "demo", "--epochs", "1", "--lr", "1e-4",
                     "--out", str(worse),
                     "--quiet"]) == 0
    result = pytester.runpytest("--memerobust-model=demo", *QUICK, f"--memerobust-baseline={base}",
                                f"--memerobust-checkpoint={worse}", "--memerobust-fail-on=acc:5%", ".")
    assert result.parseoutcomes().get("failed", 0) >= 1
    result.stdout.fnmatch_lines(["*accuracy regressed: baseline *-> now *, bound *adjusted p*"])

    refused = pytester.runpytest("--memerobust-model=demo", *QUICK, f"--memerobust-baseline={base}",
                                 "--memerobust-seed=3", ".")
    assert refused.ret == pytest.ExitCode.USAGE_ERROR  # before any case, one error naming the option
    refused.stderr.fnmatch_lines(["*was made with --memerobust-seed=0, this run uses 3*"])
    assert "memerobust verdict" not in refused.stdout.str()


def test_compare_prints_the_table_and_exits_non_zero_on_a_regression(pytester, tmp_path, capsys):
    pytester.makefile(".toml", **{"memerobust-gate": SUITE})
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    pytester.runpytest("--memerobust-model=demo", *QUICK, f"--memerobust-save-baseline={a}", ".")
    data = json.loads(a.read_text())
    cell = data["results"]["demo"]["demo"]["text=typos@5"]
    y = np.array(cell["y"])
    cell["perturbed"] = np.where(y[:, None] == np.arange(2), 0.1, 0.9).tolist()  # every prediction wrong
    b.write_text(json.dumps(data))
    assert cli_main(["compare", str(a), str(b), "--bootstrap", "200"]) == 1
    out = capsys.readouterr().out
    line = next(l for l in out.splitlines() if " typos@5 " in l)
    assert line.startswith("REGRESSED") and "→ 0.000" in line
    assert cli_main(["compare", str(a), str(a), "--bootstrap", "200"]) == 0


def test_metrics_go_into_junit_xml_as_properties(pytester, tmp_path):
    import xml.etree.ElementTree as ET

    pytester.makefile(".toml", **{"memerobust-gate": SUITE})
    xml = tmp_path / "junit.xml"
    pytester.runpytest("--memerobust-model=demo", *QUICK, f"--junitxml={xml}", ".").assert_outcomes(passed=4)
    def number(value):
        try:
            return float(value)
        except ValueError:
            return value  # the model's name, the verdict

    cases = {case.get("name"): {p.get("name"): number(p.get("value")) for p in case.iter("property")}
             for case in ET.parse(xml).getroot().iter("testcase")}
    assert cases["typos-5"]["memerobust.model"] == cases["clean"]["memerobust.model"] == "demo"
    typos = cases["typos-5"]
    assert set(typos) >= {"memerobust.accuracy", "memerobust.auroc", "memerobust.macro_f1", "memerobust.flip_rate",
                          "memerobust.relative_robustness.accuracy"}
    assert typos["memerobust.relative_robustness.accuracy"] == pytest.approx(
        typos["memerobust.accuracy"] / cases["clean"]["memerobust.accuracy"], abs=1e-5)


def test_an_equally_good_checkpoint_trained_with_another_seed_does_not_fail(pytester, tmp_path):
    pytester.makefile(".toml", **{"memerobust-gate": SUITE})
    base = tmp_path / "base.json"
    pytester.runpytest("--memerobust-model=demo", *QUICK, f"--memerobust-save-baseline={base}", ".")
    reseeded = tmp_path / "reseeded.safetensors"  # the demo recipe, another training seed
    assert cli_main(["train", "demo", "--no-cache", "--data", "demo", "--seed", "1", "--out", str(reseeded),
                     "--quiet"]) == 0
    result = pytester.runpytest("--memerobust-model=demo", *QUICK, f"--memerobust-baseline={base}",
                                f"--memerobust-checkpoint={reseeded}", ".")
    result.assert_outcomes(passed=4)
    assert "REGRESSED" not in result.stdout.str()
    result.stdout.fnmatch_lines(["0 of 4 conditions and 0 of 1 family mean regressed (clean did not); family-wise "
                                 "error 5% over 19 rules"])
    # non-inferiority asks more: 60 memes cannot show "at most 2 points worse", and the run says how many would
    strict = pytester.runpytest("--memerobust-model=demo", *QUICK, f"--memerobust-baseline={base}",
                                f"--memerobust-checkpoint={reseeded}", "--memerobust-gate=non-inferiority", ".")
    assert strict.ret == 1
    strict.stdout.fnmatch_lines(["*not shown non-inferior with 60 memes: baseline * -> now *, its * may reach "
                                 "* (the decision's bound) > margin 0.0200 *memes would show it with 80% power*",
                                 "* of 4 conditions and * of 1 family mean not shown non-inferior*; family-wise error 5% "
                                 "over 19 rules*"])
    wide = pytester.runpytest("--memerobust-model=demo", *QUICK, f"--memerobust-baseline={base}",
                              f"--memerobust-checkpoint={reseeded}", "--memerobust-gate=non-inferiority",
                              *(f"--memerobust-fail-on={rule}:40%" for rule in ("acc", "auroc", "f1", "flip")), ".")
    wide.assert_outcomes(passed=4)
    wide.stdout.fnmatch_lines(["0 of 4 conditions and 0 of 1 family mean not shown non-inferior (clean did not); "
                               "family-wise error 5%*"])


def test_a_baseline_holding_none_of_the_runs_conditions_is_refused(pytester, tmp_path):
    pytester.makefile(".toml", **{"memerobust-gate": SUITE})
    base = tmp_path / "base.json"
    pytester.runpytest("--memerobust-model=demo", *QUICK, f"--memerobust-save-baseline={base}", "-k", "typos", ".")
    other = pytester.runpytest("--memerobust-model=demo", *QUICK, f"--memerobust-baseline={base}", "-k", "contrast",
                               ".")
    assert other.ret == pytest.ExitCode.USAGE_ERROR
    other.stderr.fnmatch_lines(["*baseline * holds none of this run's 1 conditions (image=contrast@3); it holds "
                                "clean, text=typos@2, text=typos@5: nothing would be gated*"])


@pytest.mark.parametrize("checkpoints, message", [
    ({"dmeo": "w.safetensors"}, r"--memerobust-checkpoint=dmeo=w.safetensors: 'dmeo' is not a model of this run "
                                r"\(models: demo\)"),
    ({"": "missing.safetensors"}, r"--memerobust-checkpoint=missing.safetensors: no such file"),
])
def test_a_checkpoint_for_another_model_or_a_missing_file_is_refused_at_the_start(tmp_path, monkeypatch, checkpoints,
                                                                                 message):
    """A typo in `MODEL=PATH` used to leave the shipped weights in place and the gate passing."""
    from pytest_memerobust.errors import ConfigError
    from pytest_memerobust.run.options import Options
    from pytest_memerobust.run.session import RobustnessSession

    monkeypatch.chdir(tmp_path)
    (tmp_path / "w.safetensors").write_bytes(b"")
    with pytest.raises(ConfigError, match=message):
        RobustnessSession(Options(models=("demo",), checkpoints=checkpoints))


STRICT_GATE_SUITE = """
[suite]
name = "strict-gate"
[thresholds]
max_flip_rate = 0.0
decision = "estimate"
[text]
typos = [5]
"""


def test_the_regressions_gate_fails_only_what_regressed_naming_clean(pytester, tmp_path):
    """The issue's scenario on the demo model: saving a baseline and gating the unchanged checkpoint exit 0 under
    --memerobust-gate=regressions although a threshold fails (reported as xfail); a weaker checkpoint fails it, and
    the summary names the clean condition; the JSON report carries every case's verdict and the comparison."""
    pytester.makefile(".toml", **{"memerobust-strict-gate": STRICT_GATE_SUITE})
    base = tmp_path / "base.json"
    gate = ["--memerobust-gate=regressions"]
    saved = pytester.runpytest("--memerobust-model=demo", *QUICK, *gate, f"--memerobust-save-baseline={base}", ".")
    assert saved.ret == 0
    saved.assert_outcomes(passed=1, xfailed=1)  # typos-5 flips memes: below its threshold, not gating
    saved.stdout.fnmatch_lines(["PASSED: no robustness tests failed the gate (--memerobust-gate=regressions, no "
                                "baseline: nothing could regress)"])

    report = tmp_path / "same.json"
    same = pytester.runpytest("--memerobust-model=demo", *QUICK, *gate, f"--memerobust-baseline={base}",
                              f"--memerobust-report={report}", ".")
    assert same.ret == 0
    same.stdout.fnmatch_lines(["*memerobust gate: this run against the baseline*",
                               "0 of 2 conditions regressed (clean did not); family-wise error 5% over 7 rules"])
    data = json.loads(report.read_text())
    assert [(c["condition"], c["outcome"], c["verdict"], c["regressed"]) for c in data["cases"]] == [
        ("clean", "passed", "pass", False), ("text=typos@5", "xfailed", "fail within noise", False)]
    assert data["cases"][1]["violations"][0]["what"] == "flip rate" and data["cases"][1]["thresholds"]["max_flip_rate"] == 0
    assert data["verdict"]["passed"] and data["verdict"]["baseline"]["regressed"] == 0

    weak = tmp_path / "weak.safetensors"
    assert cli_main(["train", "demo", "--no-cache", "--data", "demo", "--epochs", "1", "--lr", "1e-4",
                     "--out", str(weak), "--quiet"]) == 0
    for mode in ([], gate):  # the default with a baseline (both) and regressions alone
        worse = pytester.runpytest("--memerobust-model=demo", *QUICK, *mode, f"--memerobust-baseline={base}",
                                   f"--memerobust-checkpoint={weak}", ".")
        assert worse.ret == 1
        out = worse.stdout.str()
        assert "clean included" in out
        clean_row = next(line for line in out.splitlines() if line.startswith("REGRESSED") and " clean " in line)
        assert " acc" in clean_row or "auroc" in clean_row or " f1" in clean_row
