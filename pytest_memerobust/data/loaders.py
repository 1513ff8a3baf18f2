"""Dataset loaders by name: each turns a file layout (PrideMM, Hateful Memes, generic csv/jsonl) into a `Dataset`.

Loaders validate everything they can without decoding pictures: text is strict UTF-8, captions are non-empty,
labels fit the declared classes, ids are unique and image files exist (stat only; `Meme.image` decodes lazily).
Every problem raises `DataError` naming the file, the 1-based data row (and the line) and what is wrong, so a
user can fix the file without a traceback. Loaders never write to disk.

A loader is `fn(path, split, *, require_images=True) -> Dataset`; `load_dataset` resolves a spec string
`NAME:PATH[:SPLIT]` to one of them.
"""
from __future__ import annotations

import csv
import inspect
import io
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from ..errors import DataError, UnknownNameError
from .meme import Dataset, Meme

LoaderFn = Callable[..., Dataset]

LOADERS: dict[str, Callable[[Path, str | None], Dataset]] = {}
LOADER_SPLITS: dict[str, tuple[str, ...]] = {}  # the split words a loader knows, used to read a spec's :SPLIT

GENERIC_SUFFIXES = {".csv": "csv", ".jsonl": "jsonl"}


# --------------------------------------------------------------------------------------------------- registry


def register_loader(name: str, fn: LoaderFn, splits: Iterable[str] = ()) -> LoaderFn:
    """Record `fn` under `name` (the `demo` generator registers itself this way); `splits` helps parse specs."""
    if ":" in name or not name:
        raise ValueError(f"loader name must be non-empty and contain no ':', got {name!r}")
    if name in LOADERS and LOADERS[name] is not fn:
        raise ValueError(f"dataset loader {name!r} is already registered")
    LOADERS[name] = fn
    LOADER_SPLITS[name] = tuple(splits)
    return fn


def loader(name: str, splits: Iterable[str] = ()) -> Callable[[LoaderFn], LoaderFn]:
    """Decorator form of `register_loader`."""

    def decorator(fn: LoaderFn) -> LoaderFn:
        return register_loader(name, fn, splits)

    return decorator


def parse_spec(spec: str) -> tuple[str, Path, str | None]:
    """Split a dataset spec into (loader name, path, split).

    Rules, in order:
    1. a bare path ending in .csv or .jsonl (that exists, or whose text before the first ':' is not a loader
       name) is read by the generic loader of that suffix, with no split;
    2. otherwise NAME is the text before the first ':' (a bare NAME, with no ':', gets the path '.');
    3. the rest is PATH, unless its last ':' is followed by a SPLIT: a split word the loader declares, or a
       word without '/' or '\\' when the whole rest is not an existing path. So `C:\\data\\x.csv` stays a path.
    """
    as_path = Path(spec)
    generic = GENERIC_SUFFIXES.get(as_path.suffix.lower())
    head_name = spec.split(":", 1)[0]
    if generic and (as_path.is_file() or head_name not in LOADERS):
        return generic, as_path, None

    name, sep, rest = spec.partition(":")
    if name not in LOADERS:
        raise UnknownNameError("dataset loader", name, LOADERS)
    if not sep:
        return name, Path("."), None

    path_text, colon, tail = rest.rpartition(":")
    if not colon or not path_text:
        return name, Path(rest), None
    if tail == "":
        return name, Path(path_text), None
    if tail in LOADER_SPLITS.get(name, ()):
        return name, Path(path_text), tail
    if "/" not in tail and "\\" not in tail and not Path(rest).exists():
        return name, Path(path_text), tail
    return name, Path(rest), None


def load_dataset(spec: str, *, require_images: bool = True, require_captions: bool = True) -> Dataset:
    """Load the dataset a spec names (see `parse_spec`). With `require_images` (the default) every picture must
    exist; without it (a detector that reads only captions) a meme may have none. Without `require_captions` (an OCR
    backend will read them off the pictures) a meme's caption may be empty. Loaders registered without a keyword are
    called without it, and so keep requiring what it would relax."""
    name, path, split = parse_spec(spec)
    fn = LOADERS[name]
    accepted = inspect.signature(fn).parameters
    relaxed = {key: False for key, required in (("require_images", require_images),
                                                ("require_captions", require_captions))
               if not required and (key in accepted or any(p.kind is p.VAR_KEYWORD for p in accepted.values()))}
    return fn(path, split, **relaxed)


# ------------------------------------------------------------------------------------------- shared reading


@dataclass(frozen=True)
class _Row:
    """One data record with where it came from, so every error can point at it."""

    file: Path
    number: int  # 1-based data row (header and blank lines not counted)
    line: int  # 1-based line where the record starts
    values: Mapping[str, Any]

    @property
    def where(self) -> str:
        return f"{self.file}, row {self.number} (line {self.line})"


def _read_text(path: Path) -> str:
    """Whole file as text, decoded strictly, so a bad byte is reported by line instead of becoming U+FFFD."""
    if not path.is_file():
        raise DataError(f"dataset file not found: {path}")
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise DataError(f"cannot read dataset file {path}: {exc}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise DataError(
            f"{path}: not valid UTF-8 at line {line} (byte {data[exc.start]:#04x} at offset {exc.start})"
        ) from None
    return text[1:] if text.startswith("\ufeff") else text  # a BOM from spreadsheet exports is not data


def _missing_columns(where: str, missing: Sequence[str], found: Iterable[Any]) -> DataError:
    names = ", ".join(f"{c!r} (or 'img')" if c == "image" else repr(c) for c in missing)
    return DataError(f"{where}: missing column {names}; columns found: {', '.join(map(str, found)) or '(none)'}")


def _read_csv(path: Path, delimiter: str = ",", header: Sequence[str] | None = None,
              quoting: int = csv.QUOTE_MINIMAL) -> tuple[list[str], list[_Row]]:
    """Header and rows of a csv (or, with delimiter "\\t", tsv) file; each row must have as many fields as the header.
    `header` names the columns of a file that has no header line."""
    kind = "TSV" if delimiter == "\t" else "CSV"
    reader = csv.reader(io.StringIO(_read_text(path), newline=""), delimiter=delimiter, quoting=quoting)
    if header is None:
        try:
            header = [h.strip() for h in next(reader)]
        except StopIteration:
            raise DataError(f"{path}: empty file; expected a header line") from None
        except csv.Error as exc:
            raise DataError(f"{path}, line 1: malformed {kind} header: {exc}") from None
    rows: list[_Row] = []
    while True:
        start = reader.line_num + 1
        try:
            fields = next(reader)
        except StopIteration:
            break
        except csv.Error as exc:
            raise DataError(f"{path}, line {start}: malformed {kind}: {exc}") from None
        if not any(f.strip() for f in fields):
            continue  # blank line
        row = _Row(path, len(rows) + 1, start, dict(zip(header, fields)))
        if len(fields) != len(header):
            raise DataError(f"{row.where}: has {len(fields)} fields but the header has {len(header)}")
        rows.append(row)
    return list(header), rows


def _read_jsonl(path: Path) -> list[_Row]:
    """One JSON object per non-blank line; a malformed line is reported with its line number."""
    rows: list[_Row] = []
    # split on "\n" only: str.splitlines would also break at U+2028 and friends, legal inside JSON strings.
    for line_no, line in enumerate(_read_text(path).split("\n"), start=1):
        if not line.strip():
            continue
        where = f"{path}, row {len(rows) + 1} (line {line_no})"
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DataError(f"{where}: malformed JSON: {exc.msg} at column {exc.colno}") from None
        if not isinstance(obj, dict):
            raise DataError(f"{where}: expected a JSON object, got {type(obj).__name__}")
        rows.append(_Row(path, len(rows) + 1, line_no, obj))
    return rows


def _check_columns(path: Path, header: Sequence[str], required: Sequence[str]) -> None:
    missing = [c for c in required if c not in header]
    if missing:
        raise _missing_columns(str(path), missing, header)


def _require_keys(row: _Row, keys: Sequence[str]) -> None:
    """JSON rows carry their own keys, so required columns are checked row by row."""
    missing = [k for k in keys if k not in row.values]
    if missing:
        raise _missing_columns(row.where, missing, row.values)


def _string(row: _Row, column: str) -> str:
    """A text field: strings as they are, JSON numbers (ids) as their text; anything else is an error."""
    value = row.values[column]
    if isinstance(value, bool) or value is None or isinstance(value, (dict, list, float)):
        raise DataError(f"{row.where}: column {column!r} must be a string, got {value!r}")
    return str(value)


def _meme_id(row: _Row, column: str) -> str:
    meme_id = _string(row, column).strip()
    if not meme_id:
        raise DataError(f"{row.where}: empty id in column {column!r}")
    return meme_id


def _caption(row: _Row, column: str, meme_id: str, required: bool = True) -> str:
    """Captions are stripped; an empty one is an error because text models would see nothing, unless not
    `required` (an OCR backend reads it off the picture later: data/ocr.py)."""
    text = _string(row, column).strip()
    if not text and required:
        raise DataError(f"{row.where}: empty caption in column {column!r} for meme {meme_id!r} (an OCR backend can "
                        f"read missing captions off the pictures: --memerobust-ocr=rapidocr)")
    return text


def _label(row: _Row, column: str, classes: Sequence[str] | None) -> int:
    """A class index: an integer within `classes` (any non-negative integer when `classes` is None)."""
    value = row.values[column]
    number: int | None = None
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, str) and re.fullmatch(r"[+-]?[0-9]+", value.strip()):
        number = int(value)
    if classes is None:
        if number is None or number < 0:
            raise DataError(f"{row.where}: column {column!r} has {value!r}; allowed: a non-negative integer")
        return number
    if number is None or not 0 <= number < len(classes):
        allowed = ", ".join(f"{i} ({c})" for i, c in enumerate(classes))
        raise DataError(f"{row.where}: column {column!r} has {value!r}; allowed: {allowed}")
    return number


def _image_path(row: _Row, candidates: Sequence[Path], require: bool) -> Path | None:
    """The first candidate file that exists; missing is an error unless images are optional (text-only use)."""
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    if not require:
        return None
    tried = " or ".join(str(c) for c in candidates)
    raise DataError(f"{row.where}: image file not found: {tried}")


def _select_split(rows: list[_Row], column: str | None, split: str | None, known: Sequence[str] = ()) -> list[_Row]:
    """Rows of one split (all rows when split is None); an unknown split lists the ones there are."""
    if split is None:
        return rows
    file = rows[0].file
    if column is None:
        raise DataError(f"{file}: has no split column, cannot select split {split!r}")
    present = sorted({str(r.values.get(column, "")).strip() for r in rows})
    if split not in present:
        also = f" (this loader knows: {', '.join(known)})" if known else ""
        raise DataError(f"{file}: unknown split {split!r}; splits present: {', '.join(present) or '(none)'}{also}")
    return [r for r in rows if str(r.values.get(column, "")).strip() == split]


def _check_unique(memes: Sequence[Meme], rows: Sequence[_Row]) -> None:
    """Ids must be unique: perturbation seeds and reports are keyed by meme id."""
    seen: dict[str, _Row] = {}
    for meme, row in zip(memes, rows):
        if meme.id in seen:
            raise DataError(f"{row.where}: duplicate id {meme.id!r} (first at row {seen[meme.id].number})")
        seen[meme.id] = row


def _require_rows(rows: list[_Row], path: Path) -> None:
    if not rows:
        raise DataError(f"{path}: no data rows")


# --------------------------------------------------------------------------------------------- generic files


def _generic(rows: list[_Row], path: Path, name: str, split: str | None, has_split: bool, require_images: bool,
             require_captions: bool):
    """Shared body of the csv and jsonl loaders once rows are read and their columns checked."""
    _require_rows(rows, path)
    # Classes come from every row of the file, so each split of one file shares one label schema.
    labels = {r.number: _label(r, "label", None) for r in rows}
    classes = [str(i) for i in range(max(labels.values()) + 1)]
    kept = _select_split(rows, "split" if has_split else None, split)
    memes = []
    for row in kept:
        meme_id = _meme_id(row, "id")
        image_column = "image" if "image" in row.values else "img" if "img" in row.values else None
        image = None
        if image_column is not None and _string(row, image_column).strip():
            image = _image_path(row, [path.parent / _string(row, image_column).strip()], require_images)
        elif require_images:
            raise DataError(f"{row.where}: empty image path for meme {meme_id!r}")
        meta = {"split": str(row.values["split"]).strip()} if has_split else {}
        memes.append(
            Meme(
                id=meme_id,
                text=_caption(row, "text", meme_id, require_captions),
                labels={"label": labels[row.number]},
                image_path=image,
                meta=meta,
            )
        )
    _check_unique(memes, kept)
    return Dataset(f"{name}:{split}" if split else name, memes, {"label": classes}, str(path))


def _generic_columns(columns: Sequence[str], require_images: bool) -> list[str]:
    """Required columns; the image column (`image` or `img`) may be absent only for text-only use."""
    needed = ["id", "image", "text", "label"]
    if "img" in columns or not require_images:
        needed.remove("image")
    return needed


@loader("csv")
def load_csv(path: Path, split: str | None = None, *, require_images: bool = True,
                require_captions: bool = True) -> Dataset:
    """Generic csv: columns id, image (or img), text, label, optional split; images relative to the file."""
    path = Path(path)
    header, rows = _read_csv(path)
    _check_columns(path, header, _generic_columns(header, require_images))
    return _generic(rows, path, "csv", split, "split" in header, require_images, require_captions)


@loader("jsonl")
def load_jsonl(path: Path, split: str | None = None, *, require_images: bool = True,
                require_captions: bool = True) -> Dataset:
    """Generic jsonl: one object per line with keys id, image (or img), text, label, optional split."""
    path = Path(path)
    rows = _read_jsonl(path)
    for row in rows:
        _require_keys(row, _generic_columns(list(row.values), require_images))
    has_split = any("split" in r.values for r in rows)
    if has_split:
        for row in rows:
            _require_keys(row, ["split"])  # a split column present on some rows must be on all
    return _generic(rows, path, "jsonl", split, has_split, require_images, require_captions)


# ---------------------------------------------------------------------------------------------------- PrideMM

PRIDEMM_FILE = "PrideMM.csv"
PRIDEMM_SPLITS = ("train", "val", "test")
PRIDEMM_CLASSES: dict[str, list[str]] = {
    "hate": ["non-hateful", "hateful"],
    "target": ["undirected", "lgbtq+ community", "organization", "individual"],
    "stance": ["neutral", "support", "oppose"],
    "humour": ["no humour", "humour"],
}
PRIDEMM_NO_TARGET = "NA"  # benign memes have no target: kept out of labels, meta["target"] = None


@loader("pridemm", splits=PRIDEMM_SPLITS)
def load_pridemm(path: Path, split: str | None = None, *, require_images: bool = True,
                require_captions: bool = True) -> Dataset:
    """PrideMM (LGBTQ+ memes): PATH is the folder with PrideMM.csv and Images/, or the csv itself."""
    path = Path(path)
    csv_path, root = (path / PRIDEMM_FILE, path) if path.is_dir() else (path, path.parent)
    if split is not None and split not in PRIDEMM_SPLITS:
        raise DataError(f"{csv_path}: unknown split {split!r}; PrideMM splits: {', '.join(PRIDEMM_SPLITS)}")
    header, rows = _read_csv(csv_path)
    _check_columns(csv_path, header, ["name", "hate", "target", "stance", "humour", "split", "text"])
    _require_rows(rows, csv_path)
    kept = _select_split(rows, "split", split, PRIDEMM_SPLITS)
    memes = []
    for row in kept:
        name = _meme_id(row, "name")
        labels = {task: _label(row, task, PRIDEMM_CLASSES[task]) for task in ("hate", "stance", "humour")}
        target: int | None = None
        if str(row.values["target"]).strip() != PRIDEMM_NO_TARGET:
            try:
                target = _label(row, "target", PRIDEMM_CLASSES["target"])
            except DataError as exc:
                raise DataError(f"{exc} or {PRIDEMM_NO_TARGET} (no target)") from None
            labels["target"] = target
        image = _image_path(row, [root / "Images" / name, root / name], require_images)
        meta = {"split": str(row.values["split"]).strip(), "target": target}
        memes.append(Meme(name, _caption(row, "text", name, require_captions), labels, image, meta=meta))
    _check_unique(memes, kept)
    classes = {task: list(names) for task, names in PRIDEMM_CLASSES.items()}
    return Dataset(f"pridemm:{split}" if split else "pridemm", memes, classes, str(csv_path))


# ---------------------------------------------------------------------------------------------- Hateful Memes

HATEFUL_MEMES_SPLITS = ("train", "dev_seen", "test_seen", "dev_unseen", "test_unseen")
HATEFUL_MEMES_DEFAULT_SPLIT = "dev_seen"
HATEFUL_MEMES_CLASSES = {"hate": ["non-hateful", "hateful"]}


@loader("hateful_memes", splits=HATEFUL_MEMES_SPLITS)
def load_hateful_memes(path: Path, split: str | None = None, *, require_images: bool = True,
                require_captions: bool = True) -> Dataset:
    """Facebook Hateful Memes: PATH is the folder with <split>.jsonl files and img/; default split dev_seen."""
    root = Path(path)
    split = split or HATEFUL_MEMES_DEFAULT_SPLIT
    if split not in HATEFUL_MEMES_SPLITS:
        raise DataError(f"{root}: unknown split {split!r}; Hateful Memes splits: {', '.join(HATEFUL_MEMES_SPLITS)}")
    file = root / f"{split}.jsonl"
    rows = _read_jsonl(file)
    _require_rows(rows, file)
    memes = []
    for row in rows:
        if "label" not in row.values:
            raise DataError(f"{row.where}: split {split!r} has no labels (no 'label' field), so it cannot be scored")
        _require_keys(row, ["id", "img", "text"])
        meme_id = _meme_id(row, "id")
        image = _image_path(row, [root / _string(row, "img").strip()], require_images)
        labels = {"hate": _label(row, "label", HATEFUL_MEMES_CLASSES["hate"])}
        caption = _caption(row, "text", meme_id, require_captions)
        memes.append(Meme(meme_id, caption, labels, image, meta={"split": split}))
    _check_unique(memes, rows)
    return Dataset(f"hateful_memes:{split}", memes, dict(HATEFUL_MEMES_CLASSES), str(file))
