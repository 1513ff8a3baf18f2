"""How a run stops on a signal: Ctrl-C (SIGINT), or SIGTERM, as a CI system sends when it cancels a job (GitHub
Actions sends SIGINT, then SIGTERM about 7.5 s later, then SIGKILL).

The first signal replaces every report path with the interrupted verdict at once, before anything else runs, and
takes pytest's interrupted path: the run's end says INTERRUPTED and closes its workers. A second signal during that
end (or any signal once the run's end has begun) ends the process at once: the INTERRUPTED line, the run's worker
processes ended, exit code 2 (pytest's INTERRUPTED), no traceback. Before, the second signal broke into the first's
shutdown (which took 6.8 s on the pool): 200-300 lines of tracebacks, no INTERRUPTED line, and an earlier run's
passing report left at the report path. The pytest face: plugin.py installs a `Stopper` per run."""
from __future__ import annotations

import os
import signal
import sys
import threading

import pytest

from .stash import SESSION_KEY

STOPPER_KEY = pytest.StashKey["Stopper"]()


class Terminated(KeyboardInterrupt):
    """SIGTERM (a CI system cancelling the job, `kill`): pytest's interrupted path, so the run says it stopped and
    writes no partial report, instead of dying mid-write."""


class Stopper:
    """The run's SIGINT and SIGTERM handler (see the module's docstring); a handler someone else set is kept."""

    def __init__(self, config):
        self.config = config
        self.first: str | None = None  # the first signal's name, once one came
        self.ending = False  # the run's end has begun (pytest_sessionfinish): a signal now ends the run at once
        self.stubbed = False  # the report paths hold the interrupted verdict
        self.previous: dict[int, object] = {}

    def install(self) -> None:
        """Handle SIGINT and SIGTERM where they still have Python's defaults (main thread only)."""
        if threading.current_thread() is not threading.main_thread():
            return
        for number, default in ((signal.SIGINT, signal.default_int_handler), (signal.SIGTERM, signal.SIG_DFL)):
            if signal.getsignal(number) is default:
                self.previous[number] = signal.signal(number, self)

    def uninstall(self) -> None:
        for number, previous in self.previous.items():
            if signal.getsignal(number) is self:
                signal.signal(number, previous)
        self.previous = {}

    def __call__(self, number, frame) -> None:
        name = signal.Signals(number).name
        if self.first is None and not self.ending:
            self.first = name
            self.interrupted_reports()
            if number == signal.SIGINT:
                raise KeyboardInterrupt
            raise Terminated(f"terminated by signal {number}")
        self.end_at_once(name)

    def interrupted_reports(self) -> None:
        """Every report path holds the interrupted verdict from now on, whatever comes next: a second signal, a
        SIGKILL, a shutdown that hangs. Never raises (a signal must still stop the run)."""
        rs = self.config.stash.get(SESSION_KEY, None)
        if rs is None or self.stubbed or hasattr(self.config, "workerinput") or not rs.options.outputs.reports:
            return
        try:
            from .run.outputs import interrupted_outputs

            rs.outcomes.case_records, rs.outcomes.verdict = _verdict(self.config, rs)  # as the run's end sets them
            interrupted_outputs(rs)
            self.stubbed = True
        except Exception:
            pass

    def end_at_once(self, name: str) -> None:
        """The run ends now: report paths holding the interrupted verdict, the INTERRUPTED line, the workers ended,
        exit code 2. Later signals are ignored while this runs."""
        for number in self.previous:
            signal.signal(number, signal.SIG_IGN)
        self.interrupted_reports()
        rs = self.config.stash.get(SESSION_KEY, None)
        if not hasattr(self.config, "workerinput"):
            from .report.tables import verdict_lines

            how = f"a second signal ({name}) after {self.first}" if self.first else f"{name} during the run's end"
            lines = [f"memerobust: {how}: stopped at once, the run's workers ended"]
            reports = rs.options.outputs.reports if rs is not None and self.stubbed else ()
            if reports:
                lines.append(f"memerobust: interrupted: {', '.join(map(str, reports))} "
                             f"hold{'s' * (len(reports) == 1)} only the verdict INTERRUPTED, no results")
            try:
                lines.append(verdict_lines(_verdict(self.config, rs)[1])[-1] if rs is not None else "INTERRUPTED")
            except Exception:
                lines.append("INTERRUPTED: no verdict")
            self._say(lines)
        try:
            if rs is not None:
                rs.close()
        except BaseException:
            pass
        end_children()  # what the session does not hold: pytest-xdist's workers, the pool's resource tracker
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        os._exit(pytest.ExitCode.INTERRUPTED)

    def _say(self, lines: list[str]) -> None:
        """Lines on the terminal, past pytest's capture (a second signal may come while a case's output is
        captured)."""
        capture = self.config.pluginmanager.getplugin("capturemanager")
        reporter = self.config.pluginmanager.getplugin("terminalreporter")
        try:
            if capture is not None:
                capture.suspend_global_capture()
        except Exception:
            pass
        for line in lines:
            try:
                if reporter is not None:
                    reporter.write_line(line)
                else:
                    print(line)
            except Exception:
                pass


CHILDREN_GRACE_S = 0.5  # how long the run's child processes have to end on SIGTERM before SIGKILL


def end_children() -> None:
    """End this process's child processes (Linux: /proc lists them), SIGTERM then SIGKILL after CHILDREN_GRACE_S:
    once a run ends at once, nothing it started may go on (pytest-xdist's workers went on with their cases and
    printed their own errors after the run had said INTERRUPTED)."""
    import time
    from pathlib import Path

    def children() -> set[int]:
        found = set()
        for listing in Path(f"/proc/{os.getpid()}/task").glob("*/children"):
            try:
                found.update(int(pid) for pid in listing.read_text().split())
            except (OSError, ValueError):
                pass
        return found

    started = children()
    for pid in started:
        try:
            os.kill(pid, signal.SIGTERM)
        except OSError:
            pass
    deadline = time.monotonic() + CHILDREN_GRACE_S
    while started & children() and time.monotonic() < deadline:
        _reap()
        time.sleep(0.05)
    for pid in started & children():
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def _reap() -> None:
    """Collect the children that ended, so /proc stops listing them."""
    try:
        while os.waitpid(-1, os.WNOHANG)[0] > 0:
            pass
    except ChildProcessError:
        pass


def _verdict(config, rs) -> tuple[list[dict], dict]:
    """(the cases' records, the verdict) of a run interrupted now: the cases that ran, of those collected."""
    from .collect import COLLECTED_KEY
    from .judge.verdict import run_verdict
    from .run.gate import baseline_conditions
    from .terminal import case_records

    records = case_records(config)
    return records, run_verdict(records, gate=rs.gate, baseline=rs.options.judging.baseline.path,
                                baseline_conditions=baseline_conditions(rs), interrupted=True,
                                collected=config.stash.get(COLLECTED_KEY, None))


def stop_on_signals(config) -> None:
    """Install this run's Stopper (plugin.pytest_configure)."""
    stopper = Stopper(config)
    stopper.install()
    config.stash[STOPPER_KEY] = stopper


def run_ends(config) -> None:
    """The run's end has begun (pytest_sessionfinish): a signal from now on ends it at once."""
    stopper = config.stash.get(STOPPER_KEY, None)
    if stopper is not None:
        stopper.ending = True


def stop_handling_signals(config) -> None:
    """pytest_unconfigure: the handlers this run set are put back."""
    stopper = config.stash.get(STOPPER_KEY, None)
    if stopper is not None:
        stopper.uninstall()
