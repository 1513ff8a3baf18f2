"""Adversarial training with the project's own attacks: each batch attacked against the current weights.

`hotflip@1` attacks every training meme of a batch with HotFlip at severity 1 (`hotflip@1:0.5` keeps half of them
clean, drawn per meme and epoch); `pgd_linf@2` attacks the pictures, `co_attack@1` both channels. The attacks are the
registered ones, through the same AttackContext a test run gives them, keyed by (seed, meme id and epoch), so a
training run is reproducible. The loss is the cross-entropy on the attacked memes (Madry et al. 2018), or with
`trades:BETA` the clean cross-entropy plus BETA times KL(clean || attacked) (Zhang et al. 2019, TRADES). Unlike
TRADES's inner step, which maximises that KL, the attacked input here is the attack's own (it lowers the true
class's score): the same attack the gate later measures.
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ...errors import ConfigError, UnknownNameError

_SPEC = re.compile(r"^(?P<name>[^@]+)@(?P<severity>\d+)(?::(?P<keep>[^:]+))?$")
_LOSS = re.compile(r"^(?P<kind>ce|trades)(?::(?P<beta>[^:]+))?$")
TRADES_BETA = 6.0  # TRADES's published default (1/lambda = 6 on CIFAR-10)


@dataclass(frozen=True)
class Adversarial:
    """An attack to train against: a registered model-aware perturbation at one severity, the share of memes kept
    clean in each batch, and the loss (`ce`, or `trades` with its beta)."""

    name: str
    modality: str
    severity: int
    keep_clean: float = 0.0
    loss: str = "ce"
    beta: float = TRADES_BETA
    rewrites_caption: bool = False

    @property
    def spec(self) -> str:
        return f"{self.name}@{self.severity}" + (f":{self.keep_clean:g}" if self.keep_clean else "")

    @property
    def loss_spec(self) -> str:
        return "ce" if self.loss == "ce" else f"trades:{self.beta:g}"

    def attacked(self, seed: int, epoch: int, meme_id: str) -> bool:
        """Whether this meme is attacked in this epoch (else it is kept clean), a coin keyed by meme and epoch."""
        if self.keep_clean <= 0:
            return True
        digest = hashlib.blake2b(f"adversarial\0{seed}\0{epoch}\0{meme_id}\0{self.name}".encode(),
                                 digest_size=8).digest()
        return int.from_bytes(digest, "little") / 2.0**64 >= self.keep_clean


def parse_adversarial(text: str, loss: str | None = None) -> Adversarial:
    """`NAME@SEVERITY[:KEEP]` and `--adversarial-loss ce|trades[:BETA]`, checked against the registry: a
    model-aware attack (a perturbation that needs no model is an augmentation: --augment), a severity it has, a
    share in 0..1. Universal attacks (one trigger or pattern fitted over many memes) are refused: refitted at
    every batch they would cost a whole fit per step."""
    from ...perturb.registry import get

    match = _SPEC.match(text.strip())
    if not match:
        raise ConfigError(f"--adversarial {text!r}: expected ATTACK@SEVERITY[:SHARE_KEPT_CLEAN], e.g. hotflip@1 or "
                          f"pgd_linf@2:0.5")
    name, severity = match["name"].strip(), int(match["severity"])
    try:
        perturbation = get(name)
    except UnknownNameError as exc:
        raise ConfigError(f"--adversarial {text!r}: {exc}") from None
    if not perturbation.needs_model:
        raise ConfigError(f"--adversarial {text!r}: {name} does not attack the detector; train on it with "
                          f"--augment {name}@{severity} instead")
    if perturbation.universal:
        raise ConfigError(f"--adversarial {text!r}: {name} fits one {perturbation.family} over many memes; refitting "
                          f"it at every batch is not supported (train against a per-meme attack: hotflip, pgd_linf, "
                          f"co_attack)")
    if severity not in perturbation.parameters.severities:
        raise ConfigError(f"--adversarial {text!r}: {name}'s severities are "
                          f"{', '.join(map(str, perturbation.parameters.severities))}")
    try:
        keep = 0.0 if match["keep"] is None else float(match["keep"])
    except ValueError:
        keep = float("nan")
    if not 0.0 <= keep < 1.0:
        raise ConfigError(f"--adversarial {text!r}: the share kept clean {match['keep']!r} is not a number in "
                          f"0..1 (below 1: some memes must be attacked)")
    kind, beta = "ce", TRADES_BETA
    if loss is not None:
        found = _LOSS.match(loss.strip())
        if not found:
            raise ConfigError(f"--adversarial-loss {loss!r}: expected ce or trades[:BETA], e.g. trades:6")
        kind = found["kind"]
        if found["beta"] is not None:
            try:
                beta = float(found["beta"])
            except ValueError:
                beta = -1.0
            if not beta > 0:
                raise ConfigError(f"--adversarial-loss {loss!r}: beta must be a positive number")
    return Adversarial(perturbation.name, perturbation.modality, severity, keep, kind, beta,
                       perturbation.traits.rewrites_caption)


def check_gradient_path(adversarial: Adversarial, detector) -> None:
    """Before any training: a white-box attack needs the detector's gradients (HotFlip the caption encoder's token
    embeddings, the image attacks `picture_logits`); a detector without them (hosted, sampled, a prompted model
    whose processor is not reproduced in torch) is refused with the reason."""
    from ...perturb.registry import get

    perturbation = get(adversarial.name)
    kind = type(detector).__name__
    if not hasattr(detector, "head_module"):
        raise ConfigError(f"--adversarial {adversarial.spec}: {kind} has no trainable head here (a hosted, sampled or "
                          f"prompted detector is not trained by memerobust train)")
    if "white_box" not in perturbation.tags or "black_box" in perturbation.tags:
        return
    reason = getattr(detector, "no_gradient_reason", None)
    if adversarial.modality == "text":
        ok = callable(getattr(detector, "text_saliency", None)) and callable(getattr(detector, "token_embedding",
                                                                                    None))
    else:
        ok = callable(getattr(detector, "picture_logits", None)) and "image" in getattr(detector, "modalities", ())
    if not ok or reason:
        raise ConfigError(f"--adversarial {adversarial.spec}: {adversarial.name} follows the detector's gradients and "
                          f"{kind} has no differentiable {adversarial.modality} path"
                          f"{': ' + reason if reason else ''}")


def attack_batch(adversarial: Adversarial, detector, memes: Sequence, captions: list[str], pictures: list | None,
                 labels: np.ndarray, image_features: np.ndarray, seed: int, epoch: int) -> tuple[list[int], list[str],
                                                                                                list | None]:
    """The batch's memes drawn for attack, attacked against the detector's current weights (its head in eval mode:
    no dropout in the attack). Returns (the rows attacked, every meme's caption, every meme's picture or None),
    clean where not attacked."""
    from ...perturb.attacks import AttackContext, CleanInputs
    from ...perturb.registry import get

    rows = [i for i, m in enumerate(memes) if adversarial.attacked(seed, epoch, m.id)]
    if not rows:
        return rows, captions, pictures
    perturbation = get(adversarial.name)
    keys = [f"{memes[i].id}#e{epoch}" for i in rows]
    clean = CleanInputs(image_features=np.asarray(image_features)[rows],
                        images=[pictures[i] for i in rows] if pictures is not None else None,
                        captions=[captions[i] for i in rows])
    context = AttackContext(detector=detector, labels=np.asarray(labels)[rows], clean=clean, ids=keys, seed=seed)
    captions, pictures = list(captions), (list(pictures) if pictures is not None else None)
    if adversarial.modality == "text":
        out = perturbation.apply([captions[i] for i in rows], keys, adversarial.severity, seed, context=context)
        for i, value in zip(rows, out):
            captions[i] = value
        return rows, captions, pictures
    out = perturbation.apply([pictures[i] for i in rows], keys, adversarial.severity, seed, context=context)
    chosen = None
    if adversarial.rewrites_caption:
        from ...perturb.joint import joint_captions

        chosen = joint_captions(context, adversarial.name, adversarial.severity, range(len(rows)))
    for k, (i, value) in enumerate(zip(rows, out)):
        pictures[i] = value
        if chosen is not None:
            captions[i] = chosen[k]
    return rows, captions, pictures
