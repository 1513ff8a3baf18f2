"""Atomic file writes: a reader (or an interrupted run) sees the old file or the whole new one, never a part; a
full disk is a DiskFull naming the file, not a traceback."""
from __future__ import annotations

import errno
import os
import tempfile
from contextlib import ExitStack, contextmanager
from pathlib import Path

from .errors import DiskFull

FULL = {errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)}  # out of space, out of quota


@contextmanager
def writing(path: Path):
    """A full disk (or quota) while the block writes `path` raised as DiskFull naming `path`."""
    try:
        yield
    except DiskFull:
        raise
    except OSError as exc:
        if exc.errno in FULL:
            raise DiskFull(path, exc) from None
        raise


@contextmanager
def atomic_path(path: Path):
    """Yield a temporary path beside `path`; on success it replaces `path`, on error it is removed."""
    path = Path(path)
    with writing(path):  # a full disk may refuse the folder or the temporary already
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        with writing(path):
            yield Path(tmp)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; give the file the mode a plain open() would
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_all(writes: dict) -> None:
    """Files that belong together (a checkpoint, its metrics, its card) written as one: `writes` maps each path to a
    function that writes it to the temporary path it is given; only once all are written do they replace theirs, so
    a failure (a DiskFull naming the file) leaves every one as it was."""
    with ExitStack() as stack:
        for path, write in writes.items():
            tmp = stack.enter_context(atomic_path(path))
            with writing(path):
                write(tmp)


def atomic_write_text(path: Path, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def atomic_write_bytes(path: Path, data: bytes) -> None:
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)


@contextmanager
def folder_locked(folder: Path):
    """Hold an exclusive lock on `folder` (POSIX; elsewhere nothing) while the block runs: processes that update
    what one folder holds (a manifest, an MLflow store being created) do it one after the other."""
    try:
        import fcntl
    except ImportError:
        yield
        return
    fd = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # (closing releases the lock)
