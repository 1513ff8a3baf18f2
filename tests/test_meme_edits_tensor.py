"""Meme edits on picture tensors against the numpy versions: the same draws; occlusion, caption_cover, scribble and
sticker equal, screenshot within its resize's tolerance; dtype/shape/device kept, the input left alone."""
import numpy as np
import pytest
import torch
from PIL import Image

import meme_edits_reference as numpy_edits  # the numpy reference
from pytest_memerobust.perturb.meme_edits_tensor import EDITS, resize_bilinear

from test_augmix_tensor import _array, _picture, _tensor  # the same test pictures and conversions

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
EXACT = ["occlusion", "caption_cover", "scribble", "sticker"]
SIZES = [(64, 80), (45, 71)]


def _both(name: str, arr: np.ndarray, severity: int, seed: int):
    """(numpy result, tensor result), each from its own generator of `seed`, checking both drew the same."""
    a, b = np.random.default_rng(seed), np.random.default_rng(seed)
    expected = getattr(numpy_edits, name)(arr, severity, a)
    got = _array(EDITS[name](_tensor(arr), severity, b))
    assert a.random() == b.random()
    return expected, got


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("name", EXACT)
def test_fills_and_drawn_edits_equal_the_numpy_versions(name, size):
    arr = _picture(*size, 0)
    for severity in range(1, 6):
        for seed in (0, 1):
            expected, got = _both(name, arr, severity, seed)
            np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("name", ["scribble", "sticker"])
def test_thick_strokes_with_curved_joints_equal_the_numpy_versions(name):
    arr = _picture(360, 400, 3)  # strokes 9 px wide: PIL adds round joints and gap lines
    for seed in (0, 1):
        expected, got = _both(name, arr, 5, seed)
        np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("size", SIZES)
def test_screenshot_is_the_numpy_version_but_for_the_resize_rounding(size):
    # measured: at most 0.06 levels on average, 2 at most, and only inside the shrunk picture
    h, w = size
    arr = _picture(h, w, 1)
    for severity in range(1, 6):
        for seed in (0, 1):
            expected, got = _both("screenshot", arr, severity, seed)
            diff = np.abs(expected.astype(int) - got)
            assert diff.mean() <= 0.1 and diff.max() <= 2
            share = [0.1, 0.2, 0.3, 0.4, 0.5][severity - 1]
            inner_h = max(1, round(h * (1 - share)))
            inner_w = max(1, round(w * inner_h / h))
            rng = np.random.default_rng(seed)
            rng.random()
            top, left = int(rng.integers(0, h - inner_h + 1)), (w - inner_w) // 2
            diff[top : top + inner_h, left : left + inner_w] = 0
            assert not diff.any()  # frame and bars exactly


def test_resize_is_pil_bilinear_within_a_level_or_two():
    arr = _picture(45, 71, 2)
    for size in [(40, 63), (27, 43), (45, 30), (10, 71), (1, 1)]:
        expected = np.asarray(Image.fromarray(arr).resize(size[::-1], Image.BILINEAR)).astype(int)
        diff = np.abs(expected - _array(resize_bilinear(_tensor(arr), size)))
        assert diff.mean() <= 0.1 and diff.max() <= 2


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", sorted(EDITS))
def test_dtype_shape_device_kept_input_untouched_and_deterministic(name, device):
    x = _tensor(_picture(45, 71, 4), device)
    before = x.clone()
    y = EDITS[name](x, 3, np.random.default_rng(1))
    assert y.dtype == torch.uint8 and y.shape == x.shape and y.device == x.device
    assert torch.equal(x, before) and not torch.equal(y, x)
    assert torch.equal(y, EDITS[name](x, 3, np.random.default_rng(1)))


@pytest.mark.parametrize("name", sorted(EDITS))
def test_bad_pictures_are_refused(name):
    with pytest.raises(ValueError, match="3xHxW"):
        EDITS[name](torch.zeros((8, 8, 3), dtype=torch.uint8), 1, np.random.default_rng(0))


@pytest.mark.parametrize("severity", [1, 3, 5])
def test_recompression_on_the_device_follows_the_pil_chain(severity):
    """The same uploads (scales and qualities drawn in the same order); the device's bilinear resize is within a
    level of PIL's, and each re-encode can carry such a level into other 8 x 8 coefficients, so the difference grows
    with the uploads (measured on such pictures: mean 0.07-0.1 after 1 upload, 0.5-1.2 after 4, 1.9-3.3 after 10)."""
    picture = _picture(64, 80, seed=severity)
    expected = numpy_edits.recompression(picture, severity, np.random.default_rng(severity))
    got = EDITS["recompression"](torch.from_numpy(picture).permute(2, 0, 1), severity, np.random.default_rng(severity))
    diff = np.abs(got.permute(1, 2, 0).numpy().astype(int) - expected.astype(int))
    assert got.shape == (3, 64, 80) and got.dtype == torch.uint8
    assert diff.mean() <= [0.2, 0, 1.5, 0, 4.0][severity - 1], diff.mean()
