"""Inputs to features and class probabilities through one detector, in batches: encodes go through the store of
encoded inputs (each distinct input encoded once), a split detector's head runs over feature rows, a black-box
detector answers pictures and captions; a batch that runs the GPU out of memory is halved, bf16 runs the encoders
under autocast, and pictures and captions reach the detector through the engine's defence."""
from __future__ import annotations

import contextlib
from dataclasses import dataclass

import numpy as np

from ..data.digests import input_digests
from ..determinism import caption_buckets, caption_rows, device_type, fixed_threads
from .features import pack_digests
from .progress import PROGRESS_MIN_INPUTS, progress_bar
from .sides import Sides

PRECISIONS = ("fp32", "bf16")


@dataclass(frozen=True)
class EncodingSettings:
    """How an engine asks its detector: `batch_size` inputs at a time, at `precision` ("bf16" runs the encoders
    under bfloat16 autocast), through `defence` (defences.Defence: every caption and picture normalised on its way
    to the detector; the caption edits are then chosen adaptively and the attacks query the defended detector)."""

    batch_size: int = 64
    precision: str = "fp32"
    defence: object = None

    def __post_init__(self):
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision must be fp32 or bf16, got {self.precision!r}")


class Encoding:
    """How one engine asks its detector: `batch_size` inputs at a time (halved for good after a GPU runs out of
    memory), at `precision`, through `defence`; what it encodes is counted in `sides.encoder_calls` and kept in
    `sides.features` (the store shared by the engines of these encoders)."""

    def __init__(self, detector, sides: Sides, settings: EncodingSettings = EncodingSettings()):
        self.detector, self.sides = detector, sides
        self.batch_size, self.precision, self.defence = settings.batch_size, settings.precision, settings.defence

    def defended(self, captions: list) -> list:
        """Captions as the detector reads them: through the defence, if there is one."""
        if self.defence is None:
            return captions
        return [None if text is None else self.defence(text) for text in captions]

    def defended_pictures(self, pictures: list) -> list:
        """Pictures as the detector reads them: through the defence's picture defences (area_resize...), if any."""
        if self.defence is None or not self.defence.guards_pictures:
            return pictures
        return self.defence.pictures(pictures, self.detector)

    def encode(self, modality: str, items: list) -> tuple[np.ndarray, np.ndarray]:
        """(features, packed digests) of `items` through the store of encoded inputs (pictures behind the picture
        defences, if any)."""
        if modality == "image":
            items = self.defended_pictures(items)
        digests = input_digests(items)
        encode = self._fitting(self.detector.encode_texts if modality == "text"
                               else self._as_the_detector_takes(self.detector.encode_images))

        bar = None

        def encoded(n: int, total: int) -> None:
            nonlocal bar
            self.sides.encoder_calls[modality] += n
            if bar is None and total >= PROGRESS_MIN_INPUTS:
                bar = progress_bar(total, f"encoding {'pictures' if modality == 'image' else 'captions'}")
            if bar is not None:
                bar.update(n)

        try:
            with self._precision():
                text = modality == "text"
                rows = caption_rows(device_type(self.detector), self.batch_size) if text else self.batch_size
                held = self.sides.features.features(modality, items, encode, rows, encoded, digests,
                                                    caption_buckets(self.detector) if text else None)
        finally:
            if bar is not None:
                bar.close()
        return held, pack_digests(digests)

    @fixed_threads()
    def heads(self, image_features: np.ndarray, text_features: np.ndarray) -> np.ndarray:
        """The split detector's head over paired feature rows, in batches."""
        return np.concatenate([self.detector.head(image_features[i : i + self.batch_size],
                                                  text_features[i : i + self.batch_size])
                               for i in range(0, len(image_features), self.batch_size)])

    @fixed_threads()
    def answers(self, images: list, texts: list, detector=None) -> tuple[np.ndarray, np.ndarray | None]:
        """(class probabilities, abstained or None) of a black-box detector (default: this one), in batches; a
        detector that can decline to answer (a prompted vision-language model) says which memes it declined through
        `predict_with_abstentions`."""
        detector = self.detector if detector is None else detector
        images = self.defended_pictures(images)
        abstains = callable(getattr(detector, "predict_with_abstentions", None))
        predict = self._as_the_detector_takes(detector.predict_with_abstentions if abstains
                                              else detector.predict_proba)
        with self._precision():
            batches = [predict(images[i : i + self.batch_size], texts[i : i + self.batch_size])
                       for i in range(0, len(images), self.batch_size)]
        if not abstains:
            return np.concatenate(batches), None
        return np.concatenate([b[0] for b in batches]), np.concatenate([np.asarray(b[1], bool) for b in batches])

    @fixed_threads()
    def sampled_answers(self, images: list, texts: list, detector, keys, sampling) -> np.ndarray:
        """[memes, k] answers of a detector that samples by itself (a hosted model), in batches, each meme's drawn
        with its key (detectors/sampling.sample_keys)."""
        images = self.defended_pictures(images)
        ask = self._as_the_detector_takes(detector.sample_answers)
        return np.concatenate([ask(images[i : i + self.batch_size], texts[i : i + self.batch_size],
                                   keys[i : i + self.batch_size], sampling)
                               for i in range(0, len(images), self.batch_size)])

    def _as_the_detector_takes(self, method):
        """`method` fed pictures as the detector takes them: tensors on its device (the contract), or H x W x 3
        arrays for a detector that says `takes_pictures = "array"` (converted at this edge, batch by batch)."""
        if getattr(self.detector, "takes_pictures", "tensor") != "array":
            return method
        from ..data.pictures import to_array

        def with_arrays(images, *rest):
            return method([None if x is None else to_array(x) for x in images], *rest)

        return with_arrays

    def _fitting(self, encode):
        """`encode` that halves its batch, and the batch size from then on, when the GPU runs out of memory: the
        batch size adapts to the memory there is."""
        import torch

        def run(items: list) -> np.ndarray:
            try:
                return encode(items)
            except torch.cuda.OutOfMemoryError:
                if len(items) == 1:
                    raise
                torch.cuda.empty_cache()
                half = len(items) // 2
                self.batch_size = min(self.batch_size, half)
                return np.concatenate([run(items[:half]), run(items[half:])])

        return run

    def _precision(self):
        """bfloat16 autocast around the encoders (the head stays in fp32: it is cheap and decides the class)."""
        if self.precision != "bf16":
            return contextlib.nullcontext()
        import torch

        return torch.autocast(device_type=device_type(self.detector), dtype=torch.bfloat16)
