"""Meme-specific edits: size and mode kept, deterministic, stronger with severity, each doing what it says."""
import numpy as np
import pytest

from pytest_memerobust.data import demo_dataset
from pytest_memerobust.perturb import get, names

EDITS = ["scribble", "occlusion", "caption_cover", "sticker", "recompression", "screenshot"]


@pytest.fixture(scope="module")
def picture():
    return demo_dataset("test").memes[5].image


def _changed(a, b):
    return float((a != b).any(axis=-1).mean())


def test_registered_as_image_meme_edits():
    assert set(EDITS) <= set(names(modality="image", tag="meme_edit"))


@pytest.mark.parametrize("name", EDITS)
def test_size_mode_and_determinism_for_any_size(name):
    x = np.random.default_rng(3).integers(0, 256, (41, 67, 3), dtype=np.uint8)
    a = get(name)(x, 3, np.random.default_rng(1))
    assert a.shape == x.shape and a.dtype == np.uint8 and not np.array_equal(a, x)
    np.testing.assert_array_equal(a, get(name)(x, 3, np.random.default_rng(1)))


@pytest.mark.parametrize("name", ["scribble", "occlusion", "caption_cover", "sticker", "screenshot"])
def test_more_severe_edits_change_more_of_the_picture(name, picture):
    shares = [np.mean([_changed(get(name)(picture, s, np.random.default_rng(i)), picture) for i in range(8)])
              for s in (1, 3, 5)]
    assert shares[0] < shares[1] < shares[2]


def test_occlusion_covers_about_its_share_with_one_solid_box(picture):
    out = get("occlusion")(picture, 4, np.random.default_rng(0))  # 30% of the area
    changed = (out != picture).any(axis=-1)
    rows, cols = np.flatnonzero(changed.any(1)), np.flatnonzero(changed.any(0))
    box = out[rows[0] : rows[-1] + 1, cols[0] : cols[-1] + 1]
    assert len(np.unique(box.reshape(-1, 3), axis=0)) == 1  # one solid colour
    assert box.shape[0] * box.shape[1] / changed.size == pytest.approx(0.30, abs=0.03)


def test_caption_cover_paints_only_the_bottom_band(picture):
    out = get("caption_cover")(picture, 3, np.random.default_rng(0))  # bottom 20%
    h = picture.shape[0]
    band = round(0.2 * h)
    np.testing.assert_array_equal(out[: h - band], picture[: h - band])
    assert len(np.unique(out[h - band :].reshape(-1, 3), axis=0)) == 1


def test_more_re_uploads_blur_more(picture):
    error = [np.abs(get("recompression")(picture, s, np.random.default_rng(0)).astype(int) - picture).mean()
             for s in (1, 3, 5)]
    assert error[0] < error[1] < error[2]


@pytest.mark.parametrize("name", EDITS)
def test_bad_pictures_are_refused(name):
    with pytest.raises(ValueError, match="HxWx3"):
        get(name)(np.zeros((8, 8), dtype=np.uint8), 1, np.random.default_rng(0))
