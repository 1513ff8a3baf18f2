"""pytest hooks only: each registers an option, builds the run's session, or hands pytest's call to the library.

What each hook delegates to: option_table.py (the options and the run's Options), collect.py (what is collected and
checked before any case), items.py (suite files, cases and replayed counterexamples as pytest nodes), terminal.py
(what the run prints at its end), run/session.py (the run itself) and run/outputs.py (what it leaves behind);
hookspecs.py declares the pytest_memerobust_* hooks other plugins implement.

pytest loads this module in every run of an environment it is installed in. A run that names no --memerobust-*
option imports none of the library (no numpy, torch or PIL) and leaves the process environment alone: its hooks
return early, and its session is built only if a test asks for it (stash.session_of).
"""
from __future__ import annotations

import pytest

from . import collect, hookspecs, option_table, signals, terminal
from .errors import MemeRobustError
from .signals import Terminated  # noqa: F401  (SIGTERM's interruption, named in tracebacks and docs)
from .stash import DISABLED_HINT, SESSION_KEY, session_of as _session, start_session  # the run's session

SUITE_FOLDER = "suites"  # the built-in suites' folder (run/suite.builtin_suite_dir), in a checkout and installed

REFUSED_KEY = pytest.StashKey[str]()  # why the run was refused (its report paths say so already)


def pytest_addhooks(pluginmanager):
    pluginmanager.add_hookspecs(hookspecs)


def pytest_addoption(parser, pluginmanager):
    option_table.add_options(parser)
    config = pluginmanager.get_plugin("pytestconfig")
    if config is not None:  # a run refused while pytest parses its options never reaches pytest_configure
        config.add_cleanup(lambda: _refused_before_configure(config))


def _refuse(config, why: str, options=None) -> None:
    """A refused run (a usage error, exit 4) leaves at each report path it names a stub saying so and why, never an
    earlier run's report (run/outputs.refused_outputs); once, and not on a pytest-xdist worker."""
    if REFUSED_KEY in config.stash:
        return
    config.stash[REFUSED_KEY] = why
    if hasattr(config, "workerinput"):  # a pytest-xdist worker: the controller refuses the run (pytest_testnodedown)
        return
    if options is None:
        reports = option_table.reports_named(config)
        if not reports:
            return
        from .run.options import Options, OutputOptions

        options = Options(models=("?",), outputs=OutputOptions(reports=reports))  # only reports and header are read
    if not options.outputs.reports or not (options.models or options.probes.replay):  # testing nothing: none written
        return
    import sys

    from .run.outputs import refused_outputs

    for line in refused_outputs(options, why):
        sys.stderr.write(line + "\n")


def _refused_before_configure(config) -> None:
    """A usage error raised while pytest parsed the options (a bad --memerobust-* value) or configured the run."""
    import sys

    error = sys.exc_info()[1]
    if isinstance(error, pytest.UsageError) and SESSION_KEY not in config.stash:
        try:
            lines = str(error).splitlines()  # argparse's: usage, `prog: error: WHY`, the ini file and rootdir
            _refuse(config, next((line.partition("error: ")[2] for line in lines if "error: " in line),
                                 lines[0] if lines else "a usage error"))
        except Exception:  # the usage error is what the user must see
            pass


def _unused(config) -> bool:
    """The run names no --memerobust-* option (command line or ini file) and no argument that may be a built-in
    suite's node id (one that is no path, which collect.choose_tests refuses naming the model it needs)."""
    return not option_table.any_given(config) and all(
        (config.invocation_params.dir / str(arg).partition("::")[0]).exists() for arg in config.args)


def pytest_configure(config):
    config.addinivalue_line("markers", "memerobust: a robustness case collected from a memerobust suite file")
    if _unused(config):
        return
    try:
        session = start_session(config)
    except MemeRobustError as exc:
        _refuse(config, str(exc))
        raise pytest.UsageError(str(exc)) from None
    if collect.choose_tests(config, session):
        signals.stop_on_signals(config)
        terminal.register_logs(config)
        terminal.show_progress(config)


def pytest_unconfigure(config):
    session = config.stash.get(SESSION_KEY, None)
    if session is not None:
        session.close()
        terminal.hide_progress()
    folder = config.stash.get(option_table.SHARD_FOLDER_KEY, None)
    if folder is not None:
        import shutil

        shutil.rmtree(folder, ignore_errors=True)
    signals.stop_handling_signals(config)


def pytest_report_header(config):
    session = config.stash.get(SESSION_KEY, None)
    if session is None:
        return [DISABLED_HINT]
    if session.options.probes.replay is not None:
        return [f"memerobust: replaying the counterexamples of {session.options.probes.replay}"]
    if not session.options.models:
        return [DISABLED_HINT]
    o = session.options
    return [f"memerobust: models {', '.join(o.models)}; data {session.data_spec()}; seed {o.seed}; "
            f"device {o.compute.device}" + (f"; first {o.data.limit} memes" if o.data.limit else "")
            + (f"; a sample of {o.data.sample} memes stratified by label" if o.data.sample else "")]


def pytest_collect_file(file_path, parent):
    if SESSION_KEY in parent.config.stash or (  # a run without a session: only what may be a suite file is looked at
            file_path.suffix == ".toml" and (file_path.name.startswith("memerobust-")
                                             or file_path.parent.name == SUITE_FOLDER)):
        return collect.collect_file(file_path, parent)
    return None


def pytest_pycollect_makemodule(module_path, parent):
    if SESSION_KEY in parent.config.stash or module_path.parent.name == SUITE_FOLDER:
        return collect.make_module(module_path, parent)
    return None


@pytest.fixture(scope="session")
def memerobust_session(request):
    """The run's shared RobustnessSession: loaded detectors, datasets and results, shared with the suites."""
    return _session(request.config)


@pytest.fixture
def memerobust(memerobust_session):
    """Evaluate conditions in a hand-written test: `memerobust.evaluate(text="typos", severity=3)`."""
    from .probe import Probe

    if not memerobust_session.options.models:
        pytest.skip(DISABLED_HINT)
    return Probe(memerobust_session, memerobust_session.options.models[0])


@pytest.fixture
def memerobust_detector(memerobust):
    return memerobust.detector


@pytest.fixture
def memerobust_dataset(memerobust):
    return memerobust.dataset


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(session, config, items):
    if SESSION_KEY not in config.stash:  # no session, so no robustness test was collected
        return
    try:
        collect.modify_items(config, items)
    except pytest.UsageError as exc:  # refused before any case: the report paths say why
        _refuse(config, str(exc), _session(config).options)
        raise


def pytest_runtest_setup(item):
    rs = item.config.stash.get(SESSION_KEY, None)
    if rs is not None:
        rs.ordering.position = rs.ordering.positions.get(item.nodeid, rs.ordering.position)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    terminal.annotate_report(item, call, report)
    if SESSION_KEY in item.config.stash:
        from .items import stop_when_endpoint_down  # (lazily: items imports numpy)

        stop_when_endpoint_down(item, call)
    return report


@pytest.hookimpl(specname="pytest_terminal_summary", wrapper=True, tryfirst=True)
def pytest_terminal_summary_compact(terminalreporter, config):
    with terminal.robustness_failures_left_out(terminalreporter, config):
        return (yield)


def pytest_terminal_summary(terminalreporter, config):
    terminal.summary(terminalreporter, config)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """On the pytest-xdist controller: merge a finished worker's results, so the tables cover the whole grid; a
    worker that refused the run (a usage error at its collection) refuses it here too, once (it was an INTERNALERROR
    of pytest-xdist, exit 3, that left the report paths as they were)."""
    refused = getattr(node, "workeroutput", {}).get("memerobust_refused")
    if refused:
        raise pytest.UsageError(refused)
    wire = getattr(node, "workeroutput", {}).get("memerobust")
    if wire is not None:
        from .run.workers import merge_wire

        merge_wire(_session(node.config), wire)


@pytest.hookimpl(specname="pytest_sessionfinish", wrapper=True, tryfirst=True)
def pytest_sessionfinish_ends_the_workers(session):
    """The run's worker processes end with the session, after its summary, even when the session's last words
    fail (a closed pipe: the job's log reader killed). Without this, such a run waited at exit for its workers to
    finish every shard they held."""
    signals.run_ends(session.config)  # a signal from now on ends the run at once
    try:
        return (yield)
    finally:
        rs = session.config.stash.get(SESSION_KEY, None)
        if rs is not None:
            rs.close()


def pytest_sessionfinish(session, exitstatus):
    rs = session.config.stash.get(SESSION_KEY, None)
    if rs is None:
        return
    if hasattr(session.config, "workeroutput"):  # a pytest-xdist worker: the controller reports
        from .run.workers import to_wire

        session.config.workeroutput["memerobust"] = to_wire(rs)
        session.config.workeroutput["memerobust_refused"] = session.config.stash.get(REFUSED_KEY, None)
        return
    if session.config.option.collectonly:  # nothing ran: no verdict, no report that claims one
        return
    if exitstatus == pytest.ExitCode.USAGE_ERROR:  # refused (pytest's own usage errors too): the reports say so
        import sys

        error = sys.exc_info()[1]
        return _refuse(session.config, str(error) if error is not None else "a usage error", rs.options)
    if rs.options.models and rs.options.probes.replay is None:
        from .judge.verdict import run_verdict
        from .run.gate import baseline_conditions

        rs.outcomes.case_records = terminal.case_records(session.config)
        rs.outcomes.verdict = run_verdict(rs.outcomes.case_records, gate=rs.gate,
                                          baseline=rs.options.judging.baseline.path,
                                          baseline_conditions=baseline_conditions(rs),
                                          interrupted=exitstatus == pytest.ExitCode.INTERRUPTED,
                                          collected=collect.collected_count(session))
        from .run.detectors import detectors_verdict

        detectors = detectors_verdict(rs)  # several detectors on the same memes: which loses less
        if detectors is not None:
            rs.outcomes.verdict["detectors"] = detectors
        if rs.options.judging.baseline.path is not None and exitstatus != pytest.ExitCode.INTERRUPTED:
            import copy

            session.config.hook.pytest_memerobust_gate(
                comparisons=copy.deepcopy([c for r in rs.outcomes.case_records for c in r["regressions"]]),
                config=session.config)
    if not (rs.outcomes.results or rs.analyses or rs.outcomes.case_records) \
            and exitstatus != pytest.ExitCode.INTERRUPTED:
        return  # nothing ran (no case selected): no report claims anything
    from .run.outputs import write_outputs
    from .run.replay import LOG_PLUGIN

    log = session.config.pluginmanager.get_plugin(LOG_PLUGIN)  # the failing cases' counterexamples
    session.config.stash[terminal.REPORT_LINES_KEY] = write_outputs(
        rs, interrupted=exitstatus == pytest.ExitCode.INTERRUPTED, root=session.config.rootpath,
        counterexample_cases=log.cases if log is not None else None, write=terminal.terminal_line(session.config),
        amend_report=lambda report: session.config.hook.pytest_memerobust_report(report=report, config=session.config))
