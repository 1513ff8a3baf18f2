"""`memerobust compare` and `report`: the gate's refusals, the interval and McNemar columns, bad files as one line."""
import json

import numpy as np
import pytest

from pytest_memerobust.cli import main as cli_main
from pytest_memerobust.judge.gate import DEFAULT_CHECKS, RegressionCheck, compare_baselines
from pytest_memerobust.judge.metrics import correct
from pytest_memerobust.track.baseline import FORMAT, paired_cells

N = 400
VERSIONS = {"pytest-memerobust": "0.1.0", "imagecorruptions": "1.1.2", "textattack": None}


def _cell(y, wrong):
    """A confident detector, right on every clean meme; its perturbed predictions are wrong on `wrong`."""
    clean = np.where(y[:, None] == np.arange(2), 0.9, 0.1)
    perturbed = clean.copy()
    perturbed[wrong] = perturbed[wrong][:, ::-1]
    return {"y": y.tolist(), "clean": clean.tolist(), "perturbed": perturbed.tolist()}


def _baseline(wrong, seed=0, fingerprint="a" * 64, versions=VERSIONS):
    y = np.random.default_rng(0).integers(0, 2, N)
    return {"format": FORMAT, "seed": seed, "versions": dict(versions), "datasets": {"demo": fingerprint},
            "checkpoints": [{"models": {"demo": "c" * 64}, "paths": {}}],
            "results": {"demo": {"demo": {"clean": _cell(y, []), "text=typos@5": _cell(y, list(wrong))}}}}


def _write(path, data):
    path.write_text(json.dumps(data) if not isinstance(data, str) else data)
    return str(path)


def _one_error_line(capsys):
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("memerobust: error: "), captured.err
    assert "Traceback" not in captured.err and captured.out == ""
    return lines[0]


@pytest.mark.parametrize("change, says", [
    ({"seed": 3}, "a.json was made with seed 0, b.json uses 3: perturbations differ"),
    ({"fingerprint": "b" * 64}, "a.json was made on other data for 'demo' (dataset fingerprint aaaaaaaaaaaa, "
                                "b.json bbbbbbbbbbbb)"),
    ({"versions": {**VERSIONS, "imagecorruptions": "1.1.3"}}, "a.json was made with imagecorruptions 1.1.2, b.json "
                                                              "has 1.1.3: perturbation definitions may differ"),
])
def test_compare_refuses_what_the_gate_refuses(tmp_path, monkeypatch, capsys, change, says):
    """It used to print a table and exit 0 for baselines of another seed, other data or other perturbations."""
    monkeypatch.chdir(tmp_path)
    _write(tmp_path / "a.json", _baseline(range(20)))
    _write(tmp_path / "b.json", _baseline(range(20), **change))
    assert cli_main(["compare", "a.json", "b.json", "--bootstrap", "50"]) == 2
    line = _one_error_line(capsys)
    assert says in line and line.endswith("the comparison is refused")


def test_compare_refuses_baselines_over_other_memes(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    other = _baseline(range(20))
    cell = other["results"]["demo"]["demo"]["text=typos@5"]
    cell["y"][0] = 1 - cell["y"][0]
    _write(tmp_path / "a.json", _baseline(range(20)))
    _write(tmp_path / "b.json", other)
    assert cli_main(["compare", "a.json", "b.json", "--bootstrap", "50"]) == 2
    assert "other memes or labels for demo on 'demo' (text=typos@5)" in _one_error_line(capsys)


def _row(out: str, condition: str) -> list[str]:
    cells = [[cell.strip() for cell in line.split("  ") if cell.strip()] for line in out.splitlines()]
    return next(row for row in cells if len(row) > 1 and row[1] == condition)


def test_compare_shows_the_bound_and_the_adjusted_one_sided_p(tmp_path, monkeypatch, capsys):
    """A is wrong on memes 0-19 perturbed, B on 0-59: 40 discordant memes, all against B."""
    monkeypatch.chdir(tmp_path)
    a, b = _baseline(range(20)), _baseline(range(60))
    _write(tmp_path / "a.json", a)
    _write(tmp_path / "b.json", b)
    assert cli_main(["compare", "a.json", "b.json", "--bootstrap", "300", "--fail-on", "acc"]) == 1
    out = capsys.readouterr().out
    header = next(line for line in out.splitlines() if line.startswith("verdict"))
    assert header.split() == ["verdict", "condition", "rule", "base", "→", "now", "Δ", "bound", "adj.", "p"]
    expected = {c.subject.condition: c for c in compare_baselines(paired_cells(a, b), (DEFAULT_CHECKS[0],),
                                                                  n_resamples=300, seed=b["seed"])}["text=typos@5"]
    assert expected.decision.regressed and expected.scores.high < 0 and expected.decision.bound < 0
    # accuracy under the condition (the default rule, not relative robustness): 380/400 before, 340/400 after
    row = _row(out, "typos@5")
    assert row[0] == "REGRESSED" and row[2:4] == ["acc", "0.950 → 0.850"]
    assert row[4:6] == ["−0.100", f"{expected.decision.bound:+.3f}".replace("-", "−")]
    # every resample is worse: the smallest p 300 resamples can give, adjusted over the family of 2 rules
    assert row[6] == f"{1 / 301:.2g}" == "0.0033" and expected.decision.p_value == expected.decision.p_raw == 1 / 301
    assert "1 of 2 conditions regressed (clean did not); family-wise error 5% over 2 rules" in out


def test_compare_of_a_baseline_with_itself_has_a_zero_bound_and_p_one(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    _write(tmp_path / "a.json", _baseline(range(20)))
    assert cli_main(["compare", "a.json", "a.json", "--bootstrap", "100"]) == 0
    out = capsys.readouterr().out
    row = _row(out, "typos@5")
    assert row[0] == "ok" and row[3:] == ["0.950 → 0.950", "+0.000", "+0.000", "1"]
    assert "0 of 2 conditions regressed (clean did not); family-wise error 5% over 7 rules" in out


def test_compare_takes_the_gates_rules():
    """Relative robustness is a rule to ask for; the clean condition is compared on the metrics only."""
    a, b = _baseline(range(20)), _baseline(range(60))
    rel = compare_baselines(paired_cells(a, b), (RegressionCheck.parse("rel_auroc"),), n_resamples=100)
    assert [(c.subject.condition, c.subject.rule) for c in rel] == [("text=typos@5", "rel_auroc")]
    default = compare_baselines(paired_cells(a, b), n_resamples=100)
    assert [(c.subject.condition, c.subject.rule) for c in default] == [
        ("clean", "acc"), ("clean", "auroc"), ("clean", "f1"),
        ("text=typos@5", "acc"), ("text=typos@5", "auroc"), ("text=typos@5", "f1"), ("text=typos@5", "flip")]
    assert [c.decision.regressed for c in default if c.subject.condition == "clean"] == [False] * 3


def test_correct_reads_argmax_and_multilabel_exact_match():
    assert correct([0, 1, 1], [[0.7, 0.3], [0.6, 0.4], [0.2, 0.8]]).tolist() == [True, False, True]
    assert correct([[1, 0], [1, 1]], [[0.9, 0.2], [0.9, 0.4]]).tolist() == [True, False]


@pytest.mark.parametrize("command", ["compare", "report"])
@pytest.mark.parametrize("content, says", [
    (None, "no such file"),
    ('{"format": "pytest-memerobust-baseline/1", "seed": 0, "resu', "is not valid JSON (truncated?)"),
    ("", "is empty"),
    ("[1, 2]", "it holds a JSON list"),
])
def test_unreadable_files_are_one_line_naming_the_file(tmp_path, monkeypatch, capsys, command, content, says):
    monkeypatch.chdir(tmp_path)
    _write(tmp_path / "a.json", _baseline(range(20)))
    if content is not None:
        _write(tmp_path / "bad.json", content)
    args = ["compare", "a.json", "bad.json"] if command == "compare" else ["report", "bad.json"]
    assert cli_main(args) == 2
    line = _one_error_line(capsys)
    assert "bad.json" in line and says in line


def test_a_report_is_not_a_baseline_and_a_baseline_is_not_a_report(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    _write(tmp_path / "a.json", _baseline(range(20)))
    _write(tmp_path / "report.json", {"tool": "pytest-memerobust", "format": 1, "groups": []})
    assert cli_main(["compare", "a.json", "report.json"]) == 2
    assert "report.json is a pytest-memerobust report, not a baseline" in _one_error_line(capsys)
    assert cli_main(["report", "a.json"]) == 2
    assert "a.json is a baseline, not a report" in _one_error_line(capsys)


def test_a_damaged_baseline_names_the_entry(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    damaged = _baseline(range(20))
    del damaged["results"]["demo"]["demo"]["text=typos@5"]["perturbed"]
    _write(tmp_path / "a.json", _baseline(range(20)))
    _write(tmp_path / "b.json", damaged)
    assert cli_main(["compare", "a.json", "b.json"]) == 2
    assert "baseline b.json: results/demo/demo/text=typos@5 is not a condition entry" in _one_error_line(capsys)
    no_seed = {k: v for k, v in _baseline(range(20)).items() if k != "seed"}
    _write(tmp_path / "b.json", no_seed)
    assert cli_main(["compare", "a.json", "b.json"]) == 2
    assert "baseline b.json: 'seed' is missing or not a JSON integer" in _one_error_line(capsys)


@pytest.mark.parametrize("flag, says", [(["--fail-on", "rel_accuracy"], "--fail-on: bad regression spec"),
                                        (["--confidence", "95"], "--confidence 95.0: must lie strictly between")])
def test_bad_compare_options_are_one_line(tmp_path, monkeypatch, capsys, flag, says):
    monkeypatch.chdir(tmp_path)
    _write(tmp_path / "a.json", _baseline(range(20)))
    assert cli_main(["compare", "a.json", "a.json", *flag]) == 2
    assert says in _one_error_line(capsys)


@pytest.mark.parametrize("bootstrap, control, needed", [("3", "fwer", 19), ("18", "fwer", 19), ("98", "none:0.01", 99)])
def test_compare_refuses_too_few_resamples_to_ever_fail(tmp_path, monkeypatch, capsys, bootstrap, control, needed):
    """B is wrong on 60 memes where A was wrong on 20: a regression no bootstrap p-value below 1/(B+1) can show
    at the level; with 3 resamples it passed, exit 0, without a word."""
    monkeypatch.chdir(tmp_path)
    _write(tmp_path / "a.json", _baseline(range(20)))
    _write(tmp_path / "b.json", _baseline(range(60)))
    assert cli_main(["compare", "a.json", "b.json", "--bootstrap", bootstrap, "--gate-error", control]) == 2
    line = _one_error_line(capsys)
    # --bootstrap is the decision's resample count, --resamples by its other name
    assert f"--resamples={bootstrap}: the gate's smallest p-value is 1/{int(bootstrap) + 1}" in line
    assert f"use at least {needed} resamples" in line
    assert cli_main(["compare", "a.json", "b.json", "--bootstrap", str(needed), "--gate-error", control,
                     "--fail-on", "acc"]) == 1  # the fewest that can: a regression this clear fails
