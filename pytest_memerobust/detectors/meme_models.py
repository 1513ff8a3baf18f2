"""MemeCLIP, MemeBLIP2 and MemeBLIP2+TDA: a frozen backbone and a trainable MemeHead.

A checkpoint of this project is a safetensors file whose tensors are `head.*` (and, for small demo backbones,
`backbone.*` / `text_backbone.*`) and whose metadata says which backbone and head parameters it was trained with,
so a checkpoint fully describes the detector it belongs to. The original MemeCLIP Lightning checkpoints map onto
the same head key for key (their frozen CLIP weights are dropped: the backbone is loaded by name).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from ..errors import CheckpointError, ConfigError
from .backbones import Backbone, build_backbone
from .checkpoints import check_weights, load_state_dict
from ..data.meme import is_multilabel
from .base import ModeView, classification_loss, probabilities
from .components import HeadConfig, MemeHead
from .registry import register_architecture

FORMAT = "pytest-memerobust/1"
HEAD_KEYS = ("image_map.", "text_map.", "img_adapter.", "text_adapter.", "tda.", "pre_output.", "classifier.")
MEMECLIP_FROZEN_PREFIXES = ("clip_model.", "text_encoder.", "acc.", "auroc.", "f1.")
DEFAULTS = {
    # MemeCLIP (Shah et al. 2024; DESIGN.md 5): map_dim 1024, ratio 0.2, reduction 4, dropout [0.1, 0.4, 0.2],
    # cosine classifier (scale 30) initialised from "a photo of a {class}." prompts.
    "memeclip": {"params": {"map_dim": 1024, "ratio": 0.2, "reduction": 4, "dropout": [0.1, 0.4, 0.2],
                            "classifier": "cosine", "scale": 30.0, "prompt_template": "a photo of a {}."},
                 "backbone": {"kind": "open_clip", "name": "ViT-L-14", "pretrained": "openai"}},
    # MemeBLIP2 (Liu et al. 2025): the same trainable parts on BLIP-2 features, a linear classifier; TDA optional.
    "memeblip2": {"params": {"map_dim": 1024, "ratio": 0.2, "reduction": 4, "dropout": [0.1, 0.4, 0.2],
                             "classifier": "linear", "tda": False},
                  "backbone": {"kind": "hf-blip2", "name": "Salesforce/blip2-itm-vit-g"}},
}
TRAINING_DEFAULTS = {"lr": 1e-4, "weight_decay": 1e-4, "epochs": 10, "batch_size": 16}


def check_head_params(params: dict) -> None:
    """A card's head parameters of the kind HeadConfig's defaults have (`map_dim = "big"` was a raw torch TypeError
    deep in the build): positive integers, numbers, flags, the classifier's name, dropout as three rates."""
    defaults = HeadConfig().params()
    number = lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)  # noqa: E731
    for key, value in params.items():
        if key not in defaults:
            continue
        default, where = defaults[key], f"model card [params] {key} = {value!r}"
        if isinstance(default, bool):
            ok, want = isinstance(value, bool), "true or false"
        elif isinstance(default, int):
            least = 0 if key.startswith("num_") else 1  # a count of layers may be 0; a width may not
            ok = isinstance(value, int) and not isinstance(value, bool) and value >= least
            want = "a whole number >= 0" if least == 0 else "a positive whole number"
        elif isinstance(default, float):
            ok, want = number(value) and (key != "ratio" or 0 <= value <= 1), "a number" + (
                " in [0, 1]" if key == "ratio" else "")
        elif isinstance(default, tuple):
            ok = (isinstance(value, (list, tuple)) and len(value) == len(default)
                  and all(number(v) and 0 <= v < 1 for v in value))
            want = f"{len(default)} rates in [0, 1)"
        elif key == "classifier":
            ok, want = value in ("cosine", "linear"), '"cosine" or "linear"'
        else:
            ok, want = True, ""
        if not ok:
            raise ConfigError(f"{where}: expected {want} (default {default!r})")


class MemeDetector:
    """Split interface (encode_images, encode_texts, head) for the engine's feature cache, `logits` for training and
    white-box attacks, and `mode` for the channel ablation."""

    def __init__(self, classes: Sequence[str], backbone: Backbone | None, text_backbone: Backbone | None,
                 params: dict, device: str = "cpu"):
        self.classes = list(classes)
        self.backbone, self.text_backbone = backbone, text_backbone or backbone
        if self.text_backbone is None:
            raise ConfigError("a meme detector needs a backbone with a text encoder")
        self.params = dict(params)
        self.device = device
        self.adaptation = None  # what training.adaptation.adapt did to the encoders and head, if it ran
        image_dim = backbone.image_dim if backbone is not None else 0
        check_head_params(params)
        self.head_module = MemeHead(image_dim, self.text_backbone.text_dim, len(self.classes),
                                    HeadConfig.from_params(params))
        for module in self._backbones():
            module.to(device)
        self.head_module.to(device).eval()

    def _backbones(self):
        return [b for b in dict.fromkeys([self.backbone, self.text_backbone]) if b is not None]

    @property
    def modalities(self) -> tuple[str, ...]:
        return ("image", "text") if self.head_module.has_image else ("text",)

    def init_classifier(self, class_names: Sequence[str]) -> bool:
        """MemeCLIP's semantic-aware init; False when the backbone cannot provide it for this map_dim."""
        template = self.params.get("prompt_template")
        if template is None or self.params.get("classifier", "cosine") != "cosine":
            return False
        prompts = [template.format(c.replace("_", " ")) for c in class_names]
        weights = self.text_backbone.class_weights(prompts, self.params.get("map_dim", 1024))
        if weights is None:
            return False
        self.head_module.classifier.apply_weight(weights)
        return True

    def encoder_fingerprints(self) -> dict[str, str]:
        """Per modality read, the fingerprint of the frozen backbone whose output `encode_images` / `encode_texts`
        return: the head (projections, adapters, TDA, classifier) comes after, so every head on the same backbone
        shares these features."""
        out = {"text": self.text_backbone.fingerprint()}
        if "image" in self.modalities:
            out["image"] = self.backbone.fingerprint()
        return out

    @torch.no_grad()
    def encode_images(self, images: Sequence[np.ndarray]) -> np.ndarray:
        if self.backbone is None or not self.head_module.has_image:
            return np.zeros((len(images), 0), dtype=np.float32)
        return self.backbone.encode_images(images).float().cpu().numpy()

    @torch.no_grad()
    def encode_texts(self, texts: Sequence[str]) -> np.ndarray:
        return self.text_backbone.encode_texts(texts).float().cpu().numpy()

    def caption_buckets(self, texts: Sequence[str]) -> list[int]:
        """The length each caption is padded to in a fixed-shape batch (engine/features.shaped_batches)."""
        return self.text_backbone.caption_buckets(texts)

    def logits(self, image_features, text_features):
        return self.head_module(image_features, text_features)

    def head(self, image_features: np.ndarray, text_features: np.ndarray) -> np.ndarray:
        return probabilities(self.logits, image_features, text_features, self.device, is_multilabel(self))

    def predict_proba(self, images, texts) -> np.ndarray:
        return self.head(self.encode_images(images), self.encode_texts(texts))

    def with_mode(self, mode: str) -> ModeView:
        """The same detector (shared weights) with one modality left out of the fusion: the channel ablation."""
        return ModeView(self, mode)

    def token_embedding(self) -> torch.nn.Embedding:
        """The caption encoder's token-embedding table: the hook gradient-guided caption attacks need."""
        return self.text_backbone.token_embedding()

    def _embedding_gradients(self, texts, labels, image_features):
        """(token offsets, d loss / d token embedding [B, T, D]) for the cross-entropy on `labels`."""
        backbone, captured = self.text_backbone, {}

        def keep(module, inputs, output):
            # A fresh leaf whose gradient we read; `* 1` hands the encoder a non-leaf it may modify in place.
            captured["embeddings"] = leaf = output.detach().requires_grad_(True)
            return leaf * 1

        offsets = backbone.token_offsets(texts)
        handle = backbone.token_embedding().register_forward_hook(keep)
        try:
            with torch.enable_grad():
                text = backbone.encode_texts(texts)
                image = torch.as_tensor(image_features, device=self.device)
                logits = self.logits(image, text)
                target = torch.as_tensor(list(labels), device=self.device)
                classification_loss(logits, target, is_multilabel(self), reduction="sum").backward()
        finally:
            handle.remove()
            self.head_module.zero_grad(set_to_none=True)
        if "embeddings" not in captured:
            raise RuntimeError("the text encoder produced features without calling its token embedding "
                               "(a cache in front of it?), so there is no gradient to read")
        return offsets, captured["embeddings"].grad

    def pixel_loss_gradient(self, pixels: torch.Tensor, delta: torch.Tensor, labels, text_features) -> torch.Tensor:
        """d loss / d delta, where `delta` (3 x S x S, in [0, 1] pixel units) is added to every picture of `pixels`
        (the encoder's normalised input) before encoding: the white-box hook of universal adversarial
        perturbations."""
        from .backbones import CLIP_STD

        std = torch.tensor(CLIP_STD, device=self.device).view(3, 1, 1)
        delta = delta.detach().to(self.device).requires_grad_(True)
        try:
            with torch.enable_grad():
                image = self.backbone.encode_pixels(pixels + delta / std)
                logits = self.logits(image, torch.as_tensor(text_features, device=self.device))
                target = torch.as_tensor(list(labels), device=self.device)
                classification_loss(logits, target, is_multilabel(self)).backward()
        finally:
            self.head_module.zero_grad(set_to_none=True)
        return delta.grad.detach()

    def picture_logits(self, values: torch.Tensor, text_features: torch.Tensor) -> torch.Tensor:
        """Logits of pictures given as float 0-255 values [N, 3, H, W] (one size), the caption's features fixed:
        through the backbone's own resize and normalisation, so white-box image attacks see the detector's path."""
        if self.backbone is None or not self.head_module.has_image:
            raise NotImplementedError("this detector reads no pictures")
        image = self.backbone.encode_pixels(self.backbone.fit_pictures(list(values.to(self.device).float())))
        return self.logits(image.float(), text_features.to(self.device).expand(len(values), -1))

    def text_saliency(self, texts: Sequence[str], labels: Sequence[int],
                      image_features: np.ndarray) -> list[list[tuple[int, int, float]]]:
        """Per caption, (start, end, gradient norm) of every token: how strongly the loss on `labels` reacts to that
        token's embedding. The white-box hook of HotFlip."""
        offsets, grads = self._embedding_gradients(texts, labels, image_features)
        norms = grads.norm(dim=-1).cpu().numpy()
        return [[(a, b, float(g)) for (a, b), g in zip(row, n) if b > a] for row, n in zip(offsets, norms)]

    def text_saliency_vectors(self, texts: Sequence[str], labels: Sequence[int], image_features: np.ndarray,
                              span: tuple[int, int]) -> torch.Tensor:
        """The loss gradient for the tokens inside character span `span` (the same span in every caption), averaged
        over tokens and captions: what a trigger search dots with the embedding table."""
        offsets, grads = self._embedding_gradients(texts, labels, image_features)
        start, end = span
        picked = [grads[i, t] for i, row in enumerate(offsets) for t, (a, b) in enumerate(row)
                  if b > a and a < end and b > start]
        return torch.stack(picked).mean(dim=0)

    # -- weights ---------------------------------------------------------------------------------------------
    def trainable_state(self) -> dict:
        return {f"head.{k}": v for k, v in self.head_module.state_dict().items()}

    def _encoders_by_prefix(self) -> dict:
        """Checkpoint prefix -> encoder. A caption-only detector's text encoder is its `backbone`."""
        out = {"backbone": self.backbone or self.text_backbone}
        if self.text_backbone is not out["backbone"]:
            out["text_backbone"] = self.text_backbone
        return out

    def shipped_state(self) -> dict:
        """What a checkpoint must carry: the head (and what an adaptation trained: training.adaptation.
        trained_state), plus base backbones built from an inline config (no name to load), stored as float16 (they
        were rounded to it when built)."""
        adaptation = self.adaptation
        if adaptation is None:
            state = self.trainable_state()
        else:
            from .training.adaptation import trained_state

            state = trained_state(self)
        for prefix, b in self._encoders_by_prefix().items():
            if "config" in b.spec and (adaptation is None or not adaptation.spec.whole_encoders):
                base = b.state_dict() if adaptation is None else adaptation.base_states[prefix]
                state.update({f"{prefix}.{k}": v.half() if v.is_floating_point() else v for k, v in base.items()})
        return state

    def configuration(self) -> dict:
        """What this detector was built with (architecture defaults < card < checkpoint metadata): a card's own
        params can differ from what ran, e.g. the shipped demo weights' small backbone, which their metadata names."""
        encoders = {"backbone": (self.backbone or self.text_backbone).spec}
        if self.backbone is not None and self.text_backbone is not self.backbone:
            encoders["text_backbone"] = self.text_backbone.spec
        return {"params": dict(self.params), **encoders}

    def checkpoint_metadata(self) -> dict:
        meta = {"format": FORMAT, "params": json.dumps(self.params)}
        if self.adaptation is not None:
            from .training.adaptation import adaptation_metadata

            meta.update(adaptation_metadata(self))
        # A caption-only detector records its text encoder as the backbone: `build` reads an image-less backbone
        # as caption-only, so the checkpoint describes the same detector.
        encoders = self.configuration()
        meta.update({key: json.dumps(encoders[key]) for key in ("backbone", "text_backbone") if key in encoders})
        return meta

    def load_state(self, state: dict, source: str, metadata: dict | None = None) -> None:
        """Load a checkpoint's tensors. One whose metadata names an adaptation is loaded the way it was trained:
        the base encoders (checked against the checkpoint's base digests), then the adaptation applied, then its
        tensors (`<encoder>.<method>.*`, or the whole encoders for `full`) and the head."""
        bad = sorted(k for k, v in state.items() if not isinstance(v, torch.Tensor))
        if bad:
            raise CheckpointError(f"{source}: entries that are not tensors: {bad[:5]}")
        from .training.adaptation_methods import parse_adaptation

        recorded = _json_meta(metadata or {}, "adaptation")  # the spec's to_dict(), as adaptation_metadata wrote it
        spec = parse_adaptation(recorded) if recorded else None
        method = spec.name if spec is not None else None
        whole = spec is not None and spec.whole_encoders  # the checkpoint carries the whole encoders
        groups = {"head": {}, "backbone": {}, "text_backbone": {}}
        added = {"backbone": {}, "text_backbone": {}}
        for key, value in state.items():
            prefix, _, rest = key.partition(".")
            if prefix not in groups:
                raise CheckpointError(f"{source}: unexpected key {key!r} (expected head.*, backbone.*, text_backbone.*)")
            if prefix != "head" and method and rest.startswith(f"{method}."):
                added[prefix][rest[len(method) + 1:]] = value
            else:
                groups[prefix][rest] = value
        for name, module in self._encoders_by_prefix().items():
            if groups[name] and not whole:
                _load_into(module, groups[name], f"{source} ({name})", dtype_cast=True)
            elif "config" in module.spec and not groups[name]:
                raise CheckpointError(f"{source} has no {name}.* weights, but the {name} is built from an inline "
                                      "config (random weights): pair this checkpoint with the card it was trained with")
        if spec is not None:
            from .training.adaptation import adapt, check_base_digests

            check_base_digests(self, _json_meta(metadata, "base_digest"), spec, source)
            adapt(self, spec)
            for name, module in self._encoders_by_prefix().items():
                if whole:
                    _load_into(module, groups[name], f"{source} ({name})", dtype_cast=True)
                expected = self.adaptation.added_state(name)
                check_fit(added[name], expected, f"{source} ({name}.{method})")
                with torch.no_grad():
                    for key, value in added[name].items():
                        expected[key].copy_(value.to(expected[key].dtype))
            self.adaptation.freeze()  # loaded for testing: its encoders stay as trained
        _load_into(self.head_module, groups["head"], f"{source} (head)")
        self.head_module.eval()


def check_fit(state: dict, expected: dict, source: str) -> None:
    """A checkpoint's tensors for a module are exactly the ones it has (names and shapes), of weights that fit."""
    missing, unexpected = sorted(set(expected) - set(state)), sorted(set(state) - set(expected))
    wrong = sorted(k for k in set(expected) & set(state) if tuple(expected[k].shape) != tuple(state[k].shape))
    if missing or unexpected or wrong:
        raise CheckpointError(f"{source} does not fit: missing {missing[:5]}, unexpected {unexpected[:5]}, "
                              f"wrong shape {wrong[:5]}" + (" (and more)" if max(map(len, (missing, unexpected, wrong))) > 5 else ""))
    check_weights(state, expected, source)


def _load_into(module: torch.nn.Module, state: dict, source: str, dtype_cast: bool = False) -> None:
    expected = module.state_dict()
    check_fit(state, expected, source)
    if dtype_cast:
        state = {k: v.to(expected[k].dtype) for k, v in state.items()}
    module.load_state_dict(state)


def memeclip_lightning_state(state: dict) -> dict:
    """The original MemeCLIP Lightning state dict as this project's `head.*` keys (frozen CLIP weights dropped)."""
    out = {}
    for key, value in state.items():
        if key.startswith(MEMECLIP_FROZEN_PREFIXES):
            continue
        if not key.startswith(HEAD_KEYS):
            raise CheckpointError(f"unexpected key {key!r} in a MemeCLIP checkpoint")
        out[f"head.{key}"] = value
    return out


def _json_meta(meta: dict, key: str) -> dict:
    try:
        return json.loads(meta[key]) if key in meta else {}
    except json.JSONDecodeError as exc:
        raise CheckpointError(f"checkpoint metadata {key!r} is not JSON: {exc}") from None


def resolve_config(card, metadata: dict | None = None) -> tuple[dict, dict, dict]:
    """(params, backbone spec, text backbone spec): architecture defaults < card < checkpoint metadata."""
    defaults = DEFAULTS[card.architecture]
    params = {**defaults["params"], **card.network.params}
    backbone = dict(card.network.backbone or defaults["backbone"])
    text_backbone = dict(card.network.text_backbone)
    if metadata:
        params.update(_json_meta(metadata, "params"))
        backbone = _json_meta(metadata, "backbone") or backbone
        text_backbone = _json_meta(metadata, "text_backbone") or text_backbone
    return params, backbone, text_backbone


def card_encoders(card) -> dict:
    """A MemeCLIP or MemeBLIP2 card's encoders as `build` gives the detector them (its `_encoders_by_prefix`), read
    from the card without building them: checkpoint prefix -> (backbone spec, towers an adaptation reaches); empty
    for other architectures (hosted, prompted, the demo's), which are checked once built."""
    from .training.layouts import LAYOUTS

    if card.architecture not in DEFAULTS:
        return {}
    _, backbone, text = resolve_config(card)
    layout = LAYOUTS.get(backbone.get("kind"))
    if layout is not None and "vision" not in layout:  # a caption encoder (minilm): a caption-only detector
        return {"backbone": (text or backbone, ["text"])}
    if text:
        return {"backbone": (backbone, ["vision"]), "text_backbone": (text, ["text"])}
    return {"backbone": (backbone, ["text", "vision"])}


def build(card, params: dict, backbone_spec: dict, text_spec: dict, device: str) -> MemeDetector:
    """A detector with fresh head weights (the classifier initialised from class prompts where the backbone can)."""
    backbone = build_backbone(backbone_spec)
    text_backbone = build_backbone(text_spec) if text_spec else None
    if backbone.image_dim == 0:  # a text encoder alone (e.g. minilm): a caption-only detector
        backbone, text_backbone = None, text_backbone or backbone
    detector = MemeDetector(card.classes, backbone, text_backbone, params, device)
    detector.init_classifier(params.get("class_prompts", card.classes))
    return detector


def _factory(card, checkpoint: Path | None, device: str) -> MemeDetector:
    if checkpoint is None:
        return build(card, *resolve_config(card), device)
    state, metadata = load_state_dict(checkpoint)
    ours = metadata.get("format") == FORMAT
    if not ours and any(k.startswith(HEAD_KEYS) for k in state):
        state = memeclip_lightning_state(state)
    elif not ours:
        raise CheckpointError(f"{checkpoint}: neither a pytest-memerobust checkpoint nor a MemeCLIP state dict")
    detector = build(card, *resolve_config(card, metadata if ours else None), device)
    detector.load_state(state, str(checkpoint), metadata if ours else None)
    return detector


register_architecture("memeclip")(_factory)
register_architecture("memeblip2")(_factory)
