"""Where a pytest run keeps its RobustnessSession: one key in `config.stash`, below the plugin.

`plugin.pytest_configure` stores the session under SESSION_KEY; collectors and items (items.py, replay.py) read it
with `session_of(config)`, so nothing below the plugin imports the plugin.
"""
from __future__ import annotations

import pytest

SESSION_KEY = pytest.StashKey["object"]()
DISABLED_HINT = "memerobust: robustness suites are skipped; run them with --memerobust-model=NAME (try: demo)"


def session_of(config):
    """The run's RobustnessSession (plugin.pytest_configure put it there)."""
    return config.stash[SESSION_KEY]
