"""The feature store: each distinct input encoded once per run, sides of conditions kept on disk between runs and
between workers, and a damaged or foreign cache file recomputed instead of trusted."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from pytest_memerobust.engine import Condition, EncodingSettings, Engine, engine_sides
from pytest_memerobust.data.digests import input_digest, input_digests
from pytest_memerobust.engine.features import FeatureStore, HeldArrays, pack_digests, unpack_digests

from test_engine import CountingSplit, make_dataset


class Encoder:
    """Counts what it is asked to encode; a caption's feature is its length, a picture's its mean."""

    def __init__(self):
        self.seen: list = []

    def __call__(self, items):
        self.seen.extend(items)
        return np.array([[len(x)] if isinstance(x, str) else [float(np.mean(x))] for x in items], np.float32)


def test_digests_follow_content_not_identity():
    a = np.arange(12, dtype=np.uint8).reshape(2, 2, 3)
    assert input_digest(a) == input_digest(a.copy())
    assert input_digest(a) != input_digest(a.reshape(1, 4, 3))  # same bytes, other shape
    assert input_digest("love wins") == input_digest("love " + "wins") != input_digest("love wins ")
    assert input_digest("xyz") != input_digest(np.frombuffer(b"xyz", np.uint8).reshape(1, 1, 3))
    # a picture has one digest whether it comes as an array or as a tensor, alone or among others
    b = np.arange(48, dtype=np.uint8).reshape(4, 4, 3)
    tensor = torch.from_numpy(b).permute(2, 0, 1)
    assert input_digest(b) == input_digest(tensor) == input_digests([a, tensor, b])[1]
    assert input_digest(b) != input_digest(b[::-1].copy())


def test_each_distinct_input_is_encoded_once_per_run():
    store, encode = FeatureStore("ns"), Encoder()
    first = store.features("text", ["a", "bb", "a", "ccc"], encode, batch_size=3)
    assert encode.seen == ["a", "bb", "ccc"]
    np.testing.assert_array_equal(first[:, 0], [1, 2, 1, 3])
    second = store.features("text", ["ccc", "dddd", "bb"], encode, batch_size=3)
    assert encode.seen == ["a", "bb", "ccc", "dddd", "dddd", "dddd"]  # one shape per batch: filled up, rows dropped
    np.testing.assert_array_equal(second[:, 0], [3, 4, 2])
    assert store.stats.encoded["text"] == 4 and store.stats.memory_hits["text"] == 2


def test_a_new_run_reads_the_sides_from_disk(tmp_path):
    pictures = [np.full((4, 4, 3), v, np.uint8) for v in (1, 2, 3)]
    first = FeatureStore("ns", tmp_path).features("image", pictures, Encoder(), batch_size=3)
    encode = Encoder()
    again = FeatureStore("ns", tmp_path)
    np.testing.assert_array_equal(again.features("image", pictures, encode, batch_size=3), first)
    assert encode.seen == [] and again.stats.disk_hits["image"] == 3
    # other encoders (another checkpoint, precision or backbone) never read these files
    other = FeatureStore("another checkpoint", tmp_path)
    other.features("image", pictures, encode, batch_size=3)
    assert len(encode.seen) == 3 and other.stats.disk_hits["image"] == 0


def _only_file(tmp_path):
    files = list((tmp_path / "features").rglob("*.npz"))
    assert len(files) == 1
    return files[0]


@pytest.mark.parametrize("damage", ["truncate", "garbage", "empty", "foreign", "tampered"])
def test_a_damaged_or_foreign_file_is_recomputed_not_trusted(tmp_path, damage):
    captions = ["one", "three", "seven"]
    FeatureStore("ns", tmp_path).features("text", captions, Encoder(), batch_size=3)
    path = _only_file(tmp_path)
    data = path.read_bytes()
    if damage == "truncate":
        path.write_bytes(data[: len(data) // 2])
    elif damage == "garbage":
        path.write_bytes(b"not an archive at all" * 10)
    elif damage == "empty":
        path.write_bytes(b"")
    else:
        with np.load(path) as archive:
            header, features = json.loads(bytes(archive["header"]).decode()), archive["features"].copy()
        if damage == "foreign":
            header["namespace"] = "someone else's encoder"
        else:
            features[0, 0] = 99.0  # the checksum no longer matches
        np.savez(path, features=features, header=np.frombuffer(json.dumps(header).encode(), np.uint8))
    encode = Encoder()
    store = FeatureStore("ns", tmp_path)
    out = store.features("text", captions, encode, batch_size=3)
    assert encode.seen == captions and store.stats.rejected_files == 1
    np.testing.assert_array_equal(out[:, 0], [3, 5, 5])
    # written again, whole: the next run trusts it
    encode = Encoder()
    store = FeatureStore("ns", tmp_path)
    store.features("text", captions, encode, batch_size=3)
    assert encode.seen == [] and store.stats.rejected_files == 0


def test_no_temporary_files_are_left_behind(tmp_path):
    store = FeatureStore("ns", tmp_path)
    for n in range(5):
        store.features("text", [f"caption {i}" for i in range(n + 1)], Encoder(), batch_size=2)
    leftovers = [p for p in (tmp_path / "features").rglob("*") if p.is_file() and p.suffix != ".npz"]
    assert leftovers == []


# --- through the engine -----------------------------------------------------------------------------------------


def test_captions_a_perturbation_leaves_alone_are_not_encoded_again():
    from pytest_memerobust.data.meme import Dataset, Meme

    # char_delete only deletes inner letters, so captions of words of two letters or fewer come back unchanged
    captions = ["to be or no", "nobody wants those people here", "ok go", "keep them away from us please"]
    memes = [Meme(id=f"m{i}", text=t, labels={"hate": i % 2}, image_array=np.zeros((4, 4, 3), np.uint8))
             for i, t in enumerate(captions)]
    det = CountingSplit()
    engine = Engine(det, Dataset("toy", memes, {"hate": ["non-hateful", "hateful"]}), seed=0,
                    asking=EncodingSettings(batch_size=2))
    engine.predict(Condition())
    engine.predict(Condition(text="char_delete", text_severity=5))
    perturbed = engine.inputs("text", "char_delete", 5)
    assert [p == c for p, c in zip(perturbed, captions)] == [True, False, True, False]
    assert det.text_batches[-1] == [perturbed[1], perturbed[3]]
    assert engine.encoder_calls["text"] == len(captions) + 2


def test_a_combined_condition_encodes_nothing_already_seen():
    det = CountingSplit()
    engine = Engine(det, make_dataset(), seed=0)
    for condition in (Condition(text="typos", text_severity=2), Condition(image="contrast", image_severity=2)):
        engine.predict(condition)
    calls = dict(engine.encoder_calls)
    engine.predict(Condition(text="typos", text_severity=2, image="contrast", image_severity=2))
    assert engine.encoder_calls == calls


def test_engines_sharing_a_store_share_features(tmp_path):
    store = FeatureStore("ns", tmp_path)
    data = make_dataset()
    a, b = (Engine(detector, data, sides=engine_sides(detector, data, store))
            for detector in (CountingSplit(), CountingSplit()))
    np.testing.assert_array_equal(a.predict(Condition()), b.predict(Condition()))
    assert a.encoder_calls == {"image": 6, "text": 6} and b.encoder_calls == {"image": 0, "text": 0}


class RunsOutOfMemory(CountingSplit):
    """A split detector whose GPU (pretend) holds at most two pictures at a time."""

    def encode_images(self, images):
        if len(images) > 2:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory (pretend)")
        return super().encode_images(images)


def test_the_batch_halves_when_the_gpu_runs_out_of_memory():
    data = make_dataset()
    engine = Engine(RunsOutOfMemory(), data, asking=EncodingSettings(batch_size=8))
    proba = engine.predict(Condition())
    np.testing.assert_allclose(proba, Engine(CountingSplit(), data).predict(Condition()))
    assert 1 <= engine.batch_size <= 2  # remembered for the next sides
    assert all(len(batch) <= 2 for batch in engine.detector.image_batches)


def test_precision_must_be_named():
    with pytest.raises(ValueError, match="fp32 or bf16"):
        Engine(CountingSplit(), make_dataset(), asking=EncodingSettings(precision="fp16"))


# --- precision ---------------------------------------------------------------------------------------------------

from pytest_memerobust.run import session as session_module  # noqa: E402
from pytest_memerobust.run.options import ComputeOptions, Options  # noqa: E402
from pytest_memerobust.run.session import RobustnessSession, bf16_check


def test_bf16_is_checked_against_fp32_and_the_check_reports_its_numbers():
    from pytest_memerobust.data import demo_dataset
    from pytest_memerobust.detectors import load_detector

    check = bf16_check(load_detector("memeclip", None, "cpu"), demo_dataset("test").head(64))
    assert check["n"] == 64 and 0 <= check["mean_abs_diff"] <= 0.01 and check["agreement"] >= 0.99
    assert check["passed"]


def test_auto_precision_is_fp32_on_a_cpu_without_a_check(monkeypatch):
    monkeypatch.setattr(session_module, "bf16_check", lambda *a: pytest.fail("no check on a CPU"))
    session = RobustnessSession(Options(models=("demo",), compute=ComputeOptions(device="cpu")))  # a CPU even on a GPU machine
    assert session.precision("demo") == "fp32" and session.notes.lines == []


@pytest.mark.parametrize("wanted, passed, used", [("auto", True, "bf16"), ("auto", False, "fp32"),
                                                  ("bf16", False, "bf16"), ("bf16", True, "bf16")])
def test_bf16_is_used_when_it_agrees_with_fp32(monkeypatch, wanted, passed, used):
    verdict = {"n": 64, "mean_abs_diff": 0.001 if passed else 0.2, "agreement": 1.0 if passed else 0.8,
               "passed": passed}
    monkeypatch.setattr(session_module, "bf16_check", lambda *a: verdict)
    session = RobustnessSession(Options(models=("demo",), compute=ComputeOptions(precision=wanted)))
    session.detector("demo").device = "cuda:0"  # pretend: only the decision is under test
    assert session.precision("demo") == used
    assert session.precision("demo:text") == used  # ablation views share their base's encoders
    assert len(session.notes.lines) == (0 if passed else 1)
    if not passed:
        note = session.notes.lines[0]
        assert "bf16 predictions differ from fp32" in note and f"running {used}" in note


# --- perturbing ahead --------------------------------------------------------------------------------------------


def test_planned_sides_are_perturbed_in_the_background_with_the_same_result():
    data = make_dataset()
    conditions = [Condition(), Condition(image="contrast", image_severity=2), Condition(text="typos", text_severity=2),
                  Condition(image="gaussian_noise", image_severity=3),
                  Condition(text="typos", text_severity=2, image="gaussian_noise", image_severity=3)]
    planned = Engine(CountingSplit(), data, seed=4)
    planned.plan(conditions)
    assert planned._plan == [("image", "contrast", 2), ("text", "typos", 2), ("image", "gaussian_noise", 3)]
    plain = Engine(CountingSplit(), data, seed=4)
    planned.predict(conditions[0])
    planned.predict(conditions[1])  # encoding contrast@2 starts typos@2 and gaussian_noise@3 in the background
    assert set(planned.sides.pending) == {("text", "typos", 2), ("image", "gaussian_noise", 3)}
    for condition in conditions:
        np.testing.assert_array_equal(planned.predict(condition), plain.predict(condition))
    assert planned.sides.pending == {} and planned.encoder_calls == plain.encoder_calls


def test_attacks_are_never_perturbed_in_the_background():
    engine = Engine(CountingSplit(), make_dataset())
    engine.plan([Condition(text="hotflip", text_severity=1), Condition(image="uap", image_severity=1),
                 Condition(text="typos", text_severity=1, image="rendered_caption")])
    assert engine._plan == [("text", "typos", 1)]


def test_held_arrays_drop_the_least_recently_used_past_their_bound():
    held = HeldArrays(limit=3 * 8)  # three float64 scalars
    for key in "abc":
        held.put(key, np.zeros(1))
    held.get("a")  # used again: now the most recent
    held.put("d", np.zeros(1))
    assert "b" not in held and all(k in held for k in "acd") and held.nbytes == 24 and held.dropped == 1
    held.put("big", np.zeros(10))  # larger than the bound alone: kept, everything older dropped
    assert len(held) == 1 and "big" in held


def test_digests_pack_to_sixteen_bytes_and_back():
    digests = input_digests(["a", "", "x" * 100]) + [bytes(16).hex(), ("00" * 15) + "01"]
    packed = pack_digests(digests)
    assert packed.nbytes == 16 * len(digests) and unpack_digests(packed) == digests


@pytest.mark.parametrize("on_disk", [True, False])
def test_a_bounded_run_gives_the_unbounded_predictions(tmp_path, on_disk):
    """With room for about one side, every side is dropped and found again (read from its file, or encoded again
    from its recomputed inputs without one): the same probabilities as with no bound."""
    conditions = [Condition(), Condition(text="typos", text_severity=2), Condition(image="contrast", image_severity=3),
                  Condition(text="typos", text_severity=2, image="contrast", image_severity=3), Condition()]
    data = make_dataset()
    free = Engine(CountingSplit(), data)
    expected = [free.predict(c) for c in conditions]
    store = FeatureStore("ns", tmp_path if on_disk else None, memory_limit=64)
    bounded = Engine(CountingSplit(), data, sides=engine_sides(CountingSplit(), data, store, 64))
    for condition, want in zip(conditions, expected):
        np.testing.assert_array_equal(bounded.predict(condition), want)
    assert len(bounded.sides.held) <= 2 and store._memory.nbytes <= 64 + 16 and store.stats.dropped > 0
    if on_disk:  # every side found again on disk: nothing encoded twice
        assert bounded.encoder_calls == free.encoder_calls and store.stats.disk_hits["image"] > 0
    else:
        assert bounded.encoder_calls["image"] > free.encoder_calls["image"]


def test_a_run_held_to_one_mib_of_features_reports_the_same_numbers(pytester, tmp_path):
    """--memerobust-feature-memory bounds what a run holds; the report is byte for byte the unbounded one's."""
    reports = []
    for bound in ([], ["--memerobust-feature-memory=1"]):
        report = tmp_path / f"r{len(reports)}.json"
        result = pytester.runpytest("--memerobust-model=demo", "-k", "rainbow and (typos or contrast)",
                                    "--memerobust-limit=40", "--memerobust-bootstrap=50", "-p", "no:cacheprovider",
                                    f"--memerobust-cache-dir={tmp_path / 'cache'}", f"--memerobust-report={report}",
                                    *bound)
        assert result.ret == 0, result.stdout.str()[-2000:]
        reports.append(report.read_bytes())
    assert reports[0] == reports[1]
    assert "left memory to stay within --memerobust-feature-memory=1" in result.stdout.str()
