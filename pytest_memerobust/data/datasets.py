"""Loaders for the published harmful-meme datasets: FigMemes, ToxicTags, MAMI, HarMeme, fine-grained Hateful Memes.

Each reads the files as their authors distribute them (the docstring of each loader names the layout and where it
was checked) and follows the rules of `loaders.py`: strict UTF-8, every problem a `DataError` naming the file, the
row and what is wrong, images kept inside the dataset's folder and checked from their headers, captions bounded,
nothing written to disk.

Multi-label tasks (FigMemes' figurative devices, MAMI's misogyny types, the protected categories and attack types of
fine-grained Hateful Memes) are named in `Dataset.multilabel`, and each of their classes is also a binary task of its
own, so tooling that scores one binary task at a time works with `--memerobust-task=irony`.
"""
from __future__ import annotations

import ast
import csv
from pathlib import Path
from typing import Any, Mapping, Sequence

from ..errors import DataError
from .loaders import (
    HATEFUL_MEMES_CLASSES,
    _Row,
    _bounded,
    _caption,
    _check_columns,
    _check_unique,
    _image_path,
    _label,
    _listed,
    _meme_id,
    _quoted,
    _read_csv,
    _read_jsonl,
    _require_keys,
    _require_rows,
    _select_split,
    _string,
    has_visible_text,
    loader,
)
from .meme import Dataset, Meme

# ------------------------------------------------------------------------------------------- shared helpers


def _read_tsv(path: Path, header: Sequence[str] | None = None, quoting: int = csv.QUOTE_MINIMAL):
    """Header and rows of a tab-separated file; `header` names the columns of a headerless file."""
    return _read_csv(path, delimiter="\t", header=header, quoting=quoting)


def _find_file(candidates: Sequence[Path]) -> Path:
    """The first candidate that exists: releases and re-packagings put the same file in different folders."""
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    raise DataError(f"dataset file not found: {' or '.join(str(c) for c in candidates)}")


def _known_split(root: Path, split: str | None, splits: Sequence[str], default: str, dataset: str) -> str:
    """A file-per-split dataset's split, `default` when none is given."""
    split = split or default
    if split not in splits:
        raise DataError(f"{root}: unknown split {split!r}; {dataset} splits: {', '.join(splits)}")
    return split


def _index_rows(rows: Sequence[_Row], column: str) -> dict[str, _Row]:
    """Rows by id, for files that add columns to memes listed elsewhere; an id twice is ambiguous."""
    index: dict[str, _Row] = {}
    for row in rows:
        key = _meme_id(row, column)
        if key in index:
            raise DataError(f"{row.where}: duplicate id {_quoted(key)} (first at row {index[key].number})")
        index[key] = row
    return index


def _class_index(row: _Row, column: str, value: Any, classes: Sequence[str]) -> int:
    """Index of a label written as its class name."""
    if isinstance(value, str) and value.strip() in classes:
        return list(classes).index(value.strip())
    raise DataError(f"{row.where}: column {column!r} has {_quoted(value)}; allowed: {_listed(classes)}")


def _string_list(row: _Row, column: str) -> list[str]:
    value = row.values[column]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise DataError(f"{row.where}: column {column!r} must be a list of strings, got {_quoted(value)}")
    return value


def _binary_classes(name: str) -> list[str]:
    return [f"no {name}", name]


def _multilabel_classes(task: str, names: Sequence[str]) -> dict[str, list[str]]:
    """Classes of a multi-label task and of the binary task derived from each of its class names."""
    return {task: list(names), **{name: _binary_classes(name) for name in names}}


def _multilabel_labels(task: str, names: Sequence[str], flags: Sequence[int]) -> dict[str, Any]:
    """A meme's multi-label `task` as a 0/1 tuple, plus the 0/1 of each class name as its own binary task."""
    return {task: tuple(flags), **dict(zip(names, flags))}


def _flag_columns(row: _Row, columns: Mapping[str, str]) -> list[int]:
    """0/1 per class name, each read from its own column (class name -> column)."""
    return [_label(row, column, _binary_classes(name)) for name, column in columns.items()]


def _flags_from_names(row: _Row, column: str, names: Sequence[str], none: str) -> list[int]:
    """0/1 per class name from a list of the names present; `[none]` is the list of a meme with none of them."""
    present = _string_list(row, column)
    if present == [none]:
        return [0] * len(names)
    for name in present:
        if name not in names:
            raise DataError(f"{row.where}: column {column!r} has {_quoted(name)}; allowed: {_listed(names)}, or "
                            f"[{none!r}]")
    return [int(name in present) for name in names]


def _dataset_name(name: str, split: str | None) -> str:
    return f"{name}:{split}" if split else name


# --------------------------------------------------------------------------------------------------- FigMemes

FIGMEMES_LABEL_COLUMNS = {  # class name -> column in figmemes_annotations.tsv
    "allusion": "allusion",
    "exaggeration": "exaggeration",
    "irony": "irony",
    "anthropomorphism": "anthrop",
    "metaphor": "metaphor",
    "contrast": "contrast",
}
FIGMEMES_LABELS = tuple(FIGMEMES_LABEL_COLUMNS)
FIGMEMES_SPLITS = ("train", "validation", "test")
FIGMEMES_STYLES = ("arts", "real", "infograph", "mixed")  # one-hot visual style columns, kept in meta["style"]


def _figmemes_caption(ocr: _Row | None, name: str) -> str:
    """OCR text, or "" when the meme has none (or only invisible characters): 8.5% of FigMemes memes carry no text (an
    OCR step fills them later), so here, and only here, an empty caption is not an error."""
    text = "" if ocr is None else _bounded(ocr, "text", name, _string(ocr, "text").strip())
    return text if has_visible_text(text) else ""


@loader("figmemes", splits=FIGMEMES_SPLITS)
def load_figmemes(path: Path, split: str | None = None, *, require_images: bool = True,
                require_captions: bool = True, allow_outside_paths: bool = False) -> Dataset:
    """FigMemes (EMNLP 2022), as the UKPLab/emnlp2022-figmemes baselines read it: PATH is the folder with
    figmemes_annotations.tsv (img_name, the six 0/1 label columns, style one-hot), figmemes_ocrs.tsv (img_name, text;
    read unquoted), standard_split.tsv (img_name, split: train/validation/test) and images/. PATH may instead name
    another split file in that folder (style_split.tsv, text_cluster_split.tsv) for the distribution-shift splits.
    A missing caption is never an error here (8.5% of FigMemes has no text), whatever `require_captions` says."""
    path = Path(path)
    split_file = path if path.is_file() else path / "standard_split.tsv"
    root = split_file.parent
    annotations_file, ocr_file = root / "figmemes_annotations.tsv", root / "figmemes_ocrs.tsv"

    header, annotation_rows = _read_tsv(annotations_file)
    _check_columns(annotations_file, header, ["img_name", *FIGMEMES_LABEL_COLUMNS.values()])
    annotations = _index_rows(annotation_rows, "img_name")
    header, ocr_rows = _read_tsv(ocr_file, quoting=csv.QUOTE_NONE)
    _check_columns(ocr_file, header, ["img_name", "text"])
    ocrs = _index_rows(ocr_rows, "img_name")
    header, split_rows = _read_tsv(split_file)
    _check_columns(split_file, header, ["img_name", "split"])
    _require_rows(split_rows, split_file)
    kept = _select_split(split_rows, "split", split, FIGMEMES_SPLITS)

    memes = []
    for row in kept:
        name = _meme_id(row, "img_name")
        if name not in annotations:
            raise DataError(f"{row.where}: meme {_quoted(name)} has no row in {annotations_file}")
        annotation = annotations[name]
        labels = _multilabel_labels("figurative", FIGMEMES_LABELS, _flag_columns(annotation, FIGMEMES_LABEL_COLUMNS))
        text = _figmemes_caption(ocrs.get(name), name)
        style = next((s for s in FIGMEMES_STYLES if str(annotation.values.get(s, "")).strip() == "1"), None)
        meta = {"split": str(row.values["split"]).strip(), "caption_missing": not text, "style": style}
        image = _image_path(row, [root / "images" / name], require_images, root=root,
                            allow_outside=allow_outside_paths)
        memes.append(Meme(name, text, labels, image, meta=meta))
    _check_unique(memes, kept)
    classes = _multilabel_classes("figurative", FIGMEMES_LABELS)
    return Dataset(_dataset_name("figmemes", split), memes, classes, str(split_file), frozenset({"figurative"}))


# -------------------------------------------------------------------------------------------------- ToxicTags

TOXICTAGS_SPLITS = ("train", "test")
TOXICTAGS_DEFAULT_SPLIT = "test"
TOXICTAGS_CLASSES = {"toxic": ["normal", "toxic"], "toxicity": ["hateful", "dangerous", "offensive"]}
# stage-II label as written -> (toxic, toxicity or None). "undecided": toxic, but the three annotators split three
# ways on its kind, so it has no stage-II label. Letters are STEMTOX's label map (N, O, D, H).
TOXICTAGS_STAGE2 = {
    "normal": (0, None), "hateful": (1, 0), "dangerous": (1, 1), "offensive": (1, 2), "undecided": (1, None),
    "N": (0, None), "H": (1, 0), "D": (1, 1), "O": (1, 2),
}


def _tags(row: _Row, column: str) -> list[str]:
    """Tags as stored in a csv cell: a Python/JSON list literal (pandas writes lists that way) or comma-separated."""
    text = _string(row, column).strip()
    if not text.startswith("["):
        return [t.strip() for t in text.split(",") if t.strip()]
    try:
        tags = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        tags = None
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        raise DataError(f"{row.where}: column {column!r} must be a list of strings, got {_quoted(text)}")
    return [t.strip() for t in tags if t.strip()]


@loader("toxictags", splits=TOXICTAGS_SPLITS)
def load_toxictags(path: Path, split: str | None = None, *, require_images: bool = True,
                require_captions: bool = True, allow_outside_paths: bool = False) -> Dataset:
    """ToxicTags (Swain et al. 2025; huggingface.co/datasets/swainsubhankar/ToxicTags): PATH is the folder with
    <split>.csv (train, test; default test) and the images in images/ or beside the csv. Columns, as the authors'
    hate-alert/STEMTOX code reads them: img (file name, also the id), ocr (caption), title, tags (list), stage2_label
    (normal, hateful, dangerous, offensive or undecided; or STEMTOX's N/H/D/O). The release files themselves could not
    be inspected, so column names and the image folder are the code's, not a checked listing."""
    root = Path(path)
    split = _known_split(root, split, TOXICTAGS_SPLITS, TOXICTAGS_DEFAULT_SPLIT, "ToxicTags")
    file = root / f"{split}.csv"
    header, rows = _read_csv(file)
    _check_columns(file, header, ["img", "ocr", "tags", "stage2_label"])
    _require_rows(rows, file)
    memes = []
    for row in rows:
        name = _meme_id(row, "img")
        stage2 = str(row.values["stage2_label"]).strip()
        if stage2 not in TOXICTAGS_STAGE2:
            allowed = ", ".join(TOXICTAGS_STAGE2)
            raise DataError(f"{row.where}: column 'stage2_label' has {_quoted(stage2)}; allowed: {allowed}")
        toxic, toxicity = TOXICTAGS_STAGE2[stage2]
        labels = {"toxic": toxic} if toxicity is None else {"toxic": toxic, "toxicity": toxicity}
        meta = {"split": split, "tags": _tags(row, "tags"), "title": str(row.values.get("title", "")).strip()}
        image = _image_path(row, [root / "images" / name, root / name], require_images, root=root,
                            allow_outside=allow_outside_paths)
        memes.append(Meme(name, _caption(row, "ocr", name, require_captions), labels, image, meta=meta))
    _check_unique(memes, rows)
    classes = {task: list(names) for task, names in TOXICTAGS_CLASSES.items()}
    return Dataset(f"toxictags:{split}", memes, classes, str(file))


# ------------------------------------------------------------------------------------------------------- MAMI

MAMI_SPLITS = ("train", "test")
MAMI_DEFAULT_SPLIT = "test"
MAMI_TYPES = ("shaming", "stereotype", "objectification", "violence")
MAMI_LABEL_COLUMNS = ("misogynous", *MAMI_TYPES)
MAMI_CLASSES = {"misogynous": ["not misogynous", "misogynous"]}
MAMI_TEXT = "Text Transcription"


@loader("mami", splits=MAMI_SPLITS)
def load_mami(path: Path, split: str | None = None, *, require_images: bool = True,
                require_captions: bool = True, allow_outside_paths: bool = False) -> Dataset:
    """MAMI (SemEval-2022 Task 5), as released (MIND-Lab; the zip layout the task's baselines and participants read):
    PATH is the folder with TRAINING/training.csv and test/Test.csv, tab-separated, images beside each csv. Columns:
    file_name, misogynous, shaming, stereotype, objectification, violence, Text Transcription. Test.csv came without
    labels; they are read from test_labels.txt (no header: file_name and the five 0/1 labels) in PATH or PATH/test,
    unless Test.csv carries the label columns itself. Default split: test."""
    root = Path(path)
    split = _known_split(root, split, MAMI_SPLITS, MAMI_DEFAULT_SPLIT, "MAMI")
    file = root / "TRAINING" / "training.csv" if split == "train" else root / "test" / "Test.csv"
    header, rows = _read_tsv(file)
    has_labels = all(c in header for c in MAMI_LABEL_COLUMNS)
    _check_columns(file, header, ["file_name", MAMI_TEXT, *(MAMI_LABEL_COLUMNS if split == "train" else ())])
    _require_rows(rows, file)
    labels_file, label_rows = file, {_meme_id(r, "file_name"): r for r in rows}
    if not has_labels:
        labels_file = _find_file([root / "test_labels.txt", root / "test" / "test_labels.txt"])
        _, labels_list = _read_tsv(labels_file, header=["file_name", *MAMI_LABEL_COLUMNS])
        _require_rows(labels_list, labels_file)
        label_rows = _index_rows(labels_list, "file_name")
    memes = []
    for row in rows:
        name = _meme_id(row, "file_name")
        if name not in label_rows:
            raise DataError(f"{row.where}: meme {_quoted(name)} has no labels in {labels_file}")
        label_row = label_rows[name]
        labels = {"misogynous": _label(label_row, "misogynous", MAMI_CLASSES["misogynous"])}
        types = _flag_columns(label_row, {name: name for name in MAMI_TYPES})
        labels.update(_multilabel_labels("misogyny_type", MAMI_TYPES, types))
        image = _image_path(row, [file.parent / name], require_images, root=root, allow_outside=allow_outside_paths)
        memes.append(Meme(name, _caption(row, MAMI_TEXT, name, require_captions), labels, image, meta={"split": split}))
    _check_unique(memes, rows)
    classes = {**MAMI_CLASSES, **_multilabel_classes("misogyny_type", MAMI_TYPES)}
    return Dataset(f"mami:{split}", memes, classes, str(file), frozenset({"misogyny_type"}))


# ---------------------------------------------------------------------------------------------------- HarMeme

HARMEME_SPLITS = ("train", "val", "test")
HARMEME_DEFAULT_SPLIT = "test"
HARMEME_CLASSES = {
    "harmful": ["not harmful", "somewhat harmful", "very harmful"],
    "harmful_binary": ["not harmful", "harmful"],
    "target": ["individual", "organization", "community", "society"],
}


@loader("harmeme", splits=HARMEME_SPLITS)
def load_harmeme(path: Path, split: str | None = None, *, require_images: bool = True,
                require_captions: bool = True, allow_outside_paths: bool = False) -> Dataset:
    """HarMeme (Pramanick et al. 2021; LCS2-IIITD/MOMENTA HarMeme_V1/Annotations, read by di-dimitrov/mmf's `memes`
    dataset): PATH is the folder with <split>.jsonl (train, val, test; default test) directly or in annotations/, and
    the images in images/ (mmf) or beside the jsonl. Each line: id, image, text, labels = [intensity] or [intensity,
    target], e.g. ["somewhat harmful", "individual"]. A target is labelled only on harmful memes."""
    root = Path(path)
    split = _known_split(root, split, HARMEME_SPLITS, HARMEME_DEFAULT_SPLIT, "HarMeme")
    file = _find_file([root / f"{split}.jsonl", root / "annotations" / f"{split}.jsonl"])
    rows = _read_jsonl(file)
    _require_rows(rows, file)
    memes = []
    for row in rows:
        _require_keys(row, ["id", "image", "text", "labels"])
        meme_id = _meme_id(row, "id")
        names = _string_list(row, "labels")
        if not 1 <= len(names) <= 2:
            raise DataError(f"{row.where}: column 'labels' must be [intensity] or [intensity, target], got "
                            f"{_quoted(names)}")
        harmful = _class_index(row, "labels", names[0], HARMEME_CLASSES["harmful"])
        labels = {"harmful": harmful, "harmful_binary": int(harmful > 0)}
        if len(names) == 2:
            labels["target"] = _class_index(row, "labels", names[1], HARMEME_CLASSES["target"])
        image_name = _string(row, "image").strip()
        image = _image_path(row, [root / "images" / image_name, file.parent / image_name], require_images,
                            root=root, allow_outside=allow_outside_paths)
        meta = {"split": split, "target": names[1] if len(names) == 2 else None}
        memes.append(Meme(meme_id, _caption(row, "text", meme_id, require_captions), labels, image, meta=meta))
    _check_unique(memes, rows)
    classes = {task: list(names) for task, names in HARMEME_CLASSES.items()}
    return Dataset(f"harmeme:{split}", memes, classes, str(file))


# ----------------------------------------------------------------------------------- fine-grained Hateful Memes

FINE_GRAINED_SPLITS = ("train", "dev_seen", "dev_unseen")
FINE_GRAINED_DEFAULT_SPLIT = "dev_seen"
FINE_GRAINED_HATE = ["not_hateful", "hateful"]  # as written in gold_hate; the task keeps hateful_memes' classes
PROTECTED_CATEGORIES = ("race", "disability", "religion", "nationality", "sex")
ATTACK_TYPES = ("contempt", "mocking", "inferiority", "slurs", "exclusion", "dehumanizing", "inciting_violence")


@loader("hateful_memes_fine_grained", splits=FINE_GRAINED_SPLITS)
def load_hateful_memes_fine_grained(path: Path, split: str | None = None, *, require_images: bool = True,
                require_captions: bool = True, allow_outside_paths: bool = False) -> Dataset:
    """Fine-grained Hateful Memes (WOAH 2021 shared task; facebookresearch/fine_grained_hateful_memes
    data/annotations/<split>.json, one JSON object per line): PATH is the Hateful Memes folder (its img/ holds the
    images) with the <split>.json files in it or in annotations/. Splits train, dev_seen, dev_unseen (the only ones
    with fine-grained labels); default dev_seen. Keys used: id, img, text, gold_hate (["hateful"] or
    ["not_hateful"]), gold_pc (["pc_empty"] or protected categories), gold_attack (["attack_empty"] or attack types)."""
    root = Path(path)
    split = _known_split(root, split, FINE_GRAINED_SPLITS, FINE_GRAINED_DEFAULT_SPLIT, "fine-grained Hateful Memes")
    file = _find_file([root / f"{split}.json", root / "annotations" / f"{split}.json"])
    rows = _read_jsonl(file)
    _require_rows(rows, file)
    memes = []
    for row in rows:
        _require_keys(row, ["id", "img", "text", "gold_hate", "gold_pc", "gold_attack"])
        meme_id = _meme_id(row, "id")
        hate = _string_list(row, "gold_hate")
        if len(hate) != 1:
            raise DataError(f"{row.where}: column 'gold_hate' must hold one label, got {_quoted(hate)}")
        labels = {"hate": _class_index(row, "gold_hate", hate[0], FINE_GRAINED_HATE)}
        categories = _flags_from_names(row, "gold_pc", PROTECTED_CATEGORIES, "pc_empty")
        attacks = _flags_from_names(row, "gold_attack", ATTACK_TYPES, "attack_empty")
        labels.update(_multilabel_labels("protected_category", PROTECTED_CATEGORIES, categories))
        labels.update(_multilabel_labels("attack_type", ATTACK_TYPES, attacks))
        image = _image_path(row, [root / _string(row, "img").strip()], require_images, root=root,
                            allow_outside=allow_outside_paths)
        caption = _caption(row, "text", meme_id, require_captions)
        memes.append(Meme(meme_id, caption, labels, image, meta={"split": split}))
    _check_unique(memes, rows)
    classes = {
        **HATEFUL_MEMES_CLASSES,
        **_multilabel_classes("protected_category", PROTECTED_CATEGORIES),
        **_multilabel_classes("attack_type", ATTACK_TYPES),
    }
    multilabel = frozenset({"protected_category", "attack_type"})
    return Dataset(f"hateful_memes_fine_grained:{split}", memes, classes, str(file), multilabel)
