"""Reproducible counterexamples: the memes a failing case flipped, written down exactly and replayed as tests.

A failing case records its worst memes (right clean, wrong perturbed; the largest fall of the true label's
probability first) with the caption exactly as the detector read it, and the digest of the picture as it was fed with
the recipe that regenerates it (the condition's image side, the seed and the meme's id: perturbations are keyed by
them). The run writes them to one manifest; `pytest --memerobust-replay=counterexamples.json` then collects one test
per entry, which regenerates the picture, checks its digest, asks the detector (the recorded one, or
`--memerobust-model`, so a new checkpoint meets old counterexamples) and fails while the meme still evades it.

Plain functions first; the pytest collector and item at the end are what plugin.py hands pytest.
"""
from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import numpy as np
import pytest

from .errors import MemeRobustError

FORMAT = "pytest-memerobust-counterexamples/1"
MANIFEST_MEMES = 5  # counterexamples a failing case records at most
PROPERTY = "memerobust.counterexamples"  # the user property that carries a case's entries to the controller
LOG_PLUGIN = "memerobust-counterexamples"  # the name CounterexampleLog is registered under
DEFAULT_NAME = "counterexamples.json"  # in the run's cache dir, unless --memerobust-counterexamples says where
# what every entry must have, and the types its values may take (None: the entry's meme has no picture read)
REQUIRED = {"model": str, "dataset": str, "task": str, "condition": str, "seed": int, "meme": str,
            "label": (int, list), "caption": str, "picture_digest": (str, type(None)), "recipe_needs_batch": bool}


class ReplayError(MemeRobustError):
    """A counterexamples manifest cannot be read or replayed; the message names the file and the entry."""


# --- recording ---------------------------------------------------------------------------------------------------


def truth_codes(y: np.ndarray) -> np.ndarray:
    """The true labels coded as `results.predicted_labels` codes predictions (multi-label: bit k = label k)."""
    y = np.asarray(y)
    if y.ndim == 2:
        return (y.astype(np.int64) << np.arange(y.shape[1])).sum(axis=1)
    return y


def truth_probability(y: np.ndarray, proba: np.ndarray) -> np.ndarray:
    """Per meme, the probability given to its true label (multi-label: the mean over labels of the probability of
    each label's true state)."""
    y, proba = np.asarray(y), np.asarray(proba, dtype=np.float64)
    if y.ndim == 2:
        return np.where(y == 1, proba, 1.0 - proba).mean(axis=1)
    return proba[np.arange(len(y)), y]


def worst_flips(result, limit: int = MANIFEST_MEMES) -> list[int]:
    """Rows of the memes `result`'s condition flipped from right to wrong (among those answered both times), the
    largest fall of the true label's probability first, at most `limit`."""
    from .results import predicted_labels

    truth = truth_codes(result.y_true)
    flipped = ((predicted_labels(result.y_true, result.proba_clean) == truth)
               & (predicted_labels(result.y_true, result.proba) != truth))
    if result.answered is not None:
        flipped &= result.answered
    rows = np.flatnonzero(flipped)
    fall = (truth_probability(result.y_true, result.proba_clean) - truth_probability(result.y_true, result.proba))[rows]
    return [int(i) for i in rows[np.argsort(-fall, kind="stable")][:limit]]


def _reads(detector, modality: str) -> bool:
    return modality in getattr(detector, "modalities", ("image", "text"))


def needs_batch(condition) -> bool:
    """Whether the condition's picture is regenerated only by the whole batch: an attack on the picture, or a picture
    that shows a caption an attack wrote (attacks fit on the batch and on the detector they attack)."""
    from .perturb import get as get_perturbation

    if condition.image is None:
        return False
    image = get_perturbation(condition.image)
    draws = image.caption_source == "condition" and condition.text is not None
    return image.needs_model or (draws and get_perturbation(condition.text).needs_model)


def picture_digest(picture) -> str:
    """The digest the feature cache keys a picture by (`features.input_digests`), the same on every device."""
    from .features import input_digests

    return input_digests([picture])[0]


def counterexamples(result, engine, *, model_label: str | None = None, case: str | None = None,
                    limit: int = MANIFEST_MEMES) -> list[dict]:
    """The manifest entries of `result`'s worst flips (`worst_flips`), from the engine that computed it: the
    captions as fed, the pictures' digests and recipes. A prompt condition rewords the detector's instruction, not
    its inputs, and records none."""
    from . import __version__
    from .engine import Condition

    condition = result.condition
    if condition.kind in ("clean", "prompt"):
        return []
    rows = worst_flips(result, limit)
    if not rows:
        return []
    captions = engine.inputs(*engine.text_side(condition))
    reads_pictures = _reads(engine.detector, "image")
    batch = needs_batch(condition)
    image_side = Condition(image=condition.image, image_severity=condition.image_severity).id
    draws = engine.image_side(condition)[3:]
    out = []
    for i in rows:
        meme = engine.dataset.memes[i]
        recipe = None
        if meme.has_picture:
            recipe = {"image_side": image_side, "seed": engine.seed, "meme": meme.id, "memes": len(engine.ids),
                      "draws_caption": Condition(text=draws[0], text_severity=draws[1]).id if draws else None}
        y = np.asarray(result.y_true)[i]
        out.append({
            "case": case, "model": result.model, "model_label": model_label or result.model,
            "dataset": result.dataset, "task": result.task, "condition": condition.id, "seed": engine.seed,
            "meme": meme.id, "row": i, "label": y.tolist(), "caption": captions[i],
            "picture_digest": picture_digest(engine.picture(condition, i)) if reads_pictures and recipe else None,
            "picture_recipe": recipe, "recipe_needs_batch": batch,
            "proba_clean": np.asarray(result.proba_clean[i], dtype=np.float64).tolist(),
            "proba": np.asarray(result.proba[i], dtype=np.float64).tolist(),
            "truth_probability_fall": float(truth_probability(y[None], result.proba_clean[i][None])[0]
                                            - truth_probability(y[None], result.proba[i][None])[0]),
            "version": __version__})
    return out


def case_property(session, model: str, result, case: str) -> tuple[str, str]:
    """The user property that carries a failing case's counterexamples to whoever writes the manifest (on
    pytest-xdist, the controller). Recording never hides the case's failure: a problem is carried instead."""
    try:
        engine = session.engine(model, result.dataset, result.task)
        value = {"case": case, "entries": counterexamples(result, engine, model_label=session.model_label(model),
                                                          case=case)}
    except Exception as exc:
        value = {"case": case, "error": f"{type(exc).__name__}: {exc}"}
    return PROPERTY, json.dumps(value)


class CounterexampleLog:
    """Registered as a plugin where the manifest is written: gathers the cases' counterexamples from their reports
    (which pytest-xdist carries from the workers)."""

    def __init__(self):
        self.cases: list[dict] = []

    def pytest_runtest_logreport(self, report):
        if report.when == "call":
            self.cases += [json.loads(value) for name, value in report.user_properties if name == PROPERTY]


def manifest_path(options) -> Path | None:
    """Where the run writes its manifest: --memerobust-counterexamples, else counterexamples.json in its cache dir."""
    if options.counterexamples is not None:
        return Path(options.counterexamples)
    return None if options.cache_dir is None else Path(options.cache_dir) / DEFAULT_NAME


def manifest(cases: list[dict]) -> dict:
    """The manifest of the gathered cases, ordered by case (the same with or without pytest-xdist)."""
    from . import __version__
    from .features import FORMAT as FEATURES_FORMAT

    cases = sorted(cases, key=lambda c: c["case"] or "")
    return {"format": FORMAT, "version": __version__, "picture_digests": f"features/{FEATURES_FORMAT}",
            "entries": [entry for c in cases for entry in c.get("entries", [])]}


def write_manifest(path: Path | None, cases: list[dict], explicit: bool = False) -> list[str]:
    """Write the manifest atomically (when a case recorded any, or the path was asked for); the summary lines."""
    from .atomic import atomic_write_text

    data = manifest(cases)
    lines = [f"memerobust: could not record the counterexamples of {c['case']} ({c['error']})"
             for c in sorted(cases, key=lambda c: c["case"] or "") if "error" in c]
    n, failing = len(data["entries"]), len({e["case"] for e in data["entries"]})
    if not n and not explicit:
        return lines
    if path is None:
        return lines + [f"memerobust: {n} counterexamples not written: this run has no cache dir (pass "
                        f"--memerobust-counterexamples=PATH)"]
    try:
        atomic_write_text(path, json.dumps(data, indent=1, ensure_ascii=False) + "\n")
    except Exception as exc:
        return lines + [f"memerobust: could not write the counterexamples {path} ({type(exc).__name__}: {exc})"]
    if not n:
        return lines + [f"memerobust: no failing case flipped a meme from right to wrong: an empty manifest written "
                        f"to {path}"]
    cases_of = f"{failing} failing case" + ("s" if failing != 1 else "")
    return lines + [f"memerobust: {n} counterexamples of {cases_of} written to {path}; replay them with "
                    f"pytest --memerobust-replay={path}"]


# --- replaying ---------------------------------------------------------------------------------------------------


def _where(path, index: int, entry: dict | None = None) -> str:
    if not isinstance(entry, dict):
        return f"{path} entry {index}"
    return f"{path} entry {index} ({entry.get('model')}, {entry.get('condition')}, meme {entry.get('meme')})"


def read_manifest(path) -> list[dict]:
    """The entries of a counterexamples manifest, checked: a file that is not one, or an entry that lacks a key or
    has a wrong value, is a ReplayError naming the file and the entry."""
    from .engine import Condition

    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise ReplayError(f"--memerobust-replay={path}: cannot read it ({exc.strerror or exc})") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ReplayError(f"--memerobust-replay={path}: not a JSON file ({exc})") from None
    found = data.get("format") if isinstance(data, dict) else None
    if found != FORMAT:
        raise ReplayError(f"--memerobust-replay={path}: not a counterexamples manifest (format {found!r}; expected "
                          f"{FORMAT!r}, as a failing run writes)")
    entries = data.get("entries")
    if not isinstance(entries, list):
        raise ReplayError(f"--memerobust-replay={path}: 'entries' must be a list")
    for k, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise ReplayError(f"{_where(path, k)}: expected an object, got {type(entry).__name__}")
        missing = [key for key in REQUIRED if key not in entry]
        if missing:
            raise ReplayError(f"{_where(path, k, entry)}: missing {', '.join(missing)}")
        wrong = [key for key, types in REQUIRED.items()
                 if not isinstance(entry[key], types) or (isinstance(entry[key], bool) and types is int)]
        if wrong:
            raise ReplayError(f"{_where(path, k, entry)}: wrong type of {', '.join(wrong)}")
        try:
            Condition.parse(entry["condition"])
        except ValueError as exc:
            raise ReplayError(f"{_where(path, k, entry)}: {exc}") from None
    return entries


def replay_arguments(args: list[str], path, named: bool) -> list[str]:
    """The paths a replay run collects: the manifest (and any the user `named` besides)."""
    target = Path(path).resolve()
    if named and any(Path(arg.split("::")[0]).resolve() == target for arg in args):
        return list(args)
    return [*args, str(path)] if named else [str(path)]


def replay_spec(session, entry: dict) -> str:
    """The dataset spec an entry replays on: the recorded one, unless --memerobust-data says where it is now (the
    digests check that it still holds the same memes). Captions are the manifest's, never read again by OCR."""
    from .session import CAPTIONS_BY_OCR

    return session.data_spec(entry["dataset"].removesuffix(CAPTIONS_BY_OCR)).removesuffix(CAPTIONS_BY_OCR)


def _meme(session, entry: dict, spec: str):
    dataset = session.dataset(spec).labelled(entry["task"])
    for meme in dataset.memes:
        if meme.id == entry["meme"]:
            return dataset, meme
    limit = f" (--memerobust-limit={session.options.limit} leaves it out?)" if session.options.limit else ""
    raise ReplayError(f"meme {entry['meme']!r} is not in {spec!r} with a label for task {entry['task']!r}{limit}")


def check_replay(session, cases) -> None:
    """Check once, before anything runs, what the replay of `cases` ((manifest, index, entry, model) each) needs:
    the models, datasets, tasks, perturbations and memes; the first problem is a ReplayError naming its entry."""
    from .engine import Condition
    from .perturb import get as get_perturbation

    checked = set()
    for path, k, entry, model in cases:
        try:
            condition = Condition.parse(entry["condition"])
            for name in (condition.text, condition.image):
                if name is not None:
                    get_perturbation(name)
            spec = replay_spec(session, entry)
            models = [model] + ([entry["model"]] if entry["recipe_needs_batch"] else [])
            for m in models:
                if (m, spec, entry["task"]) not in checked:
                    session.check_case(m, spec, entry["task"])
                    checked.add((m, spec, entry["task"]))
            _meme(session, entry, spec)
            if entry["recipe_needs_batch"] and entry["seed"] != session.options.seed:
                raise ReplayError(f"its picture is an attack's, regenerated by the run's engine: replay with "
                                  f"--memerobust-seed={entry['seed']}")
        except MemeRobustError as exc:
            raise ReplayError(f"{_where(path, k, entry)}: {exc}") from None


def regenerate_picture(session, entry: dict, spec: str, detector):
    """The entry's perturbed picture (a uint8 tensor on `detector`'s device) from its recipe, checked against its
    digest; None for a meme without a picture."""
    from .engine import Condition, Engine
    from .pictures import as_picture

    dataset, meme = _meme(session, entry, spec)
    if not meme.has_picture:
        return None
    condition = Condition.parse(entry["condition"])
    if entry["recipe_needs_batch"]:  # an attack: the whole batch again, on the detector it attacked
        engine = session.engine(entry["model"], spec, entry["task"])
        picture = engine.picture(condition, engine.ids.index(meme.id))
    else:  # keyed by (seed, perturbation, severity, meme id): the meme alone gives the same picture
        engine = Engine(detector, dataclasses.replace(dataset, memes=[meme]),
                        seed=entry["seed"], text_reader=session.ocr())
        picture = engine.picture(condition, 0)
    recorded = entry["picture_digest"]
    if recorded is not None and picture_digest(picture) != recorded:
        hint = (f"; an attack's picture depends on the weights it attacked and on the whole batch (recorded on "
                f"{entry.get('picture_recipe', {}).get('memes')} memes: replay with the same --memerobust-limit and "
                f"checkpoint)" if entry["recipe_needs_batch"] else "")
        raise ReplayError(f"the regenerated picture of meme {meme.id!r} under {condition.id} has digest "
                          f"{picture_digest(picture)}, not the recorded {recorded}: the dataset or the perturbation "
                          f"code changed since the counterexample was recorded{hint}")
    return as_picture(picture, str(getattr(detector, "device", "cpu")))


def replay_entry(session, entry: dict, model: str | None = None) -> tuple[bool, np.ndarray]:
    """(whether the meme still evades the detector, its class probabilities): the entry's caption verbatim and its
    picture regenerated, shown to `model` (default: the recorded one)."""
    from .results import predicted_labels

    model = model or entry["model"]
    spec = replay_spec(session, entry)
    detector = session.detector(model)
    dataset, meme = _meme(session, entry, spec)
    label = np.asarray(entry["label"])
    now = np.asarray(meme.labels[entry["task"]])
    if now.shape != label.shape or not np.array_equal(now, label):
        raise ReplayError(f"meme {meme.id!r} is labelled {now.tolist()} for {entry['task']!r} in {spec!r}, not the "
                          f"recorded {label.tolist()}: the dataset changed since the counterexample was recorded")
    picture = regenerate_picture(session, entry, spec, detector) if _reads(detector, "image") else None
    caption = entry["caption"] if _reads(detector, "text") else None
    proba = session.engine(model, spec, entry["task"]).probabilities([picture], [caption])[0]
    still = predicted_labels(label[None], proba[None])[0] != truth_codes(label[None])[0]
    return bool(still), proba


# --- pytest ------------------------------------------------------------------------------------------------------


def manifest_file(file_path: Path, parent, replay: Path | None):
    """The collector of the manifest being replayed, for plugin.pytest_collect_file; None for any other file."""
    if replay is None:
        return None
    config = parent.config
    if Path(file_path).resolve() != (config.invocation_params.dir / replay).resolve():
        return None
    inside = Path(file_path).resolve().is_relative_to(config.rootpath.resolve())
    return ManifestFile.from_parent(parent, path=file_path, nodeid=None if inside else Path(file_path).name)


class StillEvades(Exception):
    """A replayed counterexample the detector still gets wrong."""

    def __init__(self, model: str, entry: dict, proba: np.ndarray, classes):
        super().__init__(model, entry["meme"])
        self.model, self.entry, self.proba, self.classes = model, entry, proba, list(classes)


class ManifestFile(pytest.File):
    """A counterexamples manifest: one node per model replayed, one per condition, one item per meme."""

    def collect(self):
        from .engine import Condition
        from .plugin import _session

        session = _session(self.config)
        tree: dict = {}
        for k, entry in enumerate(read_manifest(self.path)):
            for model in session.options.models or (entry["model"],):
                label = session.model_label(model) if session.options.models else entry.get("model_label") or model
                name = Condition.parse(entry["condition"]).test_name
                tree.setdefault(label, {}).setdefault(name, []).append((model, k, entry))
        for label, conditions in tree.items():
            yield ReplayGroup.from_parent(self, name=label, members=conditions)

    def repr_failure(self, excinfo):
        if isinstance(excinfo.value, MemeRobustError):
            return str(excinfo.value)
        return super().repr_failure(excinfo)


class ReplayGroup(pytest.Collector):
    """A model's replayed counterexamples (members: condition -> entries), or a condition's (a list of entries)."""

    def __init__(self, *, members, **kwargs):
        super().__init__(**kwargs)
        self.members = members

    def collect(self):
        if isinstance(self.members, dict):
            for name, members in self.members.items():
                yield ReplayGroup.from_parent(self, name=name, members=members)
            return
        names = [entry["meme"] for _, _, entry in self.members]
        for model, k, entry in self.members:
            name = entry["meme"] if names.count(entry["meme"]) == 1 else f"{entry['meme']}[{k}]"
            yield ReplayItem.from_parent(self, name=name, model=model, index=k, entry=entry)


class ReplayItem(pytest.Item):
    """One recorded counterexample shown to a detector again: it fails while the meme still evades it."""

    def __init__(self, *, model: str, index: int, entry: dict, **kwargs):
        super().__init__(**kwargs)
        self.model, self.index, self.entry = model, index, entry
        self.manifest = os.path.relpath(self.path, self.config.invocation_params.dir)  # as messages name it

    def runtest(self):
        from .plugin import _session

        session = _session(self.config)
        try:
            still, proba = replay_entry(session, self.entry, self.model)
        except ReplayError as exc:
            raise ReplayError(f"{_where(self.manifest, self.index, self.entry)}: {exc}") from None
        if still:
            raise StillEvades(self.model, self.entry, proba, session.detector(self.model).classes)

    def repr_failure(self, excinfo):
        if isinstance(excinfo.value, StillEvades):
            return evasion_message(excinfo.value, f"{self.manifest} entry {self.index}")
        if isinstance(excinfo.value, MemeRobustError):
            return f"{type(excinfo.value).__name__}: {excinfo.value}"
        return super().repr_failure(excinfo)

    def reportinfo(self):
        # (not the node id itself: pytest's -v line would print the dots of `counterexamples.json` as `::`)
        return self.path, None, f"replay of {self.nodeid}"


def evasion_message(failure: StillEvades, where: str) -> str:
    e = failure.entry
    label = np.asarray(e["label"])
    named = (", ".join(c for c, on in zip(failure.classes, label) if on) or "none") if label.ndim \
        else (failure.classes[int(label)] if int(label) < len(failure.classes) else str(int(label)))
    now = truth_probability(label[None], failure.proba[None])[0]
    then = (f"; recorded {truth_probability(label[None], np.asarray(e['proba'])[None])[0]:.3f}, clean "
            f"{truth_probability(label[None], np.asarray(e['proba_clean'])[None])[0]:.3f}"
            if "proba" in e and "proba_clean" in e else "")
    return (f"{failure.model} still gets meme {e['meme']} wrong under {e['condition']} ({where})\n"
            f"  caption: {e['caption']!r}\n"
            f"  true label: {named}; its probability now {now:.3f}{then}")
