"""The image path's edges and the encoder's input: pictures as tensors, digests, decoding, and the device resize that
replaced PIL's (checked against PIL itself)."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from pytest_memerobust.detectors.backbones import CLIP_MEAN, CLIP_STD
from pytest_memerobust.errors import DataError
from pytest_memerobust.perturb.imagenet_c.tensor import CHUNK, chunk_size
from pytest_memerobust.data.pictures import (as_picture, decode, digests, fit_to_encoder, fitted_size, groups_by_size,
                                        to_array)


def _picture(h: int, w: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w]
    img = np.stack([255 * x / max(w - 1, 1), 255 * y / max(h - 1, 1), 127 + 100 * np.sin(x / 5) * np.cos(y / 7)], -1)
    return np.clip(img + rng.normal(scale=12, size=img.shape), 0, 255).astype(np.uint8)


def _pil_reference(array: np.ndarray, size: int, center_crop: bool) -> np.ndarray:
    """CLIP's preprocessing as PIL does it (the project's former CPU path): bicubic resize, crop, [0, 1] floats."""
    img = Image.fromarray(array)
    if center_crop:
        w, h = img.size
        scale = size / min(w, h)
        img = img.resize((max(size, round(w * scale)), max(size, round(h * scale))), Image.BICUBIC)
        left, top = (img.size[0] - size) // 2, (img.size[1] - size) // 2
        img = img.crop((left, top, left + size, top + size))
    else:
        img = img.resize((size, size), Image.BICUBIC)
    return np.asarray(img, dtype=np.float32).transpose(2, 0, 1) / 255.0


@pytest.mark.parametrize("shape", [(512, 512), (480, 640), (45, 71), (64, 80), (300, 100)])
@pytest.mark.parametrize("center_crop", [True, False])
def test_the_encoder_input_matches_pils_resize(shape, center_crop):
    array = _picture(*shape)
    pixels = fit_to_encoder([as_picture(array)], 224, center_crop, CLIP_MEAN, CLIP_STD)
    std, mean = torch.tensor(CLIP_STD).view(3, 1, 1), torch.tensor(CLIP_MEAN).view(3, 1, 1)
    ours = (pixels[0] * std + mean).numpy()
    diff = np.abs(ours - _pil_reference(array, 224, center_crop)) * 255
    # The CPU resizes uint8 as PIL does, rounding between its two passes: at most 3 levels apart anywhere and 0.3 on
    # average, where a picture shrinks along one axis and grows along the other (Pillow may run the passes in the
    # other order); the tolerance is a mean of 0.0067 in [0, 1] units, 1.7 levels.
    assert diff.max() <= 3.0 + 1e-3 and diff.mean() <= 0.3, (diff.max(), diff.mean())


def test_the_encoder_input_of_a_batch_of_mixed_sizes_keeps_the_order():
    pictures = [as_picture(_picture(40, 60, 1)), as_picture(_picture(50, 50, 2)), as_picture(_picture(40, 60, 3))]
    together = fit_to_encoder(pictures, 32, True, CLIP_MEAN, CLIP_STD)
    for i, picture in enumerate(pictures):
        torch.testing.assert_close(together[i], fit_to_encoder([picture], 32, True, CLIP_MEAN, CLIP_STD)[0])
    assert fitted_size(40, 60, 32, True) == (32, 48) and fitted_size(40, 60, 32, False) == (32, 32)


def test_arrays_and_tensors_convert_at_the_edges_without_loss():
    array = _picture(7, 9)
    tensor = as_picture(array)
    assert tensor.shape == (3, 7, 9) and tensor.dtype == torch.uint8
    np.testing.assert_array_equal(to_array(tensor), array)
    assert as_picture(tensor) is tensor
    read_only = array.copy()
    read_only.flags.writeable = False
    np.testing.assert_array_equal(to_array(as_picture(read_only)), array)


def test_digests_follow_content_and_shape_whatever_the_batch():
    a, b = as_picture(_picture(8, 8, 1)), as_picture(_picture(8, 8, 2))
    alone = digests([a])[0]
    assert digests([b, a, b])[1] == alone and digests([a.clone()])[0] == alone
    changed = a.clone()
    changed[1, 3, 4] ^= 1  # one bit of one value
    assert digests([changed])[0] != alone
    assert digests([a.reshape(3, 4, 16)])[0] != alone  # same bytes, other shape
    assert len(set(digests([as_picture(_picture(8, 8, s)) for s in range(50)]))) == 50


def test_pictures_group_by_size_in_order():
    pictures = [as_picture(_picture(4, 5)), as_picture(_picture(6, 5)), as_picture(_picture(4, 5))]
    assert groups_by_size(pictures) == {(4, 5): [0, 2], (6, 5): [1]}


def test_decode_reads_files_and_names_the_bad_ones(tmp_path):
    array = _picture(20, 30)
    Image.fromarray(array).save(tmp_path / "meme.png")
    picture = decode(tmp_path / "meme.png")
    assert picture.shape == (3, 20, 30) and picture.dtype == torch.uint8
    np.testing.assert_array_equal(to_array(picture), array)
    Image.fromarray(array).convert("L").save(tmp_path / "grey.png")  # any mode comes back as RGB
    assert decode(tmp_path / "grey.png").shape == (3, 20, 30)
    with pytest.raises(DataError, match="missing.png"):
        decode(tmp_path / "missing.png")
    (tmp_path / "junk.jpg").write_bytes(b"not a picture")
    with pytest.raises(DataError, match="junk.jpg"):
        decode(tmp_path / "junk.jpg")


def test_batches_of_large_pictures_are_split_to_bound_memory():
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert chunk_size(cuda, 512, 512) == CHUNK["cuda"] and chunk_size(cuda, 1024, 1024) == CHUNK["cuda"] // 4
    assert chunk_size(cpu, 96, 96) == CHUNK["cpu"] and chunk_size(cpu, 4096, 4096) == 1


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_on_a_gpu_the_encoder_input_stays_within_the_tolerance_of_pils():
    array = _picture(512, 512)
    pixels = fit_to_encoder([as_picture(array, "cuda")], 224, True, CLIP_MEAN, CLIP_STD)
    assert pixels.device.type == "cuda"
    std, mean = torch.tensor(CLIP_STD).view(3, 1, 1), torch.tensor(CLIP_MEAN).view(3, 1, 1)
    diff = np.abs((pixels[0].cpu() * std + mean).numpy() - _pil_reference(array, 224, True))
    assert diff.mean() <= 0.0067  # the tolerance of the issue that moved preprocessing onto the device
    assert digests([as_picture(array, "cuda")]) == digests([as_picture(array)])
