"""The gate's comparisons as text for people: the side-by-side table of conditions (`comparison_rows` under
`comparison_headers`), its verdict cells, and the summary lines (power, memes needed, the saved baseline). They read
`judge.gate.summarize`'s rows and a baseline's record; they decide nothing.
"""
from __future__ import annotations

from ..judge.gate import POWER

NAN = float("nan")


def memes_needed_line(summary: dict) -> str | None:
    """`9 rules not shown non-inferior with 160 memes: about 1,900 memes would show them (median; 12,000 the most);
    2 cannot be shown at any number (their change is past the margin)`."""
    needed = summary.get("memes_needed") or {}
    if not needed.get("rules"):
        return None
    parts = []
    if needed["median"]:
        parts.append(f"about {needed['median']:,} memes would show them at their observed change (median; "
                     f"{needed['most']:,} the most)")
    if needed["never"]:
        parts.append(f"{needed['never']} cannot be shown with any number of memes (the change is past the margin)")
    return f"{needed['rules']} rules not shown non-inferior with {needed['memes']} memes: " + "; ".join(parts)


def power_line(summary: dict) -> str | None:
    """`at 80% power this run detects a worsening of about: accuracy 0.061, AUROC 0.083, flip rate 0.050`."""
    power = summary.get("power") or {}
    if not power:
        return None
    return (f"at {POWER:.0%} power this run detects a worsening of about (median over conditions): "
            + ", ".join(f"{what} {value:.3f}" for what, value in power.items()))


def comparison_headers() -> list[str]:
    """The decision first, so an 80-column CI log that crops a long row still shows it."""
    return ["verdict", "condition", "rule", "base → now", "Δ", "bound", "adj. p"]


VERDICT_CELLS = {"regressed": "REGRESSED", "no regression": "ok", "non-inferior": "ok",
                 "not shown non-inferior": "NOT SHOWN"}


def comparison_state(row: dict) -> str:
    """A comparison's decision (Comparison.as_dict), also from a report written before states were recorded."""
    return row.get("state") or ("regressed" if row.get("regressed") else "no regression")


def verdict_cell(row: dict) -> str:
    """A comparison's decision in a few letters: REGRESSED, NOT SHOWN (non-inferiority), ok, or not judged."""
    return VERDICT_CELLS.get(comparison_state(row), "not judged")


def comparison_rows(rows: list[dict], limit: int | None = None) -> list[list[str]]:
    """`summarize`'s rows (Comparison.as_dict) as table rows for `comparison_headers`, one per condition (its
    rule nearest to, or furthest past, failing) and at most `limit` of them (`comparison_conditions` counts
    them). With several models the condition is prefixed by the model (only its mode, `:text`, when every model is
    one detector's modes), with several datasets by the dataset."""
    chosen = _by_condition(rows)
    models = {r["model"] for r in chosen}
    one_detector = len({m.partition(":")[0] for m in models}) == 1
    several_data = len({r["dataset"] for r in chosen}) > 1

    def where(r):
        model = "" if len(models) == 1 else (r["model"].partition(":")[1] + r["model"].partition(":")[2]
                                             if one_detector else r["model"])
        return " ".join(filter(None, [model, r["dataset"] if several_data else "", short_condition(r["condition"])]))

    return [[verdict_cell(r), where(r), r["rule"], f"{r['before']:.3f} → {r['now']:.3f}", _signed(r["difference"]),
             _signed(r.get("bound", NAN)), _p(r["p_value"])] for r in chosen[:limit]]


def _p(value) -> str:
    return "-" if value is None or value != value else f"{value:.2g}"


def short_condition(condition_id: str) -> str:
    """A condition id without its modality prefixes, for narrow tables: `typos@3+uap@3`."""
    return "+".join(side.partition("=")[2] if side.startswith(("text=", "image=")) else side
                    for side in condition_id.split("+"))


def _signed(value: float, digits: int = 3) -> str:
    return "nan" if value != value else f"{value:+.{digits}f}".replace("-", "−")


def comparison_conditions(rows: list[dict]) -> int:
    return len(_by_condition(rows))


def _by_condition(rows: list[dict]) -> list[dict]:
    by_condition: dict[tuple, dict] = {}
    for r in rows:
        key = (r["model"], r["dataset"], r["condition"])
        if key not in by_condition or _worse_first(r) < _worse_first(by_condition[key]):
            by_condition[key] = r
    return list(by_condition.values())


def _worse_first(row: dict) -> tuple:
    """Failing before not, judged before not, then the nearest to (or furthest past) failing."""
    p = row.get("p_value")
    judged = p is not None and p == p
    toward = (p if row.get("mode") != "non-inferiority" else -p) if judged else float("inf")
    return (not row["regressed"], not judged, toward)


def count_conditions(data: dict) -> int:
    """How many conditions a baseline's record holds, over its models and datasets."""
    return sum(len(by_condition) for by_spec in data["results"].values() for by_condition in by_spec.values())


def baseline_saved_line(path, data: dict) -> str:
    """One line naming the file and what it holds, for the end of the run that saved it."""
    n = count_conditions(data)
    models, specs = list(data["results"]), list(data["datasets"])
    memes = sorted({len(cell["y"]) for by_spec in data["results"].values() for by_condition in by_spec.values()
                    for cell in by_condition.values()})
    return (f"memerobust: baseline saved to {path}: {n} condition{'s' * (n != 1)} of "
            f"{len(models)} model{'s' * (len(models) != 1)} ({', '.join(models)}) on {', '.join(specs) or '-'} "
            f"({'/'.join(map(str, memes)) or 0} memes), seed {data['seed']}")
