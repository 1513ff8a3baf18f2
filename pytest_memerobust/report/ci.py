"""What reviewers read where they already look, the CI job summary and one pull-request comment: the run's verdict,
the gate's comparison table and its lists of what regressed and what improved, compact. It renders the verdict and
the gate's summary the run recorded (`report["verdict"]`) with the helpers the terminal and the Markdown report use,
and decides nothing. The comment's body starts with MARKER, by which the next run finds the comment to update."""
from __future__ import annotations

from ..judge.gate import improved_count_clause
from .gate_tables import LISTED, change_lists, comparison_conditions, comparison_headers, comparison_rows
from .markdown import cell, table
from .outline import (GATES, NO_VERDICT, baseline_notes, counts_text, gate_shown, has_verdict, model_counts,
                      partial_note, verdict_word)

MARKER = "<!-- memerobust -->"  # hidden when rendered; `memerobust pr-comment` edits the comment starting with it
CONDITIONS_SHOWN = 25  # table rows (one per condition, failing first); every comparison is in the JSON report
FAILING_SHOWN = 10
BODY_LIMIT = 65_000  # GitHub refuses a comment over 65,536 characters; a job summary over 1 MiB is not shown
NUMERIC = {3, 4, 5, 6}  # comparison_headers: base → now, Δ, bound, adj. p


def ci_markdown(report: dict, comment: bool = False, link: str | None = None) -> str:
    """The Markdown for the job summary (`comment`: for the pull-request comment, MARKER first); `link`: where the
    whole run is (the CI job), said on the last line. Longer tables are cut to fit what GitHub shows."""
    for shown, listed in ((CONDITIONS_SHOWN, LISTED), (10, 5), (3, 2)):
        text = _render(report, comment, link, shown, listed)
        if len(text) <= BODY_LIMIT:
            return text
    return text[:BODY_LIMIT - 80].rsplit("\n", 1)[0] + "\n\n_(cut to fit a comment: the JSON report has it all)_\n"


def _render(report: dict, comment: bool, link: str | None, shown: int, listed: int) -> str:
    out = [MARKER] if comment else []
    if not has_verdict(report):
        out += [f"### Robustness: {NO_VERDICT}", "This report was written before verdicts were recorded."]
        return "\n\n".join(out + _footer(report, link)) + "\n"
    verdict = report["verdict"]
    word, mark, _ = verdict_word(verdict)
    baseline = verdict.get("baseline")
    gate = gate_shown(verdict)
    ungated = gate is not None and not baseline and not verdict.get("interrupted")
    title = f"### {mark} Robustness gate: {word}" if baseline else f"### {mark} Robustness: {word}"
    out += [title + (" (not gated)" if ungated else ""), *_meta(report), f"> {cell(verdict.get('summary', ''))}"]
    if partial_note(report):
        out.append(f"> {cell(partial_note(report))}")
    models = verdict.get("models") or []
    if models:
        out.append("  \n".join(f"**{cell(m.get('model', ''))}**: {m.get('cases', 0)} cases, by their suites' "
                               f"thresholds: {counts_text(model_counts(m))}; **{m.get('failed', 0)} failed the run**"
                               for m in models))
    if baseline:
        out += _gate(baseline, gate, shown, listed, said=str(verdict.get("summary", "")))
    elif ungated:
        out.append(f"Not gated against a baseline: judged by the suites' thresholds alone ({GATES['thresholds']}). "
                   "Save a baseline with `--memerobust-save-baseline` and pass it with `--memerobust-baseline` to "
                   "gate on regressions.")
    if verdict.get("detectors"):  # a run with several detectors: which loses less, per pair (report/comparisons.py)
        from .comparisons import detector_counts

        out.append("**Which detector loses less to the edits** (beyond noise, two-sided, every pair and rule under "
                   "one error rate):  \n" + "  \n".join(cell(line) for line in
                                                      detector_counts(verdict["detectors"]["comparisons"])))
    failing = list(verdict.get("failing") or [])
    if failing:
        out.append(_failing(failing))
    return "\n\n".join(out + _footer(report, link)) + "\n"


def _failing(failing: list[str]) -> str:
    """`**Failing (6)** in `review.toml`: `demo::clean`, ...`: the tests that failed the run, by file, the first
    FAILING_SHOWN of them (a node id repeats its file; the table above already names the conditions)."""
    by_file: dict[str, list[str]] = {}
    for nodeid in failing[:FAILING_SHOWN]:
        where, _, name = str(nodeid).partition("::")
        by_file.setdefault(where if name else "", []).append(name or where)
    more = f"; and {len(failing) - FAILING_SHOWN} more" if len(failing) > FAILING_SHOWN else ""
    return f"**Failing ({len(failing)})** " + "; ".join(
        (f"in `{where}`: " if where else "") + ", ".join(f"`{name}`" for name in names)
        for where, names in by_file.items()) + more


def _meta(report: dict) -> list[str]:
    """`demo on demo (60 memes), seed 0`: what was run, as the Markdown report's line under its title; nothing for
    a run refused before it named any."""
    cases = [c for c in report.get("cases") or [] if isinstance(c, dict)]
    models = list(report.get("models") or {}) or list(dict.fromkeys(str(c.get("model")) for c in cases))
    data = ", ".join(f"{name} ({info.get('n')} memes)" for name, info in (report.get("datasets") or {}).items()
                     if isinstance(info, dict)) or ", ".join(dict.fromkeys(str(c["dataset"]) for c in cases
                                                                         if c.get("dataset")))
    if not models:
        return []
    return [cell(f"{', '.join(models)} on {data or 'no data'}, seed {report.get('seed')}")]


def _gate(baseline: dict, gate: str | None, shown: int, listed: int, said: str = "") -> list[str]:
    """The gate's section: its summary line (unless the verdict's line `said` it), the side-by-side table (the
    terminal's, `gate_tables`), then folded the two lists rule by rule and how it decided."""
    summary = baseline.get("summary", "") + improved_count_clause(baseline)
    out = [f"**Against the baseline** `{baseline.get('path', '')}`"
           + (f", gate **{cell(gate)}**: {GATES.get(gate, '')}" if gate else "")
           + ("." if summary in said else f"; {cell(summary)}.")]
    rows = baseline.get("rows") or []
    if rows:
        table_rows = comparison_rows(rows, shown)
        compared = int(baseline.get("conditions") or 0) + int(baseline.get("family_means") or 0)
        out.append(f"Per condition its deciding rule: what regressed, what improved, then the nearest to regressing "
                   f"({len(table_rows)} of {compared or comparison_conditions(rows)} compared; all in the JSON "
                   "report).")
        out.append(table([cell(h) for h in comparison_headers()],
                         [[f"**{c}**" if k == 0 and c != "ok" else cell(c) for k, c in enumerate(r)]
                          for r in table_rows], NUMERIC))
    for title, lines in change_lists(baseline, listed):
        if lines:
            out.append(f"<details><summary><b>{title}</b></summary>\n\n" + "\n".join(f"- `{line}`" for line in lines)
                       + "\n\n</details>")
    notes = [cell(n) for n in baseline_notes(baseline)]
    if notes:
        out.append("<details><summary>How the gate decided</summary>\n\n" + "\n\n".join(notes) + "\n\n</details>")
    return out


def _footer(report: dict, link: str | None) -> list[str]:
    version = (report.get("versions") or {}).get("pytest-memerobust")
    where = f"[the CI run]({link})" if link else "the CI job's artifacts"
    return [f"<sub>pytest-memerobust{' ' + version if version else ''} · every case and number is in the full "
            f"report, in {where}</sub>"]
