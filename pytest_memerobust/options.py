"""Command-line/ini values turned into typed options; a bad value is a usage error that says what was expected.

pytest imports this module in every run (plugin.py registers the options): the library is imported inside the
converters that need it, only when a --memerobust-* value is given."""
from __future__ import annotations

import argparse
from pathlib import Path


def _integer(text: str, minimum: int, expected: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = minimum - 1
    if value < minimum:
        raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")
    return value


def positive_int(text: str) -> int:
    return _integer(text, 1, "a positive integer")


def sample_size(text: str) -> int:
    """A number of memes to sample, at least 2: a sample of one meme holds one class."""
    return _integer(text, 2, "a number of memes >= 2 (a sample of one meme holds one class)")


def ray_target(text: str) -> str:
    """auto, local:N or a cluster ADDRESS (checked for reachability when the run starts)."""
    from .engine.executors import parse_ray_target
    from .errors import ConfigError

    try:
        parse_ray_target(text)
    except ConfigError as error:
        raise argparse.ArgumentTypeError(str(error).split(": ", 1)[-1]) from None
    return text.strip()


def workers(text: str) -> int | None:
    """auto (None: the usable cores) or a number of worker processes >= 1."""
    if text.strip() == "auto":
        return None
    return _integer(text, 1, "auto or a number of worker processes >= 1")


def seed(text: str) -> int:
    return _integer(text, 0, "a non-negative integer seed")


def confidence(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"expected a confidence level in (0, 1) such as 0.95, got {text!r}")
    return value


def report_path(text: str) -> Path:
    from .report import REPORT_SUFFIXES

    path = Path(text)
    if path.suffix not in REPORT_SUFFIXES:
        raise argparse.ArgumentTypeError(f"report {text!r}: expected a file ending in {' or '.join(REPORT_SUFFIXES)}")
    return writable_file(path, "report")


def writable_file(path: Path, what: str) -> Path:
    """A file the run can write at its end, checked at its start: not a folder, in a folder that exists and that
    this user may write (found only after the whole run, a bad path lost the tables)."""
    import os

    path = path.expanduser()
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{what} {str(path)!r} is a folder; name a file in it")
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        raise argparse.ArgumentTypeError(f"{what} {str(path)!r}: folder {str(folder)!r} does not exist")
    if not os.access(folder, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise argparse.ArgumentTypeError(f"{what} {str(path)!r}: not writable by this user")
    return path


def robustness_scale(text: str) -> str:
    from .judge.metrics import ROBUSTNESS_SCALES

    if text not in ROBUSTNESS_SCALES:
        raise argparse.ArgumentTypeError(f"expected one of {ROBUSTNESS_SCALES}, got {text!r}")
    return text


def device(text: str) -> str:
    if text in ("auto", "cpu", "cuda", "mps") or text.startswith("cuda:"):
        return text
    raise argparse.ArgumentTypeError(f"expected auto, cpu, cuda, cuda:N or mps, got {text!r}")


def checkpoints(values: list[str]) -> dict[str, str]:
    """`PATH` (for every model) or `MODEL=PATH`, repeatable."""
    out = {}
    for value in values:
        model, sep, path = value.partition("=")
        out["" if not sep else model] = path if sep else value
    return out


def regression_check(text: str):
    """`rel_acc:1%` -> a RegressionCheck (see gate.py)."""
    from .judge.gate import RegressionCheck

    try:
        return RegressionCheck.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


DEFAULT = "default"  # an option given without its value (`--memerobust-mlflow`): the default place, said later


def history_path(text: str) -> Path | str:
    """A run history is a .jsonl file the run appends to; DEFAULT stays DEFAULT until the cache dir is known."""
    if text == DEFAULT:
        return DEFAULT
    if not text.endswith(".jsonl"):
        raise argparse.ArgumentTypeError(f"expected a .jsonl file, got {text!r}")
    return writable_file(Path(text), "history")


def json_path(text: str) -> Path:
    if not text.endswith(".json"):
        raise argparse.ArgumentTypeError(f"expected a .json file, got {text!r}")
    return Path(text)


def output_json_path(text: str) -> Path:
    """A .json file the run writes at its end, checked at its start."""
    return writable_file(json_path(text), "output")


PRECISIONS = ("auto", "fp32", "bf16")


def precision(text: str) -> str:
    if text not in PRECISIONS:
        raise argparse.ArgumentTypeError(f"expected one of {', '.join(PRECISIONS)}, got {text!r}")
    return text


def flag(text: str) -> bool:
    """An on/off option's ini value (on the command line the flag alone means on)."""
    value = str(text).strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off", ""):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def export_folder(text: str) -> Path:
    """A new or empty folder for --memerobust-export, and the `datasets` package to write it, checked at the start."""
    from .track.export import ExportError, check_out, require_datasets

    try:
        require_datasets()
        return check_out(Path(text), option="")
    except ExportError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def check_writable_folder(path: Path, what: str, fix: str = "name a folder this run may write") -> None:
    """A folder the run writes into (created when missing), proved writable by writing: a file created there and
    removed. A permission bit says nothing of a read-only filesystem, of a path under a file, or to root; found only
    when the first case wrote, each case failed on its own (with -n 2 after minutes of work). A ConfigError naming
    `what` otherwise."""
    import tempfile

    from .errors import ConfigError

    try:
        Path(path).mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".write-probe-"):
            pass
    except OSError as exc:
        raise ConfigError(f"{what} {str(path)!r} cannot be written ({type(exc).__name__}: "
                          f"{exc.strerror or exc}): {fix}") from None


def directory(text: str) -> Path:
    path = Path(text).expanduser()
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} is a file, not a folder: name a folder (it is created if missing)")
    return path


def ocr(text: str) -> str:
    from .data.ocr import OCR_BACKENDS

    if text not in OCR_BACKENDS:
        raise argparse.ArgumentTypeError(f"expected an OCR backend ({', '.join(OCR_BACKENDS)}), got {text!r}")
    return text


def captions(text: str) -> str:
    if text not in ("dataset", "ocr"):
        raise argparse.ArgumentTypeError(f"expected dataset or ocr, got {text!r}")
    return text


def gate(text: str) -> str:
    from .judge.gate import GATES

    if text not in GATES:
        raise argparse.ArgumentTypeError(f"expected one of {', '.join(GATES)}, got {text!r}")
    return text


def gate_error(text: str):
    """`fwer`, `fwer:0.01`, `fdr:10%`, `holm` or `none` -> a gate.ErrorControl."""
    from .judge.gate import ErrorControl

    try:
        return ErrorControl.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def gate_method(text: str) -> str:
    """How the gate resamples for its decision: auto, bootstrap or permutation (judge.gate.METHODS)."""
    from .judge.gate import METHODS

    if text not in METHODS:
        raise argparse.ArgumentTypeError(f"expected one of {', '.join(METHODS)}, got {text!r}")
    return text


TABLES = ("summary", "full", "none")


def tables(text: str) -> str:
    if text not in TABLES:
        raise argparse.ArgumentTypeError(f"expected one of {', '.join(TABLES)}, got {text!r}")
    return text


def uncached_note(options) -> str | None:
    """The one line a run without a cache dir (pytest's cache provider off, `-p no:cacheprovider`, and no
    --memerobust-cache-dir) says in its notes: what it keeps for this run only or does not write, instead of
    silently; None for a run with one (or no model). `options`: the run's session.Options."""
    if options.compute.cache.folder is not None or not options.models:
        return None
    kept = ["encoded features"] * bool(options.compute.cache.features) + ["fitted attacks"]
    lost = [*(["the failing cases' counterexamples"] if options.outputs.counterexamples is None else []),
            *(["the flip ledger"] if options.judging.baseline.path is not None and not options.outputs.reports else [])]
    said = f"{' and '.join(kept)} are kept in memory for this run only" + (
        f"; not written: {' and '.join(lost)}" if lost else "")
    return (f"no cache dir: pytest's cache provider is off (-p no:cacheprovider) and no --memerobust-cache-dir is "
            f"given, so {said} (--memerobust-cache-dir=DIR keeps them)")
