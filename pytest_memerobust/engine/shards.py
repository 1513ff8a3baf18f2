"""Shard-major evaluation: every planned condition of an engine, a shard of memes at a time.

A shard's pictures are decoded, each condition side is perturbed and encoded for the shard's memes, the heads run for
every condition (text x image pairs included), and only per-meme outputs survive the shard: probabilities,
abstentions, the share of caption words an edit changed. So memory is bounded by the shard, not the dataset.

Each meme's outputs are those it gets in one pass over the whole dataset (tests/test_shards.py compares): the
perturbations are keyed by meme, the encoders see batches of one shape (determinism.py), and shards start at
multiples of the batch size, so the heads' batches are the whole pass's. A per-meme attack (HotFlip, TextAttack's
recipes, PGD, Square...) runs in the shard, wherever it is evaluated: a caption attack on blocks of `batch_size`
memes (Perturbation.apply's `block`), so the batches of queries it makes are the whole pass's too. Only universal
attacks (a trigger, a UAP's pattern: Perturbation.universal) are fitted once, before the shards, and shared with
them in the attack memo. Which process evaluates a shard is the executor's business (executors.py); results are
keyed by shard and put back in meme order, so every executor, worker count and shard size gives the same bytes.
"""
from __future__ import annotations

import copy
import os
from dataclasses import dataclass, field

import numpy as np

from ..detectors.hosted import usage_delta
from ..determinism import device_type
from ..perturb import get as get_perturbation
from ..perturb.conditions import Condition
from .features import CacheStats
from .progress import PROGRESS_MIN_INPUTS, progress_bar

PICTURE_BUDGET_MIB = 16  # decoded clean pictures of one shard, at most; a side being perturbed takes 10-30x
# that (float copies, keyed noise drawn with int64 hashes, the next side prefetched)
CPU_SHARD_BATCHES = 1  # on a CPU, a shard holds at most this many batches of memes: enough shards to keep a pool of
# worker processes busy (executors.LocalPool). It changes no number: a meme's outputs do not depend on its shard.


@dataclass(frozen=True)
class ShardTask:
    """Memes `start` to `stop` (exclusive) of an engine's dataset; `ids` lets a remote worker check it has the
    same memes."""

    index: int
    start: int
    stop: int
    ids: tuple[str, ...] = ()


@dataclass(frozen=True)
class DetectorAnswers:
    """What the detector answered on a shard's memes, per condition id."""

    outputs: dict[str, tuple[np.ndarray, np.ndarray | None]]  # (probabilities, abstained or None)
    errors: dict[str, Exception] = field(default_factory=dict)  # why a condition could not be evaluated
    # [memes, k] answers of a repeat-sampled detector (detectors/sampling.py)
    samples: dict[str, np.ndarray] = field(default_factory=dict)


@dataclass(frozen=True)
class SideRecords:
    """What perturbing the condition sides recorded for a shard's memes."""

    words_changed: dict[tuple, np.ndarray] = field(default_factory=dict)  # (text edit, severity) -> per meme
    boxless: dict[str, list[int]] = field(default_factory=dict)  # typographic edit -> memes without text boxes
    # per-meme image attack: its side -> {meme row in the whole dataset: the attack's record} (image_attacks.py)
    attack_records: dict[tuple, dict[int, dict]] = field(default_factory=dict)
    # (caption attack, severity) -> its memes' attacked captions: the driver keeps them for counterexamples and
    # reports instead of running the attack again, alone, in its own process
    attacked_captions: dict[tuple, list[str]] = field(default_factory=dict)


@dataclass(frozen=True)
class ShardAccounting:
    """What evaluating a shard cost, and where it ran: counts a worker process's run note needs from it."""

    encoder_calls: dict[str, int] = field(default_factory=dict)
    # what the shard did to its process's feature store (inputs encoded, reused, read from disk): a worker process's
    # counts reach the run's note this way (executors.py); in the run's own process they are already in its store
    store_stats: CacheStats = field(default_factory=CacheStats)
    # what the shard sent to a hosted endpoint (detectors/hosted.py: requests, tokens...): a pool worker's or Ray
    # actor's requests reach the run's note this way (`ShardRunner.run` adds them to the driver's detector)
    hosted_usage: dict = field(default_factory=dict)
    # the process that evaluated the shard (a Ray actor, an xdist worker, this one): for tests that check who did the
    # work; `assemble` ignores it, so the report is the same whoever did
    pid: int = field(default_factory=os.getpid)


@dataclass
class ShardResult:
    """What survives a shard: the detector's answers, what its sides recorded and what it cost, for its memes."""

    index: int
    answers: DetectorAnswers
    side_records: SideRecords = field(default_factory=SideRecords)
    accounting: ShardAccounting = field(default_factory=ShardAccounting)


@dataclass
class Evaluated:
    """A whole shard-major pass, in meme order."""

    outputs: dict[str, tuple[np.ndarray, np.ndarray | None]] = field(default_factory=dict)
    errors: dict[str, Exception] = field(default_factory=dict)  # raised by the condition's own case, not the pass
    words_changed: dict[tuple, np.ndarray] = field(default_factory=dict)
    boxless: dict[str, set[int]] = field(default_factory=dict)
    encoder_calls: dict[str, int] = field(default_factory=dict)
    attack_records: dict[tuple, dict[int, dict]] = field(default_factory=dict)
    samples: dict[str, np.ndarray] = field(default_factory=dict)
    attacked_captions: dict[tuple, list[str]] = field(default_factory=dict)

    def add_conditions(self, other: "Evaluated") -> None:
        """Keep the per-condition results of `other` too (a later pass of the same engine): outputs, errors, words
        changed, samples. What a pass met on the way (pictures without text boxes, inputs encoded, attacks' records
        and captions) is the engine's sides' and attack state's to keep."""
        self.outputs.update(other.outputs)
        self.errors.update(other.errors)
        self.words_changed.update(other.words_changed)
        self.samples.update(other.samples)


def picture_bytes(engine) -> int:
    """Bytes of one decoded clean picture (the first meme's; 0 for caption-only data)."""
    if not engine.dataset.memes or not engine.dataset.memes[0].has_picture:
        return 0
    picture = engine.clean_picture(0)
    return int(picture.numel() * picture.element_size()) if hasattr(picture, "numel") else int(picture.nbytes)


def shard_memes(engine, size: int | None = None, budget_mib: int = PICTURE_BUDGET_MIB) -> int:
    """Memes per shard: `size`, else as many as `budget_mib` of decoded pictures hold (on a CPU, at most
    CPU_SHARD_BATCHES batches, so the shards spread over worker processes); a multiple of the engine's batch size
    either way, so the heads batch as in one pass."""
    batch = engine.batch_size
    if size is None:
        one = picture_bytes(engine)
        size = len(engine.ids) if one == 0 else budget_mib * 2**20 // one
        if device_type(engine) != "cuda":
            size = min(size, CPU_SHARD_BATCHES * batch)
    return max(batch, size // batch * batch)


class InProcess:
    """Shards one after the other in this process, sharing its store of encoded inputs and its attack memo (the
    executor when the run names none; the others are in executors.py)."""

    name = "in-process"

    def run(self, engine, tasks: list[ShardTask], conditions, tick=None):
        for task in tasks:
            yield evaluate_shard(engine, task, conditions, tick=tick)


class ShardRunner:
    """Evaluates an engine's planned conditions shard-major with an executor (executors.py)."""

    def __init__(self, executor=None, size: int | None = None, budget_mib: int = PICTURE_BUDGET_MIB,
                 progress: bool = True):
        self.executor = executor or InProcess()
        self.size, self.budget_mib, self.progress = size, budget_mib, progress

    def takes(self, engine, condition: Condition) -> bool:
        """Whether `condition` is evaluated shard-major: a planned condition of an engine that does not read its
        captions by OCR (its readings are per picture too, but the OCR view reads them from the engine)."""
        return engine.ocr is None and any(c.id == condition.id for c in engine.planned())

    def row_ranges(self, engine) -> list[range]:
        size = shard_memes(engine, self.size, self.budget_mib)
        n = len(engine.ids)
        return [range(start, min(start + size, n)) for start in range(0, n, size)]

    def tasks(self, engine) -> list[ShardTask]:
        return [ShardTask(k, rows.start, rows.stop, tuple(engine.ids[rows.start : rows.stop]))
                for k, rows in enumerate(self.row_ranges(engine))]

    def run(self, engine) -> Evaluated:
        conditions = [c for c in engine.planned() if self.takes(engine, c)]
        failed = fitted_before_shards(engine, conditions, self.progress, self.executor)
        carry_fit_usage(engine, self.executor)
        conditions = [c for c in conditions if c.id not in failed]
        tasks = self.tasks(engine)
        results: dict[int, ShardResult] = {}
        bar = None  # one bar over every (meme, condition) of a pass that is not small, attacks included
        if self.progress and len(engine.ids) * len(conditions) >= PROGRESS_MIN_INPUTS:
            bar = progress_bar(len(engine.ids) * len(conditions),
                               f"{len(conditions)} conditions x {len(engine.ids)} memes, {len(tasks)} shards",
                               unit="meme")
        try:
            for result in self.executor.run(engine, tasks, conditions, bar.update if bar else None):
                results[result.index] = result
                usage, pid = result.accounting.hosted_usage, result.accounting.pid
                if usage and pid != os.getpid() and self.executor.name != "xdist":
                    engine.detector.add_usage(usage)  # (an xdist worker's reach the controller)
        finally:
            if bar is not None:
                bar.close()
        missing = [t.index for t in tasks if t.index not in results]
        if missing:
            raise RuntimeError(f"shards {missing} came back from no worker")
        evaluated = assemble([results[t.index] for t in tasks], conditions)
        evaluated.errors.update(failed)
        return evaluated


def fitted_before_shards(engine, conditions: list[Condition], progress: bool = False, executor=None
                         ) -> dict[str, Exception]:
    """Universal attacks, before any shard: each is run on the first meme, which fits what it fits (a trigger, a
    UAP's pattern) into the engine's attack memo that every shard shares; several fits run side by side on the
    executor when it has a `fit` (the local pool), else one after the other here. Per-meme attacks run in the
    shards. Returns the conditions whose fit failed, with the error."""
    failed: dict[str, Exception] = {}
    sides = []
    for condition in conditions:
        for side in (("text", condition.text, condition.text_severity), engine.image_side(condition)):
            if side[1] and get_perturbation(side[1]).universal and engine.ids and side not in sides:
                sides.append(side)
    bar = progress_bar(len(sides), "fitting universal attacks", unit="fit") if progress and sides else None
    fit = getattr(executor, "fit", None)
    outcomes = fit(engine, sides) if callable(fit) else fit_here(engine, sides)
    try:
        for side, error in outcomes:
            if error is not None:  # this side's conditions fail their own cases
                for condition in conditions:
                    if side in (("text", condition.text, condition.text_severity), engine.image_side(condition)):
                        failed[condition.id] = error
            if bar is not None:
                bar.update(1)
    finally:
        if bar is not None:
            bar.close()
    return failed


def fit_side(engine, side: tuple, memo: dict | None = None) -> tuple[dict, Exception | None]:
    """One universal attack side fitted on the engine's first meme into `memo` (default: the engine's own attack
    memo): (the entries the fit added to it, error or None). Every executor fits through this, here or in a worker."""
    memo = engine.attack_memo() if memo is None else memo
    known, error = set(memo), None
    usage_before = dict(getattr(engine.detector, "usage", None) or {})
    try:
        engine.shard(range(0, 1), attack_memo=memo).inputs(*side)
    except Exception as failure:
        error = failure
    fitted = {key: value for key, value in memo.items() if key not in known}
    usage = usage_delta(engine.detector, usage_before)
    if usage:  # what a fit in a pool worker sent a hosted endpoint reaches the driver with its entries
        fitted[(FIT_USAGE, os.getpid(), side)] = usage
    return fitted, error


FIT_USAGE = "hosted usage of a fit"  # an attack memo entry (FIT_USAGE, pid, side) -> what that fit sent


def carry_fit_usage(engine, executor) -> None:
    """Take the usage entries fits left in the engine's attack memo out of it, adding those of fits another process
    ran (a pool worker) to the engine's detector; an xdist worker's reach the controller with its own wire."""
    memo = engine.attack_memo()
    for key in [k for k in memo if isinstance(k, tuple) and k[:1] == (FIT_USAGE,)]:
        usage = memo.pop(key)
        if key[1] != os.getpid() and getattr(executor, "name", None) != "xdist":
            engine.detector.add_usage(usage)


def fit_here(engine, sides: list[tuple]):
    """Each universal attack side fitted in this process, into the engine's memo: yields (side, error or None)."""
    for side in sides:
        yield side, fit_side(engine, side)[1]


def evaluate_shard(engine, task: ShardTask, conditions: list[Condition], attack_memo: dict | None = None,
                   tick=None) -> ShardResult:
    """Every condition on one shard of `engine`'s memes, in the plan's order (so the next sides are perturbed
    while the detector encodes one). `tick(memes)` is called after each condition (a progress bar's update)."""
    if task.ids and tuple(engine.ids[task.start : task.stop]) != tuple(task.ids):
        raise RuntimeError(f"shard {task.index}: this worker's memes {task.start}-{task.stop} are not the run's "
                           f"(another dataset or --memerobust-limit on this host?)")
    sub = engine.shard(range(task.start, task.stop), attack_memo)
    sub.plan(conditions)
    outputs, errors, words = {}, {}, {}
    before = copy.deepcopy(sub.features.stats)
    usage_before = dict(getattr(engine.detector, "usage", None) or {})
    for condition in conditions:
        try:
            outputs[condition.id] = (sub.predict(condition), sub.abstentions.get(condition.id))
        except Exception as error:  # this condition's own failure: its case reports it, the others go on
            errors[condition.id] = error
            continue
        finally:
            if tick is not None:
                tick(task.stop - task.start)
        side = (condition.text, condition.text_severity)
        if condition.text and side not in words:
            changed = sub.words_changed(condition)
            if changed is not None:
                words[side] = changed
    boxless = {edit: sorted(task.start + i for i in rows) for edit, rows in sub.boxless.items()}
    records = {side: {task.start + row: record for row, record in table.items()}
               for side, table in sub.attack_records().items()}
    result = ShardResult(task.index, DetectorAnswers(outputs, errors, dict(sub.samples)),
                         SideRecords(words, boxless, records, sub.attacked_captions()),
                         ShardAccounting(dict(sub.encoder_calls), sub.features.stats.since(before),
                                         usage_delta(engine.detector, usage_before)))
    del sub
    release_freed_memory()
    return result


def release_freed_memory() -> None:
    """Hand the memory a dropped shard freed back to the system. glibc's malloc keeps freed blocks for reuse, and
    after a large block is freed it serves blocks of up to that size from its heaps instead of fresh mappings: a
    shard's pictures and their float copies then stay resident, shard after shard (measured, 1,500 memes of 512 px
    in shards of 64: 2.2 GB peak for 50 MB of pictures per shard). malloc_trim returns the free pages; elsewhere
    than glibc this does nothing."""
    import ctypes
    import gc

    gc.collect()  # a shard's engine may sit in a reference cycle (a background future's bound method)
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):
        pass


def assemble(results: list[ShardResult], conditions: list[Condition]) -> Evaluated:
    """Shards' outputs, given in meme order, as one pass's."""
    answered = [r.answers for r in results]
    recorded = [r.side_records for r in results]
    outputs, errors = {}, {}
    for condition in conditions:
        error = next((a.errors[condition.id] for a in answered if condition.id in a.errors), None)
        if error is not None:
            errors[condition.id] = error
            continue
        parts = [a.outputs[condition.id] for a in answered]
        abstained = [a for _, a in parts]
        outputs[condition.id] = (np.concatenate([p for p, _ in parts]),
                                 None if any(a is None for a in abstained) else np.concatenate(abstained))
    words = {side: np.concatenate([r.words_changed[side] for r in recorded])
             for side in (recorded[0].words_changed if recorded else {})
             if all(side in r.words_changed for r in recorded)}
    boxless: dict[str, set[int]] = {}
    for r in recorded:
        for edit, rows in r.boxless.items():
            boxless.setdefault(edit, set()).update(rows)
    calls: dict[str, int] = {}
    for r in results:
        for modality, count in r.accounting.encoder_calls.items():
            calls[modality] = calls.get(modality, 0) + count
    records: dict[tuple, dict[int, dict]] = {}
    for r in recorded:
        for side, table in r.attack_records.items():
            records.setdefault(side, {}).update(table)
    samples = {condition.id: np.concatenate([a.samples[condition.id] for a in answered])
               for condition in conditions if condition.id in outputs
               and all(condition.id in a.samples for a in answered)}
    attacked = {side: [caption for r in recorded for caption in r.attacked_captions[side]]
                for side in (recorded[0].attacked_captions if recorded else {})
                if all(side in r.attacked_captions for r in recorded)}
    return Evaluated(outputs, errors, words, boxless, calls, records, samples, attacked)
