"""Perturbed memes as a Hugging Face `datasets` set: what adversarial training and audits read.

The rows come from the run that wrote a report: run/export.py evaluates its recipe again (or takes a finished run's
own session) and checks every prediction against the report's `predictions_sha256` before a row is written. This
module is what the set is: its columns, its two layouts, its card and export.json, the report's parts chosen, and the
folder staged and renamed into place.

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
        from ..data.reading import CAPTIONS_BY_OCR

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


def class_names(task_classes, card_classes) -> tuple[str, ...]:
    """The names of a task's classes in the export: the dataset's, unless they are only their numbers (a generic
    csv/jsonl file's `0`, `1`, ...), then those of the card that scored it (`non-hateful`, `hateful`)."""
    task_classes = tuple(map(str, task_classes))
    numbered = task_classes == tuple(str(i) for i in range(len(task_classes)))
    return tuple(card_classes) if numbered and len(card_classes) == len(task_classes) else task_classes


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
        from .artifacts import store_picture

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
    from .artifacts import perturbation_code

    p = get(name)
    return {"modality": p.modality, "family": p.family, "description": p.code.doc,
            "severities": list(p.parameters.severities), "label_preserving": p.traits.label_preserving,
            "attacks_the_detector": p.needs_model, "draws_caption": p.traits.caption_source, "tags": sorted(p.tags),
            "code_sha": perturbation_code(name)}


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


def summary_line(info: dict, out: Path) -> str:
    """What an export wrote, in one line."""
    flipped = sum(c["flipped"] for c in info["by_condition"])
    memes = sorted({c["memes"] for c in info["by_condition"]})
    grid = f"{'/'.join(map(str, memes))} memes x {len(info['by_condition'])} conditions"
    what = f"{grid}, {flipped} flipped" if info["selection"] == "every meme" else f"the memes that flipped of {grid}"
    load = f"datasets.load_dataset({info['layout']!r}, data_dir={str(out)!r})"
    return (f"exported {info['rows']} rows ({what}) to {out} as {info['layout']}: {', '.join(info['files'])}; "
            f"load it with {load}")
