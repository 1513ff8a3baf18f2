"""How a detector is adapted to its training data: which weights train, added where (the adaptation benchmark's
methods, `../shared/seeds/004_*.txt`; each a spec class in adaptation_methods.py, registered by name).

`parse_adaptation` reads a spec from a CLI string (`lora:rank=4,alpha=8`) or a card's `[training] adaptation`;
`check_adaptation` refuses a method the detector's encoders cannot take before anything trains; `adapt` changes the
detector in place, each spec applying itself. A checkpoint of an adapted detector holds the head and the
adaptation's own tensors (`trained_state`), and the digest of the base encoder weights they were trained on, so it
loads only onto that base.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from ...errors import CheckpointError, ConfigError
from .adaptation_methods import AdaptationSpec, HeadSpec, parse_adaptation, registered
from .layouts import LAYOUTS, layers


# -- checks ----------------------------------------------------------------------------------------------------------
def _encoders(detector) -> dict:
    """Checkpoint prefix -> (backbone, towers it contributes to the detector's features)."""
    reads_pictures = "image" in detector.modalities
    out = {}
    for prefix, backbone in detector._encoders_by_prefix().items():
        towers = []
        if backbone is detector.text_backbone:
            towers.append("text")
        if backbone is detector.backbone and reads_pictures:
            towers.append("vision")
        out[prefix] = (backbone, towers)
    return out


def check_adaptation(spec: AdaptationSpec, detector) -> None:
    """Refuse, with one ConfigError before any training, a method the detector's encoders cannot take: any but
    `head` on a detector without encoders of its own (hosted, prompted), LoRA or prompts on an encoder kind this
    module cannot reach, a size outside what an encoder allows (limits.py), or a spec on an encoder without the
    layers it names."""
    if not hasattr(detector, "_encoders_by_prefix"):
        if isinstance(spec, HeadSpec):
            return
        raise ConfigError(f"adaptation {spec.name!r}: detector {type(detector).__name__} has no encoders of its own "
                          "that can be adapted (a hosted or prompted model): only its trainable head trains, "
                          "method 'head'")
    encoders = _encoders(detector)
    check_encoders(spec, {prefix: (b.spec, towers) for prefix, (b, towers) in encoders.items()})
    if not spec.adds_tensors:
        return
    for prefix, (backbone, towers) in encoders.items():
        kind = backbone.spec.get("kind")
        for tower in towers:
            if not layers(backbone, LAYOUTS[kind][tower]):
                needless = [name for name, method in registered().items() if not method.adds_tensors]
                raise ConfigError(f"adaptation {spec.name!r}: the {prefix}'s {tower} encoder (kind {kind!r}) has no "
                                  f"transformer layers; methods that need none: {', '.join(needless)}")


def check_encoders(spec: AdaptationSpec, encoders: dict, where: str | None = None) -> None:
    """What check_adaptation can tell from the encoders' specs alone (`encoders`: checkpoint prefix -> (backbone
    spec, towers it adapts)), without building them: the method on each encoder's kind (its `refusal`), and its
    sizes within the limits the encoder's configuration sets; `where` names the flag or card line the spec came
    from."""
    from .limits import tower_limits

    if not spec.adds_tensors:
        return
    for prefix, (backbone, towers) in encoders.items():
        kind = backbone.get("kind")
        why = spec.refusal(kind, towers)
        if why:
            usable = [name for name, method in registered().items() if not method.refusal(kind, towers)]
            raise ConfigError(f"adaptation {spec.name!r} cannot be applied to the {prefix} (backbone kind {kind!r}): "
                              f"{why}. Methods for kind {kind!r}: {', '.join(usable)}")
        limits = tower_limits(backbone, towers, prefix)
        if limits:
            spec.check_sizes(limits, where or f"adaptation {spec.name!r}")


# -- adapting --------------------------------------------------------------------------------------------------------
@dataclass
class Adaptation:
    """What `adapt` did to a detector. `parameters()` is what the optimiser trains; with `encoders_trainable` the
    features change as training goes, so they cannot come from a cache and the encoders run on every batch."""

    spec: AdaptationSpec
    trainable_parameters: int
    encoders_trainable: bool
    base_digests: dict = field(default_factory=dict)  # encoder prefix -> weights_digest() before adaptation
    added_keys: dict = field(default_factory=dict)  # encoder prefix -> names of the tensors the method added
    base_states: dict = field(default_factory=dict, repr=False)  # encoder prefix -> its state before adaptation
    detector: Any = field(default=None, repr=False)

    @property
    def method(self) -> str:
        """The method's name (`lora`): what the checkpoint's own encoder tensors are saved under."""
        return self.spec.name

    def modules(self) -> list[nn.Module]:
        """The head and the encoders (each once)."""
        return [self.detector.head_module, *self.detector._encoders_by_prefix().values()]

    def parameters(self) -> list[nn.Parameter]:
        seen, out = set(), []
        for module in self.modules():
            for p in module.parameters():
                if p.requires_grad and id(p) not in seen:
                    seen.add(id(p))
                    out.append(p)
        return out

    def freeze(self) -> None:
        """Encoder weights fixed from here on (a checkpoint loaded for testing, or training done): no gradient
        accumulates in them under white-box attacks, and their fingerprint is computed once again."""
        for encoder in self.detector._encoders_by_prefix().values():
            for p in encoder.parameters():
                p.requires_grad_(False)
            encoder._fingerprint = None

    def train(self, mode: bool = True) -> None:
        """Training or evaluation mode (dropout) for the head and, where they train, the encoders."""
        self.detector.head_module.train(mode)
        if self.encoders_trainable:
            for encoder in self.detector._encoders_by_prefix().values():
                encoder.train(mode)

    def added_state(self, prefix: str) -> dict[str, nn.Parameter]:
        """The tensors this adaptation added to the encoder saved under `prefix`, by their name in it."""
        params = dict(self.detector._encoders_by_prefix()[prefix].named_parameters())
        return {key: params[key] for key in self.added_keys.get(prefix, ())}

    def snapshot(self) -> dict[str, torch.Tensor]:
        """Copies of everything that trains (`trained_state`'s tensors): the best epoch's weights, kept."""
        return {key: value.detach().clone() for key, value in trained_state(self.detector).items()}

    def restore(self, snapshot: dict[str, torch.Tensor]) -> None:
        """Put a `snapshot` back into the head and the encoders."""
        head = {key[len("head."):]: value for key, value in snapshot.items() if key.startswith("head.")}
        self.detector.head_module.load_state_dict(head)
        for prefix, encoder in self.detector._encoders_by_prefix().items():
            if self.spec.whole_encoders:
                encoder.load_state_dict({key[len(prefix) + 1:]: value for key, value in snapshot.items()
                                         if key.startswith(f"{prefix}.")})
            with torch.no_grad():
                for key, param in self.added_state(prefix).items():
                    param.copy_(snapshot[f"{prefix}.{self.method}.{key}"])
            encoder._fingerprint = None

    def describe(self) -> str:
        """e.g. `adaptation lora (r=8), 73,728 trainable parameters`."""
        return f"adaptation {self.spec.describe()}, {self.trainable_parameters:,} trainable parameters"


def adapt(detector, spec, seed: int = 0) -> Adaptation:
    """Apply `spec` (an AdaptationSpec, or what parse_adaptation reads) to `detector` in place and return what was
    done; the same seed gives the same initial weights. Encoders whose computation changes get a fresh fingerprint
    (the feature cache must not serve the base encoder's features for them)."""
    spec = parse_adaptation(spec)
    check_adaptation(spec, detector)
    if getattr(detector, "adaptation", None) is not None:
        raise ConfigError(f"this detector is already adapted ({detector.adaptation.spec.describe()})")
    if not hasattr(detector, "_encoders_by_prefix"):  # a hosted or prompted model: its head alone, if any
        head = getattr(detector, "head_module", None)
        return Adaptation(spec, sum(p.numel() for p in head.parameters() if p.requires_grad) if head else 0, False)
    encoders = _encoders(detector)
    adaptation = Adaptation(spec, 0, spec.trains_encoders, detector=detector)
    adaptation.base_states = {prefix: dict(b.state_dict()) for prefix, (b, _) in encoders.items()}
    if spec.trains_encoders:
        adaptation.base_digests = {prefix: b.weights_digest() for prefix, (b, _) in encoders.items()}
    generator = torch.Generator().manual_seed(seed)
    spec.adapt_head(detector, seed)
    for prefix, (backbone, towers) in (encoders if spec.trains_encoders else {}).items():
        spec.adapt_encoder(backbone, towers, generator, seed)
        backbone.to(detector.device).eval()
        backbone._fingerprint, backbone._weights_from_spec = None, False
        if spec.adds_tensors:
            adaptation.added_keys[prefix] = [n for n, p in backbone.named_parameters() if p.requires_grad]
    adaptation.trainable_parameters = sum(p.numel() for p in adaptation.parameters())
    detector.adaptation = adaptation
    return adaptation


# -- checkpoints -----------------------------------------------------------------------------------------------------
def trained_state(detector) -> dict:
    """What an adapted detector's checkpoint holds of what trained: the head (`head.*`), and the method's own
    encoder tensors as `<encoder>.<method>.<name>` (e.g. `backbone.lora.model.encoder.layer.0.attention.self.query.
    lora_A.default.weight`); for `full`, every encoder tensor as `<encoder>.<name>`."""
    adaptation = detector.adaptation
    state = detector.trainable_state()
    for prefix, backbone in detector._encoders_by_prefix().items():
        if adaptation.spec.whole_encoders:
            state.update({f"{prefix}.{k}": v for k, v in backbone.state_dict().items()})
        added = adaptation.added_state(prefix)
        state.update({f"{prefix}.{adaptation.method}.{k}": v.detach() for k, v in added.items()})
    return state


def adaptation_metadata(detector) -> dict:
    """Checkpoint metadata entries: `adaptation` (the spec), `trainable_parameters`, and for methods that change
    an encoder `base_digest` (per encoder prefix, the digest of its weights before adaptation)."""
    adaptation = detector.adaptation
    meta = {"adaptation": json.dumps(adaptation.spec.to_dict()),
            "trainable_parameters": str(adaptation.trainable_parameters)}
    if adaptation.base_digests:
        meta["base_digest"] = json.dumps(adaptation.base_digests)
    return meta


def check_base_digests(detector, recorded: dict, spec: AdaptationSpec, source: str) -> None:
    """Refuse, with one CheckpointError naming both digests, a base encoder whose weights are not those the
    checkpoint's adaptation (`spec`) was trained on."""
    encoders = detector._encoders_by_prefix()
    method = spec.name
    for prefix, digest in recorded.items():
        backbone = encoders.get(prefix)
        if backbone is None:
            raise CheckpointError(f"{source} was adapted ({method}) on a {prefix}, which this card's detector lacks")
        if spec.whole_encoders and "config" in backbone.spec:
            continue  # an inline config's random base: the checkpoint carries every weight of the encoder
        here = backbone.weights_digest()
        if here != digest:
            raise CheckpointError(f"{source} was adapted ({method}) from {prefix} base {digest}, this card's {prefix} "
                                  f"is {here}: load it with the card it was trained from")
