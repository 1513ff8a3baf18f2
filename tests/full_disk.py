"""A full disk under one file, for the tests of what a command leaves when a write fails (issue 62): the file a command
writes by the name given becomes a link to /dev/full, whose every write fails with ENOSPC from the kernel as on a full
disk, so the command's own writer meets the real error (torch.save, the safetensors bytes, Arrow's parquet writer,
PIL's PNG, a text file's buffered write). Linux only: elsewhere the tests that use it skip. `small_disk` mounts a real
tmpfs, where that is allowed, for a test as a user meets it."""
from __future__ import annotations

import os
import subprocess
import tempfile
from contextlib import contextmanager
from pathlib import Path

import pytest

FULL = Path("/dev/full")


def _link(path: Path) -> None:
    path.unlink(missing_ok=True)
    os.symlink(FULL, path)


def fill(monkeypatch, name: str) -> None:
    """Every write of a file called `name` (a suffix such as `.png` matches every such file) fails with ENOSPC: an
    atomic write's temporary beside it (atomic.atomic_path), a file opened in a staged export folder
    (export.Staged), or a parquet file Arrow opens."""
    if not FULL.exists():
        pytest.skip("needs /dev/full (Linux) to fail writes with ENOSPC")
    matches = (lambda n: n.endswith(name)) if name.startswith(".") else (lambda n: n == name)
    mkstemp, mkdtemp = tempfile.mkstemp, tempfile.mkdtemp

    def atomic_temporary(suffix=None, prefix=None, dir=None, text=False):
        fd, tmp = mkstemp(suffix, prefix, dir, text)
        if prefix and matches(prefix[1:-1]):  # atomic_path's prefix is ".<name>."
            _link(Path(tmp))
        return fd, tmp

    def staged_folder(*args, **kwargs):
        folder = Path(mkdtemp(*args, **kwargs))
        if not name.startswith(".") and "/" not in name:
            _link(folder / name)  # opened there later (an imagefolder's metadata.jsonl)
        return str(folder)

    monkeypatch.setattr(tempfile, "mkstemp", atomic_temporary)
    monkeypatch.setattr(tempfile, "mkdtemp", staged_folder)
    try:
        import pyarrow.parquet as pq
    except ImportError:
        return

    class FullParquet(pq.ParquetWriter):
        def __init__(self, where, *args, **kwargs):
            if matches(Path(str(where)).name):
                _link(Path(where))
            super().__init__(where, *args, **kwargs)

    monkeypatch.setattr(pq, "ParquetWriter", FullParquet)


def leftovers(folder: Path) -> list[str]:
    """Every file and folder under `folder`, relative, sorted (temporaries start with a dot and are listed too)."""
    return sorted(str(p.relative_to(folder)) for p in Path(folder).rglob("*"))


@contextmanager
def small_disk(folder: Path, size: str):
    """A real tmpfs of `size` (e.g. "512k") mounted at `folder`, unmounted after; the test skips where mounting is
    not allowed (not root, or a container that forbids it)."""
    folder.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)],
                             capture_output=True, text=True)
    if mounted.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip() or mounted.returncode}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)
