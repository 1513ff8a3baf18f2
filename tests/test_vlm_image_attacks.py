"""White-box image attacks on prompted vision-language models through their label-word logits (detectors/vlm.py's
ProcessorPixels and picture_logits): the processor's preprocessing reproduced in torch within a pixel level, the
class logits those of predict_proba, PGD and the joint attack differentiating a tiny LLaVA, and a family whose
processor is not reproduced (Idefics3's LANCZOS) attacked by queries alone, with the reason said."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from pytest_memerobust.data import demo_dataset
from pytest_memerobust.detectors import load_detector
from pytest_memerobust.perturb import get
from pytest_memerobust.perturb.attacks import AttackContext, CleanInputs
from pytest_memerobust.perturb.image_attacks import LINF_LEVELS, NoGradient

from test_image_attacks import short_attacks  # noqa: F401 (autouse: APGD 20 steps, Square 60 queries)
from test_vlm import vlm_card
from tiny_vlms import save_tiny_vlm

SEVERITY = 1


@pytest.fixture(scope="module")
def memes():
    return demo_dataset("test").head(2).memes


@pytest.fixture(scope="module")
def detectors(tmp_path_factory):
    """family -> a tiny random prompted model of that family, loaded through the `vlm` card."""
    return {family: load_detector(vlm_card(save_tiny_vlm(family, tmp_path_factory.mktemp(family))))
            for family in ("llava", "qwen2_vl", "idefics3")}


def _context(detector, memes):
    clean = CleanInputs(None, [m.picture() for m in memes], captions=[m.text for m in memes])
    return AttackContext(detector, np.asarray([m.labels["hate"] for m in memes]), clean, ids=[m.id for m in memes],
                         seed=0)


def _levels(pixels, reference, std):
    """Largest difference of two normalised pixel tensors, per channel back in 0-255 pixel levels."""
    return float(((pixels - reference).abs() * torch.tensor(std).view(1, 3, 1, 1) * 255).max())


@pytest.mark.parametrize("family", ["llava", "qwen2_vl"])
def test_the_torch_preprocessing_matches_the_processor_s_own_within_a_pixel_level(detectors, memes, family):
    detector = detectors[family]
    image_processor = detector.processor.image_processor
    upscaled = torch.nn.functional.interpolate(memes[0].picture()[None].float(), size=(300, 420), mode="bilinear")
    for picture in [m.picture() for m in memes] + [upscaled[0].round().to(torch.uint8)]:
        reference = image_processor(images=[picture], return_tensors="pt")
        ours = detector.pixels(picture.float()[None])
        assert set(ours) == set(reference.keys())
        mine, theirs = ours["pixel_values"], reference["pixel_values"]
        assert mine.shape == theirs.shape
        if family == "qwen2_vl":  # patches [tokens, 3 * 2 * 14 * 14], channel-major: back to [1, 3, ...]
            torch.testing.assert_close(ours["image_grid_thw"], reference["image_grid_thw"], rtol=0, atol=0)
            mine, theirs = (t.reshape(-1, 3, t.shape[-1] // 3).transpose(0, 1)[None] for t in (mine, theirs))
        # measured 0.67-0.93 levels: the processor rounds each resize pass to uint8, the float path cannot
        assert _levels(mine, theirs, image_processor.image_std) < 1.0
        # the processor run on float values (one unclamped resize) is off by 5-13 levels
        float_run = image_processor(images=[picture.float()], return_tensors="pt")["pixel_values"]
        assert float((float_run - reference["pixel_values"]).abs().max()) > float((
            ours["pixel_values"] - reference["pixel_values"]).abs().max())


@pytest.mark.parametrize("family", ["llava", "qwen2_vl"])
def test_picture_logits_are_predict_proba_s_label_words_and_carry_a_gradient(detectors, memes, family):
    detector = detectors[family]
    pictures = [m.picture() for m in memes]
    values = torch.stack(pictures).float().requires_grad_(True)
    encoded = detector.pictures.pictures_encoded
    logits = detector.picture_logits(values, caption=memes[0].text)
    assert detector.pictures.pictures_encoded == encoded  # the picture cache is bypassed, not filled
    proba = detector.predict_proba(pictures, [memes[0].text] * len(memes))
    np.testing.assert_allclose(torch.softmax(logits, -1).detach().numpy(), proba, atol=2e-5)  # measured 2e-6, 6e-6
    grad = torch.autograd.grad(logits[:, 1].sum() - logits[:, 0].sum(), values)[0]
    assert grad.shape == values.shape and bool(grad.abs().max() > 0)


@pytest.mark.parametrize("name", ["pgd_linf", "co_attack"])
def test_white_box_attacks_differentiate_the_tiny_llava_within_budget_and_deterministically(detectors, memes, name):
    detector = detectors["llava"]
    pictures, ids = [m.picture() for m in memes], [m.id for m in memes]
    context = _context(detector, memes)
    attacked = get(name).apply(pictures, ids, SEVERITY, 0, context)
    again = get(name).apply(pictures, ids, SEVERITY, 0, _context(detector, memes))
    records = context.outcomes[("image", name, SEVERITY)]
    for row, (clean, picture, repeat) in enumerate(zip(pictures, attacked, again)):
        delta = picture.int() - clean.int()
        assert picture.dtype == torch.uint8 and picture.shape == clean.shape
        assert int(delta.abs().max()) <= LINF_LEVELS[SEVERITY - 1]
        # (the joint attack leaves the picture alone when its caption round already fooled the model)
        assert int(delta.abs().max()) > 0 or records[row].get("words_changed", 0) > 0
        assert torch.equal(picture, repeat)
    assert len(records) == 2
    assert not any(r.get("zero_gradient") for r in records.values())
    if name == "co_attack":
        assert all(r["white_box"] for r in records.values())


def test_a_family_whose_processor_is_not_reproduced_is_attacked_by_queries_and_says_why(detectors, memes):
    detector = detectors["idefics3"]
    # its torchvision processor resizes with LANCZOS; transformers 5.17 (on a GPU machine) loads a PIL one instead
    bases = {c.__name__ for c in type(detector.processor.image_processor).__mro__}
    why = "LANCZOS" if "TorchvisionBackend" in bases else "not a torchvision-backend image processor"
    assert "Idefics3ImageProcessor" in detector.no_gradient_reason and why in detector.no_gradient_reason
    pictures, ids = [m.picture() for m in memes], [m.id for m in memes]
    with pytest.raises(NoGradient, match=rf"no differentiable image path .*Idefics3ImageProcessor.*{why}"):
        get("pgd_linf").apply(pictures, ids, SEVERITY, 0, _context(detector, memes))
    with pytest.raises(NoGradient, match=why):  # asked directly, the hook says the same
        detector.picture_logits(torch.stack(pictures).float(), caption=memes[0].text)
    for name in ("square", "strongest_image"):
        context = _context(detector, memes)
        attacked = get(name).apply(pictures, ids, SEVERITY, 0, context)
        records = context.outcomes[("image", name, SEVERITY)]
        assert all(1 <= r["queries"] <= 60 for r in records.values())
        if name == "strongest_image":
            assert all(r["tried"] == ["square"] for r in records.values())
        for clean, picture in zip(pictures, attacked):
            assert int((picture.int() - clean.int()).abs().max()) <= LINF_LEVELS[SEVERITY - 1]
