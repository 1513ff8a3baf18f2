"""Architectures by name. A model card names its architecture; a third party adds one through the entry-point
group, whose entry points load to a factory `build(card, checkpoint, device) -> Detector`."""
from __future__ import annotations

from importlib.metadata import entry_points
from pathlib import Path
from typing import Callable

from ..errors import CheckpointError, UnknownNameError
from .cards import ModelCard, file_sha256, find_card

ENTRY_POINT_GROUP = "pytest_memerobust.detectors"
_ARCHITECTURES: dict[str, Callable] = {}


def register_architecture(name: str):
    def decorator(factory):
        _ARCHITECTURES[name] = factory
        return factory

    return decorator


def architectures() -> dict[str, Callable]:
    from . import demo, meme_models  # noqa: F401  (built-ins register at import)

    for ep in entry_points(group=ENTRY_POINT_GROUP):
        _ARCHITECTURES.setdefault(ep.name, ep.load())
    return dict(_ARCHITECTURES)


def resolve_device(device: str) -> str:
    if device != "auto":
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def load_detector(model: str | ModelCard, checkpoint: str | Path | None = None, device: str = "cpu"):
    """A ready detector from a card name/path (or a card) and an optional checkpoint that overrides the card's."""
    card = model if isinstance(model, ModelCard) else find_card(model)
    factories = architectures()
    if card.architecture not in factories:
        raise UnknownNameError("architecture", card.architecture, factories)
    ckpt = Path(checkpoint) if checkpoint else card.checkpoint_path()
    if ckpt is not None and checkpoint is None and card.checkpoint_sha256:
        if not ckpt.is_file():
            raise CheckpointError(f"model card {card.name!r} names checkpoint {ckpt}, which does not exist")
        actual = file_sha256(ckpt)
        if actual != card.checkpoint_sha256:
            raise CheckpointError(
                f"checkpoint {ckpt} has sha256 {actual}, but card {card.name!r} expects {card.checkpoint_sha256}"
            )
    detector = factories[card.architecture](card, ckpt, resolve_device(device))
    detector.card = card
    detector.checkpoint = ckpt
    detector.fingerprint = file_sha256(ckpt) if ckpt is not None else f"untrained:{card.name}"
    return detector
