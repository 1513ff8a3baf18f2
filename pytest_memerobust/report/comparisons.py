"""Recipe and detector comparisons as text for people (`memerobust compare --recipe`, `memerobust compare` of
detectors, a run's verdict with several models): they read judge/recipes.py's and judge/detectors.py's comparisons
and decide nothing."""
from __future__ import annotations

from tabulate import tabulate

from .gate_tables import _p, _signed, short_condition
from .figures import unnumbered

NAN = float("nan")


def _number(value: float) -> str:
    return unnumbered(value) or f"{value:.3f}"


def _interval(c) -> str:
    return f"[{_signed(c.scores.low)}, {_signed(c.scores.high)}]"


def _recipe_state(c) -> str:
    if not c.judged:
        return "not judged"
    return "B WORSE" if c.decision.regressed else "B BETTER" if c.improvement.improved else "no difference"


def recipe_rows(comparisons) -> list[list[str]]:
    """Every family mean, clean and every condition with a decision, one row per rule; the others are in the JSON."""
    shown = [c for c in comparisons if c.subject.members or c.subject.condition == "clean" or c.decision.regressed
             or c.improvement.improved or not c.judged]
    return [[_recipe_state(c), short_condition(c.subject.condition), c.subject.rule,
             f"{_number(c.scores.before)} → {_number(c.scores.now)}", _signed(c.difference), _interval(c),
             _p(toward_p(c.as_dict())), _number(c.power.detectable)] for c in shown]


def count_lines(comparisons, worse: str, better: str) -> list[str]:
    """`0 of 7 conditions and 0 of 2 family means B worse ... (clean did not)`, then the same for better."""
    from ..judge.gate import _count_line

    conditions = list(dict.fromkeys(c.subject.case for c in comparisons if not c.subject.members))
    means = list(dict.fromkeys(c.subject.case for c in comparisons if c.subject.members))
    lines = []
    for verb, found in ((worse, [c.subject.case for c in comparisons if c.decision.regressed]),
                        (better, [c.subject.case for c in comparisons if c.improvement.improved])):
        lines.append(_count_line(list(dict.fromkeys(found)), conditions, means, verb))
    return lines


def power_clause(summary: dict) -> str:
    power = summary.get("power") or {}
    return ", ".join(f"{what} {value:.3f}" for what, value in power.items())


def recipe_lines(paths, seeds, comparisons, summary: dict, control, warnings) -> list[str]:
    """What `memerobust compare --recipe` prints: the arms, the method, the warnings, the table, both counts and the
    power."""
    memes = max((c.power.memes for c in comparisons), default=0)
    judged = [c for c in comparisons if c.judged]
    lines = [f"recipe A: {seeds[0]} checkpoints ({_files(paths[0])}); recipe B: {seeds[1]} checkpoints "
             f"({_files(paths[1])}); the same {memes} memes",
             f"the recipe's effect (B - A) per rule: the difference of the seeds' means, its variance the seeds' "
             f"spread (pooled, {seeds[0] + seeds[1] - 2} degrees of freedom) plus the memes' (paired bootstrap); "
             f"two-sided at {control.alpha:.0%}: worse and better each a family at {control.alpha / 2:g} "
             f"({'max-T' if control.method == 'fwer' else control.method}) over {len(judged)} rules"]
    lines += [f"warning: {w}" for w in warnings]
    lines.append(tabulate(recipe_rows(comparisons), headers=["verdict", "condition", "rule", "A → B (seed means)",
                                                              "Δ", "95% (rule alone)", "adj. p", "detects"],
                          tablefmt="simple", disable_numparse=True))
    lines += count_lines(comparisons, "B worse beyond the seeds' spread", "B better beyond the seeds' spread")
    if summary.get("power"):
        lines.append(f"with {seeds[0]} + {seeds[1]} seeds this comparison detects, at 80% power, a change of about "
                     f"(median over conditions): {power_clause(summary)}; smaller effects of either recipe go unseen, "
                     "and \"no difference\" means no more than that")
    return lines


def _files(paths) -> str:
    paths = list(map(str, paths))
    return ", ".join(paths[:3]) + (f" and {len(paths) - 3} more" if len(paths) > 3 else "")


DETECTOR_VERDICTS = {"better": "MORE robust", "worse": "LESS robust", "none": "no diff.",
                     "not judged": "not judged"}


def toward_p(row: dict) -> float:
    """A comparison's (Comparison.as_dict) adjusted p in the direction its change went: better's where B scored
    better, else worse's."""
    better = (row["difference"] > 0) == row["higher_is_better"] and row["difference"] != 0
    return row["improved_p_value"] if better else row["p_value"]


def detector_rows(rows: list[dict], every: bool = False, limit: int | None = None) -> list[list[str]]:
    """One table row per comparison (judge/detectors.py's, as dicts with their `verdict`): by default every family
    mean and every decision, the decisions first; `every`: all of them."""
    from ..judge.detectors import RULE_TEXTS, shown_score

    shown = [r for r in rows if every or r["members"] or r["verdict"] in ("better", "worse")]
    shown.sort(key=lambda r: (r["verdict"] not in ("better", "worse"), not r["members"]))
    out = []
    for r in shown[:limit]:
        what = RULE_TEXTS.get(r["rule"].partition(":")[0], (r["what"], False))[0]
        out.append([DETECTOR_VERDICTS[r["verdict"]], r["model"], short_condition(r["condition"]), what,
                    f"{_number(shown_score(r['rule'], r['before']))} → {_number(shown_score(r['rule'], r['now']))}",
                    _p(toward_p(r))])
    return out


def detector_counts(rows: list[dict]) -> list[str]:
    """Per pair of detectors: how many rules say more robust, less robust, no difference, not judged."""
    lines = []
    for pair in dict.fromkeys(r["model"] for r in rows):
        mine = [r for r in rows if r["model"] == pair]
        b, _, a = pair.partition(" vs ")
        counts = {v: sum(r["verdict"] == v for r in mine) for v in ("better", "worse", "none", "not judged")}
        lines.append(f"{b} against {a}: more robust on {counts['better']}, less robust on {counts['worse']}, no "
                     f"difference beyond noise on {counts['none']} of {len(mine)} rules"
                     + (f" ({counts['not judged']} not judged)" if counts["not judged"] else ""))
    return lines


DETECTOR_HEADERS = ["B is", "B vs A", "condition", "rule", "A → B", "adj. p"]


def detector_method(alpha: float, method: str, rules: int) -> str:
    return (f"what each loses to the edits (drop from clean of accuracy, AUROC and macro-F1, dropping rate, flip rate; "
            f"accuracy under attacks), paired over the same memes, two-sided at {alpha:.0%} (each direction a family "
            f"at {alpha / 2:g}, {'max-T' if method == 'fwer' else method} over {rules} rules)")


def detector_lines(names, rows: list[dict], alpha: float, method: str, every: bool = False,
                   limit: int | None = None) -> list[str]:
    """What `memerobust compare` (and a run with several models) prints for detectors: who against whom, the method,
    the decided rows, the counts per pair."""
    judged = [r for r in rows if not (r.get("state") or "").startswith("not judged")]
    memes = max((r["memes"] for r in rows), default=0)
    lines = [f"detectors: {', '.join(names)} on the same {memes} memes; {detector_method(alpha, method, len(judged))}"]
    table_rows = detector_rows(rows, every, limit)
    if table_rows:
        lines.append(tabulate(table_rows, headers=DETECTOR_HEADERS, tablefmt="simple", disable_numparse=True))
    lines += detector_counts(rows)
    decided = sum(r["verdict"] in ("better", "worse") for r in rows)
    if limit is not None and not every and decided > limit:
        lines.append(f"... {decided - limit} more decided rules not listed (every comparison: --every, or the JSON)")
    return lines


LISTED = 12  # decided rows a terminal shows; every comparison is in the JSON report


def detector_section_lines(section: dict) -> list[str]:
    """A run's verdict section for several detectors (run/detectors.py's record): what `memerobust compare` prints,
    at most LISTED decided rows."""
    from ..judge.gate import ErrorControl

    control = ErrorControl.parse(section["control"])
    rows = section["comparisons"]
    return detector_lines(section["detectors"], rows, control.alpha, control.method, limit=LISTED)
