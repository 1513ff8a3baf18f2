"""The run as a verdict: one compact line per failing case, then per model how many cases pass, fail for sure and
fail within noise, and the worst five. Plain functions over `CaseOutcome`s, which the plugin reads back from the
test reports (so a pytest-xdist controller, which runs no case itself, prints the same)."""
from __future__ import annotations

from dataclasses import dataclass

WORST = 5


@dataclass(frozen=True)
class CaseOutcome:
    nodeid: str  # e.g. rainbow-noise::memeblip2-tda::typos-3+uap-3
    outcome: str  # passed, failed or skipped: what pytest recorded
    model: str | None = None  # the model's label; None for a test that is not a suite case
    verdict: str | None = None  # pass, fail for sure, fail within noise (thresholds.verdict)
    shortfall: float = 0.0  # how far the worst violation is past its limit
    line: str = ""  # the compact failure line (items.compact_line), or the failure's first lines
    decision: str | None = None  # the suite's decision ("estimate" or "confident"); None for other tests
    p_value: float | None = None  # one-sided p of "meets its thresholds" (thresholds.case_p_value)

    @classmethod
    def from_properties(cls, nodeid: str, outcome: str, properties) -> "CaseOutcome":
        p = dict(properties)
        p_value = p.get("memerobust.p_value")
        return cls(nodeid, outcome, p.get("memerobust.model"), p.get("memerobust.verdict"),
                   float(p.get("memerobust.shortfall", 0.0)), p.get("memerobust.line", ""),
                   p.get("memerobust.decision"), None if p_value is None else float(p_value))


def _split(nodeid: str) -> tuple[str, str]:
    head, _, name = nodeid.rpartition("::")
    return head, name


def failure_lines(outcomes: list[CaseOutcome]) -> list[str]:
    """One line per failing case, under one heading per suite and model, the case's name padded so the reasons
    line up; `prefix::name` is the node id to re-run it, `name` a `-k` expression."""
    failed = [o for o in outcomes if o.outcome == "failed"]
    lines: list[str] = []
    for head in dict.fromkeys(_split(o.nodeid)[0] for o in failed):
        mine = [o for o in failed if _split(o.nodeid)[0] == head]
        width = min(32, max(len(_split(o.nodeid)[1]) for o in mine))
        lines.append(f"{head}::")
        for o in mine:
            name = _split(o.nodeid)[1]
            text = o.line.splitlines() or [""]
            lines.append(f"  {name:<{width}}  {text[0]}")
            lines += [f"  {'':<{width}}  {more}" for more in text[1:]]
    return lines


FDR_Q = 0.05  # the false discovery rate the summary controls over a run's confident cases


def fdr_lines(outcomes: list[CaseOutcome], q: float = FDR_Q) -> list[str]:
    """With `decision = "confident"`, each case is judged at its own confidence level, so a run of hundreds of
    cases fails some by chance. Over the run's confident cases, Benjamini-Hochberg on their one-sided p-values
    (thresholds.case_p_value) keeps the failures that survive a false discovery rate of `q`: one line, or none
    when no case is confident. Cases whose verdict came from a regression check are counted as they failed."""
    import numpy as np

    from .metrics import benjamini_hochberg

    confident = [o for o in outcomes if o.decision == "confident" and o.p_value is not None
                 and o.outcome != "skipped"]
    if not confident:
        return []
    kept = benjamini_hochberg(np.array([o.p_value for o in confident]), q)
    failing = [k for k, o in enumerate(confident) if o.outcome == "failed"]
    surviving = sum(bool(kept[k]) for k in failing)
    return [f"false discovery rate: {surviving} of {len(failing)} failing cases survive Benjamini-Hochberg at "
            f"q = {q:g} over {len(confident)} confident cases"
            + (f" ({len(failing) - surviving} may be chance)" if surviving < len(failing) else "")]


def verdict_lines(outcomes: list[CaseOutcome]) -> list[str]:
    """Per model: cases passing, failing for sure, failing within noise (which pass under `decision =
    "confident"`), skipped; then the five cases furthest past their limits."""
    lines = []
    for model in dict.fromkeys(o.model for o in outcomes if o.model is not None):
        mine = [o for o in outcomes if o.model == model and o.verdict is not None]
        count = {v: sum(o.verdict == v for o in mine) for v in ("pass", "fail for sure", "fail within noise")}
        skipped = sum(o.outcome == "skipped" for o in outcomes if o.model == model)
        noise_failed = sum(o.verdict == "fail within noise" and o.outcome == "failed" for o in mine)
        noise_note = ("failed: the suite decides on the point estimate" if noise_failed
                      else "passed: the interval straddles the limit") if count["fail within noise"] else ""
        lines.append(f"{model}: {len(mine)} cases: {count['pass']} pass, {count['fail for sure']} fail for sure, "
                     f"{count['fail within noise']} fail within noise" + (f" ({noise_note})" if noise_note else "")
                     + (f", {skipped} skipped" if skipped else ""))
        worst = sorted((o for o in mine if o.verdict == "fail for sure"), key=lambda o: -o.shortfall)
        if len(worst) > WORST:  # a few failures are all in the lines above already
            worst = worst[:WORST]
            lines.append(f"  worst {len(worst)}:")
            width = max(len(o.nodeid) for o in worst)
            lines += [f"    {o.nodeid:<{width}}  {o.line.splitlines()[0] if o.line else ''}" for o in worst]
    lines += fdr_lines(outcomes)
    others = [o for o in outcomes if o.model is None and o.outcome != "skipped"]
    if others:
        failed = [o for o in others if o.outcome == "failed"]
        lines.append(f"other robustness tests: {len(others) - len(failed)} pass, {len(failed)} fail"
                     + (f" ({', '.join(_split(o.nodeid)[1] for o in failed)})" if failed else ""))
    return lines
