"""The parts a `RobustnessSession` is assembled from, each a small object of its own: what it loaded once and keeps
(`Loaded`), what it tells its user besides the tables (`RunNotes`), what the run will evaluate (`RunPlan`), the order
results were first asked for (`ResultOrder`), what the run found (`Outcomes`) and where its work runs
(`Execution`). The session's methods fill them; holding them apart keeps each one's state in one place."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable


@dataclass
class Loaded:
    """What the session loaded once and keeps for the run: detectors by model spec, datasets by spec (and their
    as-stored and fitting variants), engines by (model, spec, task[, defence][, source]), one store of encoded
    inputs per model, each model's encoder precision, the OCR backend, each dataset's fingerprint, the baseline."""

    detectors: dict = field(default_factory=dict)
    datasets: dict = field(default_factory=dict)
    engines: dict = field(default_factory=dict)
    feature_stores: dict = field(default_factory=dict)
    precisions: dict = field(default_factory=dict)
    ocr: object = None
    fingerprints: dict = field(default_factory=dict)
    baseline: dict | None = None


@dataclass
class RunNotes:
    """What the run tells its user besides the tables: `lines`, what it decided on the user's behalf (printed with
    the tables), and `warnings`, what may mislead its numbers (in pytest's warnings summary); each said once."""

    lines: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def add(self, line: str) -> None:
        if line not in self.lines:
            self.lines.append(line)

    def warn(self, warning: str) -> None:
        if warning not in self.warnings:
            self.warnings.append(warning)


@dataclass
class RunPlan:
    """What the run will evaluate, as the tests announce it: per (model, data spec) the conditions in run order
    (computed ahead), the gate's family of cases (nodeid, model, data, task, group, captions, condition), each
    suite's grid (model, data spec, suite name or None) -> (text sides, image sides, condition ids), which gets its
    own tables and heat map, and each suite's [export] (out, counterexamples, format) once it ran."""

    conditions: dict = field(default_factory=dict)
    cases: list[tuple] = field(default_factory=list)
    grids: dict = field(default_factory=dict)
    exports: dict = field(default_factory=dict)


@dataclass
class ResultOrder:
    """Where each result was first asked for, as a position in the collected tests, so a report merged from
    pytest-xdist workers lists results in the same order as a single-process run: the current test's `position`,
    each nodeid's position, and each result key's first position (`first_asked`)."""

    position: float = float("inf")
    positions: dict = field(default_factory=dict)
    first_asked: dict = field(default_factory=dict)


@dataclass
class Outcomes:
    """What the run found: the results per (model label, data spec, condition id), the gate's comparisons per
    (model label, spec, condition) (run/gate.py), every robustness case's verdict record in the order they ran, the
    run's verdict once every case ran, and the report built from them, with the state it was built for."""

    results: dict = field(default_factory=dict)
    gate_comparisons: dict | None = None
    case_records: list[dict] = field(default_factory=list)
    verdict: dict | None = None
    report: dict | None = None
    report_for: tuple | None = None


class Execution:
    """Where the run's work runs: the executor that evaluates shards (None: this process), made when first asked
    for (`make`: a Ray cluster is reached then, so a bad one is one usage error, asked for by `RobustnessSession.start`
    before any case), and the folder every process of the run sees."""

    def __init__(self, make: Callable[[], object]):
        self._make, self._made, self._executor = make, False, None
        self.run_folder: Path | None = None
        self.owned_run_folder: Path | None = None  # the temporary run folder this session made, which `close` removes

    @property
    def executor(self):
        if not self._made:
            self._executor, self._made = self._make(), True
        return self._executor

    @property
    def made(self) -> bool:
        """Whether the executor was made (a cluster reached, a pool set up)."""
        return self._made

    def close(self) -> None:
        """Let go of what the run started (a Ray pool, and the local cluster it started; its own run folder)."""
        if self._executor is not None:
            self._executor.close()
            self._executor = None
        if self.owned_run_folder is not None:
            import shutil

            shutil.rmtree(self.owned_run_folder, ignore_errors=True)
            self.owned_run_folder = None
