"""Fit the trainable head of a split detector on frozen features, choosing the epoch by validation AUROC."""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from .atomic import atomic_write_text
from .data.meme import Dataset
from .detectors.checkpoints import save_state_dict
from .metrics import auroc


@dataclass
class TrainingResult:
    best_epoch: int
    best_val_auroc: float
    history: list[dict] = field(default_factory=list)


def _features(detector, dataset: Dataset):
    import torch

    images = detector.encode_images([m.image for m in dataset.memes])
    texts = detector.encode_texts([m.text for m in dataset.memes])
    return torch.as_tensor(images), torch.as_tensor(texts)


def train_head(detector, train: Dataset, val: Dataset, task: str = "hate", epochs: int = 30, lr: float = 1e-3,
               weight_decay: float = 1e-4, batch_size: int = 16, seed: int = 0, progress=None) -> TrainingResult:
    """Encode once (the encoders are frozen), then AdamW on the head; keep the weights of the best epoch."""
    import torch

    torch.manual_seed(seed)
    generator = torch.Generator().manual_seed(seed)
    module, device = detector.head_module, detector.device
    xi, xt = (t.to(device) for t in _features(detector, train))
    y = torch.as_tensor(train.labels(task), device=device)
    vi, vt = (t.to(device) for t in _features(detector, val))
    y_val = val.labels(task)
    optimiser = torch.optim.AdamW(module.parameters(), lr=lr, weight_decay=weight_decay)
    result, best_state = TrainingResult(best_epoch=-1, best_val_auroc=-np.inf), None
    for epoch in range(1, epochs + 1):
        module.train()
        order = torch.randperm(len(y), generator=generator).to(device)
        total = 0.0
        for start in range(0, len(y), batch_size):
            idx = order[start : start + batch_size]
            loss = torch.nn.functional.cross_entropy(detector.logits(xi[idx], xt[idx]), y[idx])
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
            total += loss.item() * len(idx)
        module.eval()
        with torch.no_grad():
            proba = torch.softmax(detector.logits(vi, vt), dim=-1).cpu().numpy()
        val_auroc = auroc(y_val, proba)
        val_accuracy = float(np.mean(proba.argmax(1) == y_val))
        result.history.append({"epoch": epoch, "loss": total / len(y), "val_auroc": val_auroc,
                               "val_accuracy": val_accuracy})
        if progress:
            progress(result.history[-1])
        if val_auroc > result.best_val_auroc:
            result.best_epoch, result.best_val_auroc = epoch, val_auroc
            best_state = {k: v.detach().clone() for k, v in module.state_dict().items()}
    module.load_state_dict(best_state)
    module.eval()
    return result


def save_trained(detector, path: Path, card_name: str, result: TrainingResult) -> None:
    """The checkpoint (safetensors, with the training summary as metadata) and a metrics JSON beside it."""
    path = Path(path)
    summary = {"card": card_name, "best_epoch": result.best_epoch, "best_val_auroc": result.best_val_auroc}
    save_state_dict(detector.trainable_state(), path, metadata=summary)
    atomic_write_text(path.with_suffix(".metrics.json"), json.dumps(asdict(result), indent=2) + "\n")
