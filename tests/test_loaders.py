"""Loaders turn each dataset layout into memes, and every bad input names the file and row that caused it."""
from __future__ import annotations

import csv
import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from pytest_memerobust.data.loaders import (
    LOADERS,
    load_csv,
    load_dataset,
    load_hateful_memes,
    load_jsonl,
    load_pridemm,
    parse_spec,
    register_loader,
)
from pytest_memerobust.data.meme import Dataset, Meme
from pytest_memerobust.errors import DataError, UnknownNameError

REAL_PRIDEMM = Path(__file__).resolve().parents[2] / "shared" / "data" / "pridemm" / "PrideMM.csv"


def png(path: Path, color: tuple[int, int, int]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (4, 3), color).save(path)
    return path


def write_csv(path: Path, header: list[str], rows: list[list]) -> Path:
    with path.open("w", encoding="utf-8", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        writer.writerows(rows)
    return path


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


# ------------------------------------------------------------------------------------------------ layouts


@pytest.fixture
def generic_csv(tmp_path: Path) -> Path:
    png(tmp_path / "pics" / "a.png", (255, 0, 0))
    png(tmp_path / "pics" / "b.png", (0, 255, 0))
    png(tmp_path / "pics" / "c.png", (0, 0, 255))
    return write_csv(
        tmp_path / "memes.csv",
        ["id", "image", "text", "label", "split"],
        [
            ["a", "pics/a.png", "  first caption ", 0, "train"],
            ["b", "pics/b.png", "second, with a comma", 2, "test"],
            ["c", "pics/c.png", "third", 1, "train"],
        ],
    )


@pytest.fixture
def generic_jsonl(tmp_path: Path) -> Path:
    png(tmp_path / "a.png", (10, 20, 30))
    png(tmp_path / "b.png", (40, 50, 60))
    return write_jsonl(
        tmp_path / "memes.jsonl",
        [
            {"id": 1, "img": "a.png", "text": "one", "label": 1},
            {"id": 2, "img": "b.png", "text": "two ", "label": 0},
        ],
    )


PRIDEMM_HEADER = ["name", "hate", "target", "stance", "humour", "split", "text"]


@pytest.fixture
def pridemm_dir(tmp_path: Path) -> Path:
    root = tmp_path / "PrideMM"
    png(root / "Images" / "img_1.png", (1, 2, 3))
    png(root / "Images" / "img_2.png", (4, 5, 6))
    png(root / "img_3.png", (7, 8, 9))  # beside the csv: the fallback location
    write_csv(
        root / "PrideMM.csv",
        PRIDEMM_HEADER,
        [
            ["img_1.png", 0, "NA", 0, 1, "train", "love is love"],
            ["img_2.png", 1, 2, 2, 0, "test", "some hateful text"],
            ["img_3.png", 1, 3, 1, 1, "val", "another one"],
        ],
    )
    return root


@pytest.fixture
def hm_dir(tmp_path: Path) -> Path:
    root = tmp_path / "hm"
    png(root / "img" / "42953.png", (100, 0, 0))
    png(root / "img" / "01235.png", (0, 100, 0))
    write_jsonl(
        root / "dev_seen.jsonl",
        [
            {"id": 42953, "img": "img/42953.png", "label": 0, "text": "its their character not their color"},
            {"id": 1235, "img": "img/01235.png", "label": 1, "text": "don't be afraid"},
        ],
    )
    write_jsonl(root / "train.jsonl", [{"id": 42953, "img": "img/42953.png", "label": 1, "text": "train text"}])
    write_jsonl(root / "test_unseen.jsonl", [{"id": 42953, "img": "img/42953.png", "text": "no label here"}])
    return root


# ------------------------------------------------------------------------------------------- generic csv


def test_csv_values_and_images(generic_csv: Path):
    ds = load_csv(generic_csv)
    assert isinstance(ds, Dataset) and len(ds) == 3
    assert [m.id for m in ds.memes] == ["a", "b", "c"]
    assert [m.text for m in ds.memes] == ["first caption", "second, with a comma", "third"]
    assert ds.labels("label").tolist() == [0, 2, 1]
    assert ds.classes == {"label": ["0", "1", "2"]}
    assert [m.meta["split"] for m in ds.memes] == ["train", "test", "train"]
    assert ds.memes[0].image_path == generic_csv.parent / "pics" / "a.png"
    img = ds.memes[1].image
    assert img.shape == (3, 4, 3) and img.dtype == np.uint8
    assert (img == [0, 255, 0]).all()


def test_csv_split_keeps_file_wide_classes(generic_csv: Path):
    ds = load_csv(generic_csv, "train")
    assert [m.id for m in ds.memes] == ["a", "c"]
    assert ds.classes == {"label": ["0", "1", "2"]}  # label 2 is only in "test", still a class


def test_csv_unknown_split_lists_present(generic_csv: Path):
    with pytest.raises(DataError, match=r"unknown split 'dev'; splits present: test, train"):
        load_csv(generic_csv, "dev")


def test_csv_split_without_split_column(tmp_path: Path):
    png(tmp_path / "a.png", (0, 0, 0))
    f = write_csv(tmp_path / "m.csv", ["id", "img", "text", "label"], [["a", "a.png", "t", 1]])
    assert load_csv(f).memes[0].meta == {}
    with pytest.raises(DataError, match=r"m\.csv: has no split column, cannot select split 'test'"):
        load_csv(f, "test")


def test_csv_missing_column_names_found_columns(tmp_path: Path):
    f = write_csv(tmp_path / "m.csv", ["id", "image", "caption", "label"], [["a", "a.png", "t", 0]])
    with pytest.raises(DataError) as err:
        load_csv(f)
    msg = str(err.value)
    assert str(f) in msg and "missing column 'text'" in msg and "columns found: id, image, caption, label" in msg


def test_csv_missing_image_column_unless_text_only(tmp_path: Path):
    f = write_csv(tmp_path / "m.csv", ["id", "text", "label"], [["a", "caption only", 1]])
    with pytest.raises(DataError, match=r"missing column 'image' \(or 'img'\)"):
        load_csv(f)
    ds = load_csv(f, require_images=False)
    assert ds.memes[0].image_path is None and ds.memes[0].text == "caption only"


def test_csv_missing_image_file(generic_csv: Path):
    (generic_csv.parent / "pics" / "b.png").unlink()
    with pytest.raises(DataError) as err:
        load_csv(generic_csv)
    msg = str(err.value)
    assert f"{generic_csv}, row 2 (line 3)" in msg
    assert f"image file not found: {generic_csv.parent / 'pics' / 'b.png'}" in msg


def test_missing_image_allowed_for_text_only_use(generic_csv: Path):
    (generic_csv.parent / "pics" / "b.png").unlink()
    ds = load_csv(generic_csv, require_images=False)
    assert ds.memes[0].image_path is not None and ds.memes[1].image_path is None
    with pytest.raises(DataError, match="meme 'b' has no image"):
        ds.memes[1].image


def test_unreadable_image_names_row_and_file_at_load(generic_csv: Path):
    """The loader checks each picture's header (a run stops once, before any case); decoding still names the file."""
    bad = generic_csv.parent / "pics" / "c.png"
    bad.write_bytes(np.random.default_rng(0).bytes(64))
    with pytest.raises(DataError) as err:
        load_csv(generic_csv)
    assert f"{generic_csv}, row 3 (line 4): unreadable image {bad}: not a picture" in str(err.value)
    with pytest.raises(DataError, match="unreadable image") as err:
        Meme("c", "t", {}, bad).image
    assert str(bad) in str(err.value)


def test_empty_caption_names_row_and_id(generic_csv: Path, tmp_path: Path):
    f = write_csv(
        tmp_path / "m.csv",
        ["id", "image", "text", "label"],
        [["a", "pics/a.png", "ok", 0], ["b", "pics/b.png", "   ", 1]],
    )
    with pytest.raises(DataError, match=r"m\.csv, row 2 \(line 3\): empty caption in column 'text' for meme 'b'"):
        load_csv(f)


def test_non_utf8_caption_names_line(generic_csv: Path):
    lines = generic_csv.read_bytes().splitlines(keepends=True)
    lines[2] = lines[2].replace(b"second", b"s\xe9cond")  # latin-1 byte on the 3rd line
    generic_csv.write_bytes(b"".join(lines))
    with pytest.raises(DataError, match=r"memes\.csv: not valid UTF-8 at line 3") as err:
        load_csv(generic_csv)
    assert str(generic_csv) in str(err.value)


def test_utf8_bom_and_non_ascii_text(tmp_path: Path):
    png(tmp_path / "a.png", (0, 0, 0))
    f = tmp_path / "m.csv"
    f.write_bytes("\ufeffid,image,text,label\na,a.png,café ✓,1\n".encode("utf-8"))
    assert load_csv(f).memes[0].text == "café ✓"


@pytest.mark.parametrize("bad", ["-1", "yes", "1.5", ""])
def test_generic_label_must_be_non_negative_int(generic_csv: Path, tmp_path: Path, bad: str):
    f = write_csv(tmp_path / "m.csv", ["id", "image", "text", "label"], [["a", "pics/a.png", "t", bad]])
    with pytest.raises(DataError, match=r"row 1 \(line 2\): column 'label' has .*allowed: a non-negative integer"):
        load_csv(f)


def test_multiline_caption_and_blank_lines_keep_line_numbers(tmp_path: Path):
    png(tmp_path / "a.png", (0, 0, 0))
    f = tmp_path / "m.csv"
    f.write_text('id,image,text,label\na,a.png,"two\nlines",0\n\nb,a.png,,1\n', encoding="utf-8")
    with pytest.raises(DataError, match=r"row 2 \(line 5\): empty caption .* meme 'b'"):
        load_csv(f)


def test_wrong_field_count(tmp_path: Path):
    f = tmp_path / "m.csv"
    f.write_text("id,image,text,label\na,a.png,t\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"row 1 \(line 2\): has 3 fields but the header has 4"):
        load_csv(f)


def test_duplicate_id(generic_csv: Path, tmp_path: Path):
    f = write_csv(
        tmp_path / "m.csv",
        ["id", "image", "text", "label"],
        [["a", "pics/a.png", "x", 0], ["a", "pics/b.png", "y", 1]],
    )
    with pytest.raises(DataError, match=r"row 2 \(line 3\): duplicate id 'a' \(first at row 1\)"):
        load_csv(f)


def test_missing_and_empty_files(tmp_path: Path):
    with pytest.raises(DataError, match="dataset file not found"):
        load_csv(tmp_path / "nope.csv")
    (tmp_path / "empty.csv").write_text("", encoding="utf-8")
    with pytest.raises(DataError, match="empty file"):
        load_csv(tmp_path / "empty.csv")
    (tmp_path / "header.csv").write_text("id,image,text,label\n", encoding="utf-8")
    with pytest.raises(DataError, match="no data rows"):
        load_csv(tmp_path / "header.csv")


# ----------------------------------------------------------------------------------------- generic jsonl


def test_jsonl_values(generic_jsonl: Path):
    ds = load_jsonl(generic_jsonl)
    assert [m.id for m in ds.memes] == ["1", "2"]
    assert [m.text for m in ds.memes] == ["one", "two"]
    assert ds.labels("label").tolist() == [1, 0]
    assert ds.classes == {"label": ["0", "1"]}
    assert (ds.memes[1].image == [40, 50, 60]).all()


def test_jsonl_split_filter(tmp_path: Path):
    png(tmp_path / "a.png", (0, 0, 0))
    f = write_jsonl(
        tmp_path / "m.jsonl",
        [
            {"id": "x", "image": "a.png", "text": "t", "label": 0, "split": "train"},
            {"id": "y", "image": "a.png", "text": "u", "label": 1, "split": "test"},
        ],
    )
    assert [m.id for m in load_jsonl(f, "test").memes] == ["y"]
    with pytest.raises(DataError, match="unknown split 'val'; splits present: test, train"):
        load_jsonl(f, "val")


def test_jsonl_malformed_line(generic_jsonl: Path):
    text = generic_jsonl.read_text(encoding="utf-8")
    generic_jsonl.write_text(text + "\n" + '{"id": 3, "img": "a.png",\n', encoding="utf-8")
    with pytest.raises(DataError, match=r"memes\.jsonl, row 3 \(line 4\): malformed JSON"):
        load_jsonl(generic_jsonl)


def test_jsonl_line_separator_inside_text(tmp_path: Path):
    png(tmp_path / "a.png", (0, 0, 0))
    f = tmp_path / "m.jsonl"
    f.write_text(json.dumps({"id": 1, "img": "a.png", "text": "a\u2028b", "label": 1}, ensure_ascii=False) + "\r\n",
                 encoding="utf-8")
    assert load_jsonl(f).memes[0].text == "a\u2028b"


def test_jsonl_row_not_an_object(tmp_path: Path):
    (tmp_path / "m.jsonl").write_text("[1, 2]\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"row 1 \(line 1\): expected a JSON object, got list"):
        load_jsonl(tmp_path / "m.jsonl")


def test_jsonl_missing_key(generic_jsonl: Path):
    write_jsonl(generic_jsonl, [{"id": 1, "img": "a.png", "label": 1}])
    with pytest.raises(DataError, match=r"row 1 \(line 1\): missing column 'text'; columns found: id, img, label"):
        load_jsonl(generic_jsonl)


def test_jsonl_text_must_be_string(generic_jsonl: Path):
    write_jsonl(generic_jsonl, [{"id": 1, "img": "a.png", "text": None, "label": 1}])
    with pytest.raises(DataError, match=r"column 'text' must be a string, got None"):
        load_jsonl(generic_jsonl)


# -------------------------------------------------------------------------------------------------- PrideMM


def test_pridemm_values(pridemm_dir: Path):
    ds = load_pridemm(pridemm_dir)
    assert [m.id for m in ds.memes] == ["img_1.png", "img_2.png", "img_3.png"]
    assert ds.memes[0].text == "love is love"
    assert ds.memes[0].labels == {"hate": 0, "stance": 0, "humour": 1}  # NA target: no target label
    assert ds.memes[0].meta == {"split": "train", "target": None}
    assert ds.memes[1].labels == {"hate": 1, "target": 2, "stance": 2, "humour": 0}
    assert ds.memes[1].meta == {"split": "test", "target": 2}
    assert ds.classes["target"] == ["undirected", "lgbtq+ community", "organization", "individual"]
    assert ds.classes["hate"] == ["non-hateful", "hateful"]
    assert ds.classes["stance"] == ["neutral", "support", "oppose"]
    assert ds.classes["humour"] == ["no humour", "humour"]
    assert ds.memes[0].image_path == pridemm_dir / "Images" / "img_1.png"
    assert ds.memes[2].image_path == pridemm_dir / "img_3.png"  # fallback beside the csv
    assert (ds.memes[2].image == [7, 8, 9]).all()


def test_pridemm_split_and_csv_path(pridemm_dir: Path):
    ds = load_pridemm(pridemm_dir / "PrideMM.csv", "val")
    assert [m.id for m in ds.memes] == ["img_3.png"]
    with pytest.raises(DataError, match="unknown split 'dev'; PrideMM splits: train, val, test"):
        load_pridemm(pridemm_dir, "dev")


def test_pridemm_split_missing_from_file(pridemm_dir: Path):
    write_csv(pridemm_dir / "PrideMM.csv", PRIDEMM_HEADER, [["img_1.png", 0, "NA", 0, 1, "train", "t"]])
    with pytest.raises(DataError, match="unknown split 'test'; splits present: train"):
        load_pridemm(pridemm_dir, "test")


@pytest.mark.parametrize(
    "column, value, allowed",
    [
        ("hate", "2", "allowed: 0 (non-hateful), 1 (hateful)"),
        ("target", "4", "allowed: 0 (undirected), 1 (lgbtq+ community), 2 (organization), 3 (individual) or NA"),
        ("stance", "x", "allowed: 0 (neutral), 1 (support), 2 (oppose)"),
        ("humour", "-1", "allowed: 0 (no humour), 1 (humour)"),
    ],
)
def test_pridemm_label_outside_schema(pridemm_dir: Path, column: str, value: str, allowed: str):
    row = dict(zip(PRIDEMM_HEADER, ["img_2.png", 1, 2, 2, 0, "test", "t"]))
    row[column] = value
    write_csv(
        pridemm_dir / "PrideMM.csv",
        PRIDEMM_HEADER,
        [["img_1.png", 0, "NA", 0, 1, "train", "t"], list(row.values())],
    )
    with pytest.raises(DataError) as err:
        load_pridemm(pridemm_dir)
    msg = str(err.value)
    assert f"{pridemm_dir / 'PrideMM.csv'}, row 2 (line 3): column {column!r} has {value!r}" in msg
    assert allowed in msg


def test_pridemm_missing_image_names_both_places(pridemm_dir: Path):
    (pridemm_dir / "Images" / "img_2.png").unlink()
    with pytest.raises(DataError, match=r"row 2 \(line 3\): image file not found: .*Images/img_2\.png or .*img_2\.png"):
        load_pridemm(pridemm_dir)


def test_pridemm_missing_csv(tmp_path: Path):
    with pytest.raises(DataError, match=r"dataset file not found: .*PrideMM\.csv"):
        load_pridemm(tmp_path)


def test_real_pridemm_captions():
    if not REAL_PRIDEMM.is_file():
        pytest.skip("../shared/data/pridemm/PrideMM.csv not found: the real PrideMM captions live beside the repo")
    with REAL_PRIDEMM.open(encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    split_sizes = Counter(r["split"] for r in rows)

    ds = load_pridemm(REAL_PRIDEMM, require_images=False)
    assert len(ds) == len(rows) == 5063
    for split, size in split_sizes.items():
        assert len(load_pridemm(REAL_PRIDEMM.parent, split, require_images=False)) == size
    for meme, row in zip(ds.memes, rows):
        assert meme.id == row["name"]
        if row["target"] == "NA":
            assert meme.meta["target"] is None and "target" not in meme.labels
        else:
            assert meme.meta["target"] == meme.labels["target"] == int(row["target"])
        for task, value in meme.labels.items():
            assert 0 <= value < len(ds.classes[task])
    assert sum(m.meta["target"] is None for m in ds.memes) == sum(r["target"] == "NA" for r in rows)


# -------------------------------------------------------------------------------------------- Hateful Memes


def test_hateful_memes_default_split(hm_dir: Path):
    ds = load_hateful_memes(hm_dir)
    assert ds.name == "hateful_memes:dev_seen"
    assert [m.id for m in ds.memes] == ["42953", "1235"]
    assert ds.labels("hate").tolist() == [0, 1]
    assert ds.classes == {"hate": ["non-hateful", "hateful"]}
    assert ds.memes[1].image_path == hm_dir / "img" / "01235.png"
    assert (ds.memes[0].image == [100, 0, 0]).all()
    assert ds.memes[0].meta == {"split": "dev_seen"}


def test_hateful_memes_split_picks_file(hm_dir: Path):
    ds = load_hateful_memes(hm_dir, "train")
    assert [(m.id, m.text, m.labels["hate"]) for m in ds.memes] == [("42953", "train text", 1)]


def test_hateful_memes_unlabelled_split(hm_dir: Path):
    with pytest.raises(DataError, match=r"test_unseen\.jsonl, row 1 \(line 1\): split 'test_unseen' has no labels"):
        load_hateful_memes(hm_dir, "test_unseen")


def test_hateful_memes_unknown_and_absent_split(hm_dir: Path):
    with pytest.raises(DataError, match="unknown split 'dev'; Hateful Memes splits: train, dev_seen"):
        load_hateful_memes(hm_dir, "dev")
    with pytest.raises(DataError, match=r"dataset file not found: .*test_seen\.jsonl"):
        load_hateful_memes(hm_dir, "test_seen")


def test_hateful_memes_malformed_line_and_label(hm_dir: Path):
    f = hm_dir / "dev_seen.jsonl"
    f.write_text(f.read_text(encoding="utf-8") + "{not json}\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"dev_seen\.jsonl, row 3 \(line 3\): malformed JSON"):
        load_hateful_memes(hm_dir)
    write_jsonl(f, [{"id": 1, "img": "img/01235.png", "label": 2, "text": "t"}])
    with pytest.raises(DataError, match=r"column 'label' has 2; allowed: 0 \(non-hateful\), 1 \(hateful\)"):
        load_hateful_memes(hm_dir)


def test_hateful_memes_missing_image(hm_dir: Path):
    (hm_dir / "img" / "01235.png").unlink()
    with pytest.raises(DataError, match=r"row 2 \(line 2\): image file not found: .*img/01235\.png"):
        load_hateful_memes(hm_dir)
    assert load_hateful_memes(hm_dir, require_images=False).memes[1].image_path is None


# ------------------------------------------------------------------------------------ specs and registry


@pytest.fixture
def probe():
    """A loader that records what `load_dataset` passed it, to test spec parsing in isolation."""
    calls = []

    def fn(path, split):
        calls.append((path, split))
        return Dataset("probe", [Meme("m", "t", {})], {})

    register_loader("probe", fn, splits=("test",))
    yield calls
    del LOADERS["probe"]


@pytest.mark.parametrize(
    "spec, path, split",
    [
        ("probe:/data/x", "/data/x", None),
        ("probe:/data/x:test", "/data/x", "test"),
        ("probe:/data/x:dev_seen", "/data/x", "dev_seen"),  # no '/', path absent: a split
        ("probe:C:\\data\\x", "C:\\data\\x", None),  # Windows drive: the tail has a backslash
        ("probe:C:\\data\\x:test", "C:\\data\\x", "test"),
        ("probe:C:/data/x", "C:/data/x", None),
        ("probe:/data/x:", "/data/x", None),
        ("probe", ".", None),
    ],
)
def test_spec_parsing(probe, spec: str, path: str, split):
    load_dataset(spec)
    assert probe == [(Path(path), split)]


def test_existing_path_with_colon_is_not_split(probe, tmp_path: Path):
    folder = tmp_path / "data:v2"
    folder.mkdir()
    load_dataset(f"probe:{folder}")
    assert probe == [(folder, None)]


def test_load_dataset_known_layouts(generic_csv: Path, generic_jsonl: Path, pridemm_dir: Path, hm_dir: Path):
    assert len(load_dataset(f"csv:{generic_csv}")) == 3
    assert [m.id for m in load_dataset(f"csv:{generic_csv}:test").memes] == ["b"]
    assert len(load_dataset(f"jsonl:{generic_jsonl}")) == 2
    assert [m.id for m in load_dataset(f"pridemm:{pridemm_dir}:test").memes] == ["img_2.png"]
    assert load_dataset(f"hateful_memes:{hm_dir}:train").name == "hateful_memes:train"
    assert parse_spec(str(generic_csv)) == ("csv", generic_csv, None)
    assert len(load_dataset(str(generic_csv))) == 3  # a bare .csv path
    assert len(load_dataset(str(generic_jsonl))) == 2  # a bare .jsonl path


def test_load_dataset_requires_images(generic_csv: Path):
    (generic_csv.parent / "pics" / "a.png").unlink()
    with pytest.raises(DataError, match="image file not found"):
        load_dataset(f"csv:{generic_csv}")


def test_bare_missing_csv_path(tmp_path: Path):
    with pytest.raises(DataError, match="dataset file not found"):
        load_dataset(str(tmp_path / "missing.csv"))


def test_unknown_loader_lists_known():
    with pytest.raises(UnknownNameError) as err:
        load_dataset("imgflip:/data/x")
    msg = str(err.value)
    assert "unknown dataset loader 'imgflip'" in msg
    for name in ("csv", "jsonl", "pridemm", "hateful_memes"):
        assert name in msg


def test_register_loader_rules():
    def extra(path, split):
        return Dataset("extra", [], {})

    register_loader("extra", extra)
    try:
        assert LOADERS["extra"] is extra
        register_loader("extra", extra)  # the same function again (a re-import): harmless
        with pytest.raises(ValueError, match="already registered"):
            register_loader("extra", lambda p, s: extra(p, s))
    finally:
        del LOADERS["extra"]
    with pytest.raises(ValueError, match="contain no ':'"):
        register_loader("a:b", extra)
