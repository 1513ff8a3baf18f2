"""AugMix: the paper's mixing, deterministic per generator, stronger with severity, any picture size."""
import numpy as np
import pytest
from PIL import Image

from augmix_reference import OPERATIONS, augment_and_mix, posterize, solarize  # the PIL reference
from pytest_memerobust.data import demo_dataset
from pytest_memerobust.perturb import get


@pytest.fixture(scope="module")
def pictures():
    return [m.image for m in demo_dataset("test").memes[:30]]


def test_registered_as_rainbow_noise_image_noise_3():
    p = get("augmix")
    assert (p.modality, p.family, p.parameters.severities) == ("image", "augmix", (1, 2, 3, 4, 5))


def test_same_generator_same_output_and_shape_dtype_kept_for_any_size():
    x = np.random.default_rng(1).integers(0, 256, (37, 53, 3), dtype=np.uint8)
    a = get("augmix")(x, 3, np.random.default_rng(5))
    assert a.shape == x.shape and a.dtype == np.uint8
    np.testing.assert_array_equal(a, get("augmix")(x, 3, np.random.default_rng(5)))
    assert not np.array_equal(a, get("augmix")(x, 3, np.random.default_rng(6)))


def test_mixing_weight_zero_gives_the_original_and_one_gives_the_chains(monkeypatch):
    x = np.random.default_rng(2).integers(0, 256, (16, 16, 3), dtype=np.uint8)

    class Fixed:
        """A generator whose Beta draw is fixed, the rest real."""

        def __init__(self, m):
            self.m, self.rng = m, np.random.default_rng(0)

        def beta(self, a, b):
            return self.m

        def __getattr__(self, name):
            return getattr(self.rng, name)

    np.testing.assert_array_equal(augment_and_mix(x, Fixed(0.0)), x)
    assert not np.array_equal(augment_and_mix(x, Fixed(1.0)), x)


def test_stronger_severity_changes_pictures_more_on_average(pictures):
    change = [np.mean([np.abs(get("augmix")(x, s, np.random.default_rng(i)).astype(int) - x).mean()
                       for i, x in enumerate(pictures)]) for s in (1, 3, 5)]
    assert change[0] < change[1] < change[2]


def test_operations_are_the_papers_and_their_magnitudes_grow_with_level():
    assert [op.__name__ for op in OPERATIONS] == ["autocontrast", "equalize", "posterize", "rotate", "solarize",
                                                   "shear_x", "shear_y", "translate_x", "translate_y"]
    gradient = Image.fromarray(np.tile(np.arange(256, dtype=np.uint8), (4, 1))[..., None].repeat(3, -1))
    rng = np.random.default_rng(0)
    # posterize keeps 4 - int(level * 4 / 10) bits: level 9.9 -> 1 bit -> two grey levels
    assert len(np.unique(np.asarray(posterize(gradient, 9.9, rng)))) == 2
    # solarize inverts pixels at or above 256 - int(level * 256 / 10): level 0.1 -> threshold 254
    assert np.asarray(solarize(gradient, 0.1, rng))[0, 255, 0] == 0
    assert np.asarray(solarize(gradient, 0.1, rng))[0, 200, 0] == 200


def test_bad_pictures_are_refused():
    with pytest.raises(ValueError, match="uint8"):
        get("augmix")(np.zeros((8, 8, 3), dtype=np.float32), 1, np.random.default_rng(0))


def test_preview_writes_a_gallery_of_every_severity(tmp_path, capsys):
    from pytest_memerobust.cli import main

    out = tmp_path / "gallery.png"
    assert main(["preview", "--perturbations", "augmix", "contrast", "--tile", "32", "--out", str(out)]) == 0
    sheet = Image.open(out)
    assert sheet.size == (6 * 32, 2 * (32 + 14))  # clean + 5 severities, two perturbations
    assert main(["preview", "--perturbations", "typos", "--out", str(tmp_path / "x.png")]) == 2
    assert "not an image perturbation" in capsys.readouterr().err
    assert not (tmp_path / "x.png").exists()


def test_preview_reads_a_dataset_whose_pictures_lie_outside_its_folder_only_when_asked(tmp_path, capsys):
    from pytest_memerobust.cli import main

    Image.fromarray(np.full((32, 32, 3), 200, dtype=np.uint8)).save(tmp_path / "picture.png")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "memes.csv").write_text("id,image,text,label\nm0,../picture.png,a caption,1\n"
                                                 "m1,../picture.png,another,0\n")
    out = tmp_path / "gallery.png"
    args = ["preview", "--data", str(tmp_path / "data" / "memes.csv"), "--perturbations", "contrast", "--tile", "32",
            "--out", str(out)]
    assert main(args) == 2
    error = capsys.readouterr().err
    assert "leads outside the dataset folder" in error and "(--allow-outside-paths)" in error
    assert not out.exists()
    assert main([*args, "--allow-outside-paths"]) == 0
    assert Image.open(out).size == (6 * 32, 32 + 14)
