"""Analyses as a kind of part, as perturbations and detectors are: each is registered by name, third parties add
theirs through the `pytest_memerobust.analyses` entry-point group, and the run treats them all alike.

An analysis is
- a runner: it asks the detector through the session's engine, or reads the run's results, and hands what it found
  to its judgement, a pure function in judge/; the record is plain JSON;
- a table, `table(record) -> AnalysisTable`: a title, headers, rows of text and notes, which the terminal, Markdown
  and HTML renderers show alike (report/analysis_tables.py), so a new analysis needs no renderer of its own.

When its record is made is its `scope`:
- ASKED (the default): when a test asks for it, `run(session, model, spec, task, **params) -> record`, once per run
  (`analysed`); the records are kept per (analysis, model, data spec) in the session's AnalysisRecords and travel
  from pytest-xdist workers to the controller (`AnalysisRecords.to_wire`);
- OF_THE_RUN: when the report is built, `run(session) -> part`, from every result the run holds;
- PER_GROUP: when the report is built, `run(session, group) -> part or None` for each (model, data, suite) group
  of the report document.
A pytest-xdist worker holds only its share of the results, so those two are made on the controller, from every
worker's, and kept nowhere: views of the results, made again with each report the session builds.

Records enter the report document (`place_analyses`) under `analyses`, each with its table. The analyses that
predate the registry keep the report keys and renderers their readers know (`report_key`): modality reliance,
prompt invariance and evasion budgets (asked), transfer between detectors (of the run), the OCR view (per group).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from importlib.metadata import entry_points
from typing import Callable

from ..errors import ConfigError

ENTRY_POINT_GROUP = "pytest_memerobust.analyses"

ASKED, OF_THE_RUN, PER_GROUP = "asked", "of the run", "per group"  # when a record is made (the module's doc)


@dataclass(frozen=True)
class AnalysisTable:
    """What the renderers show of a record: a title, the column headers, rows of text, and notes under them."""

    title: str
    headers: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    notes: tuple[str, ...] = ()

    def as_dict(self) -> dict:
        return {k: [list(r) for r in v] if k == "rows" else list(v) if isinstance(v, tuple) else v
                for k, v in asdict(self).items()}


def keep_first(kept: dict, new: dict) -> dict:
    """Two processes' records of the same (analysis, model, data) are the same: the first is kept."""
    return kept


@dataclass(frozen=True)
class Analysis:
    """A registered analysis (see the module's doc). `merge(kept, new)` joins a worker's record with the one the
    controller holds (default: they are equal, the first is kept); `report_key` names where an older report key
    holds its records (None: under `analyses`, with its table): an asked analysis' list of `entry(model, label,
    spec, record)`, or the part its report-time runner made (`scope`)."""

    name: str
    run: Callable
    table: Callable | None = None
    merge: Callable = keep_first
    report_key: str | None = None
    entry: Callable | None = None
    scope: str = ASKED


_REGISTRY: dict[str, Analysis] = {}
_entry_points_loaded = False


def register(analysis: Analysis) -> Analysis:
    """Record `analysis` under its name; the same analysis registered again (a reloaded module) replaces itself,
    another of the same name is refused."""
    old = _REGISTRY.get(analysis.name)
    if old is not None and _origin(old) != _origin(analysis):
        raise ValueError(f"analysis {analysis.name!r} is already registered by {_origin(old)[0]}")
    if analysis.scope not in (ASKED, OF_THE_RUN, PER_GROUP):
        raise ValueError(f"analysis {analysis.name!r}: scope {analysis.scope!r} is none of {ASKED!r}, "
                         f"{OF_THE_RUN!r}, {PER_GROUP!r}")
    if analysis.report_key is None and analysis.scope != ASKED:
        raise ValueError(f"analysis {analysis.name!r} is made when the report is built: its report_key says where")
    if analysis.report_key is None and analysis.table is None:
        raise ValueError(f"analysis {analysis.name!r}: a table(record) is what the reports show of it")
    _REGISTRY[analysis.name] = analysis
    return analysis


def _origin(analysis: Analysis) -> tuple[str, str]:
    return analysis.run.__module__, analysis.run.__qualname__


def _ensure_loaded() -> None:
    """The built-in analyses (run/analyses.py's and every module of run/analysis_kinds/) and, once, every
    third-party entry point (a module that registers its analyses, or an Analysis object)."""
    global _entry_points_loaded
    import importlib
    import pkgutil

    from . import analyses, analysis_kinds  # noqa: F401  (the built-ins register themselves on import)

    for module in pkgutil.iter_modules(analysis_kinds.__path__):
        importlib.import_module(f"{analysis_kinds.__name__}.{module.name}")

    if not _entry_points_loaded:
        _entry_points_loaded = True
        for ep in entry_points(group=ENTRY_POINT_GROUP):
            loaded = ep.load()
            if isinstance(loaded, Analysis):
                register(loaded)


def get(name: str) -> Analysis:
    from ..errors import UnknownNameError

    _ensure_loaded()
    if name not in _REGISTRY:
        raise UnknownNameError("analysis", name, sorted(_REGISTRY))
    return _REGISTRY[name]


def names() -> list[str]:
    """Every registered analysis, in the order registered (built-ins first)."""
    _ensure_loaded()
    return list(_REGISTRY)


@dataclass
class AnalysisRecords:
    """What a run's analyses found, per (analysis, model, data spec), for the report and the terminal; and the OCR
    view's readings by picture condition (a cache of that view, not a record)."""

    records: dict[tuple[str, str, str], dict] = field(default_factory=dict)
    ocr_readings: dict[tuple, list[str]] = field(default_factory=dict)
    asked: dict[tuple[str, str, str], tuple] = field(default_factory=dict)  # each record's (task, parameters)

    def of(self, name: str) -> dict[tuple[str, str], dict]:
        """Analysis `name`'s records by (model, data spec), in the order they were made."""
        return {(model, spec): record for (kind, model, spec), record in self.records.items() if kind == name}

    def __bool__(self) -> bool:
        return bool(self.records)

    def to_wire(self) -> list[list]:
        return [[name, model, spec, record] for (name, model, spec), record in self.records.items()]

    def merge_wire(self, items: list[list]) -> None:
        """A worker's records added: a record the controller already holds is joined by its analysis' `merge`."""
        for name, model, spec, record in items:
            key = (name, model, spec)
            self.records[key] = get(name).merge(self.records[key], record) if key in self.records else record


def analysed(session, name: str, model: str, data: str | None = None, task: str | None = None, **params) -> dict:
    """The record of analysis `name` on `model` and `data` (default: the run's), run once per run and kept on the
    session for the report. A run keeps one record per (analysis, model, data): asked again with another task or
    other parameters, it is a ConfigError naming both, not the first record given back as if it were the second."""
    analysis = get(name)
    if analysis.scope != ASKED:
        raise ValueError(f"analysis {name!r} is made when the report is built ({analysis.scope}), not by a test")
    spec, task = session.data_spec(data), session.task(model, task)
    key, asked = (name, model, spec), (task, tuple(sorted(params.items())))
    records = session.analyses
    if key not in records.records:
        records.records[key] = analysis.run(session, model, spec, task, **params)
        records.asked[key] = asked
    elif records.asked.get(key, asked) != asked:
        raise ConfigError(f"analysis {name!r} of {model} on {spec} was asked for with {_said(records.asked[key])} "
                          f"and again with {_said(asked)}; a run keeps one record of it per model and data: ask "
                          f"with the same task and parameters")
    return records.records[key]


def _said(asked: tuple) -> str:
    task, params = asked
    return ", ".join([f"task {task}", *(f"{k}={v!r}" for k, v in params)])


def place_analyses(session, document: dict) -> dict:
    """`document` (the report's header, models, datasets and groups) with the analyses' parts placed, in the
    registry's order: each group's part of every per-group analysis at the end of that group; each report key, an
    asked analysis' entries or the part made of the run; then every other record with its table, under
    `analyses`."""
    others = []
    for name in names():
        analysis = get(name)
        if analysis.scope == PER_GROUP:
            for group in document["groups"]:
                part = analysis.run(session, group)
                if part is not None:
                    group[analysis.report_key] = part
        elif analysis.scope == OF_THE_RUN:
            document[analysis.report_key] = analysis.run(session)
        elif analysis.report_key is not None:
            document[analysis.report_key] = [analysis.entry(model, session.model_label(model), spec, record)
                                             for (model, spec), record in session.analyses.of(name).items()]
        else:
            others += [{"analysis": name, "model": model, "label": session.model_label(model), "dataset": spec,
                        "record": record, "table": analysis.table(record).as_dict()}
                       for (model, spec), record in session.analyses.of(name).items()]
    if others:
        document["analyses"] = others
    return document


def empty_report_entries() -> dict:
    """The analysis parts of a report without numbers (an interrupted run's): each asked analysis' report key,
    empty; the parts made of the results are left out with them."""
    return {analysis.report_key: [] for analysis in map(get, names())
            if analysis.report_key is not None and analysis.scope == ASKED}
