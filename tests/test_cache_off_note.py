"""Issue 49: `-p no:cacheprovider` silently dropped the feature cache and the counterexamples. A run without a cache
dir says so in one line of its notes (options.uncached_note; the plugin adds it to the run's notes)."""
import dataclasses
from pathlib import Path

from pytest_memerobust.options import uncached_note
from pytest_memerobust.run.options import (BaselineOptions, CacheOptions, ComputeOptions, JudgingOptions, Options,
                                          OutputOptions)


def test_a_run_without_a_cache_dir_says_in_one_line_what_is_off_and_why():
    note = uncached_note(Options(models=("demo",), compute=ComputeOptions(cache=CacheOptions(folder=None))))
    assert note is not None and "\n" not in note
    assert note.startswith("no cache dir: pytest's cache provider is off (-p no:cacheprovider) and no "
                           "--memerobust-cache-dir is given")
    assert "encoded features and fitted attacks are kept in memory for this run only" in note
    assert note.endswith("; not written: the failing cases' counterexamples (--memerobust-cache-dir=DIR keeps them)")


def test_the_note_names_only_what_is_off():
    base = Options(models=("demo",), compute=ComputeOptions(cache=CacheOptions(folder=None)))
    asked = uncached_note(Options(models=("demo",), compute=ComputeOptions(cache=CacheOptions(features=False)),
                                  outputs=OutputOptions(counterexamples=Path("cx.json"))))
    assert "encoded features" not in asked and "counterexamples" not in asked and "fitted attacks are kept" in asked
    gated = uncached_note(dataclasses.replace(base, judging=JudgingOptions(baseline=BaselineOptions(Path("b.json")))))
    assert "not written: the failing cases' counterexamples and the flip ledger (" in gated
    assert uncached_note(dataclasses.replace(base, compute=ComputeOptions(cache=CacheOptions(Path("cache"))))) is None
    assert uncached_note(dataclasses.replace(base, models=())) is None


def test_a_pytest_run_with_the_cache_provider_off_prints_the_note(pytester):
    from test_plugin import LENIENT_SUITE

    pytester.makefile(".toml", **{"memerobust-lenient": LENIENT_SUITE})
    off = pytester.runpytest("--memerobust-model=demo", "--memerobust-limit=8", "--memerobust-bootstrap=50",
                             "-p", "no:cacheprovider", ".")
    assert "no cache dir: pytest's cache provider is off (-p no:cacheprovider)" in off.stdout.str()
    on = pytester.runpytest("--memerobust-model=demo", "--memerobust-limit=8", "--memerobust-bootstrap=50", ".")
    assert "no cache dir" not in on.stdout.str()
