"""Idle OpenMP threads sleep instead of spinning, in a process that runs memerobust.

The engine perturbs on a background thread while the main thread encodes; spinning OpenMP pools of the two (and of
pytest-xdist's or the local pool's worker processes) steal each other's cores: docs/benchmarks.md has the project's
tests with `-n 2` on 2 cores at 105 s spinning and 40 s sleeping. OpenMP reads the policy once, when torch loads it,
so `sleep_idle_threads` is called where a run starts, before torch is imported: plugin.pytest_configure for a run
that tests a model or replays a manifest, the `memerobust` command, the package's public names, and the import of
the two packages a library user starts from (detectors/, engine/), which load torch. Never at the plugin's import:
a pytest run that does not use memerobust keeps its process environment as it was. A value the user set is kept.
"""
from __future__ import annotations

import os


def sleep_idle_threads() -> None:
    """OMP_WAIT_POLICY=PASSIVE for this process and the processes it starts, unless the user set a policy."""
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
