"""What a finished run leaves behind, in order: the report files (an interrupted run's hold its verdict alone) and
the CI job summary, the run history, the baseline, the flip ledger, the counterexample manifest, the trackers'
runs and the exports. The pytest face calls `write_outputs` from pytest_sessionfinish and prints the lines it
returns; nothing here needs pytest."""
from __future__ import annotations

from pathlib import Path


def write_outputs(rs, *, interrupted: bool, root: Path | None = None, counterexample_cases=None,
                  write=print, amend_report=None) -> list[str]:
    """Write what the run leaves; the lines that say what was written, and what could not be. A report's path never
    keeps an earlier run's report, which a CI step would read as this run's: an interrupted run writes there its
    verdict alone (INTERRUPTED, how many cases ran, their records; no results, which would pass for the whole run)
    and nothing else; a report that cannot be built is replaced by the verdict alone; a file that cannot be written
    is removed. A failure with one output never loses the others, nor the tables. `counterexample_cases`: the failing
    cases' manifest entries (None: none gathered); `root`: the checkout whose commit the history names; `write`: how
    the baseline's lines reach the terminal; `amend_report(report)`: called once on the report dict before anything
    is written from it (the face passes the pytest_memerobust_report hook)."""
    if interrupted:
        return interrupted_outputs(rs)
    lines: list[str] = []
    report = _built_once(rs, lines, amend_report)
    history, entry = _history_before_reports(rs, report, root, lines)
    lines += _write_reports(rs.options.outputs.reports, report)
    if rs.options.outputs.reports:  # and where reviewers look: the CI job summary, when CI names one (track/github.py)
        from ..track.github import job_summary_lines

        lines += job_summary_lines(report)
    if history is not None:
        lines += _append_history(history, entry, report)
    lines += _baseline_and_ledger(rs, write)
    from .replay import manifest_path, write_manifest

    if counterexample_cases is not None:  # the failing cases' counterexamples, gathered from their reports
        lines += write_manifest(manifest_path(rs.options), counterexample_cases,
                                explicit=rs.options.outputs.counterexamples is not None)
    lines += _trackers(rs, report, entry, root)
    return lines + _exports(rs, report)


def interrupted_outputs(rs) -> list[str]:
    """An interrupted run: each report path holds the verdict alone (`rs.outcomes.verdict`); no baseline, history,
    tracker run or export. Also what the first signal writes at once (signals.py), before the run's end writes it again."""
    from ..judge.verdict import cases_ran_text
    from .report import verdict_report

    v = rs.outcomes.verdict or {}
    ran = cases_ran_text(v.get("cases_run", 0), v.get("cases_collected"))
    lines = _write_reports(rs.options.outputs.reports, lambda: verdict_report(rs, "the run was interrupted"),
                           lambda path: f"memerobust: interrupted: {path} holds only the verdict INTERRUPTED "
                                        f"({ran}), no results")
    o = rs.options
    if o.judging.baseline.save is not None:
        lines.append(f"memerobust: interrupted: baseline {o.judging.baseline.save} not saved ({ran})")
    if o.outputs.export is not None:
        lines.append(f"memerobust: interrupted: nothing exported to {o.outputs.export} ({ran})")
    if o.outputs.mlflow is not None or o.outputs.wandb is not None:
        lines.append(f"memerobust: interrupted: nothing logged to MLflow or W&B ({ran})")
    return lines


def refused_outputs(options, why: str) -> list[str]:
    """A refused run (a usage error, exit 4: a bad option, baseline or dataset row): each report path holds a stub
    that says the run was refused and why, never an earlier run's report, which a CI step would archive as this
    run's. `options`: the run's session.Options (only its report paths and header are read)."""
    from types import SimpleNamespace

    from .report import verdict_report
    from .session_parts import Outcomes

    why = " ".join(why.split())
    verdict = {"passed": False, "gate": None, "summary": f"the run was refused before any case: {why}", "models": [],
               "failing": [], "fdr": None, "baseline": None, "interrupted": False, "refused": why,
               "no_verdict": f"the run was refused before any case: {why}", "skipped": None, "cases_run": 0,
               "cases_collected": None, "errors": []}
    refused = SimpleNamespace(options=options, outcomes=Outcomes(verdict=verdict))
    return _write_reports(options.outputs.reports, lambda: verdict_report(refused, f"the run was refused: {why}"),
                          lambda path: f"memerobust: refused: {path} holds only the reason, no results")


def _built_once(rs, lines: list[str], amend=None):
    """The run's report dict, built once when first asked for (by the report files, the history, the trackers or
    the export), so all of them read the same numbers; one that cannot be built is the verdict alone. `amend(report)`
    may change it in place before any of them reads it; one that raises is said, and the report goes on."""
    built: list[dict] = []

    def report() -> dict:
        if not built:
            from .report import verdict_report

            try:
                built.append(rs.report())
            except Exception as exc:
                why = f"the report could not be built ({type(exc).__name__}: {exc})"
                lines.append(f"memerobust: {why}; the reports hold the verdict and the cases' records only")
                built.append(verdict_report(rs, why))
            if amend is not None:
                try:
                    amend(built[0])
                except Exception as exc:
                    lines.append(f"memerobust: a pytest_memerobust_report hook failed ({type(exc).__name__}: {exc})")
        return built[0]

    return report


def _history_before_reports(rs, report, root, lines: list[str]) -> tuple[Path | None, dict | None]:
    """(the history file, this run's line) with the trend put into the report, so its files draw it."""
    if rs.options.outputs.history is None or not rs.outcomes.results:
        return None, None
    from ..report.history import history_path, trend_block

    history = history_path(rs.options.outputs.history, rs.options.compute.cache.folder)
    try:
        return history, trend_block(report(), history, root=root)
    except Exception as exc:
        lines.append(f"memerobust: could not read the run history {history} ({type(exc).__name__}: {exc})")
        return None, None


def _append_history(history: Path, entry: dict, report) -> list[str]:
    from ..report.history import append_history, erosion_lines

    try:
        append_history(history, entry)
    except Exception as exc:
        return [f"memerobust: could not add the run to the history {history} ({type(exc).__name__}: {exc})"]
    return [f"memerobust: run added to the history {history} (`memerobust history {history}`)",
            *(f"memerobust: {line}" for line in erosion_lines(report()["history"]["series"]))]


def _baseline_and_ledger(rs, write) -> list[str]:
    from .gate import save_baseline, write_run_ledger

    lines, o = [], rs.options
    if o.judging.baseline.save is not None and not rs.outcomes.results:
        verdict = rs.outcomes.verdict
        lines.append(f"memerobust: baseline {o.judging.baseline.save} not saved: no case was measured"
                     + (" (its cases raised errors)" if verdict and verdict.get("errors") else ""))
    elif o.judging.baseline.save is not None:
        try:
            save_baseline(rs, o.judging.baseline.save, write=write)
        except Exception as exc:
            lines.append(f"memerobust: could not save the baseline {o.judging.baseline.save} "
                         f"({type(exc).__name__}: {exc})")
    if rs.baseline is not None and rs.outcomes.results:  # which memes flipped, next to the gate's verdict
        from ..report.ledger import ledger_folder

        folder = ledger_folder(o.outputs.reports, o.compute.cache.folder)
        try:
            lines.append(write_run_ledger(rs, folder) if folder is not None else
                         "memerobust: no flip ledger written: --memerobust-report or a cache dir says where")
        except Exception as exc:
            lines.append(f"memerobust: could not write the flip ledger ({type(exc).__name__}: {exc})")
    return lines


def _trackers(rs, report, entry: dict | None, root) -> list[str]:
    """One MLflow and/or W&B run, after every file they carry is written; its history line goes with it, so a
    history can be read back from the tracker."""
    o = rs.options
    if o.outputs.mlflow is None and o.outputs.wandb is None:
        return []
    from .replay import manifest_path, picture_store
    from ..track.trackers import log_run

    if entry is None and rs.outcomes.results:
        from ..report.history import history_entry, run_commit

        entry = history_entry(report(), commit=run_commit(root))
    manifest = manifest_path(o)
    return log_run(report(), mlflow=o.outputs.mlflow, wandb=o.outputs.wandb, cache_dir=o.compute.cache.folder,
                   history_entry=entry, artifacts=[*o.outputs.reports, *((manifest, picture_store(manifest)) if manifest else ())])


def _exports(rs, report) -> list[str]:
    """--memerobust-export (the run's perturbed memes as a dataset), then each suite's [export]."""
    from .export import export_after_run, export_suite_after_run

    lines = []
    outputs = rs.options.outputs
    if outputs.export is not None:
        try:
            lines.append(export_after_run(rs, report(), outputs.export, outputs.export_counterexamples))
        except Exception as exc:
            lines.append(f"memerobust: could not export to {rs.options.outputs.export} ({type(exc).__name__}: {exc})")
    for suite, spec in rs.planned.exports.items():
        try:
            lines.append(export_suite_after_run(rs, report(), suite, spec))
        except Exception as exc:
            lines.append(f"memerobust: suite {suite}: could not export to {spec['out']} ({type(exc).__name__}: "
                         f"{exc})")
    return lines


def written_line(path) -> str:
    """The line that says a report file was written (the summary finds the HTML's by it)."""
    return f"memerobust: report written to {path}"


def _write_reports(paths, build, written=written_line) -> list[str]:
    """Write the report `build()` returns (built once, only when there is a path) to every path; a path that
    cannot be written loses the earlier run's file there rather than keep it under this run's name."""
    from ..report import write_report

    lines, report = [], build() if paths else None
    for path in paths:
        try:
            write_report(path, report)
            lines.append(written(path))
        except Exception as exc:
            lines.append(f"memerobust: could not write {path} ({type(exc).__name__}: {exc})" + _removed(path))
    return lines


def _removed(path: Path) -> str:
    """Remove an earlier run's report that this run could not replace; say what became of it."""
    try:
        Path(path).unlink(missing_ok=True)
    except OSError as exc:
        return f"; STALE: the file there is an earlier run's and could not be removed ({exc})"
    return "; no earlier report is left there"
