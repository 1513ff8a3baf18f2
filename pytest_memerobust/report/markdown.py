"""The Markdown report (report.to_markdown), for a reviewer: the run's verdict first (PASS/FAIL, per model the counts
and the weakest perturbation families, the failing cases with their violations, the baseline comparison), then the
contents, then one section per suite, most failing first (its cases, worst memes with their caption edits, the
paper's tables), and the run's details and versions last. It renders the verdict the report recorded and decides
nothing. GitHub-flavoured: pipe tables, explicit anchors, <del>/<ins> for caption edits."""
from __future__ import annotations

import html

from .analysis_tables import analysis_notes, analysis_table, analysis_title
from .gallery import caption_pair as gallery_caption_pair, code_point, distinct_memes, visible
from .outline import (BASELINE_HEADERS, BASELINE_NUMERIC, GATES, MARKS, NO_VERDICT, NOT_JUDGED, VERDICT_LABELS,
                      baseline_cells, data_title, skipped_by_reason, skipped_contents, skipped_title, some_cases,
                      verdict_columns, baseline_notes, brief, caption_labels, case_of, counts, counts_text, gate_shown,
                      has_verdict, model_counts, number, partial_note, read_by_ocr, p_value, regression_line, report_meta, run_details, section_title, severity_order, short_title,
                      signed, slug, table_heading, verdict_of, verdict_word, violation_parts, worst_violations)
from .plots import FIGURE_NAMES, report_plots
from .tables import (NO_ANSWERS, budget_table, budget_title, metric_text, prompt_summary, prompt_table,
                     reliance_table, render, unanswered)

_SPECIAL = {"\\": "\\\\", "`": "\\`", "*": "\\*", "[": "\\[", "]": "\\]", "|": "\\|", "<": "&lt;", ">": "&gt;"}
_CAPTION = {**_SPECIAL, "_": "\\_", "~": "\\~", "#": "\\#"}  # free text: no emphasis, strike or heading either


def cell(text, special: dict = _SPECIAL) -> str:
    """Text safe in a pipe-table cell: what Markdown would read as markup escaped, no line breaks."""
    return "".join(special.get(ch, " " if ch in "\r\n" else ch) for ch in str(text))


def table(headers: list[str], rows: list[list[str]], right: set[int] = frozenset()) -> str:
    """A GitHub pipe table; the cells are Markdown already (use `cell` for plain text)."""
    rule = ["---:" if k in right else "---" for k in range(len(headers))]
    return "\n".join("| " + " | ".join(r) + " |" for r in [headers, rule, *rows])


def _char(ch: str) -> str:
    if visible(ch):
        return cell(ch, _CAPTION)
    return f"{html.escape(ch)}<sub>{code_point(ch).split(' ', 1)[0]}</sub>"


def _text(text: str) -> str:
    return "".join(_char(ch) for ch in text)


def caption_pair(before: str, after: str) -> tuple[str, str]:
    """The clean and perturbed captions for a table cell: what the edit removed in <del>, what it put in in <ins>,
    characters outside ASCII with their code point (a Markdown cell has no way to mark where an insertion sits)."""
    return gallery_caption_pair(before, after, _text)


def _verdict_cell(verdict: str) -> str:
    return f"{MARKS.get(verdict, '?')} {VERDICT_LABELS.get(verdict, verdict)}"


def _deciding(violations: list[dict]) -> list[dict]:
    """The violations that fail the case (`fails`, as the run recorded; else the sure ones), or all when none does."""
    key = "fails" if any("fails" in v for v in violations) else "sure"
    return [v for v in violations if v.get(key)] or violations


def case_rows(cases: list[dict], anchors: dict[str, str] | None = None, all_failed: bool = False) -> str:
    """Per case, one row per violation that fails it (the case named on its first row), one row for the violations
    within noise, then its regressions against the baseline."""
    rows = []
    for case in cases:
        head, _, name = str(case.get("nodeid", "")).rpartition("::")
        href = (anchors or {}).get(case.get("nodeid", ""))
        title = f"**{cell(name)}**" + (f" ([{cell(head)}](#{href}))" if href else f" ({cell(head)})")
        p = case.get("p_value")
        fdr = case.get("fdr_survives") if verdict_of(case) in ("fail for sure", "fail within noise") else None
        p_text = p_value(p) + ("" if fdr is None else " ✓ FDR" if fdr else " may be chance (FDR)")
        violations = worst_violations(case)
        shown = _deciding(violations)
        lines = []
        for v in shown:
            what, value, limit, ci = violation_parts(v)
            mark = MARKS["fail for sure"] if v.get("sure") else MARKS["fail within noise"]
            lines.append([f"{mark} {cell(what)}", value, cell(limit), ci])
        rest = [v for v in violations if not any(v is w for w in shown)]
        if rest:
            lines.append(["also past a limit within noise: " + "; ".join(
                f"{cell(brief(w))} {x} ({cell(lim)}, CI {ci})" for w, x, lim, ci in map(violation_parts, rest)),
                "", "", ""])
        lines += [[f"{MARKS[NOT_JUDGED]} {cell(u.get('what', ''))} {cell(u.get('reason', ''))}", "", "", ""]
                  for u in case.get("not_judged") or []]
        for r in case.get("regressions") or []:
            if r.get("regressed", True):
                lines.append([cell(regression_line(r)), "", "", ""])
        if not lines and case.get("message"):  # a test that is not a suite case: its failure message
            lines.append(["<br>".join(f"`{line}`" if line.strip() and not set("`|") & set(line) else cell(line)
                                      for line in case["message"].splitlines()), "", "", ""])
        if not lines:
            lines.append([cell(case.get("skip_reason") or case.get("not_gating") or "no violation recorded"),
                          "", "", ""])
        failed = ""
        if case.get("outcome") == "failed":
            gated = ", ".join(case.get("gated_by") or [])
            failed = " (" + ("" if all_failed else "failed the run ") + (f"by {gated}" if gated else "") + ")"
            failed = "" if failed == " ()" else failed.replace(" )", ")")
        for k, line in enumerate(lines):
            first = k == 0
            rows.append([title if first else "", _verdict_cell(verdict_of(case)) + failed if first else "", *line,
                         p_text if first else ""])
    return table(["case", "verdict", "violated", "value", "required", "interval", "p · FDR"], rows, {3, 5, 6})


def _verdict(report: dict, anchors: dict[str, str]) -> list[str]:
    if not has_verdict(report):
        return ['<a id="verdict"></a>', "> **NO VERDICT**: no verdict recorded. This report was written before "
                "verdicts were recorded: the sections below carry the numbers, not whether the run passed."]
    verdict = report["verdict"]
    word, mark, _ = verdict_word(verdict)
    gate = gate_shown(verdict)
    note = partial_note(report)
    out = ['<a id="verdict"></a>', f"> **{mark} {word}**: {cell(verdict.get('summary', ''))}"
           + (f"  \n> gate: **{cell(gate)}**: {GATES.get(gate, '')}" if gate else "")
           + (f"  \n> {cell(note)}" if note else ""),
           "## Verdict"]
    models = verdict.get("models") or []
    if models:  # most failing first, as the suites
        models = sorted(models, key=lambda m: (-int(m.get("failed", 0) or 0), -int(m.get("fail for sure", 0) or 0),
                                               -int(m.get("fail within noise", 0) or 0)))
        columns = verdict_columns([model_counts(m) for m in models])
        out.append(table(["model", "cases", *(f"{MARKS[v]} {VERDICT_LABELS[v]}" for v in columns),
                          "failed the run"],
                         [[cell(m.get("model", "")), str(m.get("cases", 0)),
                           *(str(model_counts(m)[v]) for v in columns), f"**{m.get('failed', 0)}**"]
                          for m in models], set(range(1, len(columns) + 3))))
        families = [(m.get("model", ""), f) for m in models for f in m.get("weakest_families") or []]
        if families:
            out.append("**Weakest perturbation families** (worst first)")
            out.append(table(["model", "family", "its worst condition", "verdict", "measure", "value", "limit"],
                             [[cell(model), cell(f.get("family", "")), f"`{f.get('condition', '')}`",
                               _verdict_cell(f.get("verdict") or NO_VERDICT), cell(f.get("what", "")),
                               number(f.get("value")), number(f.get("limit"))] for model, f in families], {5, 6}))
    fdr = verdict.get("fdr")
    if fdr:
        chance = int(fdr.get("failing", 0)) - int(fdr.get("surviving", 0))
        out.append(f"False discovery rate (Benjamini-Hochberg, q = {fdr.get('q')}): {fdr.get('surviving')} of "
                   f"{fdr.get('failing')} failing cases survive over {fdr.get('confident')} confident cases"
                   + (f"; {chance} may be chance" if chance > 0 else "") + ".")
    baseline = verdict.get("baseline")
    if baseline:
        from ..judge.gate import improved_count_clause

        out.append(f"**Baseline** `{baseline.get('path', '')}`: "
                   f"{cell(baseline.get('summary', '') + improved_count_clause(baseline))} ([comparison](#baseline))")
    detectors = verdict.get("detectors")
    if detectors:
        from .comparisons import DETECTOR_HEADERS, LISTED, detector_counts, detector_method, detector_rows

        from ..judge.gate import ErrorControl

        control = ErrorControl.parse(detectors["control"])
        rows = detectors["comparisons"]
        out.append("**Detectors: which loses less to the edits, beyond noise** ("
                   + cell(detector_method(control.alpha, control.method, len(rows))) + "): "
                   + "; ".join(cell(line) for line in detector_counts(rows)) + ".")
        decided = detector_rows(rows, limit=LISTED)
        if decided:
            out.append(table(DETECTOR_HEADERS, [[cell(c) for c in row] for row in decided], {4, 5}))
    cases = {c.get("nodeid"): c for c in report.get("cases") or [] if isinstance(c, dict)}
    failing = list(verdict.get("failing") or [])
    out += ['<a id="failing"></a>', f"### Failing cases ({len(failing)})"]
    known = [cases[n] for n in failing if n in cases]
    if known:
        out.append(case_rows(known, anchors, all_failed=True))
    others = [n for n in failing if n not in cases]
    if others:
        out.append("Other failing tests (not suite cases): " + ", ".join(f"`{n}`" for n in others))
    if not failing:
        out.append("No case failed the run.")
    return out + _skipped(list(cases.values()))


def _skipped(cases: list[dict]) -> list[str]:
    """The cases that were skipped or not judged, one row per reason with how many and which."""
    groups = skipped_by_reason(cases)
    if not groups:
        return []
    return ['<a id="skipped"></a>', f"### {skipped_title(groups)}",
            table(["reason", "cases", "which"], [[cell(reason), str(len(mine)), cell(some_cases(mine))]
                                                 for reason, mine in groups], {1})]


def _baseline(report: dict) -> list[str]:
    baseline = (report.get("verdict") or {}).get("baseline") if has_verdict(report) else None
    if not baseline:
        return []
    from .gate_tables import change_lists, improved_only, shown_decision

    rows = sorted(baseline.get("rows") or [], key=lambda r: (not r.get("regressed"), not improved_only(r)))
    lists = []
    for title, lines in change_lists(baseline):
        lists += [f"### {title}", "\n".join(f"- `{line}`" for line in lines) if lines else "None."]
    return ['<a id="baseline"></a>', f"## Baseline comparison: `{baseline.get('path', '')}`",
            f"{cell(baseline.get('summary', ''))}. Difference = now − before on the same memes.",
            *([f"{cell(baseline['improved_summary'])}."] if baseline.get("improved_summary") else []), *lists,
            *[cell(n) for n in baseline_notes(baseline)],
            table(BASELINE_HEADERS, [[cell(c) if i != 2 else f"`{c}`" for i, c in
                                      enumerate(baseline_cells(shown_decision(r)))] for r in rows], BASELINE_NUMERIC)]


def _worst(group: dict, cases: list[dict]) -> list[str]:
    examples = distinct_memes(group.get("worst_examples", []))
    if not examples:
        return []
    labels = {caption_labels(e) for e in examples}
    mixed = len({label for label, _ in labels}) > 1
    clean_label = "clean or OCR caption" if mixed else next(iter(labels))[0]
    perturbed_label = " or ".join(sorted({label for _, label in labels}))
    rows = []
    for e in examples:
        before, after = caption_pair(e.get("caption", ""), e.get("perturbed_caption", ""))
        if mixed and read_by_ocr(e):  # the column says "clean or OCR caption": this one is OCR's
            before = f"(OCR) {before}"
        if e.get("caption", "") == e.get("perturbed_caption", ""):
            after += " (unchanged: the picture was edited)"
        if e.get("scene_text"):
            before += f" (scene text, kept out: {cell(e['scene_text'])})"
        also = e.get("also") or []
        rows.append([f"`{e['id']}`", f"`{e['condition']}`" + (f" (also: {', '.join(also)})" if also else ""),
                     _verdict_cell(verdict_of(case_of(cases, e["condition"]) if cases else None)),
                     f"{cell(e.get('label', ''))}{' (clean prediction)' if e.get('label_basis') else ''}: "
                     f"{e['p_true_clean']:.3f} → {e['p_true_perturbed']:.3f} "
                     f"({signed(e['p_true_perturbed'] - e['p_true_clean'])})", before, after])
    return ["### Worst examples",
            "Distinct memes whose probability of the true label (without labels: of the clean prediction) fell the "
            "most, each under the condition that hurt it most; <del>removed</del> and <ins>inserted</ins> characters "
            "marked, characters outside ASCII with their code point.",
            table(["meme", "condition", "verdict", "true label: p clean → perturbed", clean_label,
                   perturbed_label], rows)]


def _grid(group: dict, cases: list[dict]) -> list[str]:
    """The heat map as a table: per text x image pair the accuracy change, perturbed − clean, with the case's
    verdict mark."""
    cells = {r["condition"]: r for r in group["results"] if r["kind"] == "combined"}
    if not cells:
        return []
    clean = group["clean"]["metrics"]["accuracy"]
    rows = []
    for text in group["grid_text"]:
        row = [f"**{cell(text.split('=', 1)[1])}**"]
        for image in group["grid_image"]:
            r = cells.get(f"{text}+{image}")
            if r is None:
                row.append("")
                continue
            mark = MARKS.get(verdict_of(case_of(cases, r["condition"])), "") if cases else ""
            change = NO_ANSWERS if unanswered(r) else signed(r["metrics"]["accuracy"] - clean)
            row.append(f"{mark} {change}".strip())
        rows.append(row)
    key = "; ✗ fail for sure, ~ fail within noise, ✓ pass: the case's verdict" if cases else ""
    return [f"**Accuracy change per text x image pair**: perturbed − clean accuracy (clean "
            f"{metric_text(group['clean'], clean)}; −0.200: 20 "
            f"points lower){key}",
            table(["text \\ image", *(cell(i.split("=", 1)[1]) for i in group["grid_image"])], rows,
                  set(range(1, len(group["grid_image"]) + 1)))]


def _group(group: dict, cases: list[dict], anchor: str) -> list[str]:
    out = [f'<a id="{anchor}"></a>', f"## {section_title(group)}"]
    if cases:
        c = counts(cases)
        out.append(f"{len(cases)} cases: {counts_text(c)} · **{c['failed']} failed the run**")
        not_passing = [k for k in cases if verdict_of(k) in ("fail for sure", "fail within noise", "error")]
        not_passing.sort(key=lambda k: (k.get("outcome") != "failed", verdict_of(k) != "fail for sure"))
        if not_passing:
            out += [f"### Cases that do not pass ({len(not_passing)})", case_rows(not_passing)]
    else:
        out.append(f"_{NO_VERDICT}_")
    out += _grid(group, cases) + _worst(group, cases)
    # the paper's tables; headings without the group's title, which the section's heading already says
    tables = render({"groups": [group], "reliance": [], "prompt_invariance": [], "budgets": []}, "github",
                    heading=lambda t: f"### {table_heading(t, group)}\n\n")
    return out + [tables]


def markdown(report: dict, figures: list[tuple] | None = None) -> str:
    """The report as Markdown; `figures`: (Plot, relative link to its PNG) pairs to show in a Figures section (None:
    text alone, naming where the figures are)."""
    taken = {"verdict", "failing", "skipped", "baseline", "contents", "run-details", "reliance", "trend", "figures"}
    suites = [(group, cases, slug(short_title(group), taken)) for group, cases in severity_order(report)]
    anchors = {c.get("nodeid"): anchor for _, cases, anchor in suites for c in cases}
    toc = [("verdict", "Verdict", "")]
    if has_verdict(report):
        toc.append(("failing", f"Failing cases ({len(report['verdict'].get('failing') or [])})", ""))
        toc += skipped_contents(report)
        if report["verdict"].get("baseline"):
            toc.append(("baseline", "Baseline comparison", ""))
    body: list[str] = []
    entries = (report.get("history") or {}).get("entries") or []
    if entries:  # the run history's trend (--memerobust-history); the chart is in the HTML and `memerobust plot`
        from .history import STATE_LEGEND, erosion_lines, runs_table, trend_tables

        series = report["history"].get("series") or []
        body += ['<a id="trend"></a>', f"## Trend over the last {len(entries)} runs",
                 *(f"**{line}**" for line in erosion_lines(series)), runs_table(entries, "github"),
                 trend_tables(series, [e["run"] for e in entries], "github", heading=lambda t: f"### {t}\n\n"),
                 STATE_LEGEND.replace("\n", " ")]
        toc.append(("trend", f"Trend over {len(entries)} runs", ""))
    for group, cases, anchor in suites:
        body += _group(group, cases, anchor)
        toc.append((anchor, short_title(group), counts_text(counts(cases)) if cases else NO_VERDICT))
    if report.get("reliance"):
        body += ['<a id="reliance"></a>', "## Modality reliance: which channel decides",
                 reliance_table(report["reliance"], "github")]
        toc.append(("reliance", "Modality reliance", ""))
    for entry in report.get("budgets", []):
        anchor = slug(f"budgets {entry.get('label', entry['model'])} {entry['dataset']}", taken)
        body += [f'<a id="{anchor}"></a>', f"## {budget_title(entry)}", budget_table(entry["entries"], "github")]
        toc.append((anchor, f"Evasion budgets: {entry.get('label', entry['model'])}", ""))
    for entry in report.get("prompt_invariance", []):
        anchor = slug(f"prompts {entry['model']} {entry['dataset']}", taken)
        body += [f'<a id="{anchor}"></a>', f"## Prompt invariance: {entry['model']} on {data_title(entry['dataset'])} "
                 f"(n={entry['n']})", prompt_table(entry, "github"), "\n".join(prompt_summary(entry))]
        toc.append((anchor, f"Prompt invariance: {entry['model']}", ""))
    for entry in report.get("analyses", []):  # registered analyses: their own neutral tables
        anchor = slug(f"{entry['analysis']} {entry.get('label', entry['model'])} {entry['dataset']}", taken)
        body += [f'<a id="{anchor}"></a>', f"## {analysis_title(entry)}", analysis_table(entry, "github"),
                 *analysis_notes(entry)]
        toc.append((anchor, analysis_title(entry), ""))
    if figures:  # PNG files beside the .md (write_report draws them), linked by relative path
        body += ['<a id="figures"></a>', "## Figures"]
        for plot, link in figures:
            body += [f"### {plot.title}", plot.caption, f"![{plot.title}]({link})"]
        toc.append(("figures", f"Figures ({len(figures)})", ""))
    body += ['<a id="run-details"></a>', "## Run details and versions"]
    for title, rows, headers in run_details(report):
        body += [f"### {title}", table(headers, [[cell(x) for x in row] for row in rows])]
    toc.append(("run-details", "Run details and versions", ""))

    head = ["# Robustness report", report_meta(report)]
    contents = ['<a id="contents"></a>', "## Contents",
                "\n".join(f"{k}. [{label}](#{anchor})" + (f": {note}" if note else "")
                          for k, (anchor, label, note) in enumerate(toc, 1))]
    if figures is None:  # text alone (a PR comment): GitHub drops data: images, and base64 figures outgrow it
        kinds = dict.fromkeys(FIGURE_NAMES[p.kind] for p in report_plots(report))  # (their data: nothing drawn)
        if kinds:
            contents.append(f"Figures ({', '.join(kinds)}): in the HTML report, or as files with "
                            "`memerobust plot REPORT.json --out DIR`.")
    return "\n\n".join(head + _verdict(report, anchors) + contents + _baseline(report) + body) + "\n"
