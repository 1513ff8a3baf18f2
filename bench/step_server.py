"""Runs `bench/gpu.sh --dry-run`'s Python steps in forks of one process that has imported torch, transformers and the
test suite's heavy modules once: on a 2-core machine those imports take most of a step (about 7 s each), so each
step then costs its own work and the whole dry run fits in a minute.

    python bench/step_server.py OUT < FIFO

Reads step names, one a line, from stdin. For each, `OUT/NAME.argv` holds the cap in seconds, then the arguments a
`python` command line would have had (a script and its arguments, `-m module ...` or `-c code ...`), NUL-separated.
The step runs in a forked child, in a session of its own, as that command line would, its output in `OUT/NAME.log`;
at the cap its whole process group is killed. `OUT/NAME.status` is then written as gpu.sh's `capped` writes it:
exit status (124 when cut), cap, seconds.
"""
from __future__ import annotations

import importlib
import os
import runpy
import signal
import sys
import time
from pathlib import Path


def run(argv: list[str]) -> int:
    """`python ARGV...` in this process: its exit status."""
    try:
        if argv[0] == "-m":
            sys.argv, sys.path[0] = [argv[1], *argv[2:]], os.getcwd()
            runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        elif argv[0] == "-c":
            sys.argv, sys.path[0] = ["-c", *argv[2:]], ""
            exec(compile(argv[1], "<string>", "exec"), {"__name__": "__main__"})
        else:
            sys.argv = list(argv)
            sys.path[0] = str(Path(argv[0]).resolve().parent)
            runpy.run_path(argv[0], run_name="__main__")
    except SystemExit as done:
        return done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
    return 0


def start(out: Path, name: str) -> None:
    """Fork the step `name`; the child reports its own status and never returns."""
    if os.fork():
        return
    os.setsid()
    began = time.monotonic()
    cap, *argv = (out / f"{name}.argv").read_bytes().decode().rstrip("\0").split("\0")

    def finish(status: int) -> None:
        (out / f"{name}.status").write_text(f"{status} {cap} {round(time.monotonic() - began)}\n")

    def cut(*_) -> None:
        finish(124)
        os.killpg(0, signal.SIGKILL)

    signal.signal(signal.SIGALRM, cut)
    signal.alarm(int(cap))
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)  # stdin is the server's list of steps
    log = os.open(out / f"{name}.log", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    status = 1
    try:
        status = run(argv)
    except BaseException:  # a step's traceback goes to its log, as `python` would print it
        import traceback

        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        signal.alarm(0)
        finish(status)
        os._exit(status)


def main() -> None:
    out = Path(sys.argv[1])
    # what most steps import (the test suite's conftest imports these models too); nothing runs on torch here, so
    # no thread pool exists to be copied into the forks. A module missing here is only imported by the step itself.
    for module in ("torch", "pytest", "matplotlib.figure", "transformers.models.clip.modeling_clip",
                   "transformers.models.qwen2_vl.modeling_qwen2_vl", "pytest_memerobust.detectors.meme_models"):
        try:
            importlib.import_module(module)
        except ImportError:
            pass
    for line in iter(sys.stdin.readline, ""):
        if line.strip():
            start(out, line.strip())
    while True:  # every step has reported; collect the children
        try:
            os.wait()
        except ChildProcessError:
            break


if __name__ == "__main__":
    main()
