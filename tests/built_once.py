"""A module fixture's folder built once per test session, not once per pytest-xdist worker: with `-n 2` the tests
of one module land on both workers, and each built the same run again (a demo run with its imports, 5 to 10 s of
CPU). The first worker to ask builds it; the other waits for it and reads the same folder."""
from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path
from typing import Callable

try:
    import fcntl
except ImportError:  # no flock (Windows): each worker builds its own copy
    fcntl = None


def session_folder(tmp_path_factory) -> Path:
    """The folder every pytest-xdist worker of this test session shares (without xdist or flock: this process's)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") and fcntl is not None else base


@contextlib.contextmanager
def locked(path: Path, wait: bool = True):
    """Hold an exclusive lock on `path` (POSIX flock; elsewhere every process holds it at once); yield whether it is
    held. Without `wait`, yield False at once if another process holds it."""
    if fcntl is None:
        yield True
        return
    fd = os.open(path, os.O_RDWR | os.O_CREAT)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)  # (closing releases the lock)


def built_once(tmp_path_factory, name: str, build: Callable[[Path], None]) -> Path:
    """The folder `name`, shared by the session's workers, once `build(folder)` has filled it without raising. A
    build that raised is started again, from an empty folder, by the next test that asks."""
    shared = session_folder(tmp_path_factory)
    folder, built = shared / name, shared / f"{name}.built"
    with locked(shared / f"{name}.lock"):
        if not built.exists():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            build(folder)
            built.touch()
    return folder
