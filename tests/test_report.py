"""Reports: the tables' shape and numbers, Markdown, JSON re-rendering, atomic writes."""
import json

import pytest

from pytest_memerobust import DataOptions, JudgingOptions, Options, RobustnessSession
from pytest_memerobust.cli import main as cli_main
from pytest_memerobust.judge.summaries import grid_summary
from pytest_memerobust.report import render, to_markdown, write_report
from pytest_memerobust.run.report import build_report
from pytest_memerobust.judge.results import StatsConfig


@pytest.fixture(scope="module")
def report():
    session = RobustnessSession(Options(models=("demo",), data=DataOptions(limit=48),
                                        judging=JudgingOptions(stats=StatsConfig(n_resamples=100))))
    session.declare_grid("demo", None, ["text=typos@2", "text=typos@4"], ["image=contrast@2", "image=brightness@1"])
    for condition in ["text=typos@2", "text=typos@4", "image=contrast@2", "image=brightness@1",
                      "text=typos@2+image=contrast@2", "text=typos@2+image=brightness@1",
                      "text=typos@4+image=contrast@2", "text=typos@4+image=brightness@1"]:
        session.evaluate("demo", condition)
    return build_report(session)


def test_grid_summary_is_mean_drop_and_its_share_of_clean():
    clean = {"accuracy": 0.8, "auroc": 0.9, "macro_f1": 0.7}
    cells = [{"metrics": {"accuracy": 0.7, "auroc": 0.9, "macro_f1": 0.6}},
             {"metrics": {"accuracy": 0.6, "auroc": 0.8, "macro_f1": 0.7}}]
    s = grid_summary(clean, cells)
    # accuracy drops 0.1 and 0.2 -> mean 0.15 -> 0.15 / 0.8 = 0.1875
    assert s["average_drop"]["accuracy"] == pytest.approx(0.15)
    assert s["dropping_rate"]["accuracy"] == pytest.approx(0.1875)
    assert s["average_drop"]["auroc"] == pytest.approx(0.05)
    assert s["average_drop"]["macro_f1"] == pytest.approx(0.05)
    assert s["cells"] == 2


def test_terminal_tables_have_the_papers_rows_and_columns(report):
    text = render(report)
    lines = text.splitlines()
    assert "demo on demo (n=48, task=hate): text-only perturbations" in lines
    header = next(l for l in lines if l.startswith("Perturbation"))
    for column in ("Accuracy", "AUROC", "F1", "Abs. Rob. Acc.", "Rel. Rob. Acc.", "Rel. Rob. Acc. CI", "Flip",
                   "McNemar p"):
        assert column in header
    group = report["groups"][0]
    clean = group["clean"]["metrics"]
    row = next(l for l in lines if l.startswith("typos@4 "))
    r = next(r for r in group["results"] if r["condition"] == "text=typos@4")
    assert row.split()[1:4] == [f"{r['metrics'][m]:.3f}" for m in ("accuracy", "auroc", "macro_f1")]
    assert row.split()[5] == f"{r['metrics']['accuracy'] / clean['accuracy']:.5f}"
    # the grid: indices in the declared order, 4 cells, then the summary rows
    grid = text.split("combined text x image perturbations")[1].splitlines()
    cells = [l.split()[:2] for l in grid if l[:1].isdigit()]
    assert cells == [["0", "0"], ["1", "1"], ["1", "2"], ["2", "1"], ["2", "2"]]
    assert "Text-noise indices: 1 = typos@2; 2 = typos@4" in text
    assert "Image-noise indices: 1 = contrast@2; 2 = brightness@1" in text
    rate = 100 * group["grid_summary"]["dropping_rate"]["accuracy"]
    assert f"{rate:.2f}%" in next(l for l in grid if l.startswith("Average dropping rate"))


def test_grid_cell_deltas_are_clean_minus_perturbed(report):
    group = report["groups"][0]
    cell = next(r for r in group["results"] if r["condition"] == "text=typos@4+image=contrast@2")
    text = render(report).split("combined text x image perturbations")[1]
    row = next(l for l in text.splitlines() if l.split()[:2] == ["2", "1"]).split()
    for value, metric in zip(row[5:8], ("accuracy", "auroc", "macro_f1")):
        assert float(value) == pytest.approx(group["clean"]["metrics"][metric] - cell["metrics"][metric], abs=6e-4)


def test_json_holds_every_number_and_re_renders_identically(report, tmp_path, capsys):
    path = tmp_path / "out.json"
    write_report(path, report)
    loaded = json.loads(path.read_text())
    assert render(loaded) == render(report)
    r = loaded["groups"][0]["results"][0]
    assert set(r["relative_robustness"]) == {"accuracy", "auroc", "macro_f1"}
    assert r["absolute_robustness_paper_scale"]["accuracy"] == pytest.approx(
        1 - (loaded["groups"][0]["clean"]["metrics"]["accuracy"] - r["metrics"]["accuracy"]) / 100)
    assert loaded["options"]["n_resamples"] == 100 and loaded["options"]["limit"] == 48
    md_path = tmp_path / "again.md"
    assert cli_main(["report", str(path), "--md", str(md_path)]) == 0
    assert render(report) in capsys.readouterr().out
    # the page a file gets: the text, and a Figures section linking the PNGs written beside it
    from pytest_memerobust.report.markdown import markdown
    from pytest_memerobust.report.plots import report_plots

    plots = report_plots(report)
    assert plots and md_path.read_text() == markdown(report, [(p, f"again.figures/{p.name}.png") for p in plots])
    assert sorted(f.name for f in (tmp_path / "again.figures").iterdir()) == sorted(f"{p.name}.png" for p in plots)
    assert "## Figures" in md_path.read_text() and "## Figures" not in to_markdown(report)


def test_markdown_has_headings_and_pipe_tables(report):
    md = to_markdown(report)
    assert md.startswith("# Robustness report")
    assert "## demo on demo (n=48, task=hate): image-only perturbations" in md
    assert "| Perturbation " in md and "|---" in md.replace(":", "")


def test_unsupported_report_suffix_is_refused(report, tmp_path):
    with pytest.raises(ValueError, match=r"\.pdf"):
        write_report(tmp_path / "out.pdf", report)
    assert list(tmp_path.iterdir()) == []


def test_a_failed_write_keeps_the_old_report_and_leaves_no_temp_file(report, tmp_path, monkeypatch):
    path = tmp_path / "out.json"
    path.write_text("old")

    def explode(*args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(json, "dumps", explode)
    with pytest.raises(RuntimeError):
        write_report(path, report)
    monkeypatch.undo()
    assert path.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]
    write_report(path, report)
    assert json.loads(path.read_text())["seed"] == report["seed"]


def test_html_report_is_self_contained_with_tables_heat_map_bars_and_examples(report, tmp_path):
    path = tmp_path / "out.html"
    write_report(path, report)
    page = path.read_text()
    assert page.startswith("<!doctype html>") and page.count("<table>") >= 3
    # the bars, the heat map and the robustness curves (report/plots.py)
    assert "Accuracy drop from clean per text x image pair" in page and page.count("<svg") == 3
    assert page.count('src="data:image/png;base64,') == len(report["groups"][0]["worst_examples"]) > 0
    assert "http://" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "") and "<script" not in page
    worst = report["groups"][0]["worst_examples"]
    drops = [e["p_true_clean"] - e["p_true_perturbed"] for e in worst]
    assert drops == sorted(drops, reverse=True) and all(d > 0 for d in drops)
    assert all(e["caption"] and e["perturbed_caption"] for e in worst)


def test_titles_say_ocr_captions_in_words_not_the_records_internal_key():
    """Results on captions read off the pictures are keyed `SPEC#ocr-captions` in the records; a title says it."""
    from pytest_memerobust.report.outline import group_title, report_meta, short_title

    group = {"suite": "rainbow-noise", "model": "demo", "dataset": "folder:memes#ocr-captions", "clean": {"n": 8},
             "task": "label"}
    assert group_title(group) == "rainbow-noise: demo on folder:memes (OCR captions) (n=8, task=label)"
    assert short_title(group) == "rainbow-noise: demo on folder:memes (OCR captions)"
    meta = report_meta({"models": {"demo": {}}, "datasets": {"folder:memes#ocr-captions": {"n": 8}}, "seed": 0})
    assert meta.startswith("demo on folder:memes (OCR captions): 8 memes; seed 0.")
