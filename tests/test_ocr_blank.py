"""A meme whose picture OCR reads as nothing (issue 62): that meme's abstention, with the reason in the run's notes,
not an error of every caption case ('caption is empty (or only whitespace): nothing to perturb')."""
import csv
import json
from pathlib import Path

import numpy as np
import pytest

from pytest_memerobust.data.ocr import fill_missing_captions
from pytest_memerobust.engine import Condition, Engine, Readers

from test_engine import CountingSplit
from test_ocr import FakeOcr, _dataset

CAPTIONS = ["love wins every time", "", "happy pride month", "go back to the closet"]  # meme 1: a blank picture
NOTE = ("OCR read nothing off the pictures of 1 of 4 memes (m1): with no caption to judge, each is an abstention "
        "under every condition of a detector that reads captions, left out of its metrics (its abstention rate)")


def test_a_caption_ocr_read_as_nothing_is_that_meme_s_abstention_under_every_condition():
    """FakeOcr reads a black picture as nothing: meme 2's caption, filled in by OCR, is empty."""
    data = fill_missing_captions(_dataset(["", "", "", ""], [200, 120, 10, 90]), FakeOcr())
    assert [m.text == "" for m in data.memes] == [False, False, True, False]
    engine = Engine(CountingSplit(), data)
    typos = Condition(text="typos", text_severity=5)
    engine.predict(typos)  # raised before: 'caption is empty (or only whitespace): nothing to perturb'
    assert engine.inputs(*engine.text_side(typos))[2] == ""
    for condition in (Condition(), typos, Condition(image="contrast", image_severity=3)):
        engine.predict(condition)
        assert engine.abstentions[condition.id].tolist() == [False, False, True, False]
    # end to end: the clean picture's reading decides; a perturbed picture read as nothing is what the pipeline sees
    data = _dataset(["one", "two", "three", "four"], [250, 120, 10, 70])
    engine = Engine(CountingSplit(), data, readers=Readers(ocr=FakeOcr()))
    darker = Condition(image="brightness", image_severity=5)
    engine.predict(darker)
    assert engine.abstentions[darker.id].tolist() == [False, False, True, False]
    assert engine.inputs(*engine.text_side(darker))[2] != ""  # the brighter picture reads, its meme still abstains


def _blank_and_captioned(folder: Path) -> Path:
    """Four memes with their captions drawn in, no caption column filled; meme m1's picture is blank."""
    from PIL import Image

    from pytest_memerobust.data.render import draw_meme

    path = folder / "memes.csv"
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["id", "image", "text", "label"])
        for i, caption in enumerate(CAPTIONS):
            picture = draw_meme(caption, size=192, seed=i)[0] if caption else np.full((192, 192, 3), 255, np.uint8)
            Image.fromarray(picture).save(folder / f"m{i}.png")
            writer.writerow([f"m{i}", f"m{i}.png", "", i % 2])
    return path


@pytest.mark.parametrize("reading, cases", [
    ("--memerobust-ocr=rapidocr", "rainbow and (clean or typos-1 or typos-5)"),  # the dataset's captions, read
    ("--memerobust-captions=ocr", "imagenet-c and typos-3+rendered_caption"),  # each condition's, read end to end
])
def test_a_blank_picture_read_by_rapidocr_is_one_abstention_not_every_caption_case_s_error(pytester, reading, cases):
    pytest.importorskip("rapidocr_onnxruntime", reason="the OCR backend is in the dev and ocr extras")
    data = _blank_and_captioned(pytester.path)
    result = pytester.runpytest("--memerobust-model=demo", f"--memerobust-data=csv:{data}", "--memerobust-task=label",
                                reading, "--memerobust-bootstrap=20", "--memerobust-workers=1", "-p",
                                "no:cacheprovider", "--memerobust-report=r.json", "-k", cases)
    out = result.stdout.str()
    assert "raised an error" not in out and "nothing to perturb" not in out, out[-3000:]
    result.stdout.fnmatch_lines([f"memerobust: csv:*memes.csv: {NOTE}"])
    report = json.loads((pytester.path / "r.json").read_text())
    assert not [c for c in report["cases"] if c.get("error")]
    for group in report["groups"]:
        for row in [group["clean"], *group["results"]]:
            assert (row["n"], row["abstention_rate"]) == (3, 0.25), row["condition"]
