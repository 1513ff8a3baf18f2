"""Scale-out under pytest-xdist: workers split the grid, each pinned to its own GPU when there are several, and the
controller's merged report is the single-process report, number for number and row for row. Here with the demo
detector (numpy encoders) on caption edits and corruptions; tests/test_determinism.py checks the same with torch
encoders, the attacks (UAP, universal triggers, HotFlip) and other thread counts."""
import json

import numpy as np
import pytest
import torch

from pytest_memerobust.engine import Condition
from pytest_memerobust.judge.results import Answers, ConditionResult, Memes, StatsConfig
from pytest_memerobust.run.options import CacheOptions, ComputeOptions, DataOptions, JudgingOptions, Options
from pytest_memerobust.run.session import RobustnessSession
from pytest_memerobust.run.workers import merge_wire, to_wire, worker_device

pytest.importorskip("xdist", reason="pytest-xdist is in the dev extra")

SELECTION = ["--memerobust-model=demo", "--memerobust-limit=24", "--memerobust-bootstrap=100",
             "-k", "(rainbow and (typos or imagenet_c or clean)) or evasion", "-p", "no:cacheprovider", "-p",
             "no:randomly"]


def test_the_merged_report_equals_a_single_process_run(pytester):
    """Both runs start in this process (pytester): the single one runs here, the split one's controller here and its
    two workers in their own processes."""
    single = pytester.runpytest(*SELECTION, "--memerobust-report=single.json")
    split = pytester.runpytest(*SELECTION, "-n", "2", "--memerobust-report=split.json")
    assert single.ret == split.ret
    assert "memerobust tables" in split.stdout.str()
    one, two = (json.loads((pytester.path / name).read_text()) for name in ("single.json", "split.json"))
    assert one["groups"] and one["groups"][0]["results"]
    assert one["analyses"][0]["analysis"] == "evasion_at_k"  # a registered analysis' record, sent by a worker
    assert one == two  # every number, every interval, every prediction digest, in the same order
    counts = [{k: v for k, v in run.parseoutcomes().items() if k in ("passed", "failed", "skipped")}
              for run in (single, split)]
    assert counts[0] == counts[1] and counts[0]["passed"] > 0


def test_a_result_survives_the_trip_from_worker_to_controller_exactly():
    rng = np.random.default_rng(0)
    proba = rng.dirichlet([1, 1], size=30).astype(np.float32)
    result = ConditionResult("demo", "demo:test", Condition(text="typos", text_severity=3),
                             Memes(rng.integers(0, 2, 30), np.array(["a", "b", ""] * 10)),
                             Answers(rng.dirichlet([1, 1], size=30), proba), StatsConfig(n_resamples=50))
    again = ConditionResult.from_wire(result.to_wire(), StatsConfig(n_resamples=50))
    assert again.condition == result.condition and again.answers.proba.dtype == np.float32
    for part, names in (("memes", ("y_true", "groups")), ("answers", ("proba_clean", "proba"))):
        for name in names:
            np.testing.assert_array_equal(getattr(getattr(again, part), name), getattr(getattr(result, part), name))
    assert again.as_dict() == result.as_dict()


def test_merging_keeps_one_clean_result_and_the_collection_order():
    session = RobustnessSession(Options(models=("demo",), data=DataOptions(limit=20)))
    worker_a, worker_b = RobustnessSession(session.options), RobustnessSession(session.options)
    worker_a.ordering.position = 5
    worker_a.evaluate("demo", "image=contrast@2")
    worker_b.ordering.position = 2
    worker_b.evaluate("demo", "text=typos@1")
    for worker in (worker_a, worker_b):
        merge_wire(session, to_wire(worker))
    assert [key[2] for key in session.outcomes.results] == ["clean", "text=typos@1", "image=contrast@2"]
    clean = ("demo", "demo", "clean")
    assert session.outcomes.results[clean].as_dict() == worker_a.outcomes.results[clean].as_dict()


@pytest.mark.parametrize("device, gpus, worker, want", [
    ("auto", 4, "gw5", "cuda:1"), ("cuda", 2, "gw0", "cuda:0"), ("cuda", 2, "gw3", "cuda:1"),
    ("auto", 1, "gw3", "auto"), ("auto", 0, "gw1", "auto"), ("cpu", 4, "gw2", "cpu"), ("cuda:1", 4, "gw0", "cuda:1"),
])
def test_each_worker_gets_its_own_gpu_when_there_are_several(monkeypatch, device, gpus, worker, want):
    monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)
    assert worker_device(device, worker) == want


def test_the_controller_reads_the_workers_attacks_instead_of_running_them_again(monkeypatch):
    """The controller builds the report's worst examples and the counterexamples from what the workers' attacks
    chose and fitted (captions, a trigger, a UAP's pattern), carried with their results: before, it ran HotFlip and
    the fits again, alone, on one thread, for every failing case (seen on PrideMM under -n 2)."""
    import execnet

    from pytest_memerobust.perturb import attacks, uap

    options = Options(models=("memeblip2-tda",), data=DataOptions(limit=12),
                      compute=ComputeOptions(batch_size=8, cache=CacheOptions(features=False)),
                      judging=JudgingOptions(stats=StatsConfig(n_resamples=20)))
    conditions = [Condition.parse(c) for c in ("text=hotflip@1", "text=universal_trigger@1", "image=uap@1")]
    worker = RobustnessSession(options)
    for condition in conditions:
        worker.plan("memeblip2-tda", None, condition)
        worker.evaluate("memeblip2-tda", condition)
    done = worker.engine("memeblip2-tda", worker.data_spec())
    controller = RobustnessSession(options)
    merge_wire(controller, execnet.loads(execnet.dumps(to_wire(worker))))  # the trip pytest-xdist makes
    monkeypatch.setattr(attacks.AttackContext, "probabilities",
                        lambda *args, **keywords: pytest.fail("the controller queried the detector (an attack ran)"))
    monkeypatch.setattr(uap, "fit_uap", lambda *args, **keywords: pytest.fail("the controller fitted the UAP"))
    engine = controller.engine("memeblip2-tda", controller.data_spec())
    for condition in conditions[:2]:
        captions = [engine.caption(condition, i) for i in range(12)]
        assert captions == [done.caption(condition, i) for i in range(12)]
        assert sum(a != m.text for a, m in zip(captions, engine.dataset.memes)) >= 6  # the attacks did edit them
    np.testing.assert_array_equal(engine.picture(conditions[2], 3), done.picture(conditions[2], 3))
    assert not np.array_equal(engine.picture(conditions[2], 3), engine.picture(Condition(), 3))
