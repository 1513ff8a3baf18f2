"""The baseline file format: what a run saves for a later run to be gated against (`--memerobust-save-baseline`),
read back and checked before any case runs, and paired with a later run or baseline condition by condition.

A baseline holds, per model (keyed by its card's name, so that another checkpoint of the same card, written
anywhere, is compared with it), dataset and condition, every meme's labels and probabilities (clean and perturbed,
`baseline_cell`) plus what makes a comparison meaningful: dataset fingerprint, seed, memes limit, task, model card
(name, digest and the facts the digest covers) and perturbation-library versions. It may hold several checkpoints of
one recipe (`checkpoints`, and per condition a list of their cells: `merged_baselines`), against whose spread a
candidate is judged. A baseline that does not match is refused naming the field (`refuse_mismatch`), and a damaged
one is named as the file's fault (`load_baseline`). The judging itself is judge/gate.py's, on the plain cells this
module hands it.

Format /2 (this one) keys models by card name, records per checkpoint its digest and path (`checkpoints`), keeps
the card's facts (`run.cards`) and holds a list of cells per condition when it holds several checkpoints. Format /1
files still load: their models keep the key they were saved under (a card's path, for a card given by path), and
their one checkpoint is read from `models`.
"""
from __future__ import annotations

import copy
import hashlib
import json
from pathlib import Path

import numpy as np

from ..data.meme import unlabelled
from ..errors import ConfigError


FORMAT = "pytest-memerobust-baseline/2"
FORMATS_READ = (FORMAT, "pytest-memerobust-baseline/1")
VERSIONED = ("pytest-memerobust", "imagecorruptions", "textattack")  # what defines the perturbations


BASELINE_DECIMALS = 6  # probabilities are saved, and compared, at this precision


def baseline_cell(result) -> dict:
    """A condition's entry in a baseline (and the current run's side of a comparison, rounded alike, so an
    unchanged checkpoint compares equal to its own baseline to the last digit)."""
    answers = result.answers
    cell = {"y": result.memes.y_true.tolist(), "clean": np.round(answers.proba_clean, BASELINE_DECIMALS).tolist(),
            "perturbed": np.round(answers.proba, BASELINE_DECIMALS).tolist()}
    declined = [np.asarray(a, bool) for a in (answers.abstained_clean, answers.abstained) if a is not None]
    if declined:  # a detector that can decline: the memes it declined clean or under the condition
        cell["declined"] = np.logical_or.reduce(declined).tolist()
    return cell


# What defines a detector apart from its weights: a changed architecture, backbone or classes makes a comparison
# meaningless; another checkpoint is what the gate is for. In the order a refusal names the first that differs.
CARD_FACTS = ("architecture", "task", "classes", "multilabel", "backbone", "text_backbone", "params")


def card_digest(card: dict) -> str:
    """A short digest of the card's CARD_FACTS."""
    text = json.dumps({k: card.get(k) for k in CARD_FACTS}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def card_record(card: dict) -> dict:
    """What a baseline keeps of a model card (`ModelCard.as_dict()`): its name, its digest and the facts the digest
    covers, as JSON reads them back, so that a refusal names the fact that differs."""
    facts = json.loads(json.dumps({k: card.get(k) for k in CARD_FACTS}, default=str))
    return {"name": card.get("name"), "digest": card_digest(card), **facts}


def checkpoint_cells(entry) -> list[dict]:
    """A baseline's entry of one condition as its checkpoints' cells: one cell, or the list a recipe holds."""
    return list(entry) if isinstance(entry, list) else [entry]


def baseline_checkpoints(data: dict) -> list[dict]:
    """Per checkpoint the baseline holds, {"models": model -> checkpoint sha256, "paths": model -> checkpoint
    path} (a format /1 baseline: its one checkpoint's digests, no paths)."""
    if "checkpoints" in data:
        return data["checkpoints"]
    return [{"models": dict(data.get("models") or {}), "paths": {}}]


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
    """The baseline at `path`, checked entry by entry (a ConfigError naming the file and the entry otherwise); a
    format /1 baseline is read as it was saved, its one checkpoint listed under `checkpoints`."""
    data = read_json(path, "baseline")
    if isinstance(data, dict) and data.get("tool") == "pytest-memerobust":
        raise ConfigError(f"{path} is a pytest-memerobust report, not a baseline: save a baseline with "
                          f"--memerobust-save-baseline=PATH")
    if not isinstance(data, dict) or data.get("format") not in FORMATS_READ:
        found = f"a JSON {type(data).__name__}" if not isinstance(data, dict) else f"format {data.get('format')!r}"
        raise ConfigError(f"{path} is not a pytest-memerobust baseline (format {FORMAT!r}); it holds {found}")
    if data["format"] != FORMAT:
        data["checkpoints"] = baseline_checkpoints(data)
    _check_shape(path, data)
    return data


def _check_shape(path, data: dict) -> None:
    """Every key the gate and `compare` read, with its type, so a damaged baseline is named rather than a
    traceback."""
    for key, kind in (("seed", int), ("versions", dict), ("datasets", dict), ("results", dict),
                      ("checkpoints", list)):
        if not isinstance(data.get(key), kind):
            raise ConfigError(f"baseline {path}: {key!r} is missing or not a JSON {_JSON_NAMES[kind]}")
    k = len(data["checkpoints"])
    if not k or not all(isinstance(c, dict) and isinstance(c.get("models"), dict) for c in data["checkpoints"]):
        raise ConfigError(f"baseline {path}: 'checkpoints' is not a list of one or more checkpoints, each with its "
                          "'models' (model -> checkpoint digest)")
    for model, by_spec in data["results"].items():
        for spec, by_condition in (by_spec.items() if isinstance(by_spec, dict) else [(None, by_spec)]):
            for condition, entry in (by_condition.items() if isinstance(by_condition, dict) else [(None, None)]):
                where = "/".join(str(key) for key in (model, spec, condition) if key is not None)
                _check_entry(path, where, entry, k)
    _check_memes(path, data)


def _check_entry(path, where: str, entry, k: int) -> None:
    """One condition's entry: a cell for a baseline of one checkpoint, a list of `k` cells over the same memes and
    labels for a baseline of k checkpoints."""
    if k > 1 and not (isinstance(entry, list) and len(entry) == k):
        raise ConfigError(f"baseline {path}: results/{where} is not a list of {k} condition entries, one per "
                          f"checkpoint the baseline lists")
    for i, cell in enumerate(checkpoint_cells(entry) if k > 1 else [entry]):
        at = f"{where}[{i}]" if k > 1 else where
        ok = isinstance(cell, dict) and all(isinstance(cell.get(key), list) for key in ("y", "clean", "perturbed"))
        if not ok or not len(cell["y"]) == len(cell["clean"]) == len(cell["perturbed"]):
            raise ConfigError(f"baseline {path}: results/{at} is not a condition entry (lists 'y', 'clean' and "
                              f"'perturbed' of one length per meme)")
        _check_cell_values(path, at, cell)
        if cell["y"] != checkpoint_cells(entry)[0]["y"]:
            raise ConfigError(f"baseline {path}: results/{at} holds other labels than results/{where}[0]: the "
                              "checkpoints of one baseline score the same memes")


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
    if unlabelled(labels.astype(np.int64)):  # an unlabelled run's memes (meme.Dataset.unlabelled): compared on flips
        return
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
            sizes = {len(checkpoint_cells(entry)[0]["y"])
                     for entry in data["results"].get(model, {}).get(spec, {}).values()}
            ok = isinstance(named, dict) and all(
                isinstance(named.get(k), list) and all(isinstance(v, str) for v in named[k]) and
                {len(named[k])} == sizes for k in ("ids", "captions"))
            if not ok:
                raise ConfigError(f"baseline {path}: memes/{model}/{spec} is not a memes entry (lists 'ids' and "
                                  f"'captions' of strings, one per meme of results/{model}/{spec})")


_JSON_NAMES = {int: "integer", dict: "object", list: "array"}


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
_FILES_VOICE = {  # `memerobust compare`, the flip ledger and `memerobust baseline merge`: one saved baseline against
    # another; {refused} says what is refused
    "seed": "{baseline} was made with seed {made}, {current} uses {now}: perturbations differ, so {refused}",
    "limit": "{baseline} was made with --memerobust-limit={made}, {current} with --memerobust-limit={now}: the memes "
             "differ, {refused}",
    "data": "{baseline} was made on other data for {spec!r} (dataset fingerprint {made:.12}, {current} {now:.12}): "
            "{refused}",
    "version": "{baseline} was made with {name} {made}, {current} has {now}: perturbation definitions may differ, "
               "{refused}",
}
COMPARISON_REFUSED = "the comparison is refused"
MERGE_REFUSED = "they are not checkpoints of one recipe on the same memes: not merged"
_UNSET = object()


def _limit_option(limit) -> str:
    return f"--memerobust-limit={limit}" if limit else "no --memerobust-limit (every meme)"


def refuse_mismatch(baseline: dict, *, seed: int, versions: dict, fingerprints: dict | None = None, limit=_UNSET,
                    cases=None, labels: dict | None = None, names=("baseline", "this run"), run: bool = True,
                    refused: str = COMPARISON_REFUSED) -> None:
    """Refuse a comparison that would be meaningless, naming the fact that differs: the seed, the memes limit, the
    data (`fingerprints`: dataset spec -> the other side's fingerprint; by default those of the cases on data the
    baseline holds for their model), then per case (`cases`: (model, dataset spec, task, card_record, dataset
    fingerprint) of a run's cases) the task, the model card and the memes' labels (`labels`: (model, spec) -> the
    run's labels, as lists; a baseline whose labels differ, hand-edited or flipped, would fail every case it holds),
    a baseline sharing no model and dataset with the cases (the gate would compare nothing and pass), and the
    perturbation libraries' versions. `names` are (the baseline, the other side); `run` says whether the other side
    is a pytest run (its messages name the options to pass) or a saved baseline (then `refused` ends each message)."""
    voice = _RUN_VOICE if run else _FILES_VOICE
    where, current = names

    def refuse(fact: str, **values) -> None:
        raise ConfigError(voice[fact].format(baseline=where, current=current, refused=refused, **values))

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
        _refuse_other_cases(baseline, cases, labels or {}, names)
    for name in VERSIONED:
        if baseline["versions"].get(name) != versions.get(name):
            refuse("version", name=name, made=baseline["versions"].get(name), now=versions.get(name))


def _refuse_other_cases(baseline: dict, cases, labels: dict, names) -> None:
    """The per-case refusals of `refuse_mismatch` for a run: task, model card, labels, and nothing shared."""
    where, shared = names[0], 0
    for model, spec, task, card, _ in cases:
        if spec not in baseline["results"].get(model, {}):
            continue
        shared += 1
        _refuse_other_task(baseline, model, spec, task, names)
        _refuse_other_card(baseline.get("run", {}).get("cards", {}).get(model), card, model, names)
        y = labels.get((model, spec))
        if y is None:
            continue
        held = {c: checkpoint_cells(entry)[0]["y"] for c, entry in baseline["results"][model][spec].items()}
        differ = [c for c, made in held.items() if made != y]
        if differ:
            made = held[differ[0]]
            first = next((i for i, (a, b) in enumerate(zip(made, y)) if a != b), min(len(made), len(y)))
            raise ConfigError(f"{where} holds other labels for {model} on {spec!r} than this run's data "
                              f"({len(differ)} condition{'s' * (len(differ) != 1)}, first {differ[0]}: "
                              f"{len(made)} labels against {len(y)}, the first difference at meme {first}): it was "
                              "not made on these memes, or was edited; save a new baseline")
    if cases and not shared:
        held = sorted({f"{m} on {s}" for m, by_spec in baseline["results"].items() for s in by_spec})
        tested = sorted({f"{m} on {s}" for m, s, *_ in cases})
        raise ConfigError(f"{where} holds {', '.join(held) or 'nothing'}; this run tests {', '.join(tested)}: "
                          "nothing to compare (--memerobust-model or --memerobust-data differ; a baseline saved "
                          "before models were keyed by card name keeps a card given by path under its path)")


def _refuse_other_task(baseline: dict, model: str, spec: str, task, names) -> None:
    made = baseline.get("run", {}).get("tasks", {}).get(model, {}).get(spec)
    if made is not None and task is not None and made != task:
        fix = ": pass the same --memerobust-task" if names[1] == "this run" else ""
        raise ConfigError(f"{names[0]} scored {model} on {spec!r} for task {made!r}, {names[1]} for {task!r}{fix}")


def _refuse_other_card(made, card, model: str, names) -> None:
    """Refuse two cards of one name that are not one detector, naming the first fact that differs (a format /1
    baseline kept only the digest, so only that the card differs can be said)."""
    if made is None or card is None:
        return
    where, current = names
    if isinstance(made, str) or isinstance(card, str):
        if (made if isinstance(made, str) else made.get("digest")) != (
                card if isinstance(card, str) else card.get("digest")):
            raise ConfigError(f"{where} was made with another model card for {model!r} (architecture, backbone, "
                              "classes or task differ): a baseline compares checkpoints of one detector")
        return
    fact = next((k for k in (*CARD_FACTS, "digest") if made.get(k) != card.get(k)), None)
    if fact is None:
        return
    raise ConfigError(f"card {model!r} in {where} has {fact} {made.get(fact)!r}, {current}'s {card.get(fact)!r}: "
                      "a baseline compares checkpoints of one detector (the same architecture, task, classes and "
                      "backbone)")


def refuse_incomparable(before: dict, after: dict, names=("baseline A", "baseline B"),
                        refused: str = COMPARISON_REFUSED) -> None:
    """`refuse_mismatch` between two saved baselines, over every dataset of the later one, then per model both hold
    its task and card: the same refusals as the pytest gate."""
    names = tuple(map(str, names))
    refuse_mismatch(before, seed=after["seed"], versions=after["versions"],
                    fingerprints={spec: after["datasets"].get(spec) for spec in after["datasets"]},
                    limit=after.get("run", {}).get("limit", _UNSET), names=names, run=False, refused=refused)
    for model, by_spec in after["results"].items():
        if model not in before["results"]:
            continue
        _refuse_other_card(before.get("run", {}).get("cards", {}).get(model),
                           after.get("run", {}).get("cards", {}).get(model), model, names)
        for spec in by_spec:
            _refuse_other_task(before, model, spec, after.get("run", {}).get("tasks", {}).get(model, {}).get(spec),
                               names)


def paired_cells(before: dict, after: dict, names=("baseline A", "baseline B")):
    """(model, dataset, condition, before's entry, after's entry) for every condition in both baselines, in the
    later one's order, after the gate's refusals: incomparable baselines, other memes or labels in a cell, and a
    candidate (`after`) of more than one checkpoint. Before's entry is one cell, or the list of its checkpoints'
    cells when it holds several of one recipe."""
    refuse_incomparable(before, after, names)
    held = len(baseline_checkpoints(after))
    if held > 1:
        raise ConfigError(f"{names[1]} holds {held} checkpoints of a recipe: the candidate is one checkpoint (compare "
                          f"the baseline of each on its own, or gate against {names[1]} instead)")
    yield from _entries_in_both(before, after, names)


def _entries_in_both(before: dict, after: dict, names):
    """(model, dataset, condition, before's entry, after's entry) for every condition both hold, in the later one's
    order; refused, naming the condition, where they hold other memes (ids) or labels."""
    for model, by_spec in after["results"].items():
        for spec, by_condition in by_spec.items():
            ids = [data.get("memes", {}).get(model, {}).get(spec, {}).get("ids") for data in (before, after)]
            for condition, now in by_condition.items():
                then = before["results"].get(model, {}).get(spec, {}).get(condition)
                if then is None:
                    continue
                if checkpoint_cells(then)[0]["y"] != checkpoint_cells(now)[0]["y"] or (None not in ids
                                                                                       and ids[0] != ids[1]):
                    raise ConfigError(f"{names[0]} and {names[1]} hold other memes or labels for {model} on "
                                      f"{spec!r} ({condition}): the comparison is refused")
                yield model, spec, condition, then, now


def merged_baselines(first: dict, other: dict, names=("baseline A", "baseline B")) -> dict:
    """One baseline holding the checkpoints of `first`, then those of `other`: checkpoints of one recipe on the same
    memes, which the gate then reads as the recipe's spread. Refused, naming the field, where the two differ in
    anything but their checkpoints (seed, memes limit, data, perturbation versions, model card name and digest,
    task, datasets, models, conditions, labels, meme ids), or share a checkpoint (it would count twice and narrow
    the spread)."""
    names = tuple(map(str, names))
    for a, b in ((first, other), (other, first)):  # every dataset, card and task of either side
        refuse_incomparable(a, b, names if a is first else names[::-1], refused=MERGE_REFUSED)
    for what, of in (("models", lambda d: list(d["results"])),
                     ("datasets", lambda d: sorted({s for by_spec in d["results"].values() for s in by_spec})),
                     ("conditions", baseline_condition_names)):
        ours, theirs = of(first), of(other)
        if set(ours) != set(theirs):
            only = [f"{n} only in {name}" for n, name in ((_first_not_in(ours, theirs), names[0]),
                                                            (_first_not_in(theirs, ours), names[1])) if n]
            raise ConfigError(f"{names[0]} and {names[1]} hold other {what} ({'; '.join(only)}): {MERGE_REFUSED}")
    for model, by_spec in first["results"].items():
        for spec, by_condition in by_spec.items():
            ids = [d.get("memes", {}).get(model, {}).get(spec, {}).get("ids") for d in (first, other)]
            for condition, entry in by_condition.items():
                theirs = checkpoint_cells(other["results"][model][spec][condition])[0]
                if checkpoint_cells(entry)[0]["y"] != theirs["y"] or (None not in ids and ids[0] != ids[1]):
                    raise ConfigError(f"{names[0]} and {names[1]} hold other memes or labels for {model} on {spec!r} "
                                      f"({condition}): {MERGE_REFUSED}")
    for c in baseline_checkpoints(other):
        refuse_held_checkpoint(first, c["models"], names)
    merged = copy.deepcopy(first)
    merged["format"] = FORMAT
    merged.pop("models", None)  # format /1: its checkpoint is in `checkpoints` now
    merged["checkpoints"] = [*map(copy.deepcopy, baseline_checkpoints(first)),
                             *map(copy.deepcopy, baseline_checkpoints(other))]
    for model, by_spec in merged["results"].items():
        for spec, by_condition in by_spec.items():
            for condition, entry in by_condition.items():
                by_condition[condition] = checkpoint_cells(entry) + copy.deepcopy(
                    checkpoint_cells(other["results"][model][spec][condition]))
    cards = merged.setdefault("run", {}).setdefault("cards", {})
    for model, card in other.get("run", {}).get("cards", {}).items():  # a /1 digest gives way to a /2 record
        if not isinstance(card, str):
            cards[model] = copy.deepcopy(card)
    for model, by_spec in other.get("memes", {}).items():
        for spec, named in by_spec.items():
            merged.setdefault("memes", {}).setdefault(model, {}).setdefault(spec, copy.deepcopy(named))
    return merged


def refuse_held_checkpoint(baseline: dict, digests: dict, names=("baseline A", "baseline B")) -> None:
    """Refuse to add a checkpoint (`digests`: model -> its checkpoint's sha256) that `baseline` already holds: counted
    twice, it would narrow the recipe's spread."""
    held = {(model, digest) for c in baseline_checkpoints(baseline) for model, digest in c["models"].items() if digest}
    twice = next(((m, d) for m, d in digests.items() if (m, d) in held), None)
    if twice is not None:
        raise ConfigError(f"{names[1]} holds a checkpoint of {twice[0]} (sha256 {twice[1]:.12}) that {names[0]} "
                          "already holds: a checkpoint counted twice would narrow the recipe's spread")


def _first_not_in(these: list, those: list):
    return next((n for n in these if n not in set(those)), None)


def baseline_memes(data: dict, model: str, spec: str) -> tuple[list[str], list[str] | None]:
    """(ids, captions) of the memes of `model` on `spec` in the results' order: as saved, or for a baseline saved
    without them (older versions) the row index as id and no captions."""
    named = data.get("memes", {}).get(model, {}).get(spec)
    if named is not None:
        return list(named["ids"]), list(named["captions"])
    n = len(checkpoint_cells(next(iter(data["results"][model][spec].values())))[0]["y"])
    return [str(i) for i in range(n)], None


def rekeyed(data: dict, labels: dict[str, str]) -> dict:
    """`data` with each model a run names by another key than the baseline holds it under (`labels`: the run's
    model spec -> its label, the card's name for a card given by path) held under the run's label: a format /1
    baseline kept a card given by path under its path. In place; a baseline already keyed so is left as it is."""
    for given, label in labels.items():
        if given == label or given not in data["results"] or label in data["results"]:
            continue
        for by_model in (data["results"], data.get("memes", {}), data.get("run", {}).get("tasks", {}),
                         data.get("run", {}).get("cards", {}),
                         *(c.get(k, {}) for c in data["checkpoints"] for k in ("models", "paths"))):
            if given in by_model:
                by_model[label] = by_model.pop(given)
    return data


def baseline_contents(data: dict) -> dict:
    """What a baseline holds, for the line that says it was saved: its conditions, models, datasets, memes per
    dataset, seed and checkpoints."""
    memes = sorted({len(checkpoint_cells(entry)[0]["y"]) for by_spec in data["results"].values()
                    for by_condition in by_spec.values() for entry in by_condition.values()})
    return {"conditions": len(baseline_condition_names(data)), "models": list(data["results"]),
            "datasets": list(data["datasets"]), "memes": memes, "seed": data["seed"],
            "checkpoints": len(baseline_checkpoints(data))}


def condition_name(model: str, spec: str, condition: str) -> str:
    """How the gate names a condition it cannot compare: `model on spec: condition`."""
    return f"{model} on {spec}: {condition}"


def baseline_condition_names(data: dict) -> list[str]:
    """Every condition a baseline holds, by `condition_name`."""
    return [condition_name(m, s, c) for m, by_spec in data["results"].items() for s, by_c in by_spec.items()
            for c in by_c]


def baseline_entry(data: dict, model: str, spec: str, condition: str) -> dict | list | None:
    """The baseline's entry of `model` on `spec` under `condition` (a cell, or a recipe's list of cells), or None
    when it holds none."""
    return data["results"].get(model, {}).get(spec, {}).get(condition)


def unmatched_conditions(before: dict, after: dict) -> tuple[list[str], list[str]]:
    """(conditions in `after` but not in `before`, conditions in `before` but not in `after`), as
    `model on dataset: condition`: what the gate cannot compare, named rather than silently skipped."""
    made, run = baseline_condition_names(before), baseline_condition_names(after)
    return [k for k in run if k not in set(made)], [k for k in made if k not in set(run)]


def flip_ledger_of(before: dict, after: dict, names=("baseline A", "baseline B")) -> dict:
    """The flip ledger (judge/ledger.py) of two loaded baselines (`before` = the old checkpoint, `after` = the
    candidate), after the gate's refusals. Memes are named by the ids saved with the baseline, or by row index in
    baselines saved without them (then `caption` is None). A ledger pairs two checkpoints: a baseline of a recipe's
    several checkpoints is refused."""
    from ..judge.ledger import flip_ledger

    held = len(baseline_checkpoints(before))
    if held > 1:
        raise ConfigError(f"{names[0]} holds {held} checkpoints of a recipe: a flip ledger pairs two checkpoints "
                          "(`memerobust compare ONE.json B.json --ledger DIR` with a baseline of one of them)")

    def named(model, spec, condition, then, now):
        ids, captions = baseline_memes(after, model, spec)
        if captions is None:
            ids, captions = baseline_memes(before, model, spec)
        return model, spec, condition, then, now, ids, captions

    pairs = [named(*pair) for pair in paired_cells(before, after, names)]
    return flip_ledger(pairs, names, models={"before": baseline_checkpoints(before)[0]["models"],
                                             "after": baseline_checkpoints(after)[0]["models"]})


def read_report(path: Path) -> dict:
    """The JSON report at `path` (as --memerobust-report=FILE.json writes), or a ConfigError naming the file and
    what it holds instead (a baseline, another JSON, another format). A partial report (an interrupted run's) is
    returned as it is: its `partial` says why its numbers are missing. Here, beside the baseline format, so a
    baseline given where a report is expected is named as one."""
    from ..report import REPORT_FORMAT

    report = read_json(path, "report")
    if isinstance(report, dict) and report.get("format") in FORMATS_READ:
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


def recipe_arm(paths, name: str) -> dict:
    """The baselines at `paths` (each one or more checkpoints of one recipe, one seed each) as one baseline of the
    recipe's checkpoints (`merged_baselines`: refused, naming the field, where they differ in anything but their
    checkpoints, or hold one checkpoint twice). `name` says which arm, for the messages."""
    paths = [Path(p) for p in paths]
    if not paths:
        raise ConfigError(f"recipe {name}: no baseline given")
    merged = load_baseline(paths[0])
    for path in paths[1:]:
        merged = merged_baselines(merged, load_baseline(path), names=(f"recipe {name} ({paths[0]}, ...)", str(path)))
    return merged


def recipe_cells(first: dict, other: dict, names=("recipe A", "recipe B")):
    """(model, dataset, condition, A's cells, B's cells) for every condition both recipes hold, after the gate's
    refusals (other seed, limit, data, card, task, versions) and the recipe's own: a checkpoint in both arms (a seed
    cannot stand for both recipes), other memes or labels."""
    refuse_incomparable(first, other, names)
    refuse_incomparable(other, first, names[::-1])
    held = {(m, d) for cp in baseline_checkpoints(first) for m, d in cp["models"].items() if d}
    for c in baseline_checkpoints(other):
        shared = next(((m, d) for m, d in c["models"].items() if (m, d) in held), None)
        if shared is not None:
            raise ConfigError(f"{names[0]} and {names[1]} both hold a checkpoint of {shared[0]} (sha256 "
                              f"{shared[1]:.12}): each checkpoint is one seed of one recipe")
    for model, spec, condition, a, b in _entries_in_both(first, other, names):
        yield model, spec, condition, checkpoint_cells(a), checkpoint_cells(b)


def held_checkpoint_index(baseline: dict, digests: dict) -> int | None:
    """Which of `baseline`'s checkpoints (0-based) is the one `digests` (model -> sha256) names, if any: a candidate
    compared with a recipe that already holds it is compared with itself."""
    for i, c in enumerate(baseline_checkpoints(baseline)):
        if any(d and c["models"].get(m) == d for m, d in digests.items()):
            return i
    return None
