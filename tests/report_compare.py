"""Reports compared as a user compares two runs of the same command: everything but versions, timings and paths."""
from __future__ import annotations

import re

# Keys whose values legitimately differ between two runs of the same command: versions, timings, paths.
NOT_COMPARED = re.compile(r"(^|_)(versions|checkpoint|path|dir|time|seconds|duration|elapsed)$")


def comparable(value):
    """A report without the keys NOT_COMPARED matches, at any depth."""
    if isinstance(value, dict):
        return {k: comparable(v) for k, v in value.items() if not NOT_COMPARED.search(k)}
    if isinstance(value, list):
        return [comparable(v) for v in value]
    return value
