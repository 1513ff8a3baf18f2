"""The gate's comparisons as text for people: the side-by-side table of conditions (`comparison_rows` under
`comparison_headers`), its verdict cells, and the summary lines (power, memes needed, the saved baseline). They read
`judge.gate.summarize`'s rows and a baseline's record; they decide nothing.
"""
from __future__ import annotations

from ..judge.gate import POWER

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
    return (f"judged against the recipe's spread over {recipe['checkpoints']} checkpoints (seed-to-seed noise "
            f"x{recipe['inflation']:.2f} the memes' own)")


def gate_notes(summary: dict) -> list[str]:
    """The lines under the gate's summary every artifact prints (terminal, reports, `memerobust compare`): how it
    resampled, the recipe it judged against, its power, the memes needed; each a sentence."""
    lines = (method_line(summary), recipe_line(summary), power_line(summary), memes_needed_line(summary))
    return [line[0].upper() + line[1:] + "." for line in lines if line]


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


def baseline_saved_line(what: str, contents: dict) -> str:
    """`memerobust: baseline saved to b.json: 4 conditions of 1 model (demo) on demo (60 memes), seed 0` (`what`
    says what was done, `contents` is track/baseline.baseline_contents), naming the recipe's checkpoints when it
    holds several."""
    n, models, specs, k = contents["conditions"], contents["models"], contents["datasets"], contents["checkpoints"]
    return (f"memerobust: {what}: {n} condition{'s' * (n != 1)} of {len(models)} model{'s' * (len(models) != 1)} "
            f"({', '.join(models)}) on {', '.join(specs) or '-'} ({'/'.join(map(str, contents['memes'])) or 0} "
            f"memes), seed {contents['seed']}" + (f"; {k} checkpoints of one recipe" if k > 1 else ""))
