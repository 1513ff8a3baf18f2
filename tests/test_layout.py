"""The package reads as its layout says (DESIGN.md section 2, docs/extending.md "Layout"): the folder says what a
module is, and imports go one way, down the layers.

Every module is parsed with `ast` (nothing is imported): each `import` and `from ... import`, relative or absolute,
at module level or inside a function, is resolved to the package's module it names. Then:
(a) the package's top holds only the pytest face, the command, the run and the ground floor;
(b) no import goes from a lower layer to a higher one;
(c) no two modules import each other, directly or round a longer circle, except a registry loading the built-ins
    that register themselves with it.
An exception is an entry in one of the allow-lists below, with its reason; the assertion messages name every
offender as file:line.
"""
from __future__ import annotations

import ast
import tomllib
from pathlib import Path

PACKAGE = "pytest_memerobust"
CHECKOUT = Path(__file__).resolve().parents[1]
ROOT = CHECKOUT / PACKAGE

# Layers, low to high: a module imports its own layer and those below, never one above. judge/ sits right above
# perturb/: pure functions of outputs and records, below what runs a detector (DESIGN.md section 2, and
# tests/test_judge_pure.py, which checks the same from judge/'s side); track/ is what a finished run leaves, below
# the run that ends by calling it.
LAYERS = ("ground floor", "data", "perturb", "judge", "detectors", "engine", "report", "track", "run",
          "pytest face / cli")

# The modules at the package's top, each with its layer; any other module lives in a folder.
TOP_MODULES = {
    "errors": "ground floor", "atomic": "ground floor", "tomlfile": "ground floor", "determinism": "ground floor",
    "plugin": "pytest face / cli", "items": "pytest face / cli", "options": "pytest face / cli",
    "option_table": "pytest face / cli", "collect": "pytest face / cli", "terminal": "pytest face / cli",
    "stash": "pytest face / cli", "probe": "pytest face / cli",
    "signals": "pytest face / cli",  # how a run stops on SIGINT and SIGTERM (the first, and a second one)
    "hookspecs": "pytest face / cli",  # the pytest_memerobust_* hooks third-party plugins implement (pytest_addhooks)
    # Idle OpenMP threads sleep: set where a run starts (plugin, command, public names), before torch loads.
    "openmp": "ground floor",
    # The public module of Hypothesis strategies users import for their own properties (README, docs/attacks.md;
    # STYLE.md 8: the public API is re-exports): it only re-exports perturb/fuzz.py, judge/caption_fuzz.py and
    # run/analyses.py's CaptionFuzzer.
    "fuzz": "pytest face / cli",
}
# The folders, each one layer, its package __init__ included.
FOLDERS = {"data": "data", "perturb": "perturb", "detectors": "detectors", "engine": "engine", "judge": "judge",
           "report": "report", "run": "run", "track": "track", "cli": "pytest face / cli"}
# Folders of the checkout installed inside the package (pyproject's package-dir): the built-in model cards (data
# files and an empty package) and the built-in suites, Python test modules a run collects like a user's: they sit
# at the top, beside the face they are collected by.
SHIPPED = {"models": "ground floor", "suites": "pytest face / cli"}
# The package's __init__.py is the public API (re-exports from every layer): the top. The one name it defines itself,
# before its imports, is its version, which the run's manifests and exports record: reading it is ground floor.
ROOT_OWN_NAMES = {"__version__"}

# (importer, imported) -> why this upward import stays. Keep it short; fix the code instead where it can be fixed.
UPWARD_ALLOWED: dict = {}

# Registries load their built-ins, which import the registry back to register themselves: the loader's imports of
# its own package's modules (inside the function that loads them) are no circle.
REGISTRIES = {
    "pytest_memerobust.perturb.registry": "loads every built-in perturbation module (_ensure_loaded)",
    "pytest_memerobust.detectors.registry": "loads every built-in detector architecture (_ensure_loaded)",
    "pytest_memerobust.run.analysis_registry": "loads the built-in analyses (_ensure_loaded)",
}
# Circles left for now, each with its reason (none: a circle is fixed, not listed).
CYCLES_ALLOWED: dict = {}


def shipped_folders(checkout: Path) -> dict[str, Path]:
    """pyproject's package-dir: the package's sub-packages that live elsewhere in the checkout (models/, suites/)."""
    config = tomllib.loads((checkout / "pyproject.toml").read_text(encoding="utf-8"))
    mapped = config["tool"]["setuptools"].get("package-dir", {})
    return {name.rpartition(".")[2]: checkout / folder for name, folder in mapped.items()
            if name.startswith(PACKAGE + ".")}


def find_modules(root: Path, shipped: dict[str, Path]) -> dict[str, Path]:
    """Every module of the package, by dotted name (a package by its own name, for its __init__.py), the shipped
    folders' modules under the names they are installed as."""
    def name(path: Path, base: Path, prefix: list[str]) -> str:
        parts = prefix + list(path.relative_to(base).with_suffix("").parts)
        return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)

    modules = {name(p, root.parent, []): p for p in sorted(root.rglob("*.py"))}
    for folder, where in shipped.items():
        modules.update({name(p, where, [PACKAGE, folder]): p for p in sorted(where.rglob("*.py"))})
    return modules


def _imports(tree: ast.Module):
    """(node, at module level) for every import statement, however deeply nested."""
    def walk(node, top):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                yield child, top
            yield from walk(child, top and not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                                    ast.Lambda)))
    yield from walk(tree, True)


def find_edges(modules: dict[str, Path]) -> list[tuple[str, str, int, bool, tuple[str, ...]]]:
    """(importer, imported module, line, at module level, names imported) for every import of the package: absolute,
    relative (`from .. import report` names the package report/) and of a package's own `__init__`."""
    def known(target: str) -> str:
        while target not in modules:  # `pkg.judge.results.ConditionResult` -> `pkg.judge.results`
            target = target.rpartition(".")[0]
        return target

    out = []
    for module, path in modules.items():
        package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
        for node, top in _imports(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                targets = [(a.name, ()) for a in node.names]
            else:
                base = node.module or ""
                if node.level:
                    base = ".".join(package[: len(package) - node.level + 1] + ([node.module] if node.module else []))
                targets = [(f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base, (a.name,))
                           for a in node.names]
            for target, names in targets:
                if target == PACKAGE or target.startswith(PACKAGE + "."):
                    out.append((module, known(target), node.lineno, top, names))
    return out


def layer_of(module: str, names: tuple[str, ...] = ()) -> str | None:
    """The module's layer (a package's __init__ is its folder's); None for a module the layout does not place."""
    parts = module.split(".")
    if len(parts) == 1:
        return "ground floor" if names and set(names) <= ROOT_OWN_NAMES else "pytest face / cli"
    if parts[1] in FOLDERS:
        return FOLDERS[parts[1]]
    if parts[1] in SHIPPED:
        return SHIPPED[parts[1]]
    return TOP_MODULES.get(parts[1]) if len(parts) == 2 else None


def _shown(path: Path) -> str:
    return str(path.relative_to(CHECKOUT)) if path.is_relative_to(CHECKOUT) else str(path)


def upward_imports(modules: dict[str, Path], edges) -> dict[tuple, str]:
    """Every import from a lower layer to a higher one that the allow-list does not hold, as file:line messages."""
    offenders = {}
    for importer, imported, line, top, names in edges:
        mine, theirs = layer_of(importer), layer_of(imported, names)
        if mine is None or theirs is None:
            continue  # a module in no layer: test_every_module_has_a_layer names it
        if LAYERS.index(theirs) > LAYERS.index(mine) and (importer, imported) not in UPWARD_ALLOWED:
            where = f"{_shown(modules[importer])}:{line}"
            offenders[importer, imported, line] = (f"{where}: {importer} ({mine}) imports {imported} ({theirs})"
                                                   + ("" if top else " inside a function"))
    return offenders


MODULES = find_modules(ROOT, shipped_folders(CHECKOUT))
EDGES = find_edges(MODULES)


def _where(module: str, line: int) -> str:
    return f"{_shown(MODULES[module])}:{line}"


def test_the_package_top_holds_only_the_face_the_command_the_public_api_and_the_ground_floor():
    modules = {p.stem for p in ROOT.glob("*.py")} - {"__init__"}
    folders = {p.parent.name for p in ROOT.glob("*/__init__.py")}
    assert not modules - set(TOP_MODULES), (
        f"modules at the package's top that belong in a folder (docs/extending.md, Layout): "
        f"{sorted(modules - set(TOP_MODULES))}")
    assert not folders - set(FOLDERS), f"folders the layers do not name: {sorted(folders - set(FOLDERS))}"


def test_every_module_has_a_layer():
    unplaced = [str(path.relative_to(CHECKOUT)) for module, path in MODULES.items() if layer_of(module) is None]
    assert not unplaced, f"modules no layer places (TOP_MODULES, FOLDERS, SHIPPED): {unplaced}"


def test_the_shipped_folders_and_every_package_are_installed():
    config = tomllib.loads((CHECKOUT / "pyproject.toml").read_text(encoding="utf-8"))
    listed = set(config["tool"]["setuptools"]["packages"])
    packages = {module for module, path in MODULES.items() if path.name == "__init__.py"}
    assert not packages - listed, f"packages a wheel would leave out (pyproject's packages): {sorted(packages - listed)}"
    assert set(shipped_folders(CHECKOUT)) == set(SHIPPED)


def test_no_import_goes_up_the_layers():
    offenders = upward_imports(MODULES, EDGES)
    assert not offenders, "imports from a lower layer to a higher one:\n" + "\n".join(offenders.values())


def test_the_layout_check_catches_an_upward_import_from_a_package_init_and_from_inside_a_function(tmp_path):
    """The check bites: a copy of the package with two throwaway upward imports (the data layer's package __init__
    importing the reports, and a perturbation importing them inside a function) is caught on both lines."""
    copy = tmp_path / PACKAGE
    for path in ROOT.rglob("*.py"):
        (copy / path.relative_to(ROOT)).parent.mkdir(parents=True, exist_ok=True)
        (copy / path.relative_to(ROOT)).write_text(path.read_text(encoding="utf-8"), encoding="utf-8")
    init = copy / "data" / "__init__.py"
    init.write_text(init.read_text(encoding="utf-8") + "\nfrom ..report import tables\n", encoding="utf-8")
    distance = copy / "perturb" / "distance.py"
    distance.write_text(distance.read_text(encoding="utf-8")
                        + "\n\ndef _throwaway():\n    from .. import report\n    return report\n", encoding="utf-8")
    modules = find_modules(copy, {})
    found = upward_imports(modules, find_edges(modules))
    assert upward_imports(MODULES, EDGES) == {}  # the same check on the real package finds nothing
    assert {(importer, imported) for importer, imported, _ in found} == {
        ("pytest_memerobust.data", "pytest_memerobust.report.tables"),
        ("pytest_memerobust.perturb.distance", "pytest_memerobust.report")}
    assert any(message.endswith("inside a function") for message in found.values())


def _with_imports(tmp_path, added: dict[str, str]) -> dict[tuple, str]:
    """The upward imports of a copy of the package with `added` (file -> a function-level import) appended."""
    copy = tmp_path / PACKAGE
    for path in ROOT.rglob("*.py"):
        (copy / path.relative_to(ROOT)).parent.mkdir(parents=True, exist_ok=True)
        (copy / path.relative_to(ROOT)).write_text(path.read_text(encoding="utf-8"), encoding="utf-8")
    for file, statement in added.items():
        target = copy / file
        target.write_text(target.read_text(encoding="utf-8") + f"\n\ndef _throwaway():\n    {statement}\n",
                          encoding="utf-8")
    modules = find_modules(copy, {})
    return upward_imports(modules, find_edges(modules))


def test_the_layout_check_catches_track_to_run_detectors_to_engine_and_judge_to_engine(tmp_path):
    """The three seams the layers are drawn along: what a run leaves never reaches back into the run, a detector
    never into the engine that runs it, a judgement never into what produced its outputs."""
    found = _with_imports(tmp_path, {"track/baseline.py": "from ..run import session",
                                     "detectors/registry.py": "from ..engine import features",
                                     "judge/metrics.py": "from ..engine import Engine"})
    assert {(importer, imported) for importer, imported, _ in found} == {
        ("pytest_memerobust.track.baseline", "pytest_memerobust.run.session"),
        ("pytest_memerobust.detectors.registry", "pytest_memerobust.engine.features"),
        ("pytest_memerobust.judge.metrics", "pytest_memerobust.engine")}


def test_the_upward_allow_list_is_still_needed():
    used = {(importer, imported) for importer, imported, *_ in EDGES}
    assert not set(UPWARD_ALLOWED) - used, f"allow-list entries nothing needs: {sorted(set(UPWARD_ALLOWED) - used)}"


def _graph(module_level_only: bool) -> dict[str, dict[str, int]]:
    graph: dict[str, dict[str, int]] = {m: {} for m in MODULES}
    for importer, imported, line, top, names in EDGES:
        if importer == imported or (module_level_only and not top):
            continue
        if imported == PACKAGE and set(names) <= ROOT_OWN_NAMES:
            continue  # the version, set before the package's own imports
        if importer in REGISTRIES and not top and imported.startswith(importer.rpartition(".")[0] + "."):
            continue  # a registry loading its built-ins
        graph[importer].setdefault(imported, line)
    return graph


def _circles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The circles of the module graph: a depth-first search (Tarjan's) finds each set of modules that reach one
    another, and one circle through each set is returned, as the list of its modules with the first repeated."""
    index, low, stack, on_stack, groups = {}, {}, [], set(), []

    def visit(module):
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for imported in sorted(graph[module]):
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in on_stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            group = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.add(member)
                if member == module:
                    break
            if len(group) > 1:
                groups.append(group)

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return [_circle_in(sorted(group)[0], group, graph) for group in groups]  # (fixing it shows the next, if any)


def _circle_in(start: str, group: set[str], graph: dict[str, dict[str, int]]) -> list[str]:
    """A shortest circle from `start` back to itself inside `group`."""
    paths, seen = [[start]], {start}
    while paths:
        path = paths.pop(0)
        for imported in sorted(graph[path[-1]]):
            if imported == start:
                return path + [start]
            if imported in group and imported not in seen:
                seen.add(imported)
                paths.append(path + [imported])
    raise AssertionError(f"no circle through {start}")


def _describe(cycle: list[str], graph: dict[str, dict[str, int]]) -> str:
    return "\n  ".join(f"{_where(a, graph[a][b])} {a} -> {b}" for a, b in zip(cycle, cycle[1:]))


def test_no_two_modules_import_each_other_outside_a_registry():
    graph = _graph(module_level_only=False)
    cycles = [c for c in _circles(graph) if frozenset(c) not in CYCLES_ALLOWED]
    assert not cycles, "import circles:\n  " + "\n\n  ".join(_describe(c, graph) for c in cycles)


def test_importing_any_module_meets_no_circle():
    graph = _graph(module_level_only=True)
    cycles = _circles(graph)
    assert not cycles, "circles among module-level imports:\n  " + "\n\n  ".join(_describe(c, graph) for c in cycles)


def test_the_default_sentinels_below_the_options_are_the_options_one():
    # report/history.py and track/mlflow_run.py cannot import options.py (the face): they keep its value
    from pytest_memerobust import options
    from pytest_memerobust.report.history import DEFAULT_PATH
    from pytest_memerobust.track.mlflow_run import DEFAULT_STORE

    assert DEFAULT_PATH == DEFAULT_STORE == options.DEFAULT
