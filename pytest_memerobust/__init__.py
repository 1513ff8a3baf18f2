"""pytest-memerobust: robustness of multimodal harmful-meme detectors, checked like unit tests.

The library works without pytest: load a detector and a dataset, evaluate conditions, read metrics and tables.
"""
from .data import Dataset, Meme, load_dataset
from .detectors import load_detector
from .engine import Condition, Engine
from .errors import CheckpointError, ConfigError, DataError, MemeRobustError, SuiteError, UnknownNameError
from .results import ConditionResult, StatsConfig
from .session import Options, RobustnessSession
from .suite import Suite, load_suite
from .thresholds import Thresholds, Violation, check

__version__ = "0.1.0"

__all__ = [
    "CheckpointError", "Condition", "ConditionResult", "ConfigError", "DataError", "Dataset", "Engine", "Meme",
    "MemeRobustError", "Options", "RobustnessSession", "StatsConfig", "Suite", "SuiteError", "Thresholds",
    "UnknownNameError", "Violation", "check", "load_dataset", "load_detector", "load_suite", "__version__",
]
