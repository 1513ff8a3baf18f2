"""A run history: one line per run (its verdict and, per perturbation family, the worst case's figures) appended to a
.jsonl file, so a team sees robustness erode over commits even when every single step passed its gate. The entry
is read off the finished report (report/outline.family_summaries: the same worst case the terminal's roll-up names);
whether a series eroded is judged in judge/trend.py; this module renders and keeps the file."""
from __future__ import annotations

import json
import math
import os
import subprocess
from datetime import datetime, timezone
from pathlib import Path

from tabulate import tabulate

from ..atomic import atomic_write_text, folder_locked
from ..errors import MemeRobustError
from .outline import family_summaries, finite, signed

FORMAT = "pytest-memerobust-history/1"
DEFAULT_NAME = "history.jsonl"  # in the run's cache dir, when --memerobust-history is given without a path
DEFAULT_PATH = "default"  # options.DEFAULT: --memerobust-history given alone (DEFAULT_NAME in the cache dir)
SHOWN_RUNS = 8  # runs `memerobust history` and the HTML's trend show unless told otherwise
SPARK = "▁▂▃▄▅▆▇█"
SHOWN_SKIPS = 3  # damaged lines a warning names in full
# CI systems name the commit they build in these variables; a checkout without them asks git
COMMIT_VARIABLES = ("GITHUB_SHA", "CI_COMMIT_SHA", "BUILDKITE_COMMIT", "CIRCLE_SHA1", "GIT_COMMIT")


class HistoryError(MemeRobustError):
    """A run history cannot be read or written; the message names the file and the line."""


def run_commit(root: Path | None = None) -> str | None:
    """The commit this run tested (short): the CI system's variable, else `git rev-parse` in `root`; a checkout with
    uncommitted changes gets a `+` (its numbers are not that commit's); None outside a repository."""
    for name in COMMIT_VARIABLES:
        if os.environ.get(name):
            return os.environ[name][:9]
    try:
        sha = subprocess.run(["git", "-C", str(root or "."), "rev-parse", "--short=9", "HEAD"], capture_output=True,
                             text=True, timeout=10)
        if sha.returncode != 0:
            return None
        dirty = subprocess.run(["git", "-C", str(root or "."), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return sha.stdout.strip() + ("+" if dirty.returncode == 0 and dirty.stdout.strip() else "")


def history_entry(report: dict, *, commit: str | None = None, date: datetime | None = None) -> dict:
    """This run as one history line: when, which commit, the verdict, whether the gate regressed, the checkpoints,
    and per (model, dataset, suite, family) the worst case with its relative robustness (accuracy) and interval."""
    verdict = report.get("verdict") or {}
    when = (date or datetime.now(timezone.utc)).astimezone(timezone.utc).replace(microsecond=0)
    families = []
    for entry in family_summaries(report):
        for f in entry["families"]:
            row = f["worst_row"]
            rel = (row or {}).get("relative_robustness", {}).get("accuracy")
            ci = (row or {}).get("relative_robustness_ci", {}).get("accuracy") or [None, None]
            families.append({
                "model": entry["model"], "dataset": entry["dataset"], "suite": entry["suite"], "family": f["family"],
                "cases": len(f["cases"]), "failing": f["failing"], "regressed": f["regressed"],
                "worst_case": row["condition"] if row else None,
                "accuracy_drop": finite(row["clean_metrics"]["accuracy"] - row["metrics"]["accuracy"]) if row else None,
                "relative_robustness": finite(rel), "relative_robustness_ci": [finite(ci[0]), finite(ci[1])],
                "flip_rate": finite((row or {}).get("flip_rate"))})
    baseline = verdict.get("baseline") or {}
    return {"format": FORMAT, "date": when.isoformat(), "commit": commit, "run": commit or when.strftime("%m-%d %H:%M"),
            "verdict": "INTERRUPTED" if verdict.get("interrupted") else "NO VERDICT" if verdict.get("no_verdict") else
            "PARTIAL" if verdict.get("partial") else ("PASSED" if verdict.get("passed") else "FAILED") if verdict
            else None,
            "passed": verdict.get("passed"), "gated": bool(baseline),
            "regressed": bool(baseline.get("regressed")) if baseline else False,
            "improved": int(baseline.get("improved") or 0) if baseline else 0,
            "models": {name: {"checkpoint_sha256": m.get("checkpoint_sha256"), "checkpoint": _file_name(m)}
                       for name, m in (report.get("models") or {}).items()},
            "families": families}


class HistoryWarning(UserWarning):
    """Lines of a run history were damaged (hand-edited, cut short) and were skipped; the message names them."""


TEXT_FIELDS = ("date", "run")  # an entry's fields that must be text
OPTIONAL_TEXT_FIELDS = ("commit", "verdict")
FAMILY_TEXT_FIELDS = ("model", "dataset", "family")
FAMILY_NUMBERS = ("accuracy_drop", "relative_robustness", "flip_rate")  # a finite number or null


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def entry_damage(entry) -> str | None:
    """What makes `entry` unfit to draw (a field of the wrong type, NaN or infinity where a number goes), or None
    for a whole entry: a hand-edited value is found here, not as a TypeError halfway through a table."""
    if not isinstance(entry, dict) or entry.get("format") != FORMAT:
        return f"not a {FORMAT} entry"
    wrong = [k for k in TEXT_FIELDS if not isinstance(entry.get(k), str)]
    wrong += [k for k in OPTIONAL_TEXT_FIELDS if not isinstance(entry.get(k), (str, type(None)))]
    wrong += [k for k in ("gated", "regressed") if not isinstance(entry.get(k, False), bool)]
    wrong += [k for k in ("passed",) if not isinstance(entry.get(k), (bool, type(None)))]
    wrong += [k for k in ("improved",) if type(entry.get(k, 0)) is not int]
    models = entry.get("models", {})
    if not isinstance(models, dict) or not all(
            isinstance(m, dict) and all(isinstance(m.get(k), (str, type(None))) for k in ("checkpoint_sha256",
                                                                                         "checkpoint"))
            for m in models.values()):
        wrong.append("models")
    if wrong:
        return f"{', '.join(wrong)} of the wrong type"
    if not isinstance(entry.get("families"), list):
        return "families is not a list"
    for k, f in enumerate(entry["families"], 1):
        if not isinstance(f, dict):
            return f"family {k} is not an object"
        ci = f.get("relative_robustness_ci", [None, None])
        bad = [key for key in FAMILY_TEXT_FIELDS if not isinstance(f.get(key), str)]
        bad += [key for key in ("suite", "worst_case") if not isinstance(f.get(key), (str, type(None)))]
        bad += [key for key in ("cases", "failing", "regressed") if not isinstance(f.get(key, 0), (int, bool))]
        bad += [key for key in FAMILY_NUMBERS if f.get(key) is not None and not _number(f[key])]
        if not (isinstance(ci, list) and len(ci) == 2 and all(v is None or _number(v) for v in ci)):
            bad.append("relative_robustness_ci")
        if bad:
            return (f"family {k} ({printable(str(f.get('family')))}): {', '.join(bad)} not "
                    + ("a finite number or null" if set(bad) <= {*FAMILY_NUMBERS, "relative_robustness_ci"}
                       else "of the right type"))
    return None


def _file_name(model: dict) -> str | None:
    """The checkpoint's file name (not its folder: a history travels between machines), None without one."""
    path = model.get("checkpoint")
    return None if path in (None, "None", "") else Path(str(path)).name


def read_history(path: Path, warn=None) -> list[dict]:
    """The whole entries of a history file, oldest first. A damaged line (not JSON, NaN, a value of the wrong type)
    is skipped, never fatal: a run still appends its own line after it; `warn` (when given) gets one message naming
    the file and every skipped line. A file that cannot be read at all is a HistoryError."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise HistoryError(f"run history {path}: no such file (a run writes it with --memerobust-history)") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise HistoryError(f"run history {path}: cannot be read ({exc})") from None
    entries, skipped = [], []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        entry, why = parse_entry(line)
        if why is not None:
            skipped.append(f"line {number}: {why}")
        else:
            entries.append(entry)
    if skipped and warn is not None:
        warn(skipped_message(path, skipped))
    return entries


def parse_entry(text: str) -> tuple[dict | None, str | None]:
    """(the entry, None) for a whole history entry's JSON text, else (None, what is wrong with it)."""
    try:
        entry = json.loads(text)
    except ValueError as exc:
        return None, f"not JSON ({exc})"
    why = entry_damage(entry)
    return (entry, None) if why is None else (None, why)


def skipped_message(where, skipped: list[str], what: str = "line") -> str:
    """The one warning about a history's damaged lines (or a tracker's runs: `what`), at most SHOWN_SKIPS of them
    named in full."""
    named = "; ".join(skipped[:SHOWN_SKIPS]) + (f"; and {len(skipped) - SHOWN_SKIPS} more"
                                                 if len(skipped) > SHOWN_SKIPS else "")
    return (f"run history {printable(str(where))}: {len(skipped)} damaged {what}{'' if len(skipped) == 1 else 's'} "
            f"skipped ({named}); the other runs are shown" + (", and a run still adds its own line"
                                                               if what == "line" else ""))


def printable(text: str) -> str:
    """Text read from a file, safe to print on a terminal: control characters (an ESC that clears the screen, a
    carriage return that hides a line) escaped as Python writes them."""
    return text if text.isprintable() else repr(text)[1:-1]


def history_path(option: Path | str, cache_dir: Path | None) -> Path:
    """The history a run appends to: the path given, or history.jsonl in the cache dir (`--memerobust-history`
    alone)."""
    if option != DEFAULT_PATH:
        return Path(option)
    if cache_dir is None:
        raise HistoryError("--memerobust-history without a path keeps the history in the cache dir, and this run has "
                           "none (-p no:cacheprovider): name the file, --memerobust-history=history.jsonl")
    return Path(cache_dir) / DEFAULT_NAME


def check_history(path: Path) -> str | None:
    """Before any case: an existing history must read (a run must not end unable to append to it); the warning
    about its damaged lines, if any (said once, at the start: the run's end skips them silently)."""
    said: list[str] = []
    if Path(path).exists():
        read_history(path, warn=said.append)
    return said[0] if said else None


def trend_block(report: dict, path: Path, root: Path | None = None) -> dict:
    """This run's history line (returned), and in `report["history"]` the last SHOWN_RUNS runs with it and their
    trend per family (judge/trend.py), which the reports draw."""
    from ..judge.trend import trend_series

    entry = history_entry(report, commit=run_commit(root))
    entries = distinct_runs([*(read_history(path) if Path(path).exists() else []), entry][-SHOWN_RUNS:])
    report["history"] = {"path": str(path), "runs": len(entries), "entries": entries,
                         "series": trend_series(entries)}
    return entry


def distinct_runs(entries: list[dict]) -> list[dict]:
    """The entries (copies) each with a label of its own: runs that share one (two checkpoints gated on one commit,
    or two runs without git in one minute) become `abc1234`, `abc1234 (2)`..., in order, so every column and point
    is one run's and the change compares the right two."""
    seen: set[str] = set()
    out = []
    for entry in entries:
        label, n = entry["run"], 1
        while label in seen:
            n += 1
            label = f"{entry['run']} ({n})"
        seen.add(label)
        out.append({**entry, "run": label})
    return out


def append_history(path: Path, entry: dict) -> None:
    """Add one run's line; the file is rewritten whole and atomically, so a killed run never leaves half a line,
    and under a lock on its folder, so two runs ending at once both keep theirs."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with folder_locked(path.parent):
        before = path.read_text(encoding="utf-8") if path.exists() else ""
        if before and not before.endswith("\n"):
            before += "\n"
        atomic_write_text(path, before + json.dumps(entry, sort_keys=True, allow_nan=False) + "\n")


MIN_SPARK_SPAN = 0.1  # a series moving less than this stays within a few heights: noise does not look like a cliff


def sparkline(values: list[float | None]) -> str:
    """One character per run, its height the value between the series' lowest and highest (a span of at least
    MIN_SPARK_SPAN); a gap where a run has none."""
    known = [v for v in values if v is not None]
    low = min(known, default=0.0)
    span = max(max(known, default=0.0) - low, MIN_SPARK_SPAN)
    return "".join(" " if v is None else SPARK[min(len(SPARK) - 1, max(0, int((v - low) / span * len(SPARK))))]
                   for v in values)


def _checkpoints(entry: dict) -> str:
    """The run's checkpoints, by file name (else the start of their sha256): what tells apart two runs of a commit."""
    shown = [m.get("checkpoint") or (m.get("checkpoint_sha256") or "")[:10] for m in entry.get("models", {}).values()]
    return ", ".join(printable(c) for c in shown if c) or "–"


def _cell(point: dict | None) -> str:
    if point is None or point.get("relative_robustness") is None:
        return "–"
    return f"{point['relative_robustness']:.3f}" + (" R" if point.get("regressed") else "")


def runs_table(entries: list[dict], tablefmt: str = "simple") -> str:
    """The runs themselves: label, date, commit, checkpoints, verdict and whether the gate regressed (text from
    the file escaped: no terminal codes)."""
    rows = [[printable(e["run"]), printable(e["date"].replace("T", " ")[:16]), printable(e.get("commit") or "–"),
             _checkpoints(e), printable(e.get("verdict") or "–"),
             ("regressed" if e.get("regressed") else "no regression") if e.get("gated") else "not gated"]
            for e in entries]
    return tabulate(rows, headers=["run", "date (UTC)", "commit", "checkpoint", "verdict", "gate"],
                    tablefmt=tablefmt, disable_numparse=True)


def trend_tables(series: list[dict], runs: list[str], tablefmt: str = "simple",
                 heading=lambda text: f"{text}\n") -> str:
    """Per model and dataset, one line per family: its worst case's relative robustness run by run (R: the gate
    found a regression in that family), the change from the first run to the last, and the trend's state."""
    from .gate_tables import short_condition

    parts = []
    for key in dict.fromkeys((s["model"], s["dataset"]) for s in series):
        mine = [s for s in series if (s["model"], s["dataset"]) == key]
        rows = []
        for s in mine:
            by_run = {p["run"]: p for p in s["points"]}
            values = [by_run.get(r, {}).get("relative_robustness") for r in runs]
            last = next((p for p in reversed(s["points"]) if p.get("worst_case")), None)
            family = s["family"] if len({m["suite"] for m in mine}) == 1 else f"{s['suite']}: {s['family']}"
            rows.append([printable(family), *(_cell(by_run.get(r)) for r in runs),
                         signed(s["change"]) if s["change"] is not None else "–", sparkline(values),
                         s["state"], printable(short_condition(last["worst_case"])) if last else "–"])
        parts.append(heading(f"{printable(key[0])} on {printable(key[1])}: relative robustness (accuracy) of each "
                             "family's worst case, run by run")
                     + tabulate(rows, headers=["family", *map(printable, runs), "change", "trend", "state",
                                               "worst case (last)"], tablefmt=tablefmt, disable_numparse=True))
    return "\n\n".join(parts)


def erosion_lines(series: list[dict]) -> list[str]:
    """One line per family whose robustness eroded (or is eroding) over the runs, saying when no gate caught it."""
    return [f"{s['state'].upper()}: {printable(s['model'])} on {printable(s['dataset'])}, {printable(s['family'])}: "
            "relative robustness "
            f"{signed(s['change'])} over {len(s['points'])} runs"
            + ("" if s["regressed_in_window"] else " while no run's gate found a regression in it")
            for s in series if s["state"] in ("eroded", "eroding")]


STATE_LEGEND = ("R: the gate found a regression in that family in that run. State: eroded = the last run is below "
                "the first\nby more than noise (the fall exceeds their interval half-widths in quadrature); eroding "
                "= it fell over 3 or\nmore runs, at more steps than it rose, by over half the noise; improved = above the first "
                "by more than noise;\nsteady = none of these.")
