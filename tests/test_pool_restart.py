"""A local pool worker killed mid-pass (the kernel's OOM killer, a stray kill) changes nothing in the report: the
shards that did not come back run again on a new pool, as Ray restarts its actors (engine/executors.py LocalPool).
Lost again, they fail their conditions with an error that names them, instead of a BrokenProcessPool failing every
case of the run. Each worker notes the shards it evaluated and holds shard 1 (executors.hold_for_tests), so a kill
lands provably mid-shard: evaluated, its result not handed back.

The demo detector runs: the point is the pool's restart, not a detector, and its workers start as any do (torch
imported at their start) without loading BLIP-2 in every worker of the pools a test starts."""
from __future__ import annotations

import json
import os
import re
import signal
import threading
import time

import pytest

from pytest_memerobust.engine import Condition, executors
from pytest_memerobust.judge.results import StatsConfig
from pytest_memerobust.run.options import CacheOptions, ComputeOptions, DataOptions, JudgingOptions, Options
from pytest_memerobust.run.session import RobustnessSession
from report_compare import comparable

MODEL = "demo"
CONDITIONS = [Condition(text="typos", text_severity=3), Condition(image="gaussian_noise", image_severity=3),
              Condition(text="hotflip", text_severity=1)]


def _evaluate(workers: int, raises: bool = False) -> tuple[dict, bytes | None, str | None]:
    """16 memes in shards of 8: (probabilities or the error, by condition; the report; the pool's note)."""
    session = RobustnessSession(Options(models=(MODEL,), data=DataOptions(limit=16),
                                        compute=ComputeOptions(batch_size=8, shard_size=8,
                                                               cache=CacheOptions(features=False), workers=workers,
                                                               device="cpu"),
                                        judging=JudgingOptions(stats=StatsConfig(n_resamples=20))))
    try:
        for condition in CONDITIONS:
            session.plan(MODEL, None, condition)
        out = {}
        for condition in CONDITIONS:
            try:
                out[condition.id] = session.evaluate(MODEL, condition).answers.proba.tobytes()
            except RuntimeError as error:
                if not raises:
                    raise
                out[condition.id] = error
        note = session.executor.note() if session.executor is not None else None
        if raises:
            return out, None, note
        return out, json.dumps(comparable(session.report()), sort_keys=True).encode(), note
    finally:
        session.close()


def _noted(hold, index: int, known: set[int], deadline_s: float = 240) -> int:
    """A process, not in `known`, that evaluated shard `index` and now holds it."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        for path in hold.glob(f"shard-{index}-pid-*"):
            pid = int(path.name.rpartition("-")[2])
            if pid not in known:
                return pid
        time.sleep(0.02)
    raise AssertionError(f"no worker evaluated shard {index} in {deadline_s} s")


def _killer(hold, kills: int, killed: list[int]) -> threading.Thread:
    """Kill `kills` workers in turn, each while it holds shard 1 (a worker of this test's own pool), then let the
    shard go."""
    def kill():
        try:
            for _ in range(kills):
                pid = _noted(hold, 1, set(killed))
                assert (hold / "hold-1").exists()  # still held: its result never left the worker
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
        finally:
            (hold / "hold-1").unlink(missing_ok=True)

    thread = threading.Thread(target=kill, daemon=True)
    thread.start()
    return thread


@pytest.fixture
def hold(tmp_path, monkeypatch):
    folder = tmp_path / "hold"
    folder.mkdir()
    monkeypatch.setenv(executors.HOLD_ENV, str(folder))
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    monkeypatch.setattr(executors, "POOL_START_S", 0)  # these small passes on the pool, from the first shard
    yield folder
    for held in folder.glob("hold-*"):
        held.unlink()


def test_a_worker_killed_mid_shard_changes_nothing_in_the_report(hold):
    alone, alone_report, _ = _evaluate(workers=1)
    assert not list(hold.glob("shard-*"))  # in this process: nothing held
    (hold / "hold-1").touch()
    killed: list[int] = []
    killer = _killer(hold, 1, killed)
    disturbed, report, note = _evaluate(workers=2)
    killer.join(timeout=60)
    assert len(killed) == 1
    again = [int(p.name.rpartition("-")[2]) for p in hold.glob("shard-1-pid-*")]
    assert len(again) == 2 and killed[0] in again  # shard 1 evaluated again, by a worker of the new pool
    assert re.search(r"; a worker died, and shards? [0-9, ]*1\b[0-9, ]* ran again on a new pool$", note), note
    assert disturbed == alone
    assert report == alone_report


def test_a_shard_lost_twice_fails_its_conditions_naming_it(hold):
    (hold / "hold-1").touch()
    killed: list[int] = []
    killer = _killer(hold, 2, killed)
    out, _, _ = _evaluate(workers=2, raises=True)
    killer.join(timeout=60)
    assert len(killed) == 2
    for condition in CONDITIONS:
        error = out[condition.id]
        assert isinstance(error, RuntimeError), condition.id
        assert re.match(r"shards? [0-9, ]*1\b[0-9, ]* \(memes \d+-15\): a worker process of the pool "
                        r"\(--memerobust-workers\) died while evaluating (it|them), and again on a new pool "
                        r"\(BrokenProcessPool: ", str(error)), str(error)
