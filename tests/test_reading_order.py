"""OCR boxes read in a meme's reading order (data/text_boxes.py) and words the reader ran together split again
(data/words.py), on box layouts like those rapidocr returns for real memes."""
import json
import math

import numpy as np
import pytest

from pytest_memerobust.data.ocr import CACHE_VERSION, Detection, _detection, _read_entry
from pytest_memerobust.data.text_boxes import TextBox, caption_blocks, joined_text, reading_order, text_lines
from pytest_memerobust.data.words import WIDTHS, known_words, segmentations, split_run_together, split_text


def reading_order_before(boxes):
    """The reading order before lines were grouped by overlap, verbatim: it sorts by a key that cannot be compared
    between boxes of different heights."""
    def order(box: TextBox):
        left, top, _, _ = box.bounds
        return (round(top / (box.height / 2)), left)

    return tuple(sorted(boxes, key=order))


def texts(boxes):
    return [b.text for b in boxes]


def rotated(box: TextBox, degrees: float, centre=(256.0, 256.0)) -> TextBox:
    """The box turned `degrees` clockwise about `centre`, as a tilted caption's reading comes back."""
    a = math.radians(degrees)
    cx, cy = centre
    return TextBox(tuple((cx + (x - cx) * math.cos(a) - (y - cy) * math.sin(a),
                          cy + (x - cx) * math.sin(a) + (y - cy) * math.cos(a)) for x, y in box.corners), box.text)


def test_two_lines_of_boxes_of_different_heights_read_line_by_line():
    # "say i'm good at handball / But when i tried out for the team / i didn't make it": the reader cut the second
    # line in two boxes of different heights, and the third line's box is taller still
    boxes = [TextBox.from_rect(60, 20, 450, 50, "say i'm good at handball"),
             TextBox.from_rect(40, 64, 320, 92, "But when i tried out for"),
             TextBox.from_rect(330, 58, 470, 98, "the team"),
             TextBox.from_rect(120, 98, 400, 144, "i didn't make it")]
    assert " ".join(texts(reading_order_before(boxes))) == ("say i'm good at handball the team i didn't make it "
                                                            "But when i tried out for")  # the scrambled one
    assert joined_text(boxes) == "say i'm good at handball But when i tried out for the team i didn't make it"
    assert [texts(line) for line in text_lines(boxes)] == [["say i'm good at handball"],
                                                           ["But when i tried out for", "the team"],
                                                           ["i didn't make it"]]
    assert joined_text(boxes[::-1]) == joined_text(boxes)  # whatever order the reader gave them in


def test_top_and_bottom_captions_are_blocks_that_never_interleave():
    top = [TextBox.from_rect(70, 15, 440, 65, "WHEN YOU FINALLY"), TextBox.from_rect(90, 70, 420, 122, "UNDERSTAND")]
    bottom = [TextBox.from_rect(60, 420, 250, 446, "THE"), TextBox.from_rect(260, 418, 450, 448, "ASSIGNMENT"),
              TextBox.from_rect(150, 452, 360, 480, "AT LAST")]
    blocks = caption_blocks(bottom + top)
    assert [[texts(line) for line in block] for block in blocks] == [
        [["WHEN YOU FINALLY"], ["UNDERSTAND"]], [["THE", "ASSIGNMENT"], ["AT LAST"]]]
    assert joined_text(bottom + top) == "WHEN YOU FINALLY UNDERSTAND THE ASSIGNMENT AT LAST"
    # lines set close together (a gap under their height) stay one block
    assert len(caption_blocks(top)) == 1 and caption_blocks([]) == ()


def test_a_one_word_line_in_a_short_tall_box_keeps_its_place():
    boxes = [TextBox.from_rect(100, 100, 260, 130, "WHEN"), TextBox.from_rect(270, 101, 400, 130, "YOU"),
             TextBox.from_rect(200, 135, 300, 195, "NOPE"),  # one big word: a short, tall box
             TextBox.from_rect(120, 200, 380, 230, "SAID NO ONE")]
    assert texts(reading_order_before(boxes))[0] == "NOPE"  # the old key put the tall box first
    assert texts(reading_order(boxes)) == ["WHEN", "YOU", "NOPE", "SAID NO ONE"]
    assert len(text_lines(boxes)) == 3
    # text twice the size of its neighbours' is a block of its own (one size per block), close as it sits
    assert [[texts(line) for line in block] for block in caption_blocks(boxes)] == [
        [["WHEN", "YOU"]], [["NOPE"]], [["SAID NO ONE"]]]


@pytest.mark.parametrize("degrees", [4, -4])
def test_tilted_boxes_group_along_their_own_line(degrees):
    level = [TextBox.from_rect(40, 200, 240, 236, "THIS IS"), TextBox.from_rect(250, 202, 470, 236, "FINE"),
             TextBox.from_rect(40, 244, 260, 278, "EVERYTHING"), TextBox.from_rect(270, 244, 470, 280, "IS OK")]
    boxes = [rotated(b, degrees) for b in level]
    # the boxes of a line sit 15 px apart in height across the picture, and their bounds are 15 px taller
    assert abs(boxes[0].bounds[1] - boxes[1].bounds[1]) > 10
    assert [texts(line) for line in text_lines(boxes)] == [["THIS IS", "FINE"], ["EVERYTHING", "IS OK"]]
    assert joined_text(boxes[::-1]) == "THIS IS FINE EVERYTHING IS OK"


def _centres(line: str, em: float = 30.0, space: float = 0.3, jitter: float = 0.0, seed: int = 0):
    """`line` without its spaces, and where a reader would put each character: letter widths of WIDTHS, a space
    `space` em wide, each centre moved by up to `jitter` em (a CTC column's coarseness)."""
    rng = np.random.default_rng(seed)
    centres, x = [], 0.0
    for word in line.split():
        for char in word:
            w = WIDTHS.get(char, 0.278)
            centres.append((x + w / 2 + rng.uniform(-jitter, jitter)) * em)
            x += w
        x += space
    return line.replace(" ", ""), tuple(centres)


WORDS = frozenset({"pride", "month", "comment", "comments", "son", "on", "hand", "ball", "handball", "she", "sees",
                   "when", "i", "didn"})


def test_run_together_words_split_where_the_word_list_allows_one_way_only():
    assert split_text("PRIDEMONTH", words=WORDS) == "PRIDE MONTH"
    assert split_text("COMMENTSON", words=WORDS) == "COMMENTSON"  # comments on, comment son: left alone
    assert split_text("HANDBALL", words=WORDS) == "HANDBALL"  # a word itself
    assert split_text("WHENSHESEES", words=WORDS) == "WHEN SHE SEES"
    assert split_text("ISHE", words=WORDS) == "ISHE"  # too short to split on the word list alone
    assert split_text("DIDN'TPRIDE", words=WORDS) == "DIDN'T PRIDE"
    assert split_text("PRIDEXMONTH", words=WORDS) == "PRIDEXMONTH"  # no way into known words
    assert sorted(segmentations("commentson", WORDS)) == [(7,), (8,)]


def test_the_readers_character_positions_show_the_lost_spaces():
    pytest.importorskip("symspellpy", reason="the word frequencies (last line) are symspellpy's")
    text, centres = _centres("COMMENTS ON", jitter=0.05)
    assert split_text(text, centres, WORDS) == "COMMENTS ON"  # the gap picks one of the two segmentations
    text, centres = _centres("COMMENT SON", jitter=0.05)
    assert split_text(text, centres, WORDS) == "COMMENT SON"
    text, centres = _centres("TRANSGIRLS RULE", space=0.3)
    assert split_text(text, centres, frozenset()) == "TRANSGIRLS RULE"  # a wide step splits without the word list
    text, centres = _centres("PRIDEMONTH")  # set tight: the one segmentation goes against the positions
    assert split_text(text, centres, WORDS) == "PRIDEMONTH"
    box = TextBox.from_rect(10, 10, 400, 50, " " + text + " ")
    assert split_run_together(Detection(box, (0.0,) + centres + (0.0,))).text == "PRIDEMONTH"
    assert split_run_together(Detection(box)).text == "PRIDE MONTH"


def test_the_installed_word_list_splits_real_run_together_captions():
    pytest.importorskip("symspellpy", reason="the word frequencies are symspellpy's")
    assert len(known_words()) > 50000 and {"pride", "month", "i", "a"} <= known_words()
    assert split_text("PRIDEMONTH") == "PRIDE MONTH"
    # read from drawn memes (bench/ocr.py --reading-order): runs that are words, one with its apostrophe lost too,
    # stay whole, where the WordPiece list split them; the rest split as a person reads them
    for word in ("SEXIST", "HIJACK", "FORGETS", "TODAYS", "COWORKER"):
        assert split_text(word) == word
    assert split_text("INSTEMFIELDS") == "IN STEM FIELDS"
    assert split_text("LETUSINTHEYSAID") == "LET US IN THEY SAID"
    assert split_text("WELLIMCHRISTIAN") == "WELL IM CHRISTIAN"  # im: i'm without its apostrophe
    assert split_text("OFTHE") == "OF THE"
    assert split_text("LGBTSUPPORTER") == "LGBT SUPPORTER"  # lgbt: a word of IDENTITY_TERMS, which the list lacks
    assert split_text("TRANSPHOBIC") == "TRANSPHOBIC"  # the list alone would read `trans phobic`
    assert split_text("TRANSPHOBICAND") == "TRANSPHOBIC AND"
    text, centres = _centres("WHEN SHE SEES COMMENTS ON", jitter=0.04, seed=3)
    assert split_text(text, centres) == "WHEN SHE SEES COMMENTS ON"


def test_a_dot_the_reader_put_for_a_space_is_a_space_again():
    assert split_text("I GO.TO A", words=WORDS) == "I GO TO A"
    assert split_text("IF A MAN·CAN", words=WORDS) == "IF A MAN CAN"
    assert split_text("PRIDE.MONTH", words=WORDS) == "PRIDE MONTH"
    for kept in ("IMGFLIP.COM", "U.S.A", "REDDIT.COM/R/MEMES", "X-RAY", "THE END. NEXT", "WAIT..."):
        assert split_text(kept, words=WORDS) == kept
    text, centres = _centres("PRIDEXMONTH")  # the positions still line up with the text after the dot is a space
    assert split_text(text.replace("X", "."), centres, WORDS) == "PRIDE MONTH"


def test_a_detection_keeps_where_each_character_sits_along_its_box():
    cells = [[[x, 10], [x + 10, 10], [x + 10, 40], [x, 40]] for x in (12, 30, 60)]
    item = [[[10, 10], [80, 10], [80, 40], [10, 40]], "ABC", 0.9, cells, ["A", "B", "C"], [0.9] * 3]
    found = _detection(item, back=0.5)
    assert found.box.bounds == (5, 5, 40, 20) and found.box.text == "ABC"
    assert found.char_centres == pytest.approx((3.5, 12.5, 27.5))  # from the box's left edge
    plain = _detection([[[10, 10], [80, 10], [80, 40], [10, 40]], " AB ", 0.9], back=1.0)
    assert plain.char_centres == () and plain.box.text == "AB"


def test_readings_cached_by_the_old_order_are_read_again(tmp_path):
    box = TextBox.from_rect(1, 2, 30, 12, "HI")
    path = tmp_path / "entry.json"
    path.write_text(json.dumps({"backend": "rapidocr", "text": "HI", "boxes": [box.to_json()]}))
    assert _read_entry(path, "rapidocr") is None
    path.write_text(json.dumps({"backend": "rapidocr", "version": CACHE_VERSION, "text": "HI",
                                "boxes": [box.to_json()]}))
    assert _read_entry(path, "rapidocr") == (box,)


def test_rapidocr_reads_a_drawn_meme_in_reading_order_with_its_spaces():
    pytest.importorskip("rapidocr_onnxruntime", reason="the OCR backend is in the dev and ocr extras")
    pytest.importorskip("symspellpy", reason="its word frequencies put back the spaces OCR lost")
    import os

    import matplotlib
    from PIL import Image, ImageDraw, ImageFont

    from pytest_memerobust.data.ocr import RapidOcr

    bold = os.path.join(matplotlib.get_data_path(), "fonts/ttf/DejaVuSans-Bold.ttf")
    ys = np.linspace(60, 180, 384)[:, None, None]
    img = Image.fromarray(np.broadcast_to(ys, (384, 384, 3)).astype(np.uint8))
    draw = ImageDraw.Draw(img)
    lines = [("WHEN SHE SEES", 34, 12), ("THE COMMENTS", 26, 56), ("ON HER POST", 40, 320)]
    for text, size, top in lines:
        font = ImageFont.truetype(bold, size)
        x = (384 - draw.textlength(text, font=font)) / 2
        draw.text((x, top), text, font=font, fill="white", stroke_width=3, stroke_fill="black")
    reader = RapidOcr()
    boxes = reader.read_boxes(np.asarray(img))
    assert len(caption_blocks(boxes)) == 2
    assert joined_text(boxes) == "WHEN SHE SEES THE COMMENTS ON HER POST"


def test_panels_side_by_side_are_read_one_after_the_other():
    # two panels whose captions sit at the same heights: read line by line across the picture they interleave
    # (`LEFT ONE RIGHT ONE LEFT TWO RIGHT TWO`); cut X-Y, each panel is read whole
    panels = [TextBox.from_rect(10, 300, 200, 340, "LEFT ONE"), TextBox.from_rect(300, 300, 490, 340, "RIGHT ONE"),
              TextBox.from_rect(10, 350, 200, 390, "LEFT TWO"), TextBox.from_rect(300, 350, 490, 390, "RIGHT TWO")]
    assert texts(reading_order(panels)) == ["LEFT ONE", "LEFT TWO", "RIGHT ONE", "RIGHT TWO"]
    over_both = [TextBox.from_rect(20, 10, 480, 50, "OVER BOTH")]  # a caption across both panels comes first
    assert texts(reading_order(panels + over_both))[:2] == ["OVER BOTH", "LEFT ONE"]
    words = [TextBox.from_rect(10, 10, 100, 50, "A"), TextBox.from_rect(130, 10, 300, 50, "LINE"),
             TextBox.from_rect(320, 10, 490, 50, "OF"), TextBox.from_rect(40, 60, 200, 100, "TWO")]
    assert texts(reading_order(words)) == ["A", "LINE", "OF", "TWO"]  # gaps between words are no panels
    # boxes read in panels of their own (TextBox.region) keep their panel's order, whatever their place
    read = [TextBox.from_rect(300, 10, 490, 50, "SECOND").shifted(0, 1), TextBox.from_rect(10, 300, 200, 340, "FIRST")]
    assert texts(reading_order(read)) == ["FIRST", "SECOND"]
    assert TextBox.from_json(read[0].to_json()) == read[0] and len(read[1].to_json()) == 3


def test_a_plain_rule_from_top_to_bottom_cuts_panels_and_nothing_else_does():
    from pytest_memerobust.data.ocr import panel_cuts

    rng = np.random.default_rng(0)
    photo = lambda: rng.integers(0, 256, (120, 200, 3), dtype=np.uint8)  # noqa: E731
    rule = np.full((120, 8, 3), 255, np.uint8)
    assert panel_cuts(np.concatenate([photo(), rule, photo()], axis=1)) == [204]
    assert panel_cuts(np.concatenate([photo(), photo()], axis=1)) == []  # touching panels: the X-Y cut's case
    crossed = np.concatenate([photo(), rule, photo()], axis=1)
    crossed[10:30, 150:260] = 0  # a caption drawn over both panels: no rule runs top to bottom
    assert panel_cuts(crossed) == []
    assert panel_cuts(np.concatenate([rule, photo(), photo()], axis=1)) == []  # a margin is no rule
    three = np.concatenate([photo(), rule, photo(), rule, photo()], axis=1)
    assert panel_cuts(three) == [204, 412]
    noted = np.concatenate([photo(), np.full((120, 200, 3), 255, np.uint8)], axis=1)
    noted[40:50, 250:262] = noted[40:50, 300:330] = 0  # words written on a white ground, white between them
    assert panel_cuts(noted) == []  # a note beside a picture, not two panels


def test_rapidocr_reads_two_panels_with_the_same_line_heights_one_after_the_other():
    pytest.importorskip("rapidocr_onnxruntime", reason="the OCR backend is in the dev and ocr extras")
    pytest.importorskip("symspellpy", reason="its word frequencies put back the spaces OCR lost")
    import os

    import matplotlib
    from PIL import Image, ImageDraw, ImageFont

    from pytest_memerobust.data.ocr import RapidOcr

    bold = ImageFont.truetype(os.path.join(matplotlib.get_data_path(), "fonts/ttf/DejaVuSans-Bold.ttf"), 30)
    halves = []
    for side, lines in enumerate((("MONDAY", "MORNING"), ("FRIDAY", "EVENING"))):
        ys = np.linspace(60, 180, 300)[:, None, None]
        img = Image.fromarray(np.broadcast_to(ys, (300, 300, 3)).astype(np.uint8))
        draw = ImageDraw.Draw(img)
        for k, text in enumerate(lines):  # close to the rule on both sides: read whole, lines run across it
            x = 300 - draw.textlength(text, font=bold) - 6 if side == 0 else 6  # ("MONDAY FRIDAY MORNING ...")
            draw.text((x, 20 + 40 * k), text, font=bold, fill="white", stroke_width=3, stroke_fill="black")
        halves.append(np.asarray(img))
    picture = np.concatenate([halves[0], np.full((300, 8, 3), 255, np.uint8), halves[1]], axis=1)
    boxes = RapidOcr().read_boxes(picture)
    assert joined_text(boxes) == "MONDAY MORNING FRIDAY EVENING"
    assert {b.region for b in boxes} == {0, 1} and all(b.bounds[0] >= 308 for b in boxes if b.region == 1)
