"""Every broken or hostile dataset in the corpus (tests/bad_inputs.py) is one short DataError naming the culprit, raised
while the rows load (pictures too: from their headers), and nothing is written; a run stops on it once, before any
case, with pytest's usage error (exit 4)."""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from bad_inputs import CASES, Case, blank_png, jpeg_bomb, png_16bit, sixteen_bit_dataset
from PIL import Image

from pytest_memerobust.data import image_files, loaders, pictures
from pytest_memerobust.data.image_files import check_picture_file, load_rgb
from pytest_memerobust.data.loaders import LOADERS, MAX_GENERIC_CLASSES, load_dataset, register_loader
from pytest_memerobust.data.meme import Dataset, Meme
from pytest_memerobust.errors import DataError

OUTSIDE_KINDS = ["image_absolute_path", "image_dotdot_path", "image_symlink_out", "hateful_memes_absolute_img",
                 "pridemm_dotdot_name"]


def snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    """Every file under `folder` with its size and modification time."""
    return {str(p): (p.lstat().st_size, p.lstat().st_mtime_ns) for p in sorted(folder.rglob("*"))}


def load_and_decode(case: Case, **kwargs) -> Dataset:
    dataset = load_dataset(case.spec, **kwargs)
    if case.decode:
        for meme in dataset.memes:
            meme.image
    return dataset


def raised(case: Case, **kwargs) -> str:
    """The message of the error `case` raises, after checking its class is exactly the expected one."""
    with pytest.raises(Exception) as err:
        load_and_decode(case, **kwargs)
    assert type(err.value) is case.error, f"{type(err.value).__name__}: {str(err.value)[:500]}"
    return str(err.value)


@pytest.fixture
def corpus(tmp_path: Path):
    """Writes a kind of the corpus into tmp_path/data; checks on the way out that loading wrote nothing."""
    built = {}

    def build(kind: str) -> Case:
        built["case"] = CASES[kind](tmp_path / "data")
        built["before"] = snapshot(tmp_path)
        return built["case"]

    yield build
    if "before" in built:
        assert snapshot(tmp_path) == built["before"], "loading wrote to disk"


@pytest.mark.parametrize("kind", sorted(CASES))
def test_every_bad_input_is_one_short_error_naming_the_culprit(corpus, kind: str):
    case = corpus(kind)
    message = raised(case)
    assert case.expected in message, message[:1000]
    for part in case.also:
        assert part in message, message[:1000]
    assert len(message) < 1000 and "\n" not in message and "\x1b" not in message, message[:1000]


def test_a_bad_picture_stops_the_run_once_before_any_case(corpus, pytester):
    """It failed the clean case as a model failure (exit 1); the README promises one usage error naming the row."""
    case = corpus("image_text_file_named_png")
    result = pytester.runpytest("--memerobust-model=demo", f"--memerobust-data={case.spec}", "--memerobust-task=label",
                                "--memerobust-limit=2", "-k", "rainbow and clean", "-p", "no:cacheprovider")
    err, out = result.stderr.str(), result.stdout.str()
    assert result.ret == pytest.ExitCode.USAGE_ERROR, out[-1500:] + err[-1500:]
    assert err.count(case.expected) == 1 and "Traceback" not in out + err and " passed" not in out, err[-1500:]


# ------------------------------------------------------------------------------------ the probe's seven kinds


def test_a_huge_label_names_its_row_at_once(corpus):
    """1e9 built range(1e9 + 1) class names (MemoryError); 200,000 printed 7.5 MB of them."""
    for kind in ("label_billion", "label_200k"):
        case = corpus(kind)
        start = time.perf_counter()
        message = raised(case)
        assert time.perf_counter() - start < 5 and len(message) < 400, message[:1000]
        assert "row 2 (line 3)" in message and f"below {MAX_GENERIC_CLASSES}" in message


def test_the_highest_allowed_label_still_loads(tmp_path: Path):
    from bad_inputs import good_rows, write_csv

    rows = good_rows(tmp_path)
    rows[2][3] = MAX_GENERIC_CLASSES - 1
    ds = load_dataset(f"csv:{write_csv(tmp_path / 'memes.csv', rows)}")
    assert len(ds.classes["label"]) == MAX_GENERIC_CLASSES


def test_a_caption_of_invisible_characters_is_empty(corpus):
    """Refused like an empty caption; with an OCR backend (require_captions=False) it is "" for OCR to fill."""
    case = corpus("caption_zero_width")
    assert "empty caption" in raised(case)
    ds = load_dataset(case.spec, require_captions=False)
    assert [m.text for m in ds.memes] == ["caption 0", "", "caption 1", "caption 2"]


def test_visible_text_around_format_characters_is_kept(tmp_path: Path):
    from bad_inputs import good_rows, write_csv

    rows = good_rows(tmp_path)
    rows[0][2] = "\u200bhi\u200d"
    rows[1][2] = "\U0001f600"  # an emoji alone is a caption
    ds = load_dataset(f"csv:{write_csv(tmp_path / 'memes.csv', rows)}")
    assert [m.text for m in ds.memes][:2] == ["\u200bhi\u200d", "\U0001f600"]


def test_a_lone_surrogate_is_refused_at_load(corpus):
    message = raised(corpus("caption_lone_surrogate"))
    assert "row 2 (line 2)" in message and "column 'text'" in message
    message.encode("utf-8")  # the message itself prints anywhere


def test_a_surrogate_pair_is_text(tmp_path: Path):
    from bad_inputs import memes_jsonl

    path, _ = memes_jsonl(tmp_path, {"id": "x", "image": "m0.png", "text": "ok \U0001f600", "label": 1,
                                       "split": "test"})
    assert load_dataset(f"jsonl:{path}").memes[1].text == "ok \U0001f600"  # json.dumps wrote \ud83d\ude00


@pytest.mark.parametrize("side", [16000, 8500])  # above PIL's limit; above only MAX_PICTURE_PIXELS
def test_a_picture_too_large_is_refused_where_it_is_decoded_too(tmp_path: Path, side: int):
    """A Meme built without a loader (library use) meets the same limit when its picture is decoded."""
    big = Meme("x", "t", {}, blank_png(tmp_path / "big.png", side))
    for decode in (lambda: big.image, lambda: big.picture("cpu")):
        with pytest.raises(DataError) as err:
            decode()
        assert type(err.value) is DataError and str(big.image_path) in str(err.value)
        assert "too large to decode" in str(err.value) and "\n" not in str(err.value)


def test_the_limits_can_be_raised(tmp_path: Path, monkeypatch):
    """Both are module constants read at each row, so a conftest.py can allow larger pictures or longer captions."""
    monkeypatch.setattr(image_files, "MAX_PICTURE_PIXELS", 73_000_000)
    monkeypatch.setattr(loaders, "MAX_CAPTION_CHARS", 100_000)
    for kind in ("image_72_megapixels", "caption_100k_characters"):
        assert len(load_dataset(CASES[kind](tmp_path / kind).spec)) == 4


# Readable pictures of every kind the check treats apart (format, options, bytes after the picture): none is refused.
READABLE = {
    "png": ("a.png", "PNG", {}, b""),
    "png_named_jpg": ("a.jpg", "PNG", {}, b""),
    "png_palette": ("p.png", "PNG", {"palette": True}, b""),
    "jpeg": ("a.jpg", "JPEG", {}, b""),
    "jpeg_progressive": ("p.jpg", "JPEG", {"progressive": True}, b""),
    "jpeg_with_bytes_after_its_end": ("t.jpg", "JPEG", {}, b"a trailer, as motion photos append one"),
    "jpeg_cmyk": ("c.jpg", "JPEG", {"mode": "CMYK"}, b""),
    "gif": ("a.gif", "GIF", {}, b""),
    "webp": ("a.webp", "WEBP", {}, b""),
    "bmp": ("a.bmp", "BMP", {}, b""),
}


def readable(folder: Path, kind: str) -> Path:
    name, format, options, trailer = READABLE[kind]
    options = dict(options)
    picture = Image.fromarray(np.random.default_rng(2).integers(0, 255, (24, 32, 3), dtype=np.uint8))
    if options.pop("palette", False):
        picture = picture.quantize(16)
    if "mode" in options:
        picture = picture.convert(options.pop("mode"))
    picture.save(folder / name, format=format, **options)
    with (folder / name).open("ab") as f:
        f.write(trailer)
    return folder / name


@pytest.mark.parametrize("kind", sorted(READABLE))
def test_every_readable_picture_passes_the_check(tmp_path: Path, kind: str):
    path = readable(tmp_path, kind)
    check_picture_file(path)
    assert load_rgb(path).ndim == 3


def test_a_jpeg_bomb_is_refused_before_the_gpu_decoder_reads_it(tmp_path: Path, monkeypatch):
    """nvjpeg has no pixel limit: the header is checked first (a stand-in decoder fails the test if reached)."""

    class NoDecoder:
        def read_file(self, path):
            raise AssertionError("the GPU decoder was reached")

    monkeypatch.setattr(pictures, "torchvision_io", lambda: NoDecoder())
    bomb = jpeg_bomb(tmp_path / "bomb.jpg")
    with pytest.raises(DataError, match="too large to decode") as err:
        pictures.decode(bomb, "cuda")
    assert str(bomb) in str(err.value)


def test_a_16_bit_png_is_scaled_not_clipped(tmp_path: Path):
    """PIL's convert("RGB") clipped every 16-bit grey above 255 to white."""
    spec, expected = sixteen_bit_dataset(tmp_path)
    meme = load_dataset(spec).memes[1]
    assert (meme.image == expected).all()
    assert (pictures.to_array(meme.picture("cpu")) == expected).all()
    assert expected[:, :, 0].tolist() == [[0, 1, 3, 128], [255, 255, 0, 156]]


def test_a_16_bit_grey_decodes_as_pil_decodes_16_bit_colour(tmp_path: Path):
    """PIL keeps the high byte of 16-bit RGB PNGs; 16-bit greys now match them."""
    from bad_inputs import write_png

    grey = np.arange(0, 65536, 4099, dtype=np.uint16).reshape(2, 8)
    expected = png_16bit(tmp_path / "grey.png", grey)
    colour = np.repeat(grey[:, :, None], 3, axis=2)
    write_png(tmp_path / "colour.png", 8, 2, 16, 2, (r.astype(">u2").tobytes() for r in colour))
    assert (load_rgb(tmp_path / "grey.png") == expected).all()
    assert (load_rgb(tmp_path / "colour.png") == expected).all()


@pytest.mark.parametrize("kind", OUTSIDE_KINDS)
def test_image_paths_stay_in_the_dataset_folder_unless_allowed(corpus, kind: str):
    case = corpus(kind)
    message = raised(case)
    assert "leads outside the dataset folder" in message and "row 2" in message
    dataset = load_dataset(case.spec, allow_outside_paths=True)
    assert all(m.image_path.is_file() for m in dataset.memes)


def test_a_loader_without_the_keyword_is_not_passed_it():
    """Like require_images: a loader that does not take allow_outside_paths keeps its own (stricter) rule."""
    calls = []

    def strict(path, split):
        calls.append((path, split))
        return Dataset("strict", [Meme("m", "t", {})], {})

    register_loader("strict-probe", strict)
    try:
        load_dataset("strict-probe:/x", allow_outside_paths=True)
    finally:
        del LOADERS["strict-probe"]
    assert calls == [(Path("/x"), None)]


def test_a_one_class_file_says_what_is_wrong(corpus):
    """Was: "model 'demo' predicts 2 classes but task 'label' ... has 1: ['0']", blaming the model."""
    case = corpus("one_class")
    message = raised(case)
    assert "every meme is labelled 0 (all 4 rows; split 'test': 2)" in message and "model" not in message
