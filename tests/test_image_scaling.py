"""Image-scaling attack (perturb/scaling.py): the resize operator read off the detector is its real resize; a picture
hidden behind a resize without antialiasing stays close to the original at full size while the detector sees the
target; the antialiased default and the picture defences close that hole; outputs are keyed bytes."""
import copy

import numpy as np
import pytest
import torch

from pytest_memerobust.data import demo_dataset
from pytest_memerobust.detectors.defences import Defence
from pytest_memerobust.detectors import ModelCard, Network, load_detector
from pytest_memerobust.engine import Condition
from pytest_memerobust.errors import ConfigError
from pytest_memerobust.perturb import get
from pytest_memerobust.perturb.attacks import AttackContext
from pytest_memerobust.perturb.image_attacks import summary
from pytest_memerobust.perturb.scaling import (EncoderResize, PillowBoxResize, area_resize, detector_resize,
                                               measure, median_filter, scaling_vulnerable)
from pytest_memerobust.data.pictures import encoder_view, pillow_box_resize

from tiny_backbones import BLIP2_TINY, OPEN_CLIP_TINY

SIDE = 512  # pictures of a real size: 16 times the tiny encoder's 32 px, the scale factor the attack needs
KEY = ("image", "image_scaling", 5)


def _detector(resize: str | None):
    config = copy.deepcopy(OPEN_CLIP_TINY)
    config["vision_cfg"]["image_size"] = 32
    backbone = {"kind": "open_clip", "config": config} | ({"resize": resize} if resize else {})
    return load_detector(ModelCard(name=f"tiny-{resize}", architecture="memeclip", classes=("non-hateful", "hateful"),
                                   network=Network(params={"map_dim": 32}, backbone=backbone)))


@pytest.fixture(scope="module")
def memes():
    test, train = demo_dataset("test", size=SIDE).head(3), demo_dataset("train", size=SIDE).head(12)
    training = lambda: ([m.text for m in train.memes], train.labels("hate"), train.memes)  # noqa: E731
    return test, training


@pytest.fixture(scope="module")
def bilinear():
    return _detector("bilinear")


@pytest.fixture(scope="module")
def default():
    return _detector(None)


def _attack(detector, memes, severity=5, rows=None):
    test, training = memes
    rows = range(len(test)) if rows is None else rows
    context = AttackContext(detector, test.labels("hate")[list(rows)], training=training)
    pictures = [test.memes[i].picture() for i in rows]
    out = get("image_scaling").apply(pictures, [test.memes[i].id for i in rows], severity, seed=0, context=context)
    return out, context.outcomes[("image", "image_scaling", severity)], pictures


def test_the_operator_is_the_real_resize():
    picture = torch.randint(0, 256, (3, 150, 100), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    for resize in ("bilinear", "nearest", "area", "bicubic-antialias"):
        for crop in (True, False):
            fit = EncoderResize(32, crop, resize)
            left, right = fit.operator(150, 100, "cpu")
            linear = torch.einsum("si,cij,jt->cst", left, picture.float(), right)
            real = encoder_view([picture], 32, crop, resize)[0]
            # float resizes are the linear map; the default's CPU path resizes uint8, rounding between its passes
            tolerance = 1.0 if resize == "bicubic-antialias" else 1e-4 * 255
            assert (linear.clamp(0, 255) - real).abs().max() <= tolerance, (resize, crop)
    left, right = PillowBoxResize(16).operator(150, 100, "cpu")
    box = pillow_box_resize(picture[None].to(torch.int32), 16, 16)[0].float()
    assert (torch.einsum("si,cij,jt->cst", left, picture.float(), right) - box).abs().max() <= 1.0


def test_the_resize_is_read_off_the_backbone_and_a_config_key(bilinear, default):
    assert detector_resize(bilinear) == EncoderResize(32, True, "bilinear")
    assert detector_resize(default) == EncoderResize(32, True, "bicubic-antialias")
    blip2 = load_detector(ModelCard(name="tiny-blip2", architecture="memeblip2", classes=("non-hateful", "hateful"),
                                    network=Network(params={"map_dim": 32},
                                                    backbone={"kind": "hf-blip2", "tokenizer": "minilm",
                                                              "config": BLIP2_TINY, "resize": "nearest"})))
    assert detector_resize(blip2) == EncoderResize(64, False, "nearest")  # BLIP-2 resizes without a crop
    assert bilinear.backbone.preprocessing()["resize"] == "bilinear"
    assert default.backbone.preprocessing()["resize"] == "bicubic-antialias"
    assert bilinear.encoder_fingerprints()["image"] != default.encoder_fingerprints()["image"]
    with pytest.raises(ConfigError, match="unknown resize 'lanczos'; known: bicubic-antialias, bilinear"):
        _detector("lanczos")


def test_a_detector_whose_resize_is_out_of_sight_is_refused_by_name():
    class Hosted:
        classes = ("non-hateful", "hateful")

    with pytest.raises(ValueError, match="resize Hosted applies.*hosted model resizes on its server"):
        detector_resize(Hosted())


def test_without_antialiasing_the_hidden_target_is_invisible_yet_seen(bilinear, memes):
    attacked, records, clean = _attack(bilinear, memes)
    assert [tuple(a.shape) for a in attacked] == [(3, SIDE, SIDE)] * 3 and attacked[0].dtype == torch.uint8
    assert np.median(measure(records, "psnr_full")) >= 25  # close to the original at full size
    assert np.median(measure(records, "target_error")) <= 2 / 255  # and the detector's view is the target's
    assert scaling_vulnerable(records)
    measured = summary(records)  # what the report's table shows: the case says its preprocessing is vulnerable
    assert measured["hidden"] == 3 and "resize let a target hide in 3 of 3 memes" in measured["flags"][0]
    # the records are what they say: recomputed here from the pictures
    change = attacked[0].float() - clean[0].float()
    assert records[0]["psnr_full"] == pytest.approx(10 * np.log10(255**2 / float((change**2).mean())))
    assert records[0]["linf_full"] == pytest.approx(float(change.abs().max()) / 255)


def test_the_antialiased_default_cannot_hide_it(default, memes):
    _, records, _ = _attack(default, memes)
    assert np.median(measure(records, "target_error")) <= 2 / 255  # the view can be moved only by
    assert np.median(measure(records, "psnr_full")) < 20  # changing the whole picture, visibly
    assert not scaling_vulnerable(records)
    assert summary(records)["hidden"] == 0 and not summary(records)["flags"]


def test_severity_is_the_share_of_the_target_in_the_view(bilinear, memes):
    psnr = [np.median(measure(_attack(bilinear, memes, severity)[1], "psnr_full")) for severity in (1, 3, 5)]
    assert psnr[0] > psnr[1] > psnr[2]  # a smaller share takes a smaller change


def test_same_bytes_twice_and_on_two_halves(bilinear, memes):
    whole = _attack(bilinear, memes)[0]
    again = _attack(bilinear, memes)[0]
    halves = _attack(bilinear, memes, rows=[0])[0] + _attack(bilinear, memes, rows=[1, 2])[0]
    assert all(torch.equal(a, b) and torch.equal(a, c) for a, b, c in zip(whole, again, halves))


def test_a_blank_grey_target_without_training_memes(bilinear, memes):
    test, _ = memes
    context = AttackContext(bilinear, test.labels("hate")[:1])
    out = get("image_scaling").apply([test.memes[0].picture()], [test.memes[0].id], 5, seed=0, context=context)[0]
    view = encoder_view([out], 32, True, "bilinear")[0]
    assert (view - 128).abs().mean() <= 2


@pytest.mark.parametrize("defence", [area_resize, median_filter])
def test_a_picture_defence_brings_the_view_back_to_the_originals(bilinear, memes, defence):
    attacked, _, clean = _attack(bilinear, memes)
    fit = detector_resize(bilinear)

    def distance(a, b):
        return float((fit.view(a) - fit.view(b)).abs().mean()) / 255

    undefended = distance(attacked, clean)
    defended = distance(defence(attacked, bilinear), defence(clean, bilinear))
    assert undefended > 0.1 and defended < 0.25 * undefended, (undefended, defended)
    assert distance(defence(clean, bilinear), clean) < 0.05  # and leaves a clean picture's view nearly as it was


def test_the_engine_reads_pictures_behind_the_defence(bilinear, memes):
    from pytest_memerobust.engine import AttackState, EncodingSettings, Engine

    test, training = memes
    condition = Condition(image="image_scaling", image_severity=5, defence="area_resize")
    assert condition.id == "image=image_scaling@5+defence=area_resize"
    assert Condition.parse(condition.id) == condition
    defended = Engine(bilinear, test,
                      asking=EncodingSettings(defence=Defence.parse("area_resize")),
                      attacks=AttackState(labels=test.labels("hate"), training=training))
    plain = Engine(bilinear, test, attacks=AttackState(labels=test.labels("hate"), training=training))
    attacked = plain.predict(Condition(image="image_scaling", image_severity=5)) - plain.predict(Condition())
    behind = defended.predict(condition) - defended.predict(Condition(defence="area_resize"))
    assert np.abs(behind).max() < 0.25 * np.abs(attacked).max()


def test_a_suites_picture_defence_runs_the_image_cases_behind_it():
    import tomllib
    from pathlib import Path

    from pytest_memerobust.run.suite import parse_suite

    data = tomllib.loads('[suite]\nname = "s"\n[text]\ntypos = [3]\n[image]\nimage_scaling = [3]\n'
                         '[defence]\ntext = ["nfkc"]\nimage = ["area_resize"]\n')
    suite = parse_suite(data, Path("memerobust-s.toml"))
    assert suite.defence == "nfkc+area_resize"
    assert [c.id for c in suite.conditions] == [
        "clean", "text=typos@3", "image=image_scaling@3", "defence=nfkc,area_resize",
        "text=typos@3+defence=nfkc,area_resize", "image=image_scaling@3+defence=nfkc,area_resize"]
