"""What a training run leaves: the checkpoint (safetensors), its metrics and a card that points at it."""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from ...atomic import atomic_write_all
from ..checkpoints import state_dict_bytes


def save_trained(detector, path: Path, card, result, hyperparameters: dict,
                 write_card: bool = True, name: str | None = None) -> None:
    """Next to each other: the checkpoint (safetensors; metadata says what it needs, `card` the card it was trained
    from), the metrics and (unless the checkpoint belongs to an existing card) a card pointing at it, named `name`
    (default: the card's), whose [training] is the recipe that ran. Written as one: each replaces its file only once
    all are written, so a failure (a full disk) leaves the three as they were."""
    path = Path(path)
    summary = {"card": card.name, "best_epoch": result.best_epoch, "best_val_auroc": result.best_val_auroc,
               "hyperparameters": hyperparameters}
    checkpoint = state_dict_bytes(detector.shipped_state(), {**detector.checkpoint_metadata(), **summary})
    texts = {path.with_suffix(".metrics.json"):
             json.dumps({**result.to_dict(), "hyperparameters": hyperparameters}, indent=2) + "\n"}
    if write_card:
        recipe = {**card.network.training, **hyperparameters}
        trained = replace(card, name=name or card.name, network=replace(card.network, training=recipe))
        texts[path.with_suffix(".card.toml")] = card_toml(trained, checkpoint=path.name)
    atomic_write_all({path: lambda tmp: tmp.write_bytes(checkpoint),
                      **{file: lambda tmp, text=text: tmp.write_text(text, encoding="utf-8")
                         for file, text in texts.items()}})


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
             *(["multilabel = true"] if card.scoring.multilabel else []),
             f"description = {json.dumps(card.description)}", f"checkpoint = {json.dumps(checkpoint)}"]
    for table in ("params", "backbone", "text_backbone", "training"):
        values = {k: v for k, v in getattr(card.network, table).items() if v is not None}
        if values:
            lines.append(f"\n[{table}]")
            lines += [f"{json.dumps(k)} = {_toml_value(v)}" for k, v in values.items()]
    return "\n".join(lines) + "\n"
