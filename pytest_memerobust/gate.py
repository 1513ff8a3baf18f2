"""Gating checkpoints against a saved baseline, judged on the paired per-meme predictions rather than a fixed epsilon.

A baseline holds, per model and condition, every meme's probabilities (clean and perturbed) plus what makes a
comparison meaningful: dataset fingerprint, seed, package and perturbation-library versions. A comparison with a
baseline made on other data, another seed or other perturbation definitions is refused. A regression is reported
only when the paired bootstrap interval of (current - baseline) lies below zero and the drop exceeds the optional
minimum effect (`--memerobust-fail-on=rel_acc:1%`).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from . import metrics
from .atomic import atomic_write_text
from .errors import ConfigError

FORMAT = "pytest-memerobust-baseline/1"
_METRICS = {"acc": "accuracy", "auroc": "auroc", "f1": "macro_f1"}
_KINDS = {"rel": "relative", "abs": "absolute", "": "metric"}


@dataclass(frozen=True)
class RegressionCheck:
    """`rel_acc:1%` = relative robustness of accuracy may not drop by more than 1 point (and significantly)."""

    kind: str  # "relative", "absolute" or "metric" (the perturbed score itself)
    metric: str  # accuracy, auroc, macro_f1
    min_effect: float = 0.0

    @classmethod
    def parse(cls, spec: str) -> "RegressionCheck":
        name, _, effect = spec.partition(":")
        prefix, _, short = name.rpartition("_")
        if prefix not in _KINDS or short not in _METRICS:
            raise ValueError(f"bad regression spec {spec!r}: expected [rel_|abs_]acc|auroc|f1[:EFFECT], "
                             f"e.g. rel_acc:1% or auroc:0.02")
        try:
            value = float(effect.rstrip("%")) / (100 if effect.endswith("%") else 1) if effect else 0.0
        except ValueError:
            raise ValueError(f"bad effect size in {spec!r}: expected a number or a percentage") from None
        return cls(_KINDS[prefix], _METRICS[short], value)

    def label(self) -> str:
        what = {"relative": "relative robustness of ", "absolute": "absolute robustness of ", "metric": ""}[self.kind]
        return f"{what}{self.metric}"

    def _score(self, y, clean, perturbed, scale):
        value = metrics.METRICS[self.metric](y, perturbed)
        if self.kind == "metric":
            return value
        base = metrics.METRICS[self.metric](y, clean)
        if self.kind == "relative":
            return metrics.relative_robustness(base, value)
        return metrics.absolute_robustness(base, value, scale)

    def fails(self, current: dict, baseline: dict, *, confidence: float = 0.95, n_resamples: int = 1000,
              seed: int = 0, scale: str = "percent") -> str | None:
        """A message when `current` regressed from `baseline` beyond noise and the minimum effect, else None.
        Both are {"y": labels, "clean": proba, "perturbed": proba} over the same memes in the same order."""
        y = np.asarray(current["y"])
        arrays = [np.asarray(a, dtype=np.float64) for a in (current["clean"], current["perturbed"],
                                                             baseline["clean"], baseline["perturbed"])]

        def difference(yy, cc, cp, bc, bp):
            return self._score(yy, cc, cp, scale) - self._score(yy, bc, bp, scale)

        now, before = self._score(y, *arrays[:2], scale), self._score(y, *arrays[2:], scale)
        lo, hi = metrics.paired_bootstrap_ci(difference, y, *arrays, n_resamples=n_resamples,
                                             confidence=confidence, seed=seed)
        if hi < 0 and now - before < -self.min_effect:
            return (f"{self.label()} regressed: baseline {before:.4f} -> now {now:.4f} "
                    f"(difference {now - before:+.4f}, {confidence:.0%} CI {lo:+.4f}..{hi:+.4f}"
                    + (f", allowed drop {self.min_effect:.4f})" if self.min_effect else ")"))
        return None


DEFAULT_CHECKS = tuple(RegressionCheck("relative", m) for m in ("accuracy", "auroc", "macro_f1"))


def baseline_data(session) -> dict:
    """Everything a later run needs to compare against this one, with the per-meme probabilities."""
    report = session.report()
    results: dict = {}
    for (model, spec, condition), result in session.results.items():
        entry = results.setdefault(model, {}).setdefault(spec, {})
        entry[condition] = {"y": result.y_true.tolist(), "clean": np.round(result.proba_clean, 6).tolist(),
                            "perturbed": np.round(result.proba, 6).tolist()}
    return {
        "format": FORMAT, "seed": report["seed"],
        "versions": {k: report["versions"].get(k) for k in ("pytest-memerobust", "imagecorruptions", "textattack")},
        "datasets": {spec: info["fingerprint"] for spec, info in report["datasets"].items()},
        "models": {name: info["checkpoint_sha256"] for name, info in report["models"].items()},
        "results": results,
    }


def save_baseline(session, path: Path) -> None:
    atomic_write_text(Path(path), json.dumps(baseline_data(session)) + "\n")


def load_baseline(path: Path) -> dict:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ConfigError(f"cannot read baseline {path}: {exc}") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ConfigError(f"{path} is not a pytest-memerobust baseline (format {FORMAT!r})")
    return data


def comparable(baseline: dict, *, seed: int, dataset_spec: str, dataset_fingerprint: str, versions: dict) -> None:
    """Refuse a comparison that would be meaningless, saying which fact differs."""
    if baseline["seed"] != seed:
        raise ConfigError(f"baseline was made with seed {baseline['seed']}, this run uses {seed}: "
                          "perturbations differ, so the comparison is refused")
    made = baseline["datasets"].get(dataset_spec)
    if made is not None and made != dataset_fingerprint:
        raise ConfigError(f"baseline was made on other data for {dataset_spec!r} (fingerprint {made[:12]}, now "
                          f"{dataset_fingerprint[:12]}): the comparison is refused")
    for name in ("pytest-memerobust", "imagecorruptions", "textattack"):
        if baseline["versions"].get(name) != versions.get(name):
            raise ConfigError(f"baseline was made with {name} {baseline['versions'].get(name)}, this run has "
                              f"{versions.get(name)}: perturbation definitions may differ, the comparison is refused")


def compare_rows(before: dict, after: dict, check: RegressionCheck = DEFAULT_CHECKS[0], **options) -> list[list]:
    """Side by side, per model, dataset and condition in both baselines: the checked score before and after, the
    paired difference with its interval, and whether it counts as a regression."""
    rows = []
    for model, by_spec in after["results"].items():
        for spec, by_condition in by_spec.items():
            for condition, now in by_condition.items():
                then = before["results"].get(model, {}).get(spec, {}).get(condition)
                if then is None or then["y"] != now["y"] or (condition == "clean" and check.kind != "metric"):
                    continue
                y = np.asarray(now["y"])
                score = lambda r: check._score(y, np.asarray(r["clean"]), np.asarray(r["perturbed"]), "percent")
                verdict = check.fails(now, then, **options)
                rows.append([model, spec, condition, f"{score(then):.4f}", f"{score(now):.4f}",
                             f"{score(now) - score(then):+.4f}", "REGRESSED" if verdict else "ok"])
    return rows
