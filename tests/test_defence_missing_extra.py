"""A suite's [defence] whose extra is not installed is one usage error at the start of the run, naming the suite, the
defence, the extra and the install command, instead of every defended case skipped with no table."""
import sys

import pytest
import torch  # noqa: F401  imported here once: pytester's in-process runs would otherwise re-import it and crash

from pytest_memerobust.detectors import defences
from pytest_memerobust.errors import BackendMissing

QUICK = ["--memerobust-limit=20", "--memerobust-bootstrap=50", "-p", "no:cacheprovider"]

SUITE = """
[suite]
name = "spelled"
[thresholds]
min_relative_robustness = { accuracy = 0.0 }
[text]
typos = [1]
[defence]
text = ["nfkc", "spelling"]
"""

MESSAGE = ("memerobust-spelled.toml: the defence 'nfkc+spelling' cannot run here: the 'spelling' normaliser needs "
           "pyspellchecker, which the [defences] extra installs: pip install 'pytest-memerobust[defences]'")


@pytest.fixture
def no_spellchecker(monkeypatch):
    """pyspellchecker not importable, whether or not this machine has it."""
    monkeypatch.setitem(sys.modules, "spellchecker", None)
    defences._spell_checker.cache_clear()
    yield
    defences._spell_checker.cache_clear()


def test_a_defence_checks_its_normalisers_can_run(no_spellchecker):
    defences.Defence.parse("nfkc+confusables").check()  # nothing missing: no error
    with pytest.raises(BackendMissing) as caught:
        defences.Defence.parse("nfkc+spelling").check()
    assert str(caught.value) == ("the defence 'nfkc+spelling' cannot run here: the 'spelling' normaliser needs "
                                 "pyspellchecker, which the [defences] extra installs: pip install "
                                 "'pytest-memerobust[defences]' (its English dictionary ships inside the wheel)")
    with pytest.raises(BackendMissing, match="memerobust-x.toml: the defence 'spelling'"):
        defences.check_defences([(None, "a.toml"), ("nfkc", "b.toml"), ("spelling", "memerobust-x.toml")])


def test_a_suite_whose_defence_lacks_its_extra_is_one_usage_error_before_any_case(pytester, no_spellchecker):
    pytester.makefile(".toml", **{"memerobust-spelled": SUITE})
    result = pytester.runpytest("--memerobust-model=demo", *QUICK, "memerobust-spelled.toml")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str()
    assert f"ERROR: memerobust: {MESSAGE}" in err
    assert "or leave out the defended cases (e.g. -k 'not defended')" in err
    out = result.stdout.str()
    assert "passed" not in out and "skipped" not in out and "failed" not in out


def test_deselecting_the_defended_cases_runs_the_rest(pytester, no_spellchecker):
    pytester.makefile(".toml", **{"memerobust-spelled": SUITE})
    result = pytester.runpytest("--memerobust-model=demo", *QUICK, "memerobust-spelled.toml", "-k", "not defended")
    result.assert_outcomes(passed=2, deselected=2)  # clean and typos-1; their defended twins deselected
