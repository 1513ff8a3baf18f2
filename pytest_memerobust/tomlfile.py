"""Reading the project's small TOML files (model cards, suites) with one error path that names the file."""
from __future__ import annotations

import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


def read_toml(path: Path, what: str, error: type[Exception]) -> dict:
    """The parsed file, or `error("cannot read {what} {path}: ...")` for a missing, non-UTF-8 or invalid file."""
    try:
        return tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise error(f"cannot read {what} {path}: no such file") from None
    except IsADirectoryError:
        raise error(f"cannot read {what} {path}: it is a folder") from None
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise error(f"cannot read {what} {path}: {exc}") from None
