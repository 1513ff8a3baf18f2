"""Numbers a reviewer cannot misread (issue 49): what is fooled is counted among the memes right before the attack,
every count has one name in every artifact, a family's worst case is one notion, a run that ran nothing or skipped
everything never reads PASSED, a headline keeps its figure at 80 columns, and an OCR caption says so."""
import json

import numpy as np
import pytest
import torch  # noqa: F401  imported once here: pytester's in-process runs would otherwise re-import it

from pytest_memerobust.judge.verdict import run_verdict
from pytest_memerobust.report.tables import verdict_lines

QUICK = ["--memerobust-limit=24", "--memerobust-bootstrap=100", "-p", "no:cacheprovider"]


# --- 4: a collect-only run claims no verdict ----------------------------------------------------------------------

def test_a_collect_only_run_prints_no_verdict_and_writes_no_report(pytester, tmp_path):
    report = tmp_path / "r.json"
    result = pytester.runpytest("--memerobust-model=demo", "--co", f"--memerobust-report={report}", *QUICK)
    out = result.stdout.str()
    assert "tests collected" in out or "test collected" in out
    assert "memerobust verdict" not in out and "PASSED" not in out and "FAILED" not in out
    assert not report.exists()


# --- 2: the banner, the tables and the verdict line count the same things under the same names -----------------

def _record(name, verdict, family="typos", shortfall=0.0, relative=None, what="flip rate", outcome=None):
    violations = [] if verdict in ("pass", "skipped") else [
        {"what": what, "value": 0.1 + shortfall, "limit": 0.1, "comparison": "<=", "ci": [0.1, 0.5],
         "sure": verdict == "fail for sure", "fails": verdict == "fail for sure"}]
    return {"nodeid": f"s::m::{name}", "model": "m", "dataset": "demo", "suite": "s", "family": family,
            "condition": name, "outcome": outcome or {"pass": "passed", "skipped": "skipped",
                                                      "fail within noise": "passed"}.get(verdict, "failed"),
            "verdict": verdict, "violations": violations, "regressions": [], "regressed": False,
            "decision": "confident", "p_value": None, "fdr_survives": None, "relative_accuracy": relative,
            "skip_reason": "m does not read the image" if verdict == "skipped" else None}


def _raised(name):
    from pytest_memerobust.judge.verdict import record_from_report

    where = {"model": "m", "dataset": "demo", "suite": "s", "condition": name, "family": "typos"}
    return record_from_report(f"s::m::{name}", "failed", [("memerobust.where", json.dumps(where)),
                                                        ("memerobust.error", "ValueError"),
                                                        ("memerobust.line", "ValueError: boom")], None)


def test_an_error_is_counted_as_an_error_in_the_banner_the_tables_and_the_verdict_line():
    from pytest_memerobust.report.html import to_html
    from pytest_memerobust.report.markdown import markdown
    from pytest_memerobust.report.outline import verdict_lines as report_lines

    records = ([_record(f"sure-{i}", "fail for sure", shortfall=0.2) for i in range(3)]
               + [_record(f"noise-{i}", "fail within noise", shortfall=0.1) for i in range(6)]
               + [_raised(f"raised-{i}") for i in range(3)])
    verdict = run_verdict(records, gate="thresholds", baseline=None)
    (m,) = verdict["models"]
    assert (m["fail for sure"], m["fail within noise"], m["error"], m["pass"]) == (3, 6, 3, 0)
    assert all(r["verdict"] == "error" for r in records[-3:])
    assert verdict["summary"] == ("m: 9 of 9 cases below their thresholds (3 for sure), 3 more raised an error "
                                  "(ValueError ×3)")
    assert verdict_lines(verdict)[0] == ("m: 12 cases: 0 pass, 3 fail for sure, 6 fail within noise, "
                                         "3 raised an error")
    report = {"verdict": verdict, "cases": records, "groups": []}
    counts = "m: 12 cases: ✗ 3 fail for sure · ~ 6 fail within noise · ! 3 raised an error · ✓ 0 pass"
    assert counts in "\n".join(report_lines(report))
    page = to_html(report)
    assert "<th>raised an error</th>" in page and "✗ 3<" in page and "! 3<" in page and "✗ 6" not in page
    assert "| m | 12 | 3 | 6 | 3 | 0 | 0 |" in markdown(report)


# --- 3: a family's worst case is one notion ---------------------------------------------------------------------

def test_the_family_table_and_the_verdict_name_the_same_worst_case():
    """Two cases failing for sure: `far` is furthest past its limit, `drop` lost more accuracy. The rule, once:
    the worst verdict, then the largest violation, then the lowest relative accuracy (the largest drop)."""
    from pytest_memerobust.report.outline import family_summaries

    records = [_record("far", "fail for sure", shortfall=0.4, relative=0.9),
               _record("drop", "fail for sure", shortfall=0.1, relative=0.6),
               _record("ok-1", "pass", family="jpeg", relative=0.95),
               _record("ok-2", "pass", family="jpeg", relative=0.8)]

    def row(condition, accuracy):
        return {"condition": condition, "kind": "text", "metrics": {"accuracy": accuracy},
                "clean_metrics": {"accuracy": 1.0}, "flip_rate": 1 - accuracy}

    report = {"groups": [{"label": "m", "model": "m", "dataset": "demo", "suite": "s",
                          "results": [row("far", 0.9), row("drop", 0.6), row("ok-1", 0.95), row("ok-2", 0.8)]}],
              "cases": records}
    verdict = run_verdict(records, gate="thresholds", baseline=None)
    (summary,) = family_summaries(report)
    worst = {f["family"]: f["worst_record"]["condition"] for f in summary["families"]}
    assert worst == {"typos": "far", "jpeg": "ok-2"}
    assert [(w["family"], w["condition"]) for w in verdict["models"][0]["weakest_families"]] == [("typos", "far")]
    from pytest_memerobust.judge.verdict import worst_case

    assert worst_case(records[:2])["condition"] == "far"


# --- 6: skipped cases never make a run green on their own -------------------------------------------------------

def test_a_run_whose_cases_all_skipped_has_no_verdict_in_any_rendering():
    from pytest_memerobust.report.html import to_html
    from pytest_memerobust.report.markdown import markdown

    records = [_record(f"case-{i}", "skipped") for i in range(10)]
    verdict = run_verdict(records, gate="thresholds", baseline=None)
    assert verdict["passed"] is False and verdict["no_verdict"].startswith("every case skipped (10 of 10)")
    last = verdict_lines(verdict)[-1]
    assert last.startswith("NO VERDICT: every case skipped (10 of 10)") and "PASSED" not in last
    report = {"verdict": verdict, "cases": records, "groups": []}
    assert "NO VERDICT" in to_html(report) and "PASS" not in to_html(report)
    assert "NO VERDICT" in markdown(report) and "PASS" not in markdown(report)
    assert run_verdict([], gate="thresholds", baseline=None)["no_verdict"] == "no robustness case ran"


def test_a_pass_on_few_cases_says_how_many_skipped():
    """Most cases skipped: no PASSED but PARTIAL (issue 62, tests/test_unsupported_verdicts.py)."""
    records = [_record("ran", "pass")] + [_record(f"case-{i}", "skipped") for i in range(9)]
    verdict = run_verdict(records, gate="thresholds", baseline=None)
    assert verdict["passed"] is False
    assert verdict_lines(verdict)[-1] == ("PARTIAL: 9 of 10 cases skipped (only 1 ran), too few to pass the run; no "
                                          "robustness tests failed the gate (--memerobust-gate=thresholds)")
    few = run_verdict(records[:1] + records[1:2] + [_record(f"more-{i}", "pass") for i in range(3)],
                      gate="thresholds", baseline=None)
    assert verdict_lines(few)[-1].endswith("(--memerobust-gate=thresholds); 1 of 5 cases skipped")


# --- 5: a headline keeps its figure at 80 columns ---------------------------------------------------------------

def test_the_family_headline_keeps_its_figure_at_80_columns():
    from pytest_memerobust.report.tables import family_rollup

    dataset = "pridemm:/data/experiments/2026/PrideMM/with-ocr-captions/m3h_ocr.csv"
    records = [dict(_record("clean", "pass"), family="clean"), _record("text=typos@3", "pass", relative=0.9)]
    for r in records:
        r.update(model="memeblip2-tda", dataset=dataset, suite="rainbow-noise")
    row = {"condition": "text=typos@3", "kind": "text", "metrics": {"accuracy": 0.7},
           "clean_metrics": {"accuracy": 0.762}, "flip_rate": 0.1, "n": 24}
    report = {"groups": [{"label": "memeblip2-tda", "model": "memeblip2-tda", "dataset": dataset,
                          "suite": "rainbow-noise", "clean": {"metrics": {"accuracy": 0.762}, "n": 24},
                          "results": [row]}], "cases": records}
    headline = family_rollup(report, width=80).splitlines()[0]
    assert headline == "rainbow-noise: memeblip2-tda on pridemm:m3h_ocr.csv: clean accuracy 0.762 (pass)"
    narrow = family_rollup(report, width=60).splitlines()[0]
    assert len(narrow) <= 60 and narrow.endswith("…: clean accuracy 0.762 (pass)")


# --- 1: an attack fools memes the detector got right before it ----------------------------------------------------

def test_an_image_attack_counts_the_memes_it_fooled_of_those_right_clean():
    """16 memes: 7 right clean, 5 of those flipped; 14 wrong after the attack (9 were wrong already)."""
    from pytest_memerobust.engine import Condition
    from pytest_memerobust.judge.results import Answers, AttackMeasures, ConditionResult, Memes, StatsConfig
    from pytest_memerobust.report.tables import render

    y = np.ones(16, dtype=int)
    right, wrong = np.array([0.1, 0.9]), np.array([0.9, 0.1])
    clean = np.array([right] * 7 + [wrong] * 9)
    attacked = np.array([wrong] * 5 + [right] * 2 + [wrong] * 9)
    measured = {"memes": 16, "wrong_after_attack": 14, "queries": 0, "zero_gradient": 0, "flags": []}
    result = ConditionResult("m", "demo", Condition.parse("image=pgd_linf@4"), Memes(y), Answers(clean, attacked),
                             StatsConfig(n_resamples=50), measures=AttackMeasures(picture_attack=measured))
    row = result.as_dict()
    assert (row["picture_attack"]["fooled_of_right_clean"], row["picture_attack"]["right_clean"]) == (5, 7)
    assert row["picture_attack"]["wrong_after_attack"] == 14
    group = {"model": "m", "label": "m", "dataset": "demo", "task": "hate", "suite": "s",
             "clean": dict(row, condition="clean", kind="clean", n=16), "results": [row]}
    for tablefmt in ("simple", "html", "github"):
        text = render({"groups": [group]}, tablefmt)
        assert "memes fooled of those right clean" in text and "Fooled of right clean" in text
        assert "5 of 7" in text and "14 of 16" not in text


# --- 7: a caption read by OCR says so in every artifact -----------------------------------------------------------

class _Ocr:
    """Reads a picture as words naming its mean brightness (as tests/test_ocr.py's FakeOcr)."""

    name = "fake-ocr"

    def read(self, image):
        level = int(np.asarray(image.cpu() if hasattr(image, "cpu") else image).mean()) // 32  # on a GPU: a cuda tensor
        return " ".join(["bright"] * level + ["meme", "caption"])


@pytest.fixture(scope="module")
def ocr_session():
    from pytest_memerobust.judge.results import StatsConfig
    from pytest_memerobust.run.options import DataOptions, JudgingOptions, Options
    from pytest_memerobust.run.session import RobustnessSession

    session = RobustnessSession(Options(models=("demo",), data=DataOptions(limit=12),
                                        judging=JudgingOptions(stats=StatsConfig(n_resamples=50))))
    session.loaded.ocr = _Ocr()
    session.evaluate("demo", "image=contrast@5", captions="ocr")
    return session


def test_captions_read_by_ocr_are_called_ocr_captions_in_the_reports(ocr_session):
    from pytest_memerobust.run.report import worst_examples
    from pytest_memerobust.report.html import _worst as html_worst
    from pytest_memerobust.report.markdown import _worst as markdown_worst
    from pytest_memerobust.run.session import CAPTIONS_BY_OCR

    examples = worst_examples(ocr_session, "demo", "demo" + CAPTIONS_BY_OCR)
    assert examples and all(e["caption_source"] == e["perturbed_caption_source"] == "fake-ocr" for e in examples)
    assert all(e["caption"].endswith("meme caption") for e in examples)  # what the detector read, not the dataset's
    page = html_worst({"worst_examples": examples}, [])
    text = "\n".join(markdown_worst({"worst_examples": examples}, []))
    for rendered in (page, text):
        assert "OCR caption" in rendered and "perturbed caption (OCR)" in rendered and "clean caption" not in rendered
    # a meme whose missing caption OCR filled in (data.ocr.fill_missing_captions), beside one the dataset gave
    mixed = [dict(examples[0], caption_source="rapidocr", perturbed_caption_source=None),
             dict(examples[1], id="other", caption_source="dataset", perturbed_caption_source=None)]
    assert html_worst({"worst_examples": mixed}, []).count("<th>OCR caption</th>") == 1
    table = "\n".join(markdown_worst({"worst_examples": mixed}, []))
    assert "clean or OCR caption" in table and "(OCR) " in table


def test_an_export_row_says_where_its_captions_came_from(ocr_session):
    from pytest_memerobust.run.session import CAPTIONS_BY_OCR
    from pytest_memerobust.run.export import rows
    from pytest_memerobust.track.export import COLUMNS, Part

    spec = "demo" + CAPTIONS_BY_OCR
    result = ocr_session.outcomes.results[("demo", spec, "image=contrast@5")]
    part = Part("demo", "demo", spec, result.task, "image=contrast@5", "", "", {})
    row, _ = next(iter(rows(ocr_session, part, result)))
    assert row["caption_source"] == "fake-ocr" and row["original_caption_source"] == "dataset"
    assert {"caption_source", "original_caption_source"} <= set(COLUMNS)
