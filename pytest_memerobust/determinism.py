"""The same numbers on every machine: what a result depends on is its inputs, never how the work was split.

Two splits change float results in their last bits, and a report prints them (digests, AUROC ties, probabilities):

- Threads. A torch CPU op splits its work over its intra-op threads; with another thread count the chunk
  boundaries move, and with them the order of float sums and which elements take the vectorised or the scalar path
  (measured: a UAP's bilinear resize differs by 5e-9 between 1 and 2 threads, enough to round some pixels the other
  way). So every computation a result depends on runs at RESULT_THREADS intra-op threads (`fixed_threads`), whatever
  the machine, OMP_NUM_THREADS or pytest-xdist's share of the cores (session.share_cpu_threads) say. Parallelism on a
  CPU comes from processes instead: the pool of worker processes that evaluates the shards (engine/executors.py
  LocalPool, one per usable core by default), pytest-xdist workers (`-n`) or Ray actors, whose reports are then
  identical to one process's; and, in each process, the engine's background thread.
- Batch shapes. Kernels choose their blocking by the shape of the whole batch (a caption padded to the longest
  caption of its batch, a matrix product of 1 row or of 64): a row's result can depend on the rows it is batched
  with (measured: a BLIP-2 caption's features change in their last bits when a longer caption joins its batch, for
  19 captions in 20). The feature store encodes an input once and reuses it in every later condition, so what it was
  batched with depends on which conditions ran before, in this process: a pytest-xdist worker's history is not a
  single run's. So the store encodes in batches of one shape (`fixed_shapes`): always `batch_size` rows (the last
  batch filled up), and the backbones tokenize every caption to their full length (detectors/backbones.py). Other
  batches (an attack's queries, the heads over a dataset) are made of the same inputs in the same order in every
  process, so their shapes are already the same everywhere.
- Libraries other than torch. OCR (data/ocr.py: captions read off pictures, the text boxes the typographic edits
  redraw) runs rapidocr's ONNX models on onnxruntime, whose thread pools are fixed when a session is created: its
  sessions are created with RESULT_THREADS intra-op and inter-op threads (its default is one per core, and
  OMP_NUM_THREADS does not reach it). Its pre- and post-processing is OpenCV, whose thread count is one for the
  whole process: `fixed_threads` holds it at RESULT_THREADS while any thread is inside. (Measured with
  onnxruntime 1.32 and OpenCV 5.0 on 2 cores: rapidocr's readings and scores are the same bits at 1, 2 and 3
  onnxruntime threads and at 1 and 4 OpenCV threads; pinned anyway, as neither promises it.)

On a GPU the thread count does not matter, and the batch shapes do as they do on a CPU; a batch halved after the GPU
ran out of memory has another shape, so such a run may differ in the last bits from one that did not.
"""
from __future__ import annotations

import contextlib
import contextvars
import sys
import threading

RESULT_THREADS = 1  # intra-op threads of every computation a reported number depends on


@contextlib.contextmanager
def fixed_threads(threads: int = RESULT_THREADS):
    """Run the body (or, as a decorator, the function) with torch at `threads` intra-op threads in this thread, and
    put the caller's count back after; OpenCV too, once something (OCR) has loaded it. Nested uses cost nothing: the
    count is only set when it differs. Setting it takes about a microsecond, but torch then drops its cached oneDNN
    convolutions, so it is set once per engine step (a side perturbed or encoded, the heads of a condition), not per
    batch."""
    import torch

    before = torch.get_num_threads()  # also runs torch's lazy per-thread start-up, which would reset the count later
    if before != threads:
        torch.set_num_threads(threads)
    try:
        with _opencv_threads(threads):
            yield
    finally:
        if before != threads:
            torch.set_num_threads(before)


_OPENCV = threading.Lock()
_opencv_inside = 0  # threads (and nested uses) inside fixed_threads while OpenCV is loaded
_opencv_before = 0


@contextlib.contextmanager
def _opencv_threads(threads: int):
    """OpenCV at `threads` threads in the body. Its count is the whole process's, not this thread's (the engine
    perturbs in a background thread while the main one encodes): the first one in sets it, the last one out puts
    back the count the first found. Never imports OpenCV."""
    global _opencv_inside, _opencv_before
    cv2 = sys.modules.get("cv2")
    if cv2 is None:
        yield
        return
    with _OPENCV:
        if _opencv_inside == 0:
            _opencv_before = cv2.getNumThreads()
            cv2.setNumThreads(threads)
        _opencv_inside += 1
    try:
        yield
    finally:
        with _OPENCV:
            _opencv_inside -= 1
            if _opencv_inside == 0:
                cv2.setNumThreads(_opencv_before)


_FIXED_SHAPES = contextvars.ContextVar("memerobust_fixed_shapes", default=False)


@contextlib.contextmanager
def fixed_shapes():
    """Encoders called in the body give each input the features it would get in any other batch of the same number
    of rows: a caption is padded to the encoder's full length, not to the longest caption beside it."""
    token = _FIXED_SHAPES.set(True)
    try:
        yield
    finally:
        _FIXED_SHAPES.reset(token)


def shapes_fixed() -> bool:
    """Whether the caller is inside `fixed_shapes` (an encoder pads its captions to its full length then)."""
    return _FIXED_SHAPES.get()


def device_type(computes) -> str:
    """'cpu', 'cuda', ...: the kind of device `computes` (a detector or an engine: its `device`, a torch.device or a
    string such as 'cuda:1'; none is a CPU) computes on. The same bytes are promised per kind of device, and what is
    chosen per kind (autocast, batch and shard sizes, the feature cache's namespace) is chosen from this."""
    return str(getattr(computes, "device", "cpu")).split(":")[0]
