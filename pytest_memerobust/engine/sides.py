"""The inputs of a detector's condition sides, each computed once: the clean pictures (decoded once, on the
detector's device), the perturbed captions and pictures, the sides perturbed ahead in a background thread, the
features held per side and the digests of the inputs each side encoded, and where each clean picture shows its text.

A side is one channel under one perturbation at one severity (or clean); engines of the same encoders, seed and
data (a channel-ablation view and its base) share one `Sides`, so what one computed the other reuses.
"""
from __future__ import annotations

import contextlib
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable, Iterable

import numpy as np

from ..data.text_boxes import TEXT_BOXES
from .features import FeatureStore, HeldArrays, unpack_digests

PREFETCH_SIDES = 2  # sides perturbed ahead: enough to keep the encoder fed, few enough to bound memory
_executor: ThreadPoolExecutor | None = None


def _background() -> ThreadPoolExecutor:
    global _executor
    if _executor is None:
        import torch

        # The background thread's CPU torch ops run on one core: two OpenMP pools busy-waiting on the same cores
        # cost more than they overlap (main job on 2 cores: 45 s -> 37 s), and its perturbations must compute what
        # the main thread's would (determinism.RESULT_THREADS). OpenMP's thread count is per thread, but torch also
        # keeps a global default that threads not yet started read: it is put back once the background thread has
        # its own setting.
        threads = torch.get_num_threads()
        executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="memerobust-perturb",
                                      initializer=_one_cpu_thread)
        executor.submit(int).result()
        torch.set_num_threads(threads)
        _executor = executor
    return _executor


def _one_cpu_thread() -> None:
    """This thread's torch ops on one core; torch's lazy per-thread start-up runs first, or it would later reset
    the count to the global default."""
    import torch

    torch.get_num_threads()
    torch.set_num_threads(1)


@contextlib.contextmanager
def side_stream():
    """A CUDA stream of its own for background perturbations, so the GPU corruptions overlap with encoding; yields
    the stream (None without a GPU)."""
    import torch

    if not torch.cuda.is_available():
        yield None
        return
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        yield stream


class Sides:
    """The condition sides of `memes` for one set of encoders, keyed by side (see the engine's `_key`): `inputs`
    (captions or pictures, computed once; perturbed pictures are dropped once encoded), `pending` (sides being
    perturbed in the background), `held` (features per side, at most `side_memory_limit` bytes; a side dropped is
    found again in the store `features` by its inputs' `digests`), `encoder_calls` (inputs actually encoded)."""

    def __init__(self, memes: list, device: str, features: FeatureStore, side_memory_limit: int | None = None,
                 text_boxes: list | None = None):
        self.memes, self.device, self.features = memes, device, features
        # where each clean picture shows its text (the dataset's, else found by a text reader when asked)
        self.text_boxes = [m.meta.get(TEXT_BOXES) for m in memes] if text_boxes is None else text_boxes
        self.boxless: dict[str, set[int]] = {}  # typographic edit -> the pictures it met without text boxes
        self.clean_pictures: list = []  # decoded once, on the detector's device
        self.pending: dict[tuple, Future] = {}
        self.inputs: dict[tuple, list] = {}
        self.held = HeldArrays(side_memory_limit)  # per condition side, so a side is digested once
        self.digests: dict[tuple, np.ndarray] = {}  # per side encoded: its inputs' digests, packed
        self.encoder_calls = {"image": 0, "text": 0}

    def clean(self, modality: str) -> list:
        """The captions, or the pictures as uint8 tensors on the detector's device (decoded once)."""
        if modality == "text":
            return [m.text for m in self.memes]
        if not self.clean_pictures:
            pictures = [m.picture(self.device) for m in self.memes]  # all or none: a picture that fails to decode
            self.clean_pictures.extend(pictures)  # must not leave a half-built list for the next case
        return self.clean_pictures

    def clean_picture(self, i: int):
        """Meme `i`'s clean picture on the detector's device: the held one, else decoded alone (nothing kept)."""
        if self.clean_pictures:
            return self.clean_pictures[i]
        return self.memes[i].picture(self.device)

    def take_pending(self, key: tuple) -> None:
        """The side `key` perturbed in the background, waited for and kept with the others (if it is pending)."""
        if key in self.pending and key not in self.inputs:
            self.inputs[key] = self.pending.pop(key).result()

    def prefetch(self, keys: Iterable[tuple], perturb: Callable[[tuple], list]) -> None:
        """Start `perturb(key)` in the background thread for each side of `keys` not computed, held or pending."""
        for key in keys:
            if key not in self.inputs and key not in self.held and key not in self.pending:
                self.pending[key] = _background().submit(perturb, key)

    def held_features(self, key: tuple, modality: str) -> np.ndarray | None:
        """The features of side `key` if they are held, or in the store by the digests of its inputs; else None."""
        held = self.held.get(key)
        if held is None and key in self.digests:  # encoded before, dropped from memory since
            held = self.features.cached(modality, unpack_digests(self.digests[key]))
        return held

    def boxes(self, indices, edit: str | None, read: Callable | None) -> list:
        """Where each clean picture shows its text: the dataset's boxes, else `read`'s (a text reader's, read once),
        else None; the pictures `edit` meets without boxes go into `boxless`, for the run's notes."""
        out = []
        for i in indices:
            if self.text_boxes[i] is None and read is not None:
                self.text_boxes[i] = read(self.clean_picture(i))
            out.append(self.text_boxes[i])
        missing = {i for i, boxes in zip(indices, out) if not boxes}
        if edit is not None and missing:
            self.boxless.setdefault(edit, set()).update(missing)
        return out

    def count(self, boxless: dict[str, set[int]], encoder_calls: dict[str, int]) -> None:
        """Add what a shard-major pass met: pictures without text boxes, inputs encoded."""
        for edit, rows in boxless.items():
            self.boxless.setdefault(edit, set()).update(rows)
        for modality, count in encoder_calls.items():
            self.encoder_calls[modality] += count
