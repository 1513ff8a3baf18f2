"""A run killed outright (SIGKILL: the kernel's OOM killer while the workers load the detector, a CI runner's hard
timeout) at any moment of its local pool's life leaves no process behind: not its workers, not multiprocessing's
resource tracker (engine/pool_worker.py). Before, a worker read its parent's id after importing torch, so a driver
killed during that import left both workers and the tracker alive for good.

The kill moments count from the first worker's spawn: a kill before the pool starts has nothing to leave. At 1 s the
workers are starting (the interpreter, the package, torch), at 4 s building the engine (the demo memes drawn) or
evaluating, at 10 s one holds a shard (executors.hold_for_tests). The demo detector runs (the point is the processes,
not a detector): its workers import torch at their start as any do, without loading BLIP-2 after it."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pytest_memerobust.engine import executors

MODEL = "demo"


def _alive(pid: int) -> tuple[bool, int]:
    """(whether process `pid` runs: not ended, nor a zombie; its session id), from /proc/PID/stat."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return False, 0
    return fields[0] not in "ZX", int(fields[3])


def _parent(pid: int) -> int:
    """The parent of process `pid` (0 once it has ended)."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except OSError:
        return 0


def _in_session(sid: int) -> dict[int, str]:
    """The live processes of session `sid` (a run started with start_new_session and every process it started):
    pid -> command line."""
    found = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and _alive(int(entry.name)) == (True, sid):
            try:
                found[int(entry.name)] = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                pass
    return found


def _watch(sid: int, seen: dict[int, str], parents: dict[int, int]) -> None:
    """The live processes of session `sid` added to `seen`, and their parents to `parents` (when first seen)."""
    for pid, line in _in_session(sid).items():
        seen[pid] = line
        parents.setdefault(pid, _parent(pid))


@pytest.mark.parametrize("after_s", [1, 4, 10])
def test_a_run_killed_outright_leaves_no_process_behind(tmp_path, monkeypatch, after_s):
    hold = tmp_path / "hold"
    hold.mkdir()
    (hold / "hold-0").touch()  # the worker that evaluates shard 0 keeps it: the run is still going at 10 s
    monkeypatch.setenv(executors.HOLD_ENV, str(hold))
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    (tmp_path / "conftest.py").write_text("from pytest_memerobust.engine import executors\n"
                                          "executors.POOL_START_S = 0  # this small pass runs on the pool\n")
    # 16 memes in shards of 8: two shards, a worker for each; one case
    run = subprocess.Popen([sys.executable, "-m", "pytest", f"--memerobust-model={MODEL}", "--memerobust-limit=16",
                            "--memerobust-batch-size=8", "--memerobust-workers=2", "--memerobust-device=cpu", "-p",
                            "no:cacheprovider", "-q", "-k", "rainbow and typos-1"], cwd=tmp_path,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    seen: dict[int, str] = {}
    parents: dict[int, int] = {}  # each process seen -> its parent when first seen
    try:
        deadline = time.monotonic() + 240
        while not any("spawn_main" in line for line in seen.values()) and time.monotonic() < deadline:
            assert run.poll() is None, "the run ended before its pool started"
            _watch(run.pid, seen, parents)
            time.sleep(0.02)
        kill_at = time.monotonic() + after_s
        while time.monotonic() < kill_at:
            _watch(run.pid, seen, parents)
            time.sleep(0.05)
        assert run.poll() is None  # held: the run is still going
        _watch(run.pid, seen, parents)
        run.kill()
        run.wait(timeout=30)
        deadline = time.monotonic() + 15
        while _in_session(run.pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        left = _in_session(run.pid)
    finally:
        (hold / "hold-0").unlink(missing_ok=True)
        for pid in _in_session(run.pid):  # what this test started and the fix did not end
            os.kill(pid, signal.SIGKILL)
    # the pool's workers are the run's own children; a worker's fork about to run another program (a subprocess it
    # starts, e.g. a font lookup) carries the same command line for a moment, and is not one
    workers = [pid for pid, line in seen.items() if "spawn_main" in line and parents.get(pid) == run.pid]
    assert len(workers) == 2 and any("resource_tracker" in line for line in seen.values()), seen
    assert left == {}, left


def test_the_worker_module_imports_no_torch():
    """The pool's initializer is unpickled, so its module imported, before it runs: torch there would delay the
    driver watch by seconds."""
    probe = subprocess.run([sys.executable, "-c", "import sys; import pytest_memerobust.engine.pool_worker; "
                            "print(sorted(m for m in ('torch', 'torchvision', 'transformers') if m in sys.modules))"],
                           capture_output=True, text=True, timeout=120)
    assert probe.stdout.strip() == "[]", probe.stderr[-2000:]
