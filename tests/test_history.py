"""The run history: one line per run read off its report, the trend per family across runs, `memerobust history`."""
from __future__ import annotations

import copy
import json
from datetime import datetime, timezone

import pytest

from pytest_memerobust.cli import main
from pytest_memerobust.judge.trend import trend_series, trend_state
from pytest_memerobust.report.history import (FORMAT, HistoryError, append_history, history_entry, read_history,
                                              sparkline)
from pytest_memerobust.report.tables import family_rollup

from verdict_sample import two_suite_report, with_verdict


@pytest.fixture(scope="module")
def report():
    return with_verdict(two_suite_report())


def _point(value, low, high):
    return {"relative_robustness": value, "relative_robustness_ci": [low, high]}


def test_trend_states():
    # a fall of 0.25 against half-widths 0.05 and 0.1 (in quadrature 0.112): beyond noise
    assert trend_state([_point(0.95, 0.9, 1.0), _point(0.7, 0.6, 0.8)]) == "eroded"
    # a fall of 0.1 against half-widths 0.1 and 0.1 (0.141): within noise; over 3 runs, falling at each step
    assert trend_state([_point(0.95, 0.85, 1.05), _point(0.9, 0.8, 1.0), _point(0.85, 0.75, 0.95)]) == "eroding"
    assert trend_state([_point(0.95, 0.85, 1.05), _point(0.85, 0.75, 0.95)]) == "steady"  # two runs, within noise
    # fell overall, but rose at as many steps as it fell
    assert trend_state([_point(0.9, 0.8, 1.0), _point(0.95, 0.85, 1.05), _point(0.85, 0.75, 0.95)]) == "steady"
    assert trend_state([_point(0.6, 0.5, 0.7), _point(0.9, 0.8, 1.0)]) == "improved"
    assert trend_state([_point(None, None, None), _point(0.9, 0.8, 1.0)]) == "steady"  # one value: no trend
    # falling at each step, but by a hundredth against half-widths of 0.1: noise, not a trend
    assert trend_state([_point(0.95, 0.85, 1.05), _point(0.945, 0.845, 1.045), _point(0.94, 0.84, 1.04)]) == "steady"
    assert trend_state([_point(0.9, None, None), _point(0.5, None, None)]) == "steady"  # no intervals: no noise known


def test_entry_names_the_rollups_worst_case(report):
    entry = history_entry(report, commit="abc1234", date=datetime(2026, 11, 26, 7, 0, tzinfo=timezone.utc))
    assert entry["format"] == FORMAT and entry["run"] == "abc1234" and entry["date"] == "2026-11-26T07:00:00+00:00"
    assert entry["verdict"] == ("PASSED" if report["verdict"]["passed"] else "FAILED")
    assert entry["models"]["demo"]["checkpoint_sha256"] == report["models"]["demo"]["checkpoint_sha256"]
    rows = {(g["suite"], r["condition"]): r for g in report["groups"] for r in g["results"]}
    harsh = {f["family"]: f for f in entry["families"] if f["suite"] == "harsh"}
    assert set(harsh) == {c["family"] for c in report["cases"] if c["suite"] == "harsh" and c["condition"] != "clean"}
    rollup = family_rollup(report)
    skipped = [f for f in entry["families"] if f["worst_case"] is None]
    assert [f["family"] for f in skipped] == ["gaussian_noise"] * 2  # every case skipped: no figure, said as such
    assert all(f["relative_robustness"] is None and f["cases"] == 1 for f in skipped)
    for f in entry["families"]:
        if f["worst_case"] is None:
            continue
        row = rows[(f["suite"], f["worst_case"])]
        assert f["relative_robustness"] == row["relative_robustness"]["accuracy"]
        assert f["relative_robustness_ci"] == row["relative_robustness_ci"]["accuracy"]
        assert f["accuracy_drop"] == pytest.approx(row["clean_metrics"]["accuracy"] - row["metrics"]["accuracy"])
        assert f["cases"] == sum(c["family"] == f["family"] and c["suite"] == f["suite"] for c in report["cases"])
        assert f["worst_case"].split("@")[0].split("=")[-1] in rollup  # the roll-up names the same worst case


def _eroding_runs(report, steps=5):
    """`steps` entries in which the typos family's worst case loses 0.06 of relative robustness per run (interval
    width kept), everything else unchanged, and no run's gate regressed."""
    entries = []
    for k in range(steps):
        entry = history_entry(report, commit=f"c{k}", date=datetime(2026, 11, 20 + k, tzinfo=timezone.utc))
        for f in entry["families"]:
            if f["family"] == "typos":
                f["relative_robustness"] = 0.98 - 0.06 * k
                f["relative_robustness_ci"] = [0.98 - 0.06 * k - 0.05, min(1.0, 0.98 - 0.06 * k + 0.05)]
        entries.append(copy.deepcopy(entry))
    return entries


def test_history_file_round_trip_and_bad_lines(tmp_path, report):
    path = tmp_path / "h.jsonl"
    entries = _eroding_runs(report, 3)
    for e in entries:
        append_history(path, e)
    assert read_history(path) == json.loads(json.dumps(entries))
    assert len(path.read_text().splitlines()) == 3
    with path.open("a") as f:
        f.write('{"format": "something else", "families": []}\n')
    warned = []
    assert read_history(path, warn=warned.append) == json.loads(json.dumps(entries))  # skipped, not fatal
    assert warned == [f"run history {path}: 1 damaged line skipped (line 4: not a pytest-memerobust-history/1 "
                      "entry); the other runs are shown, and a run still adds its own line"]
    path.write_text('{"format": ')
    warned.clear()
    assert read_history(path, warn=warned.append) == [] and "line 1: not JSON" in warned[0]
    with pytest.raises(HistoryError, match="no such file"):
        read_history(tmp_path / "missing.jsonl")


def test_trend_series_and_sparkline(report):
    series = trend_series(_eroding_runs(report))
    typos = next(s for s in series if s["family"] == "typos")
    assert [p["run"] for p in typos["points"]] == ["c0", "c1", "c2", "c3", "c4"]
    assert typos["change"] == pytest.approx(-0.24) and typos["state"] == "eroded"
    assert not typos["regressed_in_window"]
    assert all(s["state"] == "steady" for s in series if s["family"] != "typos")
    assert sparkline([0.98, 0.92, 0.86, 0.80, 0.74]) == "█▇▅▃▁"
    assert sparkline([None, 0.0, 1.0]) == " ▁█"
    assert sparkline([0.90, 0.91, 0.90]) == "▁▁▁"  # a move of 0.01 is not drawn as a cliff


def test_history_command_shows_the_erosion(tmp_path, report, capsys):
    path = tmp_path / "h.jsonl"
    for e in _eroding_runs(report):
        append_history(path, e)
    assert main(["history", str(path)]) == 0
    out = capsys.readouterr().out
    assert "the last 5 of 5 runs" in out
    typos_line = next(line for line in out.splitlines() if line.startswith("harsh: typos") or
                      line.startswith("typos"))
    assert "0.980" in typos_line and "0.740" in typos_line and "−0.240" in typos_line and "eroded" in typos_line
    assert "ERODED: demo on demo, typos: relative robustness −0.240 over 5 runs while no run's gate found a " \
           "regression in it" in out
    assert main(["history", str(path), "--fail-on-erosion"]) == 1
    capsys.readouterr()
    assert main(["history", str(path), "--last", "2", "--family", "typos"]) == 0
    out = capsys.readouterr().out
    assert "the last 2 of 5 runs" in out and "c0" not in out.split("relative robustness")[1]
    assert main(["history", str(path), "--model", "nope"]) == 2
    assert "no run has model 'nope'" in capsys.readouterr().err


def _typos_line(out: str) -> str:
    return next(line for line in out.splitlines() if line.startswith("harsh: typos") or line.startswith("typos"))


def test_runs_that_share_a_label_are_columns_of_their_own(tmp_path, report, capsys):
    # two checkpoints gated on one commit (the README's use): one label, two runs with their own values
    path = tmp_path / "h.jsonl"
    first, second = _eroding_runs(report, 2)
    for entry, value, name in ((first, 0.98, "old.safetensors"), (second, 0.694, "new.safetensors")):
        entry["run"] = entry["commit"] = "abc1234"
        entry["models"]["demo"]["checkpoint"] = name
        for f in entry["families"]:
            if f["family"] == "typos":
                f["relative_robustness"], f["relative_robustness_ci"] = value, [value - 0.05, min(1.0, value + 0.05)]
        append_history(path, entry)
    assert main(["history", str(path)]) == 0
    out = capsys.readouterr().out
    header = next(line for line in out.splitlines() if line.startswith("family"))
    assert "abc1234 " in header and "abc1234 (2)" in header
    typos = _typos_line(out)
    assert "0.980" in typos and "0.694" in typos and "−0.286" in typos and "eroded" in typos
    runs = [line for line in out.splitlines() if line.startswith("abc1234")]
    assert len(runs) == 2 and "old.safetensors" in runs[0] and "new.safetensors" in runs[1]
    # the run's own trend (its reports draw it): the history's run and this one, on the same commit
    from pytest_memerobust.report.history import trend_block

    path.write_text(path.read_text().splitlines()[0] + "\n")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("GITHUB_SHA", "abc1234")
        trend_block(report, path)
    block = report.pop("history")
    assert [e["run"] for e in block["entries"]] == ["abc1234", "abc1234 (2)"]
    typos = next(s for s in block["series"] if s["family"] == "typos" and s["suite"] == "harsh")
    assert [p["run"] for p in typos["points"]] == ["abc1234", "abc1234 (2)"]
    assert typos["points"][0]["relative_robustness"] == 0.98 != typos["points"][1]["relative_robustness"]


def _damaged_history(tmp_path, report) -> tuple:
    """A history whose lines 2 to 4 are damaged: a value of the wrong type, cut-short JSON, NaN."""
    path = tmp_path / "h.jsonl"
    good = _eroding_runs(report, 4)
    wrong_type = copy.deepcopy(good[1])
    nan = json.dumps(good[2]).replace('"flip_rate": 0.', '"flip_rate": NaN, "x": 0.', 1)
    next(f for f in wrong_type["families"] if f["family"] == "typos")["relative_robustness"] = "0.9"
    assert "NaN" in nan
    path.write_text("\n".join([json.dumps(good[0]), json.dumps(wrong_type), '{"format": "pytest-memerobust-hist',
                               nan, json.dumps(good[3])]) + "\n")
    return path, good


def test_a_damaged_line_is_skipped_with_one_warning(tmp_path, report, capsys):
    path, good = _damaged_history(tmp_path, report)
    assert main(["history", str(path)]) == 0
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1 and captured.err.startswith("memerobust history: warning: run history")
    assert "the last 2 of 2 runs" in captured.out and "nan" not in captured.out.lower()
    typos = _typos_line(captured.out)
    assert "0.980" in typos and "0.800" in typos
    warned = []
    assert [e["run"] for e in read_history(path, warn=warned.append)] == ["c0", "c3"]
    assert len(warned) == 1 and "3 damaged lines skipped" in warned[0] and str(path) in warned[0]
    assert "line 2: family" in warned[0] and "relative_robustness not a finite number or null" in warned[0]
    assert "line 3: not JSON" in warned[0] and "line 4: family" in warned[0] and "flip_rate" in warned[0]


def test_terminal_codes_in_a_history_are_never_printed_raw(tmp_path, report, capsys):
    path = tmp_path / "h.jsonl"
    for k, entry in enumerate(_eroding_runs(report)):
        entry["run"] = f"\x1b[2Jrun{k}"
        entry["verdict"] = "PASSED\r"
        for f in entry["families"]:
            f["model"], f["family"] = "demo\x1b[2J", f["family"] + "\x07"
        append_history(path, entry)
    assert main(["history", str(path), "--fail-on-erosion"]) == 1
    out = capsys.readouterr().out
    assert not any(ch in out for ch in "\x1b\x07\r")
    assert "\\x1b[2Jrun0" in out and "\\x1b[2Jrun4" in out and "PASSED\\r" in out
    assert "ERODED: demo\\x1b[2J on demo, typos\\x07: relative robustness −0.240" in out


@pytest.mark.parametrize("last", ["0", "-1", "two"])
def test_history_last_must_be_a_positive_number(tmp_path, report, capsys, last):
    path = tmp_path / "h.jsonl"
    append_history(path, _eroding_runs(report, 1)[0])
    with pytest.raises(SystemExit) as exited:
        main(["history", str(path), "--last", last])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert f"argument --last: expected a positive integer, got '{last}'" in err and "Traceback" not in err


def test_a_closed_stdout_ends_quietly(tmp_path, report):
    import subprocess
    import sys

    path = tmp_path / "h.jsonl"
    for entry in _eroding_runs(report, 8):
        append_history(path, entry)
    # the reader is gone before the command writes (as `| head` is once it has its lines)
    process = subprocess.Popen([sys.executable, "-m", "pytest_memerobust.cli", "history", str(path)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    process.stdout.close()
    err = process.stderr.read().decode()
    assert process.wait(timeout=60) == 141, err
    assert err == ""


SUITE = """
[suite]
name = "tracked"
[thresholds]
min_relative_robustness = { accuracy = 0.5 }
[text]
typos = [3]
"""


def test_a_run_appends_its_line_after_a_damaged_one_and_warns_once(pytester, tmp_path, report):
    import torch  # noqa: F401  imported before pytester's in-process run, which would otherwise re-import it

    history = tmp_path / "h.jsonl"
    damaged = _eroding_runs(report, 1)[0]
    typos = next(f for f in damaged["families"] if f["family"] == "typos")
    typos["relative_robustness"], typos["suite"] = "0.9", "tracked"  # hand-edited, in the series this run extends
    history.write_text(json.dumps(damaged) + "\n")
    pytester.makefile(".toml", **{"memerobust-tracked": SUITE})
    result = pytester.runpytest("--memerobust-model=demo", "--memerobust-limit=16", "--memerobust-bootstrap=50",
                                "-p", "no:cacheprovider", f"--memerobust-history={history}",
                                "--memerobust-report=r.json", ".")
    assert result.ret == 0, result.stdout.str()
    lines = history.read_text().splitlines()
    assert len(lines) == 2 and json.loads(lines[0]) == damaged  # the damaged line is kept, as the user wrote it
    assert json.loads(lines[1])["verdict"] == "PASSED"
    out = result.stdout.str()
    assert out.count("1 damaged line skipped (line 1: family") == 1 and "HistoryWarning" in out
    assert f"run added to the history {history}" in out and "TypeError" not in out
    assert json.loads((pytester.path / "r.json").read_text())["history"]["runs"] == 1
