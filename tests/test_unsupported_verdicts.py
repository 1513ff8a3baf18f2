"""Verdicts on data that cannot support them (issue 62): a threshold undefined on a case's memes (AUROC of memes of
one class) is "not judged", never a failure, in every artifact and in the false-discovery-rate count; a run that
judged few of its cases is PARTIAL, not PASSED; the reports list the skipped cases with their reasons, one row per
reason; and no headline or summary table prints `nan`."""
import json
import re
import xml.etree.ElementTree as ET

import numpy as np
import pytest
import torch  # noqa: F401  imported once here: pytester's in-process runs would otherwise re-import it
from PIL import Image

from pytest_memerobust.judge.verdict import run_verdict
from pytest_memerobust.report.html import to_html
from pytest_memerobust.report.markdown import markdown
from pytest_memerobust.report.tables import family_rollup, verdict_lines

QUICK = ["--memerobust-bootstrap=100", "-p", "no:cacheprovider", "-rs"]

# AUROC floors on the memes and under typos; the flip rate is defined on any memes, and met
ONE_CLASS_SUITE = """
[suite]
name = "one-class"
[thresholds]
decision = "confident"
min_clean = { auroc = 0.75 }
min_relative_robustness = { auroc = 0.90 }
max_flip_rate = 1.0
[text]
typos = [1]
"""

# the caption-only half of the model: the picture cases skip, only the clean case is measured
MOSTLY_SKIPPED_SUITE = """
[suite]
name = "mostly-skipped"
modes = ["text"]
[thresholds]
max_flip_rate = 1.0
[image]
contrast = [1, 2, 3]
"""


def _sorted_csv(folder, n: int = 16, ones: int = 4):
    """`folder/memes.csv`, sorted by label: its first n - ones memes are of class 0."""
    rows = ["id,image,text,label"]
    rng = np.random.default_rng(0)
    for i in range(n):
        Image.fromarray(rng.integers(0, 255, (32, 32, 3), dtype=np.uint8)).save(folder / f"{i}.png")
        rows.append(f"m{i},{i}.png,caption number {i},{int(i >= n - ones)}")
    (folder / "memes.csv").write_text("\n".join(rows) + "\n")
    return folder / "memes.csv"


def _no_nan(text: str) -> bool:
    return re.search(r"\bnan\b", text, re.IGNORECASE) is None


# --- 1: a subset of one class ---------------------------------------------------------------------------------------

def test_a_subset_of_one_class_is_not_judged_in_every_artifact(pytester, tmp_path):
    """A csv sorted by label, its first 10 memes: one class, AUROC undefined. Both cases are `not judged: the 10
    memes hold one class`: skipped for pytest and JUnit, counted apart in the verdict, left out of the false discovery
    rate, listed with their reason in the Markdown and HTML; nothing fails, nothing reads `nan`."""
    pytester.makefile(".toml", **{"memerobust-one-class": ONE_CLASS_SUITE})
    data = _sorted_csv(tmp_path)
    js, md, page, junit = (tmp_path / name for name in ("r.json", "r.md", "r.html", "junit.xml"))
    result = pytester.runpytest("--memerobust-model=demo", f"--memerobust-data=csv:{data}", "--memerobust-task=label",
                                "--memerobust-limit=10", *QUICK, f"--memerobust-report={js}",
                                f"--memerobust-report={md}", f"--memerobust-report={page}", f"--junitxml={junit}", ".")
    result.assert_outcomes(skipped=2)
    assert result.ret == 0
    out = result.stdout.str()
    reason = "not judged: the 10 memes hold one class"
    assert re.search(f"\nSKIPPED \\[2\\] .*: {reason}\n", out)  # -rs: pytest's own line
    assert "demo: 2 cases: 0 pass, 0 fail for sure, 0 fail within noise, 2 not judged" in out
    assert f"\nNO VERDICT: no case judged (2 of 2); e.g. {reason}\n" in out
    assert "fail for sure" not in out.replace("0 fail for sure", "") and "false discovery rate" not in out
    assert re.search(r"\none-class: demo on csv:memes.csv: clean accuracy 0\.\d{3} \(not judged\)\n", out)
    assert re.search(r"\ntypos +1 not judged\n", out)
    assert _no_nan(out)

    report = json.loads(js.read_text())
    cases = report["cases"]
    assert [(c["condition"], c["outcome"], c["verdict"], c["skip_reason"], c["p_value"]) for c in cases] == [
        ("clean", "skipped", "not judged", reason, None), ("text=typos@1", "skipped", "not judged", reason, 1.0)]
    assert cases[0]["not_judged"] == [{"what": "clean auroc", "reason": reason}]
    assert cases[1]["not_judged"] == [{"what": "relative robustness of auroc", "reason": reason}]
    assert all(c["violations"] == [] and c["gated_by"] == [] for c in cases)
    verdict = report["verdict"]
    assert verdict["fdr"] is None and verdict["failing"] == [] and verdict["passed"] is False
    (model,) = verdict["models"]
    assert (model["not judged"], model["fail for sure"], model["pass"], model["skipped"]) == (2, 0, 0, 0)

    text = md.read_text()
    assert "> **– NO VERDICT**: no verdict: no case judged (2 of 2)" in text
    assert ("| model | cases | ✗ fail for sure | ~ fail within noise | ! raised an error | ✓ pass | ∅ not judged "
            "| – skipped |") in text
    assert "### Skipped or not judged cases (2)" in text
    assert (f"| {reason} | 2 | memerobust-one-class.toml::demo::clean, memerobust-one-class.toml::demo::typos-1 |"
            in text)
    assert "<0.001" not in text and _no_nan(text)
    html = page.read_text()
    assert f"<td class='l'>{reason}</td><td>2</td>" in html and "<th>not judged</th>" in html
    assert "<0.001" not in html and _no_nan(html)

    skipped = [case.find("skipped") for case in ET.parse(junit).getroot().iter("testcase")]
    assert len(skipped) == 2 and all(s is not None and s.get("message") == reason for s in skipped)


def _record(name, verdict, p_value=None, outcome=None, reason=None):
    fails = verdict.startswith("fail")
    return {"nodeid": f"s::m::{name}", "model": "m", "dataset": "d", "suite": "s", "family": "typos",
            "condition": name, "verdict": verdict, "decision": "confident", "p_value": p_value,
            "outcome": outcome or {"pass": "passed", "not judged": "skipped", "skipped": "skipped"}.get(verdict,
                                                                                                    "failed"),
            "violations": [{"what": "flip rate", "value": 0.5, "limit": 0.1, "comparison": "<=", "ci": [0.3, 0.7],
                            "sure": True, "fails": True}] if fails else [],
            "regressions": [], "regressed": False, "fdr_survives": None, "skip_reason": reason,
            "gated_by": ["thresholds"] if fails else []}


def test_not_judged_cases_are_left_out_of_the_false_discovery_rate_and_the_failures():
    """One case failing for sure beside 3 not judged: the false-discovery-rate line counts 1 failing case of 1
    confident case, and the summary says the 3 more were not judged, not that they failed."""
    why = "not judged: the 40 memes hold one class"
    records = ([_record("bad", "fail for sure", p_value=0.001)]
               + [_record(f"undefined-{i}", "not judged", p_value=1.0, reason=why) for i in range(3)])
    verdict = run_verdict(records, gate="thresholds", baseline=None)
    assert verdict["fdr"] == {"q": 0.05, "confident": 1, "failing": 1, "surviving": 1}
    assert verdict["failing"] == ["s::m::bad"] and verdict["passed"] is False and "partial" not in verdict
    assert verdict["summary"] == ("m: 1 of 1 cases below their thresholds (1 for sure); 3 of 4 cases not judged "
                                  "(only 1 judged)")
    assert verdict_lines(verdict)[0] == "m: 4 cases: 0 pass, 1 fail for sure, 0 fail within noise, 3 not judged"
    assert [r["fdr_survives"] for r in records] == [True, None, None, None]


# --- 2: a run that judged few of its cases is not PASSED ------------------------------------------------------------

@pytest.mark.parametrize("skipped, word", [(24, "PARTIAL"), (13, "PARTIAL"), (12, "PASSED"), (0, "PASSED")])
def test_a_run_that_skipped_more_than_half_its_cases_is_partial(skipped, word):
    """More than half of the cases skipped (or not judged) and none failed: PARTIAL in the verdict, the terminal, the
    Markdown and the HTML; at half or fewer a pass is a pass, which names its skipped cases."""
    records = ([_record(f"ran-{i}", "pass") for i in range(25 - skipped)]
               + [_record(f"skip-{i}", "skipped", reason="m does not read the image") for i in range(skipped)])
    verdict = run_verdict(records, gate="thresholds", baseline=None)
    last = verdict_lines(verdict)[-1]
    assert last.startswith(f"{word}: ") and verdict["passed"] is (word == "PASSED")
    report = {"verdict": verdict, "cases": records, "groups": []}
    banner = markdown(report).split("## Verdict")[0]
    if word == "PARTIAL":
        assert verdict["partial"] == f"{skipped} of 25 cases skipped (only {25 - skipped} ran)"
        assert last == (f"PARTIAL: {skipped} of 25 cases skipped (only {25 - skipped} ran), too few to pass the run; "
                        "no robustness tests failed the gate (--memerobust-gate=thresholds)")
        assert verdict["summary"].startswith(f"partial: {skipped} of 25 cases skipped")
        assert "**– PARTIAL**" in banner and "PASS" not in banner
        assert "<span class='word'>– PARTIAL</span>" in to_html(report) and "✓ PASS" not in to_html(report)
    else:
        assert "partial" not in verdict and "**✓ PASS**" in banner


def test_a_failure_stands_however_few_cases_ran():
    records = [_record("bad", "fail for sure", p_value=0.001)] + [_record(f"s-{i}", "skipped") for i in range(9)]
    verdict = run_verdict(records, gate="thresholds", baseline=None)
    assert "partial" not in verdict and verdict_lines(verdict)[-1].startswith("FAILED: 1 robustness test failed")


def test_a_run_of_the_caption_half_only_is_partial_and_lists_its_skipped_cases(pytester, tmp_path):
    """A caption-only model under picture edits: 3 of its 4 cases skip, only the clean case is measured. The run is
    PARTIAL (pytest still exits 0), the reports list the 3 skipped cases as one row with their reason, and the
    headline gives the clean accuracy, not `nan`."""
    pytester.makefile(".toml", **{"memerobust-mostly-skipped": MOSTLY_SKIPPED_SUITE})
    js, md, page = (tmp_path / name for name in ("r.json", "r.md", "r.html"))
    result = pytester.runpytest("--memerobust-model=demo", "--memerobust-limit=24", *QUICK,
                                f"--memerobust-report={js}", f"--memerobust-report={md}", f"--memerobust-report={page}",
                                ".")
    result.assert_outcomes(passed=1, skipped=3)
    assert result.ret == 0
    out = result.stdout.str()
    assert ("\nPARTIAL: 3 of 4 cases skipped (only 1 ran), too few to pass the run; no robustness tests failed the "
            "gate (--memerobust-gate=thresholds)\n") in out
    (group,) = json.loads(js.read_text())["groups"]
    assert group["suite"] == "mostly-skipped" and group["results"] == []  # the suite's, though only clean ran
    clean = group["clean"]["metrics"]["accuracy"]
    assert f"mostly-skipped: demo:text on demo: clean accuracy {clean:.3f} (pass)" in out
    assert _no_nan(out)
    text = md.read_text()
    assert "> **– PARTIAL**: partial: 3 of 4 cases skipped (only 1 ran); demo:text: 0 of 1 cases below" in text
    assert "### Skipped cases (3)" in text and "[Skipped cases (3)](#skipped)" in text
    assert "(#mostly-skipped-demo-text-on-demo): ✓ 1 pass · – 3 skipped" in text and "no verdict recorded" not in text
    suite = "memerobust-mostly-skipped.toml::demo:text"
    assert (f"| demo:text does not read the image | 3 | {suite}::contrast-1, {suite}::contrast-2, "
            f"{suite}::contrast-3 |") in text
    assert _no_nan(text)
    html = page.read_text()
    assert "<h2 id='skipped'>Skipped cases (3)</h2>" in html
    assert "<td class='l'>demo:text does not read the image</td><td>3</td>" in html
    assert "<span class='word'>– PARTIAL</span>" in html and _no_nan(html)


# --- 3: skipped cases grouped by reason -----------------------------------------------------------------------------

def test_skipped_cases_are_one_row_per_reason_with_a_count():
    """148 picture cases of a caption-only card skipped for one reason are one row (5 named, the rest counted)."""
    records = ([_record("clean", "pass")]
               + [_record(f"p-{i}", "skipped", reason="m does not read the image") for i in range(148)]
               + [_record("bt", "skipped", reason="back-translation needs MarianMT models")])
    report = {"verdict": run_verdict(records, gate="thresholds", baseline=None), "cases": records, "groups": []}
    text = markdown(report)
    assert "### Skipped cases (149)" in text
    assert ("| m does not read the image | 148 | s::m::p-0, s::m::p-1, s::m::p-2, s::m::p-3, s::m::p-4, ... "
            "(143 more) |") in text
    assert "| back-translation needs MarianMT models | 1 | s::m::bt |" in text
    assert text.count("m does not read the image |") == 1
    html = to_html(report)
    assert "<td class='l'>m does not read the image</td><td>148</td>" in html
    assert html.count("m does not read the image</td>") == 1


# --- 4: no headline or summary table prints nan ---------------------------------------------------------------------

def test_undefined_figures_are_worded_in_headlines_and_tables():
    from pytest_memerobust.report.outline import number, signed, unnumbered

    assert (unnumbered(None), unnumbered(float("nan")), unnumbered(0.5)) == ("not measured", "undefined", None)
    assert (number(float("nan")), signed(float("nan")), number(0.25), signed(-0.25)) == (
        "undefined", "undefined", "0.250", "−0.250")
    records = [dict(_record("clean", "pass"), family="clean")]
    rollup = family_rollup({"groups": [], "cases": records})  # no result row of its clean case: not measured
    assert rollup.splitlines()[0] == "s: m on d: clean accuracy not measured (pass)"
