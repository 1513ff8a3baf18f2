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


@contextlib.contextmanager
def _locked(path: Path):
    fd = os.open(path, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # (closing releases the lock)


def built_once(tmp_path_factory, name: str, build: Callable[[Path], None]) -> Path:
    """The folder `name`, shared by the session's workers, once `build(folder)` has filled it without raising. A
    build that raised is started again, from an empty folder, by the next test that asks."""
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") and fcntl is not None else base
    folder, built = shared / name, shared / f"{name}.built"
    with _locked(shared / f"{name}.lock") if fcntl is not None else contextlib.nullcontext():
        if not built.exists():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            build(folder)
            built.touch()
    return folder
