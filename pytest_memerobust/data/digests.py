"""Content digests of a detector's inputs: one key per caption or picture, the same on every machine, device and
batch. The feature store, the OCR cache, the hosted detectors' reply cache, the modality-reliance pairs and the
counterexample manifests all name an input by it. Captions are hashed here; pictures by `pictures.digests`, on their
device (imported only when a picture is digested, so this module stays light)."""
from __future__ import annotations

import hashlib
from typing import Sequence


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
