"""Typographic edits on the text a picture really shows: erased and re-drawn in its own boxes, covered box by box,
and counter-text typed clear of it; text boxes from the renderer, the dataset or an OCR reader."""
import numpy as np
import pytest
import torch

from pytest_memerobust.data.meme import Dataset, Meme
from pytest_memerobust.data.render import draw_meme
from pytest_memerobust.data.text_boxes import TEXT_BOXES, TextBox
from pytest_memerobust.engine import Condition, Engine, Readers
from pytest_memerobust.perturb import get
from pytest_memerobust.perturb.typography import COUNTER_PHRASES, _share_words, box_colours, erase_text
from pytest_memerobust.run.accounting import run_notes

from test_engine import CountingSplit

CAPTION = "nobody wants drag queens near our children"
SIZE = 320


@pytest.fixture(scope="module")
def meme():
    picture, boxes = draw_meme(CAPTION, SIZE, seed=3)
    background, no_boxes = draw_meme("", SIZE, seed=3)  # the same picture without its text
    assert no_boxes == ()
    return picture, boxes, background


def _inside(boxes, shape) -> np.ndarray:
    mask = np.zeros(shape[:2], bool)
    for box in boxes:
        left, top, right, bottom = box.bounds
        mask[max(0, top) : bottom, max(0, left) : right] = True
    return mask


def _apply(name, picture, boxes, severity=None, caption=None):
    p = get(name)
    return p.apply([picture], ["m1"], severity, 0, captions=None if caption is None else [caption],
                   text_boxes=[boxes])[0]


def test_the_renderer_says_where_it_drew_each_line(meme):
    picture, boxes, background = meme
    assert " ".join(b.text for b in boxes) == CAPTION.upper()
    changed = np.abs(picture.astype(int) - background.astype(int)).sum(2) > 60
    inside = _inside(boxes, picture.shape)
    assert changed[inside].mean() > 0.2  # the boxes hold the ink...
    assert changed[~inside].sum() == 0  # ...all of it


def test_box_colours_measure_white_outlined_text_over_the_picture(meme):
    picture, boxes, _ = meme
    x = torch.from_numpy(picture.copy()).permute(2, 0, 1)
    for box in boxes:
        background, ink, outline = box_colours(x, box, [b for b in boxes if b is not box])
        assert ink.min() > 200 and outline is not None and outline.max() < 60  # white capitals, outlined in black
        assert (background - ink).norm() > 40


def test_erasing_restores_the_background_under_the_text(meme):
    picture, boxes, background = meme
    erased = erase_text(torch.from_numpy(picture.copy()).permute(2, 0, 1), boxes).permute(1, 2, 0).numpy()
    inside = _inside(boxes, picture.shape)
    before = np.abs(picture.astype(int) - background.astype(int))[inside].mean()
    after = np.abs(erased.astype(int) - background.astype(int))[inside].mean()
    assert before > 40 and after < 12, (before, after)
    far = ~_inside([_grown(b, 0.4) for b in boxes], picture.shape)
    assert np.array_equal(erased[far], picture[far])  # only the text's own surroundings are touched


def test_rendered_caption_replaces_the_text_in_its_boxes_not_in_a_new_band(meme):
    picture, boxes, background = meme
    same = _apply("rendered_caption", picture, boxes, caption=CAPTION)
    other = _apply("rendered_caption", picture, boxes, caption="n0b0dy w4nts drag qu33ns near 0ur children")
    far = ~_inside([_grown(b, 0.5) for b in boxes], picture.shape)
    # away from the boxes the picture is untouched: no second copy of the caption anywhere
    assert np.abs(other.astype(int) - picture.astype(int))[far].max() <= 2
    # the same words come back in about the same place, size and colours (compared blurred: glyph edges a pixel
    # apart are not what matters)
    redraw, erased = _blurred_difference(same, picture), _blurred_difference(background, picture)
    assert redraw < erased / 2, (redraw, erased)
    assert not np.array_equal(other, same)


def _blurred_difference(a: np.ndarray, b: np.ndarray) -> float:
    def blurred(x):
        return torch.nn.functional.avg_pool2d(torch.from_numpy(x.copy()).permute(2, 0, 1).float()[None], 8)

    return float((blurred(a) - blurred(b)).abs().mean())


def test_without_text_boxes_the_caption_goes_into_a_band_at_the_bottom(meme):
    picture, _, _ = meme
    out = _apply("rendered_caption", picture, None, caption="hello there")
    bottom = out[-SIZE // 20 :]
    assert (bottom == 255).all(axis=2).mean() > 0.5 and (bottom.sum(2) < 200).any()
    assert np.array_equal(out[: SIZE // 2], picture[: SIZE // 2])


def test_caption_cover_covers_every_box_with_one_colour(meme):
    picture, boxes, _ = meme
    for severity in (1, 5):
        out = _apply("caption_cover", picture, boxes, severity)
        inside = _inside(boxes, picture.shape)
        colours = np.unique(out[inside].reshape(-1, 3), axis=0)
        assert len(colours) == 1
        assert np.array_equal(out[~_inside([_grown(b, 0.7) for b in boxes], picture.shape)],
                              picture[~_inside([_grown(b, 0.7) for b in boxes], picture.shape)])
    small = (_apply("caption_cover", picture, boxes, 1) != picture).any(2).sum()
    large = (_apply("caption_cover", picture, boxes, 5) != picture).any(2).sum()
    assert large > small


def _grown(box: TextBox, pad: float) -> TextBox:
    left, top, right, bottom = box.bounds
    p = pad * box.height
    return TextBox.from_rect(left - p, top - p, right + p, bottom + p, box.text)


def test_counter_text_types_phrases_clear_of_the_caption(meme):
    picture, boxes, _ = meme
    inside = _inside(boxes, picture.shape)
    areas = []
    for severity in (1, 3, 5):
        out = _apply("counter_text", picture, boxes, severity)
        assert np.array_equal(out, _apply("counter_text", picture, boxes, severity))  # deterministic
        changed = (out != picture).any(2)
        assert changed[inside].mean() < 0.02 and changed.mean() > 0.005
        areas.append(changed.sum())
    assert areas[0] < areas[1] < areas[2]


def test_caption_words_are_shared_over_the_boxes_in_order():
    boxes = [TextBox.from_rect(0, 0, 100, 10, "NOBODY WANTS"), TextBox.from_rect(0, 12, 100, 22, "DRAG QUEENS NEAR"),
             TextBox.from_rect(0, 40, 100, 50, "OUR KIDS")]
    lines = _share_words("n0body wants drag queens n3ar our kids", boxes)
    assert lines == ["n0body wants", "drag queens n3ar", "our kids"]
    assert _share_words("", boxes) == ["", "", ""]
    assert " ".join(_share_words("one two", boxes)).split() == ["one", "two"]


def test_demo_memes_carry_their_caption_boxes_and_the_engine_hands_them_on():
    from pytest_memerobust.data import demo_dataset

    data = demo_dataset("test")
    data = Dataset(data.name, list(data.memes[:3]), data.classes)
    for m in data.memes:
        assert m.text.startswith(" ".join(b.text for b in m.meta[TEXT_BOXES]))  # two lines at most are drawn
    engine = Engine(CountingSplit(), data)
    condition = Condition(text="typos", text_severity=5, image="rendered_caption")
    engine.predict(condition)
    shown = engine.picture(condition, 0)
    band = shown[-22:]
    assert engine.boxless == {}
    assert not np.array_equal(band, data.memes[0].image[-22:])  # the caption in the band is the perturbed one
    assert np.array_equal(shown[:-22], data.memes[0].image[:-22])  # and nowhere else


class BoxReader:
    """Finds one text box across the bottom fifth of any picture, counting its calls."""

    name = "box-reader"

    def __init__(self):
        self.calls = 0

    def read_boxes(self, picture):
        self.calls += 1
        h, w = picture.shape[1:]
        return (TextBox.from_rect(0, h * 0.8, w, h, "SOME TEXT"),)

    def read(self, picture):
        return "some text"


def _pictures_without_boxes(n=3):
    memes = [Meme(f"m{i}", "a caption", {"hate": i % 2}, image_array=np.full((40, 40, 3), 90 + 40 * i, np.uint8))
             for i in range(n)]
    return Dataset("plain", memes, {"hate": ["non-hateful", "hateful"]})


def test_the_engine_asks_its_text_reader_once_per_picture_and_notes_when_it_has_none():
    reader = BoxReader()
    engine = Engine(CountingSplit(), _pictures_without_boxes(), readers=Readers(text_reader=reader))
    engine.plan([Condition(image="caption_cover", image_severity=1)])
    assert engine._plan == []  # the reader runs in the calling thread only
    engine.predict(Condition(image="caption_cover", image_severity=1))
    engine.predict(Condition(image="caption_cover", image_severity=5))
    assert reader.calls == 3 and engine.boxless == {}
    blind = Engine(CountingSplit(), _pictures_without_boxes())
    blind.predict(Condition(image="counter_text", image_severity=2))
    assert blind.boxless == {"counter_text": {0, 1, 2}}


def test_a_run_notes_the_edits_that_had_no_text_boxes(monkeypatch):
    from pytest_memerobust.data import reading
    from pytest_memerobust.run.options import Options
    from pytest_memerobust.run.session import RobustnessSession

    monkeypatch.setattr(reading, "load_dataset", lambda spec, **options: _pictures_without_boxes())
    session = RobustnessSession(Options(models=("demo",)))
    session.evaluate("demo", "image=caption_cover@2", data="plain-spec")
    assert any("plain-spec: caption_cover met 3 of 3 pictures whose text boxes are unknown (--memerobust-ocr"
               in note for note in run_notes(session))


rapidocr = pytest.importorskip("rapidocr_onnxruntime", reason="the OCR backend is in the dev and ocr extras")


@pytest.fixture(scope="module")
def ocr(tmp_path_factory):
    from pytest_memerobust.data.ocr import ocr_backend

    return ocr_backend("rapidocr", tmp_path_factory.mktemp("cache"))


def _cer(read: str, truth: str) -> float:
    from pytest_memerobust.perturb.distance import levenshtein

    return levenshtein(read.upper(), truth.upper()) / len(truth)


def test_ocr_finds_the_caption_boxes_where_the_renderer_drew_them(meme, ocr):
    picture, boxes, _ = meme
    found = ocr.read_boxes(picture)
    assert _cer(" ".join(b.text for b in found), CAPTION) < 0.1
    drawn = _inside(boxes, picture.shape)
    for box in found:
        left, top, right, bottom = box.bounds
        assert drawn[(top + bottom) // 2, (left + right) // 2]  # each box found sits on drawn text


def test_ocr_reads_the_re_rendered_caption_once_and_the_counter_text(meme, ocr):
    picture, boxes, _ = meme
    edited = "nobody wants drag kings near our children"
    shown = ocr.read(_apply("rendered_caption", picture, ocr.read_boxes(picture), caption=edited))
    assert _cer(shown, edited) < 0.15, shown
    countered = ocr.read(_apply("counter_text", picture, boxes, 3)).lower()
    assert any(phrase in countered for phrase in COUNTER_PHRASES), countered


def test_a_long_caption_is_drawn_smaller_and_every_box_stays_on_the_picture():
    caption = " ".join(["pride"] * 60)
    picture, boxes = draw_meme(caption, 256, seed=1)
    assert " ".join(b.text for b in boxes) == caption.upper()
    assert all(0 <= b.bounds[1] and b.bounds[3] <= 256 + 2 for b in boxes)
    tops = [b for b in boxes if b.bounds[1] < 128]
    assert tops and max(b.bounds[3] for b in tops) < min(b.bounds[1] for b in boxes if b not in tops)


def test_boxes_off_the_picture_are_left_out_and_none_left_means_the_band(meme):
    picture, boxes, _ = meme
    stale = (TextBox.from_rect(400, 400, 500, 430, "GONE"), TextBox.from_rect(-50, -40, -10, -5, "GONE"))
    assert np.array_equal(_apply("rendered_caption", picture, stale, caption="hi"),
                          _apply("rendered_caption", picture, None, caption="hi"))
    mixed = _apply("rendered_caption", picture, (*boxes, *stale), caption=CAPTION)
    assert np.array_equal(mixed, _apply("rendered_caption", picture, boxes, caption=CAPTION))
    with pytest.raises(ValueError, match=r"lies outside the 320 x 320 picture"):
        box_colours(torch.from_numpy(picture.copy()).permute(2, 0, 1), stale[0])
