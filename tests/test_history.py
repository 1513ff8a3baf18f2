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
    with pytest.raises(HistoryError, match=r"h\.jsonl, line 4: not a pytest-memerobust-history/1 entry"):
        read_history(path)
    path.write_text('{"format": ')
    with pytest.raises(HistoryError, match=r"line 1: not JSON"):
        read_history(path)
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
