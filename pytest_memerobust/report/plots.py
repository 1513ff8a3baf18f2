"""Figures of a report, for readers who would rather look than read tables: robustness curves (a metric against
severity, one line per perturbation, its interval as a band), the evasion curves of the budgets, the abstention
shares of prompted models, and the trend of each family across a run history.

Each figure is first its data (`curves_data`, `evasion_data`, `abstention_data`, `trend_data`: pure functions of the
report dicts, what a test checks), then drawn with matplotlib into SVG text (inline in the HTML) or PNG bytes
(`memerobust plot`). matplotlib is imported inside the functions, so importing the package stays fast; figures are
built on `matplotlib.figure.Figure` directly (no pyplot state: headless, any thread) under one lock, because the
SVG writer reads its id salt and font handling from the global rcParams. The same report gives the same bytes on
every run: the ids are salted with the figure's name, no date is written, and matplotlib's defaults replace the
user's matplotlibrc while a figure is drawn. Like every renderer, these figures read numbers and verdicts; they
compute neither."""
from __future__ import annotations

import io
import math
import re
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field

from .outline import PALETTE, case_of, cases_by_group, confidence_level, short_title, slug, verdict_of
from .tables import metric_text

__all__ = ["Plot", "abstention_data", "curves_data", "evasion_data", "group_plots", "budget_plot", "report_plots",
           "trend_chart", "trend_data", "trend_plot", "to_png", "to_svg", "write_plots", "figure", "FIGURE_NAMES",
           "FORMATS"]

FORMATS = ("png", "svg")
FIGURE_NAMES = {"curves": "robustness curves", "abstention": "abstention shares", "evasion": "evasion curves",
                "trend": "trend across runs"}
METRIC_LABELS = {"accuracy": "accuracy", "auroc": "AUROC", "macro_f1": "macro-F1"}
FAILING = ("fail for sure", "fail within noise")  # verdicts ringed on the curves, worst first
LINES_PER_PANEL = 3  # curves that share a panel; their bands still read apart
HIGHLIGHTED = 6  # trend lines drawn in colour (the most eroded); the others stay grey behind them
_COLUMNS = 4  # panels per row of a small-multiples figure
_PNG_DPI = 110


@dataclass(frozen=True)
class Plot:
    """One figure: `name` (a file name without suffix, unique in its report), `title`, `caption` (how to read it,
    for the page beside it), `kind` (which drawer), and `data` (what is drawn, JSON-like)."""

    name: str
    title: str
    caption: str
    kind: str
    data: dict = field(repr=False)


def _number(value) -> float:
    """A report's number as a float: NaN for None, a missing key, "inf" written as text or anything else."""
    if isinstance(value, bool) or value is None:
        return math.nan
    if isinstance(value, (int, float)):
        return float(value)
    if value in ("inf", "Infinity"):
        return math.inf
    return math.nan


def _interval(pair) -> tuple[float, float]:
    if isinstance(pair, (list, tuple)) and len(pair) == 2:
        return _number(pair[0]), _number(pair[1])
    return math.nan, math.nan


# --- the data of each figure -----------------------------------------------------------------------------------


def curves_data(group: dict, cases: list[dict] = (), metric: str = "accuracy") -> dict | None:
    """Per perturbation family (as the run's case records name it; the perturbation's own name without them) a panel
    with one line per single-channel perturbation with severities: its `metric` and interval at each severity, and
    the verdict of each point's case (a family of more than LINES_PER_PANEL perturbations: a panel per perturbation).
    None when no perturbation of the group has a severity. `relative_axis`: every condition was
    scored on the same memes as the clean row, so perturbed / clean (the relative robustness) is a second axis."""
    clean = group["clean"]
    clean_value = _number(clean["metrics"].get(metric))
    panels: dict[tuple[str, str], dict[str, dict]] = {}
    same_memes = True
    for row in group["results"]:
        kind = row.get("kind")
        if kind not in ("text", "image") or row.get(f"{kind}_severity") is None:
            continue
        name, severity = row[kind], row[f"{kind}_severity"]
        case = case_of(list(cases), row["condition"]) if cases else None
        family = (case or {}).get("family") or name
        lo, hi = _interval((row.get("metrics_ci") or {}).get(metric))
        line = panels.setdefault((kind, family), {}).setdefault(name, {"name": name, "points": []})
        line["points"].append((int(severity), _number(row["metrics"].get(metric)), lo, hi, verdict_of(case)))
        row_clean = _number((row.get("clean_metrics") or {}).get(metric))
        same_memes &= not (row_clean == row_clean) or abs(row_clean - clean_value) <= 1e-12
    out = []
    for kind in ("text", "image"):  # the caption's perturbations first, as the tables
        for (k, family), lines in panels.items():
            if k != kind:
                continue
            drawn = []
            for line in lines.values():
                points = sorted(line["points"])
                if not any(p[1] == p[1] for p in points):  # declined every meme: nothing to draw (the tables say so)
                    continue
                drawn.append({"name": line["name"], "severity": [p[0] for p in points],
                              "value": [p[1] for p in points], "lo": [p[2] for p in points],
                              "hi": [p[3] for p in points], "verdict": [p[4] for p in points]})
            if not drawn:
                continue
            if len(drawn) <= LINES_PER_PANEL:
                out.append({"family": family, "title": family, "modality": kind, "lines": drawn})
            else:  # bands of more lines than that overlap into one blur: a panel each
                out += [{"family": family, "title": f"{family}: {line['name']}", "modality": kind, "lines": [line]}
                        for line in drawn]
    if not out:
        return None
    return {"metric": metric, "metric_label": METRIC_LABELS.get(metric, metric), "clean": clean_value,
            "clean_text": metric_text(clean, clean_value),
            "clean_ci": list(_interval((clean.get("metrics_ci") or {}).get(metric))), "panels": out,
            "relative_axis": bool(same_memes and clean_value > 0)}


def abstention_data(group: dict) -> dict | None:
    """Per condition of a prompted model (the clean one first), the share of memes it declined, and the interval
    of its increase over clean (paired over the same memes) drawn from the clean share; None when the model never
    declines (no abstention rate recorded)."""
    clean = group["clean"]
    rate = _number(clean.get("abstention_rate"))
    if rate != rate:
        return None
    bars = [{"condition": "clean", "rate": rate, "lo": math.nan, "hi": math.nan}]
    for row in group["results"]:
        value = _number(row.get("abstention_rate"))
        if value != value:
            continue
        lo, hi = _interval(row.get("abstention_increase_ci"))
        bars.append({"condition": row["condition"], "rate": value, "lo": rate + lo, "hi": rate + hi})
    return {"clean": rate, "bars": bars}


def evasion_data(entry: dict) -> dict | None:
    """Per edit family of one budgets entry (judge/budgets.py's summaries): the share of the searched harmful memes
    evaded within each budget level, with its interval; None without families."""
    panels = []
    for e in entry.get("entries") or []:
        levels = [_number(v) for v in e.get("levels") or []]
        if not levels:
            continue
        intervals = [_interval(pair) for pair in e.get("curve_ci") or [[None, None]] * len(levels)]
        panels.append({"family": e["family"], "unit": e.get("unit", ""), "levels": levels,
                       "curve": [_number(v) for v in e.get("curve") or []], "lo": [i[0] for i in intervals],
                       "hi": [i[1] for i in intervals], "n": int(e.get("n") or 0),
                       "n_censored": int(e.get("n_censored") or 0), "median_text": e.get("median_text")})
    return {"panels": panels} if panels else None


STATE_ORDER = ("eroded", "eroding", "improved", "steady")  # judge/trend.py's states, the ones to look at first


def trend_data(entries: list[dict]) -> dict | None:
    """From run-history entries (oldest first; report/history.py writes them) the series of judge/trend.py: per
    (model, dataset, suite, family) the relative robustness of its worst case in each run with its interval (NaN
    where the run lacks it), whether the gate found a regression in it there, and its trend state; and the runs
    whose gate regressed. Series are ordered by state (eroded first), then by change (the largest fall first); the
    first HIGHLIGHTED are `highlight`ed, only those that moved (not steady) when any did and there are more
    series than that. None without families."""
    from ..judge.trend import trend_series

    entries = [e for e in entries if isinstance(e, dict)]
    at = {(e.get("run"), e.get("date")): k for k, e in enumerate(entries)}  # a commit may run twice: date too
    series = trend_series(entries)
    if not series:
        return None
    lines = []
    for s in series:
        n = len(entries)
        line = {"model": s["model"], "dataset": s["dataset"], "suite": s["suite"], "family": s["family"],
                "state": s["state"], "change": s["change"], "values": [math.nan] * n, "lo": [math.nan] * n,
                "hi": [math.nan] * n, "regressed": [False] * n}
        for p in s["points"]:
            k = at[(p["run"], p["date"])]
            line["values"][k] = _number(p.get("relative_robustness"))
            line["lo"][k], line["hi"][k] = _interval(p.get("relative_robustness_ci"))
            line["regressed"][k] = bool(p.get("regressed"))
        lines.append(line)
    rank = {state: k for k, state in enumerate(STATE_ORDER)}
    lines.sort(key=lambda line: (rank.get(line["state"], len(rank)), math.inf if line["change"] is None
                                 else line["change"]))
    several = {part: len({line[part] for line in lines}) > 1 for part in ("model", "dataset", "suite")}
    moving = sum(line["state"] != "steady" for line in lines)
    coloured = HIGHLIGHTED if len(lines) <= HIGHLIGHTED or not moving else min(HIGHLIGHTED, moving)
    for k, line in enumerate(lines):
        where = [str(line[part]) for part in ("model", "dataset", "suite") if several[part] and line[part]]
        line["label"] = (" · ".join(where) + ": " if where else "") + f"{line['family']} ({line['state']})"
        line["highlight"] = k < coloured
    return {"runs": [str(e.get("run") or e.get("date") or k + 1) for k, e in enumerate(entries)],
            "regressed_runs": [k for k, e in enumerate(entries) if e.get("regressed")], "lines": lines}


# --- the figures of a report -----------------------------------------------------------------------------------


def group_plots(group: dict, cases: list[dict] = (), level: str = "95%", taken: set[str] | None = None) -> list[Plot]:
    """The figures of one (model, dataset, suite) group: its robustness curves and, for a prompted model, its
    abstention shares. `taken`: file names already used (joined)."""
    title = short_title(group)
    out = []
    curves = curves_data(group, cases)
    if curves:
        right = " (right axis: relative robustness, perturbed / clean)" if curves["relative_axis"] else ""
        ringed = any(v in FAILING for p in curves["panels"] for line in p["lines"] for v in line["verdict"])
        out.append(Plot(
            slug(f"curves {title}", taken), f"{title}: {curves['metric_label']} against severity",
            f"Robustness curves: {curves['metric_label']} at each severity, one panel per perturbation family and "
            f"one line per perturbation; the shaded band is its {level} paired bootstrap interval, the dashed line "
            f"the clean {curves['metric_label']}{right}. A curve falling away from the dashed line as severity "
            "grows is a perturbation the detector does not withstand"
            + ("; a ring marks a case that fails (red: for sure, amber: within noise)." if ringed else "."),
            "curves", {**curves, "title": f"{title}: {curves['metric_label']} against severity", "level": level}))
    abstentions = abstention_data(group)
    if abstentions:
        out.append(Plot(
            slug(f"abstentions {title}", taken), f"{title}: share of memes declined",
            f"Abstention shares: per condition, the share of memes the model declined to classify (a refusal or a "
            f"reply without its label words); the dashed line is the clean share, the whisker the {level} paired "
            "interval of the increase over clean drawn from the clean share: a whisker clear of the dashed line "
            "declines more (or less) often than clean beyond noise.",
            "abstention", {**abstentions, "title": f"{title}: share of memes declined", "level": level}))
    return out


def budget_plot(entry: dict, taken: set[str] | None = None) -> Plot | None:
    """The evasion curves of one budgets entry (one model on one dataset)."""
    data = evasion_data(entry)
    if data is None:
        return None
    who = f"{entry.get('label', entry.get('model'))} on {entry.get('dataset')}"
    confidence = next((e.get("confidence") for e in entry.get("entries") or [] if e.get("confidence")), 0.95)
    return Plot(slug(f"evasion {who}", taken), f"Evasion budgets: {who}",
                "Evasion curves: per edit family, the share of the harmful memes the detector flags when clean that "
                "an edit of at most that budget gets past it (1: every meme evaded); the band is its "
                f"{confidence:.0%} bootstrap interval over memes. A curve rising early means small edits suffice.",
                "evasion", {**data, "title": f"Evasion budgets: {who}"})


def trend_plot(entries: list[dict]) -> Plot | None:
    """The trend chart of a run history (oldest run first); None before it holds two runs (nothing to compare)."""
    if len(entries) < 2:
        return None
    data = trend_data(entries)
    if data is None:
        return None
    shown = sum(line["highlight"] for line in data["lines"])
    rest = len(data["lines"]) - shown
    return Plot("trend", "Relative robustness across runs",
                "Trend: per perturbation family, the relative robustness of accuracy (perturbed / clean) of its "
                "worst case in each run, oldest run left, with its interval as a whisker; in colour the "
                f"{shown} families to look at first (eroded, then eroding, improved, then the largest fall)"
                + (f", the other {rest} in grey" if rest else "") + ". Eroded: the last run is below the first by "
                "more than noise, even if every step passed its gate. A red cross marks a family the regression "
                "gate flagged in that run; a shaded column, a run whose gate found a regression.",
                "trend", {**data, "title": "Relative robustness of each family's worst case across runs"})


def report_plots(report: dict) -> list[Plot]:
    """Every figure of a saved report, in the report's order: the run history's trend (with --memerobust-history),
    per group its curves and abstention shares, then the evasion curves of each budgets entry."""
    taken: set[str] = {"trend"}
    level = confidence_level(report)
    trend = trend_plot((report.get("history") or {}).get("entries") or [])
    out = [trend] if trend else []  # the run history's trend first, as the reports show it
    for group, cases in zip(report.get("groups") or [], cases_by_group(report)):
        out += group_plots(group, cases, level, taken)
    for entry in report.get("budgets") or []:
        plot = budget_plot(entry, taken)
        if plot:
            out.append(plot)
    return out


def trend_chart(entries: list[dict], format: str = "svg") -> str | bytes | None:
    """The trend chart of a run history as SVG text to inline in an HTML page, or PNG bytes; None when no entry has
    families. (report/html.figure(trend_plot(entries)) gives it with its caption.)"""
    plot = trend_plot(entries)
    if plot is None:
        return None
    return to_svg(plot, inline=True) if format == "svg" else to_png(plot)


# --- drawing -----------------------------------------------------------------------------------------------------

_LOCK = threading.Lock()  # the SVG writer reads rcParams while it writes: one figure at a time
_RC = {"svg.fonttype": "none",  # text stays text: a tenth of the size of glyph outlines, selectable, searchable
       "font.family": "sans-serif", "font.sans-serif": ["DejaVu Sans"],  # (matplotlib's own font: the PNGs are the
       # same on every machine; a browser without it falls back to its sans-serif)
       "font.size": 9, "axes.titlesize": 9, "axes.labelsize": 8.5, "xtick.labelsize": 8, "ytick.labelsize": 8,
       "legend.fontsize": 7.5, "legend.frameon": False, "axes.spines.top": False, "axes.spines.right": False,
       "axes.grid": True, "axes.grid.axis": "y", "grid.color": "#e3e6ea", "grid.linewidth": 0.6, "lines.linewidth": 1.6,
       "lines.markersize": 4.5, "figure.constrained_layout.use": True}


def _palette() -> dict[str, str]:
    return {verdict: strong for verdict, (strong, _) in PALETTE.items()}


def _grid(fig, n: int, columns: int = _COLUMNS, sharey: bool = True):
    """n panels in rows of `columns` (fewer when n is smaller); the spare cells hidden. Returns the used axes."""
    cols = max(1, min(columns, n))
    rows = math.ceil(n / cols)
    axes = fig.subplots(rows, cols, sharey=sharey, squeeze=False)
    flat = [ax for row in axes for ax in row]
    for ax in flat[n:]:
        ax.set_visible(False)
    return flat[:n], cols


def _figsize(n: int, width: float = 2.2, height: float = 1.85, extra: float = 0.8) -> tuple[float, float]:
    """Inches for n panels: four columns come to about 9.3 in, 890 CSS px, the width of the HTML page's text, so a
    figure is shown at its own size (its 8 pt labels stay 8 pt) rather than scaled down."""
    cols = max(1, min(_COLUMNS, n))
    return (max(5.6, width * cols + 0.5), height * math.ceil(n / cols) + extra + (0.25 if cols <= 2 else 0))


def _draw_curves(fig, data: dict) -> None:
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    panels, clean = data["panels"], data["clean"]
    axes, cols = _grid(fig, len(panels))
    colours = _palette()
    values = [v for p in panels for line in p["lines"] for key in ("value", "lo", "hi") for v in line[key] if v == v]
    values += [clean] if clean == clean else []
    low, high = (min(values), max(values)) if values else (0.0, 1.0)
    pad = max(0.02, 0.06 * (high - low))
    for k, (ax, panel) in enumerate(zip(axes, panels)):
        severities = sorted({s for line in panel["lines"] for s in line["severity"]})
        for j, line in enumerate(panel["lines"]):
            colour = f"C{j % 10}"
            x = line["severity"]
            ax.fill_between(x, line["lo"], line["hi"], color=colour, alpha=0.18, linewidth=0)
            if len(x) == 1:  # a band needs two severities: a whisker says the same for one
                ax.vlines(x, line["lo"], line["hi"], color=colour, linewidth=1.2)
            ax.plot(x, line["value"], marker="o", color=colour, label=line["name"])
            for verdict in FAILING:
                ringed = [(s, v) for s, v, w in zip(x, line["value"], line["verdict"]) if w == verdict and v == v]
                if ringed:
                    ax.scatter(*zip(*ringed), s=70, facecolors="none", edgecolors=colours[verdict], linewidths=1.5,
                               zorder=3)
        if clean == clean:
            ax.axhline(clean, color="#57606a", linestyle="--", linewidth=1)
        ax.set_xticks(severities)
        ax.set_xlim(min(severities) - 0.4, max(severities) + 0.4)
        ax.set_title(f"{panel['title']} · {panel['modality']}", loc="left")
        if len(panel["lines"]) > 1 or not panel["title"].endswith(panel["lines"][0]["name"]):  # else the title says
            ax.legend(loc="lower left", handlelength=1.4, borderaxespad=0.2)
        if k % cols == 0:
            ax.set_ylabel(data["metric_label"])
        if k >= len(panels) - cols:
            ax.set_xlabel("severity")
        if data["relative_axis"] and k % cols == cols - 1:  # (on the last column only: the columns stay aligned)
            right = ax.secondary_yaxis("right", functions=(lambda y: y / clean, lambda r: r * clean))
            right.set_ylabel("relative robustness", fontsize=7.5)
            right.tick_params(labelsize=7)
    axes[0].set_ylim(max(0.0, low - pad), min(1.0, high + pad) if high <= 1 else high + pad)
    handles = [Line2D([], [], color="#57606a", linestyle="--", linewidth=1,
                      label=f"clean {data['metric_label']} {data['clean_text']}"),
               Patch(color="#8c959f", alpha=0.35, label=f"{data['level']} interval")]
    handles += [Line2D([], [], linestyle="none", marker="o", markersize=8, markerfacecolor="none",
                       markeredgecolor=colours[v], markeredgewidth=1.5, label=f"case: {v}")
                for v in FAILING if any(v in line["verdict"] for p in panels for line in p["lines"])]
    fig.suptitle(data["title"], fontsize=10, x=0.01, ha="left")
    fig.legend(handles=handles, loc="outside lower center", ncols=len(handles) if cols > 2 else 2, fontsize=8)


def _draw_abstentions(fig, data: dict) -> None:
    from .gate_tables import short_condition

    bars = data["bars"]
    ax = fig.subplots()
    y = list(range(len(bars)))
    ax.barh(y, [b["rate"] for b in bars], color=["#8c959f"] + ["#0b57d0"] * (len(bars) - 1), height=0.62)
    for k, b in enumerate(bars):
        if b["lo"] == b["lo"] and b["hi"] == b["hi"]:
            ax.hlines(k, max(0.0, b["lo"]), min(1.0, b["hi"]), color="#111111", linewidth=1.4)
        right = max(v for v in (b["rate"], b["hi"]) if v == v) if b["rate"] == b["rate"] else 0.0
        ax.text(min(right, 1.0) + 0.01, k, f"{b['rate']:.3f}", va="center", fontsize=7.5)  # past the whisker
    ax.axvline(data["clean"], color="#57606a", linestyle="--", linewidth=1)
    ax.set_yticks(y, [short_condition(b["condition"]) for b in bars])
    ax.invert_yaxis()
    ax.set_xlim(0, 1.08)
    ax.set_xlabel(f"share of memes declined (whisker: {data['level']} interval)")
    ax.grid(axis="y", visible=False)
    fig.suptitle(data["title"], fontsize=10, x=0.01, ha="left")


def _draw_evasion(fig, data: dict) -> None:
    panels = data["panels"]
    axes, cols = _grid(fig, len(panels))
    for k, (ax, p) in enumerate(zip(axes, panels)):
        x = p["levels"]
        ax.fill_between(x, p["lo"], p["hi"], step="post", color="C3", alpha=0.18, linewidth=0)
        ax.step(x, p["curve"], where="post", color="C3", marker="o")
        if len(x) > 2 and x[0] > 0 and x[-1] / x[0] > 10:  # doubling levels (1..32 / 255): even steps
            ax.set_xscale("log", base=2)
        ax.set_xticks(x, [f"{v:g}" for v in x])
        ax.minorticks_off()
        ax.set_title(f"{p['family']} (n={p['n']})", loc="left")
        ax.set_xlabel(f"budget ({p['unit']})" if p["unit"] else "budget")
        if k % cols == 0:
            ax.set_ylabel("share evaded")
    axes[0].set_ylim(-0.03, 1.03)
    fig.suptitle(data["title"], fontsize=10, x=0.01, ha="left")


def _draw_trend(fig, data: dict) -> None:
    ax = fig.subplots()
    runs, lines = data["runs"], data["lines"]
    x = list(range(len(runs)))
    for k in data["regressed_runs"]:
        ax.axvspan(k - 0.4, k + 0.4, color="#ffd6d3", alpha=0.6, linewidth=0)
    others = [line for line in lines if not line["highlight"]]
    for line in reversed(others):  # the others first, grey, beneath
        ax.plot(x, line["values"], color="#b8bec6", linewidth=0.9, marker="o", markersize=2.5)
    shown = [line for line in lines if line["highlight"]]
    regressed = []
    for j, line in enumerate(shown):
        dodge = [k + (j - (len(shown) - 1) / 2) * 0.06 for k in x]  # whiskers side by side, not on one another
        colour = f"C{j % 10}"
        ax.vlines(dodge, line["lo"], line["hi"], color=colour, linewidth=1, alpha=0.55)
        ax.plot(dodge, line["values"], color=colour, marker="o", label=line["label"])
        regressed += [(d, v) for d, v, r in zip(dodge, line["values"], line["regressed"]) if r and v == v]
    if others:
        ax.plot([], [], color="#b8bec6", linewidth=0.9, marker="o", markersize=2.5,
                label=f"{len(others)} other {'family' if len(others) == 1 else 'families'}")
    regressed += [(k, v) for line in others for k, (v, r) in enumerate(zip(line["values"], line["regressed"]))
                  if r and v == v]
    if regressed:
        ax.scatter(*zip(*regressed), marker="x", s=55, color="#c62828", linewidths=2, zorder=4,
                   label="gate: regressed there")
    ax.axhline(1.0, color="#57606a", linestyle="--", linewidth=1)
    long = max((len(r) for r in runs), default=0) > 10 or len(runs) > 8
    ax.set_xticks(x, runs, rotation=30 if long else 0, ha="right" if long else "center")
    ax.set_xlim(-0.5, len(runs) - 0.5)
    ax.set_xlabel("run (oldest first)")
    ax.set_ylabel("relative robustness (worst case)")
    fig.legend(loc="outside right upper", fontsize=7.5)
    fig.suptitle(data["title"], fontsize=10, x=0.01, ha="left")


_DRAWERS = {"curves": _draw_curves, "abstention": _draw_abstentions, "evasion": _draw_evasion, "trend": _draw_trend}


def _size(plot: Plot) -> tuple[float, float]:
    data = plot.data
    if plot.kind == "curves":
        return _figsize(len(data["panels"]), extra=0.95)
    if plot.kind == "evasion":
        return _figsize(len(data["panels"]), height=2.1, extra=0.5)
    if plot.kind == "abstention":
        return (7.0, 0.9 + 0.24 * len(data["bars"]))
    return (8.0, 3.6)


@contextmanager
def _style(plot: Plot):
    """matplotlib's defaults (not the user's matplotlibrc) with the house settings, and ids salted with the figure's
    name: the same bytes on every run, and ids that do not collide between the figures of one page. Held under the
    lock: the rcParams are the process's."""
    import matplotlib.style

    with _LOCK, matplotlib.style.context(["default", {**_RC, "svg.hashsalt": f"memerobust-{plot.name}"}]):
        yield


def _figure(plot: Plot):
    from matplotlib.figure import Figure

    fig = Figure(figsize=_size(plot))
    _DRAWERS[plot.kind](fig, plot.data)
    return fig


def figure(plot: Plot):
    """The figure as a matplotlib Figure (no pyplot): to inspect what is drawn, or to save it in another format."""
    with _style(plot):
        return _figure(plot)


def _render(plot: Plot, format: str) -> bytes:
    if format not in FORMATS:
        raise ValueError(f"unknown figure format {format!r}; use one of {', '.join(FORMATS)}")
    buffer = io.BytesIO()
    with _style(plot):
        fig = _figure(plot)
        if format == "svg":
            fig.savefig(buffer, format="svg", metadata={"Title": plot.title, "Date": None, "Creator": None,
                                                         "Format": None, "Type": None})
        else:
            fig.savefig(buffer, format="png", dpi=_PNG_DPI, metadata={"Software": None})
    return buffer.getvalue()


_XML_HEAD = re.compile(r"^.*?(?=<svg)", re.S)
_GLOBAL_STYLE = re.compile(r"<defs>\s*<style type=\"text/css\">\*\{([^}]*)\}</style>\s*</defs>")
_GROUP_ID = re.compile(r'(<g) id="[^"]*"')
_METADATA = re.compile(r"<metadata>.*?</metadata>", re.S)
_NO_ROTATION = re.compile(r' transform="rotate\(-?0 [^"]*\)"')
_ATTRIBUTE = re.compile(r'="[^"]*"')
_DIGITS = re.compile(r"(\d\.\d\d)\d+")


def to_svg(plot: Plot, inline: bool = False) -> str:
    """The figure as an `<svg>` document, fit to put inline in an HTML page too: no XML prolog or doctype;
    matplotlib's page-wide `*{...}` style moved onto the element (inline, it would restyle every SVG of the page); no
    ids on groups (matplotlib numbers them from 1 in every figure: duplicates on a page); and, together 60% smaller,
    no line breaks in path data, coordinates to a hundredth of a point, no RDF metadata, no null rotations, no empty
    groups. The `<title>` names the figure for screen readers. `inline`: without the xlink namespace declaration,
    which HTML's parser supplies itself (the page then names no http:// address but the SVG namespace)."""
    text = _render(plot, "svg").decode("utf-8")
    text = _XML_HEAD.sub("", text, count=1)
    text = _METADATA.sub("", text, count=1)
    text = _NO_ROTATION.sub("", text)
    text = _ATTRIBUTE.sub(lambda m: _DIGITS.sub(r"\1", m.group(0)), text)  # inside attributes: never a label
    style = _GLOBAL_STYLE.search(text)
    if style:
        text = _GLOBAL_STYLE.sub("", text, count=1)
        text = text.replace("<svg ", f'<svg style="{style.group(1).strip()}" ', 1)
    text = _GROUP_ID.sub(r"\1", text)
    if inline:
        text = text.replace(' xmlns:xlink="http://www.w3.org/1999/xlink"', "", 1)
    text = re.sub(r" ?\n\s*", " ", text)  # path data's line breaks and the indentation between elements
    return _bare_groups_dropped(re.sub(r">\s+<", "><", text).strip()) + "\n"


def _bare_groups_dropped(text: str) -> str:
    """Without the `<g>` elements that have no attributes (and their `</g>`): they group nothing that is styled."""
    out, start, bare = [], 0, []
    for tag in re.finditer(r"<g>|<g\s[^>]*>|</g>", text):
        if tag.group(0) == "</g>":
            drop = bare.pop()
        else:
            drop = tag.group(0) == "<g>"
            bare.append(drop)
        if drop:
            out.append(text[start:tag.start()])
            start = tag.end()
    return "".join(out) + text[start:]


def to_png(plot: Plot) -> bytes:
    """The figure as PNG bytes (no software tag or date: the same bytes on every run)."""
    return _render(plot, "png")


def write_plots(plots: list[Plot], out, format: str = "png") -> list:
    """Each figure drawn, then written to `out` (a folder, made if missing) as NAME.png or NAME.svg (a whole `<svg>`
    document, as inline); all are drawn before the first is written, so a figure that fails leaves nothing."""
    from pathlib import Path

    from ..atomic import atomic_path

    if format not in FORMATS:
        raise ValueError(f"unknown figure format {format!r}; use one of {', '.join(FORMATS)}")
    drawn = [(plot, to_png(plot) if format == "png" else to_svg(plot).encode("utf-8")) for plot in plots]
    paths = []
    for plot, data in drawn:
        path = Path(out) / f"{plot.name}.{format}"
        with atomic_path(path) as tmp:
            tmp.write_bytes(data)
        paths.append(path)
    return paths
