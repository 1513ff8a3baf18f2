"""The adaptation methods, one frozen spec class each (as peft keeps one config class per method): its options,
typed and checked, with their published defaults; where it reaches in an encoder; how it applies itself.

    head      the MemeHead on frozen encoders (projections, adapters, TDA, classifier): the default
    linear    a linear probe: one Linear layer over the concatenated frozen features, in place of the MemeHead
    adapter   Houlsby bottleneck adapters (down, GELU, up, residual) after the attention and the MLP of every layer
    compacter the same adapters with PHM layers for down and up (a sum of Kronecker products), as the adaptation
              benchmark ran Compacter: PHM layers only, neither shared across layers nor low-rank
    lora      LoRA (through peft) on the attention q/k/v/o and MLP projections of every layer
    prompt    CoOp context tokens after [CLS] of the caption; VPT-shallow tokens after [CLS] of the picture
    full      every encoder weight trains

Each is registered by its name (`register`); third parties add theirs through the entry-point group
`pytest_memerobust.adaptations` (a module that registers its spec classes, or a spec class). `parse_adaptation`
reads a spec from a CLI string (`lora:rank=4,alpha=8`), a card's `[training] adaptation` (a name or an inline
table) or a checkpoint's metadata (the spec's `to_dict()`, written as JSON, so old checkpoints read back).
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from importlib.metadata import entry_points
from typing import Callable, ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from ...errors import ConfigError
from .layouts import LAYOUTS, LORA_REFUSAL, LORA_TARGETS, Tower, layers, resolve, towers_of
from .limits import TowerLimits, check_kronecker, check_prompt_tokens, check_rank, check_reduction

ENTRY_POINT_GROUP = "pytest_memerobust.adaptations"
ADAPTER_INIT_STD = 1e-2  # Houlsby's near-identity initialisation
PROMPT_INIT_STD = 0.02  # CoOp's context vectors, N(0, 0.02)


# -- options ---------------------------------------------------------------------------------------------------------
# A check takes (where, value), `where` naming the option and its value, and returns the value kept.
def whole(where: str, value) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ConfigError(f"{where}: expected a positive whole number")
    return value


def positive(where: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise ConfigError(f"{where}: expected a positive number")
    return value


def rate(where: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
        raise ConfigError(f"{where}: expected a rate in [0, 1)")
    return float(value)


def lora_targets(where: str, value) -> tuple[str, ...]:
    targets = [value] if isinstance(value, str) else value
    if not isinstance(targets, (list, tuple)) or not targets:
        raise ConfigError(f"{where}: expected a non-empty list of {', '.join(LORA_TARGETS)}")
    bad = [t for t in targets if t not in LORA_TARGETS]
    if bad or len(set(targets)) != len(targets):
        problem = f"unknown {', '.join(map(repr, bad))}" if bad else "a target named twice"
        raise ConfigError(f"{where}: {problem}; valid targets: {', '.join(LORA_TARGETS)}")
    return tuple(targets)


def number_or_text(raw: str):
    """A CLI option's text as a whole number, else a number, else as it is."""
    for cast in (int, float):
        try:
            return cast(raw)
        except ValueError:
            pass
    return raw


def plus_list(raw: str) -> list[str]:
    """`query+value` -> ["query", "value"]: a list option on the command line."""
    return [t.strip() for t in raw.split("+") if t.strip()]


def option(default, check: Callable, from_cli: Callable = number_or_text):
    """A spec's option: its default, its `check` and how its command-line text is read."""
    return field(default=default, metadata={"check": check, "from_cli": from_cli})


# -- the spec class and its registry ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class AdaptationSpec:
    """One adaptation method with its options (each declared with `option`, checked on construction). A subclass
    sets `name`; `adds_tensors` when it adds tensors of its own to the encoders, placed by their layout (layouts.py)
    and saved as `<encoder>.<name>.<tensor>`; `whole_encoders` when every encoder weight trains (a checkpoint then
    carries the whole encoders). It overrides what it changes: `adapt_head`, `adapt_encoder`, and what it refuses:
    `refusal`, `check_sizes`."""

    name: ClassVar[str] = ""
    adds_tensors: ClassVar[bool] = False
    whole_encoders: ClassVar[bool] = False

    def __post_init__(self):
        for spec_option in fields(self):
            check = spec_option.metadata.get("check")
            if check is not None:
                value = getattr(self, spec_option.name)
                where = f"adaptation {self.name!r} {spec_option.name} = {value!r}"
                object.__setattr__(self, spec_option.name, check(where, value))  # kept as checked (a rate as float)

    @property
    def trains_encoders(self) -> bool:
        """It changes what an encoder computes: its features cannot come from the cache of the base encoder."""
        return self.adds_tensors or self.whole_encoders

    @classmethod
    def from_options(cls, given: dict) -> AdaptationSpec:
        """The spec with `given` options (the others at their defaults); an unknown key is refused by name."""
        keys = [f.name for f in fields(cls)]
        unknown = sorted(set(given) - set(keys))
        if unknown:
            raise ConfigError(f"adaptation {cls.name!r}: unknown key(s) {', '.join(unknown)}; its keys: "
                              f"{', '.join(keys) or 'none'}")
        return cls(**given)

    @classmethod
    def cli_value(cls, key: str, raw: str):
        """Option `key`'s value from its command-line text."""
        spec_option = next((f for f in fields(cls) if f.name == key), None)
        return (spec_option.metadata.get("from_cli", number_or_text) if spec_option else number_or_text)(raw)

    def to_dict(self) -> dict:
        """{"method": name, each option: its value}: what a checkpoint's metadata, a card's [training] and a resume
        state record (lists for tuples, as JSON and TOML write them)."""
        options = {f.name: getattr(self, f.name) for f in fields(self)}
        return {"method": self.name, **{k: list(v) if isinstance(v, tuple) else v for k, v in options.items()}}

    def describe(self) -> str:
        """`lora (r=8)`, `adapter (reduction 16)`, `prompt (16 tokens)`, `head`: the method and its size."""
        detail = self.detail()
        return f"{self.name} ({detail})" if detail else self.name

    def detail(self) -> str:
        """Its size in a few words ("": none to say)."""
        return ""

    @classmethod
    def refusal(cls, kind: str, towers: list[str]) -> str:
        """Why an encoder of backbone kind `kind`, adapted through `towers`, cannot take this method ("": it can)."""
        return "no layout of its transformer layers is known" if cls.adds_tensors and kind not in LAYOUTS else ""

    def check_sizes(self, limits: list[TowerLimits], where: str) -> None:
        """Its sizes within the towers' `limits` (limits.py), else one ConfigError naming `where` it came from."""

    def adapt_head(self, detector, seed: int) -> None:
        """The detector's head changed in place, where the method replaces it (seeded by `seed`)."""

    def adapt_encoder(self, backbone: nn.Module, towers: list[str], generator: torch.Generator, seed: int) -> None:
        """One encoder changed in place (`towers`: those the detector's features come through): its weights made
        trainable, or the method's tensors added, drawn from `generator` (or under `seed`)."""


_REGISTRY: dict[str, type[AdaptationSpec]] = {}
_entry_points_loaded = False


def register(spec_class: type[AdaptationSpec]) -> type[AdaptationSpec]:
    """Class decorator: record a spec class under its `name`. The same class registered again (a reloaded module)
    replaces itself; another of the same name is refused."""
    if not spec_class.name:
        raise ValueError(f"adaptation spec {spec_class.__qualname__} has no name")
    old = _REGISTRY.get(spec_class.name)
    if old is not None and (old.__module__, old.__qualname__) != (spec_class.__module__, spec_class.__qualname__):
        raise ValueError(f"adaptation method {spec_class.name!r} is already registered by {old.__module__}")
    _REGISTRY[spec_class.name] = spec_class
    return spec_class


def registered() -> dict[str, type[AdaptationSpec]]:
    """Every adaptation method by name, in the order registered (the built-ins first, as the module's doc lists
    them), third parties' entry points loaded once."""
    global _entry_points_loaded
    if not _entry_points_loaded:
        _entry_points_loaded = True
        for ep in entry_points(group=ENTRY_POINT_GROUP):
            loaded = ep.load()
            if isinstance(loaded, type) and issubclass(loaded, AdaptationSpec):
                register(loaded)
    return dict(_REGISTRY)


def parse_adaptation(value) -> AdaptationSpec:
    """A spec from a CLI string (`lora`, `lora:rank=4,alpha=8`, `lora:targets=query+value`, `adapter:reduction=8`,
    `compacter:phm=4`, `prompt:tokens=8`), a card's inline table ({method = "lora", rank = 8, targets = ["query",
    "value"]}), a checkpoint's recorded `to_dict()`, or a spec already parsed."""
    if isinstance(value, AdaptationSpec):
        return value
    if isinstance(value, str):
        method, _, rest = value.strip().partition(":")
        texts = {}
        for item in filter(None, (part.strip() for part in rest.split(","))):
            key, eq, raw = item.partition("=")
            if not eq:
                raise ConfigError(f"adaptation {value!r}: {item!r} is not key=value")
            texts[key.strip()] = raw.strip()
        spec_class = _spec_class(method)
        given = {key: spec_class.cli_value(key, raw) for key, raw in texts.items()}
    elif isinstance(value, dict):
        given = dict(value)
        spec_class = _spec_class(given.pop("method", None))
    else:
        raise ConfigError(f"adaptation {value!r}: expected a method name (e.g. \"lora:rank=8\") or a table with "
                          f"`method`; methods: {', '.join(registered())}")
    return spec_class.from_options(given)


def _spec_class(method) -> type[AdaptationSpec]:
    methods = registered()
    if method not in methods:
        raise ConfigError(f"unknown adaptation method {method!r}; valid: {', '.join(methods)}")
    return methods[method]


# -- the built-in methods --------------------------------------------------------------------------------------------
# Published defaults: LoRA (Hu et al. 2021) r 8, alpha 16, no dropout; Houlsby adapters (2019) with the
# VL-Adapter reduction 16; Compacter (Karimi Mahabadi et al. 2021) n = 4 Kronecker factors at the same reduction;
# CoOp (Zhou et al. 2022) 16 context tokens.
@register
@dataclass(frozen=True)
class HeadSpec(AdaptationSpec):
    """The MemeHead on frozen encoders: what trains when nothing else is asked."""

    name: ClassVar[str] = "head"


@register
@dataclass(frozen=True)
class LinearSpec(AdaptationSpec):
    """A linear probe over the frozen features in place of the MemeHead."""

    name: ClassVar[str] = "linear"

    def adapt_head(self, detector, seed: int) -> None:
        from ..components import LinearProbe

        image_dim = detector.backbone.image_dim if detector.head_module.has_image else 0
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            probe = LinearProbe(image_dim, detector.text_backbone.text_dim, len(detector.classes))
        detector.head_module = probe.to(detector.device).eval()


@register
@dataclass(frozen=True)
class AdapterSpec(AdaptationSpec):
    """Houlsby adapters with a bottleneck of width // `reduction`."""

    name: ClassVar[str] = "adapter"
    adds_tensors: ClassVar[bool] = True
    reduction: int = option(16, whole)

    def detail(self) -> str:
        return f"reduction {self.reduction}"

    def check_sizes(self, limits: list[TowerLimits], where: str) -> None:
        check_reduction(self.reduction, limits, where)

    def adapt_encoder(self, backbone: nn.Module, towers: list[str], generator: torch.Generator, seed: int) -> None:
        for tower in towers_of(backbone, towers):
            _add_adapters(backbone, tower, self.reduction, generator)


@register
@dataclass(frozen=True)
class CompacterSpec(AdaptationSpec):
    """Houlsby adapters whose down and up layers are PHM layers of `phm` Kronecker factors."""

    name: ClassVar[str] = "compacter"
    adds_tensors: ClassVar[bool] = True
    reduction: int = option(16, whole)
    phm: int = option(4, whole)

    def detail(self) -> str:
        return f"reduction {self.reduction}, {self.phm} Kronecker factors"

    def check_sizes(self, limits: list[TowerLimits], where: str) -> None:
        check_reduction(self.reduction, limits, where)
        check_kronecker(self.phm, self.reduction, limits, where)

    def adapt_encoder(self, backbone: nn.Module, towers: list[str], generator: torch.Generator, seed: int) -> None:
        for tower in towers_of(backbone, towers):
            _add_adapters(backbone, tower, self.reduction, generator, self.phm)


@register
@dataclass(frozen=True)
class LoraSpec(AdaptationSpec):
    """LoRA of rank `rank`, scaled by `alpha` / `rank`, on the projections `targets` of every layer."""

    name: ClassVar[str] = "lora"
    adds_tensors: ClassVar[bool] = True
    rank: int = option(8, whole)
    alpha: float = option(16, positive)
    dropout: float = option(0.0, rate)
    targets: tuple[str, ...] = option(LORA_TARGETS, lora_targets, from_cli=plus_list)

    def detail(self) -> str:
        return f"r={self.rank}"

    @classmethod
    def refusal(cls, kind: str, towers: list[str]) -> str:
        return super().refusal(kind, towers) or LORA_REFUSAL.get(kind, "")

    def check_sizes(self, limits: list[TowerLimits], where: str) -> None:
        check_rank(self.rank, limits, where)

    def adapt_encoder(self, backbone: nn.Module, towers: list[str], generator: torch.Generator, seed: int) -> None:
        _add_lora(backbone, towers_of(backbone, towers), self, seed)


@register
@dataclass(frozen=True)
class PromptSpec(AdaptationSpec):
    """`tokens` learned context tokens: CoOp's on the captions, VPT-shallow's on the pictures."""

    name: ClassVar[str] = "prompt"
    adds_tensors: ClassVar[bool] = True
    tokens: int = option(16, whole)

    def detail(self) -> str:
        return f"{self.tokens} tokens"

    @classmethod
    def refusal(cls, kind: str, towers: list[str]) -> str:
        return super().refusal(kind, towers) or next(
            (f"{t} tower: {LAYOUTS[kind][t].prompt_refusal}" for t in towers if not LAYOUTS[kind][t].prompt), "")

    def check_sizes(self, limits: list[TowerLimits], where: str) -> None:
        check_prompt_tokens(self.tokens, limits, where)

    def adapt_encoder(self, backbone: nn.Module, towers: list[str], generator: torch.Generator, seed: int) -> None:
        for tower in towers_of(backbone, towers):
            _add_prompt(backbone, tower, self.tokens, generator)


@register
@dataclass(frozen=True)
class FullSpec(AdaptationSpec):
    """Every encoder weight trains."""

    name: ClassVar[str] = "full"
    whole_encoders: ClassVar[bool] = True

    def adapt_encoder(self, backbone: nn.Module, towers: list[str], generator: torch.Generator, seed: int) -> None:
        for p in backbone.parameters():
            p.requires_grad_(True)


# -- what the methods add --------------------------------------------------------------------------------------------
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


def _add_adapters(backbone: nn.Module, tower: Tower, reduction: int, generator: torch.Generator,
                  phm: int = 0) -> None:
    for _, layer in layers(backbone, tower):
        for site in tower.adapter_sites:
            parent, name, module = resolve(layer, site)
            if module is None:
                continue
            dim = module.out_features if isinstance(module, nn.Linear) else \
                resolve(layer, tower.width)[2].normalized_shape[0]
            dtype = next(module.parameters(), torch.empty(0)).dtype  # the encoder's own precision
            bottleneck = max(1, dim // reduction)  # (check_sizes: phm divides both)
            adapter = ResidualAdapter(module, dim, bottleneck, generator, phm)
            setattr(parent, name, adapter.to(dtype))


def _add_lora(backbone: nn.Module, towers: list[Tower], spec: LoraSpec, seed: int) -> None:
    """LoRA through peft on the Linear layers the spec's targets name in every layer of every tower: B starts at
    zero, A as peft initialises it under `torch.manual_seed(seed)` (the global generator is restored after)."""
    try:
        from peft import LoraConfig, inject_adapter_in_model
    except ImportError:
        raise ConfigError("adaptation 'lora' needs peft (pip install 'pytest-memerobust[adapt]')") from None
    names = []
    for tower in towers:
        for layer_name, layer in layers(backbone, tower):
            paths = dict.fromkeys(p for t in spec.targets for p in tower.projections[t])
            names += [f"{layer_name}.{p}" for p in paths if isinstance(resolve(layer, p)[2], nn.Linear)]
    config = LoraConfig(r=spec.rank, lora_alpha=spec.alpha, lora_dropout=spec.dropout,
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
    embeddings = resolve(backbone, tower.prompt)[2]
    dim = backbone.model.config.vision_config.hidden_size
    backbone.image_prompt = nn.Parameter(_normal((tokens, dim), PROMPT_INIT_STD, generator))
    embeddings.register_forward_hook(lambda module, args, out: insert_prompt(out, None, backbone.image_prompt)[0])
