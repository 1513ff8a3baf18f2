"""Architectures by name. A model card names its architecture; a third party adds one through the entry-point
group, whose entry points load to a factory `build(card, checkpoint, device) -> Detector`."""
from __future__ import annotations

from importlib.metadata import entry_points
from pathlib import Path
from typing import Callable

from ..determinism import fixed_threads
from ..errors import CheckpointError, UnknownNameError
from .cards import ModelCard, file_sha256, find_card
from .sampling import Sampling

ENTRY_POINT_GROUP = "pytest_memerobust.detectors"
_ARCHITECTURES: dict[str, Callable] = {}


def register_architecture(name: str):
    def decorator(factory):
        _ARCHITECTURES[name] = factory
        return factory

    return decorator


def architectures() -> dict[str, Callable]:
    from . import demo, hosted, meme_models, safety, vlm  # noqa: F401  (built-ins register at import)

    for ep in entry_points(group=ENTRY_POINT_GROUP):
        _ARCHITECTURES.setdefault(ep.name, ep.load())
    return dict(_ARCHITECTURES)


def resolve_device(device: str) -> str:
    if device != "auto":
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def check_device(device: str) -> None:
    """A device this torch build has, said once before any work (a missing one failed every case with ~1,000
    lines of traceback): `cuda` on a CPU-only torch, `cuda:N` past the GPUs present, `mps` off Apple silicon."""
    from ..errors import ConfigError

    if device in ("auto", "cpu"):
        return
    import torch

    flag = f"--memerobust-device={device}"
    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            build = "a CPU-only torch build" if torch.version.cuda is None else "no usable GPU (torch.cuda.is_available() is False)"
            raise ConfigError(f"{flag}: this machine has {build}; use --memerobust-device=cpu or auto")
        index = device.partition(":")[2]
        if index and (not index.isdigit() or int(index) >= torch.cuda.device_count()):
            raise ConfigError(f"{flag}: there are {torch.cuda.device_count()} GPUs (cuda:0..cuda:"
                              f"{torch.cuda.device_count() - 1})")
    elif device == "mps":
        if not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
            raise ConfigError(f"{flag}: MPS (Apple silicon) is not available here; use --memerobust-device=cpu or auto")


def load_detector(model: str | ModelCard, checkpoint: str | Path | None = None, device: str = "cpu"):
    """A ready detector from a card name/path (or a card) and an optional checkpoint that overrides the card's."""
    card = model if isinstance(model, ModelCard) else find_card(model)
    factories = architectures()
    if card.architecture not in factories:
        raise UnknownNameError("architecture", card.architecture, factories)
    sampling = Sampling.from_card(card)  # a bad samples/temperature is said before any weights load
    ckpt = Path(checkpoint) if checkpoint else card.checkpoint_path()
    expected = card.network.checkpoint_sha256
    if ckpt is not None and checkpoint is None and expected:
        if not ckpt.is_file():
            raise CheckpointError(f"model card {card.name!r} names checkpoint {ckpt}, which does not exist")
        actual = file_sha256(ckpt)
        if actual != expected:
            raise CheckpointError(
                f"checkpoint {ckpt} has sha256 {actual}, but card {card.name!r} expects {expected}"
            )
    with fixed_threads():  # a head built from class prompts (MemeCLIP's init) encodes them (determinism.py)
        detector = factories[card.architecture](card, ckpt, resolve_device(device))
    detector.card = card
    detector.sampling = sampling  # None: each meme asked once (detectors/sampling.py)
    detector.checkpoint = ckpt
    detector.fingerprint = file_sha256(ckpt) if ckpt is not None else f"untrained:{card.name}"
    return detector
