"""Scene text kept out of the caption (issue 63): a T-shirt's, a sign's or a watermark's text that OCR reads beside a
meme's outlined caption is told from it (data/ocr.py `scene_text`), noted, left out of the caption's text and never
erased or re-typed; a picture whose text is all in one style (a white band's black text) keeps all of it."""
import os

import matplotlib
import numpy as np
import pytest
from PIL import Image, ImageDraw, ImageFont

from pytest_memerobust.data.ocr import caption_styled, scene_text
from pytest_memerobust.data.pictures import as_picture, to_array
from pytest_memerobust.data.render import draw_meme_text
from pytest_memerobust.data.text_boxes import TextBox, joined_text
from pytest_memerobust.perturb.typography import render_caption

BOLD = os.path.join(matplotlib.get_data_path(), "fonts/ttf/DejaVuSans-Bold.ttf")


def _photo(seed: int = 0) -> np.ndarray:
    """A busy 384 px picture: smooth colour blobs, as a photograph's ground."""
    rng = np.random.default_rng(seed)
    small = rng.integers(40, 200, (6, 6, 3)).astype(np.uint8)
    return np.asarray(Image.fromarray(small).resize((384, 384), Image.BICUBIC))


def _sign(picture: np.ndarray, text: str, at=(120, 180), size=22) -> tuple[np.ndarray, TextBox]:
    """Dark text on a light sign drawn onto the picture, and its box as OCR would give it."""
    img = Image.fromarray(picture.copy())
    draw, font = ImageDraw.Draw(img), ImageFont.truetype(BOLD, size)
    x, y = at
    width = draw.textlength(text, font=font)
    draw.rectangle([x - 10, y - 8, x + width + 10, y + size + 12], fill=(236, 232, 226))
    draw.text((x, y), text, font=font, fill=(25, 25, 25))
    return np.asarray(img), TextBox.from_rect(x - 3, y - 2, x + width + 3, y + size + 5, text)


def test_a_sign_beside_an_outlined_caption_is_scene_text_and_stays_out_of_it():
    picture, caption_boxes = draw_meme_text(_photo(), "they said it was only a phase",
                                            lambda size: ImageFont.truetype(BOLD, max(6, int(size))))
    picture, sign = _sign(picture, "HOLY BIBLE")
    assert all(caption_styled(picture, box) for box in caption_boxes) and not caption_styled(picture, sign)
    boxes = scene_text(picture, [*caption_boxes, sign])
    assert [box.scene for box in boxes] == [False] * len(caption_boxes) + [True]
    assert joined_text(boxes) == "THEY SAID IT WAS ONLY A PHASE" and joined_text(boxes, scene=True) == "HOLY BIBLE"
    assert TextBox.from_json(boxes[-1].to_json()) == boxes[-1]
    # re-typing the caption leaves the sign as it was, pixel for pixel
    out = to_array(render_caption(as_picture(picture), "THEY SAID IT WAS ONLY A PAHSE", boxes))
    left, top, right, bottom = sign.bounds
    assert np.array_equal(out[top:bottom, left:right], picture[top:bottom, left:right])


def test_text_all_in_one_style_is_all_caption():
    """A caption band's black text and a sign both lack the outline: no box is in the caption's style, so none is
    told apart (a screenshot's or a band's text is its caption)."""
    picture = _photo(1).copy()
    picture[:60] = 255
    band = TextBox.from_rect(10, 15, 250, 45, "when the coffee kicks in")
    img = Image.fromarray(picture)
    ImageDraw.Draw(img).text((12, 15), band.text, font=ImageFont.truetype(BOLD, 24), fill=(0, 0, 0))
    picture, sign = _sign(np.asarray(img), "OPEN")
    assert not caption_styled(picture, band)
    assert [box.scene for box in scene_text(picture, [band, sign])] == [False, False]


def test_rapidocr_reads_the_caption_and_notes_the_sign():
    pytest.importorskip("rapidocr_onnxruntime", reason="the OCR backend is in the dev and ocr extras")
    pytest.importorskip("symspellpy", reason="its word frequencies put back the spaces OCR lost")
    from dataclasses import replace

    from pytest_memerobust.data.meme import Dataset, Meme
    from pytest_memerobust.data.ocr import SCENE_TEXT, RapidOcr, fill_missing_captions
    from pytest_memerobust.judge.ocr_view import character_error_rate

    picture, _ = draw_meme_text(_photo(2), "nobody wants drag queens near our children",
                                lambda size: ImageFont.truetype(BOLD, max(6, int(size))))
    picture, _ = _sign(picture, "FEMINIST", at=(140, 190), size=20)
    reader = RapidOcr()
    caption = reader.read(picture)  # (the reader's own misreadings aside)
    assert "FEMINIST" not in caption
    assert character_error_rate(caption, "NOBODY WANTS DRAG QUEENS NEAR OUR CHILDREN") < 0.1
    meme = replace(Meme("m", "", {}), image_array=picture)
    read = fill_missing_captions(Dataset("d", [meme], {}, unlabelled=True), reader).memes[0]
    assert read.text == caption and read.meta[SCENE_TEXT] == "FEMINIST"
