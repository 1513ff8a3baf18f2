"""A self-contained HTML page of a report, for a reviewer: it opens on the run's verdict (PASS/FAIL, per model the
counts and the weakest perturbation families, the failing cases with their violations, the baseline comparison),
with the contents beside it; then one section per suite, most failing first (its cases, bars with intervals, the
heat map of the text x image grid, the worst memes with their caption edits spelled out, the paper's tables); the
run's details and versions last. Colours follow the test verdict (pass, fail within noise, fail for sure, skipped)
everywhere, with a legend. The page renders the verdict the report recorded and decides nothing. No scripts, no
external files."""
from __future__ import annotations

import html
import re

from .analysis_tables import analysis_notes, analysis_table, analysis_title
from .gallery import caption_pair as gallery_caption_pair, code_point, distinct_memes, visible
from .outline import (BASELINE_HEADERS, BASELINE_NUMERIC, GATES, MARKS, NO_VERDICT, NOT_JUDGED, PALETTE,
                      VERDICT_LABELS, VERDICT_MEANING, VERDICTS, baseline_cells, skipped_by_reason, skipped_contents,
                      skipped_title, some_cases, interval, unnumbered, verdict_columns, baseline_failure_word,
                      baseline_notes, brief, caption_labels, case_of, gate_shown, model_counts,
                      confidence_level, counts, counts_text, has_verdict, number, p_value, partial_note,
                      regression_line, report_meta, run_details, section_title, severity_order, short_title, signed,
                      slug, table_heading, verdict_of, verdict_word, violation_parts, worst_violations)
from .plots import budget_plot, group_plots, to_svg
from .tables import (NO_ANSWERS, budget_table, budget_title, metric_text, prompt_summary, prompt_table,
                     reliance_table, render, transfer_table, unanswered, unlabelled_row)

_CLASS = {"fail for sure": "sure", "fail within noise": "noise", "error": "error", "pass": "pass", "skipped": "skip",
          NO_VERDICT: "none"}

# Fonts with glyphs for look-alike letters (Cyrillic, Greek, mathematical letters) and symbols, before the system's:
# a caption edit drawn as empty boxes is an edit nobody can see.
_FONTS = ('"DejaVu Sans", "Noto Sans", "Segoe UI", "Helvetica Neue", Arial, "Noto Sans Math", "STIX Two Math", '
          '"Cambria Math", "Noto Color Emoji", "Segoe UI Emoji", "Segoe UI Symbol", sans-serif')
_MONO = ('"DejaVu Sans Mono", "Noto Sans Mono", Menlo, Consolas, "DejaVu Sans", "Noto Sans Math", "STIX Two Math", '
         '"Cambria Math", "Noto Color Emoji", "Segoe UI Emoji", "Segoe UI Symbol", monospace')

_STYLE = ("""
*{box-sizing:border-box}
body{font-family:%(fonts)s;margin:0;color:#1f2328;line-height:1.45;font-size:15px}
.layout{display:grid;grid-template-columns:240px minmax(0,1fr)}
nav#contents{position:sticky;top:0;height:100vh;overflow:auto;border-right:1px solid #d0d7de;background:#f6f8fa;
  padding:14px 12px;font-size:13px}
nav#contents h2{font-size:13px;margin:0 0 6px;border:0;text-transform:uppercase;letter-spacing:.05em;color:#57606a}
nav#contents ol{list-style:none;padding:0;margin:0}nav#contents li{margin:3px 0}
nav#contents a{color:#0b57d0;text-decoration:none}nav#contents a:hover{text-decoration:underline}
nav#contents .n{display:block;font-size:11.5px;color:#57606a;margin-left:2px}
nav#contents .badge{display:block;font-weight:bold;font-size:15px;padding:4px 8px;border-radius:4px;margin-bottom:10px}
main{padding:16px 28px 60px;max-width:1160px;min-width:0}
h1{font-size:22px;margin:4px 0 2px}h2{font-size:18px;margin-top:34px;border-bottom:1px solid #d0d7de;padding-bottom:3px}
h3{font-size:15px;margin:18px 0 6px}
.meta{color:#57606a;font-size:13px;margin:0 0 10px}
table{border-collapse:collapse;margin:6px 0;font-size:13px}
td,th{border:1px solid #d8dee4;padding:3px 7px;text-align:right}
th{background:#f3f4f6}td:first-child{text-align:left}td.l,th.l{text-align:left}
.scroll{overflow-x:auto}
.banner{display:flex;align-items:center;gap:16px;border-radius:6px;padding:12px 16px;border:2px solid}
.banner .word{font-size:30px;font-weight:bold;letter-spacing:.04em;white-space:nowrap}
.banner .summary{font-size:16px;color:#1f2328}.banner .gate{font-size:13px;color:#3d444d}
.models{margin-top:12px}.models td:first-child,.families td:first-child{white-space:nowrap}.models td.count{text-align:center}.models td.zero{color:#8c959f}
.chip{display:inline-block;border-radius:10px;padding:0 8px;margin:1px 2px;font-size:12.5px;white-space:nowrap;
  border:1px solid}
.legend{font-size:12.5px;color:#3d444d;margin:4px 0 10px}
.legend .chip{margin-right:4px}
.cases td{vertical-align:top}.cases td.v,.cases td.n{white-space:nowrap}.cases td.w{min-width:11em}
.cases td.name{max-width:300px}.cases td.name a{text-decoration:none;color:inherit}
.cases td.name small{color:#57606a}.nw{white-space:nowrap}
.note{color:#57606a;font-size:13px}
pre.msg{margin:0;font-family:%(mono)s;font-size:12px;white-space:pre-wrap;word-break:break-word}
svg text{font-family:%(fonts)s}
figure.plot{margin:12px 0}figure.plot svg{max-width:100%%;height:auto;display:block}
figure.plot figcaption{font-size:13px;color:#3d444d;margin:0 0 4px;max-width:900px}
.example{display:grid;grid-template-columns:232px minmax(0,1fr);gap:14px;border:1px solid #d0d7de;border-radius:6px;
  padding:10px;margin:10px 0}
.example img{width:224px;height:224px;object-fit:contain;background:#f6f8fa;border:1px solid #d0d7de}
.example .nopic{width:224px;height:60px;color:#57606a;font-size:13px}
.example .head{margin-bottom:6px}.example .also{font-size:12.5px;color:#57606a;margin-top:6px}
.captions{width:100%%;table-layout:fixed}.captions td,.captions th{text-align:left;vertical-align:top}
.cap{font-family:%(mono)s;font-size:14px;white-space:pre-wrap;word-break:break-word}

del{background:#ffc7c2;text-decoration:line-through;text-decoration-color:#c62828}
ins{background:#ffe38a;text-decoration:none;outline:1px solid #d4a200}
.gap{border-left:2px solid #c62828;margin:0 1px}
.cp{white-space:nowrap}.cp sub{font-family:%(fonts)s;font-size:10px;color:#6b21a8;background:#f3e8ff;
  border-radius:3px;padding:0 2px;margin-left:1px;vertical-align:baseline}
""" % {"fonts": _FONTS, "mono": _MONO}) + "".join(
    f".v-{_CLASS[v]}{{color:{strong};background:{light};border-color:{strong}}}"
    f".banner.v-{_CLASS[v]} .word{{color:{strong}}}" for v, (strong, light) in PALETTE.items())

_CHANNELS = ("text=", "image=", "prompt=")


def _e(value) -> str:
    return html.escape(str(value))


def _short(condition: str) -> str:
    """`text=typos@3+image=uap@3` -> `typos@3+uap@3`: the condition as a reader names it."""
    for prefix in _CHANNELS:
        condition = condition.replace(prefix, "")
    return condition


def _chip(verdict: str, text: str | None = None, title: str | None = None) -> str:
    label = text if text is not None else (f"{MARKS.get(verdict, '?')} {VERDICT_LABELS[verdict]}" if verdict in MARKS
                                           else verdict)
    tip = title or VERDICT_MEANING.get(verdict, "")
    return f'<span class="chip v-{_CLASS.get(verdict, "none")}" title="{_e(tip)}">{_e(label)}</span>'


def legend(extra: str = "") -> str:
    """The verdict colours, each with its meaning as a tooltip."""
    return ('<div class="legend">Colour = the case\'s test verdict: ' + "".join(_chip(v) for v in VERDICTS)
            + _chip(NO_VERDICT, f"? {NO_VERDICT}") + (f" {extra}" if extra else "") + "</div>")


# --- the first screen: the verdict ---------------------------------------------------------------------------


def _deciding(violations: list[dict]) -> list[dict]:
    """The violations that fail the case (`fails`, as the run recorded; else the sure ones), or all when none does."""
    key = "fails" if any("fails" in v for v in violations) else "sure"
    return [v for v in violations if v.get(key)] or violations


def _breakable(name: str) -> str:
    """A case name that wraps only after `+` or `_`, never at the hyphen of `typos-4`."""
    pieces = re.findall(r"[^+_]*[+_]?", name)
    return "<wbr>".join(f"<span class='nw'>{_e(p)}</span>" for p in pieces if p)


def _case_name(case: dict, anchors: dict[str, str] | None) -> str:
    """The case's name in bold over the rest of its node id, linked to its suite's section."""
    head, _, name = str(case.get("nodeid", "")).rpartition("::")
    href = (anchors or {}).get(case.get("nodeid", ""))
    text = f"<b>{_breakable(name)}</b><br><small>{_e(head)}::</small>"
    return f'<a href="#{href}">{text}</a>' if href else text


def _case_rows(cases: list[dict], anchors: dict[str, str] | None = None, deciding_only: bool = False,
               all_failed: bool = False, level: str = "95%") -> str:
    """One block of rows per case: its name (linked to its suite's section), verdict, and each violation with its
    value, the limit it had to meet and the interval; then its p-value. `deciding_only`: only the violations that
    fail the case, the others in one line; `all_failed`: every case failed the run (the verdict's list), so
    that goes unsaid."""
    rows = []
    for case in cases:
        verdict = verdict_of(case)
        violations = worst_violations(case)
        shown = _deciding(violations) if deciding_only else violations
        regressions = [r for r in case.get("regressions") or [] if r.get("regressed", True)]
        p = case.get("p_value")
        fdr = case.get("fdr_survives") if verdict_of(case) in ("fail for sure", "fail within noise") else None
        p_cell = _e(p_value(p)) + ("" if fdr is None else "<br><small>survives FDR</small>" if fdr
                                   else "<br><small>may be chance (FDR)</small>")
        lines = []
        for v in shown:
            what, value, limit, ci = (_e(x) for x in violation_parts(v))
            mark = MARKS["fail for sure"] if v.get("sure") else MARKS["fail within noise"]
            lines.append(f"<td class='l w'>{mark} {what}</td><td class='n'>{value}</td><td class='n'>{limit}</td>"
                         f"<td class='n'>{ci}</td>")
        for r in regressions:
            lines.append(f"<td class='l' colspan='4'>{_e(regression_line(r))}</td>")
        rest = [v for v in violations if not any(v is w for w in shown)]
        if rest:
            lines.append("<td class='l note' colspan='4'>also past a limit within noise: " + "; ".join(
                f"{_e(brief(w))} {_e(x)} ({_e(lim)}, CI {_e(ci)})"
                for w, x, lim, ci in (violation_parts(v) for v in rest)) + "</td>")
        lines += [f"<td class='l note' colspan='4'>{MARKS[NOT_JUDGED]} {_e(u.get('what', ''))} "
                  f"{_e(u.get('reason', ''))}</td>" for u in case.get("not_judged") or []]
        if not lines and case.get("message"):  # a test that is not a suite case: its failure message
            lines.append(f"<td class='l' colspan='4'><pre class='msg'>{_e(case['message'])}</pre></td>")
        if not lines:
            reason = (case.get("skip_reason") or case.get("not_gating")
                      or ("every threshold met" if verdict == "pass" else "no violation recorded"))
            lines.append(f"<td class='l note' colspan='4'>{_e(reason)}</td>")
        n = len(lines)
        failed = ""
        if case.get("outcome") == "failed":
            gated = ", ".join(case.get("gated_by") or [])
            failed = ("" if all_failed else "<br><b>failed the run</b>") + (f"<br><small>by {_e(gated)}</small>"
                                                                           if gated else "")
        regressed = ("<br>" + _chip("fail for sure", f"{MARKS['fail for sure']} {baseline_failure_word(case)}",
                                    "against the baseline on the same memes, under the run's error control")
                     if case.get("regressed") else "")
        lead = (f"<td class='l name' rowspan='{n}'>{_case_name(case, anchors)}</td>"
                f"<td class='l v' rowspan='{n}'>{_chip(verdict)}{regressed}{failed}</td>")
        tail = f"<td rowspan='{n}'>{p_cell}</td>"
        rows.append(f"<tr>{lead}{lines[0]}{tail}</tr>" + "".join(f"<tr>{line}</tr>" for line in lines[1:]))
    return ("<div class='scroll'><table class='cases'><tr><th class='l'>case</th><th class='l'>verdict</th>"
            f"<th class='l'>violated</th><th>value</th><th>required</th><th>{_e(level)} interval</th>"
            "<th title='one-sided p-value of meeting the thresholds'>p</th></tr>"
            + "".join(rows) + "</table></div>")


def _models_table(models: list[dict]) -> str:
    """One row per model: its cases and how many have each verdict (the non-zero counts in their colour), how many
    failed the run (and regressed against the baseline, when one was compared)."""
    regressions = any("regressed" in m for m in models) and any(m.get("regressed") for m in models)
    columns = verdict_columns([model_counts(m) for m in models])
    rows = []
    for m in models:
        c = model_counts(m)
        cells = "".join(f"<td class='count'>{_chip(v, f'{MARKS[v]} {c[v]}')}</td>"
                        if c[v] else "<td class='count zero'>0</td>" for v in columns)
        rows.append(f"<tr><td><b>{_e(m.get('model', ''))}</b></td><td>{int(m.get('cases', 0) or 0)}</td>{cells}"
                    f"<td><b>{int(m.get('failed', 0) or 0)}</b></td>"
                    + (f"<td>{int(m.get('regressed', 0) or 0)}</td>" if regressions else "") + "</tr>")
    return ("<div class='scroll'><table class='models'><tr><th class='l'>model</th><th>cases</th>"
            + "".join(f"<th>{_e(VERDICT_LABELS[v])}</th>" for v in columns) + "<th>failed the run</th>"
            + ("<th>regressed</th>" if regressions else "") + "</tr>" + "".join(rows) + "</table></div>")


def _families_table(models: list[dict]) -> str:
    """Per model, its weakest perturbation families (worst first), as the run recorded them."""
    rows = [(m.get("model", ""), f) for m in models for f in m.get("weakest_families") or []]
    if not rows:
        return ""
    several = len({model for model, _ in rows}) > 1
    body = "".join(
        "<tr>" + (f"<td>{_e(model)}</td>" if several else "")
        + f"<td class='l'>{_e(f.get('family', ''))}</td><td class='l'>{_e(_short(str(f.get('condition', ''))))}</td>"
        f"<td class='l'>{_chip(f.get('verdict') or NO_VERDICT)}</td><td class='l'>{_e(f.get('what', ''))}</td>"
        f"<td>{_e(number(f.get('value')))}</td><td>{_e(number(f.get('limit')))}</td></tr>" for model, f in rows)
    return ("<h3>Weakest perturbation families</h3><div class='scroll'><table class='families'><tr>"
            + ("<th class='l'>model</th>" if several else "") + "<th class='l'>family</th><th class='l'>its worst "
            "condition</th><th class='l'>verdict</th><th class='l'>measure</th><th>value</th><th>limit</th></tr>"
            f"{body}</table></div>")


def _verdict_section(report: dict, anchors: dict[str, str]) -> str:
    if not has_verdict(report):
        return ("<section id='verdict'><div class='banner v-none'><span class='word'>NO VERDICT</span><span>"
                f"<span class='summary'>{NO_VERDICT}</span><br><span class='gate'>This report was written before "
                "verdicts were recorded: the sections below carry the numbers, not whether the run passed."
                "</span></span></div></section>")
    verdict = report["verdict"]
    gate = gate_shown(verdict)
    word, mark, style = verdict_word(verdict)
    note = partial_note(report)
    parts = [f"<section id='verdict'><div class='banner v-{_CLASS[style]}'><span class='word'>"
             f"{mark} {word}</span><span><span class='summary'>{_e(verdict.get('summary', ''))}</span>"
             + (f"<br><span class='gate'>gate: <b>{_e(gate)}</b>: {_e(GATES.get(gate, ''))}</span>" if gate else "")
             + (f"<br><span class='gate'><b>{_e(note)}</b></span>" if note else "") + "</span></div>"]
    models = verdict.get("models") or []
    if models:  # most failing first, as the suites
        models = sorted(models, key=lambda m: (-int(m.get("failed", 0) or 0), -int(m.get("fail for sure", 0) or 0),
                                               -int(m.get("fail within noise", 0) or 0)))
        parts.append(_models_table(models) + _families_table(models))
    fdr = verdict.get("fdr")
    if fdr:
        chance = int(fdr.get("failing", 0)) - int(fdr.get("surviving", 0))
        parts.append(f"<p class='note'>False discovery rate (Benjamini-Hochberg, q = {fdr.get('q')}): "
                     f"{fdr.get('surviving')} of {fdr.get('failing')} failing cases survive over "
                     f"{fdr.get('confident')} confident cases" + (f"; {chance} may be chance" if chance > 0 else "")
                     + ".</p>")
    baseline = verdict.get("baseline")
    if baseline:
        from ..judge.gate import improved_count_clause

        parts.append(f"<p><b>Baseline</b> <code>{_e(baseline.get('path', ''))}</code>: "
                     f"{_e(baseline.get('summary', '') + improved_count_clause(baseline))} "
                     "<a href='#baseline'>(comparison)</a></p>")
    detectors = verdict.get("detectors")
    if detectors:
        from .comparisons import DETECTOR_HEADERS, LISTED, detector_counts, detector_method, detector_rows

        from ..judge.gate import ErrorControl

        control = ErrorControl.parse(detectors["control"])
        rows = detectors["comparisons"]
        parts.append(f"<p><b>Detectors: which loses less to the edits, beyond noise</b> "
                     f"({_e(detector_method(control.alpha, control.method, len(rows)))}): "
                     + "; ".join(_e(line) for line in detector_counts(rows)) + ".</p>")
        decided = detector_rows(rows, limit=LISTED)
        if decided:
            head = "".join(f"<th>{_e(h)}</th>" for h in DETECTOR_HEADERS)
            body = "".join("<tr>" + "".join(f"<td>{_e(c)}</td>" for c in row) + "</tr>" for row in decided)
            parts.append(f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")
    cases = {c.get("nodeid"): c for c in report.get("cases") or [] if isinstance(c, dict)}
    failing = list(verdict.get("failing") or [])
    parts.append(f"<h2 id='failing'>Failing cases ({len(failing)})</h2>")
    if failing:
        known = [cases[n] for n in failing if n in cases]
        others = [n for n in failing if n not in cases]
        parts.append(legend() + _case_rows(known, anchors, deciding_only=True, all_failed=True,
                                           level=confidence_level(report))
                     if known else "")
        if others:
            parts.append("<p>Other failing tests (not suite cases): "
                         + ", ".join(f"<code>{_e(n)}</code>" for n in others) + "</p>")
    else:
        parts.append("<p>No case failed the run.</p>")
    parts.append(_skipped(list(cases.values())) + "</section>")
    return "".join(parts)


def _skipped(cases: list[dict]) -> str:
    """The cases that were skipped or not judged, one row per reason with how many and which."""
    groups = skipped_by_reason(cases)
    if not groups:
        return ""
    rows = "".join(f"<tr><td class='l'>{_e(reason)}</td><td>{len(mine)}</td><td class='l'>{_e(some_cases(mine))}"
                   "</td></tr>" for reason, mine in groups)
    return (f"<h2 id='skipped'>{_e(skipped_title(groups))}</h2><div class='scroll'><table><tr><th class='l'>reason"
            f"</th><th>cases</th><th class='l'>which</th></tr>{rows}</table></div>")


def _baseline_section(report: dict) -> str:
    baseline = (report.get("verdict") or {}).get("baseline") if has_verdict(report) else None
    if not baseline:
        return ""
    from .gate_tables import change_lists, improved_only, shown_decision

    rows = sorted(baseline.get("rows") or [], key=lambda r: (not r.get("regressed"), not improved_only(r)))

    def row(r):
        cells = baseline_cells(shown_decision(r))
        decision = (_chip("fail for sure", f"✗ {cells[-1]}") if r.get("regressed") else
                    _chip("skipped", cells[-1]) if str(r.get("state", "")).startswith("not judged") else
                    _chip("pass", f"▲ {cells[-1]}") if improved_only(r) else _chip("pass", f"✓ {cells[-1]}"))
        return ("<tr>" + "".join(f"<td{'' if i in BASELINE_NUMERIC else ' class=l'}>{_e(c)}</td>"
                                 for i, c in enumerate(cells[:-1])) + f"<td class='l'>{decision}</td></tr>")

    notes = "".join(f"<p>{_e(n)}</p>" for n in baseline_notes(baseline))
    improved = f"<p>{_e(baseline['improved_summary'])}.</p>" if baseline.get("improved_summary") else ""
    lists = "".join(f"<h3>{_e(title)}</h3>" + ("<ul>" + "".join(f"<li><code>{_e(line)}</code></li>" for line in lines)
                                               + "</ul>" if lines else "<p>None.</p>")
                    for title, lines in change_lists(baseline))
    return (f"<h2 id='baseline'>Baseline comparison: {_e(baseline.get('path', ''))}</h2><p>"
            f"{_e(baseline.get('summary', ''))}. Difference = now − before on the same memes.</p>{improved}{lists}"
            f"{notes}<div class='scroll'><table><tr>" + "".join(
                f"<th{'' if i in BASELINE_NUMERIC else ' class=l'}>{h}</th>" for i, h in enumerate(BASELINE_HEADERS))
            + f"</tr>{''.join(row(r) for r in rows)}</table></div>")


# --- per suite -------------------------------------------------------------------------------------------------


def _case_colour(case: dict | None, light: bool = False) -> str:
    return PALETTE.get(verdict_of(case), PALETTE[NO_VERDICT])[1 if light else 0]


def _accuracy_limit(case: dict | None):
    """The relative-robustness-of-accuracy floor the case had to meet, when its thresholds name one."""
    floor = ((case or {}).get("thresholds") or {}).get("min_relative_robustness")
    value = floor.get("accuracy") if isinstance(floor, dict) else floor if isinstance(floor, (int, float)) else None
    return value if isinstance(value, (int, float)) else None


def _heatmap(group: dict, cases: list[dict]) -> str:
    """Per text x image cell the change in accuracy, perturbed − clean (negative: the pair lowers it), on the colour
    of the cell's case verdict; without recorded verdicts, tinted red by the size of the drop."""
    cells = {r["condition"]: r for r in group["results"] if r["kind"] == "combined"}
    if not cells:
        return ""
    texts, images = group["grid_text"], group["grid_image"]
    clean = group["clean"]["metrics"]["accuracy"]
    size, left = 76, 170
    # column labels lean right at -40 degrees: leave room for the longest above the grid and beyond its last column
    longest = max(len(i.split("=", 1)[1]) for i in images)
    top = max(30, int(0.64 * 6.2 * longest) + 14)
    width, height = left + size * len(images) + max(10, int(5.5 * longest)), top + size * len(texts) + 10
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-size="11" '
             f'overflow="visible" role="img" aria-label="accuracy change per text x image pair">']
    for j, image in enumerate(images):
        x = left + j * size + size / 2
        parts.append(f'<text x="{x}" y="{top - 6}" transform="rotate(-40 {x} {top - 6})">'
                     f'{_e(image.split("=", 1)[1])}</text>')
    for i, text in enumerate(texts):
        y = top + i * size
        parts.append(f'<text x="{left - 6}" y="{y + size / 2 + 4}" text-anchor="end">'
                     f'{_e(text.split("=", 1)[1])}</text>')
        for j, image in enumerate(images):
            r = cells.get(f"{text}+{image}")
            x = left + j * size
            if r is None:
                parts.append(f'<rect x="{x}" y="{y}" width="{size}" height="{size}" fill="#f6f8fa" stroke="#fff"/>')
                continue
            change = r["metrics"]["accuracy"] - clean
            case = case_of(cases, r["condition"])
            if cases:
                fill, stroke = _case_colour(case, light=True), _case_colour(case)
            else:
                shade = max(0.0, min(1.0, -change / max(clean, 1e-9) / 0.5))  # 50% relative drop = full red
                fill, stroke = f"rgb(255,{int(255 * (1 - shade))},{int(255 * (1 - shade))})", "#bbb"
            verdict = verdict_of(case) if cases else NO_VERDICT
            tip = (f"{r['condition']}: accuracy {metric_text(r, r['metrics']['accuracy'])} (clean "
                   f"{metric_text(group['clean'], clean)}); {verdict}")
            mark = MARKS.get(verdict, "")
            parts.append(f'<rect x="{x + 1}" y="{y + 1}" width="{size - 2}" height="{size - 2}" fill="{fill}" '
                         f'stroke="{stroke}" stroke-width="1.5"><title>{_e(tip)}</title></rect>'
                         f'<text x="{x + size / 2}" y="{y + size / 2 + 1}" text-anchor="middle" font-size="14" '
                         f'font-weight="bold">{"–" if unanswered(r) or unlabelled_row(r) else signed(change)}</text>'
                         f'<text x="{x + size / 2}" y="{y + size / 2 + 17}" text-anchor="middle" fill="#3d444d">'
                         f'{_e(mark)} ' + (NO_ANSWERS if unanswered(r) else
                                           f'flips {r["flip_rate"]:.3f}' if unlabelled_row(r) else
                                           f'acc {r["metrics"]["accuracy"]:.3f}')
                         + '</text>')
    parts.append("</svg>")
    key = ("cell colour: the case's verdict" if cases else "no verdict recorded: cells tinted red by the drop "
           "(full red: half the clean accuracy lost)")
    return (f"<p>Accuracy drop from clean per text x image pair, shown as perturbed − clean accuracy (clean "
            f"{metric_text(group['clean'], clean)}; −0.200: 20 points lower); {key}</p>" + "".join(parts))


def _bars(group: dict, cases: list[dict]) -> str:
    """Relative robustness of accuracy per single-channel perturbation with its paired bootstrap interval, coloured
    by the case's verdict, with the floor the case had to meet and the violation that decided it."""
    rows = [r for r in group["results"] if r["kind"] in ("text", "image")]
    if not rows:
        return ""
    if all(unlabelled_row(r) for r in rows):  # nothing to draw: the flip rates are in the tables
        return ("<p>The memes have no labels: relative robustness of accuracy is not judged (no labels); each "
                "perturbation's flip rate against the clean prediction is in the tables below.</p>")
    scale, row_h = 300, 20
    left = min(300, 14 + int(7 * max(len(_short(r["condition"])) for r in rows)))  # (11 px glyphs: up to 7 px)
    lo_axis, hi_axis = 0.0, 1.2
    x = lambda v: left + (min(max(v, lo_axis), hi_axis) - lo_axis) / (hi_axis - lo_axis) * scale
    height = row_h * len(rows) + 30
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{left + scale + 420}" height="{height}" font-size="11" '
             f'role="img" aria-label="relative robustness of accuracy per perturbation">',
             f'<line x1="{x(1.0)}" y1="0" x2="{x(1.0)}" y2="{height - 20}" stroke="#888" stroke-dasharray="3"/>']
    for k, r in enumerate(rows):
        y = k * row_h + 4
        value = r["relative_robustness"]["accuracy"]
        lo, hi = r["relative_robustness_ci"]["accuracy"]
        case = case_of(cases, r["condition"]) if cases else None
        verdict = verdict_of(case)
        colour = _case_colour(case)
        worst = worst_violations(case or {})
        note = f"{MARKS[verdict]} " if verdict in MARKS else ""
        if worst:
            what, v, _, _ = violation_parts(worst[0])
            wrong = "<" if worst[0].get("comparison") == ">=" else ">"
            note += (f"{brief(what)} {v} {wrong} {number(worst[0].get('limit'))}"
                     + (f" (+{len(worst) - 1} more)" if len(worst) > 1 else ""))
        elif verdict in MARKS:
            note += verdict
        tip = f"{(case or {}).get('nodeid', r['condition'])}: {verdict}"
        floor = _accuracy_limit(case)
        parts.append(f'<g><title>{_e(tip)}</title>'
                     f'<text x="{left - 6}" y="{y + 12}" text-anchor="end">{_e(_short(r["condition"]))}</text>'
                     f'<rect x="{x(lo_axis)}" y="{y + 3}" width="{max(0.0, x(value) - x(lo_axis))}" height="12" '
                     f'fill="{colour}" opacity=".78"/>'
                     + ("" if unanswered(r) or unnumbered(lo) or unnumbered(hi) else
                        f'<line x1="{x(lo)}" y1="{y + 9}" x2="{x(hi)}" y2="{y + 9}" stroke="#111" '
                        'stroke-width="1.5"/>')
                     + (f'<line x1="{x(floor)}" y1="{y + 1}" x2="{x(floor)}" y2="{y + 17}" stroke="#111" '
                        f'stroke-width="2"/>' if floor is not None else "")
                     + f'<text x="{left + scale + 8}" y="{y + 12}">'
                     + (NO_ANSWERS if unanswered(r) else f"{number(value)} ({interval([lo, hi])})")
                     + f' <tspan fill="{colour}">{_e(note)}</tspan></text></g>')
    for tick in (0.0, 0.5, 1.0):
        parts.append(f'<text x="{x(tick)}" y="{height - 6}" text-anchor="middle">{tick}</text>')
    parts.append("</svg>")
    return ("<p>Relative robustness of accuracy (perturbed / clean accuracy) per perturbation: bar = estimate, thin "
            "line = its interval, black tick = the floor the case had to meet, dashed = 1 (no loss); on the right, "
            "the violation that decided the case (McNemar's p is in the tables below)</p><div class='scroll'>"
            + "".join(parts) + "</div>")


def _trend_section(report: dict) -> str:
    """The run history's trend (report["history"], with --memerobust-history): the chart, then the runs and, per
    family, its worst case's relative robustness run by run with the state judge/trend.py gave it."""
    from .history import STATE_LEGEND, erosion_lines, runs_table, trend_tables
    from .plots import trend_plot

    block = report.get("history") or {}
    entries = block.get("entries") or []
    if not entries:
        return ""
    series, runs = block.get("series") or [], [e["run"] for e in entries]
    plot = trend_plot(entries)
    alerts = "".join(f"<p><strong>{_e(line)}</strong></p>" for line in erosion_lines(series))
    return (f"<section id='trend'><h2>Trend over the last {len(entries)} runs</h2>"
            f"<p class='note'>From the run history {_e(block.get('path', ''))} (this run last). "
            f"{_e(STATE_LEGEND)}</p>{alerts}{figure(plot) if plot else ''}<div class='scroll'>"
            f"{runs_table(entries, 'html')}"
            f"{trend_tables(series, runs, 'html', heading=lambda t: f'<h3>{_e(t)}</h3>')}</div></section>")


def figure(plot) -> str:
    """A figure of report/plots.py inline (SVG text, no file), its caption saying how to read it above."""
    return f"<figure class='plot'><figcaption>{_e(plot.caption)}</figcaption>{to_svg(plot, inline=True)}</figure>"


def _char(ch: str) -> str:
    """One caption character for the page: itself, or, outside plain ASCII, itself with its code point beside it
    (and the character's name as a tooltip), so a look-alike or invisible character is seen."""
    if visible(ch):
        return html.escape(ch)
    point = code_point(ch)
    return f'<span class="cp" title="{_e(point)}">{html.escape(ch)}<sub>{_e(point.split(" ", 1)[0])}</sub></span>'


def _text(text: str) -> str:
    return "".join(_char(ch) for ch in text)


def _gap(side: str, other: str) -> str:
    """A thin mark where the other side's edit sits, its text as a tooltip."""
    return f"<span class='gap' title='{'inserted' if side == 'before' else 'removed'} here: {_e(other)}'></span>"


def caption_pair(before: str, after: str) -> tuple[str, str]:
    """The clean and perturbed captions as HTML, what the edit removed struck through in the first, what it put in
    highlighted in the second, a thin mark on a side with nothing where the other side's edit sits."""
    return gallery_caption_pair(before, after, _text, _gap)


def _worst(group: dict, cases: list[dict]) -> str:
    examples = distinct_memes(group.get("worst_examples", []))
    if not examples:
        return ""
    blocks = []
    for e in examples:
        case = case_of(cases, e["condition"]) if cases else None
        picture = (f'<img alt="{_e(e["id"])}" src="data:image/png;base64,{e["thumbnail"]}">' if e.get("thumbnail")
                   else "<div class='nopic'>no picture (a caption-only meme)</div>")
        before, after = e.get("caption", ""), e.get("perturbed_caption", "")
        clean_html, perturbed_html = caption_pair(before, after)
        if before == after:
            perturbed_html += " <span class='note'>(caption unchanged: the picture was edited)</span>"
        also = e.get("also") or []
        blocks.append(
            f"<div class='example'>{picture}<div><div class='head'><b>{_e(e['id'])}</b> under "
            f"<code>{_e(_short(e['condition']))}</code> {_chip(verdict_of(case)) if cases else ''}<br>"
            f"{_e(e.get('label_basis', 'true label'))} <b>{_e(e.get('label', ''))}</b>: "
            f"p({_e(e.get('label_basis', 'true label'))}) {e['p_true_clean']:.3f} → "
            f"{e['p_true_perturbed']:.3f} ({signed(e['p_true_perturbed'] - e['p_true_clean'])})</div>"
            "<table class='captions'><tr>" + "".join(f"<th>{_e(label)}</th>" for label in caption_labels(e)) + "</tr>"
            f"<tr><td class='cap'>{clean_html}</td><td class='cap'>{perturbed_html}</td></tr></table>"
            + (f"<div class='also'>also among the worst under: {_e(', '.join(_short(c) for c in also))}</div>"
               if also else "")
            + (f"<div class='also'>scene text, kept out of the caption: {_e(e['scene_text'])}</div>"
               if e.get("scene_text") else "") + "</div></div>")
    return ("<h3>Worst examples</h3><p>Distinct memes whose probability of the true label (without labels: of the "
            "clean prediction) fell the most, each under "
            "the condition that hurt it most. In the captions, <del>struck</del>: what the edit removed; "
            "<ins>highlighted</ins>: what it put in; characters outside ASCII carry their code point "
            "(hover for the name).</p>" + "".join(blocks))


def _group_section(group: dict, cases: list[dict], anchor: str, level: str = "95%") -> str:
    c = counts(cases)
    status = (f"<p>{len(cases)} cases: " + " ".join(_chip(v, f"{MARKS[v]} {c[v]} {VERDICT_LABELS[v]}")
                                                    for v in verdict_columns([c]) if c[v] or v == "pass")
              + f" · <b>{c['failed']} failed the run</b></p>" + legend()) if cases else (
        f"<p class='note'>{NO_VERDICT}</p>")
    not_passing = [k for k in cases if verdict_of(k) in ("fail for sure", "fail within noise", "error")]
    not_passing.sort(key=lambda k: (k.get("outcome") != "failed", verdict_of(k) != "fail for sure"))
    table = (f"<h3>Cases that do not pass ({len(not_passing)})</h3>"
             + _case_rows(not_passing, deciding_only=True, level=level)
             if not_passing else "")
    tables = render({"groups": [group], "reliance": [], "prompt_invariance": [], "budgets": []}, "html",
                    heading=lambda t: f"<h3>{_e(table_heading(t, group))}</h3>")
    figures = "".join(figure(plot) for plot in group_plots(group, cases, level))
    return (f"<section id='{anchor}'><h2>{_e(section_title(group))}</h2>{status}{_bars(group, cases)}"
            f"{_heatmap(group, cases)}{figures}{table}{_worst(group, cases)}<div class='scroll'>{tables}</div>"
            "</section>")


# --- other sections and the page -------------------------------------------------------------------------------


def _budget_worst(entry: dict) -> str:
    """Per family, the memes that fell to the smallest edits, with the caption before and the one that got past."""
    rows = []
    for e in entry["entries"]:
        for w in e.get("worst", []):
            if w.get("evasion"):
                before, after = caption_pair(w["caption"], w["evasion"])
            else:
                before, after = _text(w["caption"]), "<small>picture edited</small>"
            rows.append(f"<tr><td>{_e(e['family'])}</td><td>{w['budget']:g} {_e(e.get('unit', ''))}</td>"
                        f"<td>{_e(str(w['id']))}</td><td class='cap l'>{before}</td>"
                        f"<td class='cap l'>{after}</td></tr>")
    if not rows:
        return ""
    return ("<p>The memes that fell to the smallest edits</p><table class='captions'><tr><th>family</th><th>budget</th>"
            f"<th>meme</th><th>caption</th><th>caption that got past</th></tr>{''.join(rows)}</table>")


def _prompt_html(entry: dict) -> str:
    """The prompt-invariance table, then its figures per meme and the memes most sensitive to wording."""
    return prompt_table(entry, "html") + "".join(f"<p>{_e(line)}</p>" for line in prompt_summary(entry))


def _details(report: dict) -> str:
    parts = ["<section id='run-details'><h2>Run details and versions</h2>"]
    for title, rows, headers in run_details(report):
        body = "".join("<tr>" + "".join(f"<td class='l'>{_e(cell)}</td>" for cell in row) + "</tr>" for row in rows)
        parts.append(f"<h3>{_e(title)}</h3><div class='scroll'><table><tr>"
                     + "".join(f"<th class='l'>{_e(h)}</th>" for h in headers) + f"</tr>{body}</table></div>")
    return "".join(parts) + "</section>"


def to_html(report: dict) -> str:
    taken = {"verdict", "failing", "skipped", "baseline", "contents", "run-details", "trend"}
    suites = [(group, cases, slug(short_title(group), taken)) for group, cases in severity_order(report)]
    anchors = {c.get("nodeid"): anchor for _, cases, anchor in suites for c in cases}
    sections, toc = [], [("verdict", "Verdict", "")]
    if has_verdict(report):
        toc.append(("failing", f"Failing cases ({len(report['verdict'].get('failing') or [])})", ""))
        toc += skipped_contents(report)
        if report["verdict"].get("baseline"):
            toc.append(("baseline", "Baseline comparison", ""))
    if (report.get("history") or {}).get("entries"):
        toc.append(("trend", f"Trend over {len(report['history']['entries'])} runs", ""))
    for group, cases, anchor in suites:
        sections.append(_group_section(group, cases, anchor, confidence_level(report)))
        toc.append((anchor, short_title(group), counts_text(counts(cases)) if cases else NO_VERDICT))
    if report.get("reliance"):
        sections.append("<section id='reliance'><h2>Modality reliance: which channel decides</h2>"
                        f"{reliance_table(report['reliance'], 'html')}</section>")
        toc.append(("reliance", "Modality reliance", ""))
    for entry in report.get("budgets", []):
        anchor = slug(f"budgets {entry.get('label', entry['model'])} {entry['dataset']}", taken)
        sections.append(f"<section id='{anchor}'><h2>{_e(budget_title(entry))}</h2>"
                        f"{budget_table(entry['entries'], 'html')}"
                        + (figure(evasion) if (evasion := budget_plot(entry)) else "")
                        + f"{_budget_worst(entry)}</section>")
        toc.append((anchor, f"Evasion budgets: {entry.get('label', entry['model'])}", ""))
    for matrix in report.get("transfer", []):
        anchor = slug(f"transfer {' '.join(matrix['conditions'])} {matrix['dataset']}", taken)
        sections.append(f"<section id='{anchor}'><h2>Transfer of {_e(', '.join(matrix['conditions']))} on "
                        f"{_e(matrix['dataset'])}</h2><p>Of the memes each model classifies correctly clean, the "
                        f"share the attack crafted on another model fools (95% Wilson interval); the diagonal is "
                        f"the white-box attack.</p>{transfer_table(matrix, 'html')}</section>")
        toc.append((anchor, f"Transfer: {', '.join(matrix['conditions'])}", ""))
    for entry in report.get("prompt_invariance", []):
        anchor = slug(f"prompts {entry['model']} {entry['dataset']}", taken)
        sections.append(f"<section id='{anchor}'><h2>Prompt invariance: {_e(entry['model'])} on "
                        f"{_e(entry['dataset'])} (n={entry['n']})</h2>{_prompt_html(entry)}</section>")
        toc.append((anchor, f"Prompt invariance: {entry['model']}", ""))
    for entry in report.get("analyses", []):  # registered analyses: their own neutral tables
        anchor = slug(f"{entry['analysis']} {entry.get('label', entry['model'])} {entry['dataset']}", taken)
        sections.append(f"<section id='{anchor}'><h2>{_e(analysis_title(entry))}</h2>"
                        f"{analysis_table(entry, 'html')}"
                        + "".join(f"<p>{_e(note)}</p>" for note in analysis_notes(entry)) + "</section>")
        toc.append((anchor, analysis_title(entry), ""))
    toc.append(("run-details", "Run details and versions", ""))

    if has_verdict(report):
        word, mark, style = verdict_word(report["verdict"])
        tip = "the run stopped before its last case: no verdict" if report["verdict"].get("interrupted") else None
        badge = _chip(style, f"{mark} {word}", tip).replace('class="chip', 'class="badge')
    else:
        badge = f'<span class="badge v-none">{NO_VERDICT}</span>'
    nav = (f"<nav id='contents' aria-label='contents'>{badge}<h2>Contents</h2><ol>"
           + "".join(f"<li><a href='#{anchor}'>{_e(label)}</a>" + (f"<span class='n'>{_e(n)}</span>" if n else "")
                     + "</li>" for anchor, label, n in toc) + "</ol></nav>")
    meta = report_meta(report)
    return (f"<!doctype html><html lang='en'><head><meta charset='utf-8'>"
            f"<meta name='viewport' content='width=device-width, initial-scale=1'><title>Robustness report</title>"
            f"<style>{_STYLE}</style></head><body><div class='layout'>{nav}<main><h1>Robustness report</h1>"
            f"<p class='meta'>{_e(meta)}</p>{_verdict_section(report, anchors)}{_baseline_section(report)}"
            f"{_trend_section(report)}"
            + "".join(sections) + _details(report) + "</main></div></body></html>\n")
