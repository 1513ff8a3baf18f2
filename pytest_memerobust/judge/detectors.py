"""Detector against detector: which one loses less to the edits, beyond noise, on the same memes?

Two detectors differ in clean skill, so their raw scores under a perturbation answer "which is better", not "which
is more robust". The rules here compare what a detector loses (Rainbow Noise's tables 2-3 and the paper's ranking):
the drop from clean of accuracy, AUROC and macro-F1 (1 - absolute robustness), the dropping rate of accuracy (the drop
over the clean score: 1 - relative robustness), the flip rate, and, under attacks only, the accuracy itself (the
attack's success is the question there). Every pair of detectors x rule x condition, and each perturbation family's
mean, is one test in one family on the gate's draws (the memes resampled once per dataset, the same draws for every
detector), judged by the gate's machinery (gate.judge_family, B's cell as `now`, A's as `then`). The question has
no side to guard, so it is two-sided: "less robust" and "more robust" each at half the level, so that any claim
either way errs at most at the level over the whole family. The null construction: a detector against itself with
its memes' outputs swapped per meme with another (judge.simulated.swapped): the two then differ in nothing.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from itertools import combinations

from .gate import DEFAULT_CONTROL, ErrorControl, PairedCell, RegressionCheck, judge_family


class AttackAccuracy(RegressionCheck):
    """Accuracy under an attack condition (kind "attack"): what an adversary leaves the detector."""

    def applies_to(self, condition_kind: str) -> bool:
        return condition_kind == "attack"


DETECTOR_CHECKS = (RegressionCheck("absolute", "accuracy"), RegressionCheck("absolute", "auroc"),
                   RegressionCheck("absolute", "macro_f1"), RegressionCheck("relative", "accuracy"),
                   RegressionCheck("metric", "flip_rate"), AttackAccuracy("metric", "accuracy"))

# How a rule reads for detectors: what is compared, and whether the score is shown as a loss (1 - robustness).
RULE_TEXTS = {"abs_acc": ("drop (acc.)", True), "abs_auroc": ("drop (AUROC)", True), "abs_f1": ("drop (F1)", True),
              "rel_acc": ("dropping rate (acc.)", True), "flip": ("flip rate", False),
              "acc": ("acc. under attack", False)}
VERDICTS = {"better": "more robust", "worse": "less robust", "none": "no difference beyond noise"}


@dataclass(frozen=True)
class DetectorOutputs:
    """One detector's cells on one dataset: {condition id: {"y", "clean", "perturbed"}}, every cell over the same
    memes in the same order as every other detector's."""

    name: str
    dataset: str
    cells: dict


def detector_pairs(outputs: list[DetectorOutputs]) -> list[tuple[DetectorOutputs, DetectorOutputs]]:
    """Every unordered pair (A, B) of detectors on the same dataset, in the order given."""
    return [(a, b) for a, b in combinations(outputs, 2) if a.dataset == b.dataset]


def pair_name(a: str, b: str) -> str:
    return f"{b} vs {a}"


def compare_detectors(outputs: list[DetectorOutputs], *, attacks=frozenset(), control: ErrorControl = DEFAULT_CONTROL,
                      n_resamples: int = 10_000, seed: int = 0, confidence: float = 0.95, method: str = "bootstrap",
                      checks=DETECTOR_CHECKS) -> list:
    """Every pair of detectors x rule x condition both hold (and family means), one two-sided family: the gate's
    Comparison per test, its model `B vs A`, `regressed` meaning B is less robust than A beyond noise and `improved`
    more robust. `attacks` names the conditions whose accuracy is compared as accuracy under attack. Scores on the
    percent scale, so an absolute-robustness score is 1 - the drop."""
    cells = []
    for a, b in detector_pairs(outputs):
        for condition, then in a.cells.items():
            now = b.cells.get(condition)
            if now is None:
                continue
            kind = "clean" if condition == "clean" else "attack" if condition in attacks else "perturbed"
            cells.append(PairedCell(pair_name(a.name, b.name), a.dataset, condition, kind, now, then))
    if not cells:
        raise ValueError("no two detectors share a dataset and a condition")
    half = replace(control, alpha=control.alpha / 2)
    return judge_family(cells, checks, control=half, n_resamples=n_resamples, seed=seed, confidence=confidence,
                        method=method)


def verdict(comparison) -> str:
    """`better`, `worse` or `none`: B against A on this rule (see VERDICTS); `not judged` where it is not."""
    if not comparison.judged:
        return "not judged"
    return "worse" if comparison.decision.regressed else "better" if comparison.improvement.improved else "none"


def shown_score(rule: str, value: float) -> float:
    """A rule's score as people read it: a drop or dropping rate (1 - robustness) or the score itself."""
    loss = RULE_TEXTS.get(rule.partition(":")[0], ("", False))[1]
    return 1.0 - value if loss else value
