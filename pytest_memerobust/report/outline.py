"""What a reviewer reads first, shared by the Markdown and HTML reports: the run's verdict, the suites in order of
severity, the anchors of the contents and the wording of a violation. Pure functions over the report dict: they
render the verdict the run recorded (`report["verdict"]`, `report["cases"]`, written by run/report.py) and never
decide one; a report written before verdicts were recorded reads as "no verdict recorded"."""
from __future__ import annotations

import math
import re

from ..judge.verdict import NOT_JUDGED, VERDICT_RANK, worst_case  # noqa: F401  (re-exported: renderers rank by it)
from .figures import NO_LABELS, minus, unnumbered  # noqa: F401  (unnumbered: re-exported)

# The verdicts of a case as thresholds.verdict and the run name them, worst first, with the mark each wears beside
# its colour (so the verdict reads without colour too). `not judged` (measured, but a threshold is undefined on the
# case's memes) has a column, a count and a colour (no verdict's) only where a run has such a case.
VERDICTS = ("fail for sure", "fail within noise", "error", "pass", "skipped")
COUNTED_VERDICTS = (*VERDICTS[:-1], NOT_JUDGED, VERDICTS[-1])
MARKS = {"fail for sure": "✗", "fail within noise": "~", "error": "!", "pass": "✓", "skipped": "–", NOT_JUDGED: "∅"}
# what a count of each verdict is called, the same in the terminal, the reports and the run's summary line
VERDICT_LABELS = {v: v for v in COUNTED_VERDICTS} | {"error": "raised an error"}
NO_VERDICT = "no verdict recorded"
VERDICT_MEANING = {
    "fail for sure": "the whole interval is past a limit: another seed would fail it too",
    "fail within noise": "the value is past a limit but its interval straddles it (fails only when the suite "
                         "decides on the point estimate)",
    "error": "raised an error instead of a measurement: no threshold was checked, and the case fails the run",
    "pass": "every threshold met",
    "skipped": "not run (e.g. the detector does not read that channel)",
    NOT_JUDGED: "measured, but a threshold is undefined on its memes (e.g. they hold one class): neither a pass nor a "
                "failure",
}
# verdict -> (strong colour: marks, bars, borders; light colour: backgrounds, heat map cells)
PALETTE = {
    "fail for sure": ("#c62828", "#ffd6d3"),
    "fail within noise": ("#b45309", "#ffe9a8"),
    "error": ("#8250df", "#eadcff"),
    "pass": ("#1b7c36", "#d3f3dc"),
    "skipped": ("#6e7781", "#e8ebef"),
    NO_VERDICT: ("#57606a", "#eef0f3"),
}
GATES = {
    "thresholds": "a case fails when it breaks its suite's robustness thresholds",
    "regressions": "a case fails when it is worse than the baseline by more than noise",
    "both": "a case fails when it breaks its suite's thresholds or is worse than the baseline by more than noise",
}


def confidence_level(report: dict) -> str:
    """The intervals' confidence level, `95%`."""
    confidence = (report.get("options") or {}).get("confidence")
    return f"{confidence:.0%}" if isinstance(confidence, (int, float)) else "95%"


def has_verdict(report: dict) -> bool:
    return isinstance(report.get("verdict"), dict)


def verdict_word(verdict: dict) -> tuple[str, str, str]:
    """(word, mark, the verdict whose colour it wears): PASS, FAIL, INTERRUPTED for a run that did not finish,
    NO VERDICT for one that measured nothing (every case skipped), or PARTIAL for one that failed nothing but judged
    too few of its cases (judge.verdict.run_verdict): neither passed nor failed its gate, and must not read as
    either."""
    if verdict.get("interrupted"):
        return "INTERRUPTED", "⚠", "fail within noise"
    if verdict.get("no_verdict"):
        return "NO VERDICT", MARKS["skipped"], "skipped"
    if verdict.get("partial"):
        return "PARTIAL", MARKS["skipped"], "skipped"
    return ("PASS", MARKS["pass"], "pass") if verdict.get("passed") else ("FAIL", MARKS["fail for sure"],
                                                                          "fail for sure")


def report_meta(report: dict) -> str:
    """The line under the title: the models on the data, the seed, and how the page is ordered (the models and data
    of the cases' records, for a report that holds only the verdict)."""
    cases = [c for c in report.get("cases") or [] if isinstance(c, dict)]
    models = list(report.get("models") or {}) or list(dict.fromkeys(str(c.get("model")) for c in cases))
    datasets = (report.get("datasets") or {}).items()
    data = "; ".join(f"{data_title(name)}: {info.get('n')} memes" for name, info in datasets) \
        or ", ".join(dict.fromkeys(data_title(str(c["dataset"])) for c in cases if c.get("dataset")))
    return (f"{', '.join(models)} on {data or 'no data'}; seed {report.get('seed')}. "
            "Suites are ordered most failing first; run details and versions are at the end.")


def gate_shown(verdict: dict) -> str | None:
    """The gate a verdict was judged by (`thresholds` where an older report did not say), or None for a run refused
    before any case: no gate judged it, and naming the default would misstate what the run asked for."""
    return None if verdict.get("refused") else verdict.get("gate") or "thresholds"


def partial_note(report: dict) -> str | None:
    """Why a report holds the verdict and the cases' records but no numbers (run/report.py, verdict_report), or None."""
    partial = report.get("partial")
    if not partial:
        return None
    if (report.get("verdict") or {}).get("refused"):
        return ("This report holds only why the run was refused: no case ran. An earlier report at this path was "
                "replaced so that it is not read as this run's.")
    return (f"{partial}. This report holds the verdict and the records of the cases that ran, not their numbers; "
            "an earlier report at this path was replaced so that it is not read as this run's.")


def signed(value, digits: int = 3) -> str:
    """A change with its sign always shown: `+0.012`, `−0.031`; worded when undefined (`unnumbered`)."""
    return unnumbered(value) or minus(f"{value:+.{digits}f}")


def number(value, digits: int = 3) -> str:
    worded = unnumbered(value)
    if worded:
        return worded
    if isinstance(value, float) and math.isinf(value):
        return "∞" if value > 0 else "−∞"
    return minus(f"{value:.{digits}f}")


def interval(ci, digits: int = 3) -> str:
    if not ci or len(ci) != 2 or ci[0] is None:
        return "–"
    return f"{number(ci[0], digits)} .. {number(ci[1], digits)}"


def p_value(p) -> str:
    """A p-value as people read them: 3 significant digits, and `<0.001` below that."""
    if p is None or p != p:
        return "–"
    return "<0.001" if p < 0.001 else f"{p:.3f}"


def data_title(spec: str) -> str:
    """A data spec as a title says it: `folder:memes (OCR captions)` for the results on captions read off the
    pictures, which the report's records key as `folder:memes#ocr-captions`."""
    from ..data.reading import CAPTIONS_BY_OCR

    return spec.removesuffix(CAPTIONS_BY_OCR) + (" (OCR captions)" if spec.endswith(CAPTIONS_BY_OCR) else "")


def group_title(group: dict) -> str:
    """`rainbow-noise: memeblip2-tda on demo (n=160, task=hate)`: the suite, the model's name and the data."""
    suite = f"{group['suite']}: " if group.get("suite") else ""
    return (f"{suite}{group.get('label', group['model'])} on {data_title(group['dataset'])} "
            f"(n={group['clean']['n']}, "
            f"task={group['task']})")


def read_by_ocr(example: dict) -> bool:
    """Whether a worst example's caption before the edit was read off its picture by OCR (worst_examples, in
    run/report.py)."""
    return example.get("caption_source") not in (None, "dataset")


def caption_labels(example: dict) -> tuple[str, str]:
    """What a worst example's two captions are called: `OCR caption` where the caption before the edit was read off
    the picture (never `clean caption`, which says the dataset gave it), and `perturbed caption (OCR)` where the one
    after was read off the perturbed picture."""
    return ("OCR caption" if read_by_ocr(example) else "clean caption",
            "perturbed caption (OCR)" if example.get("perturbed_caption_source") else "perturbed caption")


def violation_parts(v: dict) -> tuple[str, str, str, str]:
    """(what, value, limit, interval) of one violation, the limit with the direction it required: `≥ 0.900`."""
    comparison = {">=": "≥", "<=": "≤"}.get(v.get("comparison"), v.get("comparison") or "")
    return (str(v.get("what", "")), number(v.get("value")), f"{comparison} {number(v.get('limit'))}".strip(),
            interval(v.get("ci")))


def brief(what: str) -> str:
    """`relative robustness of accuracy` -> `rel. accuracy`, where room is short."""
    return what.replace("relative robustness of ", "rel. ").replace("absolute robustness of ", "abs. ")


def regression_text(r: dict) -> str:
    """`accuracy 0.825 → 0.700 (−0.125, bound −0.050, adjusted p 0.004)`, naming a family mean the comparison is of
    (`... over text=typos (mean of 5)`): it goes with each of its member conditions' cases."""
    over = f" over {r['condition']}" if r.get("members") else ""
    if r.get("state", "").startswith("not judged"):
        return f"{r.get('what', '')} {r['state']}{over}"
    if "bound" not in r:  # a report written before the run-level gate
        return (f"{r.get('what', '')} {number(r.get('before'))} → {number(r.get('now'))} "
                f"({signed(r.get('difference'))}, CI {interval(r.get('ci'))}, p {p_value(r.get('p_value'))})")
    return (f"{r.get('what', '')} {number(r.get('before'))} → {number(r.get('now'))} ({signed(r.get('difference'))}, "
            f"bound {signed(r.get('bound'))}, adjusted p {p_value(r.get('p_value'))}){over}")


def regression_line(r: dict) -> str:
    """`regressed against the baseline: accuracy 0.825 → 0.700 (...)`, or `not shown non-inferior against ...`."""
    from .gate_tables import comparison_state

    return f"{comparison_state({'regressed': True, **r})} against the baseline: {regression_text(r)}"


def baseline_failure_word(case: dict) -> str:
    """What a case's failing comparisons say: `regressed`, or `not shown non-inferior` under non-inferiority."""
    states = {r.get("state") for r in case.get("regressions") or [] if r.get("regressed", True)}
    return "not shown non-inferior" if "not shown non-inferior" in states else "regressed"


BASELINE_HEADERS = ["model", "dataset", "condition", "measure", "before", "now", "difference", "bound",
                    "p (one-sided)", "adjusted p", "decision"]
BASELINE_NUMERIC = {4, 5, 6, 7, 8, 9}


def baseline_cells(r: dict) -> list[str]:
    """One comparison of the gate (gate.Comparison.as_dict) as the report's row, under BASELINE_HEADERS."""
    from .gate_tables import POWER, comparison_state

    from ..judge.thresholds import NO_LABELS as NOT_JUDGED_NO_LABELS

    needed = f"; about {r['memes_needed']} memes needed for {POWER:.0%} power" if r.get("memes_needed") else ""
    figures = ([NO_LABELS] * 4 if r.get("state") == NOT_JUDGED_NO_LABELS else  # unlabelled memes: a label-bound rule
               [number(r.get("before")), number(r.get("now")), signed(r.get("difference")), signed(r.get("bound"))])
    return [str(r.get("model", "")), str(r.get("dataset", "")), str(r.get("condition", "")), str(r.get("what", "")),
            *figures, p_value(r.get("p_raw")), p_value(r.get("p_value")), comparison_state(r) + needed]


def baseline_notes(baseline: dict) -> list[str]:
    """Sentences under the gate's summary: the error control, how it resampled, the recipe it judged against, the
    power, the memes needed, which conditions only one side has (named, the first few)."""
    from .gate_tables import gate_notes

    notes = []
    if baseline.get("control_text"):
        question = ("non-inferiority: a rule passes only when the bound of its change that its decision used stays "
                    "within its margin" if baseline.get("mode") == "non-inferiority" else
                    "regressions: a rule fails when it is worse beyond noise, one-sided")
        notes.append(f"{question}; error control: {baseline['control_text']} over {baseline.get('rules', 0)} rules.")
    notes += gate_notes(baseline)
    for key, what in (("new", "in this run but not in the baseline (not gated)"),
                      ("missing", "in the baseline but not run")):
        names = baseline.get(key) or []
        if names:
            notes.append(f"{len(names)} condition{'s' * (len(names) != 1)} {what}: {', '.join(names[:8])}"
                         + (f" and {len(names) - 8} more" if len(names) > 8 else "") + ".")
    return notes


def worst_violations(case: dict) -> list[dict]:
    """A case's violations that decide it first (sure ones, then the rest), in the order the run recorded them."""
    violations = [v for v in case.get("violations") or [] if isinstance(v, dict)]
    return sorted(violations, key=lambda v: not v.get("sure"))


def verdict_of(case: dict | None) -> str:
    if case is None:
        return NO_VERDICT
    return case.get("verdict") or ("skipped" if case.get("outcome") == "skipped" else NO_VERDICT)


def model_counts(m: dict) -> dict[str, int]:
    """A model's counts per verdict as the run's verdict recorded them (verdict["models"]). A report written before
    errors were counted apart holds them inside `fail for sure`: they are taken out of it here, so no count holds
    two things."""
    c = {v: int(m.get(v, 0) or 0) for v in COUNTED_VERDICTS}
    if "error" not in m and m.get("errors"):
        c["error"] = sum((m.get("errors") or {}).values())
        c["fail for sure"] = max(0, c["fail for sure"] - c["error"])
    return c


def counts(cases: list[dict]) -> dict[str, int]:
    """Per verdict, how many cases; and `failed`: how many failed the run."""
    out = {v: sum(verdict_of(c) == v for c in cases) for v in COUNTED_VERDICTS}
    out["failed"] = sum(c.get("outcome") == "failed" for c in cases)
    return out


def _suite_name(suite) -> str | None:
    if suite is None:
        return None
    name = str(suite).replace("\\", "/").rsplit("/", 1)[-1]
    return name[:-5] if name.endswith(".toml") else name


def case_name(condition: str) -> str:
    """The case's pytest name for a condition id (`text=typos@3` -> `typos-3`), as engine.Condition names it."""
    from ..perturb.conditions import Condition

    try:
        return Condition.parse(condition).test_name
    except Exception:  # an id this version does not parse still matches by itself
        return condition


def cases_by_group(report: dict) -> list[list[dict]]:
    """Per group of the report (same order), its cases: those of its suite, model (name or label) and dataset,
    skipped ones included (they have no result in the group)."""
    cases = [c for c in report.get("cases") or [] if isinstance(c, dict)]
    out: list[list[dict]] = [[] for _ in report.get("groups", [])]
    index: dict[tuple, int] = {}
    for k, group in enumerate(report.get("groups", [])):
        for model in (group.get("model"), group.get("label")):
            if model is not None:
                index.setdefault((_suite_name(group.get("suite")), model, group.get("dataset")), k)
                index.setdefault((_suite_name(group.get("suite")), model, None), k)
    for case in cases:
        suite, model = _suite_name(case.get("suite")), case.get("model")
        k = index.get((suite, model, case.get("dataset")), index.get((suite, model, None)))
        if k is not None:
            out[k].append(case)
    return out


def case_of(cases: list[dict], condition: str) -> dict | None:
    """The case of one condition among a group's cases (by id, then by test name)."""
    name = case_name(condition)
    return next((c for c in cases if c.get("condition") == condition), None) or next(
        (c for c in cases if c.get("condition") == name or str(c.get("nodeid", "")).endswith("::" + name)), None)


def severity_order(report: dict) -> list[tuple[dict, list[dict]]]:
    """The groups with their cases, most failing first: cases that failed the run, then those failing for sure,
    then those failing within noise; ties keep the run's order."""
    pairs = list(zip(report.get("groups", []), cases_by_group(report)))
    order = sorted(range(len(pairs)), key=lambda k: (
        -counts(pairs[k][1])["failed"], -counts(pairs[k][1])["fail for sure"],
        -counts(pairs[k][1])["fail within noise"], k))
    return [pairs[k] for k in order]


def slug(text: str, taken: set[str] | None = None) -> str:
    """An anchor id from a title (`rainbow-noise: memeblip2-tda on demo` -> `rainbow-noise-memeblip2-tda-on-demo`),
    unique among `taken` (which it joins)."""
    base = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "section"
    out, k = base, 2
    while taken is not None and out in taken:
        out, k = f"{base}-{k}", k + 1
    if taken is not None:
        taken.add(out)
    return out


def section_title(group: dict) -> str:
    """`rainbow-noise: memeblip2-tda on demo (n=40, task=hate)`: the group's title (group_title)."""
    return group_title(group)


def table_heading(heading: str, group: dict) -> str:
    """A table's heading inside its group's section: without the group's title, which the section's heading says
    (`text-only perturbations`); whole for a group of no suite."""
    title = section_title(group) + ": "
    out = heading[len(title):] if group.get("suite") and heading.startswith(title) else heading
    if out.endswith("combined text x image perturbations"):  # the paper's sign, the opposite of the heat map's
        out += " (Δ columns: clean − perturbed, the paper's sign: positive is a drop)"
    return out


def short_title(group: dict) -> str:
    """`rainbow-noise: memeblip2-tda on demo`, for the contents."""
    suite = f"{group['suite']}: " if group.get("suite") else ""
    return f"{suite}{group.get('label', group['model'])} on {data_title(group['dataset'])}"


def counts_text(c: dict[str, int], marks: bool = True) -> str:
    """`✗ 19 fail for sure · ~ 4 fail within noise · ✓ 11 pass · – 4 skipped` (zeros left out but for pass)."""
    parts = [f"{MARKS[v] + ' ' if marks else ''}{c[v]} {VERDICT_LABELS[v]}" for v in COUNTED_VERDICTS
             if c.get(v) or v == "pass"]
    return " · ".join(parts)


def verdict_columns(counted: list[dict]) -> tuple[str, ...]:
    """The verdicts a table of counts gives a column: VERDICTS, with `not judged` before `skipped` where one of
    `counted` (model_counts, counts) holds such a case."""
    return COUNTED_VERDICTS if any(c.get(NOT_JUDGED) for c in counted) else VERDICTS


def skipped_by_reason(cases: list[dict]) -> list[tuple[str, list[dict]]]:
    """The cases pytest skipped (those not judged on their memes among them), one entry per reason as recorded, the
    most frequent first: a caption-only card's 148 picture cases are one entry, not 148."""
    by_reason: dict[str, list[dict]] = {}
    for case in cases:
        if case.get("outcome") == "skipped":
            by_reason.setdefault(case.get("skip_reason") or "no reason recorded", []).append(case)
    return sorted(by_reason.items(), key=lambda kv: -len(kv[1]))


def skipped_contents(report: dict) -> list[tuple[str, str, str]]:
    """The contents' entry of the skipped cases' list (anchor `skipped`), where the run skipped any."""
    groups = skipped_by_reason([c for c in report.get("cases") or [] if isinstance(c, dict)])
    return [("skipped", skipped_title(groups), "")] if groups else []


def skipped_title(groups: list[tuple[str, list[dict]]]) -> str:
    """`Skipped cases (148)`, or `Skipped or not judged cases (161)` where some were measured but not judged."""
    n = sum(len(cases) for _, cases in groups)
    judged = any(verdict_of(c) == NOT_JUDGED for _, cases in groups for c in cases)
    return f"Skipped {'or not judged ' if judged else ''}cases ({n})"


def some_cases(cases: list[dict], shown: int = 5) -> str:
    """`s::m::typos-1, s::m::typos-2, ... (3 more)`: the first cases of a list, by node id."""
    return _some_ids([str(c.get("nodeid", "")) for c in cases], shown)


def _some_ids(ids: list, shown: int = 5) -> str:
    return ", ".join(ids[:shown]) + (f", ... ({len(ids) - shown} more)" if len(ids) > shown else "")


def run_details(report: dict) -> list[tuple[str, list[list[str]], list[str]]]:
    """The run's details as (title, rows, headers): options, datasets, models and versions, for the end."""
    out = [("seed and options", [["seed", str(report.get("seed"))]]
            + [[k, str(v)] for k, v in (report.get("options") or {}).items()], ["option", "value"])]
    datasets = report.get("datasets") or {}
    if datasets:
        out.append(("datasets", [[name, str(info.get("name", "")), str(info.get("n", "")),
                                  str(info.get("fingerprint", ""))] for name, info in datasets.items()],
                    ["dataset", "name", "memes", "fingerprint (sha256)"]))
    fits = [[name, fit["source"], str(fit["n"]), _some_ids(fit["ids"]), fit["digest"][:12]]
            for name, info in datasets.items() for fit in info.get("fit_memes") or ()]
    if fits:
        out.append(("memes the universal attacks were fitted on (none of them evaluated)", fits,
                    ["dataset", "fitted on", "memes", "ids", "digest"]))
    models = report.get("models") or {}
    if models:
        out.append(("models", [[name, str(info.get("checkpoint", "")) + (f" ({info['adaptation']})"
                                                                        if info.get("adaptation") else ""),
                                str(info.get("checkpoint_sha256", ""))]
                               for name, info in models.items()], ["model", "checkpoint", "sha256"]))
    prompts = [(name, info["prompt"]) for name, info in models.items() if isinstance(info.get("prompt"), dict)]
    if prompts:  # what a prompted model was asked: the first thing to check when it declines every meme
        out.append(("prompts", [[name, str(p.get("instruction", "")), str(p.get("system") or "none"),
                                 " / ".join(map(str, p.get("label_words") or [])), str(p.get("abstain_below"))]
                                for name, p in prompts],
                    ["model", "instruction", "system message", "label words (one per class)",
                     "declines below this mass on them"]))
    versions = report.get("versions") or {}
    if versions:
        out.append(("versions", [[k, str(v) if v else "not installed"] for k, v in versions.items()],
                    ["package", "version"]))
    return out


def verdict_lines(report: dict, failing_shown: int = 10) -> list[str]:
    """The verdict as plain lines, for a terminal: PASS/FAIL with the summary, the gate, per model the counts, the
    failing cases (the first `failing_shown`), the baseline comparison."""
    if not has_verdict(report):
        return [f"{NO_VERDICT}: this report was written before verdicts were recorded"]
    verdict = report["verdict"]
    gate = gate_shown(verdict)
    lines = [f"{verdict_word(verdict)[0]}: {verdict.get('summary', '')}"]
    if gate:
        lines.append(f"gate: {gate} ({GATES.get(gate, '')})")
    if partial_note(report):
        lines.append(partial_note(report))
    for m in verdict.get("models") or []:
        c = model_counts(m)
        lines.append(f"{m.get('model')}: {m.get('cases', 0)} cases: {counts_text(c)} · {m.get('failed', 0)} failed "
                     "the run")
    failing = list(verdict.get("failing") or [])
    if failing:
        lines.append(f"failing ({len(failing)}): " + ", ".join(failing[:failing_shown])
                     + (f" and {len(failing) - failing_shown} more" if len(failing) > failing_shown else ""))
    baseline = verdict.get("baseline")
    if baseline:
        lines.append(f"baseline {baseline.get('path', '')}: {baseline.get('summary', '')}")
    return lines


def finite(value) -> float | None:
    """A report's number as a float when it is one and finite (a bool as 0/1); None for NaN, infinity, None or text:
    what a history line or a tracker's metric can hold."""
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)) and math.isfinite(value):
        return float(value)
    return None


def family_summaries(report: dict) -> list[dict]:
    """Per (suite, model, dataset), its perturbation families in order, each with its cases, how many fail their
    thresholds and regressed, and its worst case (judge.verdict.worst_case: the rule the verdict's weakest families
    follow too) with that case's record and result row (None when it has none: all skipped or raised, or evasion
    budgets). What the terminal's roll-up and the run history both read."""
    rows_by_case = {(g["label"], g["dataset"], g["suite"], r["condition"]): r
                    for g in report.get("groups", []) for r in g["results"]}
    records = [r for r in report.get("cases", []) if r.get("condition") is not None and r.get("dataset")]
    out = []
    for suite, model, dataset in dict.fromkeys((r["suite"], r["model"], r["dataset"]) for r in records):
        mine = [r for r in records if (r["suite"], r["model"], r["dataset"]) == (suite, model, dataset)]
        families = []
        for family in dict.fromkeys(r["family"] for r in mine if r["condition"] != "clean"):
            cases = [r for r in mine if r["family"] == family]
            worst_record = worst_case(cases)
            worst_row = None if worst_record is None else rows_by_case.get((model, dataset, suite,
                                                                            worst_record["condition"]))
            families.append({"family": family, "cases": cases,
                             "failing": sum(r["verdict"] in ("fail for sure", "fail within noise") for r in cases),
                             "regressed": sum(bool(r.get("regressed")) for r in cases),
                             "worst_record": worst_record, "worst_row": worst_row})
        out.append({"suite": suite, "model": model, "dataset": dataset, "records": mine, "families": families})
    return out

