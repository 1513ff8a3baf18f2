"""A folder of pictures as a dataset (`--memerobust-data=folder:PATH`, or the folder's path alone; issue 63), with
Hugging Face's imagefolder conventions: class subfolders are labels, a metadata.csv / metadata.jsonl names pictures
with their captions and labels, train/ and test/ folders are splits. Captions a meme lacks are left to OCR; a folder
without labels is measured without them (tests/test_unlabelled.py); a folder labelled in one split only, a folder given
to the csv loader and a file name that differs only in case are each one clear error."""
import json
from pathlib import Path

import pytest
from PIL import Image

from pytest_memerobust.data import demo_dataset
from pytest_memerobust.data.loaders import load_dataset, parse_spec
from pytest_memerobust.errors import DataError

MEMES = demo_dataset("test").head(6).memes  # three hateful (label 1), then three not (label 0)
CLASS = {0: "0-benign", 1: "1-hateful"}  # numbered, so the sorted class order is the detector's


def _picture(path: Path, meme) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(meme.image).save(path)
    return path


def _by_class(folder: Path) -> Path:
    for meme in MEMES:
        _picture(folder / CLASS[meme.labels["hate"]] / f"{meme.id}.png", meme)
    return folder


def test_class_subfolders_are_the_labels_in_sorted_order_and_captions_are_left_to_ocr(tmp_path):
    folder = _by_class(tmp_path / "memes")
    (folder / ".ipynb_checkpoints").mkdir()  # hidden: left out
    _picture(folder / ".ipynb_checkpoints" / "x.png", MEMES[0])
    data = load_dataset(f"folder:{folder}", require_captions=False)
    assert data.name == "folder" and data.classes == {"label": ["0-benign", "1-hateful"]}
    assert sorted((m.id, m.labels["label"]) for m in data.memes) == sorted(
        (f"{CLASS[m.labels['hate']]}/{m.id}", m.labels["hate"]) for m in MEMES)
    assert [m.text for m in data.memes] == [""] * 6  # OCR reads them (data/ocr.py)
    assert (data.memes[0].image == Image.open(data.memes[0].image_path).convert("RGB")).all()
    # the folder's path alone is the same dataset; a word that names a loader stays that loader
    assert parse_spec(str(folder)) == ("folder", folder, None)
    (tmp_path / "demo").mkdir()
    assert parse_spec("demo")[0] == "demo"
    with pytest.raises(DataError, match=r"0-benign/demo-\d+\.png: no caption for meme .*--memerobust-ocr=rapidocr"):
        load_dataset(str(folder))  # a run whose detector reads captions, and no OCR


def test_a_metadata_file_names_pictures_with_captions_labels_and_ids(tmp_path):
    folder = tmp_path / "memes"
    for meme in MEMES:
        _picture(folder / "pictures" / f"{meme.id}.jpg", meme)
    (folder / "metadata.csv").write_text("file_name,text,label\n" + "".join(
        f"pictures/{m.id}.jpg,{m.text},{m.labels['hate']}\n" for m in MEMES))
    data = load_dataset(f"folder:{folder}")
    assert [(m.id, m.text, m.labels["label"]) for m in data.memes] == [
        (f"pictures/{m.id}", m.text, m.labels["hate"]) for m in MEMES]
    assert data.classes == {"label": ["0", "1"]}
    (folder / "metadata.csv").unlink()  # jsonl: class names as labels (sorted), its own ids, `caption`
    (folder / "metadata.jsonl").write_text("".join(json.dumps(
        {"file_name": f"pictures/{m.id}.jpg", "id": m.id, "caption": m.text,
         "label": ["benign", "hateful"][m.labels["hate"]]}) + "\n" for m in MEMES))
    data = load_dataset(str(folder))
    assert [(m.id, m.text, m.labels["label"]) for m in data.memes] == [(m.id, m.text, m.labels["hate"]) for m in MEMES]
    assert data.classes == {"label": ["benign", "hateful"]}


def test_a_class_and_its_negation_put_the_negation_first(tmp_path):
    """Sorted, `hateful/` would be class 0 and `not-hateful/` class 1: every label the other class of a detector's."""
    folder = tmp_path / "memes"
    for meme in MEMES:
        _picture(folder / ["not-hateful", "hateful"][meme.labels["hate"]] / f"{meme.id}.png", meme)
    data = load_dataset(str(folder), require_captions=False)
    assert data.classes == {"label": ["not-hateful", "hateful"]}
    assert sorted((m.id.split("/")[1], m.labels["label"]) for m in data.memes) == sorted(
        (m.id, m.labels["hate"]) for m in MEMES)
    (folder / "not-hateful").rename(folder / "benign")  # no negation: sorted, as imagefolder does
    assert load_dataset(str(folder), require_captions=False).classes == {"label": ["benign", "hateful"]}


def test_split_folders_are_splits(tmp_path):
    folder = tmp_path / "memes"
    for i, meme in enumerate(MEMES):
        _picture(folder / ("train" if i % 2 else "test") / CLASS[meme.labels["hate"]] / f"{meme.id}.png", meme)
    test = load_dataset(f"folder:{folder}:test", require_captions=False)
    assert test.name == "folder:test" and len(test) == 3
    assert {m.meta["split"] for m in test.memes} == {"test"} and all(m.id.startswith("test/") for m in test.memes)
    assert len(load_dataset(f"folder:{folder}", require_captions=False)) == 6  # every split
    with pytest.raises(DataError, match=r"unknown split 'validation'; splits present: train, test"):
        load_dataset(f"folder:{folder}:validation", require_captions=False)


def test_what_a_folder_cannot_be_read_as_is_one_error_naming_it(tmp_path):
    flat = tmp_path / "flat"
    for meme in MEMES[:2]:
        _picture(flat / f"{meme.id}.png", meme)
    assert load_dataset(f"folder:{flat}", require_captions=False).unlabelled  # measured without labels
    split = tmp_path / "split"
    _by_class(split / "train")
    _picture(split / "test" / "a.png", MEMES[0])
    with pytest.raises(DataError, match=r"test: its memes have no labels .* but the folder's other splits have"):
        load_dataset(f"folder:{split}", require_captions=False)
    _picture(flat / "0-benign" / "x.png", MEMES[3])
    with pytest.raises(DataError, match=r"pictures at different depths \(demo-\d+\.png and 0-benign/x\.png\)"):
        load_dataset(f"folder:{flat}", require_captions=False)
    with pytest.raises(DataError, match=r"flat is a folder, not a dataset file: read its pictures with folder:"):
        load_dataset(f"csv:{flat}")
    (tmp_path / "m.csv").write_text("id,image,text,label\n")
    with pytest.raises(DataError, match=r"m\.csv is a file, not a folder of pictures: read it with csv:"):
        load_dataset(f"folder:{tmp_path / 'm.csv'}")
    with pytest.raises(DataError, match="dataset folder not found"):
        load_dataset(f"folder:{tmp_path / 'nowhere'}")
    one = _by_class(tmp_path / "one")
    for path in (one / "1-hateful").iterdir():
        path.rename(one / "0-benign" / path.name)
    (one / "1-hateful").rmdir()
    with pytest.raises(DataError, match=r"one class \('0-benign'\)"):
        load_dataset(f"folder:{one}", require_captions=False)


def test_a_file_name_that_differs_only_in_case_is_named(tmp_path):
    _picture(tmp_path / "99.JPG", MEMES[0])
    _picture(tmp_path / "98.png", MEMES[3])
    (tmp_path / "memes.csv").write_text("id,image,text,label\n99,99.jpg,a caption,1\n98,98.png,another,0\n")
    with pytest.raises(DataError, match=r"image file not found: .*99\.jpg \(there is .*99\.JPG: file names are "
                                        r"case-sensitive here"):
        load_dataset(str(tmp_path / "memes.csv"))


def test_a_run_on_a_folder_judges_its_memes(tmp_path, pytester):
    folder = tmp_path / "memes"
    for meme in MEMES:
        _picture(folder / f"{meme.id}.png", meme)
    (folder / "metadata.csv").write_text("file_name,text,label\n" + "".join(
        f"{m.id}.png,{m.text},{m.labels['hate']}\n" for m in MEMES))
    report = tmp_path / "report.json"
    result = pytester.runpytest_inprocess("--memerobust-model=demo", f"--memerobust-data={folder}",
                                          "--memerobust-task=label", "--memerobust-bootstrap=20",
                                          "--memerobust-workers=1", "-k", "clean or typos-1", "-p", "no:cacheprovider",
                                          f"--memerobust-report={report}")
    assert result.ret in (0, 1)
    groups = json.loads(report.read_text())["groups"]
    assert {g["dataset"] for g in groups} == {str(folder)}
    assert {g["clean"]["n"] for g in groups} == {6}
