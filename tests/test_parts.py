"""Objects built from parts: no constructor of the package takes more than 8 arguments, the session holds at most
12 attributes, and constructing a session only assembles it (the baseline is loaded and the executor made by
`start`, or when first asked for)."""
from __future__ import annotations

import importlib
import inspect
import pkgutil
from pathlib import Path

import pytest

import pytest_memerobust
from pytest_memerobust.errors import MemeRobustError
from pytest_memerobust.run.options import BaselineOptions, JudgingOptions, Options
from pytest_memerobust.run.session import RobustnessSession

MAX_ARGUMENTS = 8
MAX_SESSION_ATTRIBUTES = 12
NOT_IMPORTED = (".suites", ".__main__")  # the suites are test files; __main__ runs the command line


def _classes():
    """Every class defined in a module of the package, with its module's name."""
    for module in pkgutil.walk_packages(pytest_memerobust.__path__, "pytest_memerobust."):
        if module.name.endswith(NOT_IMPORTED) or ".suites." in module.name:
            continue
        try:
            imported = importlib.import_module(module.name)
        except ImportError as exc:  # an optional extra this environment lacks (ray, mlflow...)
            if exc.name and exc.name.split(".")[0] in {"ray", "mlflow", "wandb", "textattack", "torchattacks"}:
                continue
            raise
        for name, obj in vars(imported).items():
            if inspect.isclass(obj) and obj.__module__ == module.name:
                yield module.name, name, obj


def _arguments(cls) -> int | None:
    """The arguments its own constructor takes (self, *args and **kwargs aside); None when it defines none."""
    init = cls.__dict__.get("__init__")
    if init is None:
        return None
    parameters = inspect.signature(init).parameters.values()
    return sum(p.name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in parameters)


def test_no_constructor_of_the_package_takes_more_than_eight_arguments():
    classes = list(_classes())
    assert len(classes) > 200  # the walk reached the package, not an empty corner of it
    large = sorted(f"{module}.{name} ({n})" for module, name, cls in classes
                   if (n := _arguments(cls)) is not None and n > MAX_ARGUMENTS)
    assert large == []


def test_the_measure_counts_a_dataclass_fields():
    from dataclasses import dataclass

    @dataclass
    class Nine:
        a: int = 0
        b: int = 0
        c: int = 0
        d: int = 0
        e: int = 0
        f: int = 0
        g: int = 0
        h: int = 0
        i: int = 0

    assert _arguments(Nine) == 9


def test_the_session_holds_at_most_twelve_attributes():
    session = RobustnessSession(Options(models=("demo",)))
    assert len(vars(session)) <= MAX_SESSION_ATTRIBUTES, sorted(vars(session))


def test_constructing_a_session_loads_no_baseline_and_makes_no_executor(tmp_path):
    missing = tmp_path / "no-such-baseline.json"
    session = RobustnessSession(Options(models=("demo",),
                                        judging=JudgingOptions(baseline=BaselineOptions(path=missing))))
    assert session.loaded.baseline is None and not session.execution.made  # nothing reached while assembling
    with pytest.raises(MemeRobustError, match="no-such-baseline"):
        session.start()  # what the plugin calls at once: the unreadable baseline fails before any case


def test_a_started_session_has_its_baseline(tmp_path):
    from pytest_memerobust.run.gate import save_baseline

    saved = RobustnessSession(Options(models=("demo",)))
    saved.evaluate("demo", "clean")
    path = Path(tmp_path / "base.json")
    save_baseline(saved, path)
    session = RobustnessSession(Options(models=("demo",), judging=JudgingOptions(baseline=BaselineOptions(path=path))))
    assert session.start().baseline is not None and session.loaded.baseline is session.baseline
    session.close()
    saved.close()
