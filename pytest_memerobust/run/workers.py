"""Between a run's processes: what a pytest-xdist worker hands the controller (`to_wire`, `merge_wire`: results,
grids, notes, fitted attacks), and each worker process's device and share of the CPU."""
from __future__ import annotations

import pickle
from dataclasses import dataclass, field

from ..judge.results import ConditionResult


@dataclass
class WorkerReturns:
    """On a pytest-xdist controller, what the workers handed back beyond results: their feature caches' counts, what
    their attacks fitted and chose per engine key (attack memo, attacked captions), what they sent to hosted models."""

    cache_stats: list[dict] = field(default_factory=list)
    attacks: dict[tuple, tuple[dict, dict]] = field(default_factory=dict)
    hosted: list[dict] = field(default_factory=list)


def _engine_key_to_wire(key: tuple) -> list:
    """A session's engine key (model, spec, task[, defence][, ("from", source)]) as plain lists."""
    return [list(part) if isinstance(part, tuple) else part for part in key]


def _engine_key_from_wire(key: list) -> tuple:
    return tuple(tuple(part) if isinstance(part, list) else part for part in key)



def worker_device(device: str, worker_id: str) -> str:
    """The device of pytest-xdist worker `gwN`: with several GPUs, worker N is pinned to GPU N mod their number."""
    if device not in ("auto", "cuda"):
        return device
    import torch

    count = torch.cuda.device_count()
    if count < 2:
        return device
    return f"cuda:{int(worker_id.removeprefix('gw')) % count}"


def share_cpu_threads(worker_count: int) -> None:
    """Give each of `worker_count` processes its share of the CPU's cores for torch: left at torch's default, every
    pytest-xdist worker starts one thread per core, and on a small machine they spend their time waiting on each
    other (a demo run took 8x longer with -n 2 on 2 cores). What the report's numbers depend on runs at
    determinism.RESULT_THREADS whatever this says, so the workers' report is a single process's."""
    import os

    import torch

    torch.set_num_threads(max(1, (os.cpu_count() or 1) // max(1, worker_count)))


def to_wire(session) -> dict:
    """What a pytest-xdist worker hands the controller: its results, grid orderings, notes and cache counts,
    and the tests' positions (the controller collects none; its report lists cases in that order)."""
    from .accounting import cache_stats, hosted_usage, run_notes

    return {"results": [r.to_wire() for r in session.outcomes.results.values()],
            "positions": session.ordering.positions,
            "order": [session.ordering.first_asked.get(key, float("inf")) for key in session.outcomes.results],
            "grids": [[list(key), [list(t), list(i), list(c)]] for key, (t, i, c) in session.planned.grids.items()],
            "notes": run_notes(session, hosted=False), "cache": cache_stats(session), "hosted": hosted_usage(session),
            "analyses": session.analyses.to_wire(),
            "exports": session.planned.exports, "attacks": _attacks_to_wire(session)}

def _attacks_to_wire(session) -> list[list]:
    """Per engine, what its attacks fitted and the captions its model-aware caption attacks chose, so the
    controller's report reads them instead of running the attacks again, alone, on one thread. The memo holds
    arrays (a UAP's pattern): it travels pickled, between processes of one run."""
    out = []
    for key, engine in session.loaded.engines.items():
        memo, captions = engine.attack_memo(), engine.attacked_captions()
        if memo or captions:
            out.append([_engine_key_to_wire(key), pickle.dumps(memo, protocol=pickle.HIGHEST_PROTOCOL),
                        [[name, severity, texts] for (name, severity), texts in captions.items()]])
    return out

def merge_wire(session, wire: dict) -> None:
    """Add a worker's `to_wire` to `session`: the controller's report then covers the whole grid. A result
    another worker already sent (each computes the clean condition) is kept once: they are identical."""
    for nodeid, position in wire.get("positions", {}).items():  # every worker collected every test
        session.ordering.positions.setdefault(nodeid, position)
    for item, position in zip(wire["results"], wire["order"]):
        result = ConditionResult.from_wire(item, session.options.judging.stats)
        key = (result.model, result.dataset, result.condition.id)
        session.outcomes.results.setdefault(key, result)
        session.ordering.first_asked[key] = min(session.ordering.first_asked.get(key, position), position)
    first_asked = session.ordering.first_asked  # sorted stably: ties keep their order
    keys = sorted(session.outcomes.results, key=lambda k: first_asked.get(k, float("inf")))
    session.outcomes.results = {k: session.outcomes.results[k] for k in keys}
    for (model, spec, suite), (text_sides, image_sides, conditions) in wire["grids"]:
        session.declare(model, spec, suite, text_sides, image_sides, conditions)
    for note in wire["notes"]:
        session.notes.add(note)
    session.analyses.merge_wire(wire.get("analyses", []))
    for suite, spec in wire.get("exports", {}).items():
        session.planned.exports.setdefault(suite, spec)
    for key, memo, captions in wire.get("attacks", []):
        key = _engine_key_from_wire(key)
        kept = session.from_workers.attacks.setdefault(key, ({}, {}))
        for entry, fitted in pickle.loads(memo).items():
            kept[0].setdefault(entry, fitted)
        for name, severity, texts in captions:
            kept[1].setdefault((name, severity), texts)
        if key in session.loaded.engines:
            session.loaded.engines[key].adopt_attacks(*kept)
    session.from_workers.cache_stats.append(wire["cache"])
    session.from_workers.hosted.extend(wire.get("hosted", []))
