"""Dataset loaders by name: each turns a file layout (PrideMM, Hateful Memes, generic csv/jsonl) into a `Dataset`.

Loaders validate everything they can without decoding pictures: text is strict UTF-8 (no lone surrogates from JSON
escapes either), captions have visible content and at most MAX_CAPTION_CHARS characters, labels fit the declared
classes (or a bound, for files that declare none), ids are unique, and image files exist inside the dataset's folder
and pass a cheap check of their header and structure (`image_files.check_picture_file`: a format PIL reads, at most
`image_files.MAX_PICTURE_PIXELS` pixels, not cut short; `Meme.image` decodes lazily). So a bad row stops the run once,
before any case, instead of failing every case that decodes it.
Every problem raises `DataError` naming the file, the 1-based data row (and the line) and what is wrong, so a
user can fix the file without a traceback; values and lists quoted in messages are clipped, so a hostile file
cannot make a message megabytes long. Loaders never write to disk.

A loader is `fn(path, split, *, require_images=True, require_captions=True, allow_outside_paths=False) -> Dataset`;
`load_dataset` resolves a spec string `NAME:PATH[:SPLIT]` to one of them.
"""
from __future__ import annotations

import csv
import inspect
import io
import json
import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from ..errors import ConfigError, DataError, UnknownNameError
from .image_files import check_picture_file
from .meme import Dataset, Meme

LoaderFn = Callable[..., Dataset]

LOADERS: dict[str, Callable[[Path, str | None], Dataset]] = {}
LOADER_SPLITS: dict[str, tuple[str, ...]] = {}  # the split words a loader knows, used to read a spec's :SPLIT

GENERIC_SUFFIXES = {".csv": "csv", ".jsonl": "jsonl"}
# A csv/jsonl file declares no classes: they are 0..its highest label. Meme tasks have a handful of classes; the
# bound keeps a typo (label 1000000000) from building a billion class names.
MAX_GENERIC_CLASSES = 100
# The longest caption read: a meme's text is a few lines (PrideMM's longest of 5,063 has 9,516 characters). Measures
# over words grow faster than linearly: one of 10,000 characters repeating one word takes the words-changed measure
# about 5 s, one of 100,000 minutes. Read at each row, so a conftest.py may raise it.
MAX_CAPTION_CHARS = 10_000
MESSAGE_ITEMS = 10  # names a message lists before "... (N more)"
MESSAGE_CHARS = 80  # characters of a value a message quotes
MESSAGE_PATH_CHARS = 300  # characters of a path a message names


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
       name) is read by the generic loader of that suffix, with no split; a bare path to an existing folder whose
       text before the first ':' is not a loader name, by the folder loader, with no split;
    2. otherwise NAME is the text before the first ':' (a bare NAME, with no ':', gets the path '.');
    3. the rest is PATH, unless its last ':' is followed by a SPLIT: a split word the loader declares, or a
       word without '/' or '\\' when the whole rest is not an existing path. So `C:\\data\\x.csv` stays a path.
    """
    as_path = Path(spec)
    generic = GENERIC_SUFFIXES.get(as_path.suffix.lower())
    head_name = spec.split(":", 1)[0]
    if generic and (as_path.is_file() or head_name not in LOADERS):
        return generic, as_path, None
    if head_name not in LOADERS and as_path.is_dir():  # a folder of pictures (`folder:PATH` without its name)
        return FOLDER_LOADER, as_path, None

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


GENERIC_TASK = "label"  # the one task of a generic csv/jsonl file: its label column
TASK_OPTION = "--memerobust-task"


def check_task(task: str, spec: str, tasks: Iterable[str] | None = None, *, explicit: bool = False,
               option: str = TASK_OPTION) -> None:
    """Refuse at once a dataset without the task a run scores (the card's `task`, or `option` where `explicit`),
    naming the fix: before its pictures are read (OCR may read every one first). `tasks`: the loaded dataset's
    (`Dataset.classes`), or None to tell from the spec alone, which a generic csv/jsonl file allows (its one task is
    GENERIC_TASK); for other loaders, None checks nothing. ConfigError."""
    try:
        loader = parse_spec(spec)[0]
    except UnknownNameError:  # loading it says so
        loader = None
    generic = loader in GENERIC_SUFFIXES.values()
    tasks = list(tasks) if tasks is not None else [GENERIC_TASK] if generic else None
    if tasks is None or task in tasks:
        return
    asked = f"{option}={task}" if explicit else f"the model card's task {task!r}"
    if generic:
        raise ConfigError(f"dataset {spec!r} is a generic {loader} file: its one task is "
                          f"{GENERIC_TASK!r} (its label column, classes 0, 1, ...), not {asked}; pass "
                          f"{option}={GENERIC_TASK} to score the card's classes on it, in their order")
    listed = ", ".join(map(repr, tasks)) or "(none)"
    raise ConfigError(f"dataset {spec!r} has no task {task!r} ({asked}); its tasks: {listed}; pass {option}=TASK "
                      f"with one of them")


def load_dataset(spec: str, *, require_images: bool = True, require_captions: bool = True,
                 allow_outside_paths: bool = False) -> Dataset:
    """Load the dataset a spec names (see `parse_spec`). With `require_images` (the default) every picture must
    exist; without it (a detector that reads only captions) a meme may have none. Without `require_captions` (an OCR
    backend will read them off the pictures) a meme's caption may be empty. With `allow_outside_paths` an image path
    may lead outside the dataset's folder (absolute, `..`, a symlink); by default that is an error, as a dataset
    from elsewhere could otherwise make the report embed any picture file it names. Loaders registered without a
    keyword are called without it, and so keep requiring what it would relax."""
    name, path, split = parse_spec(spec)
    fn = LOADERS[name]
    accepted = inspect.signature(fn).parameters
    takes_any = any(p.kind is p.VAR_KEYWORD for p in accepted.values())
    relaxed = {key: value for key, value, strict in (("require_images", require_images, True),
                                                     ("require_captions", require_captions, True),
                                                     ("allow_outside_paths", allow_outside_paths, False))
               if value != strict and (key in accepted or takes_any)}
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
    if path.is_dir():
        raise DataError(f"{path} is a folder, not a dataset file: read its pictures with folder:{path} (or the "
                        f"folder's path alone), or name the file in it")
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


def _clip(text: str, limit: int = MESSAGE_CHARS) -> str:
    """`text` cut to `limit` characters, saying how long it was; control characters escaped (no terminal codes)."""
    text = text if text.isprintable() else repr(text)[1:-1]
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def _quoted(value: Any) -> str:
    """repr of a value for a message (quotes and escapes it), clipped: a 1 MB cell is not echoed whole."""
    return _clip(repr(value))


def _path(path: Any) -> str:
    """A path for a message: whole, unless a cell made it absurdly long."""
    return _clip(str(path), MESSAGE_PATH_CHARS)


def _listed(items: Iterable[Any], limit: int = MESSAGE_ITEMS) -> str:
    """Items joined for a message: the first `limit`, each clipped, then how many more."""
    items = list(items)
    shown = ", ".join(_clip(str(i)) for i in items[:limit])
    return shown + (f", ... ({len(items) - limit} more)" if len(items) > limit else "")


def _missing_columns(where: str, missing: Sequence[str], found: Iterable[Any]) -> DataError:
    names = ", ".join(f"{_quoted(c)} (or 'img')" if c == "image" else _quoted(c) for c in missing)
    return DataError(f"{where}: missing column {names}; columns found: {_listed(found) or '(none)'}")


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
        except ValueError as exc:  # an integer of over 4300 digits (sys.get_int_max_str_digits)
            raise DataError(f"{where}: unreadable JSON: {_clip(str(exc).split(':')[0], 120)}") from None
        except RecursionError:
            raise DataError(f"{where}: unreadable JSON: nested too deeply") from None
        if not isinstance(obj, dict):
            raise DataError(f"{where}: expected a JSON object, got {type(obj).__name__}")
        for key, value in obj.items():
            _refuse_surrogates(where, key, value)
        rows.append(_Row(path, len(rows) + 1, line_no, obj))
    return rows


_SURROGATE = re.compile("[\ud800-\udfff]")


def _refuse_surrogates(where: str, column: str, value: Any) -> None:
    """JSON can escape half a UTF-16 pair (`"\\ud800"`): a string no UTF-8 writer, tokenizer or report accepts, so
    it is refused here, naming the row and column, rather than failing later in every case."""
    stack: list[Any] = [value]  # every string in the value, keys of nested objects included; no recursion
    found = _SURROGATE.search(column)
    while stack and not found:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, str):
            found = _SURROGATE.search(item)
    if found:
        raise DataError(f"{where}: column {_quoted(column)} holds a lone surrogate (U+{ord(found.group()):04X} at "
                        f"character {found.start() + 1}), which is not text: a JSON escape like \\ud83d needs its "
                        f"pair (\\ud83d\\ude00); write the character itself or remove it")


def _check_columns(path: Path, header: Sequence[str], required: Sequence[str]) -> None:
    missing = [c for c in required if c not in header]
    if missing:
        raise _missing_columns(str(path), missing, header)
    twice = [c for c in required if header.count(c) > 1]
    if twice:  # a row would keep only the last of them, silently
        raise DataError(f"{path}, line 1: column {_quoted(twice[0])} appears {header.count(twice[0])} times in the "
                        f"header; keep one")


def _require_keys(row: _Row, keys: Sequence[str]) -> None:
    """JSON rows carry their own keys, so required columns are checked row by row."""
    missing = [k for k in keys if k not in row.values]
    if missing:
        raise _missing_columns(row.where, missing, row.values)


def _string(row: _Row, column: str) -> str:
    """A text field: strings as they are, JSON numbers (ids) as their text; anything else is an error."""
    value = row.values[column]
    if isinstance(value, bool) or value is None or isinstance(value, (dict, list, float)):
        raise DataError(f"{row.where}: column {column!r} must be a string, got {_quoted(value)}")
    return str(value)


def _meme_id(row: _Row, column: str) -> str:
    meme_id = _string(row, column).strip()
    if not meme_id:
        raise DataError(f"{row.where}: empty id in column {column!r}")
    return meme_id


# Characters that draw nothing on their own: controls, format characters (zero-width space and joiners, U+2060,
# U+FEFF, bidi controls), combining marks without a base, separators, and the fillers drawn as blank.
_INVISIBLE_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Mn", "Me", "Zs", "Zl", "Zp"})
_BLANK_LETTERS = frozenset("\u115f\u1160\u3164\uffa0\u2800")


def has_visible_text(text: str) -> bool:
    """Whether `text` shows anything: a caption of zero-width and format characters is as empty as ""."""
    return any(c not in _BLANK_LETTERS and unicodedata.category(c) not in _INVISIBLE_CATEGORIES for c in text)


def _bounded(row: _Row, column: str, meme_id: str, text: str) -> str:
    """`text`, unless it is longer than MAX_CAPTION_CHARS."""
    if len(text) > MAX_CAPTION_CHARS:
        raise DataError(f"{row.where}: caption in column {column!r} for meme {_quoted(meme_id)} has {len(text)} "
                        f"characters, above the limit of {MAX_CAPTION_CHARS} (MAX_CAPTION_CHARS in "
                        f"pytest_memerobust.data.loaders); a meme's caption is a few lines")
    return text


def _caption(row: _Row, column: str, meme_id: str, required: bool = True) -> str:
    """Captions are stripped; one with nothing visible is an error because text models would see nothing, unless
    not `required` (an OCR backend reads it off the picture later: data/ocr.py), when it becomes ""."""
    text = _bounded(row, column, meme_id, _string(row, column).strip())
    if has_visible_text(text):
        return text
    if required:
        shown = " ".join(f"U+{ord(c):04X}" for c in text[:MESSAGE_ITEMS]) + (" ..." * (len(text) > MESSAGE_ITEMS))
        holds = f" (it holds only invisible characters: {shown})" if text else ""
        raise DataError(f"{row.where}: empty caption in column {column!r} for meme {_quoted(meme_id)}{holds} (an OCR "
                        f"backend can read missing captions off the pictures: --memerobust-ocr=rapidocr)")
    return ""


def _label(row: _Row, column: str, classes: Sequence[str] | None) -> int:
    """A class index: an integer within `classes` (below MAX_GENERIC_CLASSES when `classes` is None: the file's
    classes are then 0..its highest label)."""
    value = row.values[column]
    number: int | None = None
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, str) and re.fullmatch(r"[+-]?[0-9]{1,18}", value.strip()):  # int() refuses 4300+ digits
        number = int(value)
    if classes is None:
        if number is None or not 0 <= number < MAX_GENERIC_CLASSES:
            raise DataError(f"{row.where}: column {column!r} has {_quoted(value)}; allowed: a non-negative integer "
                            f"below {MAX_GENERIC_CLASSES} (a csv/jsonl file's classes are 0..its highest label)")
        return number
    if number is None or not 0 <= number < len(classes):
        allowed = _listed(f"{i} ({c})" for i, c in enumerate(classes))
        raise DataError(f"{row.where}: column {column!r} has {_quoted(value)}; allowed: {allowed}")
    return number


def _inside(row: _Row, candidate: Path, root: Path) -> None:
    """Refuse an image path that leads out of the dataset's folder once resolved (absolute, `..`, a symlink)."""
    try:
        if "\0" in str(candidate):
            raise ValueError("it contains a NUL character")
        resolved, home = candidate.resolve(), root.resolve()
    except (OSError, RuntimeError, ValueError) as exc:  # RuntimeError: a symlink loop (Python < 3.13)
        raise DataError(f"{row.where}: unusable image path {_path(repr(str(candidate)))}: {_clip(str(exc))}") from None
    if not resolved.is_relative_to(home):
        raise OutsideFolder(f"{row.where}: image path {_path(candidate)} leads outside the dataset folder {home} "
                            f"(to {_path(resolved)})")


OUTSIDE_PATHS_OPTION = "--memerobust-allow-outside-paths, or load_dataset(..., allow_outside_paths=True)"


class OutsideFolder(DataError):
    """An image path that leads out of its dataset's folder. The way to allow it is said in the words of the face
    that runs: the pytest option (and the library's keyword) unless `naming` gives another, a command's own."""

    def __init__(self, what: str, option: str | None = OUTSIDE_PATHS_OPTION):
        self.what, self.option = what, option
        super().__init__(f"{what}; move the picture into that folder"
                         + (f", or allow paths outside it ({option})" if option else ""))

    def naming(self, option: str | None) -> "OutsideFolder":
        """The same error naming `option` (None: no switch, where the command that runs has none)."""
        return OutsideFolder(self.what, option)

    def __reduce__(self):  # raised in a worker process, it arrives whole
        return OutsideFolder, (self.what, self.option)


def _image_path(row: _Row, candidates: Sequence[Path], require: bool, *, root: Path,
                allow_outside: bool = False) -> Path | None:
    """The first candidate file that exists, checked as a picture (`image_files.check_picture_file`); missing is an
    error unless images are optional (text-only use). Every candidate must lie in `root`, the dataset's folder, unless
    `allow_outside`: the report embeds what it reads."""
    if not allow_outside:
        for candidate in candidates:
            _inside(row, candidate, root)
    for candidate in candidates:
        try:
            if candidate.is_file():
                _check_picture(row, candidate)
                return candidate
        except OSError as exc:  # a name too long for the file system
            raise DataError(f"{row.where}: unusable image path {_path(repr(str(candidate)))}: "
                            f"{_clip(exc.strerror or str(exc))}") from None
    if not require:
        return None
    folders = [c for c in candidates if c.is_dir()]
    if folders:
        raise DataError(f"{row.where}: image path {_path(folders[0])} is a folder, not a picture file")
    tried = " or ".join(_path(c) for c in candidates)
    raise DataError(f"{row.where}: image file not found: {tried}{_other_case(candidates)}")


def _other_case(candidates: Sequence[Path]) -> str:
    """A hint naming a file that differs from a candidate only in case (`99.jpg` asked, `99.JPG` there): file names
    are case-sensitive here, and on the machine the csv was written on they may not have been."""
    for candidate in candidates:
        try:
            found = [entry for entry in candidate.parent.iterdir() if entry.name.lower() == candidate.name.lower()]
        except OSError:
            continue
        if found:
            return f" (there is {_path(found[0])}: file names are case-sensitive here; rename the file or the path)"
    return ""


def _check_picture(row: _Row, path: Path) -> None:
    """A picture the decoder would refuse is this row's error, even for a run that reads only captions: the
    dataset's fingerprint decodes every picture there is."""
    try:
        check_picture_file(path)
    except DataError as exc:
        raise DataError(f"{row.where}: {exc}") from None


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
        raise DataError(f"{file}: unknown split {_quoted(split)}; splits present: {_listed(present) or '(none)'}{also}")
    return [r for r in rows if str(r.values.get(column, "")).strip() == split]


def _check_unique(memes: Sequence[Meme], rows: Sequence[_Row]) -> None:
    """Ids must be unique: perturbation seeds and reports are keyed by meme id."""
    seen: dict[str, _Row] = {}
    for meme, row in zip(memes, rows):
        if meme.id in seen:
            raise DataError(f"{row.where}: duplicate id {_quoted(meme.id)} (first at row {seen[meme.id].number})")
        seen[meme.id] = row


def _require_rows(rows: list[_Row], path: Path) -> None:
    if not rows:
        raise DataError(f"{path}: no data rows")


# --------------------------------------------------------------------------------------------- generic files


def _generic(rows: list[_Row], path: Path, name: str, split: str | None, has_split: bool, require_images: bool,
             require_captions: bool, allow_outside_paths: bool):
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
            image = _image_path(row, [path.parent / _string(row, image_column).strip()], require_images,
                                root=path.parent, allow_outside=allow_outside_paths)
        elif require_images:
            raise DataError(f"{row.where}: empty image path for meme {_quoted(meme_id)}")
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
    if len(classes) < 2:
        _refuse_one_class(path, split, len(rows), len(kept))
    return Dataset(f"{name}:{split}" if split else name, memes, {"label": classes}, str(path))


def _refuse_one_class(path: Path, split: str | None, n_file: int, n_kept: int) -> None:
    """Every label of a generic file is 0: its one class makes a task no detector has, and AUROC needs two."""
    rows = f"all {n_file} rows" + (f"; split {split!r}: {n_kept}" if split else "")
    raise DataError(f"{path}: task 'label' has only one class present: every meme is labelled 0 ({rows}). A csv/jsonl "
                    f"file's classes are 0..its highest label, so this one declares a single class, and AUROC is "
                    f"undefined with one class; add memes of the other class(es) to the file")


def _generic_columns(columns: Sequence[str], require_images: bool) -> list[str]:
    """Required columns; the image column (`image` or `img`) may be absent only for text-only use."""
    needed = ["id", "image", "text", "label"]
    if "img" in columns or not require_images:
        needed.remove("image")
    return needed


@loader("csv")
def load_csv(path: Path, split: str | None = None, *, require_images: bool = True,
                require_captions: bool = True, allow_outside_paths: bool = False) -> Dataset:
    """Generic csv: columns id, image (or img), text, label, optional split; images relative to the file."""
    path = Path(path)
    header, rows = _read_csv(path)
    _check_columns(path, header, _generic_columns(header, require_images))
    return _generic(rows, path, "csv", split, "split" in header, require_images, require_captions, allow_outside_paths)


@loader("jsonl")
def load_jsonl(path: Path, split: str | None = None, *, require_images: bool = True,
                require_captions: bool = True, allow_outside_paths: bool = False) -> Dataset:
    """Generic jsonl: one object per line with keys id, image (or img), text, label, optional split."""
    path = Path(path)
    rows = _read_jsonl(path)
    for row in rows:
        _require_keys(row, _generic_columns(list(row.values), require_images))
    has_split = any("split" in r.values for r in rows)
    if has_split:
        for row in rows:
            _require_keys(row, ["split"])  # a split column present on some rows must be on all
    return _generic(rows, path, "jsonl", split, has_split, require_images, require_captions, allow_outside_paths)


# ------------------------------------------------------------------------------------------ folders of pictures

FOLDER_LOADER = "folder"
PICTURE_SUFFIXES = frozenset({".png", ".jpg", ".jpeg", ".webp", ".bmp", ".gif", ".tif", ".tiff"})
# Hugging Face's imagefolder: a top-level folder with one of these names is a split; metadata.csv or metadata.jsonl
# beside the pictures names each (`file_name`) and may give its caption and label
FOLDER_SPLITS = ("train", "validation", "valid", "val", "dev", "test")
FOLDER_METADATA = ("metadata.csv", "metadata.jsonl")
FOLDER_CAPTION_COLUMNS = ("text", "caption")


@dataclass(frozen=True)
class _PictureRow(_Row):
    """A picture found in a folder, as a row: its errors name the picture, not a row of a file it is not in."""

    @property
    def where(self) -> str:
        return str(self.file)


def _pictures(folder: Path) -> list[Path]:
    """The pictures under `folder`, by their path relative to it (sorted: the order a run evaluates them in);
    hidden files and folders (`.DS_Store`, `.ipynb_checkpoints`) left out."""
    found = []
    for path in folder.rglob("*"):
        relative = path.relative_to(folder)
        if path.suffix.lower() in PICTURE_SUFFIXES and not any(part.startswith(".") for part in relative.parts) \
                and path.is_file():
            found.append(relative)
    return sorted(found, key=lambda r: r.as_posix())


NEGATIONS = ("non-", "non_", "non", "not-", "not_", "not", "no-", "no_")


def _negation_first(names: list[str]) -> list[str]:
    """Two class names of which one negates the other (`non-hateful` and `hateful`, `not_toxic` and `toxic`): the
    negation first, class 0, as every binary detector's card orders them; sorted, `hateful` would come first and
    every label would be the other class. Other names as they are."""
    if len(names) == 2:
        for negated, plain in (names, names[::-1]):
            if any(negated.lower() == prefix + plain.lower() for prefix in NEGATIONS):
                return [negated, plain]
    return names


def _class_indices(values: Sequence[Any]) -> tuple[list[str], list[int]] | None:
    """Class names and each value's index: integers are the classes 0..the highest (as a csv's labels), names are
    sorted (imagefolder's ClassLabel), but for a name and its negation (`_negation_first`); None where no value is
    given."""
    given = [v for v in values if v is not None and str(v).strip() != ""]
    if not given:
        return None
    texts = [str(v).strip() for v in values]
    if all(re.fullmatch(r"[0-9]{1,2}", t) for t in texts):
        numbers = [int(t) for t in texts]
        return [str(i) for i in range(max(numbers) + 1)], numbers
    names = _negation_first(sorted(set(texts)))
    return names, [names.index(t) for t in texts]


def _folder_split_roots(root: Path, split: str | None) -> list[tuple[Path, str | None]]:
    """(folder, split) pairs to read: every split folder there is (`split` must be one of them), or the folder."""
    present = [name for name in FOLDER_SPLITS if (root / name).is_dir()]
    if split is not None and split not in present:
        listed = ", ".join(present) or "none: the folder has no train/validation/test folders"
        raise DataError(f"{root}: unknown split {_quoted(split)}; splits present: {listed}")
    return [(root / name, name) for name in present] or [(root, None)]


def _folder_rows(folder: Path) -> tuple[list[_Row], str | None, str | None]:
    """The rows of one (split) folder: its metadata file's, each naming its picture, or a row per picture found, its
    class subfolder as its label. Also the caption column and the label column (None: none)."""
    metadata = [folder / name for name in FOLDER_METADATA if (folder / name).is_file()]
    if len(metadata) > 1:
        raise DataError(f"{folder}: has both metadata.csv and metadata.jsonl; keep one")
    if metadata:
        file = metadata[0]
        rows = _read_csv(file)[1] if file.suffix == ".csv" else _read_jsonl(file)
        _require_rows(rows, file)
        for row in rows:
            _require_keys(row, ["file_name"])
        caption = next((c for c in FOLDER_CAPTION_COLUMNS if c in rows[0].values), None)
        return rows, caption, "label" if "label" in rows[0].values else None
    pictures = _pictures(folder)
    if not pictures:
        raise DataError(f"{folder}: no pictures ({', '.join(sorted(PICTURE_SUFFIXES))}) in it or its subfolders, "
                        f"and no metadata.csv or metadata.jsonl")
    depths = {len(p.parts) for p in pictures}
    if len(depths) > 1:
        shallow, deep = (next(p for p in pictures if len(p.parts) == d) for d in (min(depths), max(depths)))
        raise DataError(f"{folder}: pictures at different depths ({shallow} and {deep}): put every picture in a "
                        f"subfolder named after its class (its label), or every picture in the folder itself (no "
                        f"labels)")
    labelled = depths == {2}
    if not labelled and depths != {1}:
        raise DataError(f"{folder}: pictures {max(depths) - 1} folders deep ({pictures[0]}); a class subfolder holds "
                        f"its pictures directly")
    rows = [_PictureRow(folder / p, i, i, {"file_name": p.as_posix(), **({"label": p.parts[0]} if labelled else {})})
            for i, p in enumerate(pictures, start=1)]
    return rows, None, "label" if labelled else None


@loader(FOLDER_LOADER)
def load_folder(path: Path, split: str | None = None, *, require_images: bool = True,
                require_captions: bool = True, allow_outside_paths: bool = False) -> Dataset:
    """A folder of pictures, with Hugging Face's imagefolder conventions: class subfolders are the labels (classes
    in sorted order), or a metadata.csv / metadata.jsonl names each picture (`file_name`, relative to it) with an
    optional caption (`text` or `caption`), label (`label`: 0, 1, ... or class names, sorted) and id (`id`); folders
    train/, validation/, test/ ... are splits. A meme's id is its `id`, or its picture's path in the folder without the
    suffix; a meme without a caption needs an OCR backend (--memerobust-ocr), which reads it off the picture. A folder
    with no labels at all (pictures in the folder itself, a metadata file without `label`) is an unlabelled dataset:
    any detector's task is measured on it by the label-free measures only (meme.Dataset.unlabelled)."""
    root = Path(path)
    if not root.is_dir():
        raise DataError(f"dataset folder not found: {root}" if not root.exists() else
                        f"{root} is a file, not a folder of pictures" + (
                            f": read it with {GENERIC_SUFFIXES[root.suffix.lower()]}:{root}"
                            if root.suffix.lower() in GENERIC_SUFFIXES else ""))
    parts = []
    for folder, named in _folder_split_roots(root, split):
        rows, caption, label = _folder_rows(folder)
        parts.append((folder, named, rows, caption, label))
    labelled = {label is not None for *_, label in parts}
    if labelled == {True, False}:
        unlabelled = next(folder for folder, _, _, _, label in parts if label is None)
        raise DataError(f"{unlabelled}: its memes have no labels (no class subfolders, no 'label' column in a "
                        f"metadata file) but the folder's other splits have: label every split, or none")
    every = [row for *_, rows, _, _ in parts for row in rows]
    if labelled == {False}:
        classes, indices = [], [None] * len(every)  # an unlabelled run (meme.Dataset.unlabelled)
    else:
        values = [row.values.get("label") for row in every]
        missing = next((row for row, value in zip(every, values) if value is None or str(value).strip() == ""), None)
        if missing is not None:
            raise DataError(f"{missing.where}: no label for {_quoted(missing.values['file_name'])}; every meme of a "
                            f"labelled folder needs one")
        classes, indices = _class_indices(values)  # (labelled: not None)
    if len(classes) > MAX_GENERIC_CLASSES:
        raise DataError(f"{root}: {len(classes)} classes, above {MAX_GENERIC_CLASSES}; a meme task has a handful")
    # classes come from every split, so each split of one folder shares one label schema (as a csv's)
    memes, kept, index = [], [], iter(indices)
    for folder, named, rows, caption, _ in parts:
        for row in rows:
            label = next(index)
            if split is not None and named != split:
                continue
            file_name = _string(row, "file_name").strip()
            meme_id = _meme_id(row, "id") if "id" in row.values else Path(file_name).with_suffix("").as_posix()
            if named is not None and "id" not in row.values:
                meme_id = f"{named}/{meme_id}"
            image = _image_path(row, [folder / file_name], require_images, root=root,
                                allow_outside=allow_outside_paths)
            if caption is None and require_captions:
                raise DataError(f"{row.where}: no caption for meme {_quoted(meme_id)} (no metadata.csv or .jsonl "
                                f"with a 'text' column names it): an OCR backend reads captions off the pictures: "
                                f"--memerobust-ocr=rapidocr")
            if caption is None:  # "": the OCR backend reads it (data/ocr.py)
                text = ""
            else:
                text = _caption(row, caption, meme_id, require_captions)
            meta = {"split": named} if named is not None else {}
            memes.append(Meme(meme_id, text, {} if label is None else {"label": label}, image, meta=meta))
            kept.append(row)
    _check_unique(memes, kept)
    name = f"{FOLDER_LOADER}:{split}" if split else FOLDER_LOADER
    if not classes:
        return Dataset(name, memes, {}, str(root), unlabelled=True)
    if len(classes) < 2:
        raise DataError(f"{root}: one class ({_quoted(classes[0])}): AUROC and every rate against the other class "
                        f"need two; add memes of another class")
    return Dataset(name, memes, {GENERIC_TASK: classes}, str(root))


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
                require_captions: bool = True, allow_outside_paths: bool = False) -> Dataset:
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
        image = _image_path(row, [root / "Images" / name, root / name], require_images, root=root,
                            allow_outside=allow_outside_paths)
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
                require_captions: bool = True, allow_outside_paths: bool = False) -> Dataset:
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
        image = _image_path(row, [root / _string(row, "img").strip()], require_images, root=root,
                            allow_outside=allow_outside_paths)
        labels = {"hate": _label(row, "label", HATEFUL_MEMES_CLASSES["hate"])}
        caption = _caption(row, "text", meme_id, require_captions)
        memes.append(Meme(meme_id, caption, labels, image, meta={"split": split}))
    _check_unique(memes, rows)
    return Dataset(f"hateful_memes:{split}", memes, dict(HATEFUL_MEMES_CLASSES), str(file))
