"""Image safety classifiers as detectors: ShieldGemma 2 style models, which answer per policy whether a picture
violates it (transformers' `ShieldGemma2ForImageClassification`: P("Yes") after a prompt that states the policy).

Trust-and-safety teams deploy these in front of a feed; testing one here tells them how much a scribble or a
re-compression lets past it. The model reads the picture only (a meme's caption reaches it as rendered text), so
caption conditions are skipped for it, saying so. The harmful class's probability combines the policies' answers:
`max` (flagged when any policy is violated, the way a moderation pipeline acts on it), `mean`, or `noisy_or`
(1 - prod(1 - p), the policies taken as independent chances of harm).

    architecture = "safety-classifier"
    classes = ["non-hateful", "hateful"]
    [backbone]
    kind = "shieldgemma2"
    name = "google/shieldgemma-2-4b-it"          # a hub id or a folder save_pretrained wrote
    [params]
    policies = ["hate", "dangerous", "violence"]  # the processor's built-ins and any custom ones, by name
    custom_policies = { hate = "No Hateful Content: ..." }
    combine = "max"
"""
from __future__ import annotations

import numpy as np

from ..errors import ConfigError
from .cards import ModelCard
from .registry import register_architecture
from .vlm import load_pretrained

PARAMS = ("policies", "custom_policies", "combine")
COMBINE = {
    "max": lambda p: p.max(axis=1),
    "mean": lambda p: p.mean(axis=1),
    "noisy_or": lambda p: 1.0 - np.prod(1.0 - p, axis=1),
}
BUILT_IN_POLICIES = ("dangerous", "sexual", "violence")  # ShieldGemma 2's own (its processor's policy_definitions)


def card_policies(card: ModelCard) -> tuple[tuple[str, ...], dict[str, str], str]:
    """(policies asked, custom policy texts, how they combine), each checked: a wrong one names its key."""
    where = f"model card {card.path or card.name!r}: [params]"
    params = dict(card.network.params)
    unknown = set(params) - set(PARAMS)
    if unknown:
        raise ConfigError(f"{where} unknown key(s) {sorted(unknown)}; a safety-classifier card takes "
                          f"{', '.join(PARAMS)}")
    custom = params.get("custom_policies", {})
    if not isinstance(custom, dict) or not all(isinstance(k, str) and isinstance(v, str) and v.strip()
                                               for k, v in custom.items()):
        raise ConfigError(f"{where} custom_policies must be a table of name = policy text, got {custom!r}")
    policies = params.get("policies", list(BUILT_IN_POLICIES))
    if (not isinstance(policies, list) or not policies or not all(isinstance(p, str) for p in policies)
            or len(set(policies)) != len(policies)):
        raise ConfigError(f"{where} policies must be a non-empty list of distinct policy names, got {policies!r}")
    known = set(BUILT_IN_POLICIES) | set(custom)
    missing = [p for p in policies if p not in known]
    if missing:
        raise ConfigError(f"{where} policies {missing} are neither built in ({', '.join(BUILT_IN_POLICIES)}) nor in "
                          f"custom_policies")
    combine = params.get("combine", "max")
    if combine not in COMBINE:
        raise ConfigError(f"{where} combine must be one of {', '.join(COMBINE)}, got {combine!r}")
    if len(card.classes) != 2:
        raise ConfigError(f"model card {card.name!r}: a safety classifier tells harmful from not, so it takes two "
                          f"classes (not harmful first), got {list(card.classes)}")
    return tuple(policies), dict(custom), combine


class SafetyClassifierDetector:
    """A policy classifier of pictures as a detector of the card's two classes."""

    takes_pictures = "tensor"
    modalities = ("image",)

    def __init__(self, card: ModelCard, device: str = "cpu"):
        self.card, self.classes, self.device = card, tuple(card.classes), device
        self.policies, self.custom_policies, self.combine = card_policies(card)
        from transformers import ShieldGemma2ForImageClassification

        self.processor, self.model = load_pretrained(card, ShieldGemma2ForImageClassification, "safety classifier",
                                                     device)

    def policy_probabilities(self, images) -> np.ndarray:
        """P(the picture violates the policy) [N, policies], one forward pass over every (picture, policy) pair."""
        import torch

        batch = self.processor(images=list(images), policies=list(self.policies),
                               custom_policies=self.custom_policies, return_tensors="pt")
        batch = {k: (v.to(self.device, self.model.dtype) if torch.is_floating_point(v) else v.to(self.device))
                 for k, v in batch.items()}
        with torch.inference_mode():
            out = self.model(**batch, logits_to_keep=1)
        # the processor orders the batch picture by picture, policy by policy; "Yes" (violates) comes first
        return out.probabilities[:, 0].float().reshape(len(images), len(self.policies)).cpu().numpy()

    def predict_proba(self, images, texts=None) -> np.ndarray:
        harmful = COMBINE[self.combine](self.policy_probabilities(images).astype(np.float64))
        return np.stack([1.0 - harmful, harmful], axis=1)


@register_architecture("safety-classifier")
def build_safety_classifier(card: ModelCard, checkpoint, device: str) -> SafetyClassifierDetector:
    if checkpoint is not None:
        raise ConfigError(f"model card {card.name!r}: a safety classifier takes its weights from [backbone] name, "
                          f"not a checkpoint file ({checkpoint})")
    if card.network.backbone.get("kind") != "shieldgemma2":
        raise ConfigError(f"model card {card.name!r}: architecture 'safety-classifier' needs [backbone] kind = "
                          f"\"shieldgemma2\"")
    return SafetyClassifierDetector(card, device)
