"""Reproducible counterexamples: the memes a failing case flipped, written down exactly and replayed as tests.

A failing case records its worst memes (right clean, wrong perturbed; the largest fall of the true label's
probability first) with the caption exactly as the detector read it, the picture as it was fed (a PNG in the folder
beside the manifest, `counterexamples.pictures/<digest>.png`), its digest, and the recipe that regenerates it (the
condition's image side, the seed and the meme's id: perturbations are keyed by them) with what the picture depends on
(the clean picture's digest, the perturbations' code, the weights an attack was fitted on). The run merges them into
one manifest by case: a case that ran replaces its old entries, the others keep theirs. `pytest
--memerobust-replay=counterexamples.json` then collects one test per entry, which shows the detector (the recorded
one, or `--memerobust-model`, so a new checkpoint meets old counterexamples) the caption and the stored picture, and
fails while the meme still evades it. The stored picture makes a replay independent of the machine and of the
checkpoint (an attack is not fitted again); without it the picture is regenerated from its recipe, and a digest that
differs says what changed.

Plain functions, no pytest: the collector and items that replay a manifest are in items.py (the pytest face).
"""
from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import numpy as np

from ..atomic import folder_locked
from ..determinism import device_type
from ..errors import MemeRobustError
from ..track.artifacts import perturbation_code, store_picture

FORMAT = "pytest-memerobust-counterexamples/1"
MANIFEST_MEMES = 5  # counterexamples a failing case records at most
PROPERTY = "memerobust.counterexamples"  # the user property that carries a case's entries to the controller
LOG_PLUGIN = "memerobust-counterexamples"  # the name CounterexampleLog is registered under
DEFAULT_NAME = "counterexamples.json"  # in the run's cache dir, unless --memerobust-counterexamples says where
PICTURES = ".pictures"  # the folder beside a manifest that holds its pictures: counterexamples.pictures/<digest>.png
# what every entry must have, and the types its values may take (None: the entry's meme has no picture read)
REQUIRED = {"model": str, "dataset": str, "task": str, "condition": str, "seed": int, "meme": str,
            "label": (int, list), "caption": str, "picture_digest": (str, type(None)), "recipe_needs_batch": bool}
_PICTURE_FILE = re.compile(r"[^/\\]+\.pictures/[0-9a-f]{32}\.png")  # a stored picture, beside its manifest only


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
    from ..judge.results import predicted_labels

    reference = result.reference  # the true labels (unlabelled memes: the clean predictions)
    truth = truth_codes(reference)
    answers = result.answers
    flipped = ((predicted_labels(reference, answers.proba_clean) == truth)
               & (predicted_labels(reference, answers.proba) != truth))
    if result.answered is not None:
        flipped &= result.answered
    rows = np.flatnonzero(flipped)
    fall = (truth_probability(reference, answers.proba_clean) - truth_probability(reference, answers.proba))[rows]
    return [int(i) for i in rows[np.argsort(-fall, kind="stable")][:limit]]


def _reads(detector, modality: str) -> bool:
    return modality in getattr(detector, "modalities", ("image", "text"))


def needs_batch(condition) -> bool:
    """Whether the condition's picture is regenerated only by the whole batch: an attack on the picture, or a picture
    that shows a caption an attack wrote (attacks fit on the batch and on the detector they attack)."""
    from ..perturb import get as get_perturbation

    if condition.image is None:
        return False
    image = get_perturbation(condition.image)
    draws = image.traits.caption_source == "condition" and condition.text is not None
    return image.needs_model or (draws and get_perturbation(condition.text).needs_model)


def picture_digest(picture) -> str:
    """The digest the feature cache keys a picture by (`data.digests.input_digests`), the same on every device."""
    from ..data.digests import input_digests

    return input_digests([picture])[0]


def _image_side_names(engine, condition) -> list[str]:
    """The perturbations a condition's picture depends on: its image side, and the caption edit it draws, if any."""
    draws = engine.image_side(condition)[3:]
    return [n for n in (condition.image, draws[0] if draws else None) if n is not None]


def _made_on(engine) -> dict:
    import torch

    return {"device": device_type(engine), "torch": torch.__version__}


def picture_store(manifest: Path) -> Path:
    """The folder of a manifest's pictures: `counterexamples.json` keeps them in `counterexamples.pictures/`."""
    manifest = Path(manifest)
    return manifest.with_name(manifest.stem + PICTURES)


def stored_picture_path(manifest, entry: dict) -> Path | None:
    """Where an entry's stored picture should be (beside `manifest`), or None if it records none."""
    name = entry.get("picture_file")
    return None if manifest is None or not isinstance(name, str) else Path(manifest).parent / name


def load_stored_picture(path: Path, entry: dict) -> np.ndarray:
    """The stored picture (H x W x 3 uint8), checked against the entry's digest."""
    from PIL import Image

    try:
        with Image.open(path) as image:
            picture = np.asarray(image.convert("RGB"))
    except (OSError, ValueError) as exc:
        raise ReplayError(f"its stored picture {path} cannot be read ({exc})") from None
    digest = picture_digest(picture)
    if digest != entry["picture_digest"]:
        raise ReplayError(f"its stored picture {path} has digest {digest}, not the recorded {entry['picture_digest']}:"
                          f" the file was changed or damaged since the counterexample was recorded")
    return picture


def counterexamples(result, engine, *, model_label: str | None = None, case: str | None = None,
                    limit: int = MANIFEST_MEMES, store: Path | None = None) -> list[dict]:
    """The manifest entries of `result`'s worst flips (`worst_flips`), from the engine that computed it: the
    captions as fed, the pictures' digests and recipes, and what the pictures depend on. With a `store` folder, each
    picture fed is written there (`store_picture`) and the entry names it. A prompt condition rewords the detector's
    instruction, not its inputs, and records none."""
    from .. import __version__
    from ..perturb.conditions import Condition

    condition = result.condition
    if condition.kind in ("clean", "prompt"):
        return []
    rows = worst_flips(result, limit)
    if not rows:
        return []
    reads_pictures = _reads(engine.detector, "image")
    batch = needs_batch(condition)
    image_side = Condition(image=condition.image, image_severity=condition.image_severity).id
    draws = engine.image_side(condition)[3:]
    code = {name: perturbation_code(name) for name in _image_side_names(engine, condition)}
    attacked = engine.attack_context().fingerprint if batch else None  # the weights the attack was fitted on
    out = []
    for i in rows:
        meme = engine.dataset.memes[i]
        recipe = None
        if meme.has_picture:
            recipe = {"image_side": image_side, "seed": engine.seed, "meme": meme.id, "memes": len(engine.ids),
                      "draws_caption": Condition(text=draws[0], text_severity=draws[1]).id if draws else None}
        y, reference = np.asarray(result.memes.y_true)[i], result.reference
        entry = {
            "case": case, "model": result.model, "model_label": model_label or result.model,
            "dataset": result.dataset, "task": result.task, "condition": condition.id, "seed": engine.seed,
            "meme": meme.id, "row": i, "label": y.tolist(), "caption": None,
            "picture_digest": None, "picture_recipe": recipe, "recipe_needs_batch": batch,
            "proba_clean": np.asarray(result.answers.proba_clean[i], dtype=np.float64).tolist(),
            "proba": np.asarray(result.answers.proba[i], dtype=np.float64).tolist(),
            "truth_probability_fall": float(
                truth_probability(reference[i][None], result.answers.proba_clean[i][None])[0]
                - truth_probability(reference[i][None], result.answers.proba[i][None])[0]),
            "version": __version__}
        if reads_pictures and recipe:
            picture = engine.picture(condition, i)  # before the caption: a joint attack computes both at once
            entry["picture_digest"] = picture_digest(picture)
            entry["clean_picture_digest"] = picture_digest(engine.picture(Condition(), i))
            entry["perturbation_code"] = code
            if attacked is not None:
                entry["attack_fingerprint"] = attacked
            entry["made_on"] = _made_on(engine)
            if store is not None:
                try:
                    entry["picture_file"] = store_picture(store, picture, entry["picture_digest"])
                except OSError:
                    pass  # not stored (a read-only folder): the entry still replays by regenerating its picture
        entry["caption"] = engine.caption(condition, i)
        # where that caption came from: OCR of this condition's picture, OCR of the clean one, or the dataset
        entry["caption_source"] = (getattr(engine.ocr, "name", "ocr") if engine.ocr is not None
                                   else meme.meta.get("caption_source") or "dataset")
        out.append(entry)
    return out


def case_property(session, model: str, result, case: str) -> tuple[str, str]:
    """The user property that carries a failing case's counterexamples to whoever writes the manifest (on
    pytest-xdist, the controller). Recording never hides the case's failure: a problem is carried instead."""
    try:
        engine = session.engine(model, result.dataset, result.task, result.condition.defence,
                                result.condition.source)
        path = manifest_path(session.options)
        value = {"case": case, "entries": counterexamples(result, engine, model_label=session.model_label(model),
                                                          case=case, store=picture_store(path) if path else None)}
    except Exception as exc:
        value = {"case": case, "error": f"{type(exc).__name__}: {exc}"}
    return PROPERTY, json.dumps(value)


VERDICT_PROPERTIES = ("memerobust.verdict", "memerobust.case")  # a case that carries one reached a verdict


class CounterexampleLog:
    """Registered as a plugin where the manifest is written: gathers the cases' counterexamples from their reports
    (which pytest-xdist carries from the workers). A case that reached a verdict and recorded none (it passes now)
    is gathered with no entries, so the manifest drops its old ones; a case that did not get that far (skipped,
    crashed) is not gathered, and keeps them."""

    def __init__(self):
        self.cases: list[dict] = []

    def pytest_runtest_logreport(self, report):
        if report.when != "call":
            return
        found = [json.loads(value) for name, value in report.user_properties if name == PROPERTY]
        if found:
            self.cases += found
        elif any(name in VERDICT_PROPERTIES for name, _ in report.user_properties):
            self.cases.append({"case": report.nodeid, "entries": []})


def manifest_path(options) -> Path | None:
    """Where the run writes its manifest: --memerobust-counterexamples, else counterexamples.json in its cache dir."""
    if options.outputs.counterexamples is not None:
        return Path(options.outputs.counterexamples)
    return None if options.compute.cache.folder is None else Path(options.compute.cache.folder) / DEFAULT_NAME


def manifest(cases: list[dict], kept: list[dict] = ()) -> dict:
    """The manifest of the gathered cases (and of the `kept` entries of other cases, from an earlier manifest),
    ordered by case, each case's entries in their order (the same with or without pytest-xdist)."""
    from .. import __version__
    from ..engine.features import FORMAT as FEATURES_FORMAT

    entries = [*kept, *(entry for c in cases for entry in c.get("entries", []))]
    return {"format": FORMAT, "version": __version__, "picture_digests": f"features/{FEATURES_FORMAT}",
            "entries": sorted(entries, key=lambda e: e.get("case") or "")}


def previous_entries(path: Path) -> tuple[list[dict], str | None]:
    """The entries of the manifest already at `path` ([] if there is none), and what is wrong with the file when it
    is not a readable manifest (it is then replaced, not merged)."""
    if not path.exists():
        return [], None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        return [], f"{type(exc).__name__}: {exc}"
    if not (isinstance(data, dict) and data.get("format") == FORMAT and isinstance(data.get("entries"), list)):
        return [], f"not a {FORMAT} manifest"
    return [e for e in data["entries"] if isinstance(e, dict)], None


def prune_pictures(path: Path, entries: list[dict]) -> None:
    """Remove the pictures of `path`'s folder that no entry names any more (those of replaced entries)."""
    store = picture_store(path)
    if not store.is_dir():
        return
    named = {Path(e["picture_file"]).name for e in entries if isinstance(e.get("picture_file"), str)}
    for picture in store.glob("*.png"):
        if picture.name not in named:
            picture.unlink(missing_ok=True)
    if not any(store.iterdir()):
        store.rmdir()


def write_manifest(path: Path | None, cases: list[dict], explicit: bool = False) -> list[str]:
    """Merge the gathered cases into the manifest at `path` and write it atomically; the summary lines.

    Merged by case: the entries of a case gathered here (it ran to a verdict in this run) replace that case's old
    entries, none if it passes now; the entries of every other case are kept, so a run of a subset (`-k`) does not
    lose the rest. A case whose recording failed keeps its old entries. Written when something changed, or when
    the path was asked for; pictures no entry names any more are removed from its folder."""
    from ..atomic import atomic_write_text

    cases = sorted(cases, key=lambda c: c["case"] or "")
    lines = [f"memerobust: could not record the counterexamples of {c['case']} ({c['error']})"
             for c in cases if "error" in c]
    ran = [c for c in cases if "error" not in c]
    n = sum(len(c.get("entries", [])) for c in ran)
    failing = len({c["case"] for c in ran if c.get("entries")})
    if path is None:
        if not n and not explicit:
            return lines
        return lines + [f"memerobust: {n} counterexamples not written: this run has no cache dir (pass "
                        f"--memerobust-counterexamples=PATH)"]
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with folder_locked(path.parent):
            old, problem = previous_entries(path)
            replaced = {c["case"] for c in ran}
            kept = [e for e in old if e.get("case") not in replaced]
            dropped = len(old) - len(kept)
            if not (n or dropped or explicit or problem):
                return lines
            data = manifest(ran, kept)
            atomic_write_text(path, json.dumps(data, indent=1, ensure_ascii=False) + "\n")
            prune_pictures(path, data["entries"])
    except Exception as exc:
        return lines + [f"memerobust: could not write the counterexamples {path} ({type(exc).__name__}: {exc})"]
    if problem:
        lines.append(f"memerobust: {path} held no readable counterexamples manifest ({problem}); replaced")
    others = len({e.get("case") for e in kept})
    besides = (f" ({len(kept)} of {others} other case{'s' if others != 1 else ''} kept from earlier runs)"
               if kept else "")
    if dropped and not n:
        return lines + [f"memerobust: {dropped} counterexamples of cases that now pass or flip no meme removed from "
                        f"{path}{besides}"]
    if not n:
        return lines + [f"memerobust: no failing case flipped a meme from right to wrong: the manifest {path} holds "
                        f"{len(kept)} counterexamples of earlier runs" if kept else
                        f"memerobust: no failing case flipped a meme from right to wrong: an empty manifest written "
                        f"to {path}"]
    cases_of = f"{failing} failing case" + ("s" if failing != 1 else "")
    return lines + [f"memerobust: {n} counterexamples of {cases_of} written to {path}{besides}; replay them with "
                    f"pytest --memerobust-replay={path}"]


# --- replaying ---------------------------------------------------------------------------------------------------


def entry_where(path, index: int, entry: dict | None = None) -> str:
    if not isinstance(entry, dict):
        return f"{path} entry {index}"
    return f"{path} entry {index} ({entry.get('model')}, {entry.get('condition')}, meme {entry.get('meme')})"


def read_manifest(path) -> list[dict]:
    """The entries of a counterexamples manifest, checked: a file that is not one, or an entry that lacks a key or
    has a wrong value, is a ReplayError naming the file and the entry."""
    from ..perturb.conditions import Condition

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
            raise ReplayError(f"{entry_where(path, k)}: expected an object, got {type(entry).__name__}")
        missing = [key for key in REQUIRED if key not in entry]
        if missing:
            raise ReplayError(f"{entry_where(path, k, entry)}: missing {', '.join(missing)}")
        wrong = [key for key, types in REQUIRED.items()
                 if not isinstance(entry[key], types) or (isinstance(entry[key], bool) and types is int)]
        if wrong:
            raise ReplayError(f"{entry_where(path, k, entry)}: wrong type of {', '.join(wrong)}")
        stored = entry.get("picture_file")
        if stored is not None and not (isinstance(stored, str) and _PICTURE_FILE.fullmatch(stored)):
            raise ReplayError(f"{entry_where(path, k, entry)}: picture_file must name a PNG in the pictures folder "
                              f"beside the manifest (NAME.pictures/DIGEST.png), got {stored!r}")
        try:
            Condition.parse(entry["condition"])
        except ValueError as exc:
            raise ReplayError(f"{entry_where(path, k, entry)}: {exc}") from None
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
    limit = f" (--memerobust-limit={session.options.data.limit} leaves it out?)" if session.options.data.limit else ""
    raise ReplayError(f"meme {entry['meme']!r} is not in {spec!r} with a label for task {entry['task']!r}{limit}")


def _has_stored_picture(manifest, entry: dict) -> bool:
    path = stored_picture_path(manifest, entry)
    return path is not None and path.is_file()


def check_replay(session, cases) -> None:
    """Check once, before anything runs, what the replay of `cases` ((manifest, index, entry, model) each) needs:
    the models, datasets, tasks, perturbations and memes; the first problem is a ReplayError naming its entry. An
    attacked picture that is stored needs neither the model it attacked nor the run's seed: it is not regenerated."""
    from ..perturb.conditions import Condition
    from ..perturb import get as get_perturbation

    checked = set()
    for path, k, entry, model in cases:
        try:
            condition = Condition.parse(entry["condition"])
            for name in (condition.text, condition.image):
                if name is not None:
                    get_perturbation(name)
            spec = replay_spec(session, entry)
            regenerated = entry["recipe_needs_batch"] and not _has_stored_picture(path, entry)
            models = [model] + ([entry["model"]] if regenerated else [])
            for m in models:
                if (m, spec, entry["task"]) not in checked:
                    session.check_case(m, spec, entry["task"])
                    checked.add((m, spec, entry["task"]))
            _meme(session, entry, spec)
            if regenerated and entry["seed"] != session.options.seed:
                raise ReplayError(f"its picture is an attack's, regenerated by the run's engine: replay with "
                                  f"--memerobust-seed={entry['seed']}")
        except MemeRobustError as exc:
            raise ReplayError(f"{entry_where(path, k, entry)}: {exc}") from None


def what_changed(entry: dict, engine, row: int, seed: int) -> str:
    """Why a picture regenerated by `engine` (meme `row`, with `seed`) does not have the entry's digest: each of
    what the picture depends on that differs from the record (the meme's clean picture, the perturbations' code and
    the package's version, the fitted attack and the memes it was fitted over, the seed); else where it was computed."""
    from .. import __version__
    from ..perturb.conditions import Condition

    recipe = entry.get("picture_recipe") or {}
    changed = []
    clean = picture_digest(engine.picture(Condition(), row))
    if "clean_picture_digest" not in entry:
        changed.append("the manifest does not record the meme's clean picture (an older manifest)")
    elif clean != entry["clean_picture_digest"]:
        changed.append(f"the meme's clean picture changed (digest {clean}, recorded "
                       f"{entry['clean_picture_digest']}): the dataset's picture is not the one recorded")
    for name, code in (entry.get("perturbation_code") or {}).items():
        try:
            now = perturbation_code(name)
        except MemeRobustError:
            now = None
        if now != code:
            changed.append(f"the code of perturbation {name!r} changed (source digest {now}, recorded {code})")
    if entry.get("version") != __version__:
        changed.append(f"it was recorded by pytest-memerobust {entry.get('version')}, this is {__version__}")
    if entry["recipe_needs_batch"]:
        fitted = engine.attack_context().fingerprint
        if entry.get("attack_fingerprint") not in (None, fitted):
            changed.append(f"the attack was fitted again on other weights (fingerprint {str(fitted)[:16]}, recorded "
                           f"{str(entry['attack_fingerprint'])[:16]}): another checkpoint gets another attack")
        if recipe.get("memes") not in (None, len(engine.ids)):
            changed.append(f"the attack was fitted over a batch of {len(engine.ids)} memes, recorded over "
                           f"{recipe['memes']} (--memerobust-limit)")
    if seed != entry["seed"]:
        changed.append(f"the seed is {seed}, recorded {entry['seed']}")
    if changed:
        return "; ".join(changed)
    made = entry.get("made_on") or {}
    here = _made_on(engine)
    where = (f"recorded on {made.get('device')} with torch {made.get('torch')}, regenerated on {here['device']} with "
             f"torch {here['torch']}" if made else f"regenerated on {here['device']} with torch {here['torch']}")
    attack = ", the fitted attack" if entry["recipe_needs_batch"] else ""
    return (f"the meme's clean picture, the perturbations' code{attack} and the seed are as recorded, so the "
            f"perturbation computes a different picture here ({where})")


def regenerate_picture(session, entry: dict, spec: str, detector, stored: Path | None = None):
    """The entry's perturbed picture (a uint8 tensor on `detector`'s device): the stored one when `stored` is there
    (checked against its digest; an attack is not fitted again), else regenerated from its recipe and checked
    against its digest, a difference saying what changed; None for a meme without a picture."""
    from ..engine import Engine, Readers
    from ..perturb.conditions import Condition
    from ..data.pictures import as_picture

    device = str(getattr(detector, "device", "cpu"))
    if stored is not None and stored.is_file() and entry["picture_digest"] is not None:
        return as_picture(load_stored_picture(stored, entry), device)
    dataset, meme = _meme(session, entry, spec)
    if not meme.has_picture:
        return None
    condition = Condition.parse(entry["condition"])
    if entry["recipe_needs_batch"]:  # an attack: the whole batch again, on the detector it attacked
        engine = session.engine(entry["model"], spec, entry["task"], condition.defence, condition.source)
        row, seed = engine.ids.index(meme.id), engine.seed
    else:  # keyed by (seed, perturbation, severity, meme id): the meme alone gives the same picture
        engine = Engine(detector, dataclasses.replace(dataset, memes=[meme]), seed=entry["seed"],
                        readers=Readers(text_reader=session.ocr()))
        row, seed = 0, entry["seed"]
    picture = engine.picture(condition, row)
    recorded = entry["picture_digest"]
    if recorded is not None and picture_digest(picture) != recorded:
        missing = (f" (its stored picture {entry['picture_file']} is not beside the manifest: copy the folder "
                   f"{stored.parent.name}/ with it)" if stored is not None else "")
        raise ReplayError(f"the regenerated picture of meme {meme.id!r} under {condition.id} has digest "
                          f"{picture_digest(picture)}, not the recorded {recorded}{missing}: "
                          f"{what_changed(entry, engine, row, seed)}")
    return as_picture(picture, device)


def replay_entry(session, entry: dict, model: str | None = None, manifest=None) -> tuple[bool, np.ndarray]:
    """(whether the meme still evades the detector, its class probabilities): the entry's caption verbatim and its
    picture (stored beside `manifest`, else regenerated), shown to `model` (default: the recorded one)."""
    from ..judge.results import predicted_labels

    model = model or entry["model"]
    spec = replay_spec(session, entry)
    detector = session.detector(model)
    dataset, meme = _meme(session, entry, spec)
    label = np.asarray(entry["label"])
    now = np.asarray(meme.labels[entry["task"]])
    if now.shape != label.shape or not np.array_equal(now, label):
        raise ReplayError(f"meme {meme.id!r} is labelled {now.tolist()} for {entry['task']!r} in {spec!r}, not the "
                          f"recorded {label.tolist()}: the dataset changed since the counterexample was recorded")
    stored = stored_picture_path(manifest, entry)
    picture = regenerate_picture(session, entry, spec, detector, stored) if _reads(detector, "image") else None
    caption = entry["caption"] if _reads(detector, "text") else None
    proba = session.engine(model, spec, entry["task"]).probabilities([picture], [caption])[0]
    still = predicted_labels(label[None], proba[None])[0] != truth_codes(label[None])[0]
    return bool(still), proba
