"""Gating checkpoints against a saved baseline: is the new checkpoint worse on the same memes, beyond noise?

A baseline holds, per model and condition, every meme's probabilities (clean and perturbed) plus what makes a
comparison meaningful: dataset fingerprint, seed, memes limit, task, model card and perturbation-library versions.
A baseline that does not match the run is refused before any case runs, naming the field.

The default rules judge, per condition (clean included), the metric itself under the perturbation (accuracy, AUROC,
macro-F1) and the flip rate, each as a paired difference (now - baseline) on the same memes with its bootstrap
interval and a paired test (McNemar's exact test for accuracy and the flip rate, the paired bootstrap for AUROC and
macro-F1). Relative robustness ("loses less than it had") rewards a weaker model, so it is a rule to ask for
(`rel_acc`), never the default. A rule is a regression when the whole interval is on the worse side of zero and the
change is larger than its minimum effect (`--memerobust-fail-on=acc:1%`).
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from . import metrics
from ..atomic import atomic_write_text
from ..errors import ConfigError

FORMAT = "pytest-memerobust-baseline/1"
GATES = ("thresholds", "regressions", "both")
_METRICS = {"acc": "accuracy", "auroc": "auroc", "f1": "macro_f1", "flip": "flip_rate"}
_KINDS = {"rel": "relative", "abs": "absolute", "": "metric"}
_SHORT = {"relative": "rel. ", "absolute": "abs. ", "metric": "", "accuracy": "acc.", "auroc": "AUROC",
          "macro_f1": "macro-F1", "flip_rate": "flip rate"}
_VERSIONED = ("pytest-memerobust", "imagecorruptions", "textattack")  # what defines the perturbations
CLOSEST = 3  # conditions shown beside the regressed ones: those nearest to regressing


def gate_mode(requested: str | None, has_baseline: bool) -> str:
    """What fails the run: the suites' absolute thresholds, regressions against the baseline, or both. Unasked,
    `both` with a baseline and `thresholds` without; `regressions` without a baseline fails nothing (the run that
    saves the baseline)."""
    if requested is not None:
        if requested not in GATES:
            raise ConfigError(f"--memerobust-gate={requested}: expected one of {', '.join(GATES)}")
        return requested
    return "both" if has_baseline else "thresholds"


def gates_thresholds(mode: str) -> bool:
    return mode in ("thresholds", "both")


def gates_regressions(mode: str) -> bool:
    return mode in ("regressions", "both")


@dataclass(frozen=True)
class Comparison:
    """One rule on one condition: the baseline's score and this run's, the paired difference (now - before) with
    its interval, the paired test's p-value (one-sided for McNemar: the exact two-sided test halved toward worse is
    not used; the p is McNemar's two-sided exact p) and whether it counts as a regression."""

    model: str
    dataset: str
    condition: str
    rule: str  # the rule's spec, e.g. "acc", "flip", "rel_acc:1%"
    what: str  # e.g. "accuracy", "flip rate", "relative robustness of accuracy"
    higher_is_better: bool
    before: float
    now: float
    low: float
    high: float
    p_value: float
    test: str  # "McNemar" or "paired bootstrap"
    min_effect: float
    regressed: bool

    @property
    def difference(self) -> float:
        return self.now - self.before

    @property
    def margin(self) -> float:
        """How far the interval is from the worse side of zero: negative when it lies wholly on it (nan last)."""
        edge = self.high if self.higher_is_better else -self.low
        return edge if edge == edge else float("inf")

    def as_dict(self) -> dict:
        d = asdict(self)
        d["difference"], d["ci"] = self.difference, [self.low, self.high]
        del d["low"], d["high"]
        return d

    def __str__(self) -> str:
        worse = "dropped" if self.higher_is_better else "rose"
        state = f"regressed ({worse})" if self.regressed else "no regression"
        return (f"{self.what} {state}: baseline {self.before:.4f} -> now {self.now:.4f} "
                f"(difference {self.difference:+.4f}, CI {self.low:+.4f}..{self.high:+.4f}, {self.test} p "
                f"{self.p_value:.3g}" + (f", allowed {self.min_effect:.4f})" if self.min_effect else ")"))


@dataclass(frozen=True)
class RegressionCheck:
    """`acc:1%` = accuracy under the condition may not fall by more than 1 point beyond noise; `flip` = the flip
    rate may not rise beyond noise; `rel_acc` = relative robustness of accuracy (a secondary rule)."""

    kind: str  # "relative", "absolute" or "metric" (the score under the condition itself)
    metric: str  # accuracy, auroc, macro_f1, flip_rate
    min_effect: float = 0.0

    @classmethod
    def parse(cls, spec: str) -> "RegressionCheck":
        name, _, effect = spec.partition(":")
        prefix, _, short = name.rpartition("_")
        if prefix not in _KINDS or short not in _METRICS or (short == "flip" and prefix):
            raise ValueError(f"bad regression spec {spec!r}: expected acc|auroc|f1|flip[:EFFECT] or "
                             f"rel_|abs_ + acc|auroc|f1, e.g. acc:1%, flip:2% or rel_auroc:0.02")
        try:
            value = float(effect.rstrip("%")) / (100 if effect.endswith("%") else 1) if effect else 0.0
        except ValueError:
            raise ValueError(f"bad effect size in {spec!r}: expected a number or a percentage") from None
        return cls(_KINDS[prefix], _METRICS[short], value)

    @property
    def spec(self) -> str:
        prefix = {"relative": "rel_", "absolute": "abs_", "metric": ""}[self.kind]
        short = {v: k for k, v in _METRICS.items()}[self.metric]
        return f"{prefix}{short}" + (f":{self.min_effect:g}" if self.min_effect else "")

    @property
    def higher_is_better(self) -> bool:
        return self.metric != "flip_rate"

    def applies_to(self, condition_kind: str) -> bool:
        """The clean condition is compared on the metrics themselves (robustness and flips are 0 by definition)."""
        return condition_kind != "clean" or (self.kind == "metric" and self.metric != "flip_rate")

    def label(self) -> str:
        what = {"relative": "relative robustness of ", "absolute": "absolute robustness of ", "metric": ""}[self.kind]
        return f"{what}{self.metric.replace('_', ' ')}"

    def _score(self, y, clean, perturbed, scale):
        if self.metric == "flip_rate":
            from ..results import predicted_labels

            return metrics.flip_rate(predicted_labels(y, clean), predicted_labels(y, perturbed))
        value = metrics.METRICS[self.metric](y, perturbed)
        if self.kind == "metric":
            return value
        base = metrics.METRICS[self.metric](y, clean)
        if self.kind == "relative":
            return metrics.relative_robustness(base, value)
        return metrics.absolute_robustness(base, value, scale)

    def short_label(self) -> str:
        """For table headers: `rel. acc.`, `abs. AUROC`, `macro-F1`, `flip rate`."""
        return _SHORT[self.kind] + _SHORT[self.metric]

    def compare(self, current: dict, baseline: dict, where: tuple[str, str, str] = ("", "", ""), *,
                confidence: float = 0.95, n_resamples: int = 1000, seed: int = 0,
                scale: str = "percent") -> Comparison:
        """Both scores, the paired bootstrap interval of (now - before) over the same memes resampled for both, the
        paired test, and the verdict. Both are {"y": labels, "clean": proba, "perturbed": proba} over the same memes
        in the same order; `where` is (model, dataset, condition)."""
        y = np.asarray(current["y"])
        arrays = [np.asarray(a, dtype=np.float64) for a in (current["clean"], current["perturbed"],
                                                             baseline["clean"], baseline["perturbed"])]

        def difference(yy, cc, cp, bc, bp):
            return self._score(yy, cc, cp, scale) - self._score(yy, bc, bp, scale)

        now, before = self._score(y, *arrays[:2], scale), self._score(y, *arrays[2:], scale)
        samples = metrics.paired_bootstrap_samples(difference, y, *arrays, n_resamples=n_resamples, seed=seed)
        low, high = metrics._percentile_interval(samples, confidence)
        if self.kind == "metric" and self.metric in ("accuracy", "flip_rate"):
            test = "McNemar"
            p = metrics.mcnemar_p_value(*(self._paired_outcomes(y, arrays[i], arrays[i + 1]) for i in (2, 0)))
        else:
            test = "paired bootstrap"
            p = metrics.bootstrap_one_sided_p(samples, 0.0, "min" if self.higher_is_better else "max")
        value = now - before
        worse = high < 0 and value < -self.min_effect if self.higher_is_better else low > 0 and value > self.min_effect
        return Comparison(*where, self.spec, self.label(), self.higher_is_better, float(before), float(now),
                          float(low), float(high), float(p), test, self.min_effect, bool(worse))

    def _paired_outcomes(self, y, clean, perturbed) -> np.ndarray:
        """Per meme, what McNemar pairs: right under the condition (accuracy), or kept its clean prediction (flip
        rate: a meme that flips counts as a failure)."""
        if self.metric == "accuracy":
            return correct(y, perturbed)
        from ..results import predicted_labels

        return predicted_labels(y, clean) == predicted_labels(y, perturbed)


DEFAULT_CHECKS = tuple(RegressionCheck("metric", m) for m in ("accuracy", "auroc", "macro_f1", "flip_rate"))


def compare_condition(now: dict, then: dict, where: tuple[str, str, str], condition_kind: str,
                      checks=DEFAULT_CHECKS, **options) -> list[Comparison]:
    """Every rule that applies to the condition, baseline `then` against `now`."""
    return [check.compare(now, then, where, **options) for check in checks if check.applies_to(condition_kind)]


def summarize(comparisons: list[Comparison], closest: int = CLOSEST) -> dict:
    """The gate's verdict over a run: how many conditions were compared and regressed (and whether clean did), the
    regressed comparisons and the `closest` nearest to regressing, for a side-by-side table."""
    conditions = list(dict.fromkeys((c.model, c.dataset, c.condition) for c in comparisons))
    regressed = list(dict.fromkeys((c.model, c.dataset, c.condition) for c in comparisons if c.regressed))
    clean = [key for key in regressed if key[2] == "clean"]
    n = len(conditions)
    line = f"{len(regressed)} of {n} condition{'s' * (n != 1)} regressed"
    if any(key[2] == "clean" for key in conditions):
        line += ", clean included" if clean else " (clean did not)"
    bad = sorted((c for c in comparisons if c.regressed), key=lambda c: (c.condition != "clean", c.margin))
    regressed_keys = set(regressed)
    nearest: dict[tuple, Comparison] = {}  # per condition that did not regress, its rule nearest to regressing
    for c in comparisons:
        key = (c.model, c.dataset, c.condition)
        if key not in regressed_keys and (key not in nearest or c.margin < nearest[key].margin):
            nearest[key] = c
    near = sorted(nearest.values(), key=lambda c: c.margin)[:closest]
    return {"conditions": n, "regressed": len(regressed), "clean_regressed": bool(clean), "summary": line,
            "rows": [c.as_dict() for c in bad + near]}


def comparison_headers(confidence: float = 0.95) -> list[str]:
    return ["condition", "rule", "base -> now", f"Δ [{confidence:.0%} CI]", "p", "verdict"]


def comparison_rows(rows: list[dict], limit: int | None = None) -> list[list[str]]:
    """`summarize`'s rows (Comparison.as_dict) as table rows for `comparison_headers`, one per condition (its
    rule nearest to, or furthest past, regressing) and at most `limit` of them (`comparison_conditions` counts
    them); the model and dataset prefix the condition when the rows hold more than one."""
    chosen = _by_condition(rows)
    several = len({(r["model"], r["dataset"]) for r in chosen}) > 1
    return [[(f"{r['model']} {r['dataset']} " if several else "") + short_condition(r["condition"]), r["rule"],
             f"{r['before']:.3f} -> {r['now']:.3f}", f"{_signed(r['difference'])} [{_signed(r['ci'][0], 2)}, "
             f"{_signed(r['ci'][1], 2)}]", f"{r['p_value']:.2g}", "REGRESSED" if r["regressed"] else "ok"]
            for r in chosen[:limit]]


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
    """Regressed before not, then the furthest past (or nearest to) the worse side of zero."""
    edge = row["ci"][1] if row["higher_is_better"] else -row["ci"][0]
    return (not row["regressed"], edge if edge == edge else float("inf"))


BASELINE_DECIMALS = 6  # probabilities are saved, and compared, at this precision


def baseline_cell(result) -> dict:
    """A condition's entry in a baseline (and the current run's side of a comparison, rounded alike, so an
    unchanged checkpoint compares equal to its own baseline to the last digit)."""
    return {"y": result.y_true.tolist(), "clean": np.round(result.proba_clean, BASELINE_DECIMALS).tolist(),
            "perturbed": np.round(result.proba, BASELINE_DECIMALS).tolist()}


def card_digest(card: dict) -> str:
    """What defines a detector apart from its weights: a changed architecture, backbone or classes makes a
    comparison meaningless; another checkpoint is what the gate is for."""
    keep = ("architecture", "classes", "task", "multilabel", "params", "backbone", "text_backbone")
    text = json.dumps({k: card.get(k) for k in keep}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def baseline_data(session) -> dict:
    """Everything a later run needs to compare against this one, with the per-meme probabilities, and per model and
    dataset the memes' ids and captions in the results' order (`memes`), so a flip ledger can name the memes; `run`
    holds the facts a gated run must share (limit, task per model and dataset, model cards)."""
    report = session.report()
    results: dict = {}
    memes: dict = {}
    tasks: dict = {}
    for (model, spec, condition), result in session.results.items():
        entry = results.setdefault(model, {}).setdefault(spec, {})
        entry[condition] = baseline_cell(result)
        tasks.setdefault(model, {})[spec] = result.task
        if spec not in memes.get(model, {}) and (named := _scored_memes(session, spec, result)) is not None:
            memes.setdefault(model, {})[spec] = named
    return {
        "format": FORMAT, "seed": report["seed"],
        "versions": {k: report["versions"].get(k) for k in _VERSIONED},
        "datasets": {spec: info["fingerprint"] for spec, info in report["datasets"].items()},
        "models": {name: info["checkpoint_sha256"] for name, info in report["models"].items()},
        "run": {"limit": report.get("options", {}).get("limit"), "tasks": tasks,
                "cards": {name: card_digest(info.get("card", {})) for name, info in report["models"].items()}},
        "results": results,
        "memes": memes,
    }


def check_run(baseline: dict, *, path, seed: int, limit: int | None, cases, versions: dict) -> None:
    """Refuse, before any case runs, a baseline that does not match the run, naming the field: seed, memes limit,
    task, model card, dataset, perturbation versions. `cases` are (model, dataset spec, task, card digest,
    dataset fingerprint) of the run's cases; a baseline that shares no model and dataset with them is refused too
    (the gate would compare nothing and pass)."""
    where = f"baseline {path}"
    if baseline["seed"] != seed:
        raise ConfigError(f"{where} was made with --memerobust-seed={baseline['seed']}, this run uses {seed}: "
                          "the perturbations differ; save a new baseline or pass the same seed")
    run = baseline.get("run", {})
    if "limit" in run and run["limit"] != limit:
        made = f"--memerobust-limit={run['limit']}" if run["limit"] else "no --memerobust-limit (every meme)"
        now = f"--memerobust-limit={limit}" if limit else "no --memerobust-limit (every meme)"
        raise ConfigError(f"{where} was made with {made}, this run with {now}: the memes differ; pass the same "
                          "--memerobust-limit")
    shared = 0
    for model, spec, task, card, fingerprint in cases:
        if spec not in baseline["results"].get(model, {}):
            continue
        shared += 1
        made_task = run.get("tasks", {}).get(model, {}).get(spec)
        if made_task is not None and made_task != task:
            raise ConfigError(f"{where} scored {model} on {spec!r} for task {made_task!r}, this run for {task!r}: "
                              "pass the same --memerobust-task")
        made_card = run.get("cards", {}).get(model)
        if made_card is not None and made_card != card:
            raise ConfigError(f"{where} was made with another model card for {model!r} (architecture, backbone, "
                              "classes or task differ): a baseline compares checkpoints of one detector")
        made_data = baseline["datasets"].get(spec)
        if made_data is not None and made_data != fingerprint:
            raise ConfigError(f"{where} was made on other data for --memerobust-data={spec} (dataset fingerprint "
                              f"{str(made_data)[:12]}, this run {str(fingerprint)[:12]}): the memes differ")
    if cases and not shared:
        held = sorted({f"{m} on {s}" for m, by_spec in baseline["results"].items() for s in by_spec})
        tested = sorted({f"{m} on {s}" for m, s, *_ in cases})
        raise ConfigError(f"{where} holds {', '.join(held) or 'nothing'}; this run tests {', '.join(tested)}: "
                          "nothing to compare (--memerobust-model or --memerobust-data differ)")
    for name in _VERSIONED:
        if baseline["versions"].get(name) != versions.get(name):
            raise ConfigError(f"{where} was made with {name} {baseline['versions'].get(name)}, this run has "
                              f"{versions.get(name)}: perturbation definitions may differ; save a new baseline")


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
    limits = [data.get("run", {}).get("limit", "?") for data in (before, after)]
    if "?" not in limits and limits[0] != limits[1]:
        raise ConfigError(f"{names[0]} was made with --memerobust-limit={limits[0]}, {names[1]} with "
                          f"--memerobust-limit={limits[1]}: the memes differ, the comparison is refused")
    for spec in after["datasets"] or [None]:
        comparable(before, seed=after["seed"], dataset_spec=spec, dataset_fingerprint=after["datasets"].get(spec),
                   versions=after["versions"], baseline_name=str(names[0]), current_name=str(names[1]))


def correct(y, proba) -> np.ndarray:
    """Per meme, whether the prediction is right: the argmax class; multi-label, every label at the threshold."""
    y, proba = np.asarray(y), np.asarray(proba, dtype=np.float64)
    if y.ndim == 2:
        return ((proba >= metrics.MULTILABEL_THRESHOLD) == (y == 1)).all(axis=1)
    return proba.argmax(axis=1) == y


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


def compare_baselines(before: dict, after: dict, checks=DEFAULT_CHECKS, *, names=("baseline A", "baseline B"),
                      **options) -> list[Comparison]:
    """The gate's comparisons of two saved baselines (B = now, A = the baseline), every rule on every condition in
    both: what `memerobust compare` prints. Baselines the gate would not compare are refused the same way."""
    out = []
    for model, spec, condition, then, now in paired_cells(before, after, names):
        kind = "clean" if condition == "clean" else "perturbed"
        out += compare_condition(now, then, (model, spec, condition), kind, checks, **options)
    if not out:
        raise ConfigError(f"{names[0]} and {names[1]} share no model, dataset and condition to compare "
                          f"({', '.join(c.spec for c in checks)})")
    return out
