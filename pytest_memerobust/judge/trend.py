"""Whether robustness moved across runs: per (model, dataset, suite, family), the worst case's relative robustness
run by run, and a state a reader can act on. A gate compares one run with its baseline, so five small steps that each
pass can add up to a large loss; the trend compares the first run of the window with the last, with their intervals.

States:
- eroded: the last run's interval lies wholly below the first run's (the loss is beyond the noise of either run);
- eroding: it fell at every step over 3 or more runs, but the intervals still overlap;
- improved: the last run's interval lies wholly above the first run's;
- steady: none of these (including a series with fewer than 2 runs that have a value).
"""
from __future__ import annotations

MONOTONE_RUNS = 3  # a decline at every step over at least this many runs reads as "eroding"


def trend_state(points: list[dict]) -> str:
    """The state of one series (points oldest first, each with relative_robustness and its interval)."""
    valued = [p for p in points if p.get("relative_robustness") is not None]
    if len(valued) < 2:
        return "steady"
    first, last = valued[0], valued[-1]
    (first_low, first_high), (last_low, last_high) = (first.get("relative_robustness_ci") or [None, None],
                                                      last.get("relative_robustness_ci") or [None, None])
    if last_high is not None and first_low is not None and last_high < first_low:
        return "eroded"
    if last_low is not None and first_high is not None and last_low > first_high:
        return "improved"
    values = [p["relative_robustness"] for p in valued]
    if len(values) >= MONOTONE_RUNS and all(b < a for a, b in zip(values, values[1:])):
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
