"""Where a pytest run keeps its RobustnessSession: one key in `config.stash`, below the plugin.

`plugin.pytest_configure` starts the session (`start_session`) of a run that names a --memerobust-* option; a run
that names none has no session until something asks for it (the memerobust fixtures, a suite file in its test
paths), so that an unrelated pytest run imports none of the library. The face's other modules (collect.py,
items.py, terminal.py) read it with `session_of(config)`, so none of them imports the plugin, and nothing below the
face needs pytest's config at all: the face passes the session down.
"""
from __future__ import annotations

import pytest

SESSION_KEY = pytest.StashKey["object"]()
DISABLED_HINT = "memerobust: robustness suites are skipped; run them with --memerobust-model=NAME (try: demo)"


def start_session(config):
    """Build the run's RobustnessSession from its options and keep it under SESSION_KEY; a MemeRobustError when the
    options are refused. A run that tests a model or replays a manifest sets idle OpenMP threads to sleep first,
    before any of its code imports torch (openmp.py)."""
    from .openmp import sleep_idle_threads
    from .option_table import run_options
    from .options import uncached_note
    from .run.session import RobustnessSession

    options = run_options(config)
    if options.models or options.probes.replay is not None:
        sleep_idle_threads()
    session = RobustnessSession(options).start()  # a bad baseline or cluster fails now, before any case
    for note in filter(None, [uncached_note(options)]):  # -p no:cacheprovider: what that turns off
        session.notes.add(note)
    config.stash[SESSION_KEY] = session
    return session


def session_of(config):
    """The run's RobustnessSession, started now if the run had none (it names no --memerobust-* option)."""
    session = config.stash.get(SESSION_KEY, None)
    return session if session is not None else start_session(config)
