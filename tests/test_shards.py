"""Shard-major evaluation (engine/shards.py): every planned condition a shard of memes at a time gives each meme the
outputs of one pass over the whole dataset, for every kind of perturbation, attacks included; the run never holds
more than a shard's pictures; a condition that cannot be evaluated fails its own case only.

memeblip2-tda has torch encoders (the demo detector's are numpy, which would hide batch effects). The shared folder's
tests run the demo detector: what they check is the claims and the reads, not a detector."""
from __future__ import annotations


import numpy as np
import pytest

from pytest_memerobust.engine import AttackState, Condition, EncodingSettings, Engine
from pytest_memerobust.engine import executors, shards as shard_module
from pytest_memerobust.engine.shards import ShardRunner, shard_memes
from pytest_memerobust.judge.results import StatsConfig
from pytest_memerobust.perturb import attacks, uap
from pytest_memerobust.run.options import (CacheOptions, ComputeOptions, DataOptions, JudgingOptions, Options,
                                          RunFolders)
from pytest_memerobust.run.session import RobustnessSession
from small_fits import patch_small_fits

MODEL = "memeblip2-tda"
PLAIN = "demo"  # where the detector is not the point: the shared folder's claims and reads
MEMES, BATCH = 20, 8  # shards of 8, 8 and 4 memes
KINDS = ["clean", "text=typos@3", "text=homoglyphs@3", "text=hotflip@1", "text=universal_trigger@1",
         "image=gaussian_noise@3", "image=jpeg_compression@2", "image=augmix@2", "image=uap@1", "image=sticker@3",
         "image=counter_text@2", "text=typos@3+image=rendered_caption", "text=typos@3+image=uap@1",
         "text=hotflip@1+image=gaussian_noise@3", "text=homoglyphs@3+defence=nfkc,confusables"]


def _session(tmp_path, workers: int | None = None) -> RobustnessSession:
    cache = CacheOptions(folder=tmp_path, features=False)
    session = RobustnessSession(Options(models=(MODEL,), data=DataOptions(limit=MEMES),
                                        compute=ComputeOptions(batch_size=BATCH, shard_size=BATCH, workers=workers,
                                                               cache=cache),
                                        judging=JudgingOptions(stats=StatsConfig(n_resamples=20))))
    for condition in KINDS:
        session.plan(MODEL, None, Condition.parse(condition))
    return session


def _small_fits(patch) -> None:
    """Universal attacks fitted on 16 training memes, the UAP in 5 steps (their defaults: 64 memes, 20 steps): these
    tests check where the fits run and what every shard gets of them, not their strength."""
    patch_small_fits(patch, 16, 5)


def _evaluate(session) -> dict:
    out = {}
    for condition in KINDS:
        result = session.evaluate(MODEL, condition)
        out[condition] = (result.answers.proba, result.answers.abstained, result.measures.caption_edit)
    return out


@pytest.fixture(scope="module")
def case_major(tmp_path_factory):
    """Each condition over the whole dataset when its case asks (the engine without its shard runner)."""
    with pytest.MonkeyPatch.context() as patch:
        _small_fits(patch)
        patch.setattr(ShardRunner, "takes", lambda self, engine, condition: False)
        return _evaluate(_session(tmp_path_factory.mktemp("case-major")))


def test_shard_major_gives_every_kind_of_condition_the_whole_pass_outputs(case_major, tmp_path, monkeypatch):
    shards = []
    evaluate_shard = shard_module.evaluate_shard

    def spy(engine, task, conditions, attack_memo=None, tick=None):
        result = evaluate_shard(engine, task, conditions, attack_memo, tick)
        shards.append((task.start, task.stop))
        assert not engine.sides.clean_pictures  # the parent never holds the dataset's pictures
        return result

    monkeypatch.setattr(shard_module, "evaluate_shard", spy)  # the in-process executor's
    _small_fits(monkeypatch)  # as the whole pass's
    session = _session(tmp_path, workers=1)  # a pass that runs long enough hands its shards to the pool's workers
    sharded = _evaluate(session)
    # one pass of three shards for the undefended engine and one for the defended one, every condition in it
    assert shards == [(0, 8), (8, 16), (16, 20)] * 2
    for condition in KINDS:
        proba, abstained, edit = sharded[condition]
        assert proba.shape == (MEMES, 2)
        assert np.array_equal(proba, case_major[condition][0]), condition  # to the last bit
        assert abstained is None and case_major[condition][1] is None
        assert edit == case_major[condition][2], condition
    # the conditions did change something: the comparison is not of clean copies
    changed = [c for c in KINDS[1:] if not np.array_equal(sharded[c][0], sharded["clean"][0])]
    assert len(changed) == len(KINDS) - 1


def test_shard_size_is_a_multiple_of_the_batch_and_follows_the_pictures_size(tmp_path, monkeypatch):
    from pytest_memerobust.engine import shards

    # on the CPU, where CPU_SHARD_BATCHES applies (a GPU's shards follow its memory)
    session = RobustnessSession(Options(models=(MODEL,), data=DataOptions(limit=MEMES),
                                        compute=ComputeOptions(batch_size=BATCH, cache=CacheOptions(features=False),
                                                               device="cpu")))
    engine = session.engine(MODEL, session.data_spec())
    one = engine.clean_picture(0)
    per_picture = one.numel() * one.element_size()
    # on a CPU a shard holds CPU_SHARD_BATCHES batches at most, so a pool of worker processes shares the pass
    assert shard_memes(engine, budget_mib=1024) == shards.CPU_SHARD_BATCHES * BATCH
    monkeypatch.setattr(shards, "CPU_SHARD_BATCHES", 1000)  # below that, the pictures' budget decides
    assert shard_memes(engine, budget_mib=1) == max(BATCH, 2**20 // per_picture // BATCH * BATCH) == 32
    assert shard_memes(engine, size=39) == 32  # rounded down to the batch
    assert shard_memes(engine, size=3) == BATCH  # at least one batch
    assert shard_memes(engine, budget_mib=1024) % BATCH == 0


def test_a_condition_that_cannot_run_fails_its_own_case_only(tmp_path):
    session = RobustnessSession(Options(models=(MODEL,), data=DataOptions(limit=8),
                                        compute=ComputeOptions(batch_size=BATCH, shard_size=BATCH,
                                                               cache=CacheOptions(features=False)),
                                        judging=JudgingOptions(stats=StatsConfig(n_resamples=20))))
    prompt = Condition(prompt="paraphrase", prompt_severity=1)  # memeblip2-tda has no prompt to reword
    for condition in (Condition(text="typos", text_severity=3), prompt):
        session.plan(MODEL, None, condition)
    assert session.evaluate(MODEL, "text=typos@3").answers.proba.shape == (8, 2)
    with pytest.raises(ValueError, match="rewords the prompt of a detector that has none"):
        session.evaluate(MODEL, prompt)


def test_an_engine_built_by_hand_evaluates_case_by_case(tmp_path):
    """The library's plain use (no plan, no shard runner) is the whole-dataset pass the shards are checked against."""
    session = RobustnessSession(Options(models=(MODEL,), data=DataOptions(limit=20),
                                        compute=ComputeOptions(cache=CacheOptions(features=False))))
    detector, dataset = session.detector(MODEL), session.dataset(session.data_spec()).labelled("hate")
    engine = Engine(detector, dataset)
    assert engine.shards is None
    proba = engine.predict(Condition(image="gaussian_noise", image_severity=3))
    assert proba.shape == (20, 2) and len(engine.sides.clean_pictures) == 20


def test_pytest_xdist_workers_split_a_pass_through_their_shared_folder(tmp_path, monkeypatch):
    """Two workers of one run: the first claims and evaluates every shard nobody claimed, the second reads them;
    a shard claimed by a process that died is taken over. Both end with the same outputs."""
    import subprocess
    import sys

    from pytest_memerobust.engine.executors import SharedFolder

    conditions = [Condition(text="typos", text_severity=3), Condition(image="gaussian_noise", image_severity=3)]
    evaluated = []
    evaluate_shard = executors.evaluate_shard

    def spy(engine, task, *args, **keywords):
        evaluated.append(task.index)
        return evaluate_shard(engine, task, *args, **keywords)

    monkeypatch.setattr(executors, "evaluate_shard", spy)

    def worker(folder):
        session = RobustnessSession(Options(models=(PLAIN,), data=DataOptions(limit=MEMES),
                                            compute=ComputeOptions(batch_size=BATCH, shard_size=BATCH,
                                                                   cache=CacheOptions(features=False),
                                                                   folders=RunFolders(shards=folder)),
                                            judging=JudgingOptions(stats=StatsConfig(n_resamples=20))))
        assert isinstance(session.executor, SharedFolder)
        for condition in conditions:
            session.plan(PLAIN, None, condition)
        return {c.id: session.evaluate(PLAIN, c).answers.proba for c in conditions}

    first = worker(tmp_path / "run")
    assert evaluated == [0, 1, 2]
    evaluated.clear()
    second = worker(tmp_path / "run")
    assert evaluated == []  # every shard read from the first worker's results
    for condition in conditions:
        assert np.array_equal(first[condition.id], second[condition.id])
    # a claim left by a process that is gone: the shard is evaluated here
    (pass_folder,) = (tmp_path / "run").iterdir()
    (pass_folder / "1.result").unlink()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    import socket

    (pass_folder / "1.claim").write_text(f"{socket.gethostname()} {dead.stdout.strip()}")
    third = worker(tmp_path / "run")
    assert evaluated == [1]
    for condition in conditions:
        assert np.array_equal(first[condition.id], third[condition.id])


def test_memory_is_flat_in_memes_at_most_a_shard_of_pictures_is_alive(monkeypatch):
    """Decoded pictures alive at once, counted over a whole pass: one shard's, however many memes the run has."""
    import weakref

    from pytest_memerobust.data.meme import Meme

    decode = Meme.picture
    alive = {"now": 0, "most": 0}

    def counted(self, device="cpu"):
        picture = decode(self, device)
        alive["now"] += 1
        alive["most"] = max(alive["most"], alive["now"])
        weakref.finalize(picture, lambda: alive.__setitem__("now", alive["now"] - 1))
        return picture

    monkeypatch.setattr(Meme, "picture", counted)
    most = {}
    for memes in (8, 24):
        alive.update(now=0, most=0)
        session = RobustnessSession(Options(models=(MODEL,), data=DataOptions(limit=memes),
                                            compute=ComputeOptions(batch_size=BATCH, shard_size=BATCH,
                                                                   cache=CacheOptions(features=False)),
                                            judging=JudgingOptions(stats=StatsConfig(n_resamples=20))))
        conditions = [Condition(image="gaussian_noise", image_severity=3), Condition("typos", 3, "contrast", 2)]
        for condition in conditions:
            session.plan(MODEL, None, condition)
        for condition in conditions:
            assert session.evaluate(MODEL, condition).answers.proba.shape == (memes, 2)
        most[memes] = alive["most"]
    assert most[8] == most[24] <= BATCH + 1  # a shard's pictures (and the first meme's, to size the shards)


def test_pytest_xdist_workers_split_the_universal_fits_through_their_shared_folder(tmp_path, monkeypatch):
    """Two workers of one run: the first claims and fits every universal attack nobody claimed, the second reads
    the fits into its memo and fits nothing (before, every worker fitted every trigger and UAP of its pass); a fit
    claimed by a process that died is taken over. Both end with the same memo and the same outputs."""
    import socket
    import subprocess
    import sys

    conditions = [Condition.parse(c) for c in ("text=universal_trigger@1", "text=universal_trigger@2", "image=uap@1")]
    fits = []
    _small_fits(monkeypatch)
    find_trigger, fit_uap = attacks.find_trigger, uap.fit_uap
    monkeypatch.setattr(attacks, "find_trigger", lambda *a, **k: fits.append("trigger") or find_trigger(*a, **k))
    monkeypatch.setattr(uap, "fit_uap", lambda *a, **k: fits.append("uap") or fit_uap(*a, **k))

    def worker(folder):
        session = RobustnessSession(Options(models=(PLAIN,), data=DataOptions(limit=MEMES),
                                            compute=ComputeOptions(batch_size=BATCH, shard_size=BATCH,
                                                                   cache=CacheOptions(features=False),
                                                                   folders=RunFolders(shards=folder)),
                                            judging=JudgingOptions(stats=StatsConfig(n_resamples=20))))
        for condition in conditions:
            session.plan(PLAIN, None, condition)
        outputs = {c.id: session.evaluate(PLAIN, c).answers.proba for c in conditions}
        return outputs, session.engine(PLAIN, session.data_spec()).attack_memo()

    first, first_memo = worker(tmp_path / "run")
    assert sorted(fits) == ["trigger", "trigger", "uap"]
    fits.clear()
    second, second_memo = worker(tmp_path / "run")
    assert fits == []  # every fit read from the first worker's
    assert first_memo.keys() == second_memo.keys() and len(first_memo) == 3
    for key, value in first_memo.items():
        assert np.array_equal(np.asarray(value), np.asarray(second_memo[key]))
    for condition in conditions:
        assert np.array_equal(first[condition.id], second[condition.id])
    # a claim left by a process that is gone, with no fit: fitted here
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    fits_folder = next(f for f in (tmp_path / "run").iterdir() if any(f.glob("*.fit")))
    for fit in fits_folder.glob("*.fit"):
        fit.unlink()
        fit.with_suffix(".claim").write_text(f"{socket.gethostname()} {dead.stdout.strip()}")
    third, third_memo = worker(tmp_path / "run")
    assert sorted(fits) == ["trigger", "trigger", "uap"]
    assert third_memo.keys() == first_memo.keys()
    for condition in conditions:
        assert np.array_equal(first[condition.id], third[condition.id])


def test_the_driver_keeps_the_shards_attacked_captions(tmp_path, monkeypatch):
    """A caption attack's captions come back with its shards: the report's and the counterexamples' captions are
    read, not computed again by the attack in the driver, alone (before, a failing HotFlip case re-ran it there)."""
    session = RobustnessSession(Options(models=(MODEL,), data=DataOptions(limit=16),
                                        compute=ComputeOptions(batch_size=8, shard_size=8,
                                                               cache=CacheOptions(features=False)),
                                        judging=JudgingOptions(stats=StatsConfig(n_resamples=20))))
    condition = Condition.parse("text=hotflip@1")
    session.plan(MODEL, None, condition)
    session.evaluate(MODEL, condition)
    engine = session.engine(MODEL, session.data_spec())
    whole = Engine(engine.detector, engine.dataset, seed=engine.seed,
                   asking=EncodingSettings(batch_size=8),
                   attacks=AttackState(labels=engine.attacks.labels)).inputs("text", "hotflip", 1)
    monkeypatch.setattr(Engine, "_apply", lambda *args, **keywords: pytest.fail("the driver ran the attack again"))
    captions = [engine.caption(condition, i) for i in range(16)]
    assert captions == whole  # the whole-dataset pass's, meme by meme
    assert sum(a != m.text for a, m in zip(captions, engine.dataset.memes)) >= 8  # the attack did edit them
