"""The Hugging Face hub as this machine has it, for every layer that loads a model by name (the detectors' cards and
backbones, the translation and TextAttack perturbations): whether a repository's files are in the local cache, and
loading with the hub switched off. Nothing here downloads."""
from __future__ import annotations

from contextlib import contextmanager
from typing import Sequence


def in_hf_cache(repo_id: str, filenames: Sequence[str]) -> bool:
    """Whether one of `filenames` of hub repository `repo_id` is in the local Hugging Face cache (no network)."""
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return False
    try:
        return any(isinstance(try_to_load_from_cache(repo_id, name), str) for name in filenames)
    except ValueError:  # not a valid repo id (huggingface_hub's HFValidationError)
        return False


@contextmanager
def hub_offline(offline: bool = True):
    """huggingface_hub offline within (it reads the flag at each call): a cached file is used as it is, with no
    request to the hub first, which on a machine without network is retried for half a minute."""
    try:
        from huggingface_hub import constants
    except ImportError:
        yield
        return
    before = constants.HF_HUB_OFFLINE
    constants.HF_HUB_OFFLINE = before or offline
    try:
        yield
    finally:
        constants.HF_HUB_OFFLINE = before
