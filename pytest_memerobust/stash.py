"""Where a pytest run keeps its RobustnessSession: one key in `config.stash`, below the plugin.

`plugin.pytest_configure` stores the session under SESSION_KEY; the face's other modules (collect.py, items.py,
terminal.py) read it with `session_of(config)`, so none of them imports the plugin, and nothing below the face needs
pytest's config at all: the face passes the session down.
"""
from __future__ import annotations

import pytest

SESSION_KEY = pytest.StashKey["object"]()
DISABLED_HINT = "memerobust: robustness suites are skipped; run them with --memerobust-model=NAME (try: demo)"


def session_of(config):
    """The run's RobustnessSession (plugin.pytest_configure put it there)."""
    return config.stash[SESSION_KEY]
