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
  batch filled up), and each caption padded to a length that is a function of the caption alone (`bucket_length`:
  its token count rounded up to a multiple of 16), its batch made of captions of that length only
  (engine/features.py `shaped_batches`). Until issue 61 every caption was padded to the encoder's full length
  (MiniLM's 128), which cost 4.4x in the encoder on PrideMM's captions. Other
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
from typing import Callable, Sequence

import numpy as np

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


_FIXED_SHAPES = contextvars.ContextVar("memerobust_fixed_shapes", default=None)
CAPTION_BUCKET = 16  # tokens: a caption's padded length is its token count rounded up to a multiple of this


def bucket_length(tokens: int, max_length: int) -> int:
    """The length a caption of `tokens` tokens is padded to where its features must not depend on its batch: its
    count rounded up to a multiple of CAPTION_BUCKET, at most the encoder's `max_length`. A function of the caption
    alone, so every batch it joins pads it alike (PrideMM's captions: 41 tokens on average, padded to 48 rather than
    MiniLM's 128)."""
    return min(max_length, -(-max(int(tokens), 1) // CAPTION_BUCKET) * CAPTION_BUCKET)


@contextlib.contextmanager
def fixed_shapes(length: int | None = None):
    """Encoders called in the body give each input the features it would get in any other batch of the same number
    of rows: every caption is padded to `length` tokens (a bucket_length all its captions share; None: the
    encoder's full length), not to the longest caption beside it."""
    token = _FIXED_SHAPES.set(0 if length is None else int(length))
    try:
        yield
    finally:
        _FIXED_SHAPES.reset(token)


def shapes_fixed() -> int | None:
    """None outside `fixed_shapes`; inside, the length its captions are padded to (0: the encoder's full length)."""
    return _FIXED_SHAPES.get()


CPU_CAPTION_ROWS = 16  # rows of a fixed-shape caption batch on a CPU (measured on MiniLM at one thread, bucket 48:
# 16 rows cost 7% more a caption than 64, 8 rows 17%), so that a side of a few captions over a few buckets fills
# little: each bucket's last batch is filled up to it


def caption_rows(device: str, batch_size: int) -> int:
    """Rows of a fixed-shape caption batch: on a CPU at most CPU_CAPTION_ROWS, where a bigger batch is hardly
    cheaper per caption and every bucket's last batch is filled up; elsewhere (a GPU wants big batches) `batch_size`."""
    return min(batch_size, CPU_CAPTION_ROWS) if device == "cpu" else batch_size


def caption_buckets(detector) -> Callable[[list], list[int]] | None:
    """The detector's `caption_buckets` (each caption's padded length in a fixed-shape batch), or None for a
    detector that pads every caption alike (or none: hashed features, a prompted model)."""
    buckets = getattr(detector, "caption_buckets", None)
    return buckets if callable(buckets) else None


def shaped_batches(count: int, batch_size: int,
                   buckets: Sequence[int] | None = None) -> list[tuple[int | None, list[int]]]:
    """(padded length, input indexes) of the batches that encode `count` inputs: at most `batch_size` each, and,
    given each caption's bucket (its padded length: determinism.bucket_length), captions of one bucket only, the
    buckets shortest first. Length None: one shape for all (pictures, or captions padded to the encoder's full
    length)."""
    groups: dict = {}
    for i in range(count):
        groups.setdefault(None if buckets is None else int(buckets[i]), []).append(i)
    return [(length, members[start : start + batch_size])
            for length, members in sorted(groups.items(), key=lambda kv: -1 if kv[0] is None else kv[0])
            for start in range(0, len(members), batch_size)]


def filled(chunk: list, rows: int) -> list:
    """`chunk` filled up to `rows` items with copies of its last, so its batch has the fixed shape (the caller drops
    the fill's results: rows past len(chunk))."""
    return chunk + chunk[-1:] * (rows - len(chunk))


def encode_batch(encode: Callable[[list], np.ndarray], chunk: list, length: int | None, batch_size: int) -> np.ndarray:
    """One fixed-shape batch: `chunk` filled up to `batch_size` rows with copies of its last input (whose rows are
    dropped), its captions padded to `length` (None: the encoder's full length), so each input's row is the one it
    gets in any other batch of its bucket (determinism.py)."""
    with fixed_shapes(length):
        return np.asarray(encode(filled(chunk, batch_size)))[: len(chunk)]


def encode_fixed(encode: Callable[[list], np.ndarray], items: Sequence, batch_size: int,
                 buckets: Callable[[list], list[int]] | None = None, run_batches: Callable | None = None,
                 progress: Callable[[int, int], None] | None = None) -> np.ndarray:
    """Rows of `items`, each computed in a fixed-shape batch (`shaped_batches`, `encode_batch`): the same bytes in
    any batch, order, process or worker count. `buckets(items)`: each caption's padded length (None: all at the
    full length). `run_batches(encode, [(length, chunk), ...], batch_size)`: where the batches run, yielding (batch
    number, rows) in any order (None: here, one after the other); `progress(n, total)` after each batch."""
    items = list(items)
    if not items:
        return np.zeros((0, 0), dtype=np.float32)
    batches = shaped_batches(len(items), batch_size, None if buckets is None else buckets(items))
    work = [(length, [items[i] for i in members]) for length, members in batches]
    ran = (run_batches(encode, work, batch_size) if run_batches is not None
           else ((k, encode_batch(encode, chunk, length, batch_size)) for k, (length, chunk) in enumerate(work)))
    out: list = [None] * len(items)
    for k, rows in ran:
        for i, row in zip(batches[k][1], rows):
            out[i] = row
        if progress is not None:
            progress(len(rows), len(items))
    return np.stack(out)


def device_type(computes) -> str:
    """'cpu', 'cuda', ...: the kind of device `computes` (a detector or an engine: its `device`, a torch.device or a
    string such as 'cuda:1'; none is a CPU) computes on. The same bytes are promised per kind of device, and what is
    chosen per kind (autocast, batch and shard sizes, the feature cache's namespace) is chosen from this."""
    return str(getattr(computes, "device", "cpu")).split(":")[0]
