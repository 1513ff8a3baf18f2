"""Perturbed memes as a Hugging Face `datasets` set: what adversarial training and audits read.

The rows come from the run that wrote a report. Its recipe (options, seed, model cards and checkpoints, each
result's condition) is evaluated again through the session and engine a run uses (perturbations are keyed by seed,
meme, name and severity), and every chosen condition's predictions, and its clean ones, must hash to the report's
`predictions_sha256` before anything is written: an export holds exactly the memes that run's detector was fed and
what it answered, or nothing. A run that exports at its end (--memerobust-export) hands over its own session, whose
results are those of the report.

Pictures are the uint8 pixels the detector was fed, as PNG (lossless), stored as bytes in the parquet so the set is
self-contained (never local paths); `imagefolder` writes them as files beside a metadata.jsonl instead. The folder
also gets a dataset card (README.md) and export.json: the report's seed, options, cards and checkpoint digests, the
tool's version, each perturbation's description and code digest, and the row counts. It is written in a temporary
folder beside the target and renamed into place: an export is whole or absent.
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..atomic import writing
from ..errors import DiskFull, MemeRobustError

FORMAT = "pytest-memerobust-export/1"
LAYOUTS = ("parquet", "imagefolder")
PARQUET_FILE = "data/train-00000-of-00001.parquet"  # `train` in the name: the split datasets infers
PICTURES = "images"  # imagefolder: images/<picture digest>.png, one file per distinct picture
ROW_GROUP = 100  # rows per parquet row group (datasets' own size for image data): memory stays bounded
INSTALL_HINT = 'pip install "pytest-memerobust[export]"'

# what each column holds, for the dataset card and export.json
COLUMNS = {
    "image": "the picture the detector was fed under the condition (PNG bytes; none for a meme without a picture)",
    "caption": "the caption as the detector read it under the condition",
    "original_caption": "the meme's own caption",
    "original_caption_source": "where original_caption came from: dataset, or the OCR backend (rapidocr) that read "
                               "it off the clean picture because the dataset had none",
    "caption_source": "where caption came from: the OCR backend (rapidocr) when the run read every caption off the "
                      "picture fed (--memerobust-captions=ocr), else original_caption_source",
    "label": "the meme's true label for the task (a list of the labels on, for a multi-label task)",
    "condition": "the condition's id, e.g. text=typos@3+image=jpeg_compression@2",
    "text_perturbation": "the caption edit's name (none: the caption is the meme's)",
    "text_severity": "its severity",
    "image_perturbation": "the picture edit's name (none: the picture is the meme's)",
    "image_severity": "its severity",
    "seed": "the run's seed: perturbations are keyed by (seed, meme id, name, severity)",
    "meme_id": "the meme's id in the dataset",
    "model": "the detector, as the report names it",
    "dataset": "the dataset spec the run read",
    "task": "the label task scored",
    "proba_clean": "the detector's probability of every class (in the label's order) on the clean meme",
    "proba": "the same under the condition",
    "correct_clean": "the clean prediction is the true label",
    "correct": "the prediction under the condition is the true label",
    "flipped": "right clean and wrong under the condition, answered both times: a counterexample",
    "abstained_clean": "a detector that can decline (a prompted model) declined the clean meme; none for others",
    "abstained": "the same under the condition",
    "words_changed": "share of the caption's words the caption edit changed (none without one)",
    "picture_digest": "the digest the feature cache and counterexample manifests key this picture by",
}


class ExportError(MemeRobustError):
    """An export cannot be made: the report, a condition, the output folder or the regenerated predictions; the
    message names which."""


def require_datasets() -> None:
    """An ExportError saying how to install `datasets` when it is missing (found, not imported: it is slow to
    import, and a run checks this at its start)."""
    from importlib.util import find_spec

    if find_spec("datasets") is None:
        raise ExportError(f"exporting perturbed memes needs the `datasets` package: {INSTALL_HINT}")


def earlier_export(folder: Path) -> bool:
    """Whether `folder` holds an export this tool wrote (its export.json says so): what a suite's [export] may
    replace run after run."""
    try:
        info = json.loads((Path(folder) / "export.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(info, dict) and info.get("format") == FORMAT and info.get("tool") == "pytest-memerobust"


def check_out(out: Path, option: str = "--out ", replace: bool = False) -> Path:
    """The output folder: missing or empty (or, with `replace`, an earlier export of this tool), in a folder that
    exists or can be made (checked before any work); `option` names it in the message."""
    out = Path(out).expanduser()
    if out.exists() and not out.is_dir():
        raise ExportError(f"{option}{out} is a file; name a new or empty folder")
    if out.is_dir() and any(out.iterdir()) and not (replace and earlier_export(out)):
        raise ExportError(f"{option}{out} is not empty: an export goes into a new or empty folder"
                          + (" (or one an earlier export wrote)" if replace else "") + ", never over files")
    parent = out.resolve().parent
    while not parent.exists():
        parent = parent.parent
    if not os.access(parent, os.W_OK):
        raise ExportError(f"{option}{out}: {parent} is not writable by this user")
    return out


@dataclass(frozen=True)
class Part:
    """One (model, dataset, condition) result of the report: what is exported, and the digests it must match."""

    model: str  # as the run named it (a card name, a .toml path, with a fusion mode)
    label: str  # as the report's tables name it
    dataset: str  # the data spec (with #ocr-captions when the captions were read off the pictures)
    task: str
    condition: str
    digest: str
    clean_digest: str
    result: dict  # the report's result dict

    @property
    def data(self) -> tuple[str, str | None]:
        """(spec, captions) as session.evaluate takes them."""
        from ..run.session import CAPTIONS_BY_OCR

        ocr = self.dataset.endswith(CAPTIONS_BY_OCR)
        return self.dataset.removesuffix(CAPTIONS_BY_OCR), "ocr" if ocr else None


def check_report(report: dict, path="the report") -> None:
    """A report an export can be made from: whole (not an interrupted run's verdict alone) and holding results."""
    if report.get("partial"):
        raise ExportError(f"{path} is a partial report ({report['partial']}): it holds the verdict but not the "
                          f"results an export is checked against; export the report of a whole run")
    if not report.get("groups"):
        raise ExportError(f"{path} holds no condition results (no robustness case was measured): nothing to export")


def select(report: dict, conditions=None, models=None, path="the report") -> list[Part]:
    """The report's results to export, in the report's order, each (model, dataset, condition) once: every
    condition that perturbs the memes (default), or those named; `models`: only these (labels or names). A
    prompt edit rewords the detector's instruction, not the meme, and a defended condition is measured behind
    the defence (the report keeps no digest of it to check): neither can be exported."""
    from ..errors import UnknownNameError

    parts: dict[tuple, Part] = {}
    held_models, held = set(), []
    try:
        for group in report["groups"]:
            held_models |= {group["model"], group["label"]}
            if models and not {group["model"], group["label"]} & set(models):
                continue
            held += [group["clean"]["condition"], *(row["condition"] for row in group["results"])]
            for row in group["results"]:
                if row["kind"] not in ("clean", "prompt"):
                    parts.setdefault((group["model"], group["dataset"], row["condition"]), Part(
                        group["model"], group["label"], group["dataset"], group["task"], row["condition"],
                        row["predictions_sha256"], group["clean"]["predictions_sha256"], row))
    except (KeyError, TypeError) as exc:
        raise ExportError(f"{path}: damaged pytest-memerobust report ({type(exc).__name__}: {exc})") from None
    for model in models or ():
        if model not in held_models:
            raise UnknownNameError("model", model, held_models, hint=f"{path} holds results of these")
    chosen = list(parts.values())
    if conditions:
        exportable = {p.condition for p in chosen}
        for condition in conditions:
            if condition in held and condition not in exportable:
                raise ExportError(f"condition {condition!r} of {path} perturbs no meme (the clean memes, or a "
                                  f"prompt edit that rewords the detector's instruction): nothing to export")
            if condition not in exportable:
                raise UnknownNameError("condition", condition, exportable,
                                       hint=f"{path} holds no result of it (defended conditions are not exported)")
        chosen = [p for p in chosen if p.condition in conditions]
    if not chosen:
        raise ExportError(f"{path} holds no perturbed condition to export")
    return chosen


def session_for(report: dict, parts: list[Part], *, device: str | None = None, checkpoints=None,
                cache_dir: Path | None = None, allow_outside_paths: bool = False):
    """A session that evaluates the report's recipe again: its options, seed and models, each with the checkpoint
    the run recorded (or `checkpoints`: name -> path, where it has moved; "" for every model), on `device` (default:
    the run's). `cache_dir`: a run's cache (encoded features, fitted attacks, a hosted model's answers, all keyed by
    what they depend on), else everything is computed again and held in memory."""
    from ..judge.results import StatsConfig
    from ..run.options import Options, split_model
    from ..run.session import RobustnessSession

    from ..errors import UnknownNameError

    options = report.get("options") or {}
    models = tuple(dict.fromkeys(p.model for p in parts))
    given = dict(checkpoints or {})
    held = {split_model(m)[0] for m in (*(report.get("models") or {}), *models)}
    for name in given:
        if name and name not in held:  # a typo would otherwise leave the run's checkpoint in use, unsaid
            raise UnknownNameError("model", name, held, hint=f"--checkpoint {name}=PATH names a model of the run")
    wanted = {}
    for model in models:
        name = split_model(model)[0]
        recorded = (report.get("models") or {}).get(model) or {}
        path = given.get(name) or given.get("")
        if path is None and recorded.get("checkpoint") not in (None, "None"):
            path = recorded["checkpoint"]
            if not Path(path).is_file():
                raise ExportError(f"model {model}: the run's checkpoint {path} is not here; pass --checkpoint "
                                  f"{name}=PATH (its sha256 must be {recorded.get('checkpoint_sha256')})")
        if path is not None:
            wanted[name] = str(path)
    stats = StatsConfig(n_resamples=options.get("n_resamples", 1000), confidence=options.get("confidence", 0.95),
                        seed=report.get("seed", 0), scale=options.get("robustness_scale", "percent"))
    return RobustnessSession(Options(
        models=models, data=options.get("data"), checkpoints=wanted, device=device or options.get("device", "auto"),
        batch_size=options.get("batch_size", 64), seed=report.get("seed", 0), limit=options.get("limit"),
        sample=options.get("sample"), task=options.get("task"), stats=stats,
        captions=options.get("captions", "dataset"), ocr=options.get("ocr"),
        cache_dir=cache_dir, feature_cache=cache_dir is not None, allow_outside_paths=allow_outside_paths))


def class_names(task_classes, card_classes) -> tuple[str, ...]:
    """The names of a task's classes in the export: the dataset's, unless they are only their numbers (a generic
    csv/jsonl file's `0`, `1`, ...), then those of the card that scored it (`non-hateful`, `hateful`)."""
    task_classes = tuple(map(str, task_classes))
    numbered = task_classes == tuple(str(i) for i in range(len(task_classes)))
    return tuple(card_classes) if numbered and len(card_classes) == len(task_classes) else task_classes


def check_recipe(session, report: dict, parts: list[Part], layout: str, path="the report") -> tuple[list, bool]:
    """Before the long work: each model has the weights the run had (the checkpoint's sha256), each dataset the
    memes it had (their fingerprint), each case fits its detector (session.check_case), and the chosen conditions
    share one label task. Returns (the task's class names, whether it is multi-label)."""
    for model in dict.fromkeys(p.model for p in parts):
        recorded = ((report.get("models") or {}).get(model) or {}).get("checkpoint_sha256")
        now = session.detector(model).fingerprint
        if recorded is not None and now != recorded:
            raise ExportError(f"model {model}: its weights have sha256 {now}, the run of {path} had {recorded}: "
                              f"another checkpoint gives other predictions; pass --checkpoint with the run's")
    tasks = {}
    for p in parts:
        spec, captions = p.data
        session.check_case(p.model, spec, p.task, captions)
        if session.data_spec(spec, captions) != p.dataset:
            raise ExportError(f"{p.label} on {p.dataset}: this session reads {session.data_spec(spec, captions)!r}")
        dataset = session.dataset(p.dataset)
        classes = class_names(dataset.classes[p.task], session.detector(p.model).classes)
        tasks[(classes, p.task in dataset.multilabel)] = p.task
        if layout == "imagefolder" and not all(m.has_picture for m in dataset.memes):
            raise ExportError(f"{p.dataset} has memes without a picture, which an imagefolder cannot hold: export "
                              f"it as parquet (--format parquet)")
    for spec in dict.fromkeys(p.dataset for p in parts):
        recorded = ((report.get("datasets") or {}).get(spec) or {}).get("fingerprint")
        if recorded is not None and session.fingerprint(spec) != recorded:
            raise ExportError(f"dataset {spec}: its memes (ids, captions, labels, pictures) differ from those the "
                              f"run of {path} read (fingerprint {session.fingerprint(spec)[:16]}, recorded "
                              f"{recorded[:16]}; --memerobust-limit={report.get('options', {}).get('limit')})")
    if len(tasks) > 1:
        listed = "; ".join(f"{task}: {', '.join(names)}" for (names, _), task in tasks.items())
        raise ExportError(f"the chosen conditions score different label tasks ({listed}): one export holds one "
                          f"task's labels; choose with --model or --conditions")
    [(classes, multilabel)] = list(tasks)
    return list(classes), multilabel


def evaluate(session, parts: list[Part], path="the report") -> list:
    """(part, result) of each part, evaluated through the session as the run evaluated it (planned together, so
    one shard-major pass computes them), with its predictions and the clean ones checked against the report's
    digests: a difference is an ExportError, and nothing is written."""
    from ..perturb.conditions import Condition

    for p in parts:
        spec, captions = p.data
        if (p.model, p.dataset, p.condition) not in session.results:  # (a run exporting its own: already there)
            session.plan(p.model, spec, Condition.parse(p.condition), captions)
    out = []
    for p in parts:
        spec, captions = p.data
        result = session.evaluate(p.model, p.condition, data=spec, task=p.task, captions=captions)
        clean = session.results[(p.model, p.dataset, Condition().id)]
        for what, recorded, now in (("clean", p.clean_digest, clean.predictions_digest),
                                    (p.condition, p.digest, result.predictions_digest)):
            if now != recorded:
                raise ExportError(
                    f"{p.label} on {p.dataset}, {what}: the regenerated predictions hash to {now[:16]}, the run of "
                    f"{path} recorded {recorded[:16]}: the detector, its checkpoint, the data or the device differ "
                    f"from the run's (a GPU run exported on a CPU differs: --device); nothing was written")
        out.append((p, result))
    return out


def outcomes(result) -> dict[str, np.ndarray]:
    """Per meme of a result: right clean, right under the condition, declined (clean or here), and flipped (right
    clean, wrong here, answered both times: what replay.worst_flips ranks)."""
    from ..run.replay import truth_codes
    from ..judge.results import predicted_labels

    y = result.reference  # the true labels (unlabelled memes: the clean predictions, so "correct" is "kept")
    truth = truth_codes(y)
    right_clean = predicted_labels(y, result.proba_clean) == truth
    right = predicted_labels(y, result.proba) == truth
    declined = np.zeros(len(y), bool)
    for abstained in (result.abstained_clean, result.abstained):
        if abstained is not None:
            declined |= np.asarray(abstained, bool)
    return {"correct_clean": right_clean, "correct": right, "declined": declined,
            "flipped": right_clean & ~right & ~declined}


def rows(session, part: Part, result, counterexamples: bool = False):
    """The part's rows, in the dataset's order (only the flipped memes with `counterexamples`): each a dict of the
    columns but `image`, and the picture fed (H x W x 3 uint8, None for a meme without one)."""
    from ..perturb.conditions import Condition
    from ..run.replay import picture_digest

    condition = Condition.parse(part.condition)
    engine = session.engine(part.model, part.dataset, part.task, condition.defence, condition.source)
    y = np.asarray(result.y_true)
    told = outcomes(result)
    words = engine.words_changed(condition)
    chosen = np.flatnonzero(told["flipped"]) if counterexamples else range(len(y))

    def flag(values, i):
        return None if values is None else bool(np.asarray(values)[i])

    for i in chosen:
        i = int(i)
        meme = engine.dataset.memes[i]
        picture = engine.picture(condition, i) if meme.has_picture else None  # first: a joint attack's caption
        caption = engine.caption(condition, i)  # is computed with its picture
        original_source = meme.meta.get("caption_source") or "dataset"  # data.ocr.fill_missing_captions marks it
        row = {
            "caption": caption, "original_caption": meme.text, "original_caption_source": original_source,
            "caption_source": getattr(engine.ocr, "name", "ocr") if engine.ocr is not None else original_source,
            "label": [k for k, on in enumerate(y[i]) if on] if y.ndim == 2 else int(y[i]),
            "condition": part.condition, "text_perturbation": condition.text,
            "text_severity": condition.text_severity, "image_perturbation": condition.image,
            "image_severity": condition.image_severity, "seed": int(engine.seed), "meme_id": meme.id,
            "model": part.label, "dataset": part.dataset, "task": part.task,
            "proba_clean": np.asarray(result.proba_clean[i], dtype=np.float64).tolist(),
            "proba": np.asarray(result.proba[i], dtype=np.float64).tolist(),
            "correct_clean": bool(told["correct_clean"][i]), "correct": bool(told["correct"][i]),
            "flipped": bool(told["flipped"][i]), "abstained_clean": flag(result.abstained_clean, i),
            "abstained": flag(result.abstained, i),
            "words_changed": None if words is None else float(words[i]),
            "picture_digest": None if picture is None else picture_digest(picture)}
        yield row, picture


def features(classes: list[str], multilabel: bool):
    """The set's `datasets.Features`: the label a ClassLabel of the task's class names (a list of them for a
    multi-label task), the picture an Image stored as bytes."""
    from datasets import ClassLabel, Features, Image, List, Value

    label = ClassLabel(names=list(classes))
    text, number = Value("string"), Value("float64")
    return Features({
        "image": Image(), "caption": text, "original_caption": text, "original_caption_source": text,
        "caption_source": text,
        "label": List(label) if multilabel else label, "condition": text, "text_perturbation": text,
        "text_severity": Value("int32"), "image_perturbation": text, "image_severity": Value("int32"),
        "seed": Value("int64"), "meme_id": text, "model": text, "dataset": text, "task": text,
        "proba_clean": List(number), "proba": List(number), "correct_clean": Value("bool"), "correct": Value("bool"),
        "flipped": Value("bool"), "abstained_clean": Value("bool"), "abstained": Value("bool"),
        "words_changed": number, "picture_digest": text})


def png_bytes(picture: np.ndarray) -> bytes:
    """The picture as PNG (lossless: it decodes to the same pixels), as replay.store_picture writes it."""
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(picture)).save(buffer, format="PNG")
    return buffer.getvalue()


class Rows:
    """What both layouts' writers share: used as a context, a writer is closed once the rows are in (its files then
    in `files`), or after a failure let go of without another write (a writer whose write failed, on a full disk,
    fails again, or finds its file closed)."""

    files: list[str] = []

    def __enter__(self):
        return self

    def __exit__(self, kind, value, traceback) -> None:
        if kind is None:
            self.files = self.close()
            return
        with contextlib.suppress(Exception):
            self.release()


class ParquetRows(Rows):
    """Rows written as one parquet file of datasets' schema (its features in the metadata), ROW_GROUP at a time."""

    def __init__(self, folder: Path, schema):
        import pyarrow.parquet as pq

        self.features, self.path = schema, folder / PARQUET_FILE
        self.path.parent.mkdir(parents=True)
        with writing(self.path):
            self.writer = pq.ParquetWriter(self.path, schema.arrow_schema)
        self.pending: list[dict] = []

    def add(self, row: dict, picture) -> None:
        image = None if picture is None else {"bytes": png_bytes(picture), "path": f"{row['picture_digest']}.png"}
        self.pending.append({"image": image, **row})
        if len(self.pending) >= ROW_GROUP:
            self.flush()

    def flush(self) -> None:
        import pyarrow as pa

        if self.pending:
            columns = {name: [row[name] for row in self.pending] for name in self.features}
            table = pa.Table.from_pydict(self.features.encode_batch(columns), schema=self.features.arrow_schema)
            with writing(self.path):
                self.writer.write_table(table, row_group_size=ROW_GROUP)
            self.pending = []

    def close(self) -> list[str]:
        self.flush()
        with writing(self.path):
            self.writer.close()
        return [PARQUET_FILE]

    def release(self) -> None:
        self.writer.close()


class ImageFolderRows(Rows):
    """Rows as `datasets`' ImageFolder reads them: each distinct picture once, images/<digest>.png, and one
    metadata.jsonl line per row naming its picture (`file_name`)."""

    def __init__(self, folder: Path, schema):
        self.folder = folder
        self.metadata = (folder / "metadata.jsonl").open("w", encoding="utf-8")

    def add(self, row: dict, picture) -> None:
        from ..run.replay import store_picture

        name = store_picture(self.folder / PICTURES, picture, row["picture_digest"])
        with writing(self.folder / "metadata.jsonl"):
            self.metadata.write(json.dumps({"file_name": name, **row}, ensure_ascii=False) + "\n")

    def close(self) -> list[str]:
        with writing(self.folder / "metadata.jsonl"):
            self.metadata.close()
        return [f"{PICTURES}/", "metadata.jsonl"]

    def release(self) -> None:
        self.metadata.close()


def write_texts(folder: Path, texts: dict[str, str]) -> None:
    """A set's text files (its card, its provenance) written into its staged folder; a full disk names the file."""
    for name, text in texts.items():
        with writing(folder / name):
            (folder / name).write_text(text, encoding="utf-8")


class Staged:
    """A temporary folder beside `out` that becomes `out` only once the export is whole (and then replaces an
    earlier export there, with `replace`); a full disk while it is written names the file as it would be in `out`."""

    def __init__(self, out: Path, replace: bool = False):
        self.out, self.replace = out, replace

    def __enter__(self) -> Path:
        parent = self.out.resolve().parent
        with writing(self.out):
            parent.mkdir(parents=True, exist_ok=True)
            self.tmp = Path(tempfile.mkdtemp(dir=parent, prefix=f".{self.out.name}.", suffix=".tmp"))
        return self.tmp

    def __exit__(self, kind, value, traceback) -> None:
        if kind is None:
            try:
                umask = os.umask(0)
                os.umask(umask)
                os.chmod(self.tmp, 0o777 & ~umask)  # mkdtemp makes 0700: the mode a plain mkdir gives
                earlier = None
                if self.out.is_dir() and self.replace and earlier_export(self.out):
                    earlier = self.out.with_name(f".{self.out.name}.{os.getpid()}.old")
                    os.replace(self.out, earlier)  # set aside until the new export is in place
                elif self.out.is_dir():
                    self.out.rmdir()  # empty (checked): the finished export takes its place
                os.replace(self.tmp, self.out)
                if earlier is not None:
                    shutil.rmtree(earlier, ignore_errors=True)
                return
            except OSError as exc:
                shutil.rmtree(self.tmp, ignore_errors=True)
                raise ExportError(f"cannot move the export into {self.out}: {exc.strerror or exc}") from None
        shutil.rmtree(self.tmp, ignore_errors=True)
        if isinstance(value, DiskFull) and Path(value.filename).is_relative_to(self.tmp):
            raise value.named(self.out / Path(value.filename).relative_to(self.tmp)) from None


def perturbation_info(name: str) -> dict:
    """What a perturbation is, as AugLy and TextAttack record their transforms: its kind, description, severities
    and a digest of its code (replay.perturbation_code), which changes when its parameters do."""
    from ..perturb import get
    from ..run.replay import perturbation_code

    p = get(name)
    return {"modality": p.modality, "family": p.family, "description": p.doc, "severities": list(p.severities),
            "label_preserving": p.label_preserving, "attacks_the_detector": p.needs_model,
            "draws_caption": p.caption_source, "tags": sorted(p.tags), "code_sha": perturbation_code(name)}


def provenance(report: dict, parts: list[Part], counts: list[dict], layout: str, counterexamples: bool,
               files: list[str], classes: list[str], multilabel: bool) -> dict:
    """export.json: what was exported and from which run, enough to regenerate it."""
    from .. import __version__
    from ..perturb.conditions import Condition

    names = sorted({n for p in parts for n in (Condition.parse(p.condition).text, Condition.parse(p.condition).image)
                    if n is not None})
    models = report.get("models") or {}
    return {
        "format": FORMAT, "tool": "pytest-memerobust", "version": __version__, "layout": layout, "files": files,
        "selection": "the memes that flipped (right clean, wrong under the condition)" if counterexamples
        else "every meme",
        "rows": sum(c["rows"] for c in counts), "by_condition": counts,
        "task": parts[0].task, "classes": classes, "multilabel": multilabel,
        "seed": report.get("seed"), "options": report.get("options"), "run_versions": report.get("versions"),
        "models": {p.label: {k: models.get(p.model, {}).get(k) for k in ("checkpoint", "checkpoint_sha256", "card")}
                   for p in parts},
        "datasets": {p.dataset: (report.get("datasets") or {}).get(p.dataset) for p in parts},
        "conditions": {p.condition: {k: p.result.get(k) for k in ("kind", "text", "text_severity", "image",
                                                                   "image_severity", "caption_edit",
                                                                   "picture_attack")} for p in parts},
        "perturbations": {name: perturbation_info(name) for name in names},
        "columns": COLUMNS,
    }


def front_matter(pretty_name: str, layout: str) -> list[str]:
    """A dataset card's YAML header (its lines): the set's name and tags, and for parquet where the rows are, so
    that `load_dataset(DIR)` finds them (an imagefolder is found by its metadata.jsonl)."""
    configs = (["configs:", "- config_name: default", "  data_files:", "  - split: train", "    path: data/*.parquet"]
               if layout == "parquet" else [])
    return ["---", f"pretty_name: {pretty_name}", "tags:", "- adversarial-robustness", "- hateful-memes",
            "- pytest-memerobust", *configs, "---"]


def card(info: dict) -> str:
    """README.md: the dataset card, its YAML header telling `load_dataset(DIR)` where the rows are."""
    models = ", ".join(info["models"])
    lines = [
        *front_matter("perturbed memes (pytest-memerobust)", info["layout"]), "",
        f"# Perturbed memes: {models} on {', '.join(info['datasets'])}", "",
        f"{info['rows']} rows ({info['selection']}) of {len(info['by_condition'])} conditions, as pytest-memerobust "
        f"{info['version']} regenerated them from a run with seed {info['seed']}: each picture and caption exactly "
        f"as the detector read them, and its probabilities clean and under the condition (checked against the "
        f"run's report). Label task `{info['task']}`: {', '.join(info['classes'])}"
        f"{' (multi-label)' if info['multilabel'] else ''}.", "",
        "```python", "import datasets", "",
        f'rows = datasets.load_dataset("{info["layout"]}", data_dir="THIS_FOLDER")["train"]', "```", "",
        "| model | dataset | condition | memes | rows | flipped |", "|---|---|---|---|---|---|",
        *(f"| {c['model']} | {c['dataset']} | `{c['condition']}` | {c['memes']} | {c['rows']} | {c['flipped']} |"
          for c in info["by_condition"]), "",
        "## Columns", "", "| column | holds |", "|---|---|",
        *(f"| `{name}` | {text} |" for name, text in info["columns"].items()), "",
        "## Provenance", "",
        *(f"- model `{label}`: checkpoint sha256 `{m['checkpoint_sha256']}`" for label, m in info["models"].items()),
        *(f"- dataset `{spec}`: {d.get('n')} memes, fingerprint `{d.get('fingerprint')}`"
          for spec, d in info["datasets"].items() if d),
        *(f"- `{name}` ({p['modality']}, family {p['family']}, code sha `{p['code_sha']}`): {p['description']}"
          for name, p in info["perturbations"].items()), "",
        "export.json holds all of it: the run's options and versions, the model cards, each condition's caption "
        "edit and attack measures, each perturbation's severities and tags.", ""]
    return "\n".join(lines)


def export(session, report: dict, out: Path, *, conditions=None, models=None, counterexamples: bool = False,
           layout: str = "parquet", path="the report", replace: bool = False) -> dict:
    """Write the perturbed memes of `report`'s run (evaluated by `session`) to the folder `out`; its export.json.
    Every check that needs no evaluation comes first; the folder appears only once the export is whole.
    `replace`: an earlier export in `out` is replaced (a suite's [export], run after run)."""
    require_datasets()
    if layout not in LAYOUTS:
        raise ExportError(f"--format {layout!r}: expected one of {', '.join(LAYOUTS)}")
    out = check_out(out, replace=replace)
    check_report(report, path)
    parts = select(report, conditions, models, path)
    classes, multilabel = check_recipe(session, report, parts, layout, path)
    evaluated = evaluate(session, parts, path)
    schema = features(classes, multilabel)
    counts = []
    with Staged(out, replace) as folder:
        with (ParquetRows if layout == "parquet" else ImageFolderRows)(folder, schema) as writer:
            for part, result in evaluated:
                n = 0
                for row, picture in rows(session, part, result, counterexamples):
                    writer.add(row, picture)
                    n += 1
                counts.append({"model": part.label, "dataset": part.dataset, "condition": part.condition,
                               "memes": int(len(result.y_true)), "rows": n,
                               "flipped": int(outcomes(result)["flipped"].sum())})
        files = writer.files
        if not any(c["rows"] for c in counts):
            raise ExportError(f"no meme flipped under the {len(parts)} chosen conditions of {path}: no "
                              f"counterexample to export, nothing written")
        info = provenance(report, parts, counts, layout, counterexamples, files + ["README.md", "export.json"],
                          classes, multilabel)
        write_texts(folder, {"README.md": card(info), "export.json": json.dumps(info, indent=2, allow_nan=True) + "\n"})
    return info


def export_report(path: Path, out: Path, *, conditions=None, models=None, counterexamples: bool = False,
                  layout: str = "parquet", device: str | None = None, checkpoints=None, cache_dir: Path | None = None,
                  allow_outside_paths: bool = False) -> dict:
    """`memerobust export`: the report read and checked, the output folder checked and the conditions chosen
    before any detector loads; then its run evaluated again and exported (`export`)."""
    from .baseline import read_report

    require_datasets()
    check_out(out)
    report = read_report(Path(path))
    check_report(report, path)
    parts = select(report, conditions, models, path)
    session = session_for(report, parts, device=device, checkpoints=checkpoints, cache_dir=cache_dir,
                          allow_outside_paths=allow_outside_paths)
    try:
        return export(session, report, out, conditions=conditions, models=models, counterexamples=counterexamples,
                      layout=layout, path=path)
    finally:
        session.close()


def summary_line(info: dict, out: Path) -> str:
    """What an export wrote, in one line."""
    flipped = sum(c["flipped"] for c in info["by_condition"])
    memes = sorted({c["memes"] for c in info["by_condition"]})
    grid = f"{'/'.join(map(str, memes))} memes x {len(info['by_condition'])} conditions"
    what = f"{grid}, {flipped} flipped" if info["selection"] == "every meme" else f"the memes that flipped of {grid}"
    load = f"datasets.load_dataset({info['layout']!r}, data_dir={str(out)!r})"
    return (f"exported {info['rows']} rows ({what}) to {out} as {info['layout']}: {', '.join(info['files'])}; "
            f"load it with {load}")


def export_after_run(session, report: dict, out: Path, counterexamples: bool = False) -> str:
    """--memerobust-export: the run's own perturbed memes, from its session (nothing evaluated again); the line
    that says what was written, or why nothing was."""
    try:
        info = export(session, report, out, counterexamples=counterexamples, path="this run's report")
    except MemeRobustError as exc:
        return f"memerobust: no export written to {out}: {exc}"
    return f"memerobust: {summary_line(info, out)}"


def export_suite_after_run(session, report: dict, suite: str, spec: dict) -> str:
    """A suite's [export] at the end of the run: its own conditions' perturbed memes (of every model that ran it),
    from the run's session, replacing the suite's earlier export; the line that says what was written or why not."""
    out = Path(spec["out"])
    conditions = list(dict.fromkeys(row["condition"] for group in report.get("groups", [])
                                    if group.get("suite") == suite for row in group["results"]
                                    if row["kind"] not in ("clean", "prompt") and not row.get("defence")))
    try:
        info = export(session, report, out, conditions=conditions, counterexamples=spec["counterexamples"],
                      layout=spec["format"], path=f"suite {suite!r} of this run's report", replace=True)
    except MemeRobustError as exc:
        return f"memerobust: suite {suite}: no export written to {out}: {exc}"
    return f"memerobust: suite {suite}: {summary_line(info, out)}"

