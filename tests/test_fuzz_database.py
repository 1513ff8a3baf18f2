"""The shipped caption-fuzzing suite saves a failure to Hypothesis' example database and replays it first on the next
run (README), while a fresh database still gives the seeded search's verdict."""
import shutil

import pytest
import torch  # noqa: F401  imported here once: pytester's in-process runs would otherwise re-import it and crash
from hypothesis import settings

from pytest_memerobust.detectors import load_detector
from pytest_memerobust.fuzz import CaptionFuzzer
from pytest_memerobust.run.suite import builtin_suite_dir

# memeblip2-tda flips on a swap in the demo memes; demo passes with this budget. -v: the failure in full.
ARGS = ["-v", "--memerobust-limit=40", "--memerobust-fuzz-examples=30", "-p", "no:cacheprovider",
        "test_caption_fuzz.py"]

# The database the suite uses is the active Hypothesis profile's: point it at a directory of the test's choosing
# (and away from the checkout's .hypothesis/, or the CI profile's none).
CONFTEST = """
import os
from hypothesis import settings
from hypothesis.database import DirectoryBasedExampleDatabase

settings.register_profile("memerobust-fuzz-database-test",
                          database=DirectoryBasedExampleDatabase(os.environ["MEMEROBUST_TEST_FUZZ_DB"]))
settings.load_profile("memerobust-fuzz-database-test")
"""


@pytest.fixture(scope="module")
def warm_imports():
    """Loading the detectors once here keeps the modules they import (transformers' BLIP-2...) for the whole session;
    imported first inside pytester's in-process runs, they would be dropped and imported again by every run."""
    for name in ("memeblip2-tda", "demo"):
        load_detector(name)


@pytest.fixture
def fuzz_run(pytester, monkeypatch, warm_imports):
    """run(database, model, seed) -> (pytester result, every FlipCheck the suite made, in order)."""
    shutil.copy(builtin_suite_dir() / "test_caption_fuzz.py", pytester.path / "test_caption_fuzz.py")
    pytester.makeconftest(CONFTEST)
    checks, real_check = [], CaptionFuzzer.check

    def recording_check(self, index, edits):
        checks.append(real_check(self, index, edits))
        return checks[-1]

    # Recording the checks shows which example ran first, i.e. whether it came from the database.
    monkeypatch.setattr(CaptionFuzzer, "check", recording_check)

    def run(database, model="memeblip2-tda", seed=0):
        checks.clear()
        monkeypatch.setenv("MEMEROBUST_TEST_FUZZ_DB", str(database))
        result = pytester.runpytest(f"--memerobust-model={model}", f"--memerobust-seed={seed}", *ARGS)
        return result, list(checks)

    profile = settings.get_current_profile_name()
    yield run
    settings.load_profile(profile)  # in-process runs load the conftest's profile into this process too


def falsifying(result):
    """The shrunk failure as the suite reports it: its original and edited caption and its edits."""
    lines = [line.lstrip(" E") for line in result.stdout.lines]
    return [next((line for line in lines if line.startswith(field)), None)
            for field in ("original:", "edited:", "edits:")]


def saved_examples(database):
    return [p for p in database.rglob("*") if p.is_file()] if database.exists() else []


def test_a_failure_is_saved_and_replayed_first_on_the_next_run(fuzz_run, tmp_path):
    database = tmp_path / "db"
    first, first_checks = fuzz_run(database)
    first.assert_outcomes(failed=1)
    example = falsifying(first)
    assert None not in example, first.stdout.str()
    assert saved_examples(database), "the failure was not saved to the example database"
    # A fresh search does not start with the failure, so seeing it first next time means it was replayed.
    assert not first_checks[0].flipped

    second, second_checks = fuzz_run(database)
    second.assert_outcomes(failed=1)
    assert falsifying(second) == example
    assert second_checks[0].flipped and f"edited:   {second_checks[0].edited!r}" in example


def test_fresh_databases_and_one_seed_give_one_search_and_one_verdict(fuzz_run, tmp_path):
    one, one_checks = fuzz_run(tmp_path / "a")
    two, two_checks = fuzz_run(tmp_path / "b")
    one.assert_outcomes(failed=1)
    two.assert_outcomes(failed=1)
    assert falsifying(one) == falsifying(two) and None not in falsifying(one)
    assert [(c.caption, c.edited) for c in one_checks] == [(c.caption, c.edited) for c in two_checks]


def test_another_models_passing_run_keeps_the_saved_failure(fuzz_run, tmp_path):
    """Replay deletes examples that no longer fail: each model needs its own database key."""
    database = tmp_path / "db"
    fuzz_run(database)[0].assert_outcomes(failed=1)
    fuzz_run(database, model="demo")[0].assert_outcomes(passed=1)
    again, checks = fuzz_run(database)
    again.assert_outcomes(failed=1)
    assert checks[0].flipped
