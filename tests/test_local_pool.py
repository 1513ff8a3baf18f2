"""The local pool of worker processes (engine/executors.py LocalPool), the default executor on a CPU: shards
evaluated by other processes give the bytes one process gives, per-meme attacks included; a pass too small to repay
the workers' start stays in this process; the bar counts every (meme, condition) the workers finish; closing the
pool ends its processes; `--memerobust-workers` takes auto or a number.

The bytes are checked on memeblip2-tda, which has torch encoders (the demo detector's are numpy, which would hide
thread effects). Where the point is the pool's own work (the bar's ticks, a run ended mid-shard), the demo detector
runs: the same pool and workers (each imports torch at its start), without loading BLIP-2 in every process. The
universal fits are made small (tests/small_fits.py: FIT_MEMES training memes, UAP_STEPS steps) in this process and in
the workers alike: the bytes compared are those of the same fits, wherever they ran."""
from __future__ import annotations

import os

import pytest

from pytest_memerobust.engine import Condition
from pytest_memerobust.engine import executors, pool_worker
from pytest_memerobust.engine.executors import LocalPool, make_executor, usable_cores
from pytest_memerobust.judge.results import StatsConfig
from pytest_memerobust.run.accounting import cache_stats, cache_summary
from pytest_memerobust.run.options import CacheOptions, ComputeOptions, DataOptions, JudgingOptions, Options
from pytest_memerobust.run.session import RobustnessSession

from small_fits import patch_small_pool_fits

MODEL = "memeblip2-tda"
PLAIN = "demo"  # where the detector is not the point
MEMES, BATCH = 12, 4  # on a CPU: shards of one batch, three of them
KINDS = ["clean", "text=typos@3", "text=hotflip@1", "text=universal_trigger@1", "image=gaussian_noise@3",
         "image=uap@1", "image=pgd_linf@1", "text=hotflip@1+image=gaussian_noise@3"]
FIT_MEMES, UAP_STEPS = 8, 5  # the universal fits' training memes and the pattern's steps (defaults 64 and 20)


def _evaluate(tmp_path, workers: int) -> tuple[dict, RobustnessSession]:
    session = RobustnessSession(Options(models=(MODEL,), data=DataOptions(limit=MEMES),
                                        compute=ComputeOptions(batch_size=BATCH,
                                                               cache=CacheOptions(features=False, folder=tmp_path),
                                                               workers=workers, device="cpu"),
                                        judging=JudgingOptions(stats=StatsConfig(n_resamples=20))))
    for condition in KINDS:
        session.plan(MODEL, None, Condition.parse(condition))
    out = {}
    for condition in KINDS:
        result = session.evaluate(MODEL, condition)
        out[condition] = (result.answers.proba.tobytes(), result.measures.caption_edit, result.measures.picture_attack)
    return out, session


@pytest.fixture(scope="module")
def one_process(tmp_path_factory):
    with pytest.MonkeyPatch.context() as patch:
        patch_small_pool_fits(patch, FIT_MEMES, UAP_STEPS)
        out, session = _evaluate(tmp_path_factory.mktemp("one"), workers=1)
    assert session.executor is None
    return out, cache_stats(session)


def test_two_worker_processes_give_every_kind_of_condition_the_bytes_one_process_gives(one_process, tmp_path,
                                                                                        monkeypatch):
    monkeypatch.setattr(executors, "POOL_START_S", 0)  # a pass this small would otherwise stay in this process
    patch_small_pool_fits(monkeypatch, FIT_MEMES, UAP_STEPS)  # the fits go to the workers: small there too
    who = []
    evaluate = executors.LocalPool.run

    def spy(self, engine, tasks, conditions, tick=None):
        for result in evaluate(self, engine, tasks, conditions, tick):
            who.append(result.accounting.pid)
            yield result

    monkeypatch.setattr(executors.LocalPool, "run", spy)
    try:
        out, session = _evaluate(tmp_path, workers=2)
        assert isinstance(session.executor, LocalPool)
        workers = session.executor.worker_pids()
        # the trigger and the UAP fitted side by side in the workers, then every shard there
        assert "3 shards of 1 pass (and 2 universal attack fits) ran on 2 worker processes" in session.executor.note()
        # the run's note counts what the workers encoded, though this process encoded nothing: about what one
        # process encodes (each worker's store is its own, so an input met in two workers' shards counts twice)
        assert [store.stats.encoded for store in session.loaded.feature_stores.values()] == [{"image": 0, "text": 0}]
        stats, one_process_stats = cache_stats(session), one_process[1]
        for modality, n in one_process_stats["encoded"].items():
            assert n > 0 and 0.8 * n <= stats["encoded"][modality] <= 1.25 * n, (modality, stats, one_process_stats)
        assert f"encoded {stats['encoded']['image']} pictures and {stats['encoded']['text']} captions" in (
            cache_summary(session))
    finally:
        session.close()
    assert len(who) == 3 and os.getpid() not in who and set(who) <= set(workers)
    for condition in KINDS:
        assert out[condition] == one_process[0][condition], condition
    assert out["text=hotflip@1"][1]["words_changed"] > 0  # the attack ran, in the workers
    for pid in workers:  # closed: the workers are gone
        assert not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split(") ")[1][0] in "ZX"


def test_a_pass_too_small_for_the_pool_runs_in_this_process_and_starts_no_worker(tmp_path):
    session = RobustnessSession(Options(models=(MODEL,), data=DataOptions(limit=16),
                                        compute=ComputeOptions(batch_size=8, cache=CacheOptions(features=False),
                                                               workers=2, device="cpu"),
                                        judging=JudgingOptions(stats=StatsConfig(n_resamples=20))))
    session.plan(MODEL, None, Condition.parse("text=typos@3"))
    assert session.evaluate(MODEL, "text=typos@3").answers.proba.shape == (16, 2)
    assert isinstance(session.executor, LocalPool) and session.executor._pool is None
    assert session.executor.note() is None
    session.close()


def test_the_workers_progress_reaches_the_bar_as_memes_times_conditions(tmp_path, monkeypatch):
    """Every shard of the pass runs in a worker process (a real engine recipe, real workers); each reports its
    memes per condition on the progress queue, and the driver moves them onto the bar: the bar's ticks add up to
    memes x conditions, though this process evaluated nothing."""
    monkeypatch.setattr(executors, "POOL_START_S", 0)  # every shard to the pool
    passes, ticks, who = [], [], []
    run = executors.LocalPool.run

    def spy(self, engine, tasks, conditions, tick=None):
        passes.append((sum(t.stop - t.start for t in tasks), len(conditions)))
        for result in run(self, engine, tasks, conditions, ticks.append):
            who.append(result.accounting.pid)
            yield result

    monkeypatch.setattr(executors.LocalPool, "run", spy)
    session = RobustnessSession(Options(models=(PLAIN,), data=DataOptions(limit=MEMES),
                                        compute=ComputeOptions(batch_size=BATCH,
                                                               cache=CacheOptions(features=False, folder=tmp_path),
                                                               workers=2, device="cpu"),
                                        judging=JudgingOptions(stats=StatsConfig(n_resamples=20))))
    try:
        for condition in ("clean", "text=typos@3", "image=gaussian_noise@3"):
            session.plan(PLAIN, None, Condition.parse(condition))
        session.evaluate(PLAIN, "text=typos@3")
        workers = session.executor.worker_pids()
    finally:
        session.close()
    assert passes == [(MEMES, 3)]  # one pass: the 12 memes under the 3 planned conditions
    assert len(who) == 3 and os.getpid() not in who and set(who) <= set(workers)
    assert sum(ticks) == MEMES * 3 and len(ticks) > 1, ticks


def test_auto_is_the_usable_cores_and_one_inside_a_pytest_xdist_worker(monkeypatch):
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    assert usable_cores() == len(os.sched_getaffinity(0))
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw0")
    assert usable_cores() == 1
    assert make_executor(workers=None) is None  # auto inside xdist: this process
    assert make_executor(workers=3, gpus=True) is None  # a GPU: one process feeds it
    assert isinstance(make_executor(workers=3), LocalPool)


def test_the_option_takes_auto_or_a_positive_number(pytester):
    pytester.makeconftest("")
    result = pytester.runpytest("--memerobust-model=demo", "--memerobust-workers=0", "-p", "no:cacheprovider")
    assert result.ret == 4
    result.stderr.fnmatch_lines(["*--memerobust-workers*expected auto or a number of worker processes >= 1, got '0'*"])


pytest_plugins = ["pytester"]


def _children(pid: int) -> list[int]:
    """The processes `pid` started that are alive now (Linux: /proc/PID/task/*/children)."""
    from pathlib import Path

    return [int(c) for task in Path(f"/proc/{pid}/task").glob("*") for c in (task / "children").read_text().split()]


def _ended(pid: int) -> bool:
    return not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split(") ")[1][0] in "ZX"


@pytest.mark.parametrize("ending", ["interrupted", "its-summary-fails", "its-driver-is-killed"])
def test_a_pool_run_ended_mid_shard_leaves_no_worker(tmp_path, monkeypatch, ending):
    """The driver turns SIGTERM into pytest's interrupted path; closing the pool ends the workers, one of them
    provably inside a shard (executors.hold_for_tests holds it there). Also when the run's last words fail (its
    log reader gone: every write raises BrokenPipeError): the run ends instead of waiting for the held shard. And a
    driver killed outright (SIGKILL: nothing of it runs) leaves no worker waiting for it: each ends itself."""
    import json
    import signal
    import subprocess
    import sys
    import time

    hold = tmp_path / "hold"
    hold.mkdir()
    (hold / "hold-0").touch()
    monkeypatch.setenv(executors.HOLD_ENV, str(hold))
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    report = tmp_path / "r.json"
    (tmp_path / "conftest.py").write_text("from pytest_memerobust.engine import executors\n"
                                          "executors.POOL_START_S = 0  # this small pass runs on the pool too\n")
    # 16 memes in shards of 8 (two: one held, one for the other worker), one case
    run = subprocess.Popen([sys.executable, "-m", "pytest", f"--memerobust-model={PLAIN}", "--memerobust-limit=16",
                            "--memerobust-batch-size=8", "--memerobust-workers=2", "--memerobust-device=cpu", "-p",
                            "no:cacheprovider", "-q",
                            "-k", "rainbow and typos-1", f"--memerobust-report={report}"],
                           cwd=tmp_path, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, start_new_session=True)
    out, workers = "", []
    try:
        deadline = time.monotonic() + 300
        while not list(hold.glob("shard-0-pid-*")) and time.monotonic() < deadline and run.poll() is None:
            time.sleep(0.05)
        held = [int(p.name.rpartition("-")[2]) for p in hold.glob("shard-0-pid-*")]
        assert held and held[0] != run.pid  # a worker evaluated shard 0 and holds it
        if ending == "its-summary-fails":  # the job's log reader is gone: every write of the run's end raises
            run.stdout.close()
            run.send_signal(signal.SIGTERM)
            run.wait(timeout=120)
        elif ending == "its-driver-is-killed":  # the shard stays held: only the worker's own watch can end it
            workers = _children(run.pid)
            assert held[0] in workers
            run.kill()
            run.wait(timeout=60)
            deadline = time.monotonic() + 10 * pool_worker.DRIVER_WATCH_S + 5
            while not all(map(_ended, workers)) and time.monotonic() < deadline:
                time.sleep(0.1)
        else:
            run.send_signal(signal.SIGTERM)
            out, _ = run.communicate(timeout=120)
    finally:
        (hold / "hold-0").unlink(missing_ok=True)
        if run.poll() is None:
            run.kill()
    if ending == "interrupted":
        assert run.returncode == pytest.ExitCode.INTERRUPTED, out[-3000:]
        assert f"memerobust: interrupted: {report}" in out, out[-3000:]
    if ending == "its-driver-is-killed":
        assert [pid for pid in workers if not _ended(pid)] == []
        return
    assert not report.exists() or json.loads(report.read_text())["groups"] == []
    time.sleep(0.5)
    assert _ended(held[0])
