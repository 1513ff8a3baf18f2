"""What a run's files record of a meme, beside the memes themselves: a picture written once under its digest (the
counterexample manifests' and imagefolder exports' pictures) and a digest of the code of the perturbation that made
it, so that a picture that no longer regenerates can be blamed on an edited perturbation, or not."""
from __future__ import annotations

from pathlib import Path

import numpy as np


def perturbation_code(name: str) -> str:
    """A digest of the source files that define perturbation `name` (its function and batch function), read from
    disk: it changes when that code is edited, so a picture that no longer regenerates can be blamed on it, or not."""
    import hashlib
    import inspect

    from ..perturb import get as get_perturbation

    p = get_perturbation(name)
    parts = set()
    for fn in (p.code.fn, p.code.batch):
        if fn is None:
            continue
        try:
            source = inspect.getsourcefile(inspect.unwrap(fn))
            parts.add(Path(source).read_bytes() if source else b"")
        except (OSError, TypeError):  # no source file to read (a builtin, a compiled module): what it is called
            parts.add(f"{getattr(fn, '__module__', '')}.{getattr(fn, '__qualname__', repr(fn))}".encode())
    h = hashlib.blake2b(digest_size=8)
    for part in sorted(parts):
        h.update(hashlib.blake2b(part).digest())
    return h.hexdigest()


def store_picture(store: Path, picture, digest: str) -> str:
    """Write the picture (H x W x 3 uint8) losslessly as `store/<digest>.png`, once; its name relative to the
    manifest's folder, as entries record it."""
    from PIL import Image

    from ..atomic import atomic_path

    path = Path(store) / f"{digest}.png"
    if not path.is_file():
        with atomic_path(path) as tmp:
            Image.fromarray(np.ascontiguousarray(picture)).save(tmp, format="PNG")
    return f"{Path(store).name}/{path.name}"
