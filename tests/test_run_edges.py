"""The run's edges (issue 50): what a run refuses before any case (a gate that cannot judge, a baseline that is not
this run's, a cache it cannot write), what a refused or twice-signalled run leaves at its report paths, and the
user suites' edges (an unknown transfer source, an export outside the project, node ids that re-run)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch  # noqa: F401  (imported once, before pytester runs: see tests/conftest.py)

QUICK = ["--memerobust-model=demo", "--memerobust-limit=16", "--memerobust-bootstrap=20", "-p", "no:cacheprovider"]
SUITE = """
[suite]
name = "edge"
[text]
typos = [2]
"""
STALE = '{"verdict": {"passed": true}}\n'  # an earlier run's passing report, as a CI step would archive it


def _usage_error(result, *says: str) -> str:
    """The run ended with one usage error (exit 4) naming `says`, before any case ran."""
    out, err = result.stdout.str(), result.stderr.str()
    assert result.ret == pytest.ExitCode.USAGE_ERROR, out[-2000:] + err[-2000:]
    assert "Traceback" not in out + err and " passed" not in out and " failed" not in out, out[-2000:]
    for text in says:
        assert err.count(text) == 1, err[-2000:]
    return err


# --- the gate ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("baseline", [None, ""])
def test_non_inferiority_without_a_baseline_is_one_usage_error(pytester, baseline):
    """An unset CI variable (`--memerobust-baseline=$BASE`, or the option left out) ended PASSED, exit 0."""
    pytester.makefile(".toml", **{"memerobust-edge": SUITE})
    extra = [] if baseline is None else [f"--memerobust-baseline={baseline}"]
    result = pytester.runpytest(*QUICK, "--memerobust-gate=non-inferiority", *extra, ".")
    _usage_error(result, "--memerobust-baseline" if baseline is None else "expected a .json file, got ''")


def test_a_baseline_whose_labels_are_not_the_runs_is_one_usage_error_before_any_case(pytester):
    """Flipped labels in a baseline failed every case with ConfigError (exit 1); now one usage error naming it."""
    pytester.makefile(".toml", **{"memerobust-edge": SUITE})
    pytester.runpytest(*QUICK, "--memerobust-save-baseline=b.json", ".").assert_outcomes(passed=2)
    data = json.loads((pytester.path / "b.json").read_text())
    for by_spec in data["results"].values():
        for by_condition in by_spec.values():
            for cell in by_condition.values():
                cell["y"] = [1 - y for y in cell["y"]]
    (pytester.path / "flipped.json").write_text(json.dumps(data))
    result = pytester.runpytest(*QUICK, "--memerobust-baseline=flipped.json", ".")
    _usage_error(result, "baseline flipped.json holds other labels for demo on 'demo' than this run's data "
                         "(2 conditions, first clean: 16 labels against 16, the first difference at meme 0)")
    assert pytester.runpytest(*QUICK, "--memerobust-baseline=b.json", ".").ret == 0  # its own labels: gated


def test_a_gate_that_could_never_fail_is_one_usage_error(pytester):
    pytester.makefile(".toml", **{"memerobust-edge": SUITE})
    pytester.runpytest(*QUICK, "--memerobust-save-baseline=b.json", ".").assert_outcomes(passed=2)
    result = pytester.runpytest(*QUICK, "--memerobust-baseline=b.json", "--memerobust-gate-error=fwer:1%", ".")
    _usage_error(result, "--memerobust-bootstrap=20: the gate's smallest p-value is 1/21")


@pytest.mark.parametrize("option, says", [("--memerobust-gate-error=holm:", "bad level in 'holm:'"),
                                          ("--memerobust-fail-on=acc:", "bad effect size in 'acc:'")])
def test_a_gate_option_whose_number_is_left_empty_is_one_usage_error(pytester, option, says):
    """`holm:` was taken as holm at 5%, `acc:` as no effect."""
    pytester.makefile(".toml", **{"memerobust-edge": SUITE})
    _usage_error(pytester.runpytest(*QUICK, option, "."), says)


# --- the cache dir ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("executor", [[], ["--memerobust-workers=2"], ["-n", "2"]])
def test_a_cache_dir_that_cannot_be_written_is_one_usage_error_on_every_executor(pytester, executor):
    """A cache dir under a regular file cannot be written, by root too (a permission bit would not stop root; a
    read-only filesystem is caught the same way, by the write probe). In this process the run passed without a word,
    on the pool it went on memory-only while its note claimed the cache, with -n 2 every case failed with OSError."""
    pytester.makefile(".toml", **{"memerobust-edge": SUITE})
    (pytester.path / "afile").write_text("a file, not a folder")
    result = pytester.runpytest(*QUICK, "--memerobust-cache-dir=afile/cache", *executor, ".")
    _usage_error(result, "--memerobust-cache-dir 'afile/cache' cannot be written (NotADirectoryError")
    assert (pytester.path / "afile").read_text() == "a file, not a folder"


def test_pytests_own_cache_that_cannot_be_created_is_one_usage_error(pytester):
    pytester.makefile(".toml", **{"memerobust-edge": SUITE})
    (pytester.path / "afile").write_text("a file, not a folder")
    result = pytester.runpytest(*QUICK[:-2], "-o", "cache_dir=afile/pytest-cache", ".")
    _usage_error(result, "the cache dir (pytest's cache) cannot be created")


def test_the_write_probe_leaves_nothing_in_a_writable_cache_dir(tmp_path):
    from pytest_memerobust.options import check_writable_folder

    check_writable_folder(tmp_path / "new" / "cache", "--memerobust-cache-dir")
    assert [p.name for p in tmp_path.rglob("*")] == ["new", "cache"]
