"""The plugin end to end, through pytester: collection, ids, selection, assertions, options, reports."""
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch  # noqa: F401  imported here once: pytester's in-process runs would otherwise re-import it and crash

from pytest_memerobust.stash import DISABLED_HINT
from pytest_memerobust.run.suite import builtin_suite_paths

QUICK = ["--memerobust-limit=40", "--memerobust-bootstrap=100", "-p", "no:cacheprovider"]

STRICT_SUITE = """
[suite]
name = "strict"
[thresholds]
min_relative_robustness = { accuracy = 1.5 }
[text]
typos = [2]
"""

LENIENT_SUITE = """
[suite]
name = "lenient"
[thresholds]
min_relative_robustness = { accuracy = 0.0, auroc = 0.0, macro_f1 = 0.0 }
max_flip_rate = 1.0
[text]
typos = [1, 5]
[image]
contrast = [2]
[grid]
text = ["typos@1"]
image = ["contrast@2"]
"""


def test_without_a_model_the_suites_skip_with_one_line_saying_how_to_enable_them(pytester):
    pytester.makefile(".toml", **{"memerobust-lenient": LENIENT_SUITE})
    pytester.makepyfile(test_unit="def test_ok():\n    assert 1 + 1 == 2\n")
    result = pytester.runpytest("-rs", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines([f"*{DISABLED_HINT}*"])
    assert "robustness tables" not in result.stdout.str()


def test_builtin_suites_run_from_any_directory_with_readable_ids(pytester):
    result = pytester.runpytest("--memerobust-model=demo", "-v", "-k", "rainbow and typos", "--memerobust-tables=full",
                                *QUICK)
    out = result.stdout.str()
    assert "rainbow-noise::demo::typos-3 " in out
    assert "rainbow-noise::demo::typos-3+imagenet_c-3 " in out
    outcomes = result.parseoutcomes()
    # typos@1-5 alone and typos@3 with each of the three grid image noises; everything else deselected
    assert outcomes.get("passed", 0) + outcomes.get("failed", 0) == 8
    assert "contrast-1 " not in out
    assert "text-only perturbations" in out and "Average dropping rate" in out
    assert "demo weights" in out


def test_failure_message_names_metric_value_threshold_and_interval(pytester):
    pytester.makefile(".toml", **{"memerobust-strict": STRICT_SUITE})
    result = pytester.runpytest("--memerobust-model=demo", "-v", *QUICK, ".")
    result.assert_outcomes(passed=1, failed=1)  # clean has no floor; typos@2 cannot reach 1.5
    result.stdout.fnmatch_lines([
        "*demo under text=typos@2 is below the suite's robustness thresholds:*",
        "*relative robustness of accuracy*>= 1.5000*..*",
    ])
    assert "Traceback" not in result.stdout.str()


def test_reports_hold_every_number_and_are_reproducible(pytester, tmp_path):
    pytester.makefile(".toml", **{"memerobust-lenient": LENIENT_SUITE})
    paths = []
    for run in range(2):
        js, md = tmp_path / f"r{run}.json", tmp_path / f"r{run}.md"
        result = pytester.runpytest("--memerobust-model=demo", *QUICK, f"--memerobust-report={js}",
                                    f"--memerobust-report={md}", ".")
        result.assert_outcomes(passed=5)
        paths.append((js, md))
    report = json.loads(paths[0][0].read_text())
    again = json.loads(paths[1][0].read_text())
    assert report["seed"] == 0 and report["versions"]["numpy"]
    assert report["models"]["demo"]["checkpoint_sha256"] == report["models"]["demo"]["checkpoint_sha256"].lower()
    assert len(report["models"]["demo"]["checkpoint_sha256"]) == 64
    assert report["models"]["demo"]["card"]["architecture"] == "demo"
    assert report["datasets"]["demo"]["n"] == 40 and len(report["datasets"]["demo"]["fingerprint"]) == 64
    group = report["groups"][0]
    conditions = [r["condition"] for r in group["results"]]
    assert conditions == ["text=typos@1", "text=typos@5", "image=contrast@2", "text=typos@1+image=contrast@2"]
    cell = group["results"][-1]
    assert cell["relative_robustness"]["accuracy"] == pytest.approx(
        cell["metrics"]["accuracy"] / group["clean"]["metrics"]["accuracy"])
    assert set(cell) >= {"flip_rate", "flip_rate_ci", "relative_robustness_ci", "predictions_sha256"}
    assert group["grid_summary"]["average_drop"]["accuracy"] == pytest.approx(
        group["clean"]["metrics"]["accuracy"] - cell["metrics"]["accuracy"])
    # same seed, same per-item predictions
    assert [r["predictions_sha256"] for r in report["groups"][0]["results"]] == \
           [r["predictions_sha256"] for r in again["groups"][0]["results"]]
    md = paths[0][1].read_text()
    assert "| Perturbation" in md and "typos@5" in md and "Average drop" in md
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_a_different_seed_changes_perturbed_predictions_only(pytester, tmp_path):
    pytester.makefile(".toml", **{"memerobust-lenient": LENIENT_SUITE})
    digests = []
    for seed in (0, 1):
        js = tmp_path / f"s{seed}.json"
        pytester.runpytest("--memerobust-model=demo", *QUICK, f"--memerobust-seed={seed}",
                           f"--memerobust-report={js}", ".")
        report = json.loads(js.read_text())["groups"][0]
        digests.append((report["clean"]["predictions_sha256"],
                        {r["condition"]: r["predictions_sha256"] for r in report["results"]}))
    assert digests[0][0] == digests[1][0]  # clean does not depend on the seed
    assert digests[0][1]["text=typos@5"] != digests[1][1]["text=typos@5"]


def test_options_can_be_set_in_the_ini_file(pytester):
    pytester.makefile(".toml", **{"memerobust-lenient": LENIENT_SUITE})
    pytester.makeini("[pytest]\nmemerobust_model = demo\nmemerobust_limit = 30\nmemerobust_bootstrap = 50\n")
    result = pytester.runpytest("-p", "no:cacheprovider", ".")
    result.assert_outcomes(passed=5)
    result.stdout.fnmatch_lines(["*memerobust: models demo; data demo; seed 0*first 30 memes*"])


def test_bad_ini_value_is_a_usage_error(pytester):
    pytester.makeini("[pytest]\nmemerobust_limit = zero\n")
    result = pytester.runpytest("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*memerobust_limit*positive integer*zero*"])


def test_unknown_model_lists_the_known_ones(pytester):
    result = pytester.runpytest("--memerobust-model=nope", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*unknown model 'nope'; known: *demo*"])


@pytest.mark.parametrize("option", ["--memerobust-limit=0", "--memerobust-confidence=2",
                                    "--memerobust-report=out.pdf", "--memerobust-robustness-scale=fraction"])
def test_bad_option_values_are_usage_errors(pytester, option):
    result = pytester.runpytest(option, "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert option.split("=")[1] in result.stderr.str()


def test_malformed_suite_is_a_collection_error_naming_the_file(pytester):
    pytester.makefile(".toml", **{"memerobust-bad": "[text]\ntypos = [9]\n"})
    result = pytester.runpytest("--memerobust-model=demo", "-p", "no:cacheprovider", ".")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(["*memerobust-bad.toml: ?text?: 'typos' has no severity ?9?; valid: ?1, 2, 3, 4, 5?"])
    assert "Traceback" not in result.stdout.str()


def test_bad_dataset_fails_the_items_with_the_culprit_named(pytester, tmp_path):
    pytester.makefile(".toml", **{"memerobust-lenient": LENIENT_SUITE})
    data = tmp_path / "memes.csv"
    data.write_text("id,image,text,label\n1,missing.png,hello there,0\n")
    result = pytester.runpytest("--memerobust-model=demo", f"--memerobust-data=csv:{data}", "-p",
                                "no:cacheprovider", "--memerobust-task=label", ".")
    assert result.ret == pytest.ExitCode.USAGE_ERROR  # checked once, before any case runs
    assert result.stderr.str().count("missing.png") == 1, result.stderr.str()
    result.stderr.fnmatch_lines(["ERROR: memerobust:*memes.csv, row 1*image file not found*missing.png*"])
    assert "robustness tables" not in result.stdout.str() and "Traceback" not in result.stdout.str()


def test_memerobust_fixture_shares_the_session_with_the_suites(pytester, tmp_path):
    pytester.makefile(".toml", **{"memerobust-lenient": LENIENT_SUITE})
    pytester.makepyfile(test_mine="""
        def test_typos_keep_most_accuracy(memerobust):
            result = memerobust.evaluate(text="typos", severity=3)
            assert result.condition.id == "text=typos@3"
            assert result.relative_robustness("accuracy") >= 0.5
            assert memerobust.detector is memerobust.using().detector
            assert len(memerobust.dataset) == 40
    """)
    js = tmp_path / "r.json"
    result = pytester.runpytest("--memerobust-model=demo", *QUICK, f"--memerobust-report={js}", ".")
    result.assert_outcomes(passed=6)
    groups = json.loads(js.read_text())["groups"]
    assert [g["suite"] for g in groups] == ["lenient", None]  # the hand-written evaluation has a group of its own
    assert [r["condition"] for r in groups[1]["results"]] == ["text=typos@3"]


def test_memerobust_fixture_skips_without_a_model(pytester):
    pytester.makepyfile(test_mine="def test_x(memerobust):\n    raise AssertionError('must not run')\n")
    result = pytester.runpytest("-rs", "-p", "no:cacheprovider")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines([f"*{DISABLED_HINT}*"])


def test_ablation_suite_runs_each_model_per_channel_and_skips_the_unread_one(pytester):
    result = pytester.runpytest("--memerobust-model=demo", "-v", "-rs", "-k", "ablation and typos or ablation and contrast",
                                "--memerobust-tables=full", *QUICK)
    out = result.stdout.str()
    assert "channel-ablation::demo:text::typos-1 " in out
    assert "channel-ablation::demo:image::contrast-1 " in out
    result.stdout.fnmatch_lines(["*demo:text does not read the image*"])
    assert "channel-ablation: demo:text on demo (n=40, task=hate): text-only perturbations" in out


def test_builtin_suites_are_shipped_inside_the_package():
    paths = builtin_suite_paths()
    assert [p.name for p in paths] == ["channel-ablation.toml", "imagenet-c.toml", "meme-edits.toml",
                                        "rainbow-noise.toml", "test_caption_fuzz.py", "test_evasion_at_k.py",
                                        "test_modality_reliance.py", "test_prompt_invariance.py"]
    assert all(p.is_file() for p in paths)


def test_a_suite_can_limit_the_gap_between_groups(pytester):
    pytester.makefile(".toml", **{"memerobust-groups": """
[suite]
name = "groups"
group = "kind"
[thresholds]
max_group_gap = { accuracy = 0.05 }
[image]
contrast = [5]
"""})
    result = pytester.runpytest("--memerobust-model=demo", "--memerobust-bootstrap=100", "-p", "no:cacheprovider",
                                "--memerobust-tables=full", ".")
    result.assert_outcomes(passed=1, failed=1)  # demo: neutral captions hang on the picture, which contrast hides
    result.stdout.fnmatch_lines(["*relative robustness of accuracy per group*", "*Condition*hostile (n=*neutral*",
                                 "*contrast-5*group gap in rel. accuracy (worst neutral, best *) 0.* > 0.050 (CI *"])


def test_pytest_help_lists_the_options_with_their_percent_signs(tmp_path):
    """argparse %-formats option help: a bare "%" in one made `pytest --help` crash wherever the plugin is installed."""
    run = subprocess.run([sys.executable, "-m", "pytest", "--help", "-p", "no:cacheprovider"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "--memerobust-fail-on" in run.stdout and "minimum effect, e.g. acc:1%;" in run.stdout
