"""A local pool worker's first steps (engine/executors.py LocalPool): it ties its life to its driver's before it
imports anything heavy, so a driver killed outright (SIGKILL, the kernel's OOM killer) while its workers start, load
the detector or evaluate leaves none behind.

The driver's process id comes as an argument, not from os.getppid() read later: a driver that died while this
process started has already handed it to another parent. On Linux the kernel also sends SIGKILL when the driver's
thread that started this process ends (prctl PR_SET_PDEATHSIG): LocalPool starts its workers from a thread of their
own that lives until the pool closes. A thread polling the parent's id is the portable fallback.

This module imports the standard library only (the package's __init__ runs before it: numpy, never torch;
tests/test_pool_kill.py checks), so the driver watch is up before torch's import, which takes seconds.
"""
from __future__ import annotations

import os
import signal
import sys
import threading
import time

DRIVER_WATCH_S = 1.0  # how often a worker checks that its driver is alive
PR_SET_PDEATHSIG = 1  # linux/prctl.h

progress = None  # the queue this worker reports (memes done) on, for the driver's bar
born = time.monotonic()  # when this process was spawned (set again, from the kernel's start time, by `start`)


def start(driver: int, die_with_starter: bool, progress_queue) -> None:
    """A pool worker's initializer: end with the driver (at once if it is gone already), leave Ctrl-C to it (a
    terminal sends it to the whole process group; the driver ends the run as interrupted and closes the pool), then
    torch at determinism.RESULT_THREADS threads: the cores are the other workers'."""
    global progress, born
    if die_with_starter:
        parent_death_signal()
    if os.getppid() != driver:  # the driver died before the signal was set: nobody will ever send work
        os._exit(1)
    threading.Thread(target=end_with_the_driver, args=(driver,), name="memerobust-driver-watch", daemon=True).start()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    progress, born = progress_queue, time.monotonic() - age()
    import torch

    from ..determinism import RESULT_THREADS

    torch.set_num_threads(RESULT_THREADS)


def parent_death_signal() -> bool:
    """Ask Linux for SIGKILL when the thread that started this process ends; False where there is no prctl."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    try:
        return ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def end_with_the_driver(driver: int) -> None:
    """End this worker once its driver is gone without closing the pool: else it waits for ever on the task queue,
    whose writing end every worker holds too, so the read never sees the end of it."""
    while os.getppid() == driver:
        time.sleep(DRIVER_WATCH_S)
    os._exit(1)


def age() -> float:
    """Seconds since this process was spawned, from the kernel's start time (its interpreter's start and the imports
    before `start` included, which LocalPool's start cost must count); 0 where there is no /proc."""
    try:
        with open("/proc/self/stat") as stat, open("/proc/uptime") as uptime:
            ticks = int(stat.read().rsplit(")", 1)[1].split()[19])  # field 22: start time, clock ticks after boot
            return max(0.0, float(uptime.read().split()[0]) - ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return 0.0
