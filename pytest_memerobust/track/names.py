"""The names a run's numbers take in an experiment tracker, read off the finished report (the JSON's dict), the same
for MLflow and W&B, so that one run compares with the next by name.

A figure's name is `<model>/<dataset>/<condition>/<figure>`, e.g. `memeblip2-tda/demo/typos-3/accuracy`,
`.../typos-3/accuracy_ci_low`, `.../typos-3 x uap-3/flip_rate`; the run's verdict is under `verdict/`, the gate's
comparison under `gate/` and `<model>/<dataset>/<condition>/gate_<rule>_...`. The `/` is a section in both trackers'
UIs. Names use only what MLflow allows in a key (letters, digits, `_ - . / space :`), at most 250 characters:
- the model is its label in the report (`demo:text`), the dataset its loader's name (`pridemm:test`, machine
  independent: the spec's folder is not part of it); a generic csv/jsonl file, which any dataset may be, adds its
  file's name without the suffix (`csv:/data/hateful_dev.csv:test` -> `csv-hateful_dev:test`), so two files log to
  one experiment under names of their own; the spec itself where two of the run's datasets still share a name;
- a condition id maps as the case's pytest name does: each side `text=NAME@S` / `image=NAME@S` / `prompt=NAME@S`
  becomes `NAME-S` (a perturbation's name belongs to one modality), `defence=A,B` becomes `defence-A_B`,
  `from=MODEL` `from-MODEL`, and the sides are joined by ` x ` (a perturbation name has no space, so two conditions
  never share a name): `text=typos@3+image=uap@3` -> `typos-3 x uap-3`;
- any other character outside the alphabet becomes `_`, a part that would read as a path step (`.`, `..`) or is empty
  becomes `_`, and a name over 250 characters keeps its first 240 and a digest of the whole.
A figure whose value is missing or not finite (NaN: undefined, e.g. the AUROC of one class) is left out, not logged as
NaN; a condition several suites share is one result and is named once (no suite in the name). `:` is kept: MLflow
refuses it in keys on Windows clients only."""
from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

from ..report.outline import finite
from ..judge.results import METRIC_NAMES as METRICS
MAX_KEY = 250  # MLflow's limit on a metric's or param's name
_OUTSIDE = re.compile(r"[^A-Za-z0-9_\-. :]")  # `/` separates a name's parts, so a part may not hold one
JOIN = " x "  # between a condition's sides: `typos-3 x uap-3`
COUNTS = (("cases", "cases"), ("pass", "pass"), ("fail for sure", "fail_for_sure"),
          ("fail within noise", "fail_within_noise"), ("skipped", "skipped"), ("failed", "failed"),
          ("error", "error"), ("regressed", "regressed"))  # verdict["models"] counts -> their figure names


def key_part(text) -> str:
    """One part of a name: characters outside the alphabet as `_`; never empty nor a path step."""
    part = _OUTSIDE.sub("_", str(text)).strip()
    return "_" if part in ("", ".", "..") else part


def fit(name: str) -> str:
    """A name within MAX_KEY characters: a longer one keeps its start and a digest of the whole (still unique)."""
    if len(name) <= MAX_KEY:
        return name
    return name[:MAX_KEY - 10] + "-" + hashlib.sha256(name.encode()).hexdigest()[:9]


def condition_key(condition_id: str) -> str:
    """`text=typos@3+image=uap@3` -> `typos-3 x uap-3` (the module's docstring gives the whole mapping)."""
    if condition_id == "clean":
        return "clean"
    sides = []
    for side in str(condition_id).split("+"):
        what, _, value = side.partition("=")
        if what in ("text", "image", "prompt"):
            name, _, severity = value.partition("@")
            sides.append(f"{name}-{severity}" if severity else name)
        elif what == "defence":
            sides.append("defence-" + value.replace(",", "_"))
        elif what == "from":
            sides.append("from-" + value)
        else:
            sides.append(side)
    return JOIN.join(key_part(s) for s in sides)


def metric_name(*parts) -> str:
    """`metric_name("memeblip2-tda", "demo", "typos-3", "accuracy")` -> `memeblip2-tda/demo/typos-3/accuracy`."""
    return fit("/".join(key_part(p) for p in parts))


def model_labels(report: dict) -> dict[str, str]:
    """Model name -> how the run's names call it (the report's label: a card given by path goes by its name)."""
    labels = {g["model"]: g.get("label") or g["model"] for g in report.get("groups") or []}
    for name in report.get("models") or {}:
        labels.setdefault(name, name)
    return labels


GENERIC_LOADERS = ("csv", "jsonl")  # data/loaders.py's loaders of any dataset: their name says not which


def dataset_name(spec: str, name: str) -> str:
    """A dataset's name in the run's names: `name` (its loader's: `pridemm:test`), with a generic loader's file
    name (without its suffix) after the loader's: `csv:/data/hateful_dev.csv:test` -> `csv-hateful_dev:test`. Read
    off the spec's text alone (the same on every machine, whether the file is there or not)."""
    loader, _, split = name.partition(":")
    if loader not in GENERIC_LOADERS:
        return name
    path = spec.removeprefix(f"{loader}:")
    if split:
        path = path.removesuffix(f":{split}")
    stem = re.split(r"[\\/]", path)[-1]
    stem = stem[: -len(Path(stem).suffix)] if Path(stem).suffix else stem
    return f"{loader}-{stem}" + (f":{split}" if split else "") if stem else name


def dataset_keys(report: dict) -> dict[str, str]:
    """Dataset spec -> its name in the run's names (`dataset_name`), or the spec where two share a name."""
    datasets = report.get("datasets") or {}
    specs = list(dict.fromkeys([*datasets, *(g["dataset"] for g in report.get("groups") or [])]))
    names = {spec: dataset_name(spec, (datasets.get(spec) or {}).get("name") or spec) for spec in specs}
    shared = {n for n in names.values() if list(names.values()).count(n) > 1}
    return {spec: spec if name in shared else name for spec, name in names.items()}


def figures(report: dict) -> list[dict]:
    """Every figure of the report's conditions, in the report's order, each once: {"model", "dataset",
    "condition" (its id), "metric", "value", "ci_low", "ci_high"} (the bounds None where the report has no
    interval); values are finite (others left out). The W&B table's rows, and the metrics' source."""
    labels, datasets = model_labels(report), dataset_keys(report)
    out, seen = [], set()

    def add(result, metric, value, ci=None):
        value = finite(value)
        key = (result["model"], result["dataset"], result["condition"], metric)
        if value is None or key in seen:
            return
        seen.add(key)
        low, high = (finite(ci[0]), finite(ci[1])) if ci else (None, None)
        out.append({"model": labels.get(result["model"], result["model"]),
                    "dataset": datasets.get(result["dataset"], result["dataset"]), "condition": result["condition"],
                    "metric": metric, "value": value, "ci_low": low, "ci_high": high})

    for group in report.get("groups") or []:
        for result in [group["clean"], *group.get("results", [])] if group.get("clean") else group.get("results", []):
            cis = result.get("metrics_ci") or {}
            for m in METRICS:
                add(result, m, (result.get("metrics") or {}).get(m), cis.get(m))
            sampled = result.get("sampling") or {}  # a repeat-sampled detector's figures (judge/sampling.py)
            for name, value in sampled.items():
                if not name.endswith("_ci") and name != "k":
                    add(result, f"sampling_{name}", value, sampled.get(f"{name}_ci"))
            if result.get("kind") == "clean":
                continue
            clean, rel = result.get("clean_metrics") or {}, result.get("relative_robustness") or {}
            for m in METRICS:
                now, before = finite((result.get("metrics") or {}).get(m)), finite(clean.get(m))
                add(result, f"{m}_clean", before)  # the clean figure this condition's drop is measured from
                add(result, f"{m}_drop", before - now if before is not None and now is not None else None)
                add(result, f"{m}_relative_robustness", rel.get(m), (result.get("relative_robustness_ci") or {})
                    .get(m))
            add(result, "flip_rate", result.get("flip_rate"), result.get("flip_rate_ci"))
            add(result, "abstention_rate", result.get("abstention_rate"))
            add(result, "abstention_increase", result.get("abstention_increase"), result.get("abstention_increase_ci"))
    return out


def _interval_names(base: str, row: dict) -> dict[str, float]:
    out = {base: row["value"]}
    if row.get("ci_low") is not None:
        out[base + "_ci_low"] = row["ci_low"]
    if row.get("ci_high") is not None:
        out[base + "_ci_high"] = row["ci_high"]
    return out


def verdict_metrics(report: dict) -> dict[str, float]:
    """The run's verdict: passed (1/0), the cases' counts over every model (and per model under `<model>/verdict/`),
    and the cases that raised errors."""
    verdict = report.get("verdict")
    if not isinstance(verdict, dict):
        return {}
    labels = model_labels(report)
    out: dict[str, float] = {}
    if verdict.get("passed") is not None:
        out["verdict/passed"] = float(bool(verdict["passed"]))
    models = verdict.get("models") or []
    for count, name in COUNTS:
        out[f"verdict/{name}"] = float(sum(m.get(count) or 0 for m in models))
    out["verdict/errors"] = float(len(verdict.get("errors") or []))
    for m in models:
        for count, name in COUNTS:
            out[metric_name(labels.get(m["model"], m["model"]), "verdict", name)] = float(m.get(count) or 0)
    return out


def gate_metrics(report: dict) -> dict[str, float]:
    """The gate's comparison when the run was gated: conditions compared, regressed (clean among them: 1/0) and
    improved, and per condition and rule the difference from the baseline with its interval and whether it regressed
    or improved beyond noise."""
    baseline = (report.get("verdict") or {}).get("baseline")
    if not isinstance(baseline, dict):
        return {}
    labels, datasets = model_labels(report), dataset_keys(report)
    out = {f"gate/{name}": float(baseline.get(name) or 0) for name in ("conditions", "regressed", "improved", "rules")}
    out["gate/clean_regressed"] = float(bool(baseline.get("clean_regressed")))
    seen = set()
    # every comparison is in its case's record (the verdict's rows are only the failing and the nearest to failing)
    comparisons = [c for case in report.get("cases") or [] for c in case.get("regressions") or []]
    for c in [*comparisons, *(baseline.get("rows") or [])]:
        key = (c["model"], c["dataset"], c["condition"], c["rule"])
        if key in seen:
            continue
        seen.add(key)
        base = metric_name(labels.get(c["model"], c["model"]), datasets.get(c["dataset"], c["dataset"]),
                           condition_key(c["condition"]), f"gate_{c['rule']}")
        difference, ci = finite(c.get("difference")), c.get("ci") or [None, None]
        if difference is not None:
            out.update(_interval_names(base + "_difference", {"value": difference, "ci_low": finite(ci[0]),
                                                                "ci_high": finite(ci[1])}))
        out[base + "_regressed"] = float(bool(c.get("regressed")))
        out[base + "_improved"] = float(bool(c.get("improved")))
    return {fit(k): v for k, v in out.items()}


def report_metrics(report: dict) -> dict[str, float]:
    """Every metric of the run by its stable name: the conditions' figures, the verdict, the gate's comparison."""
    out: dict[str, float] = {}
    for row in figures(report):
        base = metric_name(row["model"], row["dataset"], condition_key(row["condition"]), row["metric"])
        out.update({fit(k): v for k, v in _interval_names(base, row).items()})
    out.update(verdict_metrics(report))
    out.update(gate_metrics(report))
    return out


def _flat(prefix: str, value, out: dict) -> None:
    if isinstance(value, dict):
        for k, v in value.items():
            _flat(f"{prefix}/{key_part(k)}", v, out)
    elif isinstance(value, (list, tuple)):
        out[fit(prefix)] = json.dumps(list(value), ensure_ascii=False)
    elif value is not None:
        out[fit(prefix)] = value


def report_params(report: dict) -> dict:
    """What the run was: its seed and options, each model's card (flattened: `models/<model>/card/params/map_dim`;
    lists as JSON), checkpoint and its digest, each dataset's size and fingerprint, and the versions. Values as the
    report has them (str, int, float, bool); missing ones (None) left out."""
    labels, datasets = model_labels(report), dataset_keys(report)
    out: dict = {}
    if report.get("seed") is not None:
        out["seed"] = report["seed"]
    _flat("options", report.get("options") or {}, out)
    for name, model in (report.get("models") or {}).items():
        _flat(f"models/{key_part(labels.get(name, name))}", model, out)
    for spec, data in (report.get("datasets") or {}).items():
        _flat(f"datasets/{key_part(datasets.get(spec, spec))}", data, out)
    _flat("versions", report.get("versions") or {}, out)
    return out
