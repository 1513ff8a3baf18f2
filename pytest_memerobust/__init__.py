"""pytest-memerobust: robustness of multimodal harmful-meme detectors, checked like unit tests.

The library works without pytest: load a detector and a dataset, evaluate conditions, read metrics and tables.
"""
import os

# Idle OpenMP threads sleep instead of spinning. The engine perturbs on a background thread while the main thread
# encodes; spinning pools of the two (and of pytest-xdist's workers) steal each other's cores: the test suite with
# `-n 2` on 2 cores took 105 s spinning and 40 s passive. It only takes effect when set before torch loads OpenMP;
# a value the user set is kept.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

# Set before the imports below: the one name of this module that the layers below read (replay and export record it).
__version__ = "0.1.0"

from .data import Dataset, Meme, load_dataset
from .detectors import load_detector
from .engine import Condition, Engine
from .errors import CheckpointError, ConfigError, DataError, MemeRobustError, SuiteError, UnknownNameError
from .judge.results import ConditionResult, StatsConfig
from .run.session import Options, RobustnessSession
from .run.suite import Suite, load_suite
from .judge.thresholds import Thresholds, Violation, check

__all__ = [
    "CheckpointError", "Condition", "ConditionResult", "ConfigError", "DataError", "Dataset", "Engine", "Meme",
    "MemeRobustError", "Options", "RobustnessSession", "StatsConfig", "Suite", "SuiteError", "Thresholds",
    "UnknownNameError", "Violation", "check", "load_dataset", "load_detector", "load_suite", "__version__",
]
