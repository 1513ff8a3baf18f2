"""The engine: conditions, the evaluation of a detector under them (case by case, or shard by shard over the memes),
the store of encoded inputs, and the executors that spread shards over processes and hosts. Importing it is library
use: idle OpenMP threads are set to sleep before torch loads (openmp.py)."""
from ..openmp import sleep_idle_threads

sleep_idle_threads()

from ..perturb.conditions import Condition
from .attack_state import AttackState
from .encoding import EncodingSettings
from .engine import Engine, Readers, RunPlace, engine_sides

__all__ = ["AttackState", "Condition", "Engine", "EncodingSettings", "Readers", "RunPlace", "engine_sides"]
