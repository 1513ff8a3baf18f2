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
    result = pytester.runpytest(*QUICK, "--memerobust-baseline=b.json", "--memerobust-gate-error=fwer:1%",
                                "--memerobust-gate-resamples=20", ".")
    _usage_error(result, "--memerobust-gate-resamples=20: the gate's smallest p-value is 1/21")


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


# --- signals and refusals: what the report paths hold ----------------------------------------------------------------

SLOW_END = """
import os
import time
from pathlib import Path

import pytest


def pytest_configure(config):  # every process of the run (pytest-xdist's workers too) leaves its id
    Path(f"pid-{os.getpid()}").touch()


def pytest_runtest_call(item):  # the first case runs long enough to be interrupted, the others at once
    if not Path("case-started").exists():
        Path("case-started").write_text(item.nodeid)
        time.sleep(1.0)


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session):  # a slow shutdown, before the reports are written (the pool's took 6.8 s)
    Path("end-started").touch()
    time.sleep(5.0)
    Path("end-finished").touch()
"""


def _signals_as_in_a_terminal() -> None:
    """A test run started in the background ignores SIGINT, and so would the child (see test_bad_run_corpus)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _wait_for(path: Path, process, seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)


def _ended(pid: int) -> bool:
    return not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split(") ")[1][0] in "ZX"


@pytest.mark.parametrize("first, second, executor", [(signal.SIGINT, signal.SIGTERM, []),
                                                     (signal.SIGINT, signal.SIGINT, []),
                                                     (None, signal.SIGTERM, []),
                                                     (signal.SIGINT, signal.SIGTERM, ["-n", "2"])])
def test_a_second_signal_during_the_shutdown_ends_the_run_at_once_with_no_stale_report(tmp_path, first, second,
                                                                                        executor):
    """Ctrl-C twice, or SIGINT then SIGTERM as GitHub Actions sends them, gave 200-300 lines of tracebacks, no
    INTERRUPTED line, and left an earlier run's passing report at the report path. Now the first signal replaces
    the reports at once, and a signal during the run's end (the second; or a first one once the run's end began)
    ends it at once: one INTERRUPTED line, exit 2, the slow end never finished, no process of the run left (with
    -n 2 the workers went on with their cases after the controller had gone)."""
    (tmp_path / "slowend.py").write_text(SLOW_END)
    for name in ("r.json", "r.md"):
        (tmp_path / name).write_text(STALE)
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    process = subprocess.Popen([sys.executable, "-m", "pytest", *QUICK, "-p", "slowend", "--memerobust-report=r.json",
                                "--memerobust-report=r.md", "-k", "rainbow and typos", *executor], cwd=tmp_path,
                               env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               preexec_fn=_signals_as_in_a_terminal)
    try:
        _wait_for(tmp_path / "case-started", process)
        if first is not None:
            process.send_signal(first)
            time.sleep(0.5)
        _wait_for(tmp_path / "end-started", process)
        process.send_signal(second)
        out, _ = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == pytest.ExitCode.INTERRUPTED, out[-3000:]
    assert "Traceback" not in out and "Error" not in out.replace("KeyboardInterrupt", ""), out[-3000:]
    lines = out.rstrip().splitlines()
    ran = f"{0 if first else 8} {'of 8 cases' if not executor else 'cases'} ran"  # -n 2: the count stays unknown
    assert lines[-1] == f"INTERRUPTED: {ran}; no verdict", out[-3000:]
    assert lines[-3].startswith(f"memerobust: {'a second signal' if first else signal.Signals(second).name}")
    assert not (tmp_path / "end-finished").exists()  # it did not wait for the slow end
    pids = [int(p.name.removeprefix("pid-")) for p in tmp_path.glob("pid-*")]
    deadline = time.monotonic() + 5  # a process killed a moment ago may still be on its way out
    while not all(map(_ended, pids)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(pids) == 1 + 2 * bool(executor) and [pid for pid in pids if not _ended(pid)] == [], pids
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["verdict"]["interrupted"] is True and report["verdict"]["passed"] is False
    assert report["groups"] == [] and (tmp_path / "r.md").read_text().count("INTERRUPTED") >= 1


def _stale_reports(folder: Path) -> list[str]:
    names = ["r.json", "r.md", "r.html"]
    for name in names:
        (folder / name).write_text(STALE)
    return [f"--memerobust-report={name}" for name in names]


def _refused_reports(folder: Path, says: str) -> None:
    """Each report path holds the stub of a refused run, with its reason: never the earlier passing report."""
    report = json.loads((folder / "r.json").read_text())
    assert report["verdict"]["passed"] is False and says in report["verdict"]["refused"], report["verdict"]
    assert report["groups"] == [] and report["cases"] == []
    for name in ("r.md", "r.html"):
        text = (folder / name).read_text()
        assert "refused" in text and text != STALE, text[:500]
        assert "gate:" not in text and "no case ran" in text, text[:1500]  # no gate judged it: none is named


EMPTY_PICTURES = "id,text,image,label\na,one caption,a.png,0\nb,another caption,b.png,1\n"


@pytest.mark.parametrize("kind", ["empty_pictures", "empty_pictures_xdist", "bad_option_value", "bad_baseline",
                                  "gate_without_baseline"])
def test_a_refused_run_replaces_the_old_report_with_the_reason(pytester, kind):
    """A usage error (exit 4) left an earlier `{"verdict": {"passed": true}}` at every report path; a CI step that
    archives the report archived a stale pass. Refused while pytest parses the options, while the run is configured
    or at collection, the run now leaves a stub that says it was refused and why. With -n 2 the workers' refusal
    was pytest-xdist's INTERNALERROR (exit 3, a traceback); now it is the run's one usage error."""
    pytester.makefile(".toml", **{"memerobust-edge": SUITE})
    reports = _stale_reports(pytester.path)
    empty = ["--memerobust-data=csv:memes.csv", "--memerobust-task=label"]
    extra, says = {
        "empty_pictures": (empty, "memes.csv, row 1 (line 2): unreadable image a.png"),
        "empty_pictures_xdist": ([*empty, "-n", "2"], "memes.csv, row 1 (line 2): unreadable image a.png"),
        "bad_option_value": (["--memerobust-bootstrap=many"], "--memerobust-bootstrap"),
        "bad_baseline": (["--memerobust-baseline=base.json"], "base.json is not valid JSON"),
        "gate_without_baseline": (["--memerobust-gate=non-inferiority"], "needs --memerobust-baseline"),
    }[kind]
    (pytester.path / "memes.csv").write_text(EMPTY_PICTURES)
    for name in ("a.png", "b.png"):
        (pytester.path / name).write_bytes(b"")
    (pytester.path / "base.json").write_text("{oops")
    result = pytester.runpytest(*QUICK, *reports, *extra, ".")
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str()[-2000:] + result.stderr.str()[-2000:]
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()
    _refused_reports(pytester.path, says)
    assert "memerobust: refused: r.json holds only the reason, no results" in result.stderr.str()


def test_a_run_that_names_no_model_leaves_the_reports_alone_when_refused(pytester):
    """A unit-test run (no --memerobust-model) writes no report, refused or not."""
    reports = _stale_reports(pytester.path)
    result = pytester.runpytest("--memerobust-bootstrap=many", *reports)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert (pytester.path / "r.json").read_text() == STALE


# --- user suites --------------------------------------------------------------------------------------------------


def test_verbose_prints_user_suite_ids_that_re_run(pytester):
    """`-v` printed `suites/memerobust-mine::toml::demo::clean` (pytest turns the dots of an item's domain into `::`
    when the domain is the node id); pasted back, that id was `file or directory not found`."""
    pytester.mkdir("suites")
    (pytester.path / "suites" / "memerobust-mine.toml").write_text(SUITE)
    run = pytester.runpytest(*QUICK, "-v", "suites")
    printed = [line.split()[0] for line in run.stdout.lines if line.endswith("]") and " PASSED " in line]
    assert printed == ["suites/memerobust-mine.toml::demo::clean", "suites/memerobust-mine.toml::demo::typos-2"]
    again = pytester.runpytest(*QUICK, "-v", printed[1])
    again.assert_outcomes(passed=1)
    assert any(line.startswith(printed[1] + " PASSED") for line in again.stdout.lines)


def test_an_unknown_transfer_source_is_one_usage_error_at_collection(pytester):
    """`transfer_from = "nope"` failed each transfer case at run time ("fail for sure", exit 1)."""
    suite = SUITE.replace('name = "edge"', 'name = "edge"\ntransfer_from = "nope"') + "hotflip = [1]\n"
    (pytester.path / "memerobust-edge.toml").write_text(suite)
    result = pytester.runpytest(*QUICK, ".")
    _usage_error(result, "memerobust-edge.toml: [suite].transfer_from = 'nope': unknown model 'nope'; known: demo")


@pytest.mark.parametrize("out, allowed", [("exports/typos", True), ("../exports", True), ("../../elsewhere", False),
                                          ("/tmp/elsewhere", False), ("link/inside", False)])
def test_a_suites_export_stays_inside_its_folder_or_the_project(tmp_path, out, allowed):
    """`[export] out` could name any folder on disk (an absolute path, `..` past the project, a link out of it),
    and the run would write there, replacing an earlier export."""
    from pytest_memerobust.errors import SuiteError
    from pytest_memerobust.run.suite import load_suite

    project, outside = tmp_path / "project", tmp_path / "outside"
    (project / "suites").mkdir(parents=True)
    outside.mkdir()
    (project / "suites" / "link").symlink_to(outside)
    path = project / "suites" / "memerobust-x.toml"
    path.write_text(SUITE + f'[export]\nout = "{out}"\n')
    if allowed:
        pytest.importorskip("datasets")  # the [export] extra, checked once the folder is
        assert load_suite(path, root=project).export["out"] == str((path.parent / out).resolve())
    else:
        with pytest.raises(SuiteError, match=r"\[export\]\.out = .* leads outside the suite's folder and the project"):
            load_suite(path, root=project)
    if out == "../exports":  # without a project, only the suite's own folder
        with pytest.raises(SuiteError, match="leads outside the suite's folder: "):
            load_suite(path)
    assert [p.name for p in outside.iterdir()] == []
