"""Detectors by name: model cards (TOML) name an architecture and its weights. Importing it is library use: idle
OpenMP threads are set to sleep before torch loads (openmp.py)."""
from ..openmp import sleep_idle_threads

sleep_idle_threads()

from .base import Detector, SplitDetector, is_split
from .cards import ModelCard, Network, Scoring, available_cards, find_card, load_card
from .registry import ENTRY_POINT_GROUP, architectures, load_detector, register_architecture

__all__ = [
    "Detector", "SplitDetector", "is_split", "ModelCard", "Network", "Scoring", "available_cards", "find_card",
    "load_card",
    "ENTRY_POINT_GROUP", "architectures", "load_detector", "register_architecture",
]
