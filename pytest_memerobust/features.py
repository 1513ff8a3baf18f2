"""Encoded features of single inputs, so that the cost of a run grows with the number of distinct inputs, not with
the number of conditions.

Every caption and picture is keyed by a digest of its content. Within a run, features live in memory per input: an
input seen under any earlier condition (the clean caption under an image-only condition, an unchanged caption under
typos@1, a picture a corruption left alone) is never encoded again. Between runs, and between pytest-xdist workers,
each side of a condition (the dataset's inputs under one perturbation) is kept as one file under the cache
directory, named by (encoder namespace, digests of its inputs). Files are written atomically and carry their
namespace, digests and a checksum; a truncated, corrupt or foreign file is ignored and written again.

The namespace names what computed the features: for a detector on a frozen backbone, that backbone's fingerprint
(weights and preprocessing), never the checkpoint of the head on top, so a second head (or checkpoint) on the same
backbone reads the features the first one encoded (`encoder_namespaces`).
"""
from __future__ import annotations

import hashlib
import io
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Sequence

import numpy as np

from .atomic import atomic_path

FORMAT = 2  # 2: pictures keyed by `pictures.digests` (computed on their device)
MODALITIES = ("image", "text")


def input_digest(item) -> str:
    """Content digest of one caption (str) or picture (a uint8 tensor 3 x H x W, or an array H x W x 3): the same
    input gives the same key anywhere."""
    if isinstance(item, str):
        h = hashlib.blake2b(digest_size=16)
        h.update(b"text\0" + item.encode("utf-8", "surrogatepass"))
        return h.hexdigest()
    return input_digests([item])[0]


def input_digests(items: Sequence) -> list[str]:
    """`input_digest` of many inputs; pictures are digested together, on their device."""
    if not items or isinstance(items[0], str):
        return [input_digest(x) for x in items]
    from .pictures import as_picture, digests

    return digests([as_picture(x) for x in items])


@dataclass
class CacheStats:
    """Per modality: inputs served from memory, from disk, and encoded."""

    memory_hits: dict = field(default_factory=lambda: {"image": 0, "text": 0})
    disk_hits: dict = field(default_factory=lambda: {"image": 0, "text": 0})
    encoded: dict = field(default_factory=lambda: {"image": 0, "text": 0})
    rejected_files: int = 0  # corrupt, truncated or foreign files found and replaced


def encoder_namespaces(detector, precision: str) -> tuple[dict[str, str], bool]:
    """(namespace per modality, whether features under it may be kept between runs). A detector that says what its
    encoders compute (`encoder_fingerprints`: the frozen backbone's weights and preprocessing) is named by that, so
    every head on the same backbone shares the entries; any other by its checkpoint, on disk only for trained
    weights (an untrained detector's random weights are not the same next run)."""
    import torch

    run = {"precision": precision, "device": str(getattr(detector, "device", "cpu")).split(":")[0],
           "torch": torch.__version__}
    fingerprints = getattr(detector, "encoder_fingerprints", None)
    if callable(fingerprints):
        return {m: json.dumps({"encoder": fp, **run}, sort_keys=True) for m, fp in fingerprints().items()}, True
    checkpoint = str(getattr(detector, "fingerprint", "") or "")
    card = getattr(detector, "card", None)
    namespace = json.dumps({"fingerprint": checkpoint, "card": getattr(card, "name", type(detector).__name__),
                            "backbone": getattr(card, "backbone", None),
                            "text_backbone": getattr(card, "text_backbone", None), **run}, sort_keys=True, default=str)
    return dict.fromkeys(MODALITIES, namespace), bool(checkpoint) and not checkpoint.startswith("untrained:")


def detector_feature_store(detector, precision: str, directory: Path | None) -> FeatureStore:
    """The store of `detector`'s encoded inputs, on disk under `directory` where that is safe (None: memory only).
    The pytest session and `memerobust train` both take theirs from here, so they share entries."""
    namespaces, reproducible = encoder_namespaces(detector, precision)
    return FeatureStore(namespaces, directory if reproducible else None)


class FeatureStore:
    """Features by input digest for one set of encoders. `namespace` names what computes them: one name for both
    modalities, or one per modality (`encoder_namespaces`).

    `directory=None` keeps features in memory only (`--memerobust-no-cache`, or encoders whose weights a later run
    would not reproduce)."""

    def __init__(self, namespace: str | Mapping[str, str], directory: Path | None = None):
        self.namespaces = (dict(namespace) if isinstance(namespace, Mapping)
                           else dict.fromkeys(MODALITIES, namespace))
        self.directory = Path(directory) if directory is not None else None
        self._memory: dict[tuple[str, str], np.ndarray] = {}
        self.stats = CacheStats()

    # --- lookup and encoding -------------------------------------------------------------------------------

    def features(self, modality: str, items: Sequence, encode: Callable[[list], np.ndarray],
                 batch_size: int, progress: Callable[[int, int], None] | None = None) -> np.ndarray:
        """Features of `items` [N, D]: from memory, else from this side's file, else encoded (each distinct missing
        input once, in batches of `batch_size`; after each batch `progress(encoded in it, to encode in all)`)."""
        digests = input_digests(items)
        distinct = list(dict.fromkeys(digests))
        missing = [d for d in distinct if (modality, d) not in self._memory]
        self.stats.memory_hits[modality] += len(distinct) - len(missing)
        path = self.path(modality, digests) if self.directory is not None else None
        if missing and path is not None and self._read(path, modality, digests):
            self.stats.disk_hits[modality] += len(missing)
            missing = []
        if missing:
            first = {}
            for i, d in enumerate(digests):
                first.setdefault(d, i)
            todo = [items[first[d]] for d in missing]
            for start in range(0, len(todo), batch_size):
                rows = np.asarray(encode(todo[start : start + batch_size]))
                for d, row in zip(missing[start : start + batch_size], rows):
                    self._memory[(modality, d)] = row
                if progress is not None:
                    progress(len(rows), len(todo))
            self.stats.encoded[modality] += len(missing)
        out = np.stack([self._memory[(modality, d)] for d in digests])
        if path is not None and not path.is_file():
            self._write(path, modality, digests, out)
        return out

    # --- disk ----------------------------------------------------------------------------------------------

    def path(self, modality: str, digests: Sequence[str]) -> Path:
        """The file of one side: content-addressed by the namespace, the modality and the inputs' digests."""
        h = hashlib.blake2b(f"{FORMAT}\0{self.namespaces[modality]}\0{modality}\0".encode(), digest_size=20)
        h.update("\0".join(digests).encode())
        key = h.hexdigest()
        return self.directory / "features" / key[:2] / f"{key}.npz"

    def _read(self, path: Path, modality: str, digests: list[str]) -> bool:
        """Load a side's file into memory; False when it is absent or not to be trusted."""
        if not path.is_file():
            return False
        try:
            with np.load(path, allow_pickle=False) as archive:
                header = json.loads(bytes(archive["header"]).decode())
                features = archive["features"]
            valid = (header.get("format") == FORMAT and header.get("namespace") == self.namespaces[modality]
                     and header.get("modality") == modality and header.get("digests") == digests
                     and header.get("sha256") == hashlib.sha256(features.tobytes()).hexdigest()
                     and features.shape[0] == len(digests))
        except Exception:  # truncated or not an archive at all: recompute, never trust
            valid = False
        if not valid:
            self.stats.rejected_files += 1
            path.unlink(missing_ok=True)  # rewritten below with what this run encodes
            return False
        for d, row in zip(digests, features):
            self._memory[(modality, d)] = row
        return True

    def _write(self, path: Path, modality: str, digests: list[str], features: np.ndarray) -> None:
        header = {"format": FORMAT, "namespace": self.namespaces[modality], "modality": modality, "digests": digests,
                  "sha256": hashlib.sha256(np.ascontiguousarray(features).tobytes()).hexdigest()}
        buffer = io.BytesIO()
        np.savez(buffer, features=features, header=np.frombuffer(json.dumps(header).encode(), dtype=np.uint8))
        try:
            with atomic_path(path) as tmp:
                tmp.write_bytes(buffer.getvalue())
        except OSError:  # a read-only or full cache directory costs speed, never the run
            pass
