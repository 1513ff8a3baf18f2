"""The checks a training run's data passes before anything is encoded: the task both splits share, the classes
present, validation held out."""
from __future__ import annotations

import numpy as np

from ...data.loaders import GENERIC_TASK
from ...data.meme import Dataset
from ...errors import DataError


def training_task(wanted: str, train: Dataset, val: Dataset, explicit: bool = False) -> str:
    """The task to train: `wanted` (the card's, or --task) where both splits have it; else, unless it was asked for
    explicitly, a generic csv/jsonl file's one label column (task `label`), which then serves the card's task.
    Anything else is an error that lists the tasks there are."""
    if wanted in train.classes and wanted in val.classes:
        return wanted
    if not explicit and set(train.classes) == set(val.classes) == {GENERIC_TASK}:
        return GENERIC_TASK
    for split in (train, val):
        if wanted not in split.classes:
            raise DataError(f"{split.name}: no task {wanted!r}; its tasks: {', '.join(split.classes) or '(none)'} "
                            f"(pass --task)")
    raise DataError(f"the splits share no task {wanted!r}")


def check_training_data(train: Dataset, val: Dataset, task: str, classes) -> None:
    """Before any encoding: the task's classes match the card's, every class is in the training split, the
    validation split holds at least two classes (or its AUROC, which picks the epoch, is undefined), and no meme id
    is in both splits."""
    for split in (train, val):
        names = list(split.classes[task])
        if len(names) != len(classes):
            raise DataError(f"{split.name}: task {task!r} has {len(names)} classes ({', '.join(map(str, names))}); "
                            f"the card has {len(classes)} ({', '.join(classes)})")
    multilabel = task in train.multilabel
    for split, need in ((train, len(classes)), (val, 2)):
        labelled = split.labelled(task)
        if not len(labelled):
            raise DataError(f"{split.name}: no meme has a label for task {task!r}")
        y = labelled.labels(task)
        present = sorted(set(np.flatnonzero(y.any(axis=0)).tolist())) if multilabel else sorted(set(y.tolist()))
        if len(present) < need:
            counts = ", ".join(f"{classes[c]}: {int((y[:, c] if multilabel else y == c).sum())}"
                               for c in range(len(classes)))
            role = "every class is needed to train" if split is train else "AUROC, which picks the epoch, needs two"
            raise DataError(f"{split.name}: task {task!r} has {len(present)} class(es) present ({counts}); {role}")
    shared = {m.id for m in train.memes} & {m.id for m in val.memes}
    if shared:
        raise DataError(f"{len(shared)} memes are in both {train.name} and {val.name} "
                        f"(e.g. {', '.join(sorted(shared)[:3])}): validation must be held out")
