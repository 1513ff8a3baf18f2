"""Fit the trainable head of a split detector on frozen features, choosing the epoch by validation AUROC.

The backbones are frozen, so every caption and picture is encoded once before the first epoch, through the same
feature store as the test runs (keyed by the backbone, not the head): a second head trained on the same backbone and
data, or a test run of it, reads those features from the cache instead of encoding them again. With a
`state_path`, the loop saves its full state (head, optimiser, random generators, history, best weights) after each
epoch and resumes from it, so an interrupted run continues where it stopped and ends with the same weights.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np

from ..atomic import atomic_path, atomic_write_text
from ..data.loaders import GENERIC_TASK
from ..data.meme import Dataset, is_multilabel
from ..errors import DataError
from ..engine.features import FeatureStore, detector_feature_store
from .checkpoints import save_state_dict
from .base import class_probabilities, classification_loss
from ..judge.metrics import METRICS, auroc


@dataclass
class TrainingResult:
    best_epoch: int
    best_val_auroc: float
    history: list[dict] = field(default_factory=list)
    resumed_from_epoch: int = 0
    feature_cache: dict = field(default_factory=dict)  # the one-off encoding: inputs encoded, from memory, from disk




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


ENCODE_BATCH_SIZE = 64  # inputs per encoder call in the one-off encoding (the test runs' default batch)


def _features(detector, dataset: Dataset, store: FeatureStore, encoding=None):
    """`encoding(what, n, total)` after each batch encoded (`what`: e.g. `demo:train captions`); inputs read
    from the cache are not encoded, and not counted."""
    import torch

    def tick(what: str):
        return None if encoding is None else lambda n, total: encoding(f"{dataset.name} {what}", n, total)

    if callable(getattr(detector, "encode_pairs", None)):  # a prompted model's probe: picture and caption read together
        return _pair_features(detector, dataset, tick("memes")), torch.zeros((len(dataset), 0))

    needs_images = "image" in getattr(detector, "modalities", ("image", "text"))
    images = (store.features("image", [m.image for m in dataset.memes], detector.encode_images, ENCODE_BATCH_SIZE,
                             tick("pictures"))
              if needs_images else np.zeros((len(dataset), 0), dtype=np.float32))
    texts = store.features("text", [m.text for m in dataset.memes], detector.encode_texts, ENCODE_BATCH_SIZE,
                           tick("captions"))
    return torch.as_tensor(images), torch.as_tensor(texts)


def _pair_features(detector, dataset: Dataset, progress=None):
    """A probe's features (the model's hidden state after the prompt, one per meme), encoded in memory: they depend
    on the prompt as well as the model, which the backbone-keyed feature cache does not tell apart."""
    import torch

    memes, chunks = dataset.memes, []
    for i in range(0, len(memes), ENCODE_BATCH_SIZE):
        batch = memes[i : i + ENCODE_BATCH_SIZE]
        chunks.append(detector.encode_pairs([m.picture(detector.device) for m in batch], [m.text for m in batch]))
        if progress is not None:
            progress(len(batch), len(memes))
    return torch.cat(chunks).clone()  # out of inference mode: the head's training reads them with autograd on


def _save_state(path: Path, state: dict) -> None:
    import torch

    with atomic_path(path) as tmp:
        torch.save(state, tmp)


def train_head(detector, train: Dataset, val: Dataset, task: str = "hate", epochs: int = 10, lr: float = 1e-4,
               weight_decay: float = 1e-4, batch_size: int = 16, seed: int = 0, progress=None,
               state_path: Path | None = None, on_encoded=None, cache_dir: Path | None = None,
               encoding=None) -> TrainingResult:
    """AdamW on the head only; keep the weights of the epoch with the best validation AUROC. `on_encoded()` is
    called once the one-off encoding of both splits is done, so a progress bar can time the epochs alone;
    `encoding(what, n, total)` after each batch of it (`what`: the split and its inputs, `demo:train captions`),
    `progress(row)` after each epoch. `cache_dir`: where the frozen features are kept and looked up (the test
    runs' `--memerobust-cache-dir`); None keeps them in memory."""
    import torch

    torch.manual_seed(seed)
    generator = torch.Generator().manual_seed(seed)
    module, device = detector.head_module, detector.device
    store = detector_feature_store(detector, "fp32", cache_dir)  # training encodes without autocast
    xi, xt = (t.to(device) for t in _features(detector, train, store, encoding))
    multilabel = is_multilabel(detector)
    y = torch.as_tensor(train.labels(task), device=device)
    vi, vt = (t.to(device) for t in _features(detector, val, store, encoding))
    y_val = val.labels(task)
    if on_encoded:
        on_encoded()
    # FigMemes re-weights each label's positives by its negatives-to-positives ratio: rare labels still count
    pos_weight = (((len(y) - y.sum(0)) / y.sum(0).clamp(min=1)).float() if multilabel else None)
    optimiser = torch.optim.AdamW([p for p in module.parameters() if p.requires_grad], lr=lr,
                                  weight_decay=weight_decay)
    result, best_state, start = TrainingResult(best_epoch=-1, best_val_auroc=-np.inf), None, 1
    if state_path is not None and Path(state_path).exists():
        saved = torch.load(state_path, map_location=device, weights_only=True)
        module.load_state_dict(saved["head"])
        optimiser.load_state_dict(saved["optimizer"])
        torch.set_rng_state(saved["torch_rng"])
        generator.set_state(saved["generator"])
        best_state, start = saved["best_head"], saved["epoch"] + 1
        result = TrainingResult(best_epoch=saved["best_epoch"], best_val_auroc=saved["best_val_auroc"],
                                history=saved["history"], resumed_from_epoch=saved["epoch"])
    for epoch in range(start, epochs + 1):
        module.train()
        order = torch.randperm(len(y), generator=generator).to(device)
        total = 0.0
        for begin in range(0, len(y), batch_size):
            idx = order[begin : begin + batch_size]
            loss = classification_loss(detector.logits(xi[idx], xt[idx]), y[idx], multilabel, pos_weight=pos_weight)
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
            total += loss.item() * len(idx)
        module.eval()
        with torch.no_grad():
            proba = class_probabilities(detector.logits(vi, vt), multilabel).cpu().numpy()
        val_auroc = auroc(y_val, proba)
        row = {"epoch": epoch, "loss": total / len(y), "val_auroc": val_auroc,
               "val_accuracy": METRICS["accuracy"](y_val, proba), "val_macro_f1": METRICS["macro_f1"](y_val, proba)}
        result.history.append(row)
        if val_auroc > result.best_val_auroc:
            result.best_epoch, result.best_val_auroc = epoch, val_auroc
            best_state = {k: v.detach().clone() for k, v in module.state_dict().items()}
        if state_path is not None:
            _save_state(Path(state_path), {
                "epoch": epoch, "head": module.state_dict(), "optimizer": optimiser.state_dict(),
                "torch_rng": torch.get_rng_state(), "generator": generator.get_state(), "best_head": best_state,
                "best_epoch": result.best_epoch, "best_val_auroc": result.best_val_auroc, "history": result.history})
        if progress:
            progress(row)
    module.load_state_dict(best_state)
    module.eval()
    result.feature_cache = asdict(store.stats)
    return result


def save_trained(detector, path: Path, card, result: TrainingResult, hyperparameters: dict,
                 write_card: bool = True, name: str | None = None) -> None:
    """Next to each other: the checkpoint (safetensors; metadata says what it needs, `card` the card it was trained
    from), the metrics and (unless the checkpoint belongs to an existing card) a card pointing at it, named `name`
    (default: the card's), whose [training] is the recipe that ran."""
    path = Path(path)
    summary = {"card": card.name, "best_epoch": result.best_epoch, "best_val_auroc": result.best_val_auroc,
               "hyperparameters": hyperparameters}
    save_state_dict(detector.shipped_state(), path, metadata={**detector.checkpoint_metadata(), **summary})
    atomic_write_text(path.with_suffix(".metrics.json"),
                      json.dumps({**asdict(result), "hyperparameters": hyperparameters}, indent=2) + "\n")
    if write_card:
        trained = replace(card, name=name or card.name, training={**card.training, **hyperparameters})
        atomic_write_text(path.with_suffix(".card.toml"), card_toml(trained, checkpoint=path.name))


def _toml_value(value) -> str:
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{json.dumps(k)} = {_toml_value(v)}" for k, v in value.items() if v is not None) + " }"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return json.dumps(value)  # strings, numbers and booleans are written the same in JSON and TOML


def card_toml(card, checkpoint: str) -> str:
    """A card that points at `checkpoint` (in the same folder), so the pair can be copied anywhere and used."""
    lines = [f"name = {json.dumps(card.name)}", f"architecture = {json.dumps(card.architecture)}",
             f"task = {json.dumps(card.task)}", f"classes = {_toml_value(list(card.classes))}",
             *(["multilabel = true"] if card.multilabel else []),
             f"description = {json.dumps(card.description)}", f"checkpoint = {json.dumps(checkpoint)}"]
    for table in ("params", "backbone", "text_backbone", "training"):
        values = {k: v for k, v in getattr(card, table).items() if v is not None}
        if values:
            lines.append(f"\n[{table}]")
            lines += [f"{json.dumps(k)} = {_toml_value(v)}" for k, v in values.items()]
    return "\n".join(lines) + "\n"
