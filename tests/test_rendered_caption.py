"""The re-rendered caption looks like the meme's own: a bold face for bold text, one font size a caption block, no
ink left where the old caption was (a word its boxes missed included), and a control condition that re-renders the
clean caption beside every re-typed one in the built-in suites."""
from pathlib import Path

import matplotlib
import numpy as np
import pytest
import torch
from PIL import ImageFont

from pytest_memerobust.data.pictures import as_picture, to_array
from pytest_memerobust.data.render import draw_meme, draw_meme_text, draw_outlined_lines, meme_font
from pytest_memerobust.data.text_boxes import TextBox
from pytest_memerobust.perturb import get, typography
from pytest_memerobust.perturb.typography import (PILLOW_DEFAULT, _stem, block_face, box_colours, caption_faces,
                                                  caption_font, caption_font_name, erase_text, measure_blocks,
                                                  render_caption)
from pytest_memerobust.run.suite import builtin_suite_paths, load_suite

CAPTION = "nobody wants drag queens near our children"
DEJAVU_BOLD = str(Path(matplotlib.get_data_path()) / "fonts" / "ttf" / "DejaVuSans-Bold.ttf")


def bold(size):
    return ImageFont.truetype(DEJAVU_BOLD, max(6, int(size)))


@pytest.fixture(scope="module")
def bold_meme():
    """A 384 x 320 meme in bold outlined capitals over a busy background, with where its lines were drawn."""
    background, _ = draw_meme("", 384, seed=5)
    picture, boxes = draw_meme_text(background[:320], CAPTION, bold)
    return picture, boxes, background[:320]


def _styles(x, boxes):
    return [box_colours(x, box, [other for other in boxes if other is not box]) for box in boxes]


def _white_ringed_by_black(picture: np.ndarray) -> np.ndarray:
    """Near-white pixels with a near-black one within 3 pixels: outlined glyphs' ink."""
    x = torch.from_numpy(picture.astype(np.int16))
    white = (x.min(dim=2).values > 200).float()
    black = (x.max(dim=2).values < 60).float()
    near_black = torch.nn.functional.max_pool2d(black[None, None], 7, stride=1, padding=3)[0, 0] > 0
    return ((white > 0) & near_black).numpy()


def test_the_caption_font_is_bold_and_named():
    faces = caption_faces()
    assert faces and all(Path(face).exists() for face in faces)  # matplotlib (a dependency) ships DejaVu Sans Bold
    name = caption_font_name()
    assert all(face in name for face in faces) and "Bold" in name and PILLOW_DEFAULT in name

    def stroke_and_share(font):
        from PIL import Image, ImageDraw

        canvas = Image.new("L", (600, 80), 0)
        ImageDraw.Draw(canvas).text((4, 4), "NOBODY WANTS", font=font, fill=255)
        mask = np.asarray(canvas) >= 128
        rows, columns = mask.any(axis=1).nonzero()[0], mask.any(axis=0).nonzero()[0]
        box = mask[rows[0] : rows[-1] + 1, columns[0] : columns[-1] + 1]
        return _stem(torch.from_numpy(mask)), box.mean()

    old_stroke, old_share = stroke_and_share(meme_font(40))
    for face in faces:
        stroke, share = stroke_and_share(caption_font(40, face))
        assert stroke > 1.4 * old_stroke and share > 1.2 * old_share, (face, stroke, old_stroke, share, old_share)


def test_a_caption_in_an_impact_like_face_comes_back_in_anton():
    """Most memes are set in Impact; the packaged Anton (fontpkg-anton, a dependency) is its kind, and the nearest in
    width: a caption drawn in Anton comes back in Anton, where DejaVu Sans Condensed Bold drew it before."""
    anton = typography._packaged_anton()
    assert anton is not None and anton in caption_faces() and "Anton Regular" in caption_font_name()
    background, _ = draw_meme("", 384, seed=5)
    picture, boxes = draw_meme_text(background[:320], CAPTION,
                                    lambda size: ImageFont.truetype(anton, max(6, int(size))))
    x = as_picture(picture)
    assert [block_face(x, block) for block in measure_blocks(x, boxes, _styles(x, boxes))] == [anton, anton]


def test_bold_outlined_text_comes_back_bold_and_thin_band_text_in_pillows_font(bold_meme):
    picture, boxes, _ = bold_meme
    x = as_picture(picture)
    for block in measure_blocks(x, boxes, _styles(x, boxes)):
        assert block.outline is not None and block.outline.max() < 60 and block.ink.min() > 200
        assert block_face(x, block) in caption_faces()
        assert 2 <= block.stroke <= 4  # drawn 2 pixels wide (size 29 / 15), anti-aliased

    from pytest_memerobust.data import demo_dataset

    meme = demo_dataset("test").memes[0]
    demo = as_picture(meme.image)
    boxes = meme.meta["text_boxes"]
    assert [block_face(demo, block) for block in measure_blocks(demo, boxes, _styles(demo, boxes))] == [PILLOW_DEFAULT]


def test_the_redrawn_caption_is_as_heavy_as_the_old_one(bold_meme):
    picture, boxes, _ = bold_meme
    out = to_array(render_caption(as_picture(picture), CAPTION, boxes))
    top = slice(0, boxes[1].bounds[3] + 4)

    def stroke(p):
        return _stem(torch.from_numpy(p[top].min(axis=2) > 200))

    assert abs(stroke(out) / stroke(picture) - 1) < 0.2, (stroke(out), stroke(picture))


def test_one_font_size_per_caption_block(bold_meme, monkeypatch):
    from PIL import Image, ImageDraw

    _, _, background = bold_meme
    img = Image.fromarray(background.copy())
    draw = ImageDraw.Draw(img)
    white, black = (255, 255, 255), (0, 0, 0)
    top = draw_outlined_lines(draw, ["NOBODY WANTS", "WE"], 192, 12, bold(29), white, black, 2, 33)
    bottom = draw_outlined_lines(draw, ["NEAR OUR CHILDREN"], 192, 270, bold(29), white, black, 2, 33)
    picture = np.asarray(img)
    # a reader's boxes: the one-word line read with a looser box than the long one
    left, upper, right, lower = top[1].bounds
    boxes = (top[0], TextBox.from_rect(left - 6, upper - 4, right + 6, lower + 5, "WE"), *bottom)
    drawn = []
    draw_line = typography._draw_line

    def spy(out, text, at, font, *args):
        drawn.append((text, font.size, at[1]))
        return draw_line(out, text, at, font, *args)

    monkeypatch.setattr(typography, "_draw_line", spy)
    render_caption(as_picture(picture), "n0body wants we near our chi1dren", boxes)
    assert [text for text, _, _ in drawn] == ["N0BODY WANTS", "WE", "NEAR OUR CHI1DREN"]
    sizes = [size for _, size, _ in drawn]
    assert sizes[0] == sizes[1], drawn  # the one-word line is not blown up to its box
    assert all(abs(size - 29) <= 2 for size in sizes), drawn  # the size the caption was drawn at
    assert drawn[1][2] - drawn[0][2] == pytest.approx(33, abs=2)  # on the old lines' baselines, 33 px apart


def test_no_ink_is_left_where_a_box_missed_a_word(bold_meme):
    picture, boxes, background = bold_meme
    first = boxes[0]  # "NOBODY WANTS": its box cut to leave "WANTS" out, as when OCR misses a word
    left, top, right, bottom = first.bounds
    cut = left + (right - left) * 0.55
    missed = (TextBox.from_rect(left, top, cut, bottom, "NOBODY"), *boxes[1:])
    erased = to_array(erase_text(as_picture(picture), missed))
    word = np.zeros(picture.shape[:2], bool)
    word[top:bottom, round(cut) + 4 : right] = True
    ink_before = _white_ringed_by_black(picture)[word].sum()
    assert ink_before > 200
    assert _white_ringed_by_black(erased)[word].sum() < 0.02 * ink_before
    # and the ground comes back: near the background the text was drawn over
    assert np.abs(erased.astype(int) - background.astype(int))[word].mean() < 20
    # nothing far from the caption's lines is touched
    rows = np.zeros(picture.shape[0], bool)
    for box in boxes:
        rows[max(0, box.bounds[1] - 2 * box.height) : box.bounds[3] + 2 * box.height] = True
    assert np.array_equal(erased[~rows], picture[~rows])


def test_rendered_clean_caption_redraws_the_clean_caption(bold_meme):
    picture, boxes, _ = bold_meme
    control, attacked = get("rendered_clean_caption"), get("rendered_caption")
    assert control.traits.caption_source == "clean" and attacked.traits.caption_source == "condition"
    assert control.traits.reads_text_boxes and control.parameters.severities == attacked.parameters.severities
    clean = control.apply([picture], ["m"], None, 0, captions=[CAPTION], text_boxes=[boxes])[0]
    assert np.array_equal(clean, to_array(render_caption(as_picture(picture), CAPTION, boxes)))
    typo = attacked.apply([picture], ["m"], None, 0, captions=["n0body wants drag queens near our chi1dren"],
                          text_boxes=[boxes])[0]
    changed = (clean != typo).any(axis=2)
    # the same erase, font and layout: the two differ only where the words do (the first and last lines)
    rows = changed.any(axis=1).nonzero()[0]
    assert changed.any() and not changed[boxes[1].bounds[1] + 2 : boxes[1].bounds[3] - 2].any()
    assert rows.min() >= boxes[0].bounds[1] - 10


def test_every_builtin_suite_runs_the_control_beside_its_re_typed_captions():
    checked = 0
    for path in builtin_suite_paths():
        if path.suffix != ".toml":
            continue
        conditions = load_suite(path).conditions
        re_typed = [c for c in conditions if c.image == "rendered_caption" and c.text]
        if re_typed:
            checked += 1
            assert any(c.image == "rendered_clean_caption" and not c.text and not c.prompt for c in conditions), path
    assert checked >= 2  # meme-edits and imagenet-c


def test_a_caption_band_set_flush_left_stays_flush_left():
    from pytest_memerobust.data import demo_dataset

    for k, meme in enumerate(demo_dataset("test").memes[:4]):
        boxes = meme.meta["text_boxes"]
        out = to_array(render_caption(as_picture(meme.image), "a shorter caption than before", boxes))
        for box in boxes:
            left, top, right, bottom = box.bounds
            before = (meme.image[top:bottom].max(axis=2) < 100).any(axis=0).nonzero()[0]
            after = (out[top:bottom].max(axis=2) < 100).any(axis=0).nonzero()[0]
            if len(after):  # a line may get no words of a shorter caption
                assert abs(int(after[0]) - int(before[0])) <= 2, (k, box.text)


def test_an_outlined_caption_over_a_dark_busy_picture_comes_back_bold_and_no_wider():
    """Anton's white capitals outlined in black over dark ground with bright spots (skimage's coins): the outline is
    found past the glyphs' anti-aliased edge, so the caption comes back in Anton, outlined, where it came back in
    Pillow's regular font, wider than the picture; and no re-rendered line is much wider than the line it replaces."""
    skimage_data = pytest.importorskip("skimage.data", reason="scikit-image comes with the dev extra")
    from PIL import Image

    anton = typography._packaged_anton()
    coins = Image.fromarray(np.repeat(skimage_data.coins()[..., None], 3, axis=2)).resize((420, 331), Image.LANCZOS)
    ground = np.asarray(coins)
    caption = "keep your change we want our country back"
    picture, boxes = draw_meme_text(ground, caption, lambda size: ImageFont.truetype(anton, max(6, int(size))))
    x = as_picture(picture)
    blocks = measure_blocks(x, boxes, _styles(x, boxes))
    assert all(block.outline is not None and float(block.outline.max()) < 60 for block in blocks)
    assert [block_face(x, block) for block in blocks] == [anton] * len(blocks)
    for block in blocks:  # a face wider than the meme's (Pillow's regular) is set smaller, as wide as the old line
        size = typography._block_size(block, [line.text for line in block.lines], PILLOW_DEFAULT, 420)
        for line, (left, _, right, _) in zip(block.lines, block.glyphs):
            _, text_left, _, text_right, _ = typography._rendered(line.text, size, PILLOW_DEFAULT)
            assert text_right - text_left <= typography.WIDTH_SLACK * (right - left) + 1
    out = to_array(render_caption(x, caption, boxes))  # the same words: as wide as they were
    for block in blocks:
        for left, top, right, bottom in block.glyphs:
            band = out[top:bottom].astype(np.int16)  # the caption's white and the black around it
            white = torch.from_numpy(band.min(axis=2) > 240)
            black = torch.from_numpy(band.max(axis=2) < 60).float()
            ringed = white & (torch.nn.functional.max_pool2d(black[None, None], 7, stride=1, padding=3)[0, 0] > 0)
            columns = np.flatnonzero(ringed.numpy().any(axis=0))
            assert 0.85 * (right - left) <= columns.max() - columns.min() <= 1.15 * (right - left)
