"""Adaptation methods (detectors/training/adaptation.py): head, linear probe, Houlsby adapters, LoRA (peft), CoOp /
VPT prompts and full fine-tuning, on a tiny BERT sentence encoder saved to a folder (named weights, as a real
encoder's are) and on tiny picture-reading backbones. Each method's trainable count, gradients reaching what it
adds, a checkpoint that holds only what trained and reloads to the same predictions, and the refusals."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from pytest_memerobust.detectors import ModelCard, Network, load_detector
from pytest_memerobust.detectors.cards import load_card
from pytest_memerobust.detectors.checkpoints import load_state_dict, save_state_dict
from pytest_memerobust.detectors.training.adaptation import adapt, check_adaptation
from pytest_memerobust.detectors.training.adaptation_methods import parse_adaptation
from pytest_memerobust.detectors.training.layouts import LORA_TARGETS
from pytest_memerobust.errors import CheckpointError, ConfigError
from minilm_model import require_minilm
from tiny_backbones import save_tiny_bert

CAPTIONS = ["a cat sitting on a mat", "they are all the same, send them back", "happy pride month friends"]
LABELS = torch.tensor([0, 1, 0])
CLASSES = ("non-hateful", "hateful")
BUILT_IN_METHODS = ("head", "linear", "adapter", "compacter", "lora", "prompt", "full")


@pytest.fixture(scope="module")
def bert_folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("bert")
    return save_tiny_bert(root / "a", seed=0), save_tiny_bert(root / "b", seed=1)


def _card(backbone: dict, architecture: str = "memeblip2", params=None) -> ModelCard:
    return ModelCard(name="tiny", architecture=architecture, classes=CLASSES,
                     network=Network(params=params or {"map_dim": 32}, backbone=backbone))


def _steps(detector, adaptation, n: int = 3, pictures=None) -> None:
    """A few SGD steps by hand through the encoders (what the training loop does when encoders train)."""
    optimiser = torch.optim.SGD(adaptation.parameters(), lr=0.5)
    for _ in range(n):
        with torch.enable_grad():
            text = detector.text_backbone.encode_texts(CAPTIONS)
            image = (detector.backbone.encode_images(pictures) if pictures is not None
                     else torch.zeros((len(CAPTIONS), 0)))
            loss = torch.nn.functional.cross_entropy(detector.logits(image, text), LABELS)
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()


def _lora_formula(detector, rank: int) -> int:
    """r * (d_in + d_out) for every Linear LoRA wraps."""
    return sum(rank * (m.in_features + m.out_features) for name, m in detector.text_backbone.named_modules()
               if name.endswith("base_layer"))


def test_specs_normalise_with_published_defaults():
    assert parse_adaptation("lora").to_dict() == {"method": "lora", "rank": 8, "alpha": 16, "dropout": 0.0,
                                                  "targets": list(LORA_TARGETS)}
    assert parse_adaptation("lora:rank=4,alpha=8,targets=query+value").to_dict() == {
        "method": "lora", "rank": 4, "alpha": 8, "dropout": 0.0, "targets": ["query", "value"]}
    assert parse_adaptation({"method": "adapter", "reduction": 8}).to_dict() == {"method": "adapter", "reduction": 8}
    assert parse_adaptation("prompt").to_dict() == {"method": "prompt", "tokens": 16}
    assert parse_adaptation("prompt:tokens=4").to_dict() == {"method": "prompt", "tokens": 4}
    assert parse_adaptation("full").to_dict() == {"method": "full"}
    assert parse_adaptation("compacter").to_dict() == {"method": "compacter", "reduction": 16, "phm": 4}
    spec = parse_adaptation("adapter")
    assert parse_adaptation(spec) == spec  # a normalised spec (a checkpoint's) reads back the same


@pytest.mark.parametrize("value, words", [
    ("lora_x", ["unknown adaptation method 'lora_x'", "head, linear, adapter, compacter, lora, prompt, full"]),
    ("lora:rank=0", ["rank = 0", "positive whole number"]),
    ("lora:r=8", ["unknown key(s) r", "rank, alpha, dropout, targets"]),
    ("lora:dropout=1.5", ["dropout = 1.5", "[0, 1)"]),
    ({"method": "lora", "targets": ["dense"]}, ["unknown 'dense'", "query, key, value"]),
    ("adapter:reduction=half", ["reduction = 'half'"]),
    ("compacter:phm=0", ["phm = 0", "positive whole number"]),
    ("prompt:tokens", ["'tokens' is not key=value"]),
    ({"rank": 8}, ["unknown adaptation method None"]),
])
def test_bad_specs_are_refused_naming_the_culprit(value, words):
    with pytest.raises(ConfigError) as info:
        parse_adaptation(value)
    for word in words:
        assert word in str(info.value)


# the tiny BERT is 32 wide: Compacter's 4 Kronecker factors need a bottleneck they divide (32 // 4 = 8)
TINY_SPECS = {"compacter": "compacter:reduction=4,phm=4"}


@pytest.mark.parametrize("method", BUILT_IN_METHODS)
def test_each_method_trains_saves_and_reloads_exactly(method, bert_folders, tmp_path):
    card = _card({"kind": "minilm", "name": str(bert_folders[0])})
    detector = load_detector(card)
    base_fingerprint, base_features = detector.text_backbone.fingerprint(), detector.encode_texts(CAPTIONS)
    head_count = sum(p.numel() for p in detector.head_module.parameters())
    encoder_count = sum(p.numel() for p in detector.text_backbone.parameters())
    spec = parse_adaptation(TINY_SPECS.get(method, method))
    adaptation = adapt(detector, spec, seed=0)

    assert adaptation.method == method and detector.adaptation is adaptation
    assert adaptation.trainable_parameters == sum(p.numel() for p in adaptation.parameters())
    assert adaptation.encoders_trainable == (method in ("adapter", "compacter", "lora", "prompt", "full"))
    if method == "head":
        assert adaptation.trainable_parameters == head_count
    elif method == "linear":
        assert adaptation.trainable_parameters == (32 + 1) * len(CLASSES)  # one Linear over the text features
    elif method == "full":
        assert adaptation.trainable_parameters == head_count + encoder_count
    else:
        assert head_count < adaptation.trainable_parameters < head_count + encoder_count
    if method == "lora":  # r * (d_in + d_out) on q, k, v, o and both MLP projections of both layers
        assert _lora_formula(detector, 8) == 2 * 8 * (4 * (32 + 32) + 2 * (32 + 64))
        assert adaptation.trainable_parameters == head_count + _lora_formula(detector, 8)
    if method == "adapter":  # Houlsby, reduction 16: 32 -> 2 -> 32 with biases, after attention and MLP
        assert adaptation.trainable_parameters == head_count + 2 * 2 * (32 * 2 + 2 + 2 * 32 + 32)
    if method == "compacter":  # PHM down 32 -> 8 and up 8 -> 32 (n = 4): 4^3 rules, 4 factors of 8x2, biases
        phm = (4 ** 3 + 4 * 8 * 2 + 8) + (4 ** 3 + 4 * 2 * 8 + 32)
        assert adaptation.trainable_parameters == head_count + 2 * 2 * phm
    if method == "prompt":
        assert adaptation.trainable_parameters == head_count + 16 * 32

    _steps(detector, adaptation)
    features = detector.encode_texts(CAPTIONS)
    with torch.enable_grad():  # the numpy path the test runs use gives what training sees
        assert torch.equal(torch.as_tensor(features), detector.text_backbone.encode_texts(CAPTIONS).detach())
    moved = float(abs(features - base_features).max())
    if adaptation.encoders_trainable:
        assert moved > 1e-4 and detector.text_backbone.fingerprint() != base_fingerprint
    else:
        assert moved == 0 and detector.text_backbone.fingerprint() == base_fingerprint

    before = detector.predict_proba([None] * len(CAPTIONS), CAPTIONS)
    path = tmp_path / f"{method}.safetensors"
    save_state_dict(detector.shipped_state(), path, detector.checkpoint_metadata())
    state, metadata = load_state_dict(path)
    assert json.loads(metadata["adaptation"]) == spec.to_dict()
    assert int(metadata["trainable_parameters"]) == adaptation.trainable_parameters
    encoder_keys = sorted(k for k in state if not k.startswith("head."))
    if method in ("adapter", "compacter", "lora", "prompt"):  # only what trained: no base encoder tensor
        assert encoder_keys and all(k.startswith(f"backbone.{method}.") for k in encoder_keys)
        assert json.loads(metadata["base_digest"])["backbone"].startswith("files:")
    elif method == "full":
        assert len(encoder_keys) == len(detector.text_backbone.state_dict())
    else:
        assert encoder_keys == [] and "base_digest" not in metadata

    reloaded = load_detector(card, checkpoint=path)
    assert reloaded.adaptation.method == method
    assert reloaded.adaptation.trainable_parameters == adaptation.trainable_parameters
    assert torch.equal(torch.as_tensor(reloaded.predict_proba([None] * len(CAPTIONS), CAPTIONS)),
                       torch.as_tensor(before))
    assert reloaded.text_backbone.fingerprint() == detector.text_backbone.fingerprint()
    assert not any(p.requires_grad for p in reloaded.text_backbone.parameters())  # loaded for testing: fixed


def test_same_seed_same_initial_weights(bert_folders):
    card = _card({"kind": "minilm", "name": str(bert_folders[0])})
    initial = {}
    for seed in (3, 3, 4):
        detector = load_detector(card)
        adapt(detector, parse_adaptation("lora"), seed=seed)
        initial.setdefault(seed, []).append({k: v.clone() for k, v in detector.shipped_state().items()
                                             if ".lora." in k})
    first, again, other = initial[3][0], initial[3][1], initial[4][0]
    assert all(torch.equal(first[k], again[k]) for k in first)
    a_keys = [k for k in first if "lora_A" in k]
    assert a_keys and not all(torch.equal(first[k], other[k]) for k in a_keys)
    assert all(not first[k].any() for k in first if "lora_B" in k)  # B starts at zero, as published


def test_compacters_start_from_the_seed_near_identity(bert_folders):
    """The same seed gives the same PHM rules and factors (a rerun of a training command starts where it did), another
    seed others; and at the start the adapted encoder computes almost what the base did (Houlsby's near-identity)."""
    card = _card({"kind": "minilm", "name": str(bert_folders[0])})
    base = load_detector(card).encode_texts(CAPTIONS)
    initial = {}
    for seed in (3, 3, 4):
        detector = load_detector(card)
        adapt(detector, parse_adaptation(TINY_SPECS["compacter"]), seed=seed)
        initial.setdefault(seed, []).append({k: v.clone() for k, v in detector.shipped_state().items()
                                             if ".compacter." in k})
    first, again, other = initial[3][0], initial[3][1], initial[4][0]
    assert first and all(torch.equal(first[k], again[k]) for k in first)
    assert not all(torch.equal(first[k], other[k]) for k in first if k.endswith(("rules", "factors")))
    moved = float(abs(detector.encode_texts(CAPTIONS) - base).max())
    assert 0 < moved < 1e-3  # features of size ~0.5 move by ~1e-5, as under a Houlsby adapter


def test_a_checkpoint_loaded_onto_another_base_is_refused_naming_both_digests(bert_folders, tmp_path):
    """The checkpoint names its encoder's folder; weights there that are not those it was adapted from (a
    re-download, another model copied in) are refused."""
    import shutil

    base = tmp_path / "encoder"
    shutil.copytree(bert_folders[0], base)
    card = _card({"kind": "minilm", "name": str(base)})
    detector = load_detector(card)
    adapt(detector, parse_adaptation("lora:rank=2"), seed=0)
    path = tmp_path / "lora.safetensors"
    save_state_dict(detector.shipped_state(), path, detector.checkpoint_metadata())
    shutil.rmtree(base)
    shutil.copytree(bert_folders[1], base)
    theirs = detector.adaptation.base_digests["backbone"]
    ours = load_detector(card).text_backbone.weights_digest()
    assert theirs != ours
    with pytest.raises(CheckpointError) as info:
        load_detector(card, checkpoint=path)
    assert theirs in str(info.value) and ours in str(info.value) and "lora" in str(info.value)


def test_the_card_written_beside_the_checkpoint_loads_it(bert_folders, tmp_path):
    from pytest_memerobust.detectors.training import save_trained
    from pytest_memerobust.run.training.loop import TrainingResult

    card = _card({"kind": "minilm", "name": str(bert_folders[0])})
    detector = load_detector(card)
    spec = parse_adaptation("prompt:tokens=4")
    adaptation = adapt(detector, spec, seed=0)
    _steps(detector, adaptation)
    before = detector.predict_proba([None] * len(CAPTIONS), CAPTIONS)
    path = tmp_path / "prompted.safetensors"
    save_trained(detector, path, card, TrainingResult(best_epoch=1, best_val_auroc=0.5),
                 {"adaptation": spec.to_dict()})
    reloaded = load_detector(load_card(path.with_suffix(".card.toml")))
    assert reloaded.adaptation.spec == spec
    assert torch.equal(torch.as_tensor(reloaded.predict_proba([None] * len(CAPTIONS), CAPTIONS)),
                       torch.as_tensor(before))


@pytest.mark.parametrize("kind, method, words", [
    ("open_clip", "lora", ["backbone kind 'open_clip'", "MultiheadAttention",
                           "head, linear, adapter, compacter, full"]),
    ("hf-clip", "prompt", ["backbone kind 'hf-clip'", "end-of-text token",
                           "head, linear, adapter, compacter, lora, full"]),
])
def test_a_method_the_backbone_kind_cannot_take_is_refused_before_training(kind, method, words):
    from tiny_backbones import KINDS

    architecture, params, backbone = KINDS[kind]
    detector = load_detector(_card(dict(backbone), architecture, dict(params)))
    with pytest.raises(ConfigError) as info:
        check_adaptation(parse_adaptation(method), detector)
    for word in words:
        assert word in str(info.value)
    assert detector.adaptation is None


def test_a_detector_without_encoders_takes_only_the_head():
    class Hosted:
        classes = CLASSES

    check_adaptation(parse_adaptation("head"), Hosted())
    with pytest.raises(ConfigError, match="no encoders of its own"):
        check_adaptation(parse_adaptation("lora"), Hosted())


@pytest.mark.parametrize("kind, method", [("hf-clip", "lora"), ("hf-blip2", "prompt")])
def test_a_picture_reading_detector_adapts_both_towers(kind, method, tmp_path):
    """LoRA on a CLIP's text and vision layers; CoOp on BLIP-2's captions with VPT-shallow on its pictures."""
    from tiny_backbones import KINDS

    from pytest_memerobust.data.demo import demo_dataset

    architecture, params, backbone = KINDS[kind]
    card = _card(dict(backbone), architecture, dict(params))
    detector = load_detector(card)
    memes = demo_dataset("train").memes[: len(CAPTIONS)]
    pictures = [m.picture(detector.device) for m in memes]
    base_images = detector.encode_images(pictures)
    adaptation = adapt(detector, parse_adaptation(method), seed=0)
    _steps(detector, adaptation, pictures=pictures)
    images = detector.encode_images(pictures)
    with torch.enable_grad():
        assert torch.equal(torch.as_tensor(images), detector.backbone.encode_images(pictures).detach())
    assert float(abs(images - base_images).max()) > 1e-4
    before = detector.predict_proba(pictures, CAPTIONS)
    path = tmp_path / "adapted.safetensors"
    save_state_dict(detector.shipped_state(), path, detector.checkpoint_metadata())
    reloaded = load_detector(card, checkpoint=path)
    assert torch.equal(torch.as_tensor(reloaded.predict_proba(pictures, CAPTIONS)), torch.as_tensor(before))


@pytest.mark.parametrize("method", ["adapter", "compacter", "lora", "prompt", "full"])
def test_the_real_minilm_adapts_and_reloads(method, tmp_path):
    require_minilm()
    card = _card({"kind": "minilm"})
    detector = load_detector(card)
    base = detector.encode_texts(CAPTIONS)
    adaptation = adapt(detector, parse_adaptation(method), seed=0)
    _steps(detector, adaptation, n=1)
    assert float(abs(detector.encode_texts(CAPTIONS) - base).max()) > 1e-5
    if method == "lora":  # 6 layers of 384 wide, MLP 1536: r * (d_in + d_out) per target
        assert adaptation.trainable_parameters - sum(p.numel() for p in detector.head_module.parameters()) == \
            6 * 8 * (4 * (384 + 384) + 2 * (384 + 1536))
    before = detector.predict_proba([None] * len(CAPTIONS), CAPTIONS)
    path = tmp_path / "minilm.safetensors"
    save_state_dict(detector.shipped_state(), path, detector.checkpoint_metadata())
    reloaded = load_detector(card, checkpoint=path)
    assert torch.equal(torch.as_tensor(reloaded.predict_proba([None] * len(CAPTIONS), CAPTIONS)),
                       torch.as_tensor(before))


def test_a_phm_layer_is_the_sum_of_kronecker_products_and_starts_at_the_adapters_scale():
    """Compacter's PHM layer against torch.kron written out: W = sum_i A_i (x) B_i, y = x W + b; 1/n of the weights
    of the Linear it replaces (plus n^3), and a start as small as a Houlsby adapter's (std 0.01)."""
    from pytest_memerobust.detectors.training.adaptation_methods import PHMLinear

    layer = PHMLinear(384, 24, 4, torch.Generator().manual_seed(0))
    with torch.no_grad():
        layer.bias.normal_()
        reference = sum(torch.kron(layer.rules[i], layer.factors[i]) for i in range(4))
        x = torch.randn(5, 384)
        torch.testing.assert_close(layer.weight(), reference)
        torch.testing.assert_close(layer(x), x @ reference + layer.bias)
    assert sum(p.numel() for p in layer.parameters()) == 4 ** 3 + 384 * 24 // 4 + 24
    assert 0.008 < float(reference.std()) < 0.012


def test_kronecker_factors_that_do_not_divide_the_bottleneck_are_refused(bert_folders):
    detector = load_detector(_card({"kind": "minilm", "name": str(bert_folders[0])}))
    with pytest.raises(ConfigError, match=r"phm = 4 Kronecker factors must divide both the layer width 32 and its "
                                          r"bottleneck 2 \(width // reduction 16\)"):
        adapt(detector, parse_adaptation("compacter"), seed=0)


def test_a_checkpoint_missing_an_adapted_tensor_is_refused(bert_folders, tmp_path):
    card = _card({"kind": "minilm", "name": str(bert_folders[0])})
    detector = load_detector(card)
    adapt(detector, parse_adaptation("adapter"), seed=0)
    state = detector.shipped_state()
    dropped = next(k for k in state if k.startswith("backbone.adapter."))
    del state[dropped]
    path = tmp_path / "adapter.safetensors"
    save_state_dict(state, path, detector.checkpoint_metadata())
    with pytest.raises(CheckpointError, match="does not fit: missing") as info:
        load_detector(card, checkpoint=path)
    assert dropped.removeprefix("backbone.adapter.") in str(info.value)


def test_a_run_on_an_adapted_checkpoint_names_its_method_and_count(bert_folders, tmp_path, pytester):
    """`--memerobust-model=CARD` of a LoRA-trained checkpoint: the report's models table says how it was adapted."""
    from pytest_memerobust.detectors.training import save_trained
    from pytest_memerobust.run.training.loop import TrainingResult

    card = _card({"kind": "minilm", "name": str(bert_folders[0])})
    detector = load_detector(card)
    spec = parse_adaptation("lora:rank=4")
    adaptation = adapt(detector, spec, seed=0)
    path = tmp_path / "lora.safetensors"
    save_trained(detector, path, card, TrainingResult(best_epoch=1, best_val_auroc=0.5),
                 {"adaptation": spec.to_dict()})
    pytester.makefile(".toml", **{"memerobust-adapted": '[suite]\nname = "adapted"\n[text]\ntypos = [2]\n'})
    report = tmp_path / "report.md"
    result = pytester.runpytest(f"--memerobust-model={path.with_suffix('.card.toml')}", "--memerobust-limit=8",
                                "--memerobust-bootstrap=50", f"--memerobust-report={report}", "-p",
                                "no:cacheprovider", ".")
    assert result.ret in (0, 1), result.stdout.str()[-2000:]
    said = f"adaptation lora (r=4), {adaptation.trainable_parameters:,} trainable parameters"
    assert said in report.read_text()
    result.stdout.fnmatch_lines([f"*tiny: {said}*"])  # the terminal says it too


@pytest.mark.parametrize("method", ["linear", "lora", "full"])
def test_a_snapshot_puts_back_the_weights_it_copied(method, bert_folders):
    """What the training loop keeps of its best epoch: head and encoder tensors, restored exactly."""
    detector = load_detector(_card({"kind": "minilm", "name": str(bert_folders[0])}))
    adaptation = adapt(detector, parse_adaptation(method), seed=0)
    _steps(detector, adaptation, n=1)
    kept, proba = adaptation.snapshot(), detector.predict_proba([None] * len(CAPTIONS), CAPTIONS)
    _steps(detector, adaptation, n=2)
    assert not torch.equal(torch.as_tensor(detector.predict_proba([None] * len(CAPTIONS), CAPTIONS)),
                           torch.as_tensor(proba))
    adaptation.restore(kept)
    assert torch.equal(torch.as_tensor(detector.predict_proba([None] * len(CAPTIONS), CAPTIONS)),
                       torch.as_tensor(proba))
