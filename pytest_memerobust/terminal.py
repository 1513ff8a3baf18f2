"""What the run says at its end, in pytest's terminal: the robustness tables (per-family roll-ups by default), what
was written, one line per failing robustness test instead of pytest's tracebacks, the gate's comparison and the
verdict. Also the log of the robustness tests' reports that the verdict and the reports' case records are built
from. The pytest face: plugin.py's summary and report hooks call these; the numbers come from the session, the
report and the judge, never from here."""
from __future__ import annotations

from contextlib import contextmanager
from typing import Callable

import pytest

from .collect import is_robustness_test
from .stash import SESSION_KEY, session_of as _session

OUTCOMES_KEY = pytest.StashKey[list]()  # the robustness tests' outcomes, read once all have run
REPORT_LINES_KEY = pytest.StashKey[list]()  # what pytest_sessionfinish wrote (and could not), for the summary


class CaseLog:
    """The robustness tests' reports as they arrive (on a pytest-xdist controller too): what the run's verdict and
    the reports' case records are built from."""

    def __init__(self):
        self.reports = []

    def pytest_runtest_logreport(self, report):
        if is_robustness_test(report) and (report.when == "call" or report.outcome != "passed"):
            self.reports.append(report)


CASE_LOG = "memerobust-case-log"


def register_logs(config) -> None:
    """The plugins that gather, as reports arrive (on a pytest-xdist controller too), the failing cases'
    counterexamples for the manifest and every case's verdict record for the reports."""
    from .run.replay import LOG_PLUGIN, CounterexampleLog

    config.pluginmanager.register(CounterexampleLog(), LOG_PLUGIN)  # failing cases' memes, for the manifest
    config.pluginmanager.register(CaseLog(), CASE_LOG)  # every case's verdict record, for the reports


def terminal_line(config) -> Callable[[str], None]:
    """A writer of whole lines on pytest's terminal, for what pytest_sessionfinish writes (the saved baseline's
    line, the reports'): after -q's progress dots it starts a new line first; without the terminal plugin it
    prints."""
    if config.pluginmanager.get_plugin("terminalreporter") is None:
        return print
    writer = config.get_terminal_writer()

    def write(line: str) -> None:
        if writer.width_of_current_line:
            writer.line()
        writer.line(line)

    return write


class PastCapture:
    """A stream to the user's terminal through pytest's capture, for the engine's progress bars: each write turns
    the capture off for its duration (as pytest's own live logging does) and starts on a line of its own, after the
    suite's progress dots; a bar ends by clearing its line, and pytest goes on writing there."""

    def __init__(self, config, capture):
        self.config, self.capture = config, capture

    def write(self, text: str) -> int:
        import sys

        with self.capture.global_and_fixture_disabled():
            reporter = self.config.pluginmanager.getplugin("terminalreporter")  # registered after our configure
            if reporter is not None:
                reporter.ensure_newline()
            sys.stderr.write(text)
            sys.stderr.flush()
        return len(text)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        import sys

        with self.capture.global_and_fixture_disabled():
            return sys.stderr.isatty()


def show_progress(config) -> None:
    """The engine's progress bars (the shard pass, attacks, encodes) on the terminal, past pytest's capture; silent
    where standard error is not a terminal (CI logs, pytest-xdist workers)."""
    from .engine.progress import show_progress_on

    capture = config.pluginmanager.getplugin("capturemanager")
    if capture is not None:
        show_progress_on(PastCapture(config, capture))


def hide_progress() -> None:
    from .engine.progress import show_progress_on

    show_progress_on(None)


def _outcome(report) -> str:
    return "xfailed" if hasattr(report, "wasxfail") else report.outcome


def _reason(report) -> str | None:
    if hasattr(report, "wasxfail"):
        return report.wasxfail
    if report.skipped and isinstance(report.longrepr, tuple):
        return str(report.longrepr[2]).removeprefix("Skipped: ")
    return None


def case_records(config) -> list[dict]:
    """Every robustness test's record (judge.verdict.record_from_report), in collection order."""
    from .judge.verdict import record_from_report

    log = config.pluginmanager.get_plugin(CASE_LOG)
    if log is None:
        return []
    order = _session(config).ordering.positions
    reports = sorted(log.reports, key=lambda r: order.get(r.nodeid, 0))
    return [record_from_report(r.nodeid, _outcome(r), r.user_properties, _reason(r)) for r in reports]


def _outcomes(terminalreporter) -> list:
    """The robustness tests' outcomes as the verdict reads them, in the order they ran."""
    reports = [r for key in ("passed", "failed", "skipped") for r in terminalreporter.stats.get(key, [])
               if getattr(r, "nodeid", None) is not None and (r.when == "call" or r.outcome != "passed")
               and is_robustness_test(r)]
    order = _session(terminalreporter.config).ordering.positions
    reports.sort(key=lambda r: order.get(r.nodeid, 0))
    return _outcomes_of(reports)


def compact_failures(config) -> bool:
    """A failing robustness test prints one line in the memerobust section instead of pytest's failure section and
    short summary: unless the user asked pytest for them (-v, --tb=..., -r with other characters than the default)."""
    return (config.get_verbosity() <= 0 and getattr(config.option, "tbstyle", "auto") == "auto"
            and getattr(config.option, "reportchars", "fE") in ("fE", "Ef", "f"))


@contextmanager
def robustness_failures_left_out(terminalreporter, config):
    """By default a failing robustness test is left out of pytest's failures and short summary (its line is in the
    memerobust section, which ends the output); `-v`, `--tb` or `-r` give pytest's own sections as well. The
    outcomes the summary reads are taken here, before pytest's sections print."""
    session = config.stash.get(SESSION_KEY, None)
    if session is not None and session.options.models:
        config.stash[OUTCOMES_KEY] = _outcomes(terminalreporter)
    failed = terminalreporter.stats.get("failed", [])
    ours = [r for r in failed if is_robustness_test(r)] if session is not None and compact_failures(config) else []
    if ours:
        terminalreporter.stats["failed"] = [r for r in failed if r not in ours]
    try:
        yield
    finally:
        if ours:
            terminalreporter.stats["failed"] = failed


def _raised(item, call) -> bool:
    """A robustness case that raised instead of being measured (an error, or a detector that declined every meme),
    as opposed to one failing its thresholds or regressing: its record says which exception."""
    from .items import BudgetFailure, BudgetItem, CaseItem, RobustnessFailure

    if call.when != "call":
        return True
    return isinstance(item, (CaseItem, BudgetItem)) and not isinstance(call.excinfo.value,
                                                                        (RobustnessFailure, BudgetFailure))


def _outcomes_of(reports) -> list:
    from .judge.verdict import CaseOutcome

    return [CaseOutcome.from_properties(r.nodeid, r.outcome, r.user_properties) for r in reports]


def annotate_report(item, call, report) -> None:
    """A failing test of a built-in Python suite (caption fuzzing, reliance) keeps its failure's message and
    Hypothesis' falsifying example as its compact line, without the traceback; a case that raised names its
    exception in its record; under --memerobust-gate=regressions a built-in suite's absolute check is reported, not
    gating."""
    if report.failed and call.excinfo is not None and is_robustness_test(report) \
            and not any(name == "memerobust.line" for name, _ in report.user_properties):
        exc = call.excinfo.value
        lines = [f"{type(exc).__name__}: {line}" if i == 0 else line
                 for i, line in enumerate(str(exc).strip().splitlines()[:6] or [""])]
        # Hypothesis' note with the failing example ("Falsifying example:" or, lately, "Failing test case:")
        lines += [note for note in getattr(exc, "__notes__", [])
                  if note.startswith(("Falsifying", "Failing test case"))][:1]
        report.user_properties.append(("memerobust.line", "\n".join(lines)))
    if report.failed and call.excinfo is not None and is_robustness_test(report) and _raised(item, call):
        report.user_properties.append(("memerobust.error", call.excinfo.typename))  # the case's record names it
    rs = item.config.stash.get(SESSION_KEY, None)
    if report.failed and call.excinfo is not None and rs is not None and rs.gate == "regressions" \
            and any(name == "memerobust.suite" for name, _ in report.user_properties):
        # a built-in Python suite's check is absolute, not a regression: reported, not gating
        line = dict(report.user_properties).get("memerobust.line", "").splitlines()[:1]
        report.outcome, report.wasxfail = "skipped", ("failed its check, not gating under --memerobust-gate="
                                                      f"regressions: {line[0] if line else ''}")


def summary(terminalreporter, config) -> None:
    """The tables first (per-family roll-ups by default), what was written, then the failing tests, the gate's
    side-by-side comparison and the verdict: the last screen says what failed."""
    session = config.stash.get(SESSION_KEY, None)
    if session is None or not session.options.models:
        return
    from .report.gate_tables import change_list_lines
    from .report.outline import baseline_notes
    from .report.tables import family_rollup, gate_table, verdict_lines
    from .run.accounting import cache_summary, run_notes

    tr = terminalreporter
    if session.outcomes.results or session.analyses:
        _write_tables(tr, session, family_rollup)
        for note in run_notes(session):
            _say(tr, f"memerobust: {note}")
        _say(tr, f"memerobust: {cache_summary(session)}")
    for line in config.stash.get(REPORT_LINES_KEY, []):  # what was written (an interrupted run: what was not)
        _say(tr, line)
    outcomes = config.stash.get(OUTCOMES_KEY, [])
    failed = [o for o in outcomes if o.outcome == "failed"]
    if failed:
        from .judge.verdict import failure_lines

        tr.write_sep("=", f"memerobust: {len(failed)} failing robustness test{'s' * (len(failed) != 1)}"
                     + (" (-v for details)" if compact_failures(config) else ""), red=True)
        for line in failure_lines(failed):
            _say(tr, line)
    verdict = session.outcomes.verdict
    if verdict is None:
        return
    if verdict.get("baseline"):
        b = verdict["baseline"]
        tr.write_sep("=", f"memerobust gate: this run against the baseline {b['path']}")
        if b["rows"]:
            tr.write_line(_fit(gate_table(b), tr))
        _say(tr, b["summary"], red=bool(b["regressed"]), green=not b["regressed"])
        for line in change_list_lines(b):  # what improved beyond noise, then both lists rule by rule
            _say(tr, line)
        for line in baseline_notes(b):  # the error control, the power, conditions only one side has
            _say(tr, line)
    if verdict.get("detectors"):
        from .report.comparisons import detector_section_lines

        tr.write_sep("=", "memerobust detectors: which loses less to the edits, beyond noise")
        for line in detector_section_lines(verdict["detectors"]):  # the table cropped, the sentences wrapped
            tr.write_line(_fit(line, tr)) if "\n" in line else _say(tr, line)
    # neither PASSED nor FAILED: interrupted, nothing measured, or too few cases judged
    undecided = bool(verdict.get("interrupted") or verdict.get("no_verdict") or verdict.get("partial"))
    tr.write_sep("=", "memerobust verdict", red=not verdict["passed"] and not undecided, yellow=undecided,
                 green=verdict["passed"])
    for line in verdict_lines(verdict):
        last = line.startswith(("PASSED", "FAILED", "INTERRUPTED", "NO VERDICT", "PARTIAL"))
        _say(tr, line, bold=last, red=last and not verdict["passed"] and not undecided,
             yellow=last and undecided, green=last and verdict["passed"])
    from .run.outputs import written_line

    written = config.stash.get(REPORT_LINES_KEY, [])
    for path in session.options.outputs.reports:  # where the whole story is, as the very last line
        if path.suffix == ".html" and written_line(path) in written:
            _say(tr, f"memerobust: the full report is {path.resolve()}")


def _say(tr, line: str, **markup) -> None:
    """One line, whole: CI logs and `grep` read these lines, so prose is never broken (tables are fitted)."""
    tr.write_line(line, **markup)


def _write_tables(tr, session, family_rollup) -> None:
    """`--memerobust-tables`: summary (one line per perturbation family), full (every table) or none."""
    if session.options.outputs.tables == "none":
        return
    from .report import render
    from .run.options import split_model

    full = session.options.outputs.tables == "full"
    tr.write_sep("=", "memerobust tables" + ("" if full else " per family (--memerobust-tables=full: all)"))
    for model in dict.fromkeys(split_model(key[0])[0] for key in session.outcomes.results):
        detector = session.detector(model)
        card = detector.card
        adaptation = getattr(detector, "adaptation", None)
        if adaptation is not None:  # how the checkpoint under test was trained (detectors/training/adaptation.py)
            _say(tr, f"{card.name}: {adaptation.describe()}")
        checkpoints = session.options.checkpoints
        if card.network.demo_weights and model not in checkpoints and "" not in checkpoints:
            _say(tr, f"note: {model!r} runs with demo weights trained on generated memes; pass "
                     f"--memerobust-checkpoint=PATH (and --memerobust-data=NAME:PATH) to test real weights on real "
                     "memes")
    try:
        report = session.report()
        tables = render(report) if full else family_rollup(report, width=tr._tw.fullwidth)
        tr.write_line(_fit(tables, tr, crop=not full))
    except Exception as exc:  # the hooks never crash: say what failed, keep the rest of the summary
        tr.write_line(f"memerobust: the tables could not be built ({type(exc).__name__}: {exc})")


def _fit(text: str, tr, crop: bool = True) -> str:
    """Lines cut to the terminal's width (with an ellipsis) so a table never wraps into an unreadable mess."""
    width = tr._tw.fullwidth
    if not crop or width <= 0:
        return text
    return "\n".join(line if len(line) <= width else line[:width - 1] + "…" for line in text.splitlines())
