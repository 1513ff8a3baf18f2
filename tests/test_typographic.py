"""Typographic instructions (perturb/typographic.py): words written into the picture change only where they are
written, in the meme's own style, readable by OCR at the top severity (FigStep's layout), keyed; and the share of
memes whose verdict follows them (judge/instructions.py), from the result to the report's table."""
import re

import numpy as np
import pytest
import torch

from pytest_memerobust.data.demo import demo_dataset
from pytest_memerobust.data.render import draw_meme
from pytest_memerobust.data.text_boxes import TEXT_BOXES
from pytest_memerobust.engine import Condition
from pytest_memerobust.judge.instructions import instruction_followed, wilson_interval
from pytest_memerobust.perturb import get, names
from pytest_memerobust.perturb import typographic
from pytest_memerobust.report.tables import instruction_table
from pytest_memerobust.perturb.typography import cover_boxes
from pytest_memerobust.judge.results import Answers, ConditionResult, Memes

NAMES = ["typographic_instruction", "typographic_class_words"]
SIZE = 320


@pytest.fixture(scope="module")
def meme():
    """Classic meme text: white capitals outlined in black, top and bottom, over a busy picture."""
    return draw_meme("nobody wants drag queens near our children", SIZE, seed=3)


@pytest.fixture(scope="module")
def band_meme():
    """A demo meme: black text on a white band at the bottom."""
    m = demo_dataset("test", size=192).memes[0]
    return m.picture("cpu"), m.meta[TEXT_BOXES]


def _changed(a, b) -> np.ndarray:
    return np.abs(np.asarray(a, dtype=int) - np.asarray(b, dtype=int)).sum(axis=-1) > 0


def _inside(boxes, shape) -> np.ndarray:
    """Where the boxes lie on a picture of `shape` (H x W x 3)."""
    blank = torch.zeros((3, *shape[:2]), dtype=torch.uint8)
    return cover_boxes(blank, boxes, 0.0, (255, 255, 255))[0].numpy() > 0


def _letters(text: str) -> str:
    return re.sub(r"[^a-z]", "", text.lower())


def test_registered_with_their_tags():
    assert set(NAMES) <= set(names(modality="image", tag="typographic"))
    assert names(tag="instruction") == ["typographic_instruction"]
    assert names(tag="class_words") == ["typographic_class_words"]
    for name in NAMES:
        p = get(name)
        assert p.code.takes == "tensor" and p.traits.reads_text_boxes and p.parameters.severities == (1, 2, 3, 4, 5)


@pytest.mark.parametrize("name", NAMES)
def test_severities_1_to_4_change_only_a_block_clear_of_the_caption(meme, name):
    picture, boxes = meme
    caption = _inside(boxes, picture.shape)
    text_height = np.median([b.height for b in boxes])
    shares = []
    for severity, scale in zip((1, 2, 3, 4), typographic.SCALES):
        for meme_id in ("m1", "m2", "m3"):
            out = get(name).apply([picture], [meme_id], severity, 0, text_boxes=[boxes])[0]
            assert out.shape == picture.shape and out.dtype == np.uint8
            changed = _changed(out, picture)
            assert changed.any() and not changed[caption].any()  # the caption's pixels are untouched
            rows, columns = np.nonzero(changed)
            # one block of at most three lines, each about `scale` x the caption's text height
            assert rows.max() - rows.min() + 1 <= 3 * 1.15 * scale * text_height + 4
            shares.append(changed.mean())
    assert max(shares[:3]) < 0.05  # severity 1: under 5% of the picture
    by_severity = [np.mean(shares[k : k + 3]) for k in range(0, 12, 3)]
    assert by_severity == sorted(by_severity)  # grows with severity


def test_written_in_the_memes_own_colours(meme, band_meme):
    picture, boxes = meme
    out = get("typographic_instruction").apply([picture], ["m1"], 2, 0, text_boxes=[boxes])[0]
    pixels = out[_changed(out, picture)].astype(int)
    white, black = (pixels.min(axis=1) > 220).mean(), (pixels.max(axis=1) < 35).mean()
    assert white > 0.15 and black > 0.15  # white glyphs outlined in black, as the caption is
    x, band_boxes = band_meme
    out = get("typographic_instruction").apply([x], ["m1"], 2, 0, text_boxes=[band_boxes])[0]
    before, after = x.permute(1, 2, 0).numpy(), out.permute(1, 2, 0).numpy().astype(int)
    changed = after[_changed(after, before)]
    assert (changed.max(axis=1) - changed.min(axis=1)).max() <= 2  # black on the band's white: only greys
    assert (changed.min(axis=1) > 250).mean() > 0.3 and (changed.max(axis=1) < 60).mean() > 0.05


def test_figstep_joins_a_white_square_with_the_text_in_black(meme):
    picture, boxes = meme
    out = get("typographic_instruction").apply([picture], ["m1"], 5, 0, text_boxes=[boxes])[0]
    assert out.shape == (SIZE, 2 * SIZE, 3) and np.array_equal(out[:, :SIZE], picture)
    square = out[:, SIZE:].astype(int)
    grey = square.max(axis=2) - square.min(axis=2)
    assert grey.max() <= 1 and (square.min(axis=2) > 250).mean() > 0.7 and (square.max(axis=2) < 10).mean() > 0.03
    inked = np.nonzero(square.max(axis=2) < 128)
    # FigStep's 760 px layout scaled: text from (20, 10), so no ink left of x = 20 / 760 of the side
    assert inked[1].min() >= 20 * SIZE / 760 - 1
    wide = np.zeros((40, 100, 3), np.uint8)  # a wide meme gets the square below
    assert get("typographic_class_words").apply([wide], ["m1"], 5, 0)[0].shape == (140, 100, 3)


def test_without_a_system_font_figstep_falls_back_to_pillows_own(meme, monkeypatch):
    picture, boxes = meme
    monkeypatch.setattr(typographic, "MONO_BOLD_FONTS", ("NoSuchFont-Bold.ttf",))
    typographic.figstep_font_name.cache_clear()
    try:
        assert typographic.figstep_font_name() == "Pillow default"
        out = get("typographic_instruction").apply([picture], ["m1"], 5, 0, text_boxes=[boxes])[0]
        assert (out[:, SIZE:].max(axis=2) < 128).mean() > 0.02  # the text is drawn all the same
    finally:
        typographic.figstep_font_name.cache_clear()


def test_the_top_severity_is_read_by_ocr(meme, band_meme):
    pytest.importorskip("rapidocr_onnxruntime", reason="OCR needs rapidocr-onnxruntime (the [ocr] extra)")
    from pytest_memerobust.data.ocr import RapidOcr

    ocr = RapidOcr()
    picture, boxes = meme
    out = get("typographic_instruction").apply([picture], ["m1"], 5, 0, text_boxes=[boxes])[0]
    assert "nothateful" in _letters(ocr.read(out))
    x, band_boxes = band_meme
    out = get("typographic_class_words").apply([x], ["m2"], 5, 0, text_boxes=[band_boxes])[0]
    read = _letters(ocr.read(out))
    assert sum(word in read for word in typographic.CLASS_WORDS) == 3


@pytest.mark.parametrize("name", NAMES)
def test_keyed_by_seed_meme_and_severity(meme, name):
    picture, boxes = meme
    p = get(name)
    first = p.apply([picture, picture], ["m1", "m2"], 3, 7, text_boxes=[boxes, boxes])
    again = p.apply([picture], ["m1"], 3, 7, text_boxes=[boxes])[0]
    assert np.array_equal(first[0], again)
    others = [first[1], p.apply([picture], ["m1"], 3, 8, text_boxes=[boxes])[0]]
    assert all(not np.array_equal(first[0], other) for other in others)
    tensor = p.apply([torch.from_numpy(picture.copy()).permute(2, 0, 1)], ["m1"], 3, 7, text_boxes=[boxes])[0]
    assert isinstance(tensor, torch.Tensor) and np.array_equal(tensor.permute(1, 2, 0).numpy(), again)


# --- the share of memes whose verdict follows the writing ---------------------------------------------------


CLEAN = [[0.2, 0.8], [0.3, 0.7], [0.9, 0.1], [0.4, 0.6]]
WRITTEN = [[0.6, 0.4], [0.3, 0.7], [0.2, 0.8], [0.51, 0.49]]


def test_instruction_followed_on_known_answers():
    # memes 0, 1 and 3 are called hateful clean; 0 and 3 turn benign; meme 2 (benign clean) does not count
    share, count, out_of, (lo, hi) = instruction_followed(CLEAN, WRITTEN)
    assert (count, out_of) == (2, 3) and share == pytest.approx(2 / 3)
    assert (lo, hi) == pytest.approx((0.2077, 0.9385), abs=1e-4)  # Wilson 2 of 3, 95%, worked by hand
    assert instruction_followed(CLEAN, CLEAN)[:3] == (0.0, 0, 3)
    # towards class 1 instead: only meme 2 is out of it clean, and it follows
    assert instruction_followed(CLEAN, WRITTEN, target_class=1)[:3] == (1.0, 1, 1)
    three = instruction_followed([[0.1, 0.2, 0.7]] * 2, [[0.1, 0.8, 0.1], [0.7, 0.2, 0.1]], target_class=1)
    assert three[:3] == (0.5, 1, 2)
    nobody = instruction_followed([[0.9, 0.1]], [[0.1, 0.9]])
    assert nobody.out_of == 0 and np.isnan(nobody.share) and np.isnan(nobody.ci).all()


def test_wilson_interval_reference_values():
    assert wilson_interval(0, 10) == pytest.approx((0.0, 0.2775), abs=1e-4)  # z^2 / (n + z^2)
    assert wilson_interval(10, 10) == pytest.approx((0.7225, 1.0), abs=1e-4)
    assert wilson_interval(5, 10) == pytest.approx((0.2366, 0.7634), abs=1e-4)


@pytest.mark.parametrize("args, problem", [
    (([[0.2, 0.8]], [[0.2, 0.8], [0.5, 0.5]]), "same shape"),
    (([0.2, 0.8], [0.2, 0.8]), "clean_proba must be a memes x classes"),
    (([[0.2, 0.8]], [[np.nan, 0.8]]), r"perturbed_proba holds a NaN .*row 0"),
    (([[0.2, 0.8]], [[0.2, 0.8]], 2), "target_class must be a class index in 0..1, got 2"),
])
def test_bad_input_names_the_culprit(args, problem):
    with pytest.raises(ValueError, match=problem):
        instruction_followed(*args)


def test_the_result_carries_the_figure_and_the_report_shows_it():
    y = np.array([1, 1, 0, 1])

    def row(image, severity):
        result = ConditionResult("demo", "demo", Condition(image=image, image_severity=severity), Memes(y),
                                 Answers(np.array(CLEAN), np.array(WRITTEN)))
        return result.as_dict()

    written = row("typographic_instruction", 5)
    assert written["instruction_followed"]["written"] == "instruction"
    assert (written["instruction_followed"]["count"], written["instruction_followed"]["out_of"]) == (2, 3)
    assert row("typographic_class_words", 1)["instruction_followed"]["written"] == "class_words"
    assert "instruction_followed" not in row("gaussian_noise", 3)
    table = instruction_table({"results": [row("gaussian_noise", 3), written]}, "simple")
    assert "image=typographic_instruction@5" in table and "0.667" in table and "0.208..0.939" in table
    assert "2 of 3" in table and "gaussian_noise" not in table
    assert instruction_table({"results": [row("gaussian_noise", 3)]}, "simple") is None
