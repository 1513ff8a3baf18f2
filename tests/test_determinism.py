"""The same numbers on every machine (DESIGN.md 9, pytest_memerobust/determinism.py): a report does not depend on the
thread count, nor on how pytest-xdist splits the cases, for every kind of perturbation (typos, look-alike letters,
an image corruption, a universal adversarial perturbation, a universal trigger, HotFlip, a text x image pair), and
for what OCR reads (captions and text boxes, onnxruntime and OpenCV), a typographic edit drawn into those boxes, a
prompt edit and prompt invariance on a prompted model.

The plugin runs in subprocesses on a detector with torch encoders (the demo detector's are numpy, which hides
exactly what is checked here) and on a tiny random vision-language model; the reports must be equal once package
versions and paths are left out."""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from pytest_memerobust.determinism import (RESULT_THREADS, bucket_length, encode_batch, encode_fixed,
                                           fixed_threads, shapes_fixed)
from pytest_memerobust.engine.features import FeatureStore
from report_compare import comparable
from test_vlm import _card_file
from tiny_vlms import save_tiny_vlm

MODEL = "memeblip2-tda"
SUITE = """
[suite]
name = "determinism"
dataset = "DATA"
task = "label"
[thresholds]
min_relative_robustness = { accuracy = 0.0 }
max_flip_rate = 1.0
[text]
typos = [3]
homoglyphs = [3]
hotflip = [1]
universal_trigger = [1]
[image]
gaussian_noise = [3]
uap = [1]
[grid]
text = ["typos@3"]
image = ["uap@1"]
"""
KINDS = {"text=typos@3", "text=homoglyphs@3", "text=hotflip@1", "text=universal_trigger@1",
         "image=gaussian_noise@3", "image=uap@1", "text=typos@3+image=uap@1"}
# Demo memes in a csv without a train split: the first MEMES are evaluated (--memerobust-limit), the universal trigger
# and pattern are fitted on the FIT_MEMES after them (the demo's train split would give them 64 of its 480).
MEMES, FIT_MEMES = 8, 8
RUN = [f"--memerobust-limit={MEMES}", "--memerobust-bootstrap=100", "-p", "no:cacheprovider", "-p", "no:randomly", "-q"]

# A prompted model on memes whose text only OCR knows: a csv of demo pictures without text boxes and with every other
# caption left out, so OCR reads those captions and every picture's boxes, which the re-typed caption is drawn into.
OCR = importlib.util.find_spec("rapidocr_onnxruntime") is not None  # in the dev extra
VLM = "tiny-qwen2_vl"  # a tiny random Qwen2-VL (tiny_vlms.py), its card as test_vlm.py writes it
OCR_MEMES = 4
OCR_SUITE = """
[suite]
name = "determinism-ocr-prompts"
dataset = "{data}"
task = "label"
[thresholds]
max_flip_rate = 1.0
[prompt]
paraphrase = [2]
[grid]
text = ["typos@3"]
image = ["rendered_caption"]
"""
OCR_KINDS = {"prompt=paraphrase@2", "text=typos@3+image=rendered_caption"}
# MODEL on the first suite; VLM on the second and in the prompt-invariance suite (the Python suites ask the first model)
SELECTED = f"determinism and {MODEL} and not prompts or {VLM} and prompts or verdicts_do_not_depend"


def _memes_csv(folder, n: int, caption=lambda i, meme: meme.text):
    """The first `n` demo test memes as a csv of pngs in `folder`, each with caption(i, meme) (None: none)."""
    from PIL import Image

    from pytest_memerobust.data import demo_dataset

    folder.mkdir(exist_ok=True)
    rows = ["id,image,text,label"]
    for i, meme in enumerate(demo_dataset("test").head(n).memes):
        Image.fromarray(meme.image).save(folder / f"{meme.id}.png")
        rows.append(f"{meme.id},{meme.id}.png,{caption(i, meme) or ''},{meme.labels['hate']}")
    (folder / "memes.csv").write_text("\n".join(rows) + "\n")
    return folder / "memes.csv"


def _prompted_run(root) -> list[str]:
    """The arguments that add the VLM, its suite and its OCR'd memes to a run, written under `root`."""
    memes = _memes_csv(root / "ocr", OCR_MEMES, lambda i, meme: meme.text if i % 2 else None)
    (root / "memerobust-determinism-ocr-prompts.toml").write_text(OCR_SUITE.format(data=memes))
    card = _card_file(root, "qwen2_vl", save_tiny_vlm("qwen2_vl", root / "vlm"))
    return [f"--memerobust-model={card}", f"--memerobust-model={MODEL}", "--memerobust-ocr=rapidocr", "-k", SELECTED]


# pytest-xdist gives each of its workers its share of the cores for torch (run/workers.py): two workers, half each
WORKER_THREADS = max(1, (os.cpu_count() or 1) // 2)
# the single process runs at another count than the workers, and one of the two runs at one thread
SINGLE_THREADS = 3 if WORKER_THREADS == 1 else 1


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    """The same selection run twice, each with a fresh cache (so no run reads what another computed): in one process
    and in two pytest-xdist workers, at two thread counts (SINGLE_THREADS and WORKER_THREADS: 3 and 1 on a machine
    of 2 or 3 cores), so the xdist run is also the thread-count comparison; without pytest-xdist, in one process at
    one intra-op thread and at three. Each: (exit code, report, output, torch threads)."""
    root = tmp_path_factory.mktemp("determinism")
    memes = _memes_csv(root / "demo", MEMES + FIT_MEMES)
    (root / "memerobust-determinism.toml").write_text(SUITE.replace("DATA", str(memes)))
    selection = _prompted_run(root) if OCR else [f"--memerobust-model={MODEL}", "-k", "determinism"]
    try:
        import xdist  # noqa: F401

        runs = {"one-process": (SINGLE_THREADS, []), "two-workers": (WORKER_THREADS, ["-n", "2"])}
    except ImportError:
        runs = {"one-thread": (1, []), "three-threads": (3, [])}
    out = {}
    for name, (threads, extra) in runs.items():
        report = root / f"{name}.json"
        run = subprocess.run([sys.executable, "-m", "pytest", *RUN, *selection, *extra, f"--memerobust-report={report}",
                              f"--memerobust-cache-dir={root / name}"], cwd=root, capture_output=True, text=True,
                             env={**os.environ, "OMP_NUM_THREADS": str(threads)}, timeout=600)
        assert report.is_file(), run.stdout[-3000:] + run.stderr[-3000:]
        out[name] = (run.returncode, json.loads(report.read_text()), run.stdout, threads)
    return out


def test_every_kind_of_perturbation_is_in_the_runs(reports):
    for _, report, _, _ in reports.values():
        conditions = {r["condition"] for group in report["groups"] if group["model"] == MODEL
                      for r in group["results"]}
        assert conditions == KINDS


def test_ocr_a_typographic_edit_a_prompt_edit_and_prompt_invariance_are_in_the_runs(reports):
    if not OCR:
        pytest.skip("rapidocr-onnxruntime is in the dev and ocr extras")
    _, report, output, _ = next(iter(reports.values()))  # the first run is a single process: its output is whole
    (group,) = [g for g in report["groups"] if g["model"] != MODEL]
    assert {r["condition"] for r in group["results"]} == OCR_KINDS and group["clean"]["n"] == OCR_MEMES
    # the captions left out were read (the run refuses a meme without one), and so was every picture's text boxes
    assert "text boxes are unknown" not in output
    (prompts,) = report["prompt_invariance"]
    assert prompts["model"] == group["model"] and len(prompts["variants"]) == 8


def test_the_thread_count_does_not_change_a_single_number(reports):
    (code_a, a, _, threads_a), (code_b, b, _, threads_b) = reports.values()
    assert threads_a != threads_b
    assert code_a == code_b
    assert comparable(a) == comparable(b)  # every probability digest, interval, thumbnail and verdict


def test_pytest_xdist_workers_report_what_one_process_reports(reports):
    if "two-workers" not in reports:
        pytest.skip("pytest-xdist is in the dev extra")
    (code_one, one, _, _), (code_split, split, _, _) = reports["one-process"], reports["two-workers"]
    assert code_one == code_split
    assert comparable(one) == comparable(split)  # the cases in the same order too


# --- the mechanisms -------------------------------------------------------------------------------------------


def test_fixed_threads_holds_the_count_inside_and_gives_the_callers_back():
    before = torch.get_num_threads()
    torch.set_num_threads(3)
    try:
        with fixed_threads():
            assert torch.get_num_threads() == RESULT_THREADS
            with fixed_threads():  # nested: nothing to set
                assert torch.get_num_threads() == RESULT_THREADS
            assert torch.get_num_threads() == RESULT_THREADS
        assert torch.get_num_threads() == 3

        @fixed_threads()
        def fails():
            assert torch.get_num_threads() == RESULT_THREADS
            raise KeyError("boom")

        with pytest.raises(KeyError):
            fails()
        assert torch.get_num_threads() == 3
    finally:
        torch.set_num_threads(before)


def test_fixed_threads_holds_opencv_until_the_last_one_inside_leaves():
    """OpenCV's count is the process's: a scope that ends while another (the engine's background thread) is still
    inside must leave it pinned."""
    cv2 = pytest.importorskip("cv2")
    before = cv2.getNumThreads()
    cv2.setNumThreads(3)
    try:
        first, second = fixed_threads(), fixed_threads()
        first.__enter__()
        second.__enter__()
        assert cv2.getNumThreads() == RESULT_THREADS
        first.__exit__(None, None, None)
        assert cv2.getNumThreads() == RESULT_THREADS
        second.__exit__(None, None, None)
        assert cv2.getNumThreads() == 3
    finally:
        cv2.setNumThreads(before)


def test_ocr_reads_on_fixed_threads_whatever_the_machine():
    """onnxruntime fixes its threads when rapidocr creates a session (one per core by default, which no
    OMP_NUM_THREADS changes); OpenCV prepares the models' inputs and reads their outputs."""
    pytest.importorskip("rapidocr_onnxruntime", reason="the OCR backend is in the dev and ocr extras")
    import cv2

    from pytest_memerobust.data.ocr import RapidOcr

    backend = RapidOcr()
    engine = backend._engine
    for session in (engine.text_det.infer, engine.text_cls.infer, engine.text_rec.session):
        options = session.session.get_session_options()
        assert (options.intra_op_num_threads, options.inter_op_num_threads) == (RESULT_THREADS, RESULT_THREADS)
    seen = []
    backend._engine = lambda picture, **options: (seen.append((cv2.getNumThreads(), torch.get_num_threads())), (None, None))[1]
    before = cv2.getNumThreads(), torch.get_num_threads()
    cv2.setNumThreads(3)
    torch.set_num_threads(3)
    try:
        assert backend.read(np.zeros((8, 8, 3), np.uint8)) == ""
        assert seen == [(RESULT_THREADS, RESULT_THREADS)]
        assert (cv2.getNumThreads(), torch.get_num_threads()) == (3, 3)
    finally:
        cv2.setNumThreads(before[0])
        torch.set_num_threads(before[1])


class Prompted:
    """A prompted detector that records the torch threads it is asked at."""

    def __init__(self):
        from pytest_memerobust.detectors.vlm import Prompt

        self.prompt, self.threads = Prompt(), []

    def with_prompt(self, prompt):
        return self

    def predict_with_abstentions(self, pictures, captions):
        self.threads.append(torch.get_num_threads())
        return np.tile([0.4, 0.6], (len(captions), 1)), np.zeros(len(captions), bool)


def test_prompt_invariance_asks_every_wording_on_fixed_threads():
    from pytest_memerobust.run.analyses import evaluate_prompt_invariance

    detector, before = Prompted(), torch.get_num_threads()
    torch.set_num_threads(3)
    try:
        evaluate_prompt_invariance(detector, [None] * 3, ["a", "b", "c"], [1, 0, 1], ["x", "y", "z"], batch_size=2,
                                   n_resamples=10)
        assert torch.get_num_threads() == 3
    finally:
        torch.set_num_threads(before)
    assert len(detector.threads) == 2 * 9 and set(detector.threads) == {RESULT_THREADS}


class Rows:
    """An encoder that records the number of rows of each call; a caption's feature is its length."""

    def __init__(self):
        self.calls: list[int] = []

    def __call__(self, items):
        self.calls.append(len(items))
        return np.array([[len(x)] for x in items], np.float32)


def test_the_store_encodes_every_batch_with_the_same_number_of_rows():
    store, encode = FeatureStore("ns"), Rows()
    out = store.features("text", ["a", "bb", "ccc", "dddd", "eeeee"], encode, batch_size=4)
    assert encode.calls == [4, 4]  # the last batch filled up; its extra rows are dropped
    np.testing.assert_array_equal(out[:, 0], [1, 2, 3, 4, 5])
    store.features("text", ["a", "ffffff"], encode, batch_size=4)
    assert encode.calls == [4, 4, 4] and store.stats.encoded["text"] == 6


@pytest.fixture(scope="module")
def detector():
    from pytest_memerobust.detectors import load_detector

    return load_detector(MODEL)


def test_a_caption_gets_the_same_features_whatever_was_encoded_before(detector):
    """What a store has already encoded decides which captions share a batch; the features must not change with it
    (a pytest-xdist worker and a single run encode different sides first). Without the filled-up batch the long
    caption is encoded alone in one store and among others in the other; without the full-length padding "love is
    love" is padded to 5 tokens in one and to the long caption's 35 in the other: either changes its last bits."""
    long = ("they should all be sent back where they came from, every single one of them, and their friends and "
            "their families and everyone who ever stood with them at a parade")
    captions = ["love is love", "no", "pride month", "no way", long]
    fresh, warm = FeatureStore("fresh"), FeatureStore("warm")
    with fixed_threads():
        warm.features("text", ["no"], detector.encode_texts, batch_size=4)
        alone = fresh.features("text", captions, detector.encode_texts, batch_size=4)
        after = warm.features("text", captions, detector.encode_texts, batch_size=4)
    np.testing.assert_array_equal(alone, after)


def test_a_captions_padded_length_is_its_token_count_rounded_up_to_sixteen():
    assert [bucket_length(n, 128) for n in (1, 16, 17, 41, 128, 284)] == [16, 16, 32, 48, 128, 128]
    assert [bucket_length(n, 77) for n in (70, 77, 90)] == [77, 77, 77]  # CLIP's context is no multiple of 16


def test_the_store_encodes_each_bucket_at_its_own_length_with_the_same_bytes_in_any_batch(detector):
    """Issue 61: captions are padded to their bucket (determinism.bucket_length), not the encoder's full length;
    each batch holds one bucket and has `batch_size` rows, so a caption's features are the same bytes alone, among
    others and whatever was encoded before, and close to its full-length features (the padding is masked)."""
    long = ("they should all be sent back where they came from, every single one of them, and their friends and "
            "their families and everyone who ever stood with them at a parade")
    captions = ["love is love", "no", "pride month", "no way", long, "drag queens belong here and everywhere"]
    buckets = detector.caption_buckets(captions)
    assert len(set(buckets)) >= 2 and max(buckets) < detector.text_backbone.max_length
    calls = []

    def encode(texts):
        calls.append((shapes_fixed(), len(texts), set(detector.caption_buckets(texts))))
        return detector.encode_texts(texts)

    with fixed_threads():
        out = FeatureStore("a").features("text", captions, encode, batch_size=4, buckets=detector.caption_buckets)
        alone = [FeatureStore("b").features("text", [c], detector.encode_texts, batch_size=4,
                                            buckets=detector.caption_buckets)[0] for c in captions]
        warm = FeatureStore("c")
        warm.features("text", ["no", long], detector.encode_texts, batch_size=4, buckets=detector.caption_buckets)
        after = warm.features("text", captions, detector.encode_texts, batch_size=4, buckets=detector.caption_buckets)
        full = FeatureStore("d").features("text", captions, detector.encode_texts, batch_size=4)
        # batches run anywhere, in any order (a worker pool): the same rows
        backwards = encode_fixed(detector.encode_texts, captions, 4, detector.caption_buckets,
                                 lambda encode, work, size: reversed([(k, encode_batch(encode, chunk, length, size))
                                                                      for k, (length, chunk) in enumerate(work)]))
    assert all(rows == 4 and seen == {length} for length, rows, seen in calls)  # one bucket per batch, 4 rows
    np.testing.assert_array_equal(out, backwards)
    batches = sorted(length for length in set(buckets) for _ in range(-(-buckets.count(length) // 4)))
    assert sorted(length for length, _, _ in calls) == batches  # each bucket in batches of 4 captions at most
    np.testing.assert_array_equal(out, np.stack(alone))
    np.testing.assert_array_equal(out, after)
    np.testing.assert_allclose(out, full, atol=1e-5)


def test_an_untrained_head_is_the_same_wherever_the_generator_stood_and_leaves_it_there():
    """A card without a checkpoint (`untrained:NAME`) drew its head from torch's generator as it stood: another
    process, a pool worker or the next run got other weights (a PrideMM run's clean accuracy read 0.500 one time,
    0.562 the next). Loaded at the run's seed, it is one head; the generator is given back as it was."""
    import torch

    from pytest_memerobust.run.options import Options
    from pytest_memerobust.run.session import RobustnessSession

    heads = []
    for seed in (1, 2):
        torch.manual_seed(seed)
        before = torch.get_rng_state()
        head = RobustnessSession(Options(models=("memeblip2-minilm",))).detector("memeblip2-minilm").head_module
        assert torch.equal(torch.get_rng_state(), before)
        heads.append(head.state_dict())
    assert heads[0].keys() == heads[1].keys() and all(torch.equal(heads[0][k], heads[1][k]) for k in heads[0])
    other = RobustnessSession(Options(models=("memeblip2-minilm",), seed=5)).detector("memeblip2-minilm")
    assert not all(torch.equal(heads[0][k], v) for k, v in other.head_module.state_dict().items())
