"""How a detector is adapted to its training data: which weights train, added where (the adaptation benchmark's
methods, `../shared/seeds/004_*.txt`).

    head      the MemeHead on frozen encoders (projections, adapters, TDA, classifier): the default
    linear    a linear probe: one Linear layer over the concatenated frozen features, in place of the MemeHead
    adapter   Houlsby bottleneck adapters (down, GELU, up, residual) after the attention and the MLP of every layer
    compacter the same adapters with PHM layers for down and up (a sum of Kronecker products), as the adaptation
              benchmark ran Compacter: PHM layers only, neither shared across layers nor low-rank
    lora      LoRA (through peft) on the attention q/k/v/o and MLP projections of every layer
    prompt    CoOp context tokens after [CLS] of the caption; VPT-shallow tokens after [CLS] of the picture
    full      every encoder weight trains

The head trains with every method but `linear` (whose probe is the head). A spec is a dict, normalised by
`parse_adaptation` from a CLI string (`lora:rank=4,alpha=8`) or a card's `[training] adaptation`; `check_adaptation`
refuses a method the detector's encoders cannot take before anything trains; `adapt` changes the detector in place.
A checkpoint of an adapted detector holds the head and the adaptation's own tensors (`trained_state`), and the
digest of the base encoder weights they were trained on, so it loads only onto that base.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ...errors import CheckpointError, ConfigError

ADAPTATION_METHODS = ("head", "linear", "adapter", "compacter", "lora", "prompt", "full")
# Methods whose added tensors live inside an encoder (saved as `<encoder>.<method>.<name>`), and those that change
# what an encoder computes (its features cannot come from the cache of the base encoder).
ADDED_TENSOR_METHODS = ("adapter", "compacter", "lora", "prompt")
ENCODER_METHODS = ADDED_TENSOR_METHODS + ("full",)
LORA_TARGETS = ("query", "key", "value", "attention_output", "mlp_in", "mlp_out")
# Published defaults: LoRA (Hu et al. 2021) r 8, alpha 16, no dropout; Houlsby adapters (2019) with the
# VL-Adapter reduction 16; Compacter (Karimi Mahabadi et al. 2021) n = 4 Kronecker factors at the same reduction;
# CoOp (Zhou et al. 2022) 16 context tokens.
DEFAULTS = {
    "head": {}, "linear": {}, "full": {},
    "adapter": {"reduction": 16},
    "compacter": {"reduction": 16, "phm": 4},
    "lora": {"rank": 8, "alpha": 16, "dropout": 0.0, "targets": list(LORA_TARGETS)},
    "prompt": {"tokens": 16},
}
ADAPTER_INIT_STD = 1e-2  # Houlsby's near-identity initialisation
PROMPT_INIT_STD = 0.02  # CoOp's context vectors, N(0, 0.02)


@dataclass(frozen=True)
class Tower:
    """Where one encoder tower's transformer layers are, relative to the backbone module: `layers` matches each
    layer's module name; `projections` names, per LoRA target, the Linear layers inside a layer (paths absent from
    a layer are skipped); `adapter_sites` the modules whose output gets a residual adapter (the attention's output
    projection and the MLP's, before the residual sum); `width` the path of a LayerNorm giving the layer's width
    where a site is not a Linear; `prompt` the module whose output the prompt tokens join ("text": CoOp through the
    backbone's own `text_prompt`, a path: VPT-shallow through a hook on that module), None where a prompt cannot be
    placed simply, `prompt_refusal` saying why."""

    layers: str
    adapter_sites: tuple[str, ...]
    projections: dict | None = None
    width: str | None = None
    prompt: str | None = None
    prompt_refusal: str = ""


_BERT_PROJECTIONS = {"query": ("attention.self.query",), "key": ("attention.self.key",),
                     "value": ("attention.self.value",), "attention_output": ("attention.output.dense",),
                     "mlp_in": ("intermediate.dense",), "mlp_out": ("output.dense",)}
_CLIP_PROJECTIONS = {"query": ("self_attn.q_proj",), "key": ("self_attn.k_proj",), "value": ("self_attn.v_proj",),
                     "attention_output": ("self_attn.out_proj",), "mlp_in": ("mlp.fc1",), "mlp_out": ("mlp.fc2",)}
_CLIP_TEXT_REFUSAL = ("its caption encoder pools the end-of-text token under a causal mask, which context tokens "
                      "placed before it would shift")
_OPEN_CLIP_TOWER = dict(adapter_sites=("ls_1", "ls_2"), width="ln_1", prompt_refusal=_CLIP_TEXT_REFUSAL)
# backbone kind -> tower ("text", "image") -> Tower
LAYOUTS = {
    "minilm": {"text": Tower(r"model\.encoder\.layer\.\d+", ("attention.output.dense", "output.dense"),
                             _BERT_PROJECTIONS, prompt="text")},
    "hf-clip": {tower: Tower(rf"model\.{tower}_model\.encoder\.layers\.\d+", ("self_attn.out_proj", "mlp.fc2"),
                             _CLIP_PROJECTIONS, prompt_refusal=_CLIP_TEXT_REFUSAL)
                for tower in ("text", "vision")},
    "hf-blip2": {"text": Tower(r"model\.qformer\.encoder\.layer\.\d+", ("attention.output.dense", "output.dense"),
                               {**_BERT_PROJECTIONS, "query": ("attention.attention.query",),
                                "key": ("attention.attention.key",), "value": ("attention.attention.value",)},
                               prompt="text"),
                 "vision": Tower(r"model\.vision_model\.encoder\.layers\.\d+", ("self_attn.projection", "mlp.fc2"),
                                 {**_CLIP_PROJECTIONS, "query": ("self_attn.qkv",), "key": ("self_attn.qkv",),
                                  "value": ("self_attn.qkv",), "attention_output": ("self_attn.projection",)},
                                 prompt="model.vision_model.embeddings")},
    # open_clip's attention is torch's MultiheadAttention, whose projections are read as raw weights (no Linear
    # call that LoRA could wrap); its LayerScale slots (ls_1, ls_2) take the adapters.
    "open_clip": {"text": Tower(r"model\.transformer\.resblocks\.\d+", **_OPEN_CLIP_TOWER),
                  "vision": Tower(r"model\.visual\.transformer\.resblocks\.\d+", **_OPEN_CLIP_TOWER)},
}
LORA_REFUSAL = {"open_clip": "its attention is torch's MultiheadAttention, whose q/k/v/o projections are not "
                             "Linear layers LoRA can wrap"}


# -- specs -----------------------------------------------------------------------------------------------------------
def parse_adaptation(value) -> dict:
    """A normalised spec {"method": ..., that method's keys with their defaults} from a CLI string (`lora`,
    `lora:rank=4,alpha=8`, `lora:targets=query+value`, `adapter:reduction=8`, `compacter:phm=4`, `prompt:tokens=8`),
    a card's inline table ({method = "lora", rank = 8, targets = ["query", "value"]}) or a spec already normalised."""
    if isinstance(value, str):
        method, _, rest = value.strip().partition(":")
        given = {}
        for item in filter(None, (part.strip() for part in rest.split(","))):
            key, eq, raw = item.partition("=")
            if not eq:
                raise ConfigError(f"adaptation {value!r}: {item!r} is not key=value")
            given[key.strip()] = _cli_value(key.strip(), raw.strip())
    elif isinstance(value, dict):
        given = dict(value)
        method = given.pop("method", None)
    else:
        raise ConfigError(f"adaptation {value!r}: expected a method name (e.g. \"lora:rank=8\") or a table with "
                          f"`method`; methods: {', '.join(ADAPTATION_METHODS)}")
    if method not in DEFAULTS:
        raise ConfigError(f"unknown adaptation method {method!r}; valid: {', '.join(ADAPTATION_METHODS)}")
    defaults = DEFAULTS[method]
    unknown = sorted(set(given) - set(defaults))
    if unknown:
        keys = ", ".join(defaults) or "none"
        raise ConfigError(f"adaptation {method!r}: unknown key(s) {', '.join(unknown)}; its keys: {keys}")
    spec = {"method": method, **{k: list(v) if isinstance(v, list) else v for k, v in defaults.items()}, **given}
    for key in defaults:
        spec[key] = _checked(method, key, spec[key])
    return spec


def _cli_value(key: str, raw: str):
    if key == "targets":
        return [t.strip() for t in raw.split("+") if t.strip()]
    for cast in (int, float):
        try:
            return cast(raw)
        except ValueError:
            pass
    return raw


def _checked(method: str, key: str, value):
    where = f"adaptation {method!r} {key} = {value!r}"
    whole = isinstance(value, int) and not isinstance(value, bool)
    if key in ("rank", "reduction", "tokens", "phm"):
        if not whole or value < 1:
            raise ConfigError(f"{where}: expected a positive whole number")
        return value
    if key == "alpha":
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            raise ConfigError(f"{where}: expected a positive number")
        return value
    if key == "dropout":
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
            raise ConfigError(f"{where}: expected a rate in [0, 1)")
        return float(value)
    # targets
    targets = [value] if isinstance(value, str) else value
    if not isinstance(targets, (list, tuple)) or not targets:
        raise ConfigError(f"{where}: expected a non-empty list of {', '.join(LORA_TARGETS)}")
    bad = [t for t in targets if t not in LORA_TARGETS]
    if bad or len(set(targets)) != len(targets):
        problem = f"unknown {', '.join(map(repr, bad))}" if bad else "a target named twice"
        raise ConfigError(f"{where}: {problem}; valid targets: {', '.join(LORA_TARGETS)}")
    return list(targets)


def describe(spec: dict) -> str:
    """`lora (r=8)`, `adapter (reduction 16)`, `prompt (16 tokens)`, `head`: the method and its size in a few words."""
    method = spec["method"]
    detail = {"lora": lambda: f"r={spec['rank']}", "adapter": lambda: f"reduction {spec['reduction']}",
              "compacter": lambda: f"reduction {spec['reduction']}, {spec['phm']} Kronecker factors",
              "prompt": lambda: f"{spec['tokens']} tokens"}.get(method)
    return f"{method} ({detail()})" if detail else method


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


def _methods_for(kind: str, towers: list[str]) -> list[str]:
    """The methods an encoder of backbone kind `kind` can take, read through `towers`."""
    layout = LAYOUTS.get(kind)
    if layout is None:
        return ["head", "linear", "full"]
    return ["head", "linear", "adapter", "compacter", *(["lora"] if kind not in LORA_REFUSAL else []),
            *(["prompt"] if all(layout[t].prompt for t in towers) else []), "full"]


def _layers(backbone: nn.Module, tower: Tower) -> list[tuple[str, nn.Module]]:
    pattern = re.compile(tower.layers + r"\Z")
    return [(name, module) for name, module in backbone.named_modules() if pattern.match(name)]


def check_adaptation(spec: dict, detector) -> None:
    """Refuse, with one ConfigError before any training, a method the detector's encoders cannot take: any but
    `head` on a detector without encoders of its own (hosted, prompted), LoRA or prompts on an encoder kind this
    module cannot reach, a size outside what an encoder allows (limits.py), or a spec on an encoder without the
    layers it names."""
    method = spec["method"]
    if not hasattr(detector, "_encoders_by_prefix"):
        if method == "head":
            return
        raise ConfigError(f"adaptation {method!r}: detector {type(detector).__name__} has no encoders of its own "
                          "that can be adapted (a hosted or prompted model): only its trainable head trains, "
                          "method 'head'")
    encoders = _encoders(detector)
    check_encoders(spec, {prefix: (b.spec, towers) for prefix, (b, towers) in encoders.items()})
    if method in ("head", "linear", "full"):
        return
    for prefix, (backbone, towers) in encoders.items():
        kind = backbone.spec.get("kind")
        for tower in towers:
            if not _layers(backbone, LAYOUTS[kind][tower]):
                raise ConfigError(f"adaptation {method!r}: the {prefix}'s {tower} encoder (kind {kind!r}) has no "
                                  f"transformer layers; methods that need none: head, linear, full")


def check_encoders(spec: dict, encoders: dict, where: str | None = None) -> None:
    """What check_adaptation can tell from the encoders' specs alone (`encoders`: checkpoint prefix -> (backbone
    spec, towers it adapts)), without building them: the method on each encoder's kind, and its sizes within the
    limits the encoder's configuration sets; `where` names the flag or card line the spec came from."""
    from .limits import check_sizes, tower_limits

    method = spec["method"]
    if method in ("head", "linear", "full"):
        return
    for prefix, (backbone, towers) in encoders.items():
        kind = backbone.get("kind")
        layout, methods = LAYOUTS.get(kind), _methods_for(kind, towers)
        if method not in methods:
            reasons = [LORA_REFUSAL.get(kind, "") if method == "lora" else ""] + [
                f"{t} tower: {layout[t].prompt_refusal}" for t in towers if layout and not layout[t].prompt]
            why = next((f": {r}" for r in reasons if r), ": no layout of its transformer layers is known")
            raise ConfigError(f"adaptation {method!r} cannot be applied to the {prefix} (backbone kind {kind!r}){why}. "
                              f"Methods for kind {kind!r}: {', '.join(methods)}")
        check_sizes(spec, tower_limits(backbone, towers, prefix), where or f"adaptation {method!r}")


# -- adapting --------------------------------------------------------------------------------------------------------
class ResidualAdapter(nn.Module):
    """Houlsby's bottleneck adapter on the output of `inner`: h = y + up(GELU(down(y))), y = inner(x); with `phm`
    Kronecker factors, down and up are PHM layers (Compacter's)."""

    def __init__(self, inner: nn.Module, dim: int, bottleneck: int, generator: torch.Generator, phm: int = 0):
        super().__init__()
        self.inner = inner
        if phm:
            self.down, self.up = PHMLinear(dim, bottleneck, phm, generator), PHMLinear(bottleneck, dim, phm, generator)
            return
        self.down, self.up = nn.Linear(dim, bottleneck), nn.Linear(bottleneck, dim)
        for layer in (self.down, self.up):
            layer.weight.data = _truncated(layer.weight.shape, ADAPTER_INIT_STD, generator)
            nn.init.zeros_(layer.bias)

    def forward(self, *args, **kwargs):
        out = self.inner(*args, **kwargs)
        return out + self.up(F.gelu(self.down(out)))


class PHMLinear(nn.Module):
    """A parameterized hypercomplex multiplication layer (Zhang et al. 2021; Compacter's): y = x W + b with
    W = sum_i A_i (x) B_i, A_i n x n, B_i (in/n) x (out/n): about 1/n of a Linear's weights. A starts Glorot-uniform
    as in Compacter (E[A^2] = 1/n), B from N(0, ADAPTER_INIT_STD) truncated at 2 sigma: each entry of W sums n
    products, so W starts at the plain adapter's scale (near identity)."""

    def __init__(self, in_features: int, out_features: int, n: int, generator: torch.Generator):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        bound = (6 / (2 * n)) ** 0.5  # Glorot-uniform on each n x n rule
        self.rules = nn.Parameter(torch.rand((n, n, n), generator=generator) * 2 * bound - bound)
        self.factors = nn.Parameter(_truncated((n, in_features // n, out_features // n), ADAPTER_INIT_STD, generator))
        self.bias = nn.Parameter(torch.zeros(out_features))

    def weight(self) -> torch.Tensor:
        """W (in x out): row a*p + c, column b*q + d holds sum_i A_i[a, b] B_i[c, d]."""
        return torch.einsum("iab,icd->acbd", self.rules, self.factors).reshape(self.in_features, self.out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.weight().to(x.dtype) + self.bias.to(x.dtype)


def _normal(shape, std: float, generator: torch.Generator) -> torch.Tensor:
    return torch.randn(tuple(shape), generator=generator) * std


def _truncated(shape, std: float, generator: torch.Generator) -> torch.Tensor:
    """N(0, std) clamped at 2 std: the adapters' near-identity start."""
    return _normal(shape, std, generator).clamp_(-2 * std, 2 * std)


@dataclass
class Adaptation:
    """What `adapt` did to a detector. `parameters()` is what the optimiser trains; with `encoders_trainable` the
    features change as training goes, so they cannot come from a cache and the encoders run on every batch."""

    method: str
    spec: dict
    trainable_parameters: int
    encoders_trainable: bool
    base_digests: dict = field(default_factory=dict)  # encoder prefix -> weights_digest() before adaptation
    added_keys: dict = field(default_factory=dict)  # encoder prefix -> names of the tensors the method added
    base_states: dict = field(default_factory=dict, repr=False)  # encoder prefix -> its state before adaptation
    detector: Any = field(default=None, repr=False)

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
            if self.method == "full":
                encoder.load_state_dict({key[len(prefix) + 1:]: value for key, value in snapshot.items()
                                         if key.startswith(f"{prefix}.")})
            with torch.no_grad():
                for key, param in self.added_state(prefix).items():
                    param.copy_(snapshot[f"{prefix}.{self.method}.{key}"])
            encoder._fingerprint = None

    def describe(self) -> str:
        """e.g. `adaptation lora (r=8), 73,728 trainable parameters`."""
        return f"adaptation {describe(self.spec)}, {self.trainable_parameters:,} trainable parameters"


def adapt(detector, spec: dict, seed: int = 0) -> Adaptation:
    """Apply `spec` (parse_adaptation's) to `detector` in place and return what was done; the same seed gives the
    same initial weights. Encoders whose computation changes get a fresh fingerprint (the feature cache must not
    serve the base encoder's features for them)."""
    spec = parse_adaptation(spec)
    check_adaptation(spec, detector)
    if getattr(detector, "adaptation", None) is not None:
        raise ConfigError(f"this detector is already adapted ({describe(detector.adaptation.spec)})")
    method = spec["method"]
    if not hasattr(detector, "_encoders_by_prefix"):  # a hosted or prompted model: its head alone, if any
        head = getattr(detector, "head_module", None)
        return Adaptation(method, spec, sum(p.numel() for p in head.parameters() if p.requires_grad) if head else 0,
                          False)
    encoders = _encoders(detector)
    adaptation = Adaptation(method, spec, 0, method in ENCODER_METHODS, detector=detector)
    adaptation.base_states = {prefix: dict(b.state_dict()) for prefix, (b, _) in encoders.items()}
    if method in ENCODER_METHODS:
        adaptation.base_digests = {prefix: b.weights_digest() for prefix, (b, _) in encoders.items()}
    generator = torch.Generator().manual_seed(seed)
    if method == "linear":
        image_dim = detector.backbone.image_dim if detector.head_module.has_image else 0
        from ..components import LinearProbe

        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            probe = LinearProbe(image_dim, detector.text_backbone.text_dim, len(detector.classes))
        detector.head_module = probe.to(detector.device).eval()
    for prefix, (backbone, towers) in encoders.items():
        if method not in ENCODER_METHODS:
            continue
        kind = backbone.spec.get("kind")
        if method == "full":
            for p in backbone.parameters():
                p.requires_grad_(True)
        elif method in ("adapter", "compacter"):
            for tower in towers:
                _add_adapters(backbone, LAYOUTS[kind][tower], spec["reduction"], generator, spec.get("phm", 0))
        elif method == "lora":
            _add_lora(backbone, [LAYOUTS[kind][t] for t in towers], spec, seed)
        elif method == "prompt":
            for tower in towers:
                _add_prompt(backbone, LAYOUTS[kind][tower], spec["tokens"], generator)
        backbone.to(detector.device).eval()
        backbone._fingerprint, backbone._weights_from_spec = None, False
        if method in ADDED_TENSOR_METHODS:
            adaptation.added_keys[prefix] = [n for n, p in backbone.named_parameters() if p.requires_grad]
    adaptation.trainable_parameters = sum(p.numel() for p in adaptation.parameters())
    detector.adaptation = adaptation
    return adaptation


def _resolve(root: nn.Module, path: str) -> tuple[nn.Module, str, nn.Module | None]:
    """(parent, attribute, module) of `path` under `root`; module None where the path is absent."""
    *parents, name = path.split(".")
    parent = root
    for part in parents:
        parent = getattr(parent, part, None)
        if parent is None:
            return root, name, None
    return parent, name, getattr(parent, name, None)


def _add_adapters(backbone: nn.Module, tower: Tower, reduction: int, generator: torch.Generator,
                  phm: int = 0) -> None:
    for _, layer in _layers(backbone, tower):
        for site in tower.adapter_sites:
            parent, name, module = _resolve(layer, site)
            if module is None:
                continue
            dim = module.out_features if isinstance(module, nn.Linear) else \
                _resolve(layer, tower.width)[2].normalized_shape[0]
            dtype = next(module.parameters(), torch.empty(0)).dtype  # the encoder's own precision
            bottleneck = max(1, dim // reduction)  # (check_adaptation: phm divides both)
            adapter = ResidualAdapter(module, dim, bottleneck, generator, phm)
            setattr(parent, name, adapter.to(dtype))


def _add_lora(backbone: nn.Module, towers: list[Tower], spec: dict, seed: int) -> None:
    """LoRA through peft on the Linear layers the spec's targets name in every layer of every tower: B starts at
    zero, A as peft initialises it under `torch.manual_seed(seed)` (the global generator is restored after)."""
    try:
        from peft import LoraConfig, inject_adapter_in_model
    except ImportError:
        raise ConfigError("adaptation 'lora' needs peft (pip install 'pytest-memerobust[adapt]')") from None
    names = []
    for tower in towers:
        for layer_name, layer in _layers(backbone, tower):
            paths = dict.fromkeys(p for t in spec["targets"] for p in tower.projections[t])
            names += [f"{layer_name}.{p}" for p in paths if isinstance(_resolve(layer, p)[2], nn.Linear)]
    config = LoraConfig(r=spec["rank"], lora_alpha=spec["alpha"], lora_dropout=spec["dropout"],
                        target_modules=names, bias="none")
    devices = [backbone.device] if backbone.device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        inject_adapter_in_model(config, backbone)


def _add_prompt(backbone: nn.Module, tower: Tower, tokens: int, generator: torch.Generator) -> None:
    """CoOp: `tokens` context vectors the backbone inserts after [CLS] of every caption (its `text_prompt`).
    VPT-shallow: as many after [CLS] of the picture's patch embeddings, through a hook on the embedding module."""
    from ..backbones import insert_prompt

    if tower.prompt == "text":
        dim = backbone.token_embedding().embedding_dim
        backbone.text_prompt = nn.Parameter(_normal((tokens, dim), PROMPT_INIT_STD, generator))
        return
    embeddings = _resolve(backbone, tower.prompt)[2]
    dim = backbone.model.config.vision_config.hidden_size
    backbone.image_prompt = nn.Parameter(_normal((tokens, dim), PROMPT_INIT_STD, generator))
    embeddings.register_forward_hook(lambda module, args, out: insert_prompt(out, None, backbone.image_prompt)[0])


# -- checkpoints -----------------------------------------------------------------------------------------------------
def trained_state(detector) -> dict:
    """What an adapted detector's checkpoint holds of what trained: the head (`head.*`), and the method's own
    encoder tensors as `<encoder>.<method>.<name>` (e.g. `backbone.lora.model.encoder.layer.0.attention.self.query.
    lora_A.default.weight`); for `full`, every encoder tensor as `<encoder>.<name>`."""
    adaptation = detector.adaptation
    state = detector.trainable_state()
    for prefix, backbone in detector._encoders_by_prefix().items():
        if adaptation.method == "full":
            state.update({f"{prefix}.{k}": v for k, v in backbone.state_dict().items()})
        added = adaptation.added_state(prefix)
        state.update({f"{prefix}.{adaptation.method}.{k}": v.detach() for k, v in added.items()})
    return state


def adaptation_metadata(detector) -> dict:
    """Checkpoint metadata entries: `adaptation` (the spec), `trainable_parameters`, and for methods that change
    an encoder `base_digest` (per encoder prefix, the digest of its weights before adaptation)."""
    adaptation = detector.adaptation
    meta = {"adaptation": json.dumps(adaptation.spec), "trainable_parameters": str(adaptation.trainable_parameters)}
    if adaptation.base_digests:
        meta["base_digest"] = json.dumps(adaptation.base_digests)
    return meta


def check_base_digests(detector, recorded: dict, method: str, source: str) -> None:
    """Refuse, with one CheckpointError naming both digests, a base encoder whose weights are not those the
    checkpoint's adaptation was trained on."""
    encoders = detector._encoders_by_prefix()
    for prefix, digest in recorded.items():
        backbone = encoders.get(prefix)
        if backbone is None:
            raise CheckpointError(f"{source} was adapted ({method}) on a {prefix}, which this card's detector lacks")
        if method == "full" and "config" in backbone.spec:
            continue  # an inline config's random base: the checkpoint carries every weight of the encoder
        here = backbone.weights_digest()
        if here != digest:
            raise CheckpointError(f"{source} was adapted ({method}) from {prefix} base {digest}, this card's {prefix} "
                                  f"is {here}: load it with the card it was trained from")
