"""What the subcommands share: the switches and defaults several take, the OCR reader they build, the progress a
long command shows, and how a command stops (SIGINT, SIGTERM, a closed pipe) with the shell's exit statuses."""
from __future__ import annotations

import math
import sys
from contextlib import contextmanager
from pathlib import Path

OUTSIDE_PATHS = "--allow-outside-paths"  # the switch of the commands that read datasets (train, export, budgets, preview)
OCR_OPTION = "--ocr rapidocr"  # how train, budgets and preview ask for captions read off the pictures
CACHE_DIR = str(Path(".pytest_cache") / "d" / "memerobust")  # the plugin's cache folder, the commands' default

# Exit statuses of a stopped command, the shell's 128 + signal: SIGINT (Ctrl-C), SIGTERM (a CI job cancelled, `kill`),
# SIGPIPE (the reader of its output left)
INTERRUPTED, TERMINATED, PIPE_CLOSED = 130, 143, 141


def ocr_reader(args):
    """The OCR backend a command's --ocr names (None without it), caching its readings where the command caches:
    memes without a caption are read as a pytest run reads them (data/reading.py)."""
    if not getattr(args, "ocr", None):
        return None
    from ..data.ocr import ocr_backend

    cache = None if getattr(args, "no_cache", False) else getattr(args, "cache_dir", None)
    return ocr_backend(args.ocr, cache, getattr(args, "device", None) or "cpu")


def check_output_json(path: Path, option: str, reads=()) -> Path:
    """Before any work: `path` is a .json file the command can write (in a folder that exists, not a folder) and
    not one of the files it `reads`; a ConfigError naming `option` otherwise."""
    import argparse

    from ..errors import ConfigError
    from ..options import output_json_path

    try:
        path = output_json_path(str(path))
    except argparse.ArgumentTypeError as exc:
        raise ConfigError(f"{option} {path}: {exc}") from None
    if path.exists() and any(Path(p).exists() and path.samefile(p) for p in reads):
        raise ConfigError(f"{option} {path} is a file this command reads: name another file")
    return path


class Progress:
    """What `train` shows while it encodes and trains, on standard error: on a terminal a bar per stage (tqdm);
    elsewhere (a CI log, a file) a plain line each time a stage is another EVERY percent further, so a log gets a
    few lines, not a stream of carriage returns. One stage at a time: a new description ends the last one."""

    EVERY = 10  # percent between two plain lines

    def __init__(self, stream=None, disabled: bool = False):
        self.stream, self.disabled = stream if stream is not None else sys.stderr, disabled
        self.terminal = not disabled and callable(getattr(self.stream, "isatty", None)) and self.stream.isatty()
        self.stage, self.done, self.shown, self.bar = None, 0, -1, None

    def advance(self, stage: str, n: int, total: int, unit: str = "input", at: int | None = None, **postfix) -> None:
        """`n` more of `total` done in `stage` (or `at`: that many done in all), with `postfix` figures."""
        if self.disabled:
            return
        if stage != self.stage:
            self.close()
            self.stage, self.done, self.shown = stage, 0, -1
            if self.terminal:
                from tqdm import tqdm

                self.bar = tqdm(total=total, desc=stage, unit=unit, file=self.stream, mininterval=0.5)
        step = (at - self.done) if at is not None else n
        self.done += step
        if self.bar is not None:
            self.bar.update(step)
            if postfix:
                self.bar.set_postfix(postfix)
            return
        percent = 100 * self.done // max(total, 1)
        if percent // self.EVERY > self.shown:  # the first batch, then each further EVERY percent
            self.shown = percent // self.EVERY
            figures = "".join(f", {k} {v}" for k, v in postfix.items())
            print(f"{stage}: {self.done} of {total} {unit}s ({percent}%){figures}", file=self.stream, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        self.bar, self.stage = None, None


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM stopped the command; `code` is the exit status that says which. A KeyboardInterrupt, so
    every `finally` and context manager on the way out runs: an export removes its staging folder."""

    def __init__(self, code: int = INTERRUPTED):
        super().__init__(code)
        self.code = code


@contextmanager
def signals_interrupt():
    """While a command runs, SIGINT and SIGTERM raise Interrupted (main thread only; a handler someone else set is
    kept); the handlers before are put back after."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum, frame):
        raise Interrupted(TERMINATED if signum == signal.SIGTERM else INTERRUPTED)

    before = {}
    for number in (signal.SIGINT, signal.SIGTERM):
        if signal.getsignal(number) in (signal.SIG_DFL, signal.default_int_handler):
            before[number] = signal.signal(number, interrupt)
    try:
        yield
    except KeyboardInterrupt as exc:  # Ctrl-C before the handler was set, or from a library: the same one line
        raise exc if isinstance(exc, Interrupted) else Interrupted() from None
    finally:
        for number, handler in before.items():
            signal.signal(number, handler)


def silence_stdout() -> None:
    """Point standard output at /dev/null, so the interpreter's last flush at exit finds no closed pipe (Python's
    recipe for SIGPIPE)."""
    import os

    try:
        sys.stdout.fileno()
    except (AttributeError, ValueError, OSError):  # not a real file (a test's capture): nothing to flush at exit
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def parsed_rules(args, default=None) -> tuple:
    """(the rules, the error control) asked for with --fail-on and --gate-error, checked with the other numbers
    (confidence, resamples) before any file is read."""
    from ..errors import ConfigError
    from ..judge.gate import DEFAULT_CHECKS, ErrorControl, RegressionCheck, check_resamples

    try:
        checks = tuple(RegressionCheck.parse(s) for s in args.fail_on) if args.fail_on else (default or
                                                                                             DEFAULT_CHECKS)
    except ValueError as exc:
        raise ConfigError(f"--fail-on: {exc}") from None
    try:
        control = ErrorControl.parse(args.gate_error)
    except ValueError as exc:
        raise ConfigError(f"--gate-error: {exc}") from None
    if not 0 < args.confidence < 1:
        raise ConfigError(f"--confidence {args.confidence}: must lie strictly between 0 and 1, e.g. 0.95")
    check_resamples(control, args.resamples, "--resamples")  # too few resamples: a gate that cannot fail
    return checks, control


def strict_json(value):
    """`value` with every NaN or infinity as None (null), so the file is JSON every reader parses."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: strict_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [strict_json(v) for v in value]
    return value
