"""A report's verdict as build_report records it (`report["verdict"]`, `report["cases"]`), made up from the report's
own numbers, for the renderers' tests: relative robustness of each metric against a floor and the flip rate against
a ceiling, a violation `sure` when its whole interval is past the limit, cases decided "confident" (a case fails the
run only when it fails for sure). The renderers only read these keys, so any consistent values test them."""
from __future__ import annotations

import copy
import json

LOOKALIKE = "a d\u043eg w\u0430lks int\u043e the\u200b bar"  # Cyrillic o and a, a zero-width space


def two_suite_report() -> dict:
    """A report as build_report writes it, read back from JSON, without verdict keys (as an older report): the demo
    detector under a mild suite (brightness, contrast) and a harsh one (typos, HotFlip, contrast and their grid
    cell), with one worst example whose caption holds look-alike letters (as the homoglyphs perturbation writes)."""
    from pytest_memerobust import DataOptions, JudgingOptions, Options, RobustnessSession
    from pytest_memerobust.run.report import build_report
    from pytest_memerobust.judge.results import StatsConfig

    session = RobustnessSession(Options(models=("demo",), data=DataOptions(limit=48),
                                        judging=JudgingOptions(stats=StatsConfig(n_resamples=100))))
    suites = {"mild": ((), (), ["clean", "image=brightness@1", "image=contrast@1"]),
              "harsh": (["text=typos@4"], ["image=contrast@4"],
                        ["clean", "text=typos@4", "text=hotflip@3", "image=contrast@4",
                         "text=typos@4+image=contrast@4"])}
    for name, (text, image, conditions) in suites.items():
        session.declare_grid("demo", None, text, image, suite=name, conditions=conditions)
        for condition in conditions:
            session.evaluate("demo", condition)
    report = json.loads(json.dumps(build_report(session)))
    for key in ("verdict", "cases"):
        report.pop(key, None)
    harsh = next(g for g in report["groups"] if g["suite"] == "harsh")
    harsh["worst_examples"].insert(0, {**harsh["worst_examples"][0], "id": "demo-lookalike",
                                       "condition": "text=typos@4", "caption": "a dog walks into the bar",
                                       "perturbed_caption": LOOKALIKE, "p_true_clean": 0.99,
                                       "p_true_perturbed": 0.01})
    return report


def _family(condition: str) -> str:
    from pytest_memerobust.engine import Condition
    from pytest_memerobust.perturb import get

    c = Condition.parse(condition)
    names = [n for n in (c.text, c.image, c.prompt) if n]
    return "+".join(get(n).family for n in names) or "clean"


def _violations(result: dict, floor: float, ceiling: float) -> list[dict]:
    out = []
    for metric in ("accuracy", "auroc", "macro_f1"):
        value, (lo, hi) = result["relative_robustness"][metric], result["relative_robustness_ci"][metric]
        if value < floor:
            out.append({"what": f"relative robustness of {metric}", "value": value, "limit": floor,
                        "comparison": ">=", "ci": [lo, hi], "sure": hi < floor, "fails": hi < floor})
    lo, hi = result["flip_rate_ci"]
    if result["flip_rate"] > ceiling:
        out.append({"what": "flip rate", "value": result["flip_rate"], "limit": ceiling, "comparison": "<=",
                    "ci": [lo, hi], "sure": lo > ceiling, "fails": lo > ceiling})
    return out


def with_verdict(report: dict, floor: float = 0.9, ceiling: float = 0.1, skipped: int = 1,
                 baseline: bool = False) -> dict:
    """A copy of `report` with `verdict` and `cases`; `skipped` cases (no result) added per group, and, with
    `baseline`, a baseline comparison in which the first text condition regressed."""
    from pytest_memerobust.engine import Condition

    report = copy.deepcopy(report)
    cases = []
    for group in report["groups"]:
        suite, label = group.get("suite") or "tests", group.get("label", group["model"])
        thresholds = {"decision": "confident", "min_relative_robustness": {"accuracy": floor, "auroc": floor,
                                                                          "macro_f1": floor},
                      "max_flip_rate": ceiling}
        for result in [group["clean"], *group["results"]]:
            condition = result["condition"]
            violations = [] if condition == "clean" else _violations(result, floor, ceiling)
            sure = any(v["sure"] for v in violations)
            verdict = "fail for sure" if sure else "fail within noise" if violations else "pass"
            cases.append({"nodeid": f"{suite}::{label}::{Condition.parse(condition).test_name}", "model": label,
                          "dataset": group["dataset"], "suite": suite, "condition": condition,
                          "family": _family(condition), "outcome": "failed" if sure else "passed",
                          "verdict": verdict, "skip_reason": None, "decision": "confident",
                          "thresholds": thresholds, "violations": violations,
                          "p_value": 0.001 if sure else 0.2 if violations else 0.9,
                          "fdr_survives": (True if sure else None), "regressed": False, "regressions": [],
                          "gated_by": ["thresholds"] if sure else []})
        for k in range(skipped):
            cases.append({"nodeid": f"{suite}::{label}::skipped_case-{k}", "model": label,
                          "dataset": group["dataset"], "suite": suite, "condition": f"image=gaussian_noise@{k + 1}",
                          "family": "gaussian_noise", "outcome": "skipped", "verdict": "skipped",
                          "skip_reason": f"{label} does not read the image", "decision": "confident",
                          "thresholds": thresholds, "violations": [], "p_value": None, "fdr_survives": None,
                          "regressions": []})
    rows = []
    if baseline:
        first = next(c for c in cases if c["condition"].startswith("text="))
        rows = [{"model": first["model"], "dataset": first["dataset"], "condition": first["condition"],
                 "what": "accuracy", "before": 0.85, "now": 0.70, "difference": -0.15, "ci": [-0.25, -0.05],
                 "p_value": 0.004, "regressed": True},
                {"model": first["model"], "dataset": first["dataset"], "condition": "clean", "what": "accuracy",
                 "before": 0.85, "now": 0.84, "difference": -0.01, "ci": [-0.05, 0.03], "p_value": 0.8,
                 "regressed": False}]
        first.update(regressions=rows[:1], regressed=True, outcome="failed",
                     gated_by=(["thresholds"] if first["outcome"] == "failed" else []) + ["regressions"])
    models = []
    for label in dict.fromkeys(c["model"] for c in cases):
        mine = [c for c in cases if c["model"] == label]
        weakest = {}
        for c in mine:
            for v in c["violations"]:
                shortfall = (v["limit"] - v["value"]) if v["comparison"] == ">=" else (v["value"] - v["limit"])
                if c["family"] not in weakest or shortfall > weakest[c["family"]][0]:
                    weakest[c["family"]] = (shortfall, {"family": c["family"], "condition": c["condition"],
                                                        "verdict": c["verdict"], "what": v["what"],
                                                        "value": v["value"], "limit": v["limit"]})
        models.append({"model": label, "cases": len(mine),
                       **{v: sum(c["verdict"] == v for c in mine)
                          for v in ("pass", "fail for sure", "fail within noise", "skipped")},
                       "failed": sum(c["outcome"] == "failed" for c in mine),
                       "weakest_families": [w for _, w in sorted(weakest.values(), key=lambda t: -t[0])][:5]})
    failing = [c["nodeid"] for c in cases if c["outcome"] == "failed"]
    ran = [c for c in cases if c["outcome"] != "skipped"]
    summary = "; ".join(f"{m['model']}: {m['failed']} of {m['cases']} cases fail ({m['fail for sure']} for sure)"
                        for m in models)
    report["cases"] = cases
    report["verdict"] = {
        "passed": not failing, "gate": "both" if baseline else "thresholds", "summary": summary, "models": models,
        "failing": failing,
        "fdr": {"q": 0.05, "confident": len(ran), "failing": len(failing), "surviving": len(failing)},
        "baseline": None if not baseline else {
            "path": "baseline.json", "conditions": len(rows), "regressed": 1,
            "summary": f"1 of {len(rows)} conditions regressed against the baseline, clean included", "rows": rows}}
    return report
