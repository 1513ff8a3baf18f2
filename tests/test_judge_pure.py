"""judge/ is pure: functions of outputs and records (DESIGN.md section 2), never a session, config, engine or detector.

Every module of pytest_memerobust/judge/ is parsed with `ast` (nothing is imported), and fails, naming file:line,
(a) on an import, at module level or inside a function, relative or absolute, of pytest, of the layers above or
beside it that run things (engine/, detectors/, run/, report/, track/), of the pytest face or the command, or of the
package's public API (its top re-exports every layer); and (b) on a function, method or lambda with a parameter
named for what runs a detector or a run (session, config, engine, detector, detectors, model_runner), or annotated
with its type (Engine, Config, a ...Session, a ...Detector). An exception is an entry of KNOWN, with its reason.
"""
from __future__ import annotations

import ast
import textwrap
from pathlib import Path

PACKAGE = "pytest_memerobust"
ROOT = Path(__file__).resolve().parents[1] / PACKAGE
JUDGE = ROOT / "judge"

FORBIDDEN_PACKAGES = ("pytest", "_pytest")
FORBIDDEN_MODULES = tuple(f"{PACKAGE}.{name}" for name in (
    "engine", "detectors", "run", "session", "report", "track",  # what runs a detector or a run, what reads results
    "plugin", "items", "options", "option_table", "collect", "terminal", "stash", "probe", "signals", "cli",
    "hookspecs", "fuzz"))  # the pytest face and the command
FORBIDDEN_PARAMETERS = {"session", "config", "engine", "detector", "detectors", "model_runner"}
FORBIDDEN_TYPES = {"Engine", "Config"}
FORBIDDEN_TYPE_ENDINGS = ("Session", "Detector")

# (file, what the offence says) -> why it stays for now. Keep it short; fix the code instead where it can be fixed.
KNOWN: dict = {}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_package(module: str) -> bool:
    return module.endswith(".__init__") or (ROOT.parent / module.replace(".", "/")).is_dir()


def _imported(node: ast.Import | ast.ImportFrom, module: str, package: bool) -> list[str]:
    """The modules (or module.name) an import statement of `module` names, relative ones resolved."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if node.level:
        base = module.split(".") if package else module.split(".")[:-1]
        base = base[: len(base) - (node.level - 1)]
        stem = ".".join(base + ([node.module] if node.module else []))
    else:
        stem = node.module or ""
    return [stem] + [f"{stem}.{alias.name}" for alias in node.names]


def _forbidden_import(name: str) -> str | None:
    """Why importing `name` (a module, or module.name) is refused; None when it is not."""
    top = name.split(".")[0]
    if top in FORBIDDEN_PACKAGES:
        return "pytest"
    for forbidden in FORBIDDEN_MODULES:
        if name == forbidden or name.startswith(forbidden + "."):
            return forbidden.removeprefix(PACKAGE + ".") + "/"
    return None


def _annotation_names(annotation: ast.expr | None) -> set[str]:
    """Every name an annotation mentions (inside strings too, and in X[Y], X | Y, module.X)."""
    if annotation is None:
        return set()
    names = set()
    for node in ast.walk(annotation):
        if isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, ast.Attribute):
            names.add(node.attr)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            try:
                names |= _annotation_names(ast.parse(node.value, mode="eval").body)
            except SyntaxError:
                pass
    return names


def _forbidden_type(names: set[str]) -> str | None:
    return next((n for n in sorted(names) if n in FORBIDDEN_TYPES or n.endswith(FORBIDDEN_TYPE_ENDINGS)), None)


def offences(source: str, module: str, where: str, package: bool = False) -> list[str]:
    """Every import and parameter of one module's source that makes judge/ impure, as 'file:line: why'."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names = _imported(node, module, package)
            if names == [PACKAGE] or (isinstance(node, ast.ImportFrom) and names[0] == PACKAGE):
                # the package's top: each imported name is a submodule to check, or a public re-export (any layer)
                for name in names[1:] or names:
                    sub = ROOT.parent / name.replace(".", "/")
                    if not (sub.is_dir() or sub.with_suffix(".py").exists()):
                        found.append(f"{where}:{node.lineno}: imports {name} from the package's public API (its top "
                                     f"re-exports every layer)")
                    elif _forbidden_import(name):
                        found.append(f"{where}:{node.lineno}: imports {name} ({_forbidden_import(name)})")
                continue
            reasons = {_forbidden_import(n) for n in names} - {None}
            if reasons:
                found.append(f"{where}:{node.lineno}: imports {names[0] or names[1]} ({', '.join(sorted(reasons))})")
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            args = node.args
            every = args.posonlyargs + args.args + args.kwonlyargs + [a for a in (args.vararg, args.kwarg) if a]
            name = getattr(node, "name", "<lambda>")
            for arg in every:
                if arg.arg in FORBIDDEN_PARAMETERS:
                    found.append(f"{where}:{arg.lineno}: {name}() takes a parameter named {arg.arg!r}")
                kind = _forbidden_type(_annotation_names(arg.annotation))
                if kind:
                    found.append(f"{where}:{arg.lineno}: {name}() takes {arg.arg!r} annotated {kind}")
    return found


def _known(offence: str) -> bool:
    return any(offence.startswith(where + ":") and says in offence for where, says in KNOWN)


def test_judge_imports_nothing_that_runs_and_takes_no_session_config_engine_or_detector():
    found = []
    for path in sorted(JUDGE.rglob("*.py")):
        where = str(path.relative_to(ROOT.parent))
        found += offences(path.read_text(), _module_name(path), where, package=path.name == "__init__.py")
    found = [offence for offence in found if not _known(offence)]
    assert not found, "judge/ must be functions of outputs and records:\n" + "\n".join(found)


def test_the_check_catches_an_engine_parameter_and_an_upward_import():
    source = textwrap.dedent('''
        from __future__ import annotations
        import numpy as np
        from . import metrics
        from ..data.meme import Dataset
        from ..engine import Engine

        def f(engine): ...

        def g(values, *, runner: "Engine | None" = None):
            import pytest
            from pytest_memerobust.run.session import RobustnessSession
            from .. import detectors
            from pytest_memerobust import Condition

        def h(labels, proba, stats: StatsConfig, owner: RobustnessSession): ...

        pure = lambda clean, attacked: clean - attacked
        impure = lambda detector: detector
    ''')
    found = offences(source, f"{PACKAGE}.judge.example", "judge/example.py")
    lines = "\n".join(found)
    assert "judge/example.py:6: imports pytest_memerobust.engine (engine/)" in lines
    assert "judge/example.py:8: f() takes a parameter named 'engine'" in lines
    assert "judge/example.py:10: g() takes 'runner' annotated Engine" in lines
    assert "judge/example.py:11: imports pytest (pytest)" in lines
    assert "judge/example.py:12: imports pytest_memerobust.run.session (run/)" in lines
    assert "judge/example.py:13: imports pytest_memerobust.detectors (detectors/)" in lines
    assert "judge/example.py:14: imports pytest_memerobust.Condition from the package's public API" in lines
    assert "judge/example.py:16: h() takes 'owner' annotated RobustnessSession" in lines
    assert "judge/example.py:19: <lambda>() takes a parameter named 'detector'" in lines
    assert len(found) == 9, lines  # numpy, metrics, data/, StatsConfig and the pure lambda pass
