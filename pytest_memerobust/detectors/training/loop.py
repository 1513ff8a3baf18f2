"""Fit the trainable head of a split detector on frozen features, choosing the epoch by validation AUROC.

The backbones are frozen, so every caption and picture is encoded once before the first epoch, through the same
feature store as the test runs (keyed by the backbone, not the head): a second head trained on the same backbone and
data, or a test run of it, reads those features from the cache instead of encoding them again. With a
`state_path`, the loop saves its full state (head, optimiser, random generators, history, best weights) after each
epoch and resumes from it, so an interrupted run continues where it stopped and ends with the same weights.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from ...atomic import atomic_path
from ...data.meme import Dataset, is_multilabel
from ...engine.features import FeatureStore, detector_feature_store
from ..base import class_probabilities, classification_loss
from ...judge.metrics import METRICS, auroc


@dataclass
class TrainingResult:
    best_epoch: int
    best_val_auroc: float
    history: list[dict] = field(default_factory=list)
    resumed_from_epoch: int = 0
    feature_cache: dict = field(default_factory=dict)  # the one-off encoding: inputs encoded, from memory, from disk


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
