"""A corpus of broken and hostile datasets, kept as code rather than committed binaries.

Each function of `CASES` writes one bad dataset into an empty folder (and, for paths that escape it, beside the
folder) and returns the `Case` to expect: the spec to load, the exact error class, and a substring that names the
culprit (file and row, and the picture). tests/test_bad_inputs.py loads every one.
"""
from __future__ import annotations

import csv
import json
import struct
import zlib
from pathlib import Path
from typing import Callable, NamedTuple

import numpy as np
from PIL import Image

from pytest_memerobust.data.loaders import OutsideFolder  # a DataError that a command words its own way
from pytest_memerobust.errors import DataError

HEADER = ["id", "image", "text", "label", "split"]


class Case(NamedTuple):
    spec: str
    error: type[Exception]
    expected: str  # substring of the message naming the culprit
    decode: bool = False  # the error shows only when the pictures are decoded (Meme.image), not when the rows load
    also: tuple[str, ...] = ()  # further substrings the message must hold


CASES: dict[str, Callable[[Path], Case]] = {}


def case(fn: Callable[[Path], Case]) -> Callable[[Path], Case]:
    CASES[fn.__name__] = fn
    return fn


# ------------------------------------------------------------------------------------------------- writers


def png(path: Path, color: tuple[int, int, int] = (200, 10, 10)) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (4, 3), color).save(path, format="PNG")
    return path


def write_csv(path: Path, rows: list[list], header: list[str] = HEADER) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8", newline="") as f:
        csv.writer(f).writerows([header, *rows])
    return path


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def good_rows(folder: Path, n: int = 3) -> list[list]:
    """n valid rows (labels 0, 1, 0...) with their pictures: a bad row is added to them."""
    rows = []
    for i in range(n):
        png(folder / f"m{i}.png", (i * 40, 0, 0))
        rows.append([f"m{i}", f"m{i}.png", f"caption {i}", i % 2, "test"])
    return rows


def memes_csv(folder: Path, bad: list, at: int = 1) -> tuple[Path, str]:
    """Good rows with `bad` as data row `at + 1` (0-based `at`); returns the file and the `where` of that row."""
    rows = good_rows(folder)
    rows.insert(at, bad)
    path = write_csv(folder / "memes.csv", rows)
    return path, f"{path}, row {at + 1} (line {at + 2})"


def memes_jsonl(folder: Path, bad: dict, at: int = 1) -> tuple[Path, str]:
    rows = [dict(zip(HEADER, r)) for r in good_rows(folder)]
    rows.insert(at, bad)
    path = write_jsonl(folder / "memes.jsonl", rows)
    return path, f"{path}, row {at + 1} (line {at + 1})"


def png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def write_png(path: Path, width: int, height: int, bit_depth: int, color_type: int, rows) -> Path:
    """A PNG written by hand (PIL cannot write 16-bit colour or 1-bit pictures this large cheaply): `rows` yields
    each row's raw bytes, filter byte excluded."""
    compressor, idat = zlib.compressobj(9), []
    for row in rows:
        idat.append(compressor.compress(b"\0" + row))
    idat.append(compressor.flush())
    header = struct.pack(">IIBBBBB", width, height, bit_depth, color_type, 0, 0, 0)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", header) + png_chunk(b"IDAT", b"".join(idat))
                     + png_chunk(b"IEND", b""))
    return path


def png_16bit(path: Path, grey: np.ndarray) -> np.ndarray:
    """A 16-bit greyscale PNG of `grey` (uint16, H x W); returns the 8-bit RGB picture it should decode to."""
    write_png(path, grey.shape[1], grey.shape[0], 16, 0, (r.astype(">u2").tobytes() for r in grey))
    return np.repeat((grey >> 8).astype(np.uint8)[:, :, None], 3, axis=2)


def sixteen_bit_dataset(folder: Path) -> tuple[str, np.ndarray]:
    """A csv whose second picture is a 16-bit PNG; the spec and the picture it should decode to."""
    grey = np.array([[0, 257, 1000, 32768], [65535, 65280, 255, 40000]], dtype=np.uint16)
    rows = good_rows(folder)
    expected = png_16bit(folder / "m1.png", grey)
    return f"csv:{write_csv(folder / 'memes.csv', rows)}", expected


# ------------------------------------------------------------------------------ the seven kinds the probe found


@case
def label_billion(folder: Path) -> Case:
    """Classes were range(max + 1): a MemoryError."""
    path, where = memes_csv(folder, ["x", "m0.png", "huge label", 1_000_000_000, "test"])
    return Case(f"csv:{path}", DataError, f"{where}: column 'label' has '1000000000'", also=("below 100",))


@case
def label_200k(folder: Path) -> Case:
    """Loaded, then the class-count error printed 200,001 class names (7.5 MB)."""
    path, where = memes_csv(folder, ["x", "m0.png", "big label", 200_000, "test"])
    return Case(f"csv:{path}", DataError, f"{where}: column 'label' has '200000'")


@case
def caption_zero_width(folder: Path) -> Case:
    """Only zero-width, word-joiner, BOM and bidi characters: nothing a text model could read."""
    path, where = memes_csv(folder, ["x", "m0.png", "\u200b\u200c\u200d\u2060\ufeff\u202e\u2066\u200f", 1, "test"])
    return Case(f"csv:{path}", DataError, f"{where}: empty caption in column 'text' for meme 'x'",
                also=("U+200B", "--memerobust-ocr"))


@case
def caption_100k_characters(folder: Path) -> Case:
    """Loaded whole; the words-changed measure then took minutes over it in every text case."""
    path, where = memes_csv(folder, ["x", "m0.png", "long " * 20_000, 1, "test"])
    return Case(f"csv:{path}", DataError, f"{where}: caption in column 'text' for meme 'x' has 99999 characters, above "
                f"the limit of 10000")


@case
def figmemes_caption_too_long(folder: Path) -> Case:
    """FigMemes reads its captions apart (an empty one is allowed there): the bound holds there too."""
    png(folder / "images" / "a.png")
    labels = ["allusion", "exaggeration", "irony", "anthrop", "metaphor", "contrast"]
    for name, rows in (("figmemes_annotations.tsv", [["img_name", *labels], ["a.png", 1, 0, 0, 0, 0, 0]]),
                       ("standard_split.tsv", [["img_name", "split"], ["a.png", "test"]])):
        (folder / name).write_text("".join("\t".join(map(str, r)) + "\n" for r in rows), encoding="utf-8")
    ocr = folder / "figmemes_ocrs.tsv"
    ocr.write_text("img_name\ttext\na.png\t" + "word " * 2500 + "!\n", encoding="utf-8")
    return Case(f"figmemes:{folder}", DataError, f"{ocr}, row 1 (line 2): caption in column 'text' for meme 'a.png' "
                f"has 12501 characters")


@case
def caption_lone_surrogate(folder: Path) -> Case:
    """`"\\ud800"` in JSON is half a UTF-16 pair: every case failed later with a UnicodeEncodeError."""
    path, where = memes_jsonl(folder, {"id": "x", "image": "m0.png", "text": "bad \ud800 text", "label": 1,
                                       "split": "test"})
    return Case(f"jsonl:{path}", DataError, f"{where}: column 'text' holds a lone surrogate (U+D800 at character 5)")


def blank_png(path: Path, side: int) -> Path:
    """A `side` x `side` 1-bit PNG: a few KB on disk, side * side pixels once decoded."""
    return write_png(path, side, side, 1, 0, (bytes(side // 8) for _ in range(side)))


@case
def decompression_bomb(folder: Path) -> Case:
    """A 16000 x 16000 1-bit PNG of 32 KB: 256 million pixels once decoded, above PIL's limit. It failed every case
    that decoded it; now the row is refused from the picture's header."""
    bomb = blank_png(folder / "bomb.png", 16000)
    path, where = memes_csv(folder, ["x", "bomb.png", "a bomb", 1, "test"])
    return Case(f"csv:{path}", DataError, f"{where}: image {bomb} is too large to decode")


@case
def image_absolute_path(folder: Path) -> Case:
    """An absolute path was followed anywhere (and the HTML report embeds thumbnails of what it reads)."""
    outside = png(folder.parent / "elsewhere" / "secret.png")
    path, where = memes_csv(folder, ["x", str(outside), "absolute", 1, "test"])
    return Case(f"csv:{path}", OutsideFolder, f"{where}: image path {outside} leads outside the dataset folder",
                also=("allow_outside_paths=True",))


@case
def image_dotdot_path(folder: Path) -> Case:
    outside = png(folder.parent / "secret.png")
    path, where = memes_csv(folder, ["x", "../secret.png", "dot dot", 1, "test"])
    return Case(f"csv:{path}", OutsideFolder, f"{where}: image path {folder / '..' / 'secret.png'} leads outside",
                also=(f"to {outside}",))


@case
def image_symlink_out(folder: Path) -> Case:
    """A link inside the folder counts where it points."""
    outside = png(folder.parent / "secret.png")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "link.png").symlink_to(outside)
    path, where = memes_csv(folder, ["x", "link.png", "a link", 1, "test"])
    return Case(f"csv:{path}", OutsideFolder, f"{where}: image path {folder / 'link.png'} leads outside")


@case
def hateful_memes_absolute_img(folder: Path) -> Case:
    """The published layouts share the check: Hateful Memes' `img`."""
    png(folder / "img" / "1.png")
    outside = png(folder.parent / "secret.png")
    file = write_jsonl(folder / "dev_seen.jsonl", [{"id": 1, "img": "img/1.png", "label": 0, "text": "fine"},
                                                   {"id": 2, "img": str(outside), "label": 1, "text": "out"}])
    return Case(f"hateful_memes:{folder}", OutsideFolder, f"{file}, row 2 (line 2): image path {outside} leads outside")


@case
def pridemm_dotdot_name(folder: Path) -> Case:
    png(folder / "Images" / "a.png")
    png(folder.parent / "b.png")
    header = ["name", "hate", "target", "stance", "humour", "split", "text"]
    file = write_csv(folder / "PrideMM.csv", [["a.png", 0, "NA", 0, 1, "test", "fine"],
                                              ["../b.png", 1, 1, 2, 0, "test", "out"]], header)
    return Case(f"pridemm:{folder}", OutsideFolder, f"{file}, row 2 (line 3): image path", also=("leads outside",))


@case
def one_class(folder: Path) -> Case:
    """Every meme labelled 0: the classes read off the file were ['0'], and the refusal blamed the model."""
    rows = good_rows(folder, 4)
    for i, row in enumerate(rows):
        row[3], row[4] = 0, "train" if i < 2 else "test"
    path = write_csv(folder / "memes.csv", rows)
    return Case(f"csv:{path}:test", DataError, f"{path}: task 'label' has only one class present",
                also=("split 'test'", "AUROC is undefined"))


# ------------------------------------------------------------------------- other faults (most were handled)


@case
def missing_column(folder: Path) -> Case:
    path = write_csv(folder / "memes.csv", [["a", "m0.png", "t", 0]], ["id", "image", "caption", "label"])
    return Case(f"csv:{path}", DataError, f"{path}: missing column 'text'")


@case
def duplicate_column(folder: Path) -> Case:
    """A second `label` column silently won."""
    png(folder / "m0.png")
    path = write_csv(folder / "memes.csv", [["a", "m0.png", "t", 0, 1]], ["id", "image", "text", "label", "label"])
    return Case(f"csv:{path}", DataError, f"{path}, line 1: column 'label' appears 2 times")


@case
def duplicate_id(folder: Path) -> Case:
    path, where = memes_csv(folder, ["m0", "m0.png", "again", 1, "test"])
    return Case(f"csv:{path}", DataError, f"{where}: duplicate id 'm0' (first at row 1)")


@case
def duplicate_huge_id(folder: Path) -> Case:
    """A 100,000-character id is quoted clipped."""
    rows = good_rows(folder)
    rows[0][0] = rows[1][0] = "i" * 100_000
    path = write_csv(folder / "memes.csv", rows)
    return Case(f"csv:{path}", DataError, f"{path}, row 2 (line 3): duplicate id", also=("100002 characters",))


@case
def non_utf8(folder: Path) -> Case:
    path, _ = memes_csv(folder, ["x", "m0.png", "caf\u00e9", 1, "test"])
    path.write_bytes(path.read_bytes().replace("caf\u00e9".encode(), b"caf\xe9"))
    return Case(f"csv:{path}", DataError, f"{path}: not valid UTF-8 at line 3")


@case
def empty_file(folder: Path) -> Case:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "memes.csv").write_bytes(b"")
    return Case(f"csv:{folder / 'memes.csv'}", DataError, f"{folder / 'memes.csv'}: empty file")


@case
def header_only(folder: Path) -> Case:
    path = write_csv(folder / "memes.csv", [])
    return Case(f"csv:{path}", DataError, f"{path}: no data rows")


@case
def label_not_integer(folder: Path) -> Case:
    path, where = memes_csv(folder, ["x", "m0.png", "t", "1.5", "test"])
    return Case(f"csv:{path}", DataError, f"{where}: column 'label' has '1.5'; allowed: a non-negative integer")


@case
def label_negative(folder: Path) -> Case:
    path, where = memes_csv(folder, ["x", "m0.png", "t", "-1", "test"])
    return Case(f"csv:{path}", DataError, f"{where}: column 'label' has '-1'")


@case
def label_5000_digits(folder: Path) -> Case:
    """int() refuses strings of over 4300 digits with a bare ValueError."""
    path, where = memes_csv(folder, ["x", "m0.png", "t", "7" * 5000, "test"])
    return Case(f"csv:{path}", DataError, f"{where}: column 'label' has '777", also=("5002 characters",))


@case
def label_boolean(folder: Path) -> Case:
    path, where = memes_jsonl(folder, {"id": "x", "image": "m0.png", "text": "t", "label": True, "split": "test"})
    return Case(f"jsonl:{path}", DataError, f"{where}: column 'label' has True")


@case
def json_5000_digit_integer(folder: Path) -> Case:
    """json.loads raises a ValueError that is not a JSONDecodeError."""
    path, where = memes_jsonl(folder, {})
    path.write_text(path.read_text(encoding="utf-8").replace("{}", '{"id": "x", "label": ' + "7" * 5000 + "}"),
                    encoding="utf-8")
    return Case(f"jsonl:{path}", DataError, f"{where}: unreadable JSON")


@case
def json_nested_deeply(folder: Path) -> Case:
    """json.loads raises RecursionError."""
    path, where = memes_jsonl(folder, {})
    path.write_text(path.read_text(encoding="utf-8").replace("{}", '{"id": ' + "[" * 100_000 + "}"), encoding="utf-8")
    return Case(f"jsonl:{path}", DataError, f"{where}: unreadable JSON: nested too deeply")


@case
def json_malformed(folder: Path) -> Case:
    path, where = memes_jsonl(folder, {})
    path.write_text(path.read_text(encoding="utf-8").replace("{}", '{"id": "x",'), encoding="utf-8")
    return Case(f"jsonl:{path}", DataError, f"{where}: malformed JSON")


@case
def json_not_an_object(folder: Path) -> Case:
    path, where = memes_jsonl(folder, {})
    path.write_text(path.read_text(encoding="utf-8").replace("{}", "[1, 2]"), encoding="utf-8")
    return Case(f"jsonl:{path}", DataError, f"{where}: expected a JSON object, got list")


@case
def text_not_a_string(folder: Path) -> Case:
    path, where = memes_jsonl(folder, {"id": "x", "image": "m0.png", "text": None, "label": 1, "split": "test"})
    return Case(f"jsonl:{path}", DataError, f"{where}: column 'text' must be a string, got None")


@case
def empty_id(folder: Path) -> Case:
    path, where = memes_csv(folder, ["  ", "m0.png", "t", 1, "test"])
    return Case(f"csv:{path}", DataError, f"{where}: empty id in column 'id'")


@case
def wrong_field_count(folder: Path) -> Case:
    path, where = memes_csv(folder, ["x", "m0.png", "t", 1])
    return Case(f"csv:{path}", DataError, f"{where}: has 4 fields but the header has 5")


@case
def csv_field_too_large(folder: Path) -> Case:
    """Python's csv module refuses fields over 131072 characters."""
    path, _ = memes_csv(folder, ["x", "m0.png", "w" * 200_000, 1, "test"])
    return Case(f"csv:{path}", DataError, f"{path}, line 3: malformed CSV")


@case
def unknown_split(folder: Path) -> Case:
    path, _ = memes_csv(folder, ["x", "m0.png", "t", 1, "train"])
    return Case(f"csv:{path}:dev", DataError, f"{path}: unknown split 'dev'; splits present: test, train")


@case
def image_missing(folder: Path) -> Case:
    path, where = memes_csv(folder, ["x", "gone.png", "t", 1, "test"])
    return Case(f"csv:{path}", DataError, f"{where}: image file not found: {folder / 'gone.png'}")


@case
def image_is_folder(folder: Path) -> Case:
    (folder / "pics").mkdir(parents=True)
    path, where = memes_csv(folder, ["x", "pics", "t", 1, "test"])
    return Case(f"csv:{path}", DataError, f"{where}: image path {folder / 'pics'} is a folder, not a picture file")


@case
def image_name_too_long(folder: Path) -> Case:
    """stat raises OSError (File name too long), not a missing file."""
    path, where = memes_csv(folder, ["x", "n" * 5000 + ".png", "t", 1, "test"])
    return Case(f"csv:{path}", DataError, f"{where}: unusable image path")


@case
def image_path_nul(folder: Path) -> Case:
    path, where = memes_jsonl(folder, {"id": "x", "image": "m0\u0000.png", "text": "t", "label": 1, "split": "test"})
    return Case(f"jsonl:{path}", DataError, f"{where}: unusable image path", also=("NUL",))


@case
def image_path_terminal_codes(folder: Path) -> Case:
    """A path with escape sequences is named escaped, not sent to the terminal."""
    path, where = memes_csv(folder, ["x", "\x1b[2Jgone.png", "t", 1, "test"])
    return Case(f"csv:{path}", DataError, f"{where}: image file not found", also=("\\x1b[2Jgone.png",))


def noise_picture(path: Path, format: str, cut: float = 1.0) -> Path:
    """A 64 x 64 picture of noise in `format`, its file cut to the first `cut` of its bytes."""
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (64, 64, 3), dtype=np.uint8)).save(path, format=format)
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * cut)])
    return path


# Unreadable pictures failed every case that decoded them (exit 1, a model failure); each is now its row's error.


@case
def image_truncated(folder: Path) -> Case:
    path, where = memes_csv(folder, ["x", "cut.png", "t", 1, "test"])
    noise_picture(folder / "cut.png", "PNG", cut=0.5)
    return Case(f"csv:{path}", DataError, f"{where}: unreadable image {folder / 'cut.png'}: Truncated File Read")


@case
def image_truncated_jpeg(folder: Path) -> Case:
    """PIL's verify() checks nothing of a JPEG: its end-of-image marker is missing."""
    path, where = memes_csv(folder, ["x", "cut.jpg", "t", 1, "test"])
    noise_picture(folder / "cut.jpg", "JPEG", cut=0.9)
    return Case(f"csv:{path}", DataError, f"{where}: unreadable image {folder / 'cut.jpg'}: image file is truncated")


@case
def image_png_bad_checksum(folder: Path) -> Case:
    """One byte of the compressed pixels changed: the chunk's CRC no longer matches."""
    path, where = memes_csv(folder, ["x", "flipped.png", "t", 1, "test"])
    data = bytearray(noise_picture(folder / "flipped.png", "PNG").read_bytes())
    data[data.index(b"IDAT") + 40] ^= 0xFF
    (folder / "flipped.png").write_bytes(bytes(data))
    return Case(f"csv:{path}", DataError, f"{where}: unreadable image {folder / 'flipped.png'}: broken PNG file")


@case
def image_zero_bytes(folder: Path) -> Case:
    path, where = memes_csv(folder, ["x", "empty.png", "t", 1, "test"])
    (folder / "empty.png").write_bytes(b"")
    return Case(f"csv:{path}", DataError, f"{where}: unreadable image {folder / 'empty.png'}: not a picture")


@case
def image_not_a_picture(folder: Path) -> Case:
    path, where = memes_csv(folder, ["x", "noise.png", "t", 1, "test"])
    (folder / "noise.png").write_bytes(np.random.default_rng(1).bytes(256))
    return Case(f"csv:{path}", DataError, f"{where}: unreadable image {folder / 'noise.png'}: not a picture")


@case
def image_text_file_named_png(folder: Path) -> Case:
    path, where = memes_csv(folder, ["x", "notes.png", "t", 1, "test"])
    (folder / "notes.png").write_text("remember to export the pictures\n", encoding="utf-8")
    return Case(f"csv:{path}", DataError, f"{where}: unreadable image {folder / 'notes.png'}: not a picture")


# Pictures too large to work with: refused from the header, before a byte of pixels is decoded.


@case
def image_144_megapixels(folder: Path) -> Case:
    """The probe's 12000 x 12000 PNG: under PIL's error limit, so it was decoded, and asked 6.9 GB in every case."""
    big = blank_png(folder / "big.png", 12000)
    path, where = memes_csv(folder, ["x", "big.png", "big", 1, "test"])
    return Case(f"csv:{path}", DataError, f"{where}: image {big} is too large to decode: 12000 x 12000 pixels "
                f"(144 megapixels), above the limit of 64 megapixels")


@case
def image_72_megapixels(folder: Path) -> Case:
    """Under PIL's warning limit (89.5 megapixels) too: only MAX_PICTURE_PIXELS refuses it."""
    big = blank_png(folder / "big.png", 8500)
    path, where = memes_csv(folder, ["x", "big.png", "big", 1, "test"])
    return Case(f"csv:{path}", DataError, f"{where}: image {big} is too large to decode: 8500 x 8500 pixels")


@case
def image_jpeg_bomb(folder: Path) -> Case:
    """A 300-byte JPEG whose header claims 60000 x 60000 pixels."""
    folder.mkdir(parents=True, exist_ok=True)
    bomb = jpeg_bomb(folder / "bomb.jpg")
    path, where = memes_csv(folder, ["x", "bomb.jpg", "a bomb", 1, "test"])
    return Case(f"csv:{path}", DataError, f"{where}: image {bomb} is too large to decode")


def jpeg_bomb(path: Path, side: int = 60000) -> Path:
    """A small JPEG whose header claims `side` x `side` pixels: refused from the header alone."""
    Image.new("RGB", (8, 8), (1, 2, 3)).save(path, format="JPEG")
    data = bytearray(path.read_bytes())
    sof = data.index(b"\xff\xc0")
    data[sof + 5 : sof + 9] = struct.pack(">HH", side, side)  # height, width after length and precision
    path.write_bytes(bytes(data))
    return path


def _categories() -> dict[str, str]:
    """Each kind's category in the issue's terms, for the corpus count (tests/test_bad_run_corpus.py)."""
    named = {
        "images": ["decompression_bomb", "image_absolute_path", "image_dotdot_path", "image_is_folder", "image_missing",
                   "image_name_too_long", "image_not_a_picture", "image_path_nul", "image_path_terminal_codes",
                   "image_symlink_out", "image_truncated", "image_zero_bytes", "hateful_memes_absolute_img",
                   "pridemm_dotdot_name", "image_truncated_jpeg", "image_png_bad_checksum",
                   "image_text_file_named_png", "image_144_megapixels", "image_72_megapixels", "image_jpeg_bomb"],
        "captions": ["caption_lone_surrogate", "caption_zero_width", "text_not_a_string", "caption_100k_characters",
                     "figmemes_caption_too_long"],
        "labels": ["label_200k", "label_5000_digits", "label_billion", "label_boolean", "label_negative",
                   "label_not_integer", "one_class"],
        "rows": ["csv_field_too_large", "duplicate_column", "duplicate_huge_id", "duplicate_id", "empty_file",
                 "empty_id", "header_only", "json_5000_digit_integer", "json_malformed", "json_nested_deeply",
                 "json_not_an_object", "missing_column", "non_utf8", "unknown_split", "wrong_field_count"],
    }
    out = {kind: category for category, kinds in named.items() for kind in kinds}
    assert set(out) == set(CASES), sorted(set(out) ^ set(CASES))  # a new kind needs its category
    return out


CATEGORIES = _categories()
