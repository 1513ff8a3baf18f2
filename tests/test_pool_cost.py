"""When the local pool starts, and how many workers it starts (engine/executors.py LocalPool): by what a pass costs,
not by how many (meme, condition) pairs it has. A pass runs in this process until it has run as long as the
workers' start takes; then its shards not begun go to the pool while this process ends its own. Before, a pass of
fewer than 4,096 pairs stayed on one core however long it took (120 PrideMM memes under HotFlip: minutes), and
`--memerobust-workers=1000` on 2 cores was taken at its word (the note claimed 1000 worker processes)."""
from __future__ import annotations

import functools
import os
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from pytest_memerobust.engine import Condition, executors
from pytest_memerobust.engine.executors import LocalPool, ShardTask, affinity_cores, make_executor
from pytest_memerobust.judge.results import StatsConfig
from pytest_memerobust.run.options import CacheOptions, ComputeOptions, DataOptions, JudgingOptions, Options
from pytest_memerobust.run.session import RobustnessSession

MODEL = "memeblip2-tda"
RECIPE = functools.partial(int, 0)  # stands for an engine's recipe: the pool's policy only needs its key


def _spread(pool: LocalPool, seconds: float, shards: int) -> tuple[list[int], list[int]]:
    """The policy alone, on threads that stand for workers: (shards run here, shards handed to the pool), for a
    pass of `shards` shards that take `seconds` each here."""
    here, threads = [], ThreadPoolExecutor(2)
    pool._submit = lambda fn, *args: threads.submit(fn, *args)

    def evaluate(task):
        time.sleep(seconds)
        here.append(task.index)
        return task.index

    def remote(shared, task):
        return task.index, (None, None)

    tasks = [ShardTask(k, 8 * k, 8 * k + 8) for k in range(shards)]
    try:
        out = list(pool._spread(RECIPE, tasks, evaluate, remote, b"", lambda task, value: value, None))
    finally:
        threads.shutdown()
    assert sorted(out) == list(range(shards))
    return here, sorted(set(out) - set(here))


def test_a_pass_shorter_than_a_start_runs_here_and_hands_nothing():
    pool = LocalPool(2, start_s=1.0)
    here, handed = _spread(pool, 0.01, 6)
    assert here == list(range(6)) and handed == []
    assert pool.passes == pool.shards == 0 and pool.note() is None


def test_a_pass_longer_than_a_start_hands_the_shards_not_begun_to_the_pool():
    pool = LocalPool(2, start_s=0.3)
    here, handed = _spread(pool, 0.2, 8)  # the start's worth is run by t = 0.3 s, inside the second shard
    assert here[:2] == [0, 1] and len(here) < 8 and here == sorted(here)
    assert handed == list(range(len(here), 8))  # every shard not begun, none twice
    assert (pool.passes, pool.shards, pool.here) == (1, len(handed), len(here))


def test_the_measured_start_replaces_the_estimate():
    pool = LocalPool(2)
    assert pool.start_cost(RECIPE) == executors.POOL_START_S > 0
    pool._measured(4.5, None)  # a worker's spawn to its first engine built
    assert pool.start_cost(RECIPE) == 4.5


def test_a_request_beyond_the_cores_is_capped_and_said():
    pool = make_executor(workers=1000)
    assert isinstance(pool, LocalPool) and (pool.workers, pool.requested) == (affinity_cores(), 1000)
    cores = f"{affinity_cores()} usable core{'s' if affinity_cores() > 1 else ''}"
    assert pool.note() == (f"--memerobust-workers=1000 capped at the {cores}: no pass repaid starting worker "
                           f"processes; all ran in this process")


def test_a_pool_started_mid_pass_gives_the_bytes_of_one_process_on_no_more_workers_than_shards(monkeypatch):
    """Shard 0 here, the others on the pool, started 1 ms into the pass: the same bytes as one process (every shard
    computes at determinism.RESULT_THREADS threads, here and in a worker), per-meme attacks included; 1000 workers
    asked for, as many started as there were shards to hand over."""
    if affinity_cores() < 2:
        pytest.skip("one usable core: the pool never starts")
    monkeypatch.setattr(executors, "POOL_START_S", 1e-3)
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    conditions = ["clean", "text=typos@3", "text=hotflip@1", "image=gaussian_noise@3", "image=pgd_linf@1"]
    out, who = {}, {}
    for workers in (1, 1000):
        session = RobustnessSession(Options(models=(MODEL,), data=DataOptions(limit=24),
                                            compute=ComputeOptions(batch_size=8, cache=CacheOptions(features=False),
                                                                   workers=workers, device="cpu"),
                                            judging=JudgingOptions(stats=StatsConfig(n_resamples=20))))
        try:
            for condition in conditions:
                session.plan(MODEL, None, Condition.parse(condition))
            if workers > 1:
                run = session.executor.run

                def noted(*args):
                    for result in run(*args):
                        who[result.index] = result.accounting.pid
                        yield result

                session.executor.run = noted
            out[workers] = {c: session.evaluate(MODEL, c).answers.proba.tobytes() for c in conditions}
            note = session.executor.note() if session.executor is not None else None
        finally:
            session.close()
    assert who[0] == os.getpid() and os.getpid() not in (who[1], who[2])
    cores = f"{affinity_cores()} usable core{'s' if affinity_cores() > 1 else ''}"
    assert note == (f"2 shards of 1 pass ran on 2 worker processes, one thread each (--memerobust-workers=1000 "
                    f"capped at the {cores}; the same numbers as one process); 1 more ran in this process while the "
                    f"workers started")
    assert out[1000] == out[1]


@pytest.mark.parametrize("value", ["0", "-3"])
def test_fewer_than_one_worker_stays_a_usage_error(pytester, value):
    pytester.makeconftest("")
    result = pytester.runpytest(f"--memerobust-workers={value}", "-p", "no:cacheprovider")
    assert result.ret == 4
    result.stderr.fnmatch_lines([f"*--memerobust-workers*expected auto or a number of worker processes >= 1, "
                                 f"got '{value}'*"])


pytest_plugins = ["pytester"]


def test_a_pool_that_cannot_start_leaves_every_shard_to_this_process_and_says_why():
    pool = LocalPool(2, start_s=0)

    def refuse(fn, *args):
        raise OSError("fork failed: Resource temporarily unavailable")

    pool._submit = refuse
    here = []
    tasks = [ShardTask(k, 8 * k, 8 * k + 8) for k in range(4)]
    out = list(pool._spread(RECIPE, tasks, lambda task: here.append(task.index) or task.index, None, b"", None, None))
    assert out == here == [0, 1, 2, 3]
    assert pool.note() == ("worker processes could not start (OSError: fork failed: Resource temporarily "
                           "unavailable); every pass ran in this process")
