"""Caption and image perturbations, usable without pytest (e.g. as augmentations)."""
from .registry import ENTRY_POINT_GROUP, Perturbation, get, names, register

__all__ = ["ENTRY_POINT_GROUP", "Perturbation", "get", "names", "register"]
