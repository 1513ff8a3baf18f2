"""The baseline file format: what a run saves for a later run to be gated against (`--memerobust-save-baseline`),
read back and checked before any case runs, and paired with a later run or baseline condition by condition.

A baseline holds, per model, dataset and condition, every meme's labels and probabilities (clean and perturbed,
`baseline_cell`) plus what makes a comparison meaningful: dataset fingerprint, seed, memes limit, task, model card
and perturbation-library versions. A baseline that does not match is refused naming the field (`refuse_mismatch`),
and a damaged one is named as the file's fault (`load_baseline`). The judging itself is judge/gate.py's, on the
plain cells this module hands it.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np

from ..errors import ConfigError


FORMAT = "pytest-memerobust-baseline/1"
VERSIONED = ("pytest-memerobust", "imagecorruptions", "textattack")  # what defines the perturbations


BASELINE_DECIMALS = 6  # probabilities are saved, and compared, at this precision


def baseline_cell(result) -> dict:
    """A condition's entry in a baseline (and the current run's side of a comparison, rounded alike, so an
    unchanged checkpoint compares equal to its own baseline to the last digit)."""
    cell = {"y": result.y_true.tolist(), "clean": np.round(result.proba_clean, BASELINE_DECIMALS).tolist(),
            "perturbed": np.round(result.proba, BASELINE_DECIMALS).tolist()}
    sides = (getattr(result, "abstained_clean", None), getattr(result, "abstained", None))
    declined = [np.asarray(a, bool) for a in sides if a is not None]
    if declined:  # a detector that can decline: the memes it declined clean or under the condition
        cell["declined"] = np.logical_or.reduce(declined).tolist()
    return cell


def card_digest(card: dict) -> str:
    """What defines a detector apart from its weights: a changed architecture, backbone or classes makes a
    comparison meaningless; another checkpoint is what the gate is for."""
    keep = ("architecture", "classes", "task", "multilabel", "params", "backbone", "text_backbone")
    text = json.dumps({k: card.get(k) for k in keep}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


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
                where = "/".join(str(k) for k in (model, spec, condition) if k is not None)
                if not ok or not len(cell["y"]) == len(cell["clean"]) == len(cell["perturbed"]):
                    raise ConfigError(f"baseline {path}: results/{where} is not a condition entry (lists 'y', "
                                      f"'clean' and 'perturbed' of one length per meme)")
                _check_cell_values(path, where, cell)
    _check_memes(path, data)


PROBABILITY_SUM_TOLERANCE = 1e-3  # a single-label row's probabilities sum to 1 within this (saved at 6 decimals)


def _numbers(value) -> bool:
    """A JSON number, or a list (of lists) of them: not a string ("0.5" would be read as 0.5), not true/false."""
    if isinstance(value, list):
        return all(map(_numbers, value))
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _check_cell_values(path, where: str, cell: dict) -> None:
    """Probabilities that are numbers in 0..1, one row of the same classes per meme, summing to 1 for a single-label
    task; labels that are integers, one class index per meme within those classes (or one 0/1 per class,
    multi-label); a NaN or a string in a baseline is the file's fault, not the model's. `declined`, when present, is
    one true/false per meme."""
    for key in ("y", "clean", "perturbed"):
        if not _numbers(cell[key]):
            raise ConfigError(f"baseline {path}: results/{where}/{key} holds values that are not JSON numbers (a "
                              "string or true/false): the file is damaged; save the baseline again")
    try:
        proba = np.asarray([cell["clean"], cell["perturbed"]], dtype=np.float64)
        labels = np.asarray(cell["y"], dtype=np.float64)
    except (TypeError, ValueError):
        raise ConfigError(f"baseline {path}: results/{where} holds rows of unequal length") from None
    if proba.ndim != 3 or proba.shape[2] < 2 or labels.ndim not in (1, 2) or (
            labels.ndim == 2 and labels.shape[1] != proba.shape[2]):
        raise ConfigError(f"baseline {path}: results/{where} has the wrong shape: 'clean' and 'perturbed' must hold "
                          f"one row of 2 or more class probabilities per meme and 'y' one label per meme (got "
                          f"probabilities of shape {proba.shape[1:]}, labels of shape {labels.shape})")
    bad = np.argwhere(~np.isfinite(proba) | (proba < 0) | (proba > 1))
    if bad.size:
        side, meme = ("clean", "perturbed")[bad[0][0]], int(bad[0][1])
        value = float(proba[tuple(bad[0])])
        raise ConfigError(f"baseline {path}: results/{where}/{side}[{meme}] holds {value!r}, not a probability in "
                          "0..1: the file is damaged; save the baseline again")
    if not np.all(np.isfinite(labels) & (labels == np.round(labels))):
        raise ConfigError(f"baseline {path}: results/{where}/y holds a label that is not an integer")
    top = proba.shape[2] if labels.ndim == 1 else 2  # a class index, or multi-label 0/1
    outside = labels[(labels < 0) | (labels >= top)]
    if outside.size:
        raise ConfigError(f"baseline {path}: results/{where}/y holds label {int(outside[0])}, not one of the {top} "
                          f"{'classes' if labels.ndim == 1 else 'values 0 and 1'} of its rows")
    sums = proba.sum(axis=2)
    off = np.argwhere(np.abs(sums - 1) > PROBABILITY_SUM_TOLERANCE) if labels.ndim == 1 else np.empty((0, 2))
    if off.size:
        side, meme = ("clean", "perturbed")[off[0][0]], int(off[0][1])
        raise ConfigError(f"baseline {path}: results/{where}/{side}[{meme}] sums to {float(sums[tuple(off[0])]):g}, "
                          f"not 1 (within {PROBABILITY_SUM_TOLERANCE:g}): a single-label meme's class probabilities "
                          "sum to 1; the file is damaged; save the baseline again")
    declined = cell.get("declined")
    if declined is not None and not (isinstance(declined, list) and len(declined) == len(cell["y"])
                                     and all(isinstance(v, bool) for v in declined)):
        raise ConfigError(f"baseline {path}: results/{where}/declined is not one true/false per meme")


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


_RUN_VOICE = {  # the pytest gate: a baseline file against this run's options
    "seed": "{baseline} was made with --memerobust-seed={made}, {current} uses {now}: the perturbations differ; save a "
            "new baseline or pass the same seed",
    "limit": "{baseline} was made with {made_limit}, {current} with {now_limit}: the memes differ; pass the same "
             "--memerobust-limit",
    "data": "{baseline} was made on other data for --memerobust-data={spec} (dataset fingerprint {made:.12}, "
            "{current} {now:.12}): the memes differ",
    "version": "{baseline} was made with {name} {made}, {current} has {now}: perturbation definitions may differ; "
               "save a new baseline",
}
_FILES_VOICE = {  # `memerobust compare` and the flip ledger: one saved baseline against another
    "seed": "{baseline} was made with seed {made}, {current} uses {now}: perturbations differ, so the comparison is "
            "refused",
    "limit": "{baseline} was made with --memerobust-limit={made}, {current} with --memerobust-limit={now}: the memes "
             "differ, the comparison is refused",
    "data": "{baseline} was made on other data for {spec!r} (dataset fingerprint {made:.12}, {current} {now:.12}): "
            "the comparison is refused",
    "version": "{baseline} was made with {name} {made}, {current} has {now}: perturbation definitions may differ, the "
               "comparison is refused",
}
_UNSET = object()


def _limit_option(limit) -> str:
    return f"--memerobust-limit={limit}" if limit else "no --memerobust-limit (every meme)"


def refuse_mismatch(baseline: dict, *, seed: int, versions: dict, fingerprints: dict | None = None, limit=_UNSET,
                    cases=None, labels: dict | None = None, names=("baseline", "this run"), run: bool = True) -> None:
    """Refuse a comparison that would be meaningless, naming the fact that differs: the seed, the memes limit, the
    data (`fingerprints`: dataset spec -> the other side's fingerprint; by default those of the cases on data the
    baseline holds for their model), then per case (`cases`: (model, dataset
    spec, task, card digest, dataset fingerprint) of a run's cases) the task, the model card and the memes' labels
    (`labels`: (model, spec) -> the run's labels, as lists; a baseline whose labels differ, hand-edited or flipped,
    would fail every case it holds), a baseline sharing no model and dataset with the cases (the gate would compare
    nothing and pass), and the perturbation libraries' versions. `names` are (the baseline, the other side); `run`
    says whether the other side is a pytest run (its messages name the options to pass) or a saved baseline."""
    voice = _RUN_VOICE if run else _FILES_VOICE
    where, current = names

    def refuse(fact: str, **values) -> None:
        raise ConfigError(voice[fact].format(baseline=where, current=current, **values))

    if baseline["seed"] != seed:
        refuse("seed", made=baseline["seed"], now=seed)
    made_limit = baseline.get("run", {}).get("limit", _UNSET)
    if _UNSET not in (made_limit, limit) and made_limit != limit:
        refuse("limit", made=made_limit, now=limit, made_limit=_limit_option(made_limit),
               now_limit=_limit_option(limit))
    if fingerprints is None:
        fingerprints = {spec: fingerprint for model, spec, *_, fingerprint in cases or ()
                        if spec in baseline["results"].get(model, {})}
    for spec, fingerprint in fingerprints.items():
        made = baseline["datasets"].get(spec)
        if made is not None and made != fingerprint:
            refuse("data", spec=spec, made=str(made), now=str(fingerprint))
    if cases is not None:
        _refuse_other_cases(baseline, cases, labels or {}, where)
    for name in VERSIONED:
        if baseline["versions"].get(name) != versions.get(name):
            refuse("version", name=name, made=baseline["versions"].get(name), now=versions.get(name))


def _refuse_other_cases(baseline: dict, cases, labels: dict, where: str) -> None:
    """The per-case refusals of `refuse_mismatch` for a run: task, model card, labels, and nothing shared."""
    run, shared = baseline.get("run", {}), 0
    for model, spec, task, card, _ in cases:
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
        y = labels.get((model, spec))
        differ = [c for c, cell in baseline["results"][model][spec].items() if y is not None and cell["y"] != y]
        if differ:
            cell = baseline["results"][model][spec][differ[0]]["y"]
            first = next((i for i, (a, b) in enumerate(zip(cell, y)) if a != b), min(len(cell), len(y)))
            raise ConfigError(f"{where} holds other labels for {model} on {spec!r} than this run's data "
                              f"({len(differ)} condition{'s' * (len(differ) != 1)}, first {differ[0]}: "
                              f"{len(cell)} labels against {len(y)}, the first difference at meme {first}): it was "
                              "not made on these memes, or was edited; save a new baseline")
    if cases and not shared:
        held = sorted({f"{m} on {s}" for m, by_spec in baseline["results"].items() for s in by_spec})
        tested = sorted({f"{m} on {s}" for m, s, *_ in cases})
        raise ConfigError(f"{where} holds {', '.join(held) or 'nothing'}; this run tests {', '.join(tested)}: "
                          "nothing to compare (--memerobust-model or --memerobust-data differ)")


def refuse_incomparable(before: dict, after: dict, names=("baseline A", "baseline B")) -> None:
    """`refuse_mismatch` between two saved baselines, over every dataset of the later one: the same refusals as the
    pytest gate."""
    refuse_mismatch(before, seed=after["seed"], versions=after["versions"],
                    fingerprints={spec: after["datasets"].get(spec) for spec in after["datasets"]},
                    limit=after.get("run", {}).get("limit", _UNSET), names=tuple(map(str, names)), run=False)


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


def baseline_memes(data: dict, model: str, spec: str) -> tuple[list[str], list[str] | None]:
    """(ids, captions) of the memes of `model` on `spec` in the results' order: as saved, or for a baseline saved
    without them (older versions) the row index as id and no captions."""
    named = data.get("memes", {}).get(model, {}).get(spec)
    if named is not None:
        return list(named["ids"]), list(named["captions"])
    n = len(next(iter(data["results"][model][spec].values()))["y"])
    return [str(i) for i in range(n)], None


def condition_name(model: str, spec: str, condition: str) -> str:
    """How the gate names a condition it cannot compare: `model on spec: condition`."""
    return f"{model} on {spec}: {condition}"


def baseline_condition_names(data: dict) -> list[str]:
    """Every condition a baseline holds, by `condition_name`."""
    return [condition_name(m, s, c) for m, by_spec in data["results"].items() for s, by_c in by_spec.items()
            for c in by_c]


def baseline_entry(data: dict, model: str, spec: str, condition: str) -> dict | None:
    """The baseline's cell of `model` on `spec` under `condition`, or None when it holds none."""
    return data["results"].get(model, {}).get(spec, {}).get(condition)


def unmatched_conditions(before: dict, after: dict) -> tuple[list[str], list[str]]:
    """(conditions in `after` but not in `before`, conditions in `before` but not in `after`), as
    `model on dataset: condition`: what the gate cannot compare, named rather than silently skipped."""
    made, run = baseline_condition_names(before), baseline_condition_names(after)
    return [k for k in run if k not in set(made)], [k for k in made if k not in set(run)]


def flip_ledger_of(before: dict, after: dict, names=("baseline A", "baseline B")) -> dict:
    """The flip ledger (judge/ledger.py) of two loaded baselines (`before` = the old checkpoint, `after` = the
    candidate), after the gate's refusals. Memes are named by the ids saved with the baseline, or by row index in
    baselines saved without them (then `caption` is None)."""
    from ..judge.ledger import flip_ledger

    def named(model, spec, condition, then, now):
        ids, captions = baseline_memes(after, model, spec)
        if captions is None:
            ids, captions = baseline_memes(before, model, spec)
        return model, spec, condition, then, now, ids, captions

    pairs = [named(*pair) for pair in paired_cells(before, after, names)]
    return flip_ledger(pairs, names, models={"before": before.get("models", {}), "after": after.get("models", {})})


def read_report(path: Path) -> dict:
    """The JSON report at `path` (as --memerobust-report=FILE.json writes), or a ConfigError naming the file and
    what it holds instead (a baseline, another JSON, another format). A partial report (an interrupted run's) is
    returned as it is: its `partial` says why its numbers are missing. Here, beside the baseline format, so a
    baseline given where a report is expected is named as one."""
    from ..report import REPORT_FORMAT

    report = read_json(path, "report")
    if isinstance(report, dict) and report.get("format") == FORMAT:
        raise ConfigError(f"{path} is a baseline, not a report: compare two baselines with `memerobust compare A B`")
    if not (isinstance(report, dict) and report.get("tool") == "pytest-memerobust"
            and isinstance(report.get("groups"), list)):
        found = f"a JSON {type(report).__name__}" if not isinstance(report, dict) else "another JSON object"
        raise ConfigError(f"{path} is not a pytest-memerobust report (as --memerobust-report=FILE.json writes); "
                          f"it holds {found}")
    if report.get("format") != REPORT_FORMAT:
        raise ConfigError(f"{path} is a pytest-memerobust report of format {report.get('format')!r}; this version "
                          f"reads format {REPORT_FORMAT}: render it with the version that wrote it")
    return report
