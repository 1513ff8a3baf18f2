"""pytest-memerobust: robustness of multimodal harmful-meme detectors, checked like unit tests.

The library works without pytest: load a detector and a dataset, evaluate conditions, read metrics and tables.

pytest imports this package in every run of an environment it is installed in (the plugin is its module), so the
public names are imported when first read (PEP 562 `__getattr__`), not here: a run that does not use memerobust
imports no numpy, torch or PIL. Reading one is library use: idle OpenMP threads are set to sleep first (openmp.py).
"""
from __future__ import annotations

import importlib

# The one name of this module that the layers below read (replay and export record it).
__version__ = "0.1.0"

# Each public name and the module it is imported from.
_SOURCES = {
    "Dataset": "data", "Meme": "data", "load_dataset": "data",
    "load_detector": "detectors",
    "Condition": "perturb.conditions", "Engine": "engine",
    "CheckpointError": "errors", "ConfigError": "errors", "DataError": "errors", "MemeRobustError": "errors",
    "SuiteError": "errors", "UnknownNameError": "errors",
    "ConditionResult": "judge.results", "StatsConfig": "judge.results",
    "Options": "run.options", "BaselineOptions": "run.options", "CacheOptions": "run.options",
    "ComputeOptions": "run.options", "DataOptions": "run.options", "JudgingOptions": "run.options",
    "OutputOptions": "run.options", "ProbeOptions": "run.options", "RobustnessSession": "run.session",
    "Suite": "run.suite", "load_suite": "run.suite",
    "MetricThresholds": "judge.thresholds", "Thresholds": "judge.thresholds", "Violation": "judge.thresholds",
    "check": "judge.thresholds",
}

__all__ = [
    "BaselineOptions", "CacheOptions", "CheckpointError", "ComputeOptions", "Condition", "ConditionResult",
    "ConfigError", "DataError", "DataOptions", "Dataset", "Engine", "JudgingOptions", "Meme", "MemeRobustError",
    "MetricThresholds", "Options", "OutputOptions", "ProbeOptions", "RobustnessSession", "StatsConfig", "Suite",
    "SuiteError", "Thresholds",
    "UnknownNameError", "Violation", "check", "load_dataset", "load_detector", "load_suite", "__version__",
]


def __getattr__(name: str):
    source = _SOURCES.get(name)
    if source is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from .openmp import sleep_idle_threads

    sleep_idle_threads()
    value = getattr(importlib.import_module(f"{__name__}.{source}"), name)
    globals()[name] = value  # read once: later reads find it without this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
