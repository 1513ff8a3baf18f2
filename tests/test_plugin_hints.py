"""What the plugin tells a user who re-runs a printed case id without a model, and what its help says; the session
is reachable below the plugin (stash.session_of)."""
import re

import pytest
import torch  # noqa: F401  imported here once: pytester's in-process runs would otherwise re-import it and crash

from pytest_memerobust.run.suite import builtin_suite_model_hint


def test_a_printed_builtin_case_id_without_a_model_says_it_needs_one(pytester):
    case = "rainbow-noise::memeblip2-tda::typos-3"
    result = pytester.runpytest(case, "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str()
    assert "file or directory not found" not in err
    assert (f"ERROR: '{case}' is a case of the built-in suite 'rainbow-noise': built-in suite ids need "
            f"--memerobust-model=NAME; run pytest --memerobust-model=memeblip2-tda '{case}'") in err


def test_the_hint_covers_toml_and_python_suites_and_nothing_else(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert "--memerobust-model=demo 'rainbow-noise.toml::demo::clean'" in \
        builtin_suite_model_hint("rainbow-noise.toml::demo::clean")
    python = builtin_suite_model_hint("test_caption_fuzz.py::test_fuzz")
    assert "built-in suite 'test_caption_fuzz.py'" in python and "--memerobust-model=NAME" in python
    assert builtin_suite_model_hint("tests/test_x.py::test_y") is None
    assert builtin_suite_model_hint("no-such-suite::demo::clean") is None
    (tmp_path / "rainbow-noise").mkdir()  # a path of the user's that exists wins over the built-in suite's name
    assert builtin_suite_model_hint("rainbow-noise::demo::clean") is None


def test_report_option_help_names_every_report_format(pytester):
    result = pytester.runpytest("--help")
    text = " ".join(result.stdout.str().split())  # argparse wraps the help
    report = re.search(r"--memerobust-report=MEMEROBUST_REPORT (.*?) --memerobust-", text).group(1)
    assert ".json, .md or .html" in report


def test_collectors_below_the_plugin_reach_the_session_through_the_stash(pytester):
    pytester.makepyfile(test_stash="""
        from pytest_memerobust.stash import session_of

        def test_same(request, memerobust_session):
            assert session_of(request.config) is memerobust_session
    """)
    pytester.runpytest("-p", "no:cacheprovider", "test_stash.py").assert_outcomes(passed=1)
