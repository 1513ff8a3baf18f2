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
from typing import Callable

import numpy as np

from . import metrics
from ..atomic import atomic_write_text
from ..errors import ConfigError

FORMAT = "pytest-memerobust-baseline/1"
_METRICS = {"acc": "accuracy", "auroc": "auroc", "f1": "macro_f1"}
_KINDS = {"rel": "relative", "abs": "absolute", "": "metric"}
_SHORT = {"relative": "rel. ", "absolute": "abs. ", "metric": "", "accuracy": "acc.", "auroc": "AUROC",
          "macro_f1": "macro-F1"}
_VERSIONED = ("pytest-memerobust", "imagecorruptions", "textattack")  # what defines the perturbations


@dataclass(frozen=True)
class Difference:
    """A checked score before and now, and the paired bootstrap interval of (now - before)."""

    before: float
    now: float
    low: float
    high: float

    @property
    def value(self) -> float:
        return self.now - self.before


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

    def short_label(self) -> str:
        """For table headers: `rel. acc.`, `abs. AUROC`, `macro-F1`."""
        return _SHORT[self.kind] + _SHORT[self.metric]

    def difference(self, current: dict, baseline: dict, *, confidence: float = 0.95, n_resamples: int = 1000,
                   seed: int = 0, scale: str = "percent") -> Difference:
        """The score of both and the paired bootstrap interval of their difference (the same memes resampled for
        both). Both are {"y": labels, "clean": proba, "perturbed": proba} over the same memes in the same order."""
        y = np.asarray(current["y"])
        arrays = [np.asarray(a, dtype=np.float64) for a in (current["clean"], current["perturbed"],
                                                             baseline["clean"], baseline["perturbed"])]

        def difference(yy, cc, cp, bc, bp):
            return self._score(yy, cc, cp, scale) - self._score(yy, bc, bp, scale)

        now, before = self._score(y, *arrays[:2], scale), self._score(y, *arrays[2:], scale)
        lo, hi = metrics.paired_bootstrap_ci(difference, y, *arrays, n_resamples=n_resamples,
                                             confidence=confidence, seed=seed)
        return Difference(before, now, lo, hi)

    def fails(self, current: dict, baseline: dict, *, confidence: float = 0.95, n_resamples: int = 1000,
              seed: int = 0, scale: str = "percent") -> str | None:
        """A message when `current` regressed from `baseline` beyond noise and the minimum effect, else None."""
        d = self.difference(current, baseline, confidence=confidence, n_resamples=n_resamples, seed=seed,
                            scale=scale)
        return self.verdict(d, confidence)

    def verdict(self, d: Difference, confidence: float = 0.95) -> str | None:
        if d.high < 0 and d.value < -self.min_effect:
            return (f"{self.label()} regressed: baseline {d.before:.4f} -> now {d.now:.4f} "
                    f"(difference {d.value:+.4f}, {confidence:.0%} CI {d.low:+.4f}..{d.high:+.4f}"
                    + (f", allowed drop {self.min_effect:.4f})" if self.min_effect else ")"))
        return None


DEFAULT_CHECKS = tuple(RegressionCheck("relative", m) for m in ("accuracy", "auroc", "macro_f1"))


def baseline_data(session) -> dict:
    """Everything a later run needs to compare against this one, with the per-meme probabilities, and per model and
    dataset the memes' ids and captions in the results' order (`memes`), so a flip ledger can name the memes."""
    report = session.report()
    results: dict = {}
    memes: dict = {}
    for (model, spec, condition), result in session.results.items():
        entry = results.setdefault(model, {}).setdefault(spec, {})
        entry[condition] = {"y": result.y_true.tolist(), "clean": np.round(result.proba_clean, 6).tolist(),
                            "perturbed": np.round(result.proba, 6).tolist()}
        if spec not in memes.get(model, {}) and (named := _scored_memes(session, spec, result)) is not None:
            memes.setdefault(model, {})[spec] = named
    return {
        "format": FORMAT, "seed": report["seed"],
        "versions": {k: report["versions"].get(k) for k in _VERSIONED},
        "datasets": {spec: info["fingerprint"] for spec, info in report["datasets"].items()},
        "models": {name: info["checkpoint_sha256"] for name, info in report["models"].items()},
        "results": results,
        "memes": memes,
    }


def _scored_memes(session, spec: str, result) -> dict | None:
    """{"ids", "captions"} of the memes `result` scored, in its order (the dataset's memes labelled for its task, as
    the engine reads them); None from a session that cannot name them (one rebuilt from results alone)."""
    if getattr(session, "dataset", None) is None or result.task is None:
        return None
    scored = session.dataset(spec).labelled(result.task).memes
    if len(scored) != len(result.y_true):
        return None
    return {"ids": [m.id for m in scored], "captions": [m.text for m in scored]}


def baseline_memes(data: dict, model: str, spec: str) -> tuple[list[str], list[str] | None]:
    """(ids, captions) of the memes of `model` on `spec` in the results' order: as saved, or for a baseline saved
    without them (older versions) the row index as id and no captions."""
    named = data.get("memes", {}).get(model, {}).get(spec)
    if named is not None:
        return list(named["ids"]), list(named["captions"])
    n = len(next(iter(data["results"][model][spec].values()))["y"])
    return [str(i) for i in range(n)], None


def save_baseline(session, path: Path, write: Callable[[str], object] | None = None) -> dict:
    """Write the baseline and say so through `write` (e.g. `terminal_line(config)`): a baseline saved without a word
    is easily compared against the wrong file later. Returns what was saved."""
    data = baseline_data(session)
    atomic_write_text(Path(path), json.dumps(data) + "\n")
    if write is not None:
        write(baseline_saved_line(path, data))
    return {"path": Path(path), "conditions": _count_conditions(data), "models": list(data["results"]),
            "datasets": list(data["datasets"]), "seed": data["seed"]}


def terminal_line(config) -> Callable[[str], None]:
    """A writer of whole lines on pytest's terminal, for `save_baseline(..., write=terminal_line(session.config))`
    in pytest_sessionfinish: after -q's progress dots it starts a new line first; without the terminal plugin it
    prints."""
    if config.pluginmanager.get_plugin("terminalreporter") is None:
        return print
    writer = config.get_terminal_writer()

    def write(line: str) -> None:
        if writer.width_of_current_line:
            writer.line()
        writer.line(line)

    return write


def _count_conditions(data: dict) -> int:
    return sum(len(by_condition) for by_spec in data["results"].values() for by_condition in by_spec.values())


def baseline_saved_line(path, data: dict) -> str:
    """One line naming the file and what it holds, for the end of the run that saved it."""
    n = _count_conditions(data)
    models, specs = list(data["results"]), list(data["datasets"])
    memes = sorted({len(cell["y"]) for by_spec in data["results"].values() for by_condition in by_spec.values()
                    for cell in by_condition.values()})
    return (f"memerobust: baseline saved to {path}: {n} condition{'s' * (n != 1)} of "
            f"{len(models)} model{'s' * (len(models) != 1)} ({', '.join(models)}) on {', '.join(specs) or '-'} "
            f"({'/'.join(map(str, memes)) or 0} memes), seed {data['seed']}")


def read_json(path: Path, what: str):
    """The JSON in `path`, or a ConfigError naming the file and what is wrong (missing, unreadable, not JSON)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{what} {path}: no such file") from None
    except IsADirectoryError:
        raise ConfigError(f"{what} {path}: is a folder, not a JSON file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read {what} {path}: {getattr(exc, 'strerror', None) or exc}") from None
    if not text.strip():
        raise ConfigError(f"{what} {path} is empty")
    try:
        return json.loads(text)
    except RecursionError:  # arrays nested thousands deep: no file this tool writes
        raise ConfigError(f"{what} {path} nests its JSON too deeply to be one this tool wrote") from None
    except ValueError as exc:
        ends = getattr(exc, "pos", -1) >= len(text.rstrip()) or str(exc).startswith("Unterminated")
        hint = " (truncated?)" if ends else ""
        raise ConfigError(f"{what} {path} is not valid JSON{hint}: {exc}") from None


def load_baseline(path: Path) -> dict:
    data = read_json(path, "baseline")
    if isinstance(data, dict) and data.get("tool") == "pytest-memerobust":
        raise ConfigError(f"{path} is a pytest-memerobust report, not a baseline: save a baseline with "
                          f"--memerobust-save-baseline=PATH")
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        found = f"a JSON {type(data).__name__}" if not isinstance(data, dict) else f"format {data.get('format')!r}"
        raise ConfigError(f"{path} is not a pytest-memerobust baseline (format {FORMAT!r}); it holds {found}")
    _check_shape(path, data)
    return data


def _check_shape(path, data: dict) -> None:
    """Every key the gate and `compare` read, with its type, so a damaged baseline is named rather than a
    traceback."""
    for key, kind in (("seed", int), ("versions", dict), ("datasets", dict), ("results", dict)):
        if not isinstance(data.get(key), kind):
            raise ConfigError(f"baseline {path}: {key!r} is missing or not a JSON {_JSON_NAMES[kind]}")
    for model, by_spec in data["results"].items():
        for spec, by_condition in (by_spec.items() if isinstance(by_spec, dict) else [(None, by_spec)]):
            for condition, cell in (by_condition.items() if isinstance(by_condition, dict) else [(None, None)]):
                ok = isinstance(cell, dict) and all(isinstance(cell.get(k), list) for k in ("y", "clean", "perturbed"))
                if not ok or not len(cell["y"]) == len(cell["clean"]) == len(cell["perturbed"]):
                    where = "/".join(str(k) for k in (model, spec, condition) if k is not None)
                    raise ConfigError(f"baseline {path}: results/{where} is not a condition entry (lists 'y', "
                                      f"'clean' and 'perturbed' of one length per meme)")
    _check_memes(path, data)


def _check_memes(path, data: dict) -> None:
    """The optional `memes` block (ids and captions per model and dataset): one string each per meme of the
    results it names."""
    memes = data.get("memes", {})
    if not isinstance(memes, dict) or not all(isinstance(v, dict) for v in memes.values()):
        raise ConfigError(f"baseline {path}: 'memes' is not a JSON object of model -> dataset -> ids and captions")
    for model, by_spec in memes.items():
        for spec, named in by_spec.items():
            sizes = {len(cell["y"]) for cell in data["results"].get(model, {}).get(spec, {}).values()}
            ok = isinstance(named, dict) and all(
                isinstance(named.get(k), list) and all(isinstance(v, str) for v in named[k]) and
                {len(named[k])} == sizes for k in ("ids", "captions"))
            if not ok:
                raise ConfigError(f"baseline {path}: memes/{model}/{spec} is not a memes entry (lists 'ids' and "
                                  f"'captions' of strings, one per meme of results/{model}/{spec})")


_JSON_NAMES = {int: "integer", dict: "object"}


def comparable(baseline: dict, *, seed: int, dataset_spec: str | None, dataset_fingerprint: str | None,
               versions: dict, baseline_name: str = "baseline", current_name: str = "this run") -> None:
    """Refuse a comparison that would be meaningless, saying which fact differs."""
    if baseline["seed"] != seed:
        raise ConfigError(f"{baseline_name} was made with seed {baseline['seed']}, {current_name} uses {seed}: "
                          "perturbations differ, so the comparison is refused")
    made = baseline["datasets"].get(dataset_spec)
    if made is not None and made != dataset_fingerprint:
        raise ConfigError(f"{baseline_name} was made on other data for {dataset_spec!r} (dataset fingerprint "
                          f"{str(made)[:12]}, {current_name} {str(dataset_fingerprint)[:12]}): "
                          "the comparison is refused")
    for name in _VERSIONED:
        if baseline["versions"].get(name) != versions.get(name):
            raise ConfigError(f"{baseline_name} was made with {name} {baseline['versions'].get(name)}, "
                              f"{current_name} has {versions.get(name)}: perturbation definitions may differ, "
                              "the comparison is refused")


def refuse_incomparable(before: dict, after: dict, names=("baseline A", "baseline B")) -> None:
    """`comparable` between two saved baselines, for every dataset of the later one: the same refusals as the
    pytest gate."""
    for spec in after["datasets"] or [None]:
        comparable(before, seed=after["seed"], dataset_spec=spec, dataset_fingerprint=after["datasets"].get(spec),
                   versions=after["versions"], baseline_name=str(names[0]), current_name=str(names[1]))


def correct(y, proba) -> np.ndarray:
    """Per meme, whether the prediction is right: the argmax class; multi-label, every label at the threshold."""
    y, proba = np.asarray(y), np.asarray(proba, dtype=np.float64)
    if y.ndim == 2:
        return ((proba >= metrics.MULTILABEL_THRESHOLD) == (y == 1)).all(axis=1)
    return proba.argmax(axis=1) == y


def compare_headers(check: RegressionCheck = DEFAULT_CHECKS[0], confidence: float = 0.95) -> list[str]:
    short = check.short_label()
    return ["model", "data", "condition", f"{short} A", f"{short} B", f"Δ {short} (B - A)",
            f"Δ {short} {confidence:.0%} CI", "McNemar p (B vs A)", "verdict"]


def paired_cells(before: dict, after: dict, names=("baseline A", "baseline B")):
    """(model, dataset, condition, before's entry, after's entry) for every condition in both baselines, in the
    later one's order, after the gate's refusals: incomparable baselines, and other memes or labels in a cell."""
    refuse_incomparable(before, after, names)
    for model, by_spec in after["results"].items():
        for spec, by_condition in by_spec.items():
            for condition, now in by_condition.items():
                then = before["results"].get(model, {}).get(spec, {}).get(condition)
                if then is None:
                    continue
                ids = [data.get("memes", {}).get(model, {}).get(spec, {}).get("ids") for data in (before, after)]
                if then["y"] != now["y"] or (None not in ids and ids[0] != ids[1]):
                    raise ConfigError(f"{names[0]} and {names[1]} hold other memes or labels for {model} on "
                                      f"{spec!r} ({condition}): the comparison is refused")
                yield model, spec, condition, then, now


def compare_rows(before: dict, after: dict, check: RegressionCheck = DEFAULT_CHECKS[0], *,
                 names=("baseline A", "baseline B"), confidence: float = 0.95, **options) -> list[list]:
    """Side by side, per model, dataset and condition in both baselines (columns: `compare_headers`): the checked
    score before and after, the paired difference with its bootstrap interval, McNemar's exact p-value of the
    memes one gets right and the other wrong (perturbed predictions), and whether it counts as a regression.
    Baselines that the gate would not compare are refused the same way."""
    rows = []
    for model, spec, condition, then, now in paired_cells(before, after, names):
        if condition == "clean" and check.kind != "metric":
            continue
        d = check.difference(now, then, confidence=confidence, **options)
        p = metrics.mcnemar_p_value(correct(then["y"], then["perturbed"]), correct(now["y"], now["perturbed"]))
        rows.append([model, spec, condition, f"{d.before:.4f}", f"{d.now:.4f}", f"{d.value:+.4f}",
                     f"[{d.low:+.4f}, {d.high:+.4f}]", f"{p:.3g}",
                     "REGRESSED" if check.verdict(d, confidence) else "ok"])
    if not rows:
        raise ConfigError(f"{names[0]} and {names[1]} share no model, dataset and condition to compare "
                          f"({check.label()})")
    return rows
