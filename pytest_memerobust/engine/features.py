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
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Sequence

import numpy as np

from ..atomic import atomic_path
from ..data.digests import input_digests
from ..determinism import device_type, encode_fixed

FORMAT = 2  # 2: pictures keyed by `pictures.digests` (computed on their device)
MODALITIES = ("image", "text")
FEATURE_MEMORY_MIB = 1024  # features a run holds in memory by default: per input and per condition side, half each
# (a shard-major pass needs its sides for one shard only; 2048 before it, when every side stayed for the run)


class HeldArrays:
    """Arrays by key; past `limit` bytes (None: no limit) the least recently used are dropped. What is dropped is on
    disk or is computed again, so the bound keeps a 50,000-meme run's memory flat and never changes its results."""

    def __init__(self, limit: int | None = None):
        self.limit, self.nbytes, self.dropped = limit, 0, 0
        self._arrays: OrderedDict = OrderedDict()

    def __contains__(self, key) -> bool:
        return key in self._arrays

    def __len__(self) -> int:
        return len(self._arrays)

    def get(self, key):
        array = self._arrays.get(key)
        if array is not None:
            self._arrays.move_to_end(key)
        return array

    def put(self, key, array: np.ndarray) -> None:
        old = self._arrays.pop(key, None)
        self.nbytes += array.nbytes - (0 if old is None else old.nbytes)
        self._arrays[key] = array
        while self.limit is not None and self.nbytes > self.limit and len(self._arrays) > 1:
            _, dropped = self._arrays.popitem(last=False)
            self.nbytes -= dropped.nbytes
            self.dropped += 1


def pack_digests(digests: Sequence[str]) -> np.ndarray:
    """Hex digests (16 bytes each) as one compact array: a dropped side is found again by them, at 16 bytes a meme."""
    return np.frombuffer(bytes.fromhex("".join(digests)), dtype="S16").copy()


def unpack_digests(packed: np.ndarray) -> list[str]:
    return [bytes(d).ljust(16, b"\0").hex() for d in packed]


@dataclass
class CacheStats:
    """Per modality: inputs served from memory, from disk, and encoded."""

    memory_hits: dict = field(default_factory=lambda: {"image": 0, "text": 0})
    disk_hits: dict = field(default_factory=lambda: {"image": 0, "text": 0})
    encoded: dict = field(default_factory=lambda: {"image": 0, "text": 0})
    rejected_files: int = 0  # corrupt, truncated or foreign files found and replaced
    dropped: int = 0  # inputs' features dropped from memory to stay within the bound (read again from disk)

    def since(self, before: "CacheStats") -> "CacheStats":
        """What was counted after `before` (a copy of these counts taken earlier)."""
        return CacheStats(**{name: ({m: n - getattr(before, name).get(m, 0) for m, n in value.items()}
                                    if isinstance(value, dict) else value - getattr(before, name))
                             for name, value in vars(self).items()})

    def add(self, other: "CacheStats | Mapping") -> None:
        """Count `other`'s counts too (another store's, or a worker process's as `asdict` sent them)."""
        for name, value in (vars(other) if isinstance(other, CacheStats) else other).items():
            if isinstance(value, Mapping):
                counts = getattr(self, name)
                for modality, n in value.items():
                    counts[modality] = counts.get(modality, 0) + n
            else:
                setattr(self, name, getattr(self, name) + value)


def encoder_namespaces(detector, precision: str) -> tuple[dict[str, str], bool]:
    """(namespace per modality, whether features under it may be kept between runs). A detector that says what its
    encoders compute (`encoder_fingerprints`: the frozen backbone's weights and preprocessing) is named by that, so
    every head on the same backbone shares the entries; any other by its checkpoint, on disk only for trained
    weights (an untrained detector's random weights are not the same next run)."""
    import torch

    run = {"precision": precision, "device": device_type(detector),
           "torch": torch.__version__}
    fingerprints = getattr(detector, "encoder_fingerprints", None)
    if callable(fingerprints):
        return {m: json.dumps({"encoder": fp, **run}, sort_keys=True) for m, fp in fingerprints().items()}, True
    checkpoint = str(getattr(detector, "fingerprint", "") or "")
    card = getattr(detector, "card", None)
    network = getattr(card, "network", None)
    namespace = json.dumps({"fingerprint": checkpoint, "card": getattr(card, "name", type(detector).__name__),
                            "backbone": getattr(network, "backbone", None),
                            "text_backbone": getattr(network, "text_backbone", None), **run},
                           sort_keys=True, default=str)
    return dict.fromkeys(MODALITIES, namespace), bool(checkpoint) and not checkpoint.startswith("untrained:")


def detector_feature_store(detector, precision: str, directory: Path | None,
                           memory_limit: int | None = None) -> FeatureStore:
    """The store of `detector`'s encoded inputs, on disk under `directory` where that is safe (None: memory only),
    holding at most `memory_limit` bytes of them in memory (None: no bound). The pytest session and `memerobust
    train` both take theirs from here, so they share entries."""
    namespaces, reproducible = encoder_namespaces(detector, precision)
    return FeatureStore(namespaces, directory if reproducible else None, memory_limit)


class FeatureStore:
    """Features by input digest for one set of encoders. `namespace` names what computes them: one name for both
    modalities, or one per modality (`encoder_namespaces`).

    `directory=None` keeps features in memory only (`--memerobust-no-cache`, or encoders whose weights a later run
    would not reproduce). `memory_limit`: bytes of features held in memory at most (None: no bound); beyond it the
    least recently used are dropped, to be read again from their side's file (or encoded again without one)."""

    def __init__(self, namespace: str | Mapping[str, str], directory: Path | None = None,
                 memory_limit: int | None = None):
        self.namespaces = (dict(namespace) if isinstance(namespace, Mapping)
                           else dict.fromkeys(MODALITIES, namespace))
        self.directory = Path(directory) if directory is not None else None
        self._memory = HeldArrays(memory_limit)  # (modality, digest) -> one input's features
        self.stats = CacheStats()

    # --- lookup and encoding -------------------------------------------------------------------------------

    def features(self, modality: str, items: Sequence, encode: Callable[[list], np.ndarray],
                 batch_size: int, progress: Callable[[int, int], None] | None = None,
                 digests: Sequence[str] | None = None, buckets: Callable[[list], list[int]] | None = None,
                 run_batches: Callable | None = None) -> np.ndarray:
        """Features of `items` [N, D]: from memory, else from this side's file, else encoded (each distinct missing
        input once, in fixed-shape batches of `batch_size`: `encode_fixed`, with `buckets` giving each caption's
        padded length and `run_batches` where the batches run; after each batch `progress(encoded in it, to encode
        in all)`). `digests`: the items' `input_digests`, where the caller has them already."""
        digests = list(digests) if digests is not None else input_digests(items)
        found = self._found(modality, digests)
        missing = [d for d in dict.fromkeys(digests) if d not in found]
        if missing:
            first = {}
            for i, d in enumerate(digests):
                first.setdefault(d, i)
            todo = [items[first[d]] for d in missing]
            # Which inputs are missing depends on what was encoded before (in this process: a pytest-xdist
            # worker's history is not a single run's), so every batch has one shape (determinism.py).
            rows = encode_fixed(encode, todo, batch_size, buckets, run_batches, progress)
            for d, row in zip(missing, rows):
                found[d] = row
                self._remember(modality, d, row)
            self.stats.encoded[modality] += len(missing)
        out = np.stack([found[d] for d in digests])
        path = self.path(modality, digests) if self.directory is not None else None
        if path is not None and not path.is_file():
            self._write(path, modality, digests, out)
        return out

    def cached(self, modality: str, digests: Sequence[str]) -> np.ndarray | None:
        """Features of inputs known by their digests alone (a side the engine dropped from memory), from memory or
        their side's file; None when some are in neither."""
        digests = list(digests)
        found = self._found(modality, digests)
        if len(found) < len(set(digests)):
            return None
        return np.stack([found[d] for d in digests])

    def _found(self, modality: str, digests: list[str]) -> dict[str, np.ndarray]:
        """The features of `digests` held in memory, or, when some are not, all of them from the side's file."""
        distinct = list(dict.fromkeys(digests))
        found = {d: row for d in distinct if (row := self._memory.get((modality, d))) is not None}
        self.stats.memory_hits[modality] += len(found)
        if len(found) < len(distinct) and self.directory is not None:
            rows = self._read(self.path(modality, digests), modality, digests)
            if rows is not None:
                self.stats.disk_hits[modality] += len(distinct) - len(found)
                for d, row in zip(digests, rows):
                    if d not in found:
                        found[d] = row
                        self._remember(modality, d, row)
        return found

    def _remember(self, modality: str, digest: str, row: np.ndarray) -> None:
        """Hold one input's features: a copy, so that a row held does not keep its whole side's array alive past
        the bound."""
        before = self._memory.dropped
        self._memory.put((modality, digest), np.array(row))
        self.stats.dropped += self._memory.dropped - before

    # --- disk ----------------------------------------------------------------------------------------------

    def path(self, modality: str, digests: Sequence[str]) -> Path:
        """The file of one side: content-addressed by the namespace, the modality and the inputs' digests."""
        h = hashlib.blake2b(f"{FORMAT}\0{self.namespaces[modality]}\0{modality}\0".encode(), digest_size=20)
        h.update("\0".join(digests).encode())
        key = h.hexdigest()
        return self.directory / "features" / key[:2] / f"{key}.npz"

    def _read(self, path: Path, modality: str, digests: list[str]) -> np.ndarray | None:
        """A side's features from its file; None when it is absent or not to be trusted."""
        if not path.is_file():
            return None
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
            return None
        return features

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
