"""One condition's outcome: per-item probabilities next to the clean ones, and every number derived from them."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from . import metrics, sampling
from .instructions import followed_entry
from ..data.meme import unlabelled
from ..perturb.conditions import Condition
from ..errors import MemeRobustError

METRIC_NAMES = ("accuracy", "auroc", "macro_f1")
LABEL_BOUND = ("metric", "relative", "absolute", "group_gap")  # the bootstrap kinds that read the memes' labels


class AbstainedTooOften(MemeRobustError):
    """A detector declined so many memes that too few are left to score."""


@dataclass(frozen=True)
class StatsConfig:
    """How uncertainty is estimated and robustness is scaled; the same for every result of a session."""

    n_resamples: int = 1000
    confidence: float = 0.95
    seed: int = 0
    scale: str = "percent"  # absolute robustness: "percent" (the definition) or "paper" (its printed numbers)


def predicted_labels(y_true: np.ndarray, proba: np.ndarray) -> np.ndarray:
    """One predicted label per meme: the argmax class, or for a multi-label task the set of labels at or above
    the threshold, as one integer (bit k = label k), so flips and paired tests treat both alike."""
    if np.ndim(y_true) == 2:
        return ((np.asarray(proba) >= metrics.MULTILABEL_THRESHOLD).astype(np.int64)
                << np.arange(np.shape(proba)[1])).sum(axis=1)
    return np.asarray(proba).argmax(axis=1)


@dataclass(frozen=True, eq=False)  # compared by identity: it holds arrays
class Memes:
    """The memes a result scores, as the dataset gives them: each one's label of the task scored (`y_true`) and, for
    per-group robustness, its group (e.g. PrideMM's target; "" = none); groups of fewer than `min_group_size` memes
    are left out of the gap, their metrics too noisy. The clean result's and every condition's are the same."""

    y_true: np.ndarray
    groups: np.ndarray | None = None
    min_group_size: int = 10


@dataclass(frozen=True, eq=False)  # compared by identity: it holds arrays
class Answers:
    """What the detector answered on the memes, clean and under the condition: per-meme probabilities; the memes a
    detector that can decline (a prompted vision-language model) declined to classify (None for one that always
    answers); a repeat-sampled detector's answers [memes, k] (class index; detectors.sampling.DECLINED where
    declined), whose vote shares the probabilities then are (detectors/sampling.py; None for one asked once)."""

    proba_clean: np.ndarray
    proba: np.ndarray
    abstained_clean: np.ndarray | None = None
    abstained: np.ndarray | None = None
    sampled_clean: np.ndarray | None = None
    sampled: np.ndarray | None = None


@dataclass(frozen=True)
class AttackMeasures:
    """The condition's edits measured on themselves, reported beside the detector's numbers: `caption_edit`, the
    caption edit's size ("words_changed": mean share of words changed) with a text attack's own measures
    ("textattack": TextAttack's success rate, queries and words changed); `picture_attack`, a per-meme image
    attack's (image_attacks.summary: success, queries, sanity flags). None where there is no such edit."""

    caption_edit: dict | None = None
    picture_attack: dict | None = None


@dataclass(eq=False)
class ConditionResult:
    """One condition's outcome for one model on one dataset: the memes (`memes`), the detector's answers on them
    clean and under the condition (`answers`), the label task scored (a suite's may differ from the model card's)
    and the attack's own measures; every number derived from them, with its interval under `stats`."""

    model: str
    dataset: str
    condition: Condition
    memes: Memes
    answers: Answers
    stats: StatsConfig = field(default_factory=StatsConfig)
    task: str | None = None
    measures: AttackMeasures = AttackMeasures()

    @cached_property
    def answered(self) -> np.ndarray | None:
        """The memes answered both clean and under this condition: the only ones scored, since a meme the detector
        declined is neither class (None: every meme is scored)."""
        answers = self.answers
        declined = [np.asarray(a, bool) for a in (answers.abstained_clean, answers.abstained) if a is not None]
        if not declined or not np.logical_or.reduce(declined).any():
            return None
        answered = ~np.logical_or.reduce(declined)
        if answered.sum() < 2:
            raise AbstainedTooOften(f"{self.model} declined {int((~answered).sum())} of {len(answered)} memes clean "
                                    f"or under {self.condition.id}: too few answers left to score")
        return answered

    @cached_property
    def _scored(self) -> tuple:
        """(truth, clean probabilities, probabilities, groups) of the memes scored."""
        rows = self.answered
        arrays = (self.memes.y_true, self.answers.proba_clean, self.answers.proba, self.memes.groups)
        return arrays if rows is None else tuple(None if a is None else np.asarray(a)[rows] for a in arrays)

    @cached_property
    def labelled(self) -> bool:
        """Whether the memes have labels: an unlabelled dataset's (meme.Dataset.unlabelled) are measured by the
        label-free measures only (flips, the confidence drop, abstentions), every label-bound one NaN, "not judged: no
        labels" (thresholds.why_undefined)."""
        return not unlabelled(self.memes.y_true)

    @cached_property
    def reference(self) -> np.ndarray:
        """What a meme's outputs are held against: its label, or, for unlabelled memes, the detector's clean
        prediction (what a flip, a worst example and a counterexample are then measured from)."""
        if self.labelled:
            return np.asarray(self.memes.y_true)
        return predicted_labels(self.memes.y_true, self.answers.proba_clean)

    @property
    def scored_truth(self) -> np.ndarray:
        """The labels of the memes scored: what decides whether a metric of them is defined (thresholds.not_judged)."""
        return self._scored[0]

    def to_wire(self) -> dict:
        """Plain values (arrays as exact bytes) that pytest-xdist can carry from a worker to the controller."""
        def array(a):
            return None if a is None else {"dtype": a.dtype.str, "shape": list(a.shape), "data": a.tobytes()}

        memes, answers = self.memes, self.answers
        groups = None if memes.groups is None else [str(g) for g in memes.groups.tolist()]
        return {"model": self.model, "dataset": self.dataset, "condition": self.condition.id,
                "y_true": array(np.asarray(memes.y_true)), "proba_clean": array(np.asarray(answers.proba_clean)),
                "proba": array(np.asarray(answers.proba)), "groups": groups, "task": self.task,
                "caption_edit": self.measures.caption_edit, "picture_attack": self.measures.picture_attack,
                "abstained_clean": array(answers.abstained_clean),
                "abstained": array(answers.abstained),
                "sampled_clean": array(answers.sampled_clean), "sampled": array(answers.sampled)}

    @classmethod
    def from_wire(cls, wire: dict, stats: StatsConfig) -> "ConditionResult":
        def array(a):
            if a is None:
                return None
            return np.frombuffer(a["data"], dtype=np.dtype(a["dtype"])).reshape(a["shape"]).copy()

        groups = None if wire["groups"] is None else np.array(wire["groups"])
        answers = Answers(array(wire["proba_clean"]), array(wire["proba"]), array(wire.get("abstained_clean")),
                          array(wire.get("abstained")), array(wire.get("sampled_clean")), array(wire.get("sampled")))
        return cls(wire["model"], wire["dataset"], Condition.parse(wire["condition"]),
                   Memes(array(wire["y_true"]), groups), answers, stats, wire.get("task"),
                   AttackMeasures(wire.get("caption_edit"), wire.get("picture_attack")))

    def group_scores(self, metric: str) -> dict[str, dict]:
        """Per group with at least `min_group_size` memes: its size, clean and perturbed metric, relative robustness."""
        y, proba_clean, proba, groups = self._scored
        if groups is None or not self.labelled:
            return {}
        out = {}
        for group in sorted(set(groups.tolist()) - {""}):  # "": memes without a group
            rows = np.flatnonzero(groups == group)
            if len(rows) < self.memes.min_group_size:
                continue
            clean = metrics.METRICS[metric](y[rows], proba_clean[rows])
            now = metrics.METRICS[metric](y[rows], proba[rows])
            out[str(group)] = {"n": int(len(rows)), "clean": clean, "perturbed": now,
                               "relative_robustness": metrics.relative_robustness(clean, now)}
        return out

    def group_gap(self, metric: str) -> float:
        """Largest minus smallest per-group relative robustness (nan with fewer than two groups)."""
        values = [g["relative_robustness"] for g in self.group_scores(metric).values()]
        return float(max(values) - min(values)) if len(values) >= 2 else float("nan")

    @cached_property
    def values(self) -> dict[str, float]:
        if not self.labelled:
            return dict.fromkeys(METRIC_NAMES, float("nan"))
        return metrics.compute_all(self._scored[0], self._scored[2])

    @cached_property
    def clean_values(self) -> dict[str, float]:
        if not self.labelled:
            return dict.fromkeys(METRIC_NAMES, float("nan"))
        return metrics.compute_all(self._scored[0], self._scored[1])

    def metric(self, name: str) -> float:
        return self.values[name]

    def relative_robustness(self, name: str) -> float:
        return metrics.relative_robustness(self.clean_values[name], self.values[name])

    def absolute_robustness(self, name: str, scale: str | None = None) -> float:
        return metrics.absolute_robustness(self.clean_values[name], self.values[name], scale or self.stats.scale)

    def drop(self, name: str) -> float:
        return self.clean_values[name] - self.values[name]

    @property
    def predictions(self) -> np.ndarray:
        return predicted_labels(self.memes.y_true, self.answers.proba)

    @cached_property
    def _scored_labels(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(truth, clean prediction, prediction) of the memes scored, each as one integer per meme (a multi-label
        row as one integer), so that they compare."""
        y, proba_clean, proba, _ = self._scored
        truth = predicted_labels(y, y) if np.ndim(y) == 2 else y
        return truth, predicted_labels(y, proba_clean), predicted_labels(y, proba)

    @cached_property
    def flip_rate(self) -> float:
        return metrics.flip_rate(*self._scored_labels[1:])

    @cached_property
    def confidence_drop(self) -> float:
        """How much less probable the clean prediction is under this condition, averaged over the memes scored
        (negative: surer of it now): a label-free measure of how far the condition moves the detector, seen before
        any prediction flips."""
        return float(np.mean(self._confidence_drops))

    @cached_property
    def _confidence_drops(self) -> np.ndarray:
        """Per meme scored: its clean prediction's probability clean less under this condition (multi-label: of each
        label's predicted state, averaged over the labels)."""
        y, proba_clean, proba, _ = self._scored
        # to the 1e-6 the predictions' digest keeps: the last bits of a probability differ between thread counts
        # (determinism.py), the ranks and argmaxes every other measure reads do not
        proba_clean, proba = (np.round(np.asarray(p, np.float64), 6) for p in (proba_clean, proba))
        if np.ndim(y) == 2:
            state = proba_clean >= metrics.MULTILABEL_THRESHOLD
            held = lambda p: np.where(state, p, 1.0 - p).mean(axis=1)  # noqa: E731
            return held(proba_clean) - held(proba)
        rows, chosen = np.arange(len(proba_clean)), proba_clean.argmax(axis=1)
        return proba_clean[rows, chosen] - proba[rows, chosen]

    @cached_property
    def attack_success_rate(self) -> float:
        """Of the memes predicted right when clean, the share predicted wrong now (TextAttack's definition)."""
        if not self.labelled:
            return float("nan")
        return metrics.attack_success_rate(*self._scored_labels)

    @cached_property
    def fooled(self) -> dict:
        """Of the memes scored that the detector got right clean (`right_clean`), how many it gets wrong under this
        condition (`fooled`): what an attack fooled, counted as the transfer matrix counts it (judge/transfer.py),
        never a meme it already got wrong before the attack."""
        truth, clean, now = self._scored_labels
        right = clean == truth
        return {"fooled": int((right & (now != truth)).sum()), "right_clean": int(right.sum())}

    @cached_property
    def instruction_followed(self) -> dict | None:
        """For an image perturbation that writes a verdict or the benign class's words into the picture: the share of
        the memes scored, not called benign clean, that it turns benign, with its interval (judge/instructions.py);
        None for any other condition."""
        _, proba_clean, proba, _ = self._scored
        return followed_entry(self.condition.image, proba_clean, proba, np.ndim(self.memes.y_true) == 2,
                              self.stats.confidence)

    @cached_property
    def mcnemar_p(self) -> float:
        """Exact McNemar p-value of clean vs perturbed correctness on the same memes: is the change in accuracy
        more than chance? (1.0 when no meme changed from right to wrong or back.)"""
        if not self.labelled:
            return float("nan")
        truth, clean, now = self._scored_labels
        return metrics.mcnemar_p_value(clean == truth, now == truth)

    @property
    def abstention_rate(self) -> float | None:
        """The share of memes the detector declined to classify under this condition (None: it always answers)."""
        return None if self.answers.abstained is None else float(np.mean(self.answers.abstained))

    @property
    def abstention_increase(self) -> float | None:
        """How much more often it declines than on the clean memes (negative: less often)."""
        if self.answers.abstained is None or self.answers.abstained_clean is None:
            return None
        return float(np.mean(self.answers.abstained) - np.mean(self.answers.abstained_clean))

    def ci(self, name: str, kind: str = "relative") -> tuple[float, float]:
        """Paired bootstrap interval of `metric` (kind="metric"), or of its relative/absolute robustness: the
        percentile interval of `samples(name, kind)`."""
        key = (name, kind)
        cache = self.__dict__.setdefault("_ci_cache", {})
        if key not in cache:
            cache[key] = metrics._percentile_interval(self.samples(name, kind), self.stats.confidence)
        return cache[key]

    def samples(self, name: str, kind: str = "relative") -> np.ndarray:
        """The bootstrap resamples behind `ci(name, kind)` ([n_resamples], NaN where undefined): what a one-sided
        p-value of a threshold reads (thresholds.case_p_value)."""
        key = (name, kind)
        cache = self.__dict__.setdefault("_samples_cache", {})
        if key not in cache:
            resampling = {"n_resamples": self.stats.n_resamples, "seed": self.stats.seed}
            # the abstentions' intervals are over every meme: they exist when too few answers are left to score
            if kind == "abstention_rate":
                cache[key] = metrics.paired_bootstrap_samples(lambda now: float(np.mean(now)),
                                                              self.answers.abstained.astype(float), **resampling)
            elif kind == "inconsistency":  # over every meme: a declined sample is left out, not its meme
                cache[key] = sampling.inconsistency_samples(self.answers.sampled, self._truth, **resampling)
            elif kind == "abstention_increase":
                cache[key] = metrics.paired_bootstrap_samples(
                    lambda clean, now: float(np.mean(now) - np.mean(clean)), self.answers.abstained_clean.astype(float),
                    self.answers.abstained.astype(float), **resampling)
            else:
                cache[key] = self._scored_samples(name, kind, resampling)
        return cache[key]

    def _scored_samples(self, name: str, kind: str, resampling: dict) -> np.ndarray:
        """The resamples of a measure of the memes scored (answered clean and here)."""
        y, proba_clean, proba, groups = self._scored
        if kind in LABEL_BOUND and not self.labelled:
            return np.full(self.stats.n_resamples, np.nan)
        if kind == "confidence_drop":
            return metrics.paired_bootstrap_samples(lambda drops: drops.mean(axis=-1), self._confidence_drops,
                                                    vectorized=True, **resampling)
        if kind == "metric":
            return metrics.metric_samples(name, y, proba, **resampling)
        if kind == "flip_rate":
            return metrics.flip_rate_samples(*self._scored_labels[1:], **resampling)
        if kind == "group_gap":
            def gap(y, clean, perturbed, groups):
                view = ConditionResult(self.model, self.dataset, self.condition,
                                       Memes(y, groups, self.memes.min_group_size), Answers(clean, perturbed),
                                       self.stats)
                return view.group_gap(name)

            return metrics.paired_bootstrap_samples(gap, y, proba_clean, proba, groups, **resampling)
        return metrics.robustness_samples(name, y, proba_clean, proba, kind=kind, scale=self.stats.scale,
                                          **resampling)

    @cached_property
    def _truth(self) -> np.ndarray:
        """The labels the sampled answers are scored against; for unlabelled memes each meme's most frequent answer
        under this condition (sampling.majority_answers)."""
        if self.labelled or self.answers.sampled is None:
            return np.asarray(self.memes.y_true)
        return sampling.majority_answers(self.answers.sampled, self.answers.proba.shape[1])

    @cached_property
    def sampling(self) -> dict | None:
        """A repeat-sampled detector's figures over every meme (judge/sampling.py): expected and consensus accuracy,
        internal variance, consistency, the declined share, the clean memes' self flip rate and, under a
        perturbation, the sampled and excess flip rates, each with its interval over memes; None when asked once."""
        if self.answers.sampled is None:
            return None
        stats = self.stats
        clean = None if self.condition.kind == "clean" else self.answers.sampled_clean
        out = sampling.summary(self.answers.sampled, self._truth, self.answers.proba.shape[1], clean, stats.n_resamples,
                               stats.confidence, stats.seed)
        if not self.labelled:  # scored against the answers' own mode: no accuracy
            for name in ("expected_accuracy", "consensus_accuracy"):
                out[name], out[f"{name}_ci"] = float("nan"), [float("nan")] * 2
        return out

    @property
    def inconsistency(self) -> float | None:
        """1 - the consistency rate of the samples: the share of memes whose answers disagree (what
        `max_inconsistency` bounds); None when asked once."""
        return None if self.sampling is None else 1.0 - self.sampling["consistency_rate"]

    @cached_property
    def predictions_digest(self) -> str:
        """sha256 of the per-item probabilities (float32, rounded to 1e-6): two runs agree iff this agrees."""
        rounded = np.round(self.answers.proba.astype(np.float64), 6).astype(np.float32)
        return hashlib.sha256(rounded.tobytes()).hexdigest()

    def as_dict(self) -> dict:
        try:
            return self._as_dict()
        except AbstainedTooOften:  # the report still shows it: undefined numbers, and how often it declined
            return self._unscorable_dict()

    def _unscorable_dict(self) -> dict:
        c, nan = self.condition, float("nan")
        out = {"model": self.model, "dataset": self.dataset, "task": self.task, "condition": c.id, "kind": c.kind,
               "defence": c.defence,
               "text": c.text, "text_severity": c.text_severity, "image": c.image, "image_severity": c.image_severity,
               "n": 0, "metrics": dict.fromkeys(METRIC_NAMES, nan), "clean_metrics": dict.fromkeys(METRIC_NAMES, nan),
               "metrics_ci": {m: [nan, nan] for m in METRIC_NAMES}, "predictions_sha256": self.predictions_digest,
               "abstention_rate": self.abstention_rate, "n_declined": int(len(self.memes.y_true))}
        if self.sampling is not None:
            out["sampling"] = self.sampling
        if c.kind != "clean":
            out.update({"flip_rate": nan, "flip_rate_ci": [nan, nan], "confidence_drop": nan,
                        "confidence_drop_ci": [nan, nan], "mcnemar_p": nan, "attack_success_rate": nan,
                        "relative_robustness": dict.fromkeys(METRIC_NAMES, nan),
                        "absolute_robustness": dict.fromkeys(METRIC_NAMES, nan),
                        "absolute_robustness_paper_scale": dict.fromkeys(METRIC_NAMES, nan),
                        "relative_robustness_ci": {m: [nan, nan] for m in METRIC_NAMES}})
            if self.abstention_increase is not None:
                out["abstention_increase"] = self.abstention_increase
                out["abstention_increase_ci"] = list(self.ci("abstention", "abstention_increase"))
        return out

    def _as_dict(self) -> dict:
        c = self.condition
        out = {
            "model": self.model, "dataset": self.dataset, "task": self.task, "condition": c.id, "kind": c.kind,
            "defence": c.defence,
            "text": c.text, "text_severity": c.text_severity, "image": c.image, "image_severity": c.image_severity,
            "n": int(len(self._scored[0])), "metrics": self.values, "clean_metrics": self.clean_values,
            "predictions_sha256": self.predictions_digest,
        }
        if not self.labelled:
            out["labelled"] = False
        if c.kind != "clean":
            out["flip_rate"] = self.flip_rate
            out["flip_rate_ci"] = list(self.ci("flip_rate", "flip_rate"))
            out["confidence_drop"] = self.confidence_drop
            out["confidence_drop_ci"] = list(self.ci("confidence_drop", "confidence_drop"))
            out["relative_robustness"] = {m: self.relative_robustness(m) for m in METRIC_NAMES}
            out["absolute_robustness"] = {m: self.absolute_robustness(m) for m in METRIC_NAMES}
            out["absolute_robustness_paper_scale"] = {m: self.absolute_robustness(m, "paper") for m in METRIC_NAMES}
            out["relative_robustness_ci"] = {m: list(self.ci(m, "relative")) for m in METRIC_NAMES}
            out["mcnemar_p"] = self.mcnemar_p
            out["attack_success_rate"] = self.attack_success_rate
            if self.instruction_followed is not None:
                out["instruction_followed"] = self.instruction_followed
        if self.measures.caption_edit is not None:
            out["caption_edit"] = self.measures.caption_edit
        if self.measures.picture_attack is not None and not self.labelled:
            out["picture_attack"] = dict(self.measures.picture_attack)
        elif self.measures.picture_attack is not None:  # with what it fooled of the memes right clean, on this detector
            fooled = self.fooled
            out["picture_attack"] = {**self.measures.picture_attack, "fooled_of_right_clean": fooled["fooled"],
                                     "right_clean": fooled["right_clean"]}
        if self.answers.abstained is not None:
            out["abstention_rate"] = self.abstention_rate
            # clean or here: left out of the metrics
            out["n_declined"] = int(len(self.memes.y_true) - len(self._scored[0]))
            if c.kind != "clean" and self.answers.abstained_clean is not None:
                out["abstention_increase"] = self.abstention_increase
                out["abstention_increase_ci"] = list(self.ci("abstention", "abstention_increase"))
        out["metrics_ci"] = {m: list(self.ci(m, "metric")) for m in METRIC_NAMES}
        if self.sampling is not None:
            out["sampling"] = self.sampling
        if self.memes.groups is not None and c.kind != "clean":
            out["groups"] = {m: self.group_scores(m) for m in METRIC_NAMES}
        return out
