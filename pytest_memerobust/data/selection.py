"""Which memes of a split a run evaluates: its first N (`--memerobust-limit`) or a seeded sample of N stratified by
label (`--memerobust-sample`).

Why: a file sorted by label gives its first N memes one class, and AUROC, macro-F1 and the gate then judge nothing.
The sample keeps each class's share of the split, and each meme's place in it is a hash of (seed, meme id): the same
memes on every machine and worker count, and whatever the file's row order.
"""
from __future__ import annotations

import hashlib
from collections import defaultdict
from dataclasses import replace
from typing import Sequence

from ..errors import ConfigError
from .meme import Dataset, Meme

SAMPLE_OPTION = "--memerobust-sample"


class SelectionWarning(UserWarning):
    """The memes a run evaluates misrepresent its split (the first N hold one class of several)."""


def strata_tasks(dataset: Dataset, tasks: Sequence[str]) -> tuple[str, ...]:
    """The label tasks memes are stratified by: those of `tasks` the dataset has, else all of its tasks."""
    return tuple(t for t in dict.fromkeys(tasks) if t in dataset.classes) or tuple(sorted(dataset.classes))


def _stratum(meme: Meme, tasks: Sequence[str]) -> tuple:
    """A meme's labels for `tasks` (None where it has none; a multi-label task's vector as a tuple)."""
    def label(value):
        return tuple(int(v) for v in value) if isinstance(value, (list, tuple)) else value

    return tuple(label(meme.labels.get(task)) for task in tasks)


def _key(seed: int, meme_id: str) -> bytes:
    """A meme's place in the sample's draw: a function of the seed and its id alone."""
    return hashlib.blake2b(f"sample\0{seed}\0{meme_id}".encode("utf-8", "surrogatepass"), digest_size=16).digest()


def quotas(sizes: Sequence[int], n: int) -> list[int]:
    """How many of `n` memes each stratum of `sizes` gives: its share of n rounded by largest remainder, at least one
    from each stratum while n allows (so a sample of a two-class split holds both classes)."""
    total, floor = sum(sizes), int(n >= len(sizes))
    out = [min(size, max(floor, n * size // total)) for size in sizes]

    def remainder(i: int) -> int:  # n * size / total - out[i], times total: exact
        return n * sizes[i] - out[i] * total

    while sum(out) < n:
        i = max((i for i in range(len(sizes)) if out[i] < sizes[i]), key=lambda i: (remainder(i), -i))
        out[i] += 1
    while sum(out) > n:
        i = min((i for i in range(len(sizes)) if out[i] > floor), key=lambda i: (remainder(i), i))
        out[i] -= 1
    return out


def stratified_sample(dataset: Dataset, n: int, seed: int, tasks: Sequence[str], spec: str) -> Dataset:
    """`n` memes of `dataset`, stratified by their labels for `tasks` (strata_tasks), in the file's order. Within a
    stratum the memes whose (seed, id) hash is lowest are taken. More memes than the split holds is a ConfigError
    naming the option."""
    if n > len(dataset.memes):
        raise ConfigError(f"{SAMPLE_OPTION}={n}: {spec} holds {len(dataset.memes)} memes, fewer than the sample asks "
                          f"for; sample at most {len(dataset.memes)}, or leave the option out to evaluate every meme")
    by = strata_tasks(dataset, tasks)
    strata: dict[tuple, list[Meme]] = defaultdict(list)
    for meme in dataset.memes:
        strata[_stratum(meme, by)].append(meme)
    order = sorted(strata, key=repr)  # a fixed order of strata, for the quotas' ties
    chosen = set()
    for stratum, quota in zip(order, quotas([len(strata[s]) for s in order], n)):
        chosen.update(m.id for m in sorted(strata[stratum], key=lambda m: _key(seed, m.id))[:quota])
    return replace(dataset, memes=[m for m in dataset.memes if m.id in chosen])


def one_class_head(dataset: Dataset, limit: int | None, tasks: Sequence[str], spec: str) -> str | None:
    """What to warn of when the first `limit` memes hold one class of a task whose split holds several (a file
    sorted by label), naming the option that samples instead; None otherwise."""
    if limit is None or limit >= len(dataset.memes):
        return None
    head = dataset.memes[:limit]
    for task in strata_tasks(dataset, tasks):
        present = {_stratum(m, (task,)) for m in dataset.memes if task in m.labels}
        first = {_stratum(m, (task,)) for m in head if task in m.labels}
        if len(present) > 1 and len(first) == 1:
            (label,) = first
            shown = dataset.classes[task][label[0]] if isinstance(label[0], int) else label[0]
            return (f"--memerobust-limit={limit}: the first {limit} memes of {spec} hold one class of task {task!r} "
                    f"({shown}) while the split holds {len(present)}, so the metrics that compare classes (AUROC, "
                    f"macro-F1) judge nothing; {SAMPLE_OPTION}={limit} evaluates {limit} memes stratified by label")
    return None
