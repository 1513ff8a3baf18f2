"""The run as a verdict, as data: per case a record (its thresholds, violations, verdict, p-value, baseline
comparisons), per run the counts, weakest families, failing cases, false-discovery-rate control and the gate's
summary (`run_verdict`); and the compact failure lines the terminal prints. Records travel in the test reports, so a
pytest-xdist controller, which runs no case itself, builds the same verdict; the reports render it."""
from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass

from .thresholds import NO_LABELS, NOT_JUDGED

WORST = 5


@dataclass(frozen=True)
class CaseOutcome:
    nodeid: str  # e.g. rainbow-noise::memeblip2-tda::typos-3+uap-3
    outcome: str  # passed, failed or skipped: what pytest recorded
    model: str | None = None  # the model's label; None for a test that is not a suite case
    verdict: str | None = None  # pass, fail for sure, fail within noise (thresholds.verdict)
    shortfall: float = 0.0  # how far the worst violation is past its limit
    line: str = ""  # the compact failure line (items.compact_line), or the failure's first lines
    decision: str | None = None  # the suite's decision ("estimate" or "confident"); None for other tests
    p_value: float | None = None  # one-sided p of "meets its thresholds" (thresholds.case_p_value)

    @classmethod
    def from_properties(cls, nodeid: str, outcome: str, properties) -> "CaseOutcome":
        p = dict(properties)
        p_value = p.get("memerobust.p_value")
        return cls(nodeid, outcome, p.get("memerobust.model"), p.get("memerobust.verdict"),
                   float(p.get("memerobust.shortfall", 0.0)), p.get("memerobust.line", ""),
                   p.get("memerobust.decision"), None if p_value is None else float(p_value))


def _split(nodeid: str) -> tuple[str, str]:
    head, _, name = nodeid.rpartition("::")
    return head, name


def failure_lines(outcomes: list[CaseOutcome]) -> list[str]:
    """One line per failing case, under one heading per suite and model, the case's name padded so the reasons
    line up; `prefix::name` is the node id to re-run it, `name` a `-k` expression."""
    failed = [o for o in outcomes if o.outcome == "failed"]
    lines: list[str] = []
    for head in dict.fromkeys(_split(o.nodeid)[0] for o in failed):
        mine = [o for o in failed if _split(o.nodeid)[0] == head]
        width = min(32, max(len(_split(o.nodeid)[1]) for o in mine))
        lines.append(f"{head}::")
        for o in mine:
            name = _split(o.nodeid)[1]
            text = o.line.splitlines() or [""]
            lines.append(f"  {name:<{width}}  {text[0]}")
            lines += [f"  {'':<{width}}  {more}" for more in text[1:]]
    return lines


FDR_Q = 0.05  # the false discovery rate the verdict controls over a run's confident cases


# --------------------------------------------------------------------------------------------------------
# the verdict as data: per case a record (what the JSON report carries), per run a summary


def condition_family(condition) -> str:
    """The perturbation family a condition belongs to, for roll-ups: the registry's family of its one perturbed
    side (`typos`, `gaussian_noise`, `uap`), `text × image` for the combined pairs, `prompt` for prompt edits,
    `clean`; a defended condition's family says so."""
    from ..perturb import registry

    def family(name: str) -> str:
        try:
            return registry.get(name).family
        except Exception:  # a name the registry does not know (third-party, removed): its own family
            return name

    if condition.prompt:
        base = "prompt"
    elif condition.text and condition.image:
        base = "text × image"
    elif condition.text or condition.image:
        base = family(condition.text or condition.image)
    else:
        base = "clean"
    return f"{base} (defended)" if condition.defence else base


def case_record(*, nodeid: str, model: str, dataset: str, suite: str, condition, thresholds, violations,
                decision: str, p_value: float | None, comparisons, gate: str, unjudged=(), judged: int = 0) -> dict:
    """One case as the JSON report holds it: its thresholds, every violation (value, limit, interval, whether it is
    sure and whether it fails under the suite's decision), the thresholds' verdict, the one-sided p-value, and the
    baseline comparisons; `not_judged`, only where some threshold is undefined on its memes (thresholds.not_judged:
    `unjudged`; `judged`: how many were defined), what and why. `outcome` (what pytest recorded) and `fdr_survives`
    are filled in at the end of the run."""
    from .gate import gates_regressions, gates_thresholds
    from .thresholds import failing, verdict

    failing_now = failing(violations, decision)
    regressed = any(c.decision.regressed for c in comparisons)
    return {
        "nodeid": nodeid, "model": model, "dataset": dataset, "suite": suite, "condition": condition.id,
        "family": condition_family(condition), "outcome": None, "verdict": verdict(violations, unjudged, judged),
        "skip_reason": None, "decision": decision, "thresholds": thresholds.as_dict(),
        "violations": [{"what": v.what, "value": v.value, "limit": v.limit, "comparison": v.comparison,
                        "ci": list(v.ci), "sure": v.sure, "fails": v in failing_now} for v in violations],
        "p_value": p_value, "fdr_survives": None, "regressed": regressed,
        "regressions": [c.as_dict() for c in comparisons],
        "gated_by": (["thresholds"] if failing_now and gates_thresholds(gate) else [])
                    + (["regressions"] if regressed and gates_regressions(gate) else []),
        **({"not_judged": [{"what": what, "reason": why} for what, why in unjudged]} if unjudged else {}),
    }


def skipped_record(nodeid: str, where: dict, reason: str) -> dict:
    """A case that did not run: where it sits (model, dataset, suite, condition, family) and why."""
    return {"nodeid": nodeid, **where, "outcome": "skipped", "verdict": "skipped", "skip_reason": reason,
            "violations": [], "regressions": [], "regressed": False, "gated_by": [], "p_value": None,
            "fdr_survives": None}


WEAKEST = 5  # families named per model in the run's verdict
# The verdicts a case record can carry, each counted per model under its own name: disjoint, they add up to the
# model's cases. `error`: the case raised instead of being measured (it fails the run, but no threshold was
# checked, so it is never counted as `fail for sure`). `not judged` (a threshold undefined on the case's memes,
# thresholds.not_judged) is counted too, under its name, only where a model has such a case.
COUNTED = ("pass", "fail for sure", "fail within noise", "error", "skipped")


def run_verdict(records: list[dict], *, gate: str, baseline: str | None, q: float = FDR_Q,
                baseline_conditions=(), interrupted: bool = False, collected: int | None = None) -> dict:
    """The run's verdict from its case records (each with its `outcome`): per model the counts and the weakest
    families, the failing cases, false-discovery-rate control over the confident cases (each record's
    `fdr_survives` is set), and the baseline comparison's summary. What every renderer shows; none computes it.
    `interrupted`: the run stopped before its last case (Ctrl-C, SIGTERM), so it has no verdict and never passes;
    `collected`: how many robustness tests it collected, said beside how many ran."""
    import numpy as np

    from .gate import Comparison, summarize
    from .multiplicity import benjamini_hochberg

    confident = [r for r in records if r.get("decision") == "confident" and r.get("p_value") is not None
                 and r["outcome"] != "skipped" and r["verdict"] != NOT_JUDGED]
    fdr = None
    if confident:
        kept = benjamini_hochberg(np.array([r["p_value"] for r in confident]), q)
        for r, k in zip(confident, kept):
            r["fdr_survives"] = bool(k)
        # the cases that fail their thresholds under the suite's decision (whether or not the gate fails them)
        failing = [r for r in confident if any(v["fails"] for v in r["violations"])]
        fdr = {"q": q, "confident": len(confident), "failing": len(failing),
               "surviving": sum(r["fdr_survives"] for r in failing)}
    models = []
    for model in dict.fromkeys(r["model"] for r in records):
        mine = [r for r in records if r["model"] == model]
        count = {v: sum(r["verdict"] == v for r in mine) for v in COUNTED}
        unjudged = sum(r["verdict"] == NOT_JUDGED for r in mine)
        models.append({"model": model, "cases": len(mine), **count, **({NOT_JUDGED: unjudged} if unjudged else {}),
                       "failed": sum(r["outcome"] == "failed" for r in mine),
                       "regressed": sum(r["regressed"] for r in mine),
                       "errors": dict(Counter(r["error"] for r in mine if r.get("error"))),
                       "weakest_families": _weakest_families(mine)})
    comparisons = [c for r in records for c in r["regressions"]]
    summary_of_gate = None
    if baseline is not None:  # `baseline_conditions`: every `model on spec: condition` the baseline holds
        rows = [Comparison.from_dict(c) for c in comparisons]
        # a case not judged on its thresholds was measured, and compared with the baseline
        measured = [r for r in records if r["outcome"] != "skipped" or r["verdict"] == NOT_JUDGED]
        ran = {r["baseline_key"] for r in measured if r.get("baseline_key")}
        new = [f"{r['model']} on {r['dataset']}: {r['condition']}" for r in measured
               if "baseline_key" in r and r["baseline_key"] is None]
        summary_of_gate = {"path": str(baseline), **summarize(
            rows, new=new, missing=[name for name in baseline_conditions if name not in ran])}
    failed = [r["nodeid"] for r in records if r["outcome"] == "failed"]
    skipped = skipped_cases(records)
    no_verdict = None if interrupted else _no_verdict(records)
    # a pass that rests on the few cases judged is no pass: PARTIAL (a failure stands, however few ran)
    partial = skipped["text"] if skipped and skipped["most"] and not failed and not interrupted \
        and no_verdict is None else None
    line = _summary_line(models, summary_of_gate, gate)
    if no_verdict is not None:
        summary = f"no verdict: {no_verdict}"
    elif partial:
        summary = f"partial: {partial}; {line}"
    else:
        summary = (_interrupted_summary(interrupted, len(records), collected, line)
                   + (f"; {skipped['text']}" if skipped else ""))
    unlabelled = unlabelled_clause(records)
    if unlabelled:
        summary += f"; {unlabelled}"
    return {"passed": not failed and not interrupted and no_verdict is None and partial is None, "gate": gate,
            "summary": summary, **({"unlabelled": unlabelled} if unlabelled else {}), "models": models,
            "failing": failed, "fdr": fdr, "baseline": summary_of_gate,
            "interrupted": interrupted, "no_verdict": no_verdict, "skipped": skipped,
            **({"partial": partial} if partial else {}),
            "cases_run": len(records), "cases_collected": collected,
            "errors": [r["nodeid"] for r in records if r.get("error")]}


UNLABELLED_CLAUSE = ("the memes have no labels: judged on flips against the clean prediction (and the confidence "
                     "drop, evasion budgets, a baseline's flips), which show how much edits move the detector; "
                     "accuracy, AUROC and F1 are not judged: no labels, so this run cannot show whether the "
                     "detector is right, and a detector that is steadily wrong passes it")


def unlabelled_clause(records: list[dict]) -> str | None:
    """What a run on unlabelled memes (meme.Dataset.unlabelled) can and cannot show, said once in its verdict where
    a case left a threshold out for want of labels; None otherwise."""
    if any(u.get("reason") == NO_LABELS for r in records for u in r.get("not_judged", ())):
        return UNLABELLED_CLAUSE
    return None


def skipped_cases(records: list[dict]) -> dict | None:
    """How many of the run's cases pytest skipped (those not judged on their memes, `not_judged`, among them), None
    when none did: `most` when more than half did, and then a run that failed nothing is PARTIAL, not passed (`9 of
    10 cases skipped (only 1 ran)`)."""
    n, k = len(records), sum(r["outcome"] == "skipped" for r in records)
    if not k:
        return None
    unjudged = sum(r["outcome"] == "skipped" and r["verdict"] == NOT_JUDGED for r in records)
    most = 2 * k > n
    if not unjudged:
        text = f"{k} of {n} cases skipped" + (f" (only {n - k} ran)" if most and k < n else "")
    else:
        text = (f"{unjudged} of {n} cases not judged" + (f", {k - unjudged} skipped" if k > unjudged else "")
                + (f" (only {n - k} judged)" if most and k < n else ""))
    return {"cases": n, "skipped": k, "most": most, **({NOT_JUDGED: unjudged} if unjudged else {}), "text": text}


def _no_verdict(records: list[dict]) -> str | None:
    """Why a finished run has no verdict (it neither passed nor failed its gate), or None: no robustness case ran
    (none was selected), or every case skipped or was not judged. pytest exits 0 on such a run, as on any run whose
    tests all skipped; the verdict only refuses to call it PASSED."""
    if not records:
        return "no robustness case ran"
    if all(r["outcome"] == "skipped" for r in records):
        reasons = Counter(r.get("skip_reason") for r in records if r.get("skip_reason"))
        some_unjudged = any(r["verdict"] == NOT_JUDGED for r in records)
        return (f"{'no case judged' if some_unjudged else 'every case skipped'} ({len(records)} of {len(records)})"
                + (f"; e.g. {reasons.most_common(1)[0][0]}" if reasons else ""))
    return None


def cases_ran_text(ran: int, collected: int | None) -> str:
    """`4 of 26 cases ran`: how far an interrupted run got (`collected` None: interrupted before it was known)."""
    return f"{ran} of {collected} cases ran" if collected is not None else f"{ran} case{'s' * (ran != 1)} ran"


def _interrupted_summary(interrupted: bool, ran: int, collected: int | None, line: str) -> str:
    """The summary `line`, led by how far an interrupted run got (and no dangling "so far" when no case ran)."""
    if not interrupted:
        return line
    head = f"interrupted: {cases_ran_text(ran, collected)}, no verdict"
    return f"{head}; so far {line}" if line else head


# worse is larger
VERDICT_RANK = {"skipped": 0, NOT_JUDGED: 0, "pass": 1, "fail within noise": 2, "fail for sure": 3, "error": 4}


def _shortfall(v: dict) -> float:
    """How far a recorded violation is past its limit (1 where its value is undefined)."""
    if v["value"] != v["value"]:
        return 1.0
    return v["limit"] - v["value"] if v["comparison"] == ">=" else v["value"] - v["limit"]


def worst_violation(record: dict) -> dict | None:
    """The violation that decides a case: a sure one first, then the one furthest past its limit."""
    return max(record.get("violations") or [], key=lambda v: (bool(v["sure"]), _shortfall(v)), default=None)


def severity(record: dict) -> tuple:
    """How bad a measured case is, larger worse: its verdict (fail for sure > fail within noise > pass), then how
    far its deciding violation is past the limit, then how low its relative robustness of accuracy is (within one
    model and dataset, the same order as the largest accuracy drop: what ranks cases that meet every threshold)."""
    v = worst_violation(record)
    relative = record.get("relative_accuracy")
    return (VERDICT_RANK.get(record.get("verdict"), 0), _shortfall(v) if v else 0.0,
            -relative if isinstance(relative, (int, float)) and relative == relative else float("-inf"))


def worst_case(records: list[dict]) -> dict | None:
    """The worst case among `records` (one family's): the one rule behind the verdict's weakest families and the
    reports' per-family "worst case". Among the cases measured (not skipped, not raised), the largest `severity`;
    ties go to the first that ran. None when no case was measured."""
    measured = [r for r in records if r.get("outcome") != "skipped"
                and r.get("verdict") not in ("skipped", "error", NOT_JUDGED)]
    return max(measured, key=severity, default=None)


def _weakest_families(records: list[dict]) -> list[dict]:
    """Per family its worst case (`worst_case`) when that case violates a threshold: up to WEAKEST families, worst
    first, each with the deciding violation."""
    worst = []
    for family in dict.fromkeys(r["family"] for r in records):
        case = worst_case([r for r in records if r["family"] == family])
        v = worst_violation(case) if case is not None else None
        if v is not None:
            worst.append((severity(case), {"family": family, "condition": case["condition"],
                                           "verdict": case["verdict"], "what": v["what"], "value": v["value"],
                                           "limit": v["limit"]}))
    ranked = sorted(worst, key=lambda kv: kv[0], reverse=True)
    return [entry for _, entry in ranked[:WEAKEST]]


def _summary_line(models: list[dict], gate_summary: dict | None, gate: str) -> str:
    """Per model: how many cases judged are below their thresholds (`fail for sure` + `fail within noise`, the
    first of them said), then how many more raised an error: the same disjoint counts, under the same names, as the
    terminal's count line and the reports' tables (COUNTED); those skipped or not judged are said after them
    (`skipped_cases`)."""
    parts = []
    for m in models:
        errors = m.get("errors") or {}
        unjudged = m.get(NOT_JUDGED, 0)
        ran, raised = m["cases"] - m["skipped"] - unjudged, m["error"]
        kinds = ", ".join(f"{kind} ×{n}" for kind, n in errors.items())
        if raised and raised == ran and not unjudged:
            parts.append(f"{m['model']}: every case ({ran}) raised an error instead of a measurement ({kinds})")
            continue
        bad = m["fail for sure"] + m["fail within noise"]
        parts.append(f"{m['model']}: {bad} of {ran - raised} cases below their thresholds "
                     f"({m['fail for sure']} for sure)"
                     + ("" if gate in ("thresholds", "both") else ", not gating")
                     + (f", {raised} more raised an error ({kinds})" if raised else ""))
    if gate_summary is not None:
        from .gate import improved_count_clause

        parts.append(f"against the baseline: {gate_summary['summary']}{improved_count_clause(gate_summary)}"
                     + ("" if gate in ("regressions", "both") else ", not gating"))
    return "; ".join(parts)


OTHER_TESTS = "built-in Python suites"  # the model of a record that is not a suite case (caption fuzzing, reliance)


def record_from_report(nodeid: str, outcome: str, properties, reason: str | None) -> dict:
    """A case record from what a test report carries (also on a pytest-xdist controller): a suite case's own record
    with pytest's outcome added; a case that was skipped, from where collection placed it; another robustness test
    (a built-in Python suite, evasion budgets) with the verdict its outcome implies. `outcome` is passed, failed,
    skipped or xfailed."""
    p = dict(properties)
    if "memerobust.case" in p:
        record = json.loads(p["memerobust.case"])
        record["outcome"] = outcome
        if outcome == "skipped":  # measured, but not judged on its memes (items.CaseItem)
            record["skip_reason"] = reason
        relative = p.get("memerobust.relative_robustness.accuracy")  # what ranks a family's passing cases
        record["relative_accuracy"] = None if relative is None else float(relative)
        if outcome == "xfailed":
            record["not_gating"] = reason
        return record
    where = json.loads(p["memerobust.where"]) if "memerobust.where" in p else {
        "model": p.get("memerobust.model") or OTHER_TESTS, "dataset": None, "suite": p.get("memerobust.suite"),
        "condition": nodeid.rpartition("::")[2], "family": p.get("memerobust.suite")}
    if outcome == "skipped":
        return skipped_record(nodeid, where, reason or "")
    verdict = "error" if p.get("memerobust.error") else {"passed": "pass", "failed": "fail for sure",
                                                          "xfailed": "fail for sure"}[outcome]
    return {"nodeid": nodeid, **where, "outcome": outcome, "verdict": verdict, "skip_reason": None,
            "message": p.get("memerobust.line") or None, "error": p.get("memerobust.error"),
            "violations": [], "regressions": [], "regressed": False,
            "gated_by": ([] if outcome != "failed" else ["error"] if p.get("memerobust.error") else ["thresholds"]),
            "p_value": None, "fdr_survives": None,
            **({"not_gating": reason} if outcome == "xfailed" else {})}
