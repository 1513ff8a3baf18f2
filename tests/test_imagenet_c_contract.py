"""The contract every batched ImageNet-C corruption keeps, whatever its group: RGB uint8 of the input's size out,
any size in (down to 1 x 1), the same pixels in a batch as alone, randomness only from the meme's own generator,
and the same pixels on a GPU as on the CPU (within one level). Fidelity to the reference is in the group files."""
import numpy as np
import pytest
import torch

from imagenet_c_reference import differences, test_picture
from pytest_memerobust.perturb import get
from pytest_memerobust.perturb.imagenet_c import COMMON, CORRUPTIONS, EXTRA, run_batched
from pytest_memerobust.perturb.imagenet_c.tensor import default_device

NAMES = COMMON + EXTRA
GROUPS = {"noise": ("gaussian_noise", "shot_noise", "impulse_noise", "speckle_noise"),
          "blur": ("defocus_blur", "glass_blur", "motion_blur", "zoom_blur", "gaussian_blur"),
          "weather": ("snow", "frost", "fog", "spatter"),
          "digital": ("brightness", "contrast", "saturate", "elastic_transform", "pixelate", "jpeg_compression")}
# Corruptions that draw nothing: two memes with the same picture get the same output.
DETERMINISTIC = {"defocus_blur", "zoom_blur", "gaussian_blur", "brightness", "contrast", "saturate", "pixelate",
                 "jpeg_compression"}
SEVERITIES = (1, 2, 3, 4, 5)


def test_the_groups_cover_the_19_corruptions_once():
    assert sorted(n for group in GROUPS.values() for n in group) == sorted(NAMES) == sorted(CORRUPTIONS)
    assert len(COMMON) == 15 and len(EXTRA) == 4


@pytest.mark.parametrize("name", NAMES)
def test_registry_contract(name):
    perturbation = get(name)
    group = next(g for g, members in GROUPS.items() if name in members)
    assert {"image", "imagenet_c", group} <= perturbation.tags
    assert perturbation.parameters.severities == SEVERITIES
    assert "ImageNet-C" in perturbation.code.doc
    picture = test_picture(40, 52)
    out = perturbation(picture, 3, np.random.default_rng(0))
    assert out.shape == picture.shape and out.dtype == np.uint8
    outs = perturbation.apply([picture, picture[:30]], ["a", "b"], 3, seed=0)
    assert [o.shape for o in outs] == [picture.shape, (30, 52, 3)] and all(o.dtype == np.uint8 for o in outs)


@pytest.mark.parametrize("name", NAMES + ("imagenet_c",))
def test_tiny_pictures(name):
    for h, w in ((12, 10), (1, 1), (2, 33)):
        picture = test_picture(h, w)
        for severity in SEVERITIES:
            out = get(name)(picture, severity, np.random.default_rng(severity))
            assert out.shape == (h, w, 3) and out.dtype == np.uint8


@pytest.mark.parametrize("name", NAMES + ("imagenet_c",))
def test_a_batch_of_mixed_sizes_equals_one_by_one(name):
    perturbation = get(name)
    pictures = [test_picture(33, 41, seed=0), test_picture(20, 17, seed=1), test_picture(33, 41, seed=2),
                test_picture(12, 10, seed=3)]
    ids = ["m0", "m1", "m2", "m3"]
    severity = 2  # water for spatter: its longest path
    together = perturbation.apply(pictures, ids, severity, seed=7)
    alone = [perturbation(p, severity, perturbation.rng(7, mid, severity)) for p, mid in zip(pictures, ids)]
    for a, b in zip(together, alone):
        np.testing.assert_array_equal(a, b)
    if name in CORRUPTIONS:  # the two same-size pictures split across chunks of one
        chunked = run_batched(CORRUPTIONS[name], pictures, severity,
                              [perturbation.rng(7, mid, severity) for mid in ids], chunk=1)
        for a, c in zip(together, chunked):
            np.testing.assert_array_equal(a, c)


@pytest.mark.parametrize("name", NAMES)
def test_seeded_per_meme(name):
    perturbation = get(name)
    picture = test_picture(32, 40)
    first = perturbation.apply([picture, picture], ["a", "b"], 3, seed=1)
    again = perturbation.apply([picture, picture], ["a", "b"], 3, seed=1)
    np.testing.assert_array_equal(first[0], again[0])
    np.testing.assert_array_equal(first[1], again[1])
    assert (first[0] != first[1]).any() == (name not in DETERMINISTIC)  # other memes, other draws


def test_imagenet_c_gives_each_picture_one_of_the_15_common_corruptions():
    picture = test_picture(36, 44)
    ids = [f"m{i}" for i in range(30)]
    family = get("imagenet_c")
    outs = family.apply([picture] * len(ids), ids, 3, seed=0)
    candidates = {name: [get(name).apply([picture], [mid], 3, seed=0)[0] for mid in ids] for name in COMMON}
    seen = set()
    for i, out in enumerate(outs):
        # the chosen corruption's own generator is a different stream, so compare with tolerance-free structure:
        # the deterministic corruptions must match exactly when chosen
        exact = [name for name in COMMON if name in DETERMINISTIC and np.array_equal(out, candidates[name][i])]
        seen.update(exact)
        assert not np.array_equal(out, picture)
    assert seen, "no picture got one of the deterministic corruptions in 30 draws"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("name", NAMES)
def test_cuda_matches_cpu(name):
    pictures = [test_picture(45, 71, seed=s) for s in range(3)]
    for severity in SEVERITIES:
        rngs = lambda: [np.random.default_rng(s) for s in range(3)]  # noqa: E731
        on_cpu = run_batched(CORRUPTIONS[name], pictures, severity, rngs(), device="cpu")
        on_gpu = run_batched(CORRUPTIONS[name], pictures, severity, rngs(), device="cuda")
        for a, b in zip(on_cpu, on_gpu):
            limit = 0 if name in ("pixelate", "jpeg_compression") else 1
            assert differences(a, b)["max"] <= limit, (severity, differences(a, b))


def test_the_default_device_follows_the_environment(monkeypatch):
    monkeypatch.setenv("MEMEROBUST_PERTURB_DEVICE", "cpu")
    assert default_device() == torch.device("cpu")
    monkeypatch.delenv("MEMEROBUST_PERTURB_DEVICE")
    assert default_device().type == ("cuda" if torch.cuda.is_available() else "cpu")
