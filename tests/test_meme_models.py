"""MemeCLIP, MemeBLIP2 and MemeBLIP2+TDA: the head's arithmetic, the TDA, the backbones through their real loading
code, frozen encoders, checkpoints (ours and MemeCLIP's Lightning layout), the channel ablation, resumable training
and the `memerobust train` command. Everything is built from tiny configs: nothing downloads, nothing is written
outside tmp_path."""
from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from pytest_memerobust import cli
from pytest_memerobust.data import demo_dataset
from pytest_memerobust.detectors import find_card, load_detector
from pytest_memerobust.detectors.backbones import (BACKBONES, HFBlip2Backbone, HFClipBackbone, MiniLMBackbone,
                                                   build_backbone)
from pytest_memerobust.detectors.cards import file_sha256
from pytest_memerobust.detectors.checkpoints import load_state_dict, save_state_dict
from pytest_memerobust.detectors.components import (Adapter, ClassifierConfig, CosineClassifier, HeadConfig,
                                                    HeadDepth, LinearClassifier, LinearProjection, MemeHead,
                                                    TextDenoisingAdapter)
from pytest_memerobust.detectors.base import ModeView
from pytest_memerobust.detectors.meme_models import FORMAT, MemeDetector, build, memeclip_lightning_state, resolve_config
from pytest_memerobust.detectors.tokenizers import MINILM_TOKENIZER
from pytest_memerobust.errors import CheckpointError, ConfigError
from pytest_memerobust.detectors.training import card_toml, save_trained
from pytest_memerobust.run.training.loop import train_head
from malicious import Evil
from minilm_model import require_minilm

ROOT = Path(__file__).resolve().parents[1]
MEME_CARDS = ("memeclip", "memeblip2", "memeblip2-tda")
MODES = ("multimodal", "text", "image")  # MemeHead.mode values: the channel ablation


# --- shared tiny-config helpers --------------------------------------------------------------------------------


def tiny_card(name: str):
    """The card with its [demo] section applied (a tiny backbone built from an inline config) and no checkpoint."""
    return find_card(name).with_demo().without_checkpoint()


def fresh(name: str, seed: int = 0) -> MemeDetector:
    """A freshly built tiny detector (random frozen backbone, fresh head), deterministic in `seed`."""
    torch.manual_seed(seed)
    card = tiny_card(name)
    return build(card, *resolve_config(card), "cpu")


def proba_of(detector, memes) -> np.ndarray:
    return detector.predict_proba([m.image for m in memes], [m.text for m in memes])


def module_sha256(module: torch.nn.Module) -> str:
    h = hashlib.sha256()
    for key, value in sorted(module.state_dict().items()):
        h.update(key.encode() + b"\0" + value.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


def head_snapshot(detector) -> dict:
    return {k: v.detach().clone() for k, v in detector.head_module.state_dict().items()}


def shipped_checkpoint_hashes() -> dict:
    return {p.name: file_sha256(p) for p in sorted((ROOT / "models").glob("*.safetensors"))}


@pytest.fixture(scope="module")
def memes():
    return demo_dataset("test").head(6).memes


@pytest.fixture(scope="module")
def train_val():
    return demo_dataset("train").head(32), demo_dataset("val").head(24)


@pytest.fixture(scope="module")
def text_only():
    """A caption-only detector: the memeblip2 head (map_dim 32) on the MiniLM text encoder, no image encoder."""
    require_minilm()
    card = find_card("memeblip2").without_checkpoint()
    params, _, _ = resolve_config(card)
    torch.manual_seed(0)
    return card, build(card, {**params, "map_dim": 32}, {"kind": "minilm"}, {}, "cpu")


# --- 1. components ----------------------------------------------------------------------------------------------


def test_adapter_is_a_bias_free_relu_bottleneck():
    torch.manual_seed(0)
    adapter = Adapter(16, reduction=4)
    shapes = {k: tuple(v.shape) for k, v in adapter.state_dict().items()}
    assert shapes == {"fc.0.weight": (4, 16), "fc.2.weight": (16, 4)}
    x = torch.randn(5, 16)
    w0, w2 = adapter.fc[0].weight, adapter.fc[2].weight
    expected = torch.relu(torch.relu(x @ w0.T) @ w2.T)
    torch.testing.assert_close(adapter(x), expected)
    assert (adapter(x) >= 0).all()


def test_linear_projection_layout_and_value():
    torch.manual_seed(0)
    proj = LinearProjection(8, 16, num_layers=2, dropout=0.5).eval()
    assert sorted(proj.state_dict()) == ["proj.0.bias", "proj.0.weight", "proj.3.bias", "proj.3.weight"]
    x = torch.randn(4, 8)
    first = x @ proj.proj[0].weight.T + proj.proj[0].bias
    expected = torch.relu(first) @ proj.proj[3].weight.T + proj.proj[3].bias
    torch.testing.assert_close(proj(x), expected)


@pytest.mark.parametrize("classifier", ["cosine", "linear"])
@pytest.mark.parametrize("mode", MODES)
def test_meme_head_output_shape_and_dtype_per_mode(mode, classifier):
    torch.manual_seed(0)
    head = MemeHead(12, 10, 3, HeadConfig(map_dim=16, classifier=ClassifierConfig(classifier))).eval()
    head.mode = mode
    image, text = torch.randn(5, 12), torch.randn(5, 10)
    out = head(image, text)
    assert out.shape == (5, 3) and out.dtype == torch.float32
    assert torch.isfinite(out).all()
    if classifier == "cosine":
        assert out.abs().max() <= head.classifier.scale + 1e-4
    # A left-out modality is never read: passing None for it gives the same logits.
    if mode == "text":
        torch.testing.assert_close(head(None, text), out, rtol=0, atol=0)
    if mode == "image":
        torch.testing.assert_close(head(image, None), out, rtol=0, atol=0)


def test_meme_head_rejects_an_unknown_classifier():
    with pytest.raises(ValueError, match="'mlp'"):
        MemeHead(8, 8, 2, HeadConfig(map_dim=8, classifier=ClassifierConfig("mlp")))


def test_a_cards_flat_head_params_map_onto_the_head_config_and_back():
    """A card's [params] name the head's options flat (MemeCLIP's config names); HeadConfig keeps them in parts."""
    params = {"map_dim": 16, "ratio": 0.3, "reduction": 2, "dropout": [0.0, 0.5, 0.25], "num_mapping_layers": 2,
              "num_pre_output_layers": 0, "classifier": "linear", "scale": 7.0, "tda": True, "tda_dropout": 0.2}
    config = HeadConfig.from_params({**params, "prompt_template": "a photo of a {}."})  # not the head's: left out
    assert config == HeadConfig(16, 0.3, 2, (0.0, 0.5, 0.25), HeadDepth(2, 0), ClassifierConfig("linear", 7.0),
                                True, 0.2)
    assert config.params() == {**params, "dropout": (0.0, 0.5, 0.25)}
    assert HeadConfig.from_params({}) == HeadConfig()


@pytest.mark.parametrize("ratio", [0.0, 0.2, 0.75, 1.0])
def test_mix_is_ratio_weighted_adapter_then_l2_normalised(ratio):
    torch.manual_seed(0)
    head = MemeHead(12, 10, 2, HeadConfig(map_dim=16, ratio=ratio)).eval()
    x = torch.randn(6, 16) * 3
    w0, w2 = head.text_adapter.fc[0].weight, head.text_adapter.fc[2].weight
    adapted = torch.relu(torch.relu(x @ w0.T) @ w2.T)
    mixed = ratio * adapted + (1 - ratio) * x
    expected = mixed / mixed.norm(dim=-1, keepdim=True)
    out = head._mix(x, head.text_adapter)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(out.norm(dim=-1), torch.ones(6))
    if ratio == 0.0:
        torch.testing.assert_close(out, x / x.norm(dim=-1, keepdim=True))


def _manual_head(head: MemeHead, image, text, mode):
    """The whole MemeHead forward pass written out from its parameters (eval mode: dropout off)."""

    def linear(layer, x):
        return x @ layer.weight.T + layer.bias

    def mix(x, adapter):
        adapted = torch.relu(torch.relu(x @ adapter.fc[0].weight.T) @ adapter.fc[2].weight.T)
        m = head.ratio * adapted + (1 - head.ratio) * x
        return m / m.norm(dim=-1, keepdim=True)

    t = mix(linear(head.text_map.proj[0], text), head.text_adapter)
    i = mix(linear(head.image_map.proj[0], image), head.img_adapter)
    fused = {"multimodal": i * t, "text": t, "image": i}[mode]
    pre = torch.relu(linear(head.pre_output[1], fused))
    w = head.classifier.weight
    if isinstance(head.classifier, CosineClassifier):
        return head.classifier.scale * (pre / pre.norm(dim=-1, keepdim=True)) @ (w / w.norm(dim=-1, keepdim=True)).T
    return pre @ w.T + head.classifier.bias


@pytest.mark.parametrize("classifier", ["cosine", "linear"])
@pytest.mark.parametrize("mode", MODES)
def test_head_forward_is_product_fusion_of_the_mixed_features(mode, classifier):
    torch.manual_seed(1)
    head = MemeHead(12, 10, 3, HeadConfig(map_dim=16, ratio=0.3, classifier=ClassifierConfig(classifier, 7.0))).eval()
    if classifier == "linear":
        with torch.no_grad():
            head.classifier.bias.normal_()
    head.mode = mode
    image, text = torch.randn(4, 12), torch.randn(4, 10)
    torch.testing.assert_close(head(image, text), _manual_head(head, image, text, mode), rtol=1e-5, atol=1e-5)


def test_head_in_train_mode_applies_dropout():
    torch.manual_seed(0)
    head = MemeHead(12, 10, 2, HeadConfig(map_dim=64, dropout=(0.5, 0.5, 0.5)))
    image, text = torch.randn(8, 12), torch.randn(8, 10)
    head.train()
    a, b = head(image, text), head(image, text)
    assert not torch.equal(a, b)
    head.eval()
    assert torch.equal(head(image, text), head(image, text))


def test_cosine_classifier_is_scaled_cosine_similarity():
    torch.manual_seed(0)
    clf = CosineClassifier(8, 3, scale=12.5)
    x = torch.randn(5, 8)
    expected = 12.5 * F.cosine_similarity(x[:, None, :], clf.weight[None, :, :], dim=-1)
    torch.testing.assert_close(clf(x), expected)
    torch.testing.assert_close(clf(4.0 * x), clf(x))  # invariant to the feature norm
    # the initial weights are rows of (almost) unit norm, as MemeCLIP's renorm init makes them
    torch.testing.assert_close(clf.weight.norm(dim=-1), torch.ones(3), rtol=1e-4, atol=1e-4)


def test_apply_weight_replaces_the_weights_in_place():
    clf = CosineClassifier(8, 3, scale=30.0)
    param = clf.weight
    new = torch.randn(3, 8, dtype=torch.float64)
    clf.apply_weight(new)
    assert clf.weight is param  # the same Parameter: an optimiser built before still trains it
    assert clf.weight.dtype == torch.float32 and clf.weight.requires_grad
    torch.testing.assert_close(clf.weight.data, new.float())
    new.zero_()  # a copy, not a view of the caller's tensor
    assert clf.weight.abs().sum() > 0
    # each class weight is at cosine 1 with itself
    torch.testing.assert_close(torch.diagonal(clf(clf.weight.detach())), torch.full((3,), 30.0))


def test_linear_classifier_is_affine():
    torch.manual_seed(0)
    clf = LinearClassifier(8, 3)
    assert torch.equal(clf.bias, torch.zeros(3))
    x = torch.randn(4, 8)
    torch.testing.assert_close(clf(x), x @ clf.weight.T)


def test_memeclip_classifier_starts_from_the_class_prompts():
    det = fresh("memeclip")
    card = tiny_card("memeclip")
    params = card.network.params
    prompts = [params["prompt_template"].format(c) for c in params["class_prompts"]]
    assert prompts == ["a photo of a Benign Meme.", "a photo of a Harmful Meme."]
    clip = det.backbone.model
    with torch.no_grad():
        text = clip.text_projection(det.backbone.encode_texts(prompts))
        expected = F.normalize(F.normalize(text, dim=-1) @ clip.visual_projection.weight, dim=-1)
    torch.testing.assert_close(det.head_module.classifier.weight.data, expected)
    # a map_dim other than the vision width cannot take that init
    assert det.backbone.class_weights(prompts, 48) is None


# --- 2. Text Denoising Adapter -----------------------------------------------------------------------------------


def test_tda_with_a_closed_gate_is_the_identity():
    torch.manual_seed(0)
    tda = TextDenoisingAdapter(16, init_scale=5.0)
    assert tda.gate.out_features == 1  # one scalar gate per embedding
    with torch.no_grad():
        tda.gate.weight.zero_()
        tda.gate.bias.fill_(-1e4)
    x = torch.randn(7, 16) * 10
    for train in (False, True):
        tda.train(train)
        assert torch.equal(tda(x), x)


def test_tda_eval_output_matches_the_paper_equations():
    torch.manual_seed(0)
    tda = TextDenoisingAdapter(16, hidden=24, dropout=0.5, init_scale=0.7).eval()
    with torch.no_grad():  # non-trivial LayerNorm affine and gate bias
        tda.norm.weight.normal_()
        tda.norm.bias.normal_()
        tda.gate.bias.fill_(0.3)
    x = torch.randn(5, 16) * 3
    g = torch.sigmoid(x @ tda.gate.weight.T + tda.gate.bias)
    assert g.shape == (5, 1)
    mean, var = x.mean(-1, keepdim=True), x.var(-1, unbiased=False, keepdim=True)
    ln = (x - mean) / torch.sqrt(var + tda.norm.eps) * tda.norm.weight + tda.norm.bias
    hidden = ln @ tda.mlp[0].weight.T + tda.mlp[0].bias
    hidden = 0.5 * hidden * (1 + torch.erf(hidden / math.sqrt(2)))  # exact GELU
    mlp = hidden @ tda.mlp[2].weight.T + tda.mlp[2].bias
    expected = x + 0.7 * g * mlp
    out = tda(x)
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)
    assert not torch.allclose(out, x)  # the correction is really applied


def test_tda_gradient_reaches_scale():
    torch.manual_seed(0)
    tda = TextDenoisingAdapter(16, init_scale=0.1).eval()
    x = torch.randn(5, 16)
    tda(x).sum().backward()
    with torch.no_grad():
        g = torch.sigmoid(tda.gate(x))
        expected = (g * tda.mlp(tda.norm(x))).sum()  # d/ds of sum(x + s * g * MLP(LN(x)))
    assert tda.scale.grad is not None and tda.scale.grad.abs() > 0
    torch.testing.assert_close(tda.scale.grad, expected)
    assert tda.gate.weight.grad.abs().sum() > 0


def test_tda_sits_after_the_text_projection_in_the_head():
    torch.manual_seed(0)
    plain = MemeHead(12, 10, 2, HeadConfig(map_dim=16)).eval()
    with_tda = MemeHead(12, 10, 2, HeadConfig(map_dim=16, tda=True)).eval()
    missing, unexpected = with_tda.load_state_dict(plain.state_dict(), strict=False)
    assert unexpected == [] and all(k.startswith("tda.") for k in missing) and "tda.scale" in missing
    image, text = torch.randn(4, 12), torch.randn(4, 10)
    assert not torch.allclose(with_tda(image, text), plain(image, text))
    with torch.no_grad():
        with_tda.tda.gate.weight.zero_()
        with_tda.tda.gate.bias.fill_(-1e4)
    assert torch.equal(with_tda(image, text), plain(image, text))
    # a classification loss trains the TDA scale
    with torch.no_grad():
        with_tda.tda.gate.bias.fill_(0.0)
    F.cross_entropy(with_tda(image, text), torch.tensor([0, 1, 0, 1])).backward()
    assert with_tda.tda.scale.grad is not None and with_tda.tda.scale.grad.abs() > 0


# --- 3. backbones -------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def hf_folders(tmp_path_factory):
    """Tiny CLIP and BLIP-2 models (the cards' demo configs) saved with save_pretrained next to the MiniLM
    WordPiece tokenizer, plus the in-memory models they were saved from."""
    from transformers import AutoTokenizer, Blip2Config, Blip2ForImageTextRetrieval, CLIPConfig, CLIPModel

    root = tmp_path_factory.mktemp("hf")
    tokenizer = AutoTokenizer.from_pretrained(str(MINILM_TOKENIZER))
    torch.manual_seed(0)
    clip = CLIPModel(CLIPConfig(**tiny_card("memeclip").network.backbone["config"])).eval()
    blip2 = Blip2ForImageTextRetrieval(Blip2Config(**tiny_card("memeblip2").network.backbone["config"])).eval()
    out = {}
    for name, model in (("clip", clip), ("blip2", blip2)):
        model.save_pretrained(root / name)
        tokenizer.save_pretrained(root / name)
        out[name] = (root / name, model)
    out["tokenizer"] = tokenizer
    return out


def _pooled(output):
    return output if torch.is_tensor(output) else output.pooler_output


def test_hf_clip_backbone_from_a_saved_folder(hf_folders, memes):
    folder, model = hf_folders["clip"]
    backbone = build_backbone({"kind": "hf-clip", "name": str(folder)})
    assert isinstance(backbone, HFClipBackbone)
    assert (backbone.image_dim, backbone.text_dim, backbone.vision_width) == (32, 32, 32)
    assert (backbone.image_size, backbone.max_length) == (64, 77)
    images, texts = [m.image for m in memes], [m.text for m in memes]
    fi, ft = backbone.encode_images(images), backbone.encode_texts(texts)
    assert fi.shape == (len(memes), 32) and ft.shape == (len(memes), 32)
    assert fi.dtype == torch.float32 and ft.dtype == torch.float32
    # the same weights as the in-memory model, not rounded (only inline-config backbones are)
    for key, value in model.state_dict().items():
        assert torch.equal(backbone.model.state_dict()[key], value), key
    batch = hf_folders["tokenizer"](texts, padding=True, truncation=True, max_length=77, return_tensors="pt")
    with torch.no_grad():
        pixels = backbone.pixels(images)  # the device resize + crop + normalise (tests/test_pictures.py)
        expected_image = _pooled(model.get_image_features(pixel_values=pixels))
        # the EOT token's final state before the text projection (MemeCLIP's text features)
        expected_text = model.text_model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
        out = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], pixel_values=pixels)
        projected_text = model.text_projection(ft)
    torch.testing.assert_close(fi, expected_image, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ft, expected_text.pooler_output, rtol=1e-5, atol=1e-5)
    # CLIP's own contrastive embeddings are these features projected and normalised
    torch.testing.assert_close(F.normalize(fi, dim=-1), out.image_embeds, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(F.normalize(projected_text, dim=-1), out.text_embeds, rtol=1e-5, atol=1e-5)
    assert not torch.allclose(fi[0], fi[1]) and not torch.allclose(ft[0], ft[1])
    assert backbone.token_embedding().weight.shape == (30522, 32)
    assert all(not p.requires_grad for p in backbone.parameters()) and not backbone.training


def test_hf_blip2_backbone_from_a_saved_folder(hf_folders, memes):
    folder, model = hf_folders["blip2"]
    backbone = build_backbone({"kind": "hf-blip2", "name": str(folder)})
    assert isinstance(backbone, HFBlip2Backbone)
    assert (backbone.image_dim, backbone.text_dim, backbone.image_size, backbone.max_length) == (32, 32, 64, 64)
    images, texts = [m.image for m in memes], [m.text for m in memes]
    fi, ft = backbone.encode_images(images), backbone.encode_texts(texts)
    assert fi.shape == (len(memes), 32) and ft.shape == (len(memes), 32)
    for key, value in model.state_dict().items():
        assert torch.equal(backbone.model.state_dict()[key], value), key
    batch = hf_folders["tokenizer"](texts, padding=True, truncation=True, max_length=64, return_tensors="pt")
    with torch.no_grad():  # BLIP-2's own image-text contrastive forward pass
        out = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                    pixel_values=backbone.pixels(images), use_image_text_matching_head=False)
    assert out.image_embeds.shape == (len(memes), 8, 32)  # one embedding per query token, averaged by the backbone
    torch.testing.assert_close(fi, out.image_embeds.mean(dim=1), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ft, out.text_embeds, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ft.norm(dim=-1), torch.ones(len(memes)))
    assert not torch.allclose(ft[0], ft[1])
    assert backbone.token_embedding().weight.shape == (30522, 32)
    assert all(not p.requires_grad for p in backbone.parameters()) and not backbone.training


def test_inline_config_backbone_is_rounded_to_float16_precision():
    torch.manual_seed(0)
    backbone = build_backbone(tiny_card("memeblip2").network.backbone)
    assert all(torch.equal(p, p.half().float()) for p in backbone.parameters())
    assert all(not p.requires_grad for p in backbone.parameters())


def test_minilm_backbone(text_only):
    _, det = text_only
    backbone = det.text_backbone
    assert isinstance(backbone, MiniLMBackbone)
    assert (backbone.text_dim, backbone.image_dim) == (384, 0)
    captions = ["proud to stand with pride marchers", "keep drag queens away from normal people", "my cat"]
    a = backbone.encode_texts(captions)
    assert a.shape == (3, 384) and a.dtype == torch.float32
    torch.testing.assert_close(a.norm(dim=-1), torch.ones(3))
    assert torch.equal(backbone.encode_texts(captions), a)  # deterministic
    torch.testing.assert_close(backbone.encode_texts(captions[2:])[0], a[2], rtol=1e-5, atol=1e-5)  # batch-free
    cos = a @ a.T
    assert (cos[~torch.eye(3, dtype=torch.bool)] < 0.99).all()  # different captions, different embeddings
    with pytest.raises(NotImplementedError):
        backbone.encode_images([np.zeros((8, 8, 3), np.uint8)])
    assert all(not p.requires_grad for p in backbone.parameters())


@pytest.mark.parametrize("spec", [{"kind": "nope"}, {}, {"kind": "HF-CLIP", "name": "x"}])
def test_build_backbone_unknown_kind_names_the_kinds(spec):
    with pytest.raises(ConfigError) as info:
        build_backbone(spec)
    message = str(info.value)
    assert repr(spec.get("kind")) in message
    for kind in BACKBONES:
        assert kind in message
    assert set(BACKBONES) == {"hf-clip", "open_clip", "hf-blip2", "minilm"}


@pytest.mark.parametrize("kind", ["hf-clip", "hf-blip2", "open_clip"])
def test_build_backbone_without_name_or_config(kind):
    with pytest.raises(ConfigError) as info:
        build_backbone({"kind": kind})
    message = str(info.value)
    assert "'name'" in message and "'config'" in message and kind in message


def test_inline_config_backbone_needs_a_tokenizer():
    spec = dict(tiny_card("memeclip").network.backbone)
    del spec["tokenizer"]
    with pytest.raises(ConfigError, match="tokenizer"):
        build_backbone(spec)


def test_open_clip_missing_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "open_clip", None)  # `import open_clip` raises ImportError, installed or not
    with pytest.raises(ConfigError) as info:
        build_backbone({"kind": "open_clip", "name": "ViT-L-14", "pretrained": "openai"})
    assert "pytest-memerobust[clip]" in str(info.value)
    # the full-size memeclip card (open_clip ViT-L-14) says the same through load_detector
    card = find_card("memeclip").without_checkpoint()
    with pytest.raises(ConfigError, match=r"pytest-memerobust\[clip\]"):
        load_detector(card)


# --- 4. frozen parts stay frozen -----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["memeclip", "memeblip2-tda"])
def test_training_changes_the_head_and_never_the_backbone(name, train_val):
    det = load_detector(name)
    assert all(not p.requires_grad for b in det._backbones() for p in b.parameters())
    assert all(p.requires_grad for p in det.head_module.parameters())
    backbone_hash = module_sha256(det.backbone)
    before = head_snapshot(det)
    train, val = train_val
    result = train_head(det, train, val, epochs=2, lr=1e-2, batch_size=16)
    assert len(result.history) == 2 and result.best_epoch in (1, 2)
    assert module_sha256(det.backbone) == backbone_hash
    assert not det.backbone.training and not det.head_module.training
    assert all(not p.requires_grad for b in det._backbones() for p in b.parameters())
    after = det.head_module.state_dict()
    changed = {k for k in before if not torch.equal(before[k], after[k])}
    assert changed == set(before)  # every head tensor was trained


# --- 5. checkpoint round trip ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["memeclip", "memeblip2-tda"])
def test_checkpoint_round_trip(name, tmp_path, train_val, memes):
    det = fresh(name, seed=3)
    train, val = train_val
    result = train_head(det, train.head(16), val.head(16), epochs=1, lr=1e-2)
    path = tmp_path / f"{name}.safetensors"
    card = tiny_card(name)
    save_trained(det, path, card, result, {"epochs": 1, "lr": 1e-2})
    expected = proba_of(det, memes)

    tensors, meta = load_state_dict(path)
    assert meta["format"] == FORMAT and meta["card"] == name
    assert json.loads(meta["backbone"]) == card.network.backbone == det.backbone.spec
    assert json.loads(meta["params"]) == det.params and json.loads(meta["params"])["map_dim"] == 32
    assert json.loads(meta["hyperparameters"]) == {"epochs": 1, "lr": 1e-2}
    assert "text_backbone" not in meta
    head = det.head_module.state_dict()
    assert {k[5:] for k in tensors if k.startswith("head.")} == set(head)
    assert all(torch.equal(tensors[f"head.{k}"], v) for k, v in head.items())
    backbone_keys = [k for k in tensors if k.startswith("backbone.")]
    assert backbone_keys and all(tensors[k].dtype == torch.float16 for k in backbone_keys
                                 if tensors[k].is_floating_point())

    # the plain card names a full-size backbone: the checkpoint's metadata overrides it with the tiny one
    loaded = load_detector(name, checkpoint=path)
    assert loaded.params["map_dim"] == 32 and loaded.backbone.spec == card.network.backbone
    np.testing.assert_array_equal(proba_of(loaded, memes), expected)
    assert loaded.checkpoint == path and loaded.fingerprint == file_sha256(path)
    # and the card written beside it points at it
    by_card = load_detector(str(path.with_suffix(".card.toml")))
    assert by_card.card.network.checkpoint == path.name and by_card.checkpoint.samefile(path)
    np.testing.assert_array_equal(proba_of(by_card, memes), expected)
    metrics = json.loads(path.with_suffix(".metrics.json").read_text())
    assert metrics["best_epoch"] == result.best_epoch and len(metrics["history"]) == 1


def test_save_state_dict_with_metadata_round_trip(tmp_path, memes):
    det = fresh("memeblip2", seed=5)
    path = tmp_path / "m.safetensors"
    save_state_dict(det.shipped_state(), path, metadata=det.checkpoint_metadata())
    loaded = load_detector("memeblip2", checkpoint=path)
    np.testing.assert_array_equal(proba_of(loaded, memes), proba_of(det, memes))
    assert module_sha256(loaded.backbone) == module_sha256(det.backbone)


@pytest.mark.parametrize("name", MEME_CARDS)
def test_shipped_demo_checkpoints_load(name, memes):
    det = load_detector(name)
    card = find_card(name)
    assert card.network.demo_weights and det.checkpoint == card.checkpoint_path()
    assert det.fingerprint == file_sha256(card.checkpoint_path())
    assert det.modalities == ("image", "text") and det.params["map_dim"] == 32
    assert det.params.get("tda", False) == (name == "memeblip2-tda")
    # what ran is the checkpoint's small backbone, not the card's (reports show `configuration`, not card params)
    ran = det.configuration()
    assert ran["params"]["map_dim"] == 32 != card.network.params["map_dim"] and ran["backbone"] != card.network.backbone
    assert ran["backbone"] == det.backbone.spec and "config" in ran["backbone"]
    proba = proba_of(det, memes)
    assert proba.shape == (len(memes), 2) and proba.dtype == np.float32
    np.testing.assert_allclose(proba.sum(axis=1), 1.0, rtol=0, atol=1e-6)
    assert ((proba >= 0) & (proba <= 1)).all()
    assert len(np.unique(proba.round(6)[:, 1])) > 1  # not a constant
    np.testing.assert_array_equal(proba_of(load_detector(name), memes), proba)


def test_text_only_checkpoint_round_trip(tmp_path, text_only, memes):
    _, det = text_only
    card = tiny_card("memeblip2")  # its backbone is the tiny BLIP-2: the checkpoint must override it
    path = tmp_path / "text.safetensors"
    save_state_dict(det.shipped_state(), path, metadata=det.checkpoint_metadata())
    loaded = load_detector(card, checkpoint=path)
    assert loaded.modalities == ("text",)
    np.testing.assert_array_equal(proba_of(loaded, memes), proba_of(det, memes))


# --- 6. MemeCLIP Lightning checkpoints -------------------------------------------------------------------------------


def _lightning_state(seed: int = 7):
    """A MemeCLIP Lightning state dict fitting the memeclip card's demo head, with frozen CLIP entries."""
    det = fresh("memeclip")
    generator = torch.Generator().manual_seed(seed)
    head = {k: torch.randn(v.shape, generator=generator) for k, v in det.head_module.state_dict().items()}
    assert {"image_map.proj.0.weight", "img_adapter.fc.0.weight", "pre_output.1.weight",
            "classifier.weight"} <= set(head)
    frozen = {"clip_model.visual.proj": torch.randn(32, 32), "text_encoder.token_embedding.weight": torch.randn(50, 32)}
    return head, {**frozen, **head}


@pytest.mark.parametrize("wrapped", [True, False])
def test_memeclip_lightning_checkpoint_loads(tmp_path, memes, wrapped, hf_folders):
    head, state = _lightning_state()
    path = tmp_path / "model.ckpt"
    torch.save({"state_dict": state, "epoch": 3, "hyper_parameters": {"lr": 1e-4}} if wrapped else state, path)
    # A Lightning checkpoint holds no backbone we can use: the card names one to load (here a local folder).
    card = tiny_card("memeclip")
    card = dataclasses.replace(card, network=dataclasses.replace(
        card.network, backbone={"kind": "hf-clip", "name": str(hf_folders["clip"][0])}))
    det = load_detector(card, checkpoint=path)
    loaded = det.head_module.state_dict()
    assert set(loaded) == set(head)
    for key, value in head.items():
        assert torch.equal(loaded[key], value), key
    assert det.checkpoint == path and det.fingerprint == file_sha256(path)
    np.testing.assert_allclose(proba_of(det, memes).sum(axis=1), 1.0, atol=1e-6)


def test_memeclip_lightning_state_mapping():
    head, state = _lightning_state()
    mapped = memeclip_lightning_state({**state, "acc.total": torch.zeros(1), "f1.tp": torch.zeros(1)})
    assert set(mapped) == {f"head.{k}" for k in head}
    assert all(mapped[f"head.{k}"] is v for k, v in head.items())




def test_pickled_object_in_a_ckpt_is_refused_without_running_code(tmp_path):
    marker = tmp_path / "marker"
    head, state = _lightning_state()
    path = tmp_path / "evil.ckpt"
    torch.save({"state_dict": {**state, "classifier.weight": Evil(marker)}, "epoch": 1}, path)
    with pytest.raises(CheckpointError, match="evil.ckpt"):
        load_detector(tiny_card("memeclip"), checkpoint=path)
    assert not marker.exists()
    # the file really would have run code under a plain unpickling
    torch.load(path, weights_only=False)
    assert marker.read_text() == "pwned"


def test_lightning_checkpoint_with_an_unknown_key(tmp_path):
    _, state = _lightning_state()
    path = tmp_path / "model.ckpt"
    torch.save({"state_dict": {**state, "prompt_learner.ctx": torch.zeros(4, 32)}}, path)
    with pytest.raises(CheckpointError, match="'prompt_learner.ctx'"):
        load_detector(tiny_card("memeclip"), checkpoint=path)


def test_lightning_checkpoint_with_frozen_keys_only(tmp_path):
    _, state = _lightning_state()
    path = tmp_path / "model.ckpt"
    torch.save({"state_dict": {k: v for k, v in state.items() if k.startswith("clip_model.")}}, path)
    with pytest.raises(CheckpointError, match="neither"):
        load_detector(tiny_card("memeclip"), checkpoint=path)


@pytest.mark.parametrize("extra, named", [("head.bogus", "bogus"), ("weird.key", "weird.key")])
def test_our_checkpoint_with_an_unknown_key(tmp_path, extra, named):
    det = fresh("memeblip2")
    path = tmp_path / "m.safetensors"
    save_state_dict({**det.shipped_state(), extra: torch.zeros(2)}, path, metadata=det.checkpoint_metadata())
    with pytest.raises(CheckpointError) as info:
        load_detector("memeblip2", checkpoint=path)
    assert named in str(info.value) and "m.safetensors" in str(info.value)


def test_our_checkpoint_with_a_missing_head_key(tmp_path):
    det = fresh("memeblip2")
    path = tmp_path / "m.safetensors"
    state = {k: v for k, v in det.shipped_state().items() if k != "head.classifier.bias"}
    save_state_dict(state, path, metadata=det.checkpoint_metadata())
    with pytest.raises(CheckpointError, match="classifier.bias"):
        load_detector("memeblip2", checkpoint=path)


# --- 7. channel ablation --------------------------------------------------------------------------------------------


def test_mode_views_leave_one_channel_out(memes):
    det = load_detector("memeblip2-tda")
    images, texts = [m.image for m in memes], [m.text for m in memes]
    other_images, other_texts = images[::-1], texts[1:] + texts[:1]
    fi, ft = det.encode_images(images), det.encode_texts(texts)
    fi2, ft2 = det.encode_images(other_images), det.encode_texts(other_texts)
    assert not np.allclose(fi, fi2) and not np.allclose(ft, ft2)
    base = det.head(fi, ft)

    text = det.with_mode("text")
    assert isinstance(text, ModeView) and text.modalities == ("text",) and text.mode == "text"
    np.testing.assert_array_equal(text.head(fi, ft), text.head(fi2, ft))
    np.testing.assert_array_equal(text.head(fi, ft), text.head(np.zeros((len(memes), 0), np.float32), ft))
    np.testing.assert_array_equal(text.predict_proba(images, texts), text.predict_proba(other_images, texts))
    assert not np.allclose(text.head(fi, ft), text.head(fi, ft2))

    image = det.with_mode("image")
    assert image.modalities == ("image",)
    np.testing.assert_array_equal(image.head(fi, ft), image.head(fi, ft2))
    np.testing.assert_array_equal(image.predict_proba(images, texts), image.predict_proba(images, other_texts))
    assert not np.allclose(image.head(fi, ft), image.head(fi2, ft))

    assert not np.allclose(base, det.head(fi2, ft)) and not np.allclose(base, det.head(fi, ft2))
    assert not np.allclose(base, text.head(fi, ft)) and not np.allclose(base, image.head(fi, ft))
    for view in (text, image):
        np.testing.assert_allclose(view.head(fi, ft).sum(axis=1), 1.0, atol=1e-6)
    multimodal = det.with_mode("multimodal")
    assert multimodal.modalities == ("image", "text")
    np.testing.assert_array_equal(multimodal.head(fi, ft), base)

    # using the views leaves the detector itself multimodal
    assert det.head_module.mode == "multimodal"
    np.testing.assert_array_equal(det.head(fi, ft), base)
    np.testing.assert_array_equal(det.predict_proba(images, texts), base)


def test_mode_view_shares_weights_and_restores_the_mode(memes):
    det = load_detector("memeblip2")
    view = det.with_mode("text")
    assert view.head_module is det.head_module
    assert all(p is q for p, q in zip(view.head_module.parameters(), det.head_module.parameters()))
    assert view.fingerprint == det.fingerprint and view.card is det.card and view.classes == det.classes
    fi, ft = det.encode_images([m.image for m in memes]), det.encode_texts([m.text for m in memes])
    before = view.head(fi, ft)
    with torch.no_grad():
        det.head_module.classifier.weight.mul_(3.0)  # a change to the base shows in the view
    assert not np.allclose(view.head(fi, ft), before)
    with pytest.raises(RuntimeError):
        view.logits(torch.as_tensor(fi), torch.zeros(len(memes), 5))  # wrong width: fails inside the head
    assert det.head_module.mode == "multimodal"


@pytest.mark.parametrize("mode", ["audio", "", "Text"])
def test_unknown_mode(mode):
    det = load_detector("memeblip2")
    with pytest.raises(ConfigError) as info:
        det.with_mode(mode)
    assert repr(mode) in str(info.value) and all(m in str(info.value) for m in MODES)


def test_text_only_detector(text_only, memes):
    _, det = text_only
    assert det.modalities == ("text",) and det.backbone is None
    assert isinstance(det.text_backbone, MiniLMBackbone)
    assert not det.head_module.has_image and not hasattr(det.head_module, "image_map")
    with pytest.raises(ConfigError, match="'image'"):
        det.with_mode("image")
    assert det.with_mode("text").modalities == ("text",)

    untouchable = [object()] * len(memes)  # anything read from these would raise
    features = det.encode_images(untouchable)
    assert features.shape == (len(memes), 0) and features.dtype == np.float32
    texts = [m.text for m in memes]
    proba = det.predict_proba(untouchable, texts)
    assert proba.shape == (len(memes), 2)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0, atol=1e-6)
    np.testing.assert_array_equal(det.with_mode("text").predict_proba(untouchable, texts), proba)
    assert not np.allclose(proba, det.predict_proba(untouchable, texts[::-1]))
    meta = det.checkpoint_metadata()
    assert json.loads(meta["backbone"]) == {"kind": "minilm"} and "text_backbone" not in meta
    # MiniLM loads by name: a checkpoint carries the head alone
    assert set(det.shipped_state()) == {f"head.{k}" for k in det.head_module.state_dict()}


# --- 8. resumable training ------------------------------------------------------------------------------------------


def test_interrupted_training_resumes_to_the_same_result(tmp_path, train_val):
    train, val = train_val
    kwargs = dict(epochs=4, lr=3e-3, batch_size=8, seed=11)

    straight = fresh("memeblip2-tda", seed=0)
    full = train_head(straight, train, val, state_path=tmp_path / "full.pt", **kwargs)
    assert full.resumed_from_epoch == 0 and [r["epoch"] for r in full.history] == [1, 2, 3, 4]

    state = tmp_path / "interrupted.pt"
    first = fresh("memeblip2-tda", seed=0)
    part = train_head(first, train, val, state_path=state, **{**kwargs, "epochs": 2})
    assert part.history == full.history[:2]
    saved = torch.load(state, weights_only=True)
    assert saved["epoch"] == 2 and len(saved["history"]) == 2

    second = fresh("memeblip2-tda", seed=0)
    resumed = train_head(second, train, val, state_path=state, **kwargs)
    assert resumed.resumed_from_epoch == 2
    assert resumed.history == full.history
    assert (resumed.best_epoch, resumed.best_val_auroc) == (full.best_epoch, full.best_val_auroc)
    expected = straight.head_module.state_dict()
    for key, value in second.head_module.state_dict().items():
        assert torch.equal(value, expected[key]), key

    # a finished run asked again trains nothing and restores the best weights
    third = fresh("memeblip2-tda", seed=0)
    again = train_head(third, train, val, state_path=state, **kwargs)
    assert again.resumed_from_epoch == 4 and again.history == full.history
    assert all(torch.equal(v, expected[k]) for k, v in third.head_module.state_dict().items())


# --- 9. the `memerobust train` command --------------------------------------------------------------------------------


@pytest.fixture
def small_demo_data(monkeypatch):
    """`--data demo` as the CLI parses it, with each split cut to 40 memes to keep the test quick."""
    from pytest_memerobust.data import reading

    real, asked = reading.load_dataset, []

    def load(spec, **options):
        asked.append(spec)
        return real(spec, **options).head(40)

    monkeypatch.setattr(reading, "load_dataset", load)
    return asked


@pytest.fixture(scope="module")
def cli_demo_run(tmp_path_factory):
    """`memerobust train memeblip2-tda --demo --data demo --epochs 1 --out DIR/x.safetensors --quiet`, once."""
    from pytest_memerobust.data import reading

    out = tmp_path_factory.mktemp("cli") / "x.safetensors"
    shipped = shipped_checkpoint_hashes()
    real, asked = reading.load_dataset, []
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(reading, "load_dataset",
                   lambda spec, **options: asked.append(spec) or real(spec, **options).head(40))
        rc = cli.main(["train", "memeblip2-tda", "--demo", "--data", "demo", "--epochs", "1", "--out", str(out),
                       "--quiet"])
    assert shipped_checkpoint_hashes() == shipped  # --out given: the shipped checkpoints are untouched
    return rc, out, asked


def test_cli_train_demo_with_out(cli_demo_run, memes):
    rc, out, asked = cli_demo_run
    assert rc == 0 and asked == ["demo:train", "demo:val"]
    assert out.is_file() and out.with_suffix(".metrics.json").is_file()
    assert not out.with_suffix(".train-state.pt").exists()
    metrics = json.loads(out.with_suffix(".metrics.json").read_text())
    assert len(metrics["history"]) == 1 and metrics["best_epoch"] == 1
    assert metrics["hyperparameters"] == {"lr": 3e-3, "weight_decay": 1e-4, "epochs": 1, "batch_size": 16}
    _, meta = load_state_dict(out)
    assert meta["card"] == "memeblip2-tda" and json.loads(meta["params"])["tda"] is True
    det = load_detector("memeblip2-tda", checkpoint=out)
    assert det.params["map_dim"] == 32 and det.head_module.tda is not None
    np.testing.assert_allclose(proba_of(det, memes).sum(axis=1), 1.0, atol=1e-6)


def test_cli_train_demo_with_out_writes_a_card(cli_demo_run, memes):
    rc, out, _ = cli_demo_run
    assert rc == 0
    card_path = out.with_suffix(".card.toml")
    assert card_path.is_file()
    det = load_detector(str(card_path))
    assert det.card.network.checkpoint == out.name and det.checkpoint.samefile(out)
    np.testing.assert_array_equal(proba_of(det, memes), proba_of(load_detector("memeblip2-tda", checkpoint=out), memes))


def test_cli_train_custom_card_writes_a_card(tmp_path, small_demo_data, memes):
    card = dataclasses.replace(find_card("memeblip2-tda").with_demo(), name="tiny-tda")
    text = card_toml(card, checkpoint="unused.safetensors")
    text = "\n".join(line for line in text.splitlines() if not line.startswith("checkpoint ="))
    card_path = tmp_path / "cards" / "tiny-tda.toml"
    card_path.parent.mkdir()
    card_path.write_text(text + "\n", encoding="utf-8")
    out = tmp_path / "run" / "y.safetensors"
    out.parent.mkdir()
    rc = cli.main(["train", str(card_path), "--data", "demo", "--epochs", "1", "--batch-size", "8", "--out", str(out),
                   "--quiet"])
    assert rc == 0 and small_demo_data == ["demo:train", "demo:val"]
    written = out.with_suffix(".card.toml")
    assert out.is_file() and out.with_suffix(".metrics.json").is_file() and written.is_file()
    det = load_detector(str(written))
    assert det.card.name == "y" and det.card.network.checkpoint == "y.safetensors"  # named after its checkpoint
    assert det.checkpoint.samefile(out) and det.params["map_dim"] == 32 and det.params["tda"] is True
    assert det.card.network.training["batch_size"] == 8  # the recipe that ran, as in the metrics
    assert json.loads(out.with_suffix(".metrics.json").read_text())["hyperparameters"]["batch_size"] == 8
    np.testing.assert_array_equal(proba_of(det, memes), proba_of(load_detector(str(card_path), checkpoint=out), memes))


def test_cli_train_without_out_fails(tmp_path, capsys):
    shipped = shipped_checkpoint_hashes()
    assert cli.main(["train", "memeblip2-tda", "--data", "demo", "--epochs", "1", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "memerobust: error" in err and "--out" in err
    assert shipped_checkpoint_hashes() == shipped


def test_cli_train_without_data_fails(tmp_path, capsys):
    out = tmp_path / "z.safetensors"
    assert cli.main(["train", "memeblip2-tda", "--out", str(out), "--quiet"]) == 2
    assert "--data" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_a_head_only_checkpoint_on_an_inline_config_card_is_refused(tmp_path):
    """A checkpoint without backbone weights would otherwise run on a random demo backbone without a word."""
    detector = load_detector("memeclip")
    path = tmp_path / "head-only.safetensors"
    save_state_dict(detector.trainable_state(), path, metadata=detector.checkpoint_metadata())
    with pytest.raises(CheckpointError, match="no backbone.* weights"):
        load_detector("memeclip", checkpoint=path)
