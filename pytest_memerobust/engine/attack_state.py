"""What an engine's attacks need and leave: the true labels and training memes they query with, the detector they
are crafted on, what they fitted (the attack memo: a UAP's pattern, a universal trigger), their context (built
once: the detector, labels and clean features they query) and the per-meme records of those that keep one, from
the engine's own pass or from its shard-major pass."""
from __future__ import annotations

import numpy as np


class AttackState:
    """`labels` and `training` (a callable giving the training memes) serve the attacks that query the detector,
    `cache_dir` those that keep files; `memo` is shared with the engine that fitted it; `source`: another detector
    the attacks are crafted on (their pictures and captions then reach this engine's: transfer between
    detectors)."""

    def __init__(self, labels: np.ndarray | None = None, training=None, cache_dir=None, memo: dict | None = None,
                 source=None):
        self.labels, self.training, self.cache_dir, self.source = labels, training, cache_dir, source
        self.memo = {} if memo is None else memo
        self.context = None  # perturb.attacks.AttackContext, built by the engine when an attack first asks
        self.sharded_records: dict[tuple, dict[int, dict]] = {}  # side -> per-meme records, from the shard pass

    def records(self) -> dict[tuple, dict[int, dict]]:
        """Per-meme records of the attacks run in this engine that keep them (("image" or "text", name, severity)
        -> {meme row: record})."""
        if self.context is None:
            return {}
        return {side: dict(table) for side, table in self.context.outcomes.items()
                if isinstance(side, tuple) and side[:1] in (("image",), ("text",))}

    def records_of(self, side: tuple) -> dict[int, dict] | None:
        """The per-meme records of one attack side: the shard-major pass's, else this engine's own."""
        return self.sharded_records.get(side) or self.records().get(side)

    def take_records(self, records: dict[tuple, dict[int, dict]]) -> None:
        """Keep the per-meme records a shard-major pass put together."""
        for side, table in records.items():
            self.sharded_records.setdefault(side, {}).update(table)

    def adopt_memo(self, memo: dict) -> None:
        """What an engine over the same memes fitted in another process; what this one fitted itself stays."""
        for key, fitted in memo.items():
            self.memo.setdefault(key, fitted)
