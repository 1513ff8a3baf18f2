"""The gate's comparisons as text for people: the side-by-side table of conditions (`comparison_rows` under
`comparison_headers`), its verdict cells, and the summary lines (power, memes needed, the saved baseline). They read
`judge.gate.summarize`'s rows and a baseline's record; they decide nothing.
"""
from __future__ import annotations

from ..judge.gate import POWER
from ..judge.recipes import FEWEST_SEEDS
from ..judge.thresholds import NO_LABELS as NOT_JUDGED_NO_LABELS
from .figures import NO_LABELS, unnumbered

NAN = float("nan")


def memes_needed_line(summary: dict) -> str | None:
    """`9 rules not shown non-inferior with 160 memes; memes needed for 80% power at their observed change: about
    1,900 (median; 12,000 the most); 2 cannot be shown at any number (their change is past the margin)`."""
    needed = summary.get("memes_needed") or {}
    if not needed.get("rules"):
        return None
    parts = []
    if needed["median"]:
        parts.append(f"memes needed for {POWER:.0%} power at their observed change: about {needed['median']:,} "
                     f"(median; {needed['most']:,} the most)")
    if needed["never"]:
        parts.append(f"{needed['never']} cannot be shown with any number of memes (the change is past the margin)")
    return f"{needed['rules']} rules not shown non-inferior with {needed['memes']} memes; " + "; ".join(parts)


def power_line(summary: dict) -> str | None:
    """`at 80% power this run detects a worsening of about: accuracy 0.061, AUROC 0.083, flip rate 0.050`."""
    power = summary.get("power") or {}
    if not power:
        return None
    return (f"at {POWER:.0%} power this run detects a worsening of about (median over conditions): "
            + ", ".join(f"{what} {value:.3f}" for what, value in power.items()))


METHOD_TEXTS = {"bootstrap": "the paired bootstrap of the memes",
                "permutation": "paired permutations (each meme's two outputs swapped by a coin, the same swap in "
                               "every condition)"}


def method_line(summary: dict) -> str | None:
    """`decided on 10,000 resamples: the paired bootstrap of the memes`: how the gate resampled for its decision
    (judge.gate.resampling_method; both where some datasets were small enough for permutations)."""
    if not summary.get("method"):
        return None
    methods = summary["method"].split(" and ")
    return (f"decided on {summary.get('resamples') or 0:,} resamples: "
            + " and ".join(METHOD_TEXTS.get(m, m) for m in methods))


def recipe_line(summary: dict) -> str | None:
    """`judged against the recipe's spread over 4 checkpoints (seed-to-seed noise x1.35 the memes' own)`, for a
    baseline of several checkpoints of one recipe; None otherwise."""
    recipe = summary.get("recipe")
    if not recipe:
        return None
    line = (f"judged against the recipe's spread over {recipe['checkpoints']} checkpoints (seed-to-seed noise "
            f"x{recipe['inflation']:.2f} the memes' own)")
    if recipe["checkpoints"] < FEWEST_SEEDS:
        line += (f"; warning: {recipe['checkpoints']} checkpoints cannot estimate a recipe's spread (it may sit at the "
                 f"floor, x1.00, and one of its own seeds then regress against the rest): add seeds up to "
                 f"{FEWEST_SEEDS} or more")
    return line


def gate_notes(summary: dict) -> list[str]:
    """The lines under the gate's summary every artifact prints (terminal, reports, `memerobust compare`): how it
    resampled, the recipe it judged against, its power, the memes needed; each a sentence."""
    lines = (method_line(summary), recipe_line(summary), power_line(summary), memes_needed_line(summary))
    return [line[0].upper() + line[1:] + "." for line in lines if line]


def comparison_headers() -> list[str]:
    """The decision first, so an 80-column CI log that crops a long row still shows it."""
    return ["verdict", "condition", "rule", "base → now", "Δ", "bound", "adj. p"]


VERDICT_CELLS = {"regressed": "REGRESSED", "no regression": "ok", "non-inferior": "ok",
                 "not shown non-inferior": "NOT SHOWN", "improved": "IMPROVED"}


def comparison_state(row: dict) -> str:
    """A comparison's decision (Comparison.as_dict), also from a report written before states were recorded."""
    return row.get("state") or ("regressed" if row.get("regressed") else "no regression")


def improved_only(row: dict) -> bool:
    """Whether a comparison improved beyond noise (the improvement family) and did not fail the gate."""
    return bool(row.get("improved")) and not row.get("regressed")


def shown_decision(row: dict) -> dict:
    """The comparison as a table shows it: an improved one (`improved_only`) with the improvement family's state,
    bound and p-values in place of the regression test's; any other as it is."""
    if not improved_only(row):
        return row
    return {**row, "state": "improved", "bound": row.get("improved_bound"), "p_raw": row.get("improved_p_raw"),
            "p_value": row.get("improved_p_value")}


def verdict_cell(row: dict) -> str:
    """A comparison's decision in a few letters: REGRESSED, NOT SHOWN (non-inferiority), IMPROVED, ok, or not
    judged."""
    return VERDICT_CELLS.get(comparison_state(shown_decision(row)), "not judged")


def comparison_rows(rows: list[dict], limit: int | None = None) -> list[list[str]]:
    """`summarize`'s rows (Comparison.as_dict) as table rows for `comparison_headers`, one per condition (its
    rule furthest past failing; where none failed its clearest improvement, with the improvement's bound and p; else
    its rule nearest to failing) and at most `limit` of them (`comparison_conditions` counts
    them). With several models the condition is prefixed by the model (only its mode, `:text`, when every model is
    one detector's modes), with several datasets by the dataset."""
    chosen = [shown_decision(r) for r in _by_condition(rows)]
    where = _placer(chosen)
    return [[verdict_cell(r), where(r), r["rule"], *([NO_LABELS] * 3 if r.get("state") == NOT_JUDGED_NO_LABELS else
                                                    [f"{r['before']:.3f} → {r['now']:.3f}", _signed(r["difference"]),
                                                     _signed(r.get("bound", NAN))]), _p(r["p_value"])]
            for r in chosen[:limit]]


def _placer(rows: list[dict]):
    """A function naming a row's condition for narrow tables and lists: prefixed by the model when `rows` hold
    several (only its mode, `:text`, when every model is one detector's modes), by the dataset when several."""
    models = {r["model"] for r in rows}
    one_detector = len({m.partition(":")[0] for m in models}) == 1
    several_data = len({r["dataset"] for r in rows}) > 1

    def where(r):
        model = "" if len(models) == 1 else (r["model"].partition(":")[1] + r["model"].partition(":")[2]
                                             if one_detector else r["model"])
        return " ".join(filter(None, [model, r["dataset"] if several_data else "", short_condition(r["condition"])]))

    return where


def change_line(row: dict, better: bool = False, where: str | None = None) -> str:
    """One comparison's decision in one direction as a line: `typos@3 accuracy 0.612 -> 0.701 (+0.089, improved;
    bound +0.031, adjusted p 0.002)` (`better`: the improvement family's decision and bound) or `... (-0.089,
    regressed; bound -0.031, ...)`; a rule with a minimum effect or margin says it (`, margin 0.010`)."""
    if better:
        state = "improved" if row.get("improved") else "not improved"
        bound, p = row.get("improved_bound"), row.get("improved_p_value")
        margin = 0.0 if row.get("mode") == "non-inferiority" else row.get("min_effect") or 0.0
    else:
        state, bound, p, margin = comparison_state(row), row.get("bound"), row.get("p_value"), row.get("min_effect")
    where = where or short_condition(row["condition"])
    return (f"{where} {row['what']} {_plain(row['before'])} -> {_plain(row['now'])} ({_plain(row['difference'], '+')}, "
            f"{state}; bound {_plain(bound, '+')}" + (f", margin {margin:.3f}" if margin else "")
            + f", adjusted p {_p(p)})")


def _plain(value, sign: str = "") -> str:
    return unnumbered(value) or f"{value:{sign}.3f}"


LISTED = 12  # rules a terminal lists per direction (regressed, improved); every one is in the JSON


def change_list_lines(summary: dict, limit: int | None = LISTED) -> list[str]:
    """The lines a terminal prints under the gate's summary line: the improvement family's summary line, then each
    non-empty list of `change_lists` under its title, indented."""
    lines = [summary["improved_summary"]] if summary.get("improved_summary") else []
    for title, listed in change_lists(summary, limit):
        if listed:
            lines += [f"{title}:", *(f"  {line}" for line in listed)]
    return lines


def change_lists(summary: dict, limit: int | None = None) -> list[tuple[str, list[str]]]:
    """The gate's two lists, each as (title, lines): what failed it (regressed, or not shown non-inferior) and what
    improved beyond noise (`summarize`'s `improvements`), every rule of each, at most `limit` lines and a last line
    saying how many more."""
    failing = [r for r in summary.get("rows") or [] if r.get("regressed")]
    improved = list(summary.get("improvements") or [])
    where = _placer(failing + improved)
    verb = "not shown non-inferior" if summary.get("mode") == "non-inferiority" else "regressed"
    lists = []
    for title, rows, better in ((verb, failing, False), ("improved", improved, True)):
        lines = [change_line(r, better, where(r)) for r in rows[:limit]]
        if limit is not None and len(rows) > limit:
            lines.append(f"... and {len(rows) - limit} more (every comparison is in the JSON)")
        lists.append((f"{title.capitalize()} ({len(rows)} rule{'s' * (len(rows) != 1)})", lines))
    return lists


def _p(value) -> str:
    return "-" if value is None or value != value else f"{value:.2g}"


def short_condition(condition_id: str) -> str:
    """A condition id without its modality prefixes, for narrow tables: `typos@3+uap@3`."""
    return "+".join(side.partition("=")[2] if side.startswith(("text=", "image=")) else side
                    for side in condition_id.split("+"))


def _signed(value: float, digits: int = 3) -> str:
    return unnumbered(value) or f"{value:+.{digits}f}".replace("-", "−")


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
    """Failing before not, improved before not (the clearest improvement first), judged before not, then the
    nearest to (or furthest past) failing."""
    if improved_only(row):
        return (True, False, False, row.get("improved_p_value", 0.0))
    p = row.get("p_value")
    judged = p is not None and p == p
    toward = (p if row.get("mode") != "non-inferiority" else -p) if judged else float("inf")
    return (not row["regressed"], True, not judged, toward)


def baseline_saved_line(what: str, contents: dict) -> str:
    """`memerobust: baseline saved to b.json: 4 conditions of 1 model (demo) on demo (60 memes), seed 0` (`what`
    says what was done, `contents` is track/baseline.baseline_contents), naming the recipe's checkpoints when it
    holds several."""
    n, models, specs, k = contents["conditions"], contents["models"], contents["datasets"], contents["checkpoints"]
    return (f"memerobust: {what}: {n} condition{'s' * (n != 1)} of {len(models)} model{'s' * (len(models) != 1)} "
            f"({', '.join(models)}) on {', '.join(specs) or '-'} ({'/'.join(map(str, contents['memes'])) or 0} "
            f"memes), seed {contents['seed']}" + (f"; {k} checkpoints of one recipe" if k > 1 else ""))
