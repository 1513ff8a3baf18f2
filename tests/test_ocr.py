"""OCR: captions read off pictures for memes without one, and end to end (picture -> OCR -> caption) so that image
perturbations reach the text channel as a deployed pipeline sees them."""
import json

import numpy as np
import pytest

from pytest_memerobust.data.meme import Dataset, Meme
from pytest_memerobust.data.ocr import fill_missing_captions
from pytest_memerobust.data.text_boxes import TextBox, joined_text, reading_order
from pytest_memerobust.engine import Condition, Engine, Readers
from pytest_memerobust.errors import ConfigError

from test_engine import CountingSplit


class FakeOcr:
    """Reads a picture as words naming its mean brightness; a black picture reads as nothing."""

    name = "fake"

    def __init__(self):
        self.calls = 0

    def read(self, image):
        self.calls += 1
        level = int(np.asarray(image.cpu() if hasattr(image, "cpu") else image).mean()) // 32
        return "" if level == 0 else " ".join(["bright"] * level + ["meme", "caption"])


def _dataset(captions, levels):
    memes = [Meme(id=f"m{i}", text=t, labels={"hate": i % 2}, image_array=np.full((8, 8, 3), v, np.uint8),
                  meta={"caption_missing": not t}) for i, (t, v) in enumerate(zip(captions, levels))]
    return Dataset("toy", memes, {"hate": ["non-hateful", "hateful"]})


def test_reading_order_is_by_line_then_left_to_right():
    boxes = [TextBox.from_rect(50, 10, 90, 20, "second", 0.9), TextBox.from_rect(0, 52, 40, 62, "fourth", 0.9),
             TextBox.from_rect(0, 12, 40, 22, "first", 0.9), TextBox.from_rect(60, 50, 90, 60, "fifth", 0.9),
             TextBox.from_rect(0, 30, 40, 40, "third ", 0.9)]
    assert [b.text.strip() for b in reading_order(boxes)] == ["first", "second", "third", "fourth", "fifth"]
    assert joined_text(boxes) == "first second third fourth fifth"
    assert joined_text([]) == ""


def test_text_boxes_survive_json_and_scale_with_the_picture():
    box = TextBox(((1.5, 2.0), (9.0, 2.0), (9.0, 6.5), (1.5, 6.5)), "hi", 0.8)
    assert TextBox.from_json(box.to_json()) == box
    assert box.bounds == (1, 2, 9, 7) and box.height == 5 and box.width == 8
    assert box.scaled(2).bounds == (3, 4, 18, 13)
    with pytest.raises(ValueError, match="not a text box"):
        TextBox.from_json([[[0, 0], [1, 1]], "two corners", 1.0])


def test_missing_captions_are_filled_from_the_picture_and_marked():
    data = fill_missing_captions(_dataset(["keep me", "", "  "], [200, 100, 150]), FakeOcr())
    assert [m.text for m in data.memes] == ["keep me", "bright bright bright meme caption",
                                            "bright bright bright bright meme caption"]
    assert [m.meta.get("caption_source") for m in data.memes] == [None, "fake", "fake"]


def test_a_dataset_with_missing_captions_needs_an_ocr_backend(monkeypatch):
    from pytest_memerobust.data import reading
    from pytest_memerobust.run.options import DataOptions, Options
    from pytest_memerobust.run.session import RobustnessSession

    monkeypatch.setattr(reading, "load_dataset", lambda spec, **options: _dataset(["a", "", ""], [90, 90, 90]))
    with pytest.raises(ConfigError, match=r"2 memes of 'toy-spec' have no caption \(e.g. m1, m2\).*--memerobust-ocr"):
        RobustnessSession(Options()).dataset("toy-spec")
    session = RobustnessSession(Options(data=DataOptions(ocr="rapidocr")))
    session.loaded.ocr = FakeOcr()
    assert [m.text for m in session.dataset("toy-spec").memes] == ["a", "bright bright meme caption",
                                                                   "bright bright meme caption"]


def test_end_to_end_ocr_reads_each_conditions_pictures():
    data = _dataset(["one", "two", "three", "four"], [250, 120, 10, 70])
    ocr = FakeOcr()
    engine = Engine(CountingSplit(), data, readers=Readers(ocr=ocr))
    engine.predict(Condition())
    assert engine.inputs(*engine.text_side(Condition())) == [
        "bright bright bright bright bright bright bright meme caption", "bright bright bright meme caption", "",
        "bright bright meme caption"]
    darker = Condition(image="brightness", image_severity=5)
    engine.predict(darker)
    read = engine.inputs(*engine.text_side(darker))
    assert read[2] != "" and read != engine.inputs(*engine.text_side(Condition()))  # brighter picture, other words
    both = Condition(text="typos", text_severity=5, image="contrast", image_severity=5)
    engine.predict(both)
    captions = engine.inputs(*engine.text_side(both))
    pictures = engine.inputs("image", "contrast", 5)
    plain = [ocr.read(p) for p in pictures]
    assert [c == "" for c in captions] == [p == "" for p in plain]  # nothing read: nothing to misspell
    assert captions != plain  # typos applied on top of what OCR read


rapidocr = pytest.importorskip("rapidocr_onnxruntime", reason="the OCR backend is in the dev and ocr extras")


@pytest.fixture(scope="module")
def backend(tmp_path_factory):
    from pytest_memerobust.data.ocr import ocr_backend

    return ocr_backend("rapidocr", tmp_path_factory.mktemp("cache"))


def test_rapidocr_reads_a_demo_caption_offline(backend):
    from pytest_memerobust.data import demo_dataset

    meme = demo_dataset("test").memes[3]  # "love is love and drag queens belong", drawn in two lines
    assert backend.read(meme.image) == meme.text


def test_readings_are_cached_on_disk_and_damaged_entries_read_again(backend):
    from pytest_memerobust.data import demo_dataset
    from pytest_memerobust.data.ocr import RapidOcr

    picture = demo_dataset("test").memes[5].image
    first = backend.read(picture)
    files = list((backend.cache_dir).rglob("*.json"))
    assert files and json.loads(files[0].read_text())["backend"] == "rapidocr"
    again = RapidOcr(backend.cache_dir.parent)
    again._engine = lambda image: pytest.fail("read from the cache, not the picture")
    assert again.read(picture) == first
    for f in files:
        f.write_text("{not json")
    fresh = RapidOcr(backend.cache_dir.parent)
    assert fresh.read(picture) == first


def test_a_suite_can_read_its_captions_off_the_pictures(tmp_path):
    from pytest_memerobust.errors import SuiteError
    from pytest_memerobust.run.options import DataOptions, Options
    from pytest_memerobust.run.session import CAPTIONS_BY_OCR, RobustnessSession
    from pytest_memerobust.run.suite import load_suite

    path = tmp_path / "memerobust-ocr.toml"
    path.write_text('[suite]\nname = "ocr"\ncaptions = "ocr"\n[image]\ncontrast = [5]\n')
    assert load_suite(path).settings.captions == "ocr"
    path.write_text('[suite]\ncaptions = "tesseract"\n')
    with pytest.raises(SuiteError, match=r"\[suite\].captions must be \"dataset\" or \"ocr\""):
        load_suite(path)

    session = RobustnessSession(Options(models=("demo",), data=DataOptions(limit=12)))
    session.loaded.ocr = FakeOcr()
    read = session.evaluate("demo", "image=contrast@5", captions="ocr")
    own = session.evaluate("demo", "image=contrast@5")
    assert ("demo", "demo" + CAPTIONS_BY_OCR, "image=contrast@5") in session.outcomes.results
    assert ("demo", "demo", "image=contrast@5") in session.outcomes.results and read is not own
    engine = session.engine("demo", "demo" + CAPTIONS_BY_OCR)
    assert engine.ocr is session.loaded.ocr and session.engine("demo", "demo").ocr is None
    assert engine.inputs(*engine.text_side(Condition(image="contrast", image_severity=5)))[0].endswith("meme caption")


@pytest.mark.parametrize("kind", ["csv", "jsonl"])
def test_every_loader_leaves_missing_captions_to_ocr_when_asked(tmp_path, kind):
    from PIL import Image

    from pytest_memerobust.data import load_dataset
    from pytest_memerobust.errors import DataError

    for name, level in (("a.png", 200), ("b.png", 60)):
        Image.new("RGB", (8, 8), (level,) * 3).save(tmp_path / name)
    rows = [{"id": "a", "image": "a.png", "text": "has words", "label": 0},
            {"id": "b", "image": "b.png", "text": "  ", "label": 1}]
    path = tmp_path / f"memes.{kind}"
    if kind == "csv":
        path.write_text("id,image,text,label\n" + "".join(f"{r['id']},{r['image']},{r['text']},{r['label']}\n"
                                                          for r in rows))
    else:
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(DataError, match=r"row 2.*empty caption in column 'text' for meme 'b'.*--memerobust-ocr"):
        load_dataset(f"{kind}:{path}")
    loaded = load_dataset(f"{kind}:{path}", require_captions=False)
    assert [m.text for m in loaded.memes] == ["has words", ""]
    filled = fill_missing_captions(loaded, FakeOcr())
    assert [m.text for m in filled.memes] == ["has words", "bright meme caption"]


def test_a_meme_with_neither_caption_nor_picture_is_named(monkeypatch):
    from pytest_memerobust.data import reading
    from pytest_memerobust.errors import DataError
    from pytest_memerobust.run.options import DataOptions, Options
    from pytest_memerobust.run.session import RobustnessSession

    memes = [Meme("m0", "a", {"hate": 0}, image_array=np.zeros((8, 8, 3), np.uint8)), Meme("m1", "", {"hate": 1})]
    monkeypatch.setattr(reading, "load_dataset",
                        lambda spec, **options: Dataset("toy", memes, {"hate": ["non-hateful", "hateful"]}))
    session = RobustnessSession(Options(data=DataOptions(ocr="rapidocr")))
    session.loaded.ocr = FakeOcr()
    with pytest.raises(DataError, match=r"1 memes of 'toy-spec' have neither a caption nor a picture.*m1"):
        session.dataset("toy-spec")


def test_attacks_fitted_on_training_memes_find_them_when_captions_are_read_by_ocr():
    from pytest_memerobust.run.options import DataOptions, Options
    from pytest_memerobust.run.session import CAPTIONS_BY_OCR, RobustnessSession

    session = RobustnessSession(Options(models=("demo",), data=DataOptions(captions="ocr")))
    captions, labels, memes = session.training_memes("demo" + CAPTIONS_BY_OCR, "hate")
    assert len(captions) == len(labels) == len(memes) == 480  # the demo train split, its own captions
    assert all(m.meta["split"] == "train" for m in memes)


def test_the_worker_pool_reads_pictures_as_this_process_does_and_the_cache_keeps_each_reading_once(tmp_path):
    """Issue 61: an OCR run's pictures are read on the worker pool (LocalPool.ocr_readings), each reading the same
    as this process's, written to the cache once; a second pass over the same pictures reads none of them again."""
    import functools

    from pytest_memerobust.data import demo_dataset
    from pytest_memerobust.data.ocr import ocr_backend, read_texts
    from pytest_memerobust.engine.executors import LocalPool

    pictures = [m.picture() for m in demo_dataset("test").memes[:5]]
    here = [ocr_backend("rapidocr").reading(p) for p in pictures]
    pool = LocalPool(2, start_s=0)  # every chunk to the pool at once
    try:
        reader = ocr_backend("rapidocr", tmp_path)
        read, handed = pool.ocr_readings(functools.partial(ocr_backend, "rapidocr")), []

        def counted(batch, read_here):
            handed.append(len(batch))
            return read(batch, read_here)

        reader.read_elsewhere = counted
        texts = read_texts(reader, pictures + pictures[:2])  # two pictures twice: each distinct one read once
        assert handed == [5] and pool.read_pictures == 5 and pool.size >= 1
        assert [reader.read_boxes(p) for p in pictures] == here
        assert texts == [reader.read(p) for p in pictures + pictures[:2]]
        assert len(list(reader.cache_dir.rglob("*.json"))) == 5
        assert read_texts(reader, pictures) == texts[:5] and handed == [5, 0]  # all from memory
        assert "the OCR readings of 5 pictures ran on" in pool.note()
    finally:
        pool.close()
