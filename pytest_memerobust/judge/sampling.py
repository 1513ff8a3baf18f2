"""Run-to-run variance of a sampled detector: each meme asked k times, its k answers scored, and the figures
lmms-eval reports for repeat sampling, with intervals over memes.

A score matrix is [memes, k]: 1 where sample j of meme i named the true class, 0 where it named another, NaN where
the model declined (a refusal, or an answer that is no label word). A declined sample is neither right nor wrong: it
is left out of every figure below, as lmms-eval leaves out a score it cannot read, and counted apart
(`declined_rate`, the share of the n x k samples declined). With no declined sample the figures are lmms-eval's
(`lmms_eval/api/metrics.py`):

- expected accuracy: the mean of all scores (the chance that one asking is right);
- consensus accuracy: the share of memes whose majority of answers is right, a tie counting as wrong (more than
  half of the answered samples right); memes with no answer are left out;
- internal variance: each meme's sample variance of its scores with ddof = 1 (lmms-eval divides by k - 1), averaged
  over the memes with at least two answers;
- consistency rate: the share of memes whose answered scores all agree (all right or all wrong); memes with no
  answer are left out. `1 - consistency rate` is the inconsistency a suite bounds (`max_inconsistency`).

Beside them, the model's own noise: the self flip rate, the share of pairs of two askings of the same clean meme
(every pair of its answered samples) that disagree; and, per condition, the sampled flip rate, the share of pairs of
one asking of the clean meme and one of the perturbed meme (every clean x perturbed pair of answered samples) that
disagree. Their difference, the excess flip rate, is what the perturbation does beyond asking again.

Every function takes arrays with any leading axes ([..., memes, k]) and reduces the last two, so a bootstrap passes
all its resamples at once. Intervals resample memes (rows), with their k answers together: a bootstrap clustered by
meme, through `metrics.paired_bootstrap_samples` with the run's resamples, confidence and seed.
"""
from __future__ import annotations

import numpy as np

from ..data.meme import DECLINED
from .metrics import _percentile_interval, paired_bootstrap_samples

FIGURES = ("expected_accuracy", "consensus_accuracy", "internal_variance", "consistency_rate")


def score_matrix(answers, truth) -> np.ndarray:
    """[memes, k] scores of `answers` (class indices, DECLINED where declined) against `truth` [memes]: 1.0 right,
    0.0 wrong, NaN declined."""
    answers = np.asarray(answers)
    truth = np.asarray(truth)
    if answers.ndim != 2 or truth.shape != answers.shape[:1]:
        raise ValueError(f"answers must be [memes, k] and truth [memes], got {answers.shape} and {truth.shape}")
    scores = (answers == truth[:, None]).astype(float)
    scores[answers == DECLINED] = np.nan
    return scores


def _counts(scores) -> tuple[np.ndarray, np.ndarray]:
    """Per meme: (answered samples, right samples) of a [..., memes, k] score matrix."""
    scores = np.asarray(scores, dtype=float)
    answered = ~np.isnan(scores)
    return answered.sum(axis=-1), np.where(answered, scores, 0.0).sum(axis=-1)


def _ratio(numerator, denominator):
    """numerator / denominator, NaN where the denominator is 0 (a figure with nothing to average)."""
    numerator, denominator = np.asarray(numerator, float), np.asarray(denominator, float)
    out = np.full(np.broadcast(numerator, denominator).shape, np.nan)
    np.divide(numerator, denominator, out=out, where=denominator > 0)
    return out if out.ndim else float(out)


def expected_accuracy(scores):
    """Mean of the answered scores, over every meme and sample."""
    answered, right = _counts(scores)
    return _ratio(right.sum(axis=-1), answered.sum(axis=-1))


def consensus_accuracy(scores):
    """Share of the memes with an answer whose answers are right more often than wrong (a tie is wrong)."""
    answered, right = _counts(scores)
    return _ratio(((right > answered / 2) & (answered > 0)).sum(axis=-1), (answered > 0).sum(axis=-1))


def internal_variance(scores):
    """Mean over the memes with at least two answers of the sample variance (ddof = 1) of their scores."""
    answered, right = _counts(scores)
    some = answered >= 2
    per_meme = _ratio(right - right * right / np.maximum(answered, 1), answered - 1)  # 0/1 scores: sum s^2 = right
    return _ratio(np.where(some, per_meme, 0.0).sum(axis=-1), some.sum(axis=-1))


def consistency_rate(scores):
    """Share of the memes with an answer whose answered scores all agree."""
    answered, right = _counts(scores)
    some = answered > 0
    return _ratio((some & ((right == 0) | (right == answered))).sum(axis=-1), some.sum(axis=-1))


def declined_rate(answers):
    """Share of all samples declined."""
    answers = np.asarray(answers)
    return _ratio((answers == DECLINED).sum(axis=(-2, -1)), answers.shape[-2] * answers.shape[-1])


def _class_counts(answers, n_classes: int) -> np.ndarray:
    """[..., memes, classes]: how many of each meme's samples named each class."""
    answers = np.asarray(answers)
    return (answers[..., None] == np.arange(n_classes)).sum(axis=-2)


def majority_answers(answers, n_classes: int) -> np.ndarray:
    """[..., memes]: each meme's most frequent answered class (the lowest on a tie): what unlabelled memes' samples
    are scored against, so that "all its answers agree" (the consistency rate) still reads exactly."""
    return _class_counts(answers, n_classes).argmax(axis=-1)


def _self_pairs(answers, n_classes: int) -> tuple[np.ndarray, np.ndarray]:
    """Per meme: (pairs of answered samples that disagree, pairs of answered samples)."""
    counts = _class_counts(answers, n_classes)
    m = counts.sum(axis=-1)
    pairs = m * (m - 1) // 2
    return pairs - (counts * (counts - 1) // 2).sum(axis=-1), pairs


def _cross_pairs(clean, perturbed, n_classes: int) -> tuple[np.ndarray, np.ndarray]:
    """Per meme: (clean x perturbed pairs of answered samples that disagree, such pairs)."""
    a, b = _class_counts(clean, n_classes), _class_counts(perturbed, n_classes)
    pairs = a.sum(axis=-1) * b.sum(axis=-1)
    return pairs - (a * b).sum(axis=-1), pairs


def self_flip_rate(answers, n_classes: int):
    """Share of pairs of two answered askings of the same meme that disagree: the model's own noise."""
    flips, pairs = _self_pairs(answers, n_classes)
    return _ratio(flips.sum(axis=-1), pairs.sum(axis=-1))


def sampled_flip_rate(clean, perturbed, n_classes: int):
    """Share of pairs of one answered asking of the clean meme and one of the perturbed meme that disagree."""
    flips, pairs = _cross_pairs(clean, perturbed, n_classes)
    return _ratio(flips.sum(axis=-1), pairs.sum(axis=-1))


def excess_flip_rate(clean, perturbed, n_classes: int):
    """The sampled flip rate less the self flip rate of the clean memes: what the perturbation changes beyond what
    asking again changes."""
    return np.asarray(sampled_flip_rate(clean, perturbed, n_classes)) - np.asarray(self_flip_rate(clean, n_classes))


def summary(answers, truth, n_classes: int, clean_answers=None, n_resamples: int = 1000, confidence: float = 0.95,
            seed=0) -> dict:
    """The sampling block of one condition's report: k, the four figures and the declined share, the clean memes'
    self flip rate and, for a perturbed condition (`clean_answers` given), the sampled and excess flip rates, each
    figure with its percentile interval over memes (`<name>_ci`)."""
    answers = np.asarray(answers)
    clean = answers if clean_answers is None else np.asarray(clean_answers)
    scores = score_matrix(answers, truth)
    resampling = {"n_resamples": n_resamples, "seed": seed, "vectorized": True}
    out: dict = {"k": int(answers.shape[1])}

    def add(name: str, value, draws) -> None:
        out[name] = float(value)
        out[f"{name}_ci"] = list(_percentile_interval(draws, confidence))

    for name, figure in zip(FIGURES, (expected_accuracy, consensus_accuracy, internal_variance, consistency_rate)):
        add(name, figure(scores), paired_bootstrap_samples(figure, scores, **resampling))
    out["declined_rate"] = float(declined_rate(answers))
    add("self_flip_rate", self_flip_rate(clean, n_classes),
        paired_bootstrap_samples(lambda a: self_flip_rate(a, n_classes), clean, **resampling))
    if clean_answers is not None:
        add("flip_rate", sampled_flip_rate(clean, answers, n_classes),
            paired_bootstrap_samples(lambda a, b: sampled_flip_rate(a, b, n_classes), clean, answers, **resampling))
        add("excess_flip_rate", excess_flip_rate(clean, answers, n_classes),
            paired_bootstrap_samples(lambda a, b: excess_flip_rate(a, b, n_classes), clean, answers, **resampling))
    return out


def inconsistency_samples(answers, truth, n_resamples: int = 1000, seed=0) -> np.ndarray:
    """Bootstrap resamples of 1 - consistency rate (what `max_inconsistency` is judged on), from the resamples
    `summary` reads the consistency rate's interval from."""
    scores = score_matrix(answers, truth)
    return 1.0 - paired_bootstrap_samples(consistency_rate, scores, n_resamples=n_resamples, seed=seed,
                                          vectorized=True)
