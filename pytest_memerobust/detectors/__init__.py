"""Detectors by name: model cards (TOML) name an architecture and its weights."""
from .base import Detector, SplitDetector, is_split
from .cards import ModelCard, available_cards, find_card, load_card
from .registry import ENTRY_POINT_GROUP, architectures, load_detector, register_architecture

__all__ = [
    "Detector", "SplitDetector", "is_split", "ModelCard", "available_cards", "find_card", "load_card",
    "ENTRY_POINT_GROUP", "architectures", "load_detector", "register_architecture",
]
