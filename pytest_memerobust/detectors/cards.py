"""Model cards: one small TOML file per named detector, loaded into a dataclass so an unknown key is an error."""
from __future__ import annotations

import hashlib
import os
from contextlib import contextmanager
from dataclasses import dataclass, field, fields, replace
from importlib import resources
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, Sequence

from ..data.hub import in_hf_cache
from ..errors import ConfigError, UnknownNameError
from ..tomlfile import read_toml

CARD_ENTRY_POINT_GROUP = "pytest_memerobust.models"


@dataclass(frozen=True)
class Network:
    """What the card's architecture builds and loads: the weights (a checkpoint), its keyword arguments and frozen
    encoders, and the recipe that trains it. (In the order a card's JSON lists these keys.)"""

    checkpoint: str | None = None  # path relative to the card's folder, or absolute
    checkpoint_sha256: str | None = None
    demo_weights: bool = False  # weights are a toy trained on demo memes, not a real detector
    params: dict[str, Any] = field(default_factory=dict)  # architecture keyword arguments
    backbone: dict[str, Any] = field(default_factory=dict)  # frozen encoder spec (see detectors/backbones.py)
    text_backbone: dict[str, Any] = field(default_factory=dict)  # optional separate encoder for the caption
    training: dict[str, Any] = field(default_factory=dict)  # default hyperparameters of `memerobust train`
    demo: dict[str, Any] = field(default_factory=dict)  # backbone/params/training used to build the demo weights

    def with_demo(self) -> "Network":
        """With the `[demo]` tables applied over their namesakes (checked by ModelCard.with_demo)."""
        return replace(self, params={**self.params, **self.demo.get("params", {})},
                       backbone=self.demo.get("backbone", self.backbone),
                       text_backbone=self.demo.get("text_backbone", self.text_backbone),
                       training={**self.training, **self.demo.get("training", {})})


@dataclass(frozen=True)
class Scoring:
    """How the detector's answer is read from its scores: a sigmoid per label or one class, the thresholds, and how
    often each meme is asked."""

    multilabel: bool = False  # the task is multi-label (FigMemes): `classes` are labels, each scored by a sigmoid
    thresholds: dict[str, Any] = field(default_factory=dict)
    # repeat sampling (detectors/sampling.py): each meme asked `samples` times at `temperature`; unset: once
    samples: int | None = None
    temperature: float | None = None


@dataclass(frozen=True)
class ModelCard:
    """A model card: the detector's name, architecture and classes, the network it builds and how its answers are
    read. The TOML card (and `as_dict`) keeps every key at its top level or in its own table."""

    name: str
    architecture: str
    classes: tuple[str, ...]
    task: str = "hate"
    description: str = ""
    network: Network = field(default_factory=Network)
    scoring: Scoring = field(default_factory=Scoring)
    path: Path | None = None

    @classmethod
    def from_keys(cls, keys: dict[str, Any], path: Path | None = None) -> "ModelCard":
        """The card a TOML card's keys describe: the network's keys and the scoring's go to those parts."""
        network = {k: v for k, v in keys.items() if k in _PART_KEYS[Network]}
        scoring = {k: v for k, v in keys.items() if k in _PART_KEYS[Scoring]}
        top = {k: v for k, v in keys.items() if k not in network and k not in scoring}
        return cls(**top, network=Network(**network), scoring=Scoring(**scoring), path=path)

    def checkpoint_path(self) -> Path | None:
        if self.network.checkpoint is None:
            return None
        p = Path(self.network.checkpoint)
        return p if p.is_absolute() or self.path is None else self.path.parent / p

    def without_checkpoint(self) -> "ModelCard":
        """This card naming no weights: the detector it builds starts untrained."""
        return replace(self, network=replace(self.network, checkpoint=None, checkpoint_sha256=None))

    def with_demo(self) -> "ModelCard":
        """This card with its `[demo]` section applied: the small configuration the shipped demo weights use."""
        unknown = set(self.network.demo) - {"backbone", "text_backbone", "params", "training"}
        if unknown:
            raise ConfigError(f"model card {self.path}: [demo] unknown key(s) {sorted(unknown)}")
        return replace(self, network=self.network.with_demo())

    def as_dict(self) -> dict[str, Any]:
        """Every key flat, in the order the card had them before its parts: what reports and baselines record."""
        d = {"name": self.name, "architecture": self.architecture, "classes": list(self.classes), "task": self.task,
             "multilabel": self.scoring.multilabel, "description": self.description,
             **{f.name: getattr(self.network, f.name) for f in fields(Network)},
             "thresholds": self.scoring.thresholds}
        for key in ("samples", "temperature"):  # unset: the card reads as it did before these keys existed
            if getattr(self.scoring, key) is not None:
                d[key] = getattr(self.scoring, key)
        d["path"] = str(self.path) if self.path else None
        return d


_PART_KEYS = {part: {f.name for f in fields(part)} for part in (Network, Scoring)}
# the keys a TOML card may hold: the card's own besides its parts and its file, and each part's
CARD_KEYS = ({f.name for f in fields(ModelCard)} - {"network", "scoring", "path"}).union(*_PART_KEYS.values())


def load_card(path: Path) -> ModelCard:
    path = Path(path)
    data = read_toml(path, "model card", ConfigError)
    unknown = set(data) - CARD_KEYS
    if unknown:
        raise ConfigError(f"model card {path}: unknown key(s) {sorted(unknown)}; valid: {sorted(CARD_KEYS)}")
    missing = {"name", "architecture", "classes"} - set(data)
    if missing:
        raise ConfigError(f"model card {path}: missing key(s) {sorted(missing)}")
    _check_card_values(data, path)
    data["classes"] = tuple(data["classes"])
    return ModelCard.from_keys(data, path)


_CARD_KINDS = {"name": str, "architecture": str, "task": str, "description": str, "checkpoint": str,
               "checkpoint_sha256": str, "multilabel": bool, "demo_weights": bool, "params": dict, "backbone": dict,
               "text_backbone": dict, "training": dict, "demo": dict, "thresholds": dict}
# (samples and temperature are checked by detectors/sampling.py's Sampling.from_card, when the detector loads)


def _check_card_values(data: dict, path: Path) -> None:
    """Each key of a card holds the kind of value it needs (a string, a flag, a table), and `classes` is a list of
    at least two distinct class names: a wrong kind is one error naming the key, not a failure deep in a model."""
    for key, kind in _CARD_KINDS.items():
        if key in data and not isinstance(data[key], kind):
            what = {bool: "true or false", dict: "a table", str: "a string"}[kind]
            raise ConfigError(f"model card {path}: {key} must be {what}, got {data[key]!r}")
        if kind is str and key in ("name", "architecture", "task") and key in data and not data[key].strip():
            raise ConfigError(f"model card {path}: {key} is empty")
    classes = data["classes"]
    if (not isinstance(classes, list) or len(classes) < 2
            or not all(isinstance(c, str) and c.strip() for c in classes) or len(set(classes)) != len(classes)):
        raise ConfigError(f"model card {path}: classes must be a list of at least two distinct class names, "
                          f"got {classes!r}")


def builtin_card_dir() -> Path:
    return Path(str(resources.files("pytest_memerobust.models")))


def available_cards() -> dict[str, Path]:
    """Card name -> file: the built-in cards, then those third parties publish through the entry-point group
    (each entry point loads to a folder of `*.toml` cards)."""
    folders = [builtin_card_dir()]
    for ep in entry_points(group=CARD_ENTRY_POINT_GROUP):
        folders.append(Path(str(ep.load())))
    cards = {}
    for folder in folders:
        for p in sorted(folder.glob("*.toml")):
            cards.setdefault(p.stem, p)
    return cards


def find_card(name_or_path: str) -> ModelCard:
    """A card by name (`demo`) or by path to a TOML file."""
    if name_or_path.endswith(".toml"):
        return load_card(Path(name_or_path))
    cards = available_cards()
    if name_or_path not in cards:
        raise UnknownNameError("model", name_or_path, cards)
    return load_card(cards[name_or_path])


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


# --- weights named by Hugging Face hub id ---------------------------------------------------------------------------
# Here, not in backbones.py: the check runs before torch and transformers are imported, so a missing backbone is
# said at once. Without leave to download, nothing reaches the hub: a hub id is read from the local cache only.

DOWNLOAD_ENV = "MEMEROBUST_DOWNLOAD"  # 1: a hub id not on this machine may download
HF_KINDS = ("hf-clip", "hf-blip2", "vlm", "shieldgemma2")
TOKENIZER_FILES = ("tokenizer_config.json", "tokenizer.json", "vocab.txt", "vocab.json")
_allowed: list[bool] = []


class WeightsNotHere(ConfigError):
    """Weights named by hub id are neither a folder here nor in the local Hugging Face cache, and downloading
    was not asked for."""


@contextmanager
def allow_downloads(allowed: bool = True):
    """Within: hub ids not on this machine may download (as with MEMEROBUST_DOWNLOAD=1)."""
    _allowed.append(allowed)
    try:
        yield
    finally:
        _allowed.pop()


def downloads_allowed() -> bool:
    return any(_allowed) or os.environ.get(DOWNLOAD_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def hf_cache_dir() -> str:
    try:
        from huggingface_hub import constants
    except ImportError:
        return "~/.cache/huggingface/hub"
    return str(constants.HF_HUB_CACHE)


def _looks_like_path(name: str) -> bool:
    return name.startswith(("/", ".", "~")) or "\\" in name or name.count("/") > 1 or name.endswith("/")


def not_here_message(name: str, what: str, cache: str | None = None) -> str:
    cache = cache or hf_cache_dir()
    return (f"{what} {name!r} is not on this machine (no folder of that name, not in the Hugging Face cache {cache}) "
            f"and downloading is off: on a machine with network run `hf download {name}` (older huggingface_hub: "
            f"`huggingface-cli download {name}`) and copy that cache here, or add `--local-dir DIR` and name the "
            f"folder DIR instead of the id; or let it download here with {DOWNLOAD_ENV}=1")


def hub_load_options(name: str, what: str, files: Sequence[str] = ("config.json",)) -> dict:
    """The `from_pretrained` keyword arguments that read `name` (a folder or a hub id) without reaching the hub
    unasked: none for a folder; `local_files_only` for a hub id in the local cache; none for a hub id allowed to
    download; anything else raises at once (WeightsNotHere) instead of retrying the network, then a traceback."""
    if Path(name).expanduser().is_dir():
        return {}
    if Path(name).expanduser().exists():
        raise ConfigError(f"{what} {name!r} is a file: name the folder save_pretrained wrote, or a hub id")
    if _looks_like_path(name):
        raise ConfigError(f"{what} {name!r}: no such folder")
    if downloads_allowed():
        return {}
    if in_hf_cache(name, files):
        return {"local_files_only": True}
    raise WeightsNotHere(not_here_message(name, what))


def check_local_weights(card: ModelCard) -> None:
    """Before building anything: every hub id the card's backbones and tokenizers name is here (or may download)."""
    for role, spec in (("backbone", card.network.backbone), ("text backbone", card.network.text_backbone)):
        if spec.get("kind") not in HF_KINDS:
            continue
        if "config" not in spec and spec.get("name"):
            hub_load_options(str(spec["name"]), f"card {card.name!r}: {spec['kind']} {role}")
        tokenizer = spec.get("tokenizer", None if "config" in spec else spec.get("name"))
        if tokenizer and tokenizer != "minilm":
            hub_load_options(str(tokenizer), f"card {card.name!r}: tokenizer", TOKENIZER_FILES + ("config.json",))
