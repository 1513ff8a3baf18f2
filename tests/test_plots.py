"""The report's figures (report/plots.py): what each one draws is the report's own numbers (checked on the data and
on the matplotlib figure before it is saved), the SVG and PNG bytes are the same on every run and in any thread,
the HTML carries them inline, and `memerobust plot` writes them as files or refuses bad input naming the file."""
from __future__ import annotations

import io
import json
import math
import re
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import torch  # noqa: F401  imported here once: pytester's in-process runs would otherwise re-import it and crash
from PIL import Image

from pytest_memerobust.cli import main
from pytest_memerobust.report import plots

CONDITIONS = ["clean", "text=typos@1", "text=typos@3", "text=char_swap@3", "image=contrast@1", "image=contrast@4"]


@pytest.fixture(scope="module")
def report() -> dict:
    """A report of the demo detector as build_report writes it, read back from JSON: typos at two severities and
    char_swap (both of the `typos` family), contrast at two, with a verdict per case (tests/verdict_sample.py)."""
    from verdict_sample import with_verdict

    from pytest_memerobust import DataOptions, JudgingOptions, Options, RobustnessSession
    from pytest_memerobust.run.report import build_report
    from pytest_memerobust.judge.results import StatsConfig

    session = RobustnessSession(Options(models=("demo",), data=DataOptions(limit=24),
                                        judging=JudgingOptions(stats=StatsConfig(n_resamples=60))))
    session.declare_grid("demo", None, (), (), suite="tiny", conditions=CONDITIONS)
    for condition in CONDITIONS:
        session.evaluate("demo", condition)
    return with_verdict(json.loads(json.dumps(build_report(session))), skipped=0)


def _rows(group: dict) -> dict:
    return {r["condition"]: r for r in group["results"]}


def test_the_curves_hold_one_line_per_perturbation_in_its_family_panel_with_the_reports_numbers(report):
    (group,) = report["groups"]
    rows = _rows(group)
    data = plots.curves_data(group, report["cases"])
    assert [(p["family"], p["modality"], [line["name"] for line in p["lines"]]) for p in data["panels"]] == [
        ("typos", "text", ["typos", "char_swap"]), ("contrast", "image", ["contrast"])]
    typos = data["panels"][0]["lines"][0]
    assert typos["severity"] == [1, 3]
    assert typos["value"] == [rows[f"text=typos@{s}"]["metrics"]["accuracy"] for s in (1, 3)]
    assert [[lo, hi] for lo, hi in zip(typos["lo"], typos["hi"])] == [
        rows[f"text=typos@{s}"]["metrics_ci"]["accuracy"] for s in (1, 3)]
    cases = {c["condition"]: c["verdict"] for c in report["cases"]}
    assert typos["verdict"] == [cases["text=typos@1"], cases["text=typos@3"]]
    assert data["clean"] == group["clean"]["metrics"]["accuracy"] and data["relative_axis"]
    # without case records (an older report) the family is the perturbation's own name
    assert [p["family"] for p in plots.curves_data(group)["panels"]] == ["typos", "char_swap", "contrast"]


def test_the_drawn_bands_lines_and_clean_line_are_the_intervals_and_values(report):
    (group,) = report["groups"]
    (plot,) = plots.group_plots(group, report["cases"])
    fig = plots.figure(plot)
    typos_axes, contrast_axes = [ax for ax in fig.axes if ax.get_title(loc="left")][:2]
    assert typos_axes.get_title(loc="left") == "typos · text" and contrast_axes.get_title(loc="left") == (
        "contrast · image")
    line = plot.data["panels"][1]["lines"][0]  # contrast at severities 1 and 4
    (band,) = contrast_axes.collections[:1]
    vertices = band.get_paths()[0].vertices
    for severity, lo, hi in zip(line["severity"], line["lo"], line["hi"]):
        at = vertices[np.isclose(vertices[:, 0], severity)][:, 1]
        assert np.isclose(at.min(), lo) and np.isclose(at.max(), hi), (severity, at, lo, hi)
    drawn = [ln for ln in contrast_axes.get_lines() if ln.get_label() == "contrast"]
    assert [list(drawn[0].get_xdata()), list(drawn[0].get_ydata())] == [line["severity"], line["value"]]
    clean = [ln for ln in contrast_axes.get_lines() if ln.get_linestyle() == "--"]
    assert [float(ln.get_ydata()[0]) for ln in clean] == [plot.data["clean"]]
    # one drawn line per perturbation (clipped to its panel, unlike the legend's samples), and its name in the SVG
    # as text (readable, searchable)
    svg = plots.to_svg(plot)
    assert len(re.findall(r'clip-path="url\(#p\w+\)" style="fill: none; stroke: #\w+; stroke-width: 1\.6', svg)) == 3
    assert "typos · text" in svg and ">char_swap<" in svg and "<?xml" not in svg


def test_the_same_figure_gives_the_same_bytes_in_any_thread_and_ids_differ_between_figures(report):
    (group,) = report["groups"]
    (plot,) = plots.group_plots(group, report["cases"])
    svg, png = plots.to_svg(plot), plots.to_png(plot)
    with ThreadPoolExecutor(4) as pool:
        again = list(pool.map(lambda k: plots.to_svg(plot) if k % 2 else plots.to_png(plot), range(4)))
    assert again == [png, svg, png, svg]
    assert Image.open(io.BytesIO(png)).format == "PNG" and Image.open(io.BytesIO(png)).size[0] > 500
    other = plots.Plot("other", plot.title, plot.caption, plot.kind, plot.data)
    ids = lambda text: set(re.findall(r'id="([^"]+)"', text))  # noqa: E731
    assert ids(svg) and not ids(svg) & ids(plots.to_svg(other))
    # matplotlib's page-wide style and its numbered group ids stay out of a page that inlines several figures
    assert "*{" not in svg and 'id="figure_1"' not in svg


def test_abstention_bars_are_the_declined_shares_with_the_increase_interval_from_the_clean_share():
    from test_abstentions import CLEAN, TYPOS, Y, result

    from pytest_memerobust.engine import Condition
    from pytest_memerobust.judge.results import Answers, ConditionResult, Memes, StatsConfig

    declined = np.array([0, 0, 0, 0, 0, 1], bool)
    clean = ConditionResult("m", "d", Condition(), Memes(Y),
                            Answers(CLEAN, CLEAN, abstained_clean=declined, abstained=declined.copy()),
                            StatsConfig(n_resamples=50)).as_dict()
    typos = result([0, 0, 0, 0, 0, 1], [0, 1, 0, 1, 0, 1]).as_dict()
    group = {"model": "m", "label": "m", "dataset": "d", "suite": None, "task": "hate", "clean": clean,
             "results": [typos]}
    data = plots.abstention_data(group)
    assert [b["condition"] for b in data["bars"]] == ["clean", TYPOS.id]
    assert data["clean"] == pytest.approx(1 / 6) and data["bars"][1]["rate"] == pytest.approx(3 / 6)
    lo, hi = typos["abstention_increase_ci"]
    assert data["bars"][1]["lo"] == pytest.approx(1 / 6 + lo) and data["bars"][1]["hi"] == pytest.approx(1 / 6 + hi)
    assert math.isnan(data["bars"][0]["lo"])  # the clean share has no interval of its own here
    curves, abstentions = plots.group_plots(group)
    assert (curves.kind, abstentions.kind) == ("curves", "abstention")
    assert curves.data["relative_axis"]  # (the memes typos@3 scored are as accurate clean as all of them)
    other_clean = {**group, "results": [{**typos, "clean_metrics": {**typos["clean_metrics"], "accuracy": 0.5}}]}
    assert not plots.curves_data(other_clean)["relative_axis"]  # perturbed / clean is no longer one scale
    declined = {**group, "results": [{**typos, "n": 0, "n_declined": 6,
                                      "metrics": dict.fromkeys(typos["metrics"], math.nan)}]}
    assert plots.curves_data(declined) is None  # no answers under any perturbation: no curve to draw
    assert ">typos@3<" in plots.to_svg(abstentions)
    for row in (clean, typos):
        row.pop("abstention_rate")
    assert plots.abstention_data(group) is None  # a model that always answers has no such figure


def _entry(k: int, typos: float, regressed: bool = False) -> dict:
    def family(name, rel, ci, regressed_here=0):
        return {"model": "demo", "dataset": "demo", "suite": "rainbow-noise", "family": name, "cases": 5,
                "failing": 0, "regressed": regressed_here, "worst_case": f"text={name}@5", "accuracy_drop": 0.1,
                "relative_robustness": rel, "relative_robustness_ci": ci, "flip_rate": 0.1}

    return {"format": "pytest-memerobust-history/1", "date": f"2026-11-2{k}T06:50:00+00:00", "commit": f"c{k}",
            "run": f"c{k}", "verdict": "PASSED", "passed": True, "gated": k > 0, "regressed": regressed,
            "models": {}, "families": [family("typos", typos, [typos - 0.03, typos + 0.03], int(regressed)),
                                       family("uap", 0.99, [0.97, 1.01])]}


def test_the_trend_puts_the_eroded_family_first_with_its_values_run_by_run_and_marks_regressions():
    entries = [_entry(k, 0.97 - 0.07 * k, regressed=k == 4) for k in range(5)]
    data = plots.trend_data(entries)
    assert data["runs"] == ["c0", "c1", "c2", "c3", "c4"] and data["regressed_runs"] == [4]
    typos, uap = data["lines"]
    assert (typos["family"], typos["state"], uap["state"]) == ("typos", "eroded", "steady")
    assert typos["values"] == pytest.approx([0.97, 0.90, 0.83, 0.76, 0.69])
    assert typos["regressed"] == [False] * 4 + [True] and typos["highlight"] and uap["highlight"]
    # a run without the family leaves a gap, not a shifted series
    entries[2]["families"] = entries[2]["families"][1:]
    assert math.isnan(plots.trend_data(entries)["lines"][0]["values"][2])
    svg = plots.trend_chart(entries)
    assert svg.startswith("<svg") and all(f">c{k}<" in svg for k in range(5)) and "typos (eroded)" in svg
    assert plots.trend_chart([]) is None and plots.trend_chart([{**entries[0], "families": []}]) is None


QUICK = ["--memerobust-limit=16", "--memerobust-bootstrap=50", "-p", "no:cacheprovider"]
SUITE = """
[suite]
name = "figures"
[text]
typos = [1, 3]
[image]
contrast = [2]
[budgets]
families = ["char_edits"]
"""


@pytest.fixture
def run_json(pytester):
    pytester.makefile(".toml", **{"memerobust-figures": SUITE})
    result = pytester.runpytest("--memerobust-model=demo", *QUICK, "--memerobust-report=r.json",
                                "--memerobust-report=r.html", "--memerobust-report=r.md", ".")
    result.assert_outcomes(passed=5)
    return pytester.path / "r.json"


def test_memerobust_plot_writes_every_figure_and_the_html_inlines_them(run_json, capsys):
    out = run_json.parent / "figures"
    assert main(["plot", str(run_json), "--out", str(out)]) == 0
    printed = capsys.readouterr().out.split()
    names = ["curves-figures-demo-on-demo.png", "evasion-demo-on-demo.png"]
    assert printed == [str(out / name) for name in names] and sorted(p.name for p in out.iterdir()) == sorted(names)
    assert Image.open(out / names[1]).format == "PNG"
    report = json.loads(run_json.read_text())
    (entry,) = report["budgets"]
    evasion = plots.budget_plot(entry)
    (family,) = entry["entries"]
    assert evasion.data["panels"][0]["curve"] == family["curve"] and evasion.data["panels"][0]["levels"] == [
        float(v) for v in family["levels"]]
    first = (out / names[0]).read_bytes()
    assert main(["plot", str(run_json), "--out", str(out), "--format", "svg"]) == 0
    svg = (out / "curves-figures-demo-on-demo.svg").read_text()
    assert svg.startswith("<svg") and "typos · text" in svg
    assert main(["plot", str(run_json), "--out", str(out)]) == 0 and (out / names[0]).read_bytes() == first
    # the page: the figures inline (no file, no script), each with how to read it; Markdown points at them
    page = run_json.with_suffix(".html").read_text()
    assert page.count("<figure class='plot'>") == 2 and "Robustness curves: accuracy at each severity" in page
    assert "Evasion curves: per edit family" in page and "<script" not in page and "<img src=\"http" not in page
    md = run_json.with_suffix(".md").read_text()  # the Markdown links the same figures, as PNGs beside it
    for name in names:
        assert f"](r.figures/{name})" in md
        assert (run_json.parent / "r.figures" / name).read_bytes() == (out / name).read_bytes()


def _refused(capsys, argv, *says) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("memerobust: error: "), err
    for text in says:
        assert text in err, err
    return err


def test_memerobust_plot_refuses_bad_input_naming_the_file_and_writes_nothing(run_json, tmp_path, capsys):
    out = tmp_path / "figures"
    _refused(capsys, ["plot", str(tmp_path / "missing.json"), "--out", str(out)], "missing.json", "no such file")
    listing = tmp_path / "list.json"
    listing.write_text("[1, 2]\n")
    _refused(capsys, ["plot", str(listing), "--out", str(out)], "list.json", "not a pytest-memerobust report")
    report = json.loads(run_json.read_text())
    interrupted = tmp_path / "interrupted.json"  # what an interrupted run leaves (report.verdict_report)
    interrupted.write_text(json.dumps({**report, "partial": "the run was interrupted before its last case",
                                       "groups": [], "budgets": [], "reliance": [], "prompt_invariance": []}))
    _refused(capsys, ["plot", str(interrupted), "--out", str(out)], "interrupted.json", "partial report",
             "no numbers to plot")
    damaged = tmp_path / "damaged.json"
    group = {k: v for k, v in report["groups"][0].items() if k != "clean"}
    damaged.write_text(json.dumps({**report, "groups": [group]}))
    _refused(capsys, ["plot", str(damaged), "--out", str(out)], "damaged.json", "damaged pytest-memerobust report")
    empty = tmp_path / "nothing.json"
    empty.write_text(json.dumps({**report, "groups": [], "budgets": []}))
    _refused(capsys, ["plot", str(empty), "--out", str(out)], "nothing.json", "nothing to plot")
    assert not out.exists()
