"""Frozen features are cached under the backbone's fingerprint (weights + preprocessing), not the checkpoint's: a
second head, or a second checkpoint, on the same backbone reads every feature from the cache and encodes nothing,
in test runs and in `memerobust train` alike; a backbone with other weights or preprocessing never does."""
from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from pytest_memerobust.data.demo import demo_dataset
from pytest_memerobust.detectors import ModelCard, Network, find_card, load_detector
from pytest_memerobust.detectors.backbones import build_backbone, files_digest
from pytest_memerobust.detectors.checkpoints import save_state_dict
from pytest_memerobust.detectors.demo import DemoDetector
from pytest_memerobust.detectors.meme_models import MemeDetector
from pytest_memerobust.engine.features import encoder_namespaces
from pytest_memerobust.run.accounting import cache_stats, cache_summary
from pytest_memerobust.run.options import CacheOptions, ComputeOptions, DataOptions, Options
from pytest_memerobust.run.session import RobustnessSession
from pytest_memerobust.detectors.training import save_trained
from pytest_memerobust.run.training.loop import train_head

from test_engine import CountingSplit
from minilm_model import require_minilm
from tiny_backbones import KINDS, card_toml

CLASSES = ("non-hateful", "hateful")
NOTHING = {"image": 0, "text": 0}


def _never(items):
    raise AssertionError(f"encoded {len(items)} inputs that should have come from the store")


def _save(detector, path):
    save_state_dict(detector.shipped_state(), path, metadata=detector.checkpoint_metadata())
    return str(path)


def _two_checkpoints_on_one_backbone(kind, folder):
    """(model, checkpoint A, checkpoint B): two heads of different shapes on the very same frozen backbone."""
    if kind == "demo":  # the shipped head, and a fresh one of the card's shape on the same feature maps
        torch.manual_seed(1)
        fresh = DemoDetector(CLASSES, **find_card("demo").network.params)
        return "demo", None, _save(fresh, folder / "b.safetensors")
    card = folder / f"tiny-{kind}.toml"
    card.write_text(card_toml(kind), encoding="utf-8")
    architecture, params, backbone = KINDS[kind]
    torch.manual_seed(0)
    first = load_detector(ModelCard(name=card.stem, architecture=architecture, classes=CLASSES,
                                    network=Network(params=dict(params), backbone=dict(backbone))))
    second = MemeDetector(CLASSES, first.backbone, None, {**first.params, "map_dim": 16, "tda": True})
    return str(card), _save(first, folder / "a.safetensors"), _save(second, folder / "b.safetensors")


def _run(model, checkpoint, cache_dir, limit=12):
    session = RobustnessSession(Options(models=(model,), checkpoints={model: checkpoint} if checkpoint else {},
                                        data=DataOptions(spec="demo", limit=limit),
                                        compute=ComputeOptions(device="cpu", cache=CacheOptions(folder=cache_dir))))
    return session, session.evaluate(model, "clean")


@pytest.mark.parametrize("kind", ["open_clip", "demo"])
def test_a_second_checkpoint_on_the_same_backbone_reads_every_feature_from_the_cache(tmp_path, kind):
    model, a, b = _two_checkpoints_on_one_backbone(kind, tmp_path)
    first, clean_a = _run(model, a, tmp_path / "cache")
    encoded = cache_stats(first)["encoded"]
    assert encoded["image"] > 0 and encoded["text"] > 0 and cache_stats(first)["disk_hits"] == NOTHING

    second, clean_b = _run(model, b, tmp_path / "cache")
    stats = cache_stats(second)
    assert stats["encoded"] == NOTHING and stats["disk_hits"] == encoded
    assert "encoded 0 pictures and 0 captions" in cache_summary(second)
    assert not np.allclose(clean_a.answers.proba, clean_b.answers.proba)  # another head indeed, on the same features

    # what the cache gave equals what the backbone computes now
    detector, memes = second.detector(model), second.dataset("demo").memes
    store = second.feature_store(model)
    texts, pictures = [m.text for m in memes], [m.picture() for m in memes]
    np.testing.assert_allclose(store.features("text", texts, _never, 64), detector.encode_texts(texts),
                               rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(store.features("image", pictures, _never, 64), detector.encode_images(pictures),
                               rtol=1e-5, atol=1e-6)


def test_a_second_head_trained_on_the_same_minilm_encodes_nothing_and_a_test_run_reuses_it(tmp_path):
    """The issue's case: a second head on the same frozen MiniLM read 0 captions from the cache."""
    require_minilm()
    train, val = demo_dataset("train").head(32), demo_dataset("val").head(24)
    results = []
    for params in ({"map_dim": 32}, {"map_dim": 16, "tda": True}):
        card = ModelCard(name="minilm-head", architecture="memeblip2", classes=CLASSES,
                         network=Network(params=params, backbone={"kind": "minilm"}))
        torch.manual_seed(0)
        detector = load_detector(card)
        result = train_head(detector, train, val, epochs=1, lr=3e-3, cache_dir=tmp_path / "cache")
        results.append(result.feature_cache)
    first, second = results
    assert first["encoded"]["text"] > 0 and first["disk_hits"]["text"] == 0
    assert second["encoded"] == NOTHING and second["disk_hits"]["text"] == first["encoded"]["text"]

    out = tmp_path / "second.safetensors"
    save_trained(detector, out, card, result, {"epochs": 1})
    session = RobustnessSession(Options(models=(str(out.with_suffix(".card.toml")),),
                                        data=DataOptions(spec="demo:train", limit=32),
                                        compute=ComputeOptions(device="cpu",
                                                               cache=CacheOptions(folder=tmp_path / "cache"))))
    session.evaluate(session.options.models[0], "clean")  # the same 32 captions training encoded
    stats = cache_stats(session)
    assert stats["encoded"] == NOTHING and stats["disk_hits"]["text"] == len({m.text for m in train.memes})


def _open_clip(seed):
    torch.manual_seed(seed)
    return build_backbone(KINDS["open_clip"][2])


def test_the_fingerprint_follows_the_weights_and_the_preprocessing_not_the_object():
    backbone = _open_clip(0)
    assert _open_clip(0).fingerprint() == backbone.fingerprint()  # the same seeded random weights
    assert _open_clip(1).fingerprint() != backbone.fingerprint()
    assert backbone.weights_digest().startswith("tensors:")  # an inline config: no file holds its weights

    for attribute, value in (("max_length", 16), ("center_crop", False), ("image_size", 32)):
        other = copy.deepcopy(backbone)
        other._fingerprint = None
        setattr(other, attribute, value)
        assert other.fingerprint() != backbone.fingerprint(), attribute

    # a checkpoint's weights replace the built ones: the fingerprint follows them, and back
    before, state = backbone.fingerprint(), {k: v.clone() for k, v in backbone.state_dict().items()}
    backbone.load_state_dict({k: v + 1 if v.is_floating_point() else v for k, v in state.items()})
    assert backbone.fingerprint() != before
    backbone.load_state_dict(state)
    assert backbone.fingerprint() == before


def test_minilm_is_fingerprinted_by_the_files_it_was_read_from(tmp_path):
    require_minilm()
    minilm = build_backbone({"kind": "minilm"})
    assert minilm.weights_digest().startswith("files:")
    assert build_backbone({"kind": "minilm"}).fingerprint() == minilm.fingerprint()

    one, two = tmp_path / "one", tmp_path / "two"
    for folder, weights in ((one, b"weights"), (two, b"weights")):
        (folder / "sub").mkdir(parents=True)
        (folder / "model.safetensors").write_bytes(weights)
        (folder / "sub" / "config.json").write_text("{}")
    digest = files_digest(sorted(p for p in one.rglob("*") if p.is_file()))
    assert files_digest(sorted(p for p in two.rglob("*") if p.is_file())) == digest  # a copy elsewhere
    (two / "model.safetensors").write_bytes(b"other weights")
    assert files_digest(sorted(p for p in two.rglob("*") if p.is_file())) != digest


def test_namespaces_name_the_backbone_per_modality_and_the_run_s_precision():
    torch.manual_seed(0)
    backbone = _open_clip(0)
    heads = [MemeDetector(CLASSES, backbone, None, {"map_dim": dim}) for dim in (8, 16)]
    (first, persistent), (second, _) = (encoder_namespaces(h, "fp32") for h in heads)
    assert first == second and persistent and set(first) == {"image", "text"}
    assert encoder_namespaces(heads[0], "bf16")[0] != first
    assert encoder_namespaces(MemeDetector(CLASSES, _open_clip(1), None, {"map_dim": 8}), "fp32")[0] != first
    # a caption-only head on the same encoder shares the caption features
    caption_only = MemeDetector(CLASSES, None, backbone, {"map_dim": 8})
    assert encoder_namespaces(caption_only, "fp32")[0] == {"text": first["text"]}


def test_a_detector_that_does_not_name_its_encoders_keeps_the_checkpoint_namespace():
    detector = CountingSplit()
    namespaces, persistent = encoder_namespaces(detector, "fp32")
    assert not persistent  # nothing says which weights computed them: memory only
    detector.fingerprint = "abc123"
    namespaces, persistent = encoder_namespaces(detector, "fp32")
    assert persistent and all("abc123" in n for n in namespaces.values())
