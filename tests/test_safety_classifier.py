"""Image safety classifiers as detectors (detectors/safety.py): a tiny random ShieldGemma 2 saved with its processor
and a Gemma-style tokenizer built here, loaded by path through the code a hub id takes; per-policy answers combined
into the harmful class, caption conditions skipped, image conditions judged."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from pytest_memerobust.detectors import ModelCard, Network, load_card, load_detector
from pytest_memerobust.detectors.safety import COMBINE, card_policies
from pytest_memerobust.errors import ConfigError

from tiny_vlms import save_tiny_shieldgemma2

CLASSES = ("non-hateful", "hateful")
HATE = "No Hateful Content: the image shall not attack people for who they are."


def safety_card(folder, **params) -> ModelCard:
    return ModelCard(name="tiny-shield", architecture="safety-classifier", classes=CLASSES,
                     network=Network(params=params, backbone={"kind": "shieldgemma2", "name": str(folder)}))


@pytest.fixture(scope="module")
def tiny_shield(tmp_path_factory):
    return save_tiny_shieldgemma2(tmp_path_factory.mktemp("shieldgemma2"))


def pictures(n: int, size: int = 512) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return [torch.randint(0, 256, (3, size, size), dtype=torch.uint8, generator=g) for _ in range(n)]


@pytest.mark.parametrize("params, culprit", [
    ({"policies": []}, "policies must be a non-empty list"),
    ({"policies": ["violence", "violence"]}, "policies must be a non-empty list of distinct"),
    ({"policies": ["hate"]}, "policies ['hate'] are neither built in"),
    ({"custom_policies": {"hate": 3}}, "custom_policies must be a table of name = policy text"),
    ({"combine": "min"}, "combine must be one of max, mean, noisy_or"),
    ({"threshold": 0.5}, "unknown key(s) ['threshold']"),
])
def test_a_bad_safety_card_is_one_error_naming_the_key(params, culprit):
    with pytest.raises(ConfigError) as err:
        card_policies(safety_card("unused", **params))
    assert culprit in str(err.value) and "[params]" in str(err.value)


def test_the_shipped_card_names_shieldgemma_2_and_a_hate_policy_of_its_own():
    from pathlib import Path

    card = load_card(Path(__file__).resolve().parents[1] / "models" / "shieldgemma-2-4b.toml")
    policies, custom, combine = card_policies(card)
    assert card.network.backbone["name"] == "google/shieldgemma-2-4b-it"
    assert policies == ("hate", "dangerous", "violence")
    assert custom["hate"].startswith("No Hateful Content") and combine == "max"


def test_each_policy_is_asked_and_the_answers_combine_into_the_harmful_class(tiny_shield):
    detector = load_detector(safety_card(tiny_shield, policies=["hate", "violence"], custom_policies={"hate": HATE}))
    images = pictures(3)
    per_policy = detector.policy_probabilities(images)
    assert per_policy.shape == (3, 2) and ((per_policy > 0) & (per_policy < 1)).all()
    # the two policies are different questions, and each picture is answered on its own
    assert not np.allclose(per_policy[:, 0], per_policy[:, 1], atol=1e-4)
    assert not np.allclose(per_policy[0], per_policy[1], atol=1e-4)
    np.testing.assert_allclose(detector.policy_probabilities(images[1:2]), per_policy[1:2], atol=1e-5)
    # max by default: flagged when any policy is violated
    proba = detector.predict_proba(images, ["ignored"] * 3)
    np.testing.assert_allclose(proba[:, 1], per_policy.max(axis=1), atol=1e-6)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0, atol=1e-9)
    for combine, expected in (("mean", per_policy.mean(axis=1)), ("noisy_or", 1 - np.prod(1 - per_policy, axis=1))):
        other = load_detector(safety_card(tiny_shield, policies=["hate", "violence"], custom_policies={"hate": HATE},
                                          combine=combine))
        np.testing.assert_allclose(other.predict_proba(images)[:, 1], expected, atol=1e-5)
    assert set(COMBINE) == {"max", "mean", "noisy_or"}


def test_a_safety_classifier_takes_no_checkpoint_and_needs_its_backbone_kind(tiny_shield, tmp_path):
    from pytest_memerobust.detectors.safety import build_safety_classifier

    with pytest.raises(ConfigError, match="not a checkpoint file"):
        build_safety_classifier(safety_card(tiny_shield), tmp_path / "head.safetensors", "cpu")
    card = ModelCard(name="x", architecture="safety-classifier", classes=CLASSES,
                     network=Network(backbone={"kind": "vlm", "name": str(tiny_shield)}))
    with pytest.raises(ConfigError, match='needs \\[backbone\\] kind = "shieldgemma2"'):
        build_safety_classifier(card, None, "cpu")


def test_rainbow_noise_on_a_tiny_shieldgemma_judges_image_cases_and_skips_caption_ones(pytester, tiny_shield,
                                                                                       tmp_path):
    card = tmp_path / "tiny-shield.toml"
    card.write_text('name = "tiny-shield"\narchitecture = "safety-classifier"\nclasses = ["non-hateful", "hateful"]\n'
                    f'[backbone]\nkind = "shieldgemma2"\nname = "{tiny_shield}"\n[params]\npolicies = ["violence"]\n')
    report = tmp_path / "r.json"
    result = pytester.runpytest(f"--memerobust-model={card}", "--memerobust-limit=8", "--memerobust-bootstrap=20",
                                "--memerobust-batch-size=8", "-p", "no:cacheprovider", f"--memerobust-report={report}",
                                "-rs", "-k", "rainbow and (typos-3 or imagenet_c-3 or jpeg_compression-3)")
    outcomes = result.parseoutcomes()
    out = result.stdout.str()
    assert "errors" not in outcomes and "Traceback" not in out, out[-3000:]
    assert "does not read the text" in out and outcomes.get("skipped", 0) >= 1
    (group,) = [g for g in json.loads(report.read_text())["groups"] if g.get("suite") == "rainbow-noise"]
    rows = {r["condition"] for r in group["results"]}
    assert "image=imagenet_c@3" in rows and "text=typos@3" not in rows
