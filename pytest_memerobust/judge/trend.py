"""Whether robustness moved across runs: per (model, dataset, suite, family), the worst case's relative robustness
run by run, and a state a reader can act on. A gate compares one run with its baseline, so five small steps that each
pass can add up to a large loss; the trend compares the first run of the window with the last, with their intervals.

States:
- eroded: the last run is below the first by more than noise: the fall exceeds the two runs' interval half-widths
  combined in quadrature (a two-sample z-test at the intervals' level; conservative for runs on the same memes,
  whose estimates are positively correlated);
- eroding: over 3 or more runs it fell at more steps than it rose, by more than half the noise but within it;
- improved: the last run is above the first by more than noise;
- steady: none of these (including a series with fewer than 2 runs that have a value).
"""
from __future__ import annotations

import math

MONOTONE_RUNS = 3  # a decline within noise reads as "eroding" over at least this many runs


def _half_width(point: dict) -> float | None:
    low, high = point.get("relative_robustness_ci") or [None, None]
    return None if low is None or high is None else (high - low) / 2


def trend_state(points: list[dict]) -> str:
    """The state of one series (points oldest first, each with relative_robustness and its interval)."""
    valued = [p for p in points if p.get("relative_robustness") is not None]
    if len(valued) < 2:
        return "steady"
    first, last = valued[0], valued[-1]
    change = last["relative_robustness"] - first["relative_robustness"]
    widths = [_half_width(first), _half_width(last)]
    noise = math.hypot(*widths) if None not in widths else 0.0
    if noise and abs(change) > noise:
        return "eroded" if change < 0 else "improved"
    values = [p["relative_robustness"] for p in valued]
    falls = sum(b < a for a, b in zip(values, values[1:]))
    rises = sum(b > a for a, b in zip(values, values[1:]))
    if len(values) >= MONOTONE_RUNS and -change > noise / 2 and falls > rises:
        return "eroding"
    return "steady"


def trend_series(entries: list[dict], model: str | None = None, family: str | None = None) -> list[dict]:
    """One series per (model, dataset, suite, family) over the given entries (oldest first), each point the run's
    label, date, commit, worst case, relative robustness with its interval, and whether the gate regressed there;
    `change` is the last value minus the first."""
    keys, points = [], {}
    for entry in entries:
        for f in entry.get("families", []):
            if (model is not None and f["model"] != model) or (family is not None and f["family"] != family):
                continue
            key = (f["model"], f["dataset"], f["suite"], f["family"])
            if key not in points:
                keys.append(key)
                points[key] = []
            points[key].append({"run": entry["run"], "date": entry["date"], "commit": entry.get("commit"),
                                "worst_case": f.get("worst_case"), "relative_robustness": f.get("relative_robustness"),
                                "relative_robustness_ci": f.get("relative_robustness_ci"),
                                "regressed": bool(f.get("regressed")), "failing": f.get("failing")})
    out = []
    for key in keys:
        valued = [p["relative_robustness"] for p in points[key] if p["relative_robustness"] is not None]
        out.append({"model": key[0], "dataset": key[1], "suite": key[2], "family": key[3], "points": points[key],
                    "change": valued[-1] - valued[0] if len(valued) >= 2 else None,
                    "state": trend_state(points[key]),
                    "regressed_in_window": any(p["regressed"] for p in points[key])})
    return out
