"""The engine's progress bars: long encodes and shard-major passes show one on the user's terminal."""
from __future__ import annotations

import sys

PROGRESS_MIN_INPUTS = 2048  # encodes this long show a progress bar on a terminal

_progress_stream = None  # where bars go (None: standard error); see `show_progress_on`


def show_progress_on(stream) -> None:
    """Send progress bars to `stream` (a file-like with write, flush and isatty): the pytest face passes one that
    writes to the user's terminal past pytest's capture, which otherwise swallows them (a bar drawn to a captured
    stderr is not a terminal, so tqdm stays silent). None: standard error again."""
    global _progress_stream
    _progress_stream = stream


def progress_bar(total: int, description: str, unit: str = "input"):
    """A transient bar on the terminal, silent when its stream is not one (a CI log, a pytest-xdist worker)."""
    from tqdm import tqdm

    stream = _progress_stream if _progress_stream is not None else sys.__stderr__
    return tqdm(total=total, desc=description, unit=unit, leave=False, disable=None, file=stream,
                mininterval=0.5)
