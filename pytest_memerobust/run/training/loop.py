"""Train a split detector, choosing the epoch by validation AUROC.

With frozen encoders (the `head` and `linear` adaptations) every caption and picture is encoded once, through the
same feature store as the test runs (keyed by the backbone, not the head): a second head trained on the same
backbone and data, or a test run of it, reads those features from the cache. Augmented inputs (augmentation.py) go
through the same store, so a second run of the same command encodes nothing. Adversarial training
(adversarial.py) attacks each batch against the current weights; what the attack makes is encoded there and then,
never cached (it changes with the weights). Adaptations that train the encoders (adapter, compacter, lora, prompt,
full) call them on every batch instead of reading features.

Every step runs at RESULT_THREADS intra-op threads (determinism.py), so the same command writes the same checkpoint
bytes at any thread count. With a `state_path`, the loop saves its full state (trained tensors, optimiser, random
generators, history, best weights) after each epoch and resumes from it, so an interrupted run continues where it
stopped and ends with the same weights.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, is_dataclass
from pathlib import Path

import numpy as np

from ...atomic import atomic_path
from ...errors import MemeRobustError
from ...data.meme import Dataset, is_multilabel
from ...determinism import caption_buckets, caption_rows, device_type, encode_fixed
from ...engine.features import FeatureStore, detector_feature_store
from ...detectors.base import class_probabilities, classification_loss
from ...detectors.training.adversarial import attack_batch
from ...judge.metrics import METRICS, auroc


@dataclass(frozen=True)
class TrainedRecipe:
    """What trained, as the metrics record it: the adaptation's method and its count of trainable parameters, the
    augmentations' specs, the attack trained against and its loss."""

    adaptation: str = "head"
    trainable_parameters: int = 0
    augment: list[str] = field(default_factory=list)
    adversarial: str | None = None
    adversarial_loss: str | None = None


@dataclass(frozen=True)
class TrainingCost:
    """Where a run's time went: whether the encoders ran on every batch (nothing of the training split was
    cached), the wall time of the one-off encoding (0 when the encoders train) and of the epochs (augmentation,
    attacks and validation included), and the processes the encoding ran on (run/training encoding_pool)."""

    encoders_in_loop: bool = False
    encoding_seconds: float = 0.0
    training_seconds: float = 0.0
    encoding_workers: int = 1


@dataclass
class TrainingResult:
    """A training run's outcome: the best epoch and its validation AUROC, each epoch's row, the epoch resumed from,
    the one-off encoding's cache figures (inputs encoded, from memory, from disk), what trained and what it cost,
    and where a non-finite loss stopped the epochs ({"epoch", "batch", "loss"}; None: it did not)."""

    best_epoch: int
    best_val_auroc: float
    history: list[dict] = field(default_factory=list)
    resumed_from_epoch: int = 0
    feature_cache: dict = field(default_factory=dict)
    recipe: TrainedRecipe = field(default_factory=TrainedRecipe)
    cost: TrainingCost = field(default_factory=TrainingCost)
    diverged: dict | None = None

    def to_dict(self) -> dict:
        """The metrics file's fields: flat, each part's fields in its place, as the metrics have always held them."""
        flat = {}
        for part in fields(self):
            value = getattr(self, part.name)
            flat.update(asdict(value) if is_dataclass(value) else {part.name: value})
        return flat


class TrainingDiverged(MemeRobustError):
    """A non-finite loss (or validation output) before any epoch could be kept: nothing is written."""


def divergence_line(diverged: dict) -> str:
    """`epoch 3, batch 7 (loss nan)`: where a run stopped on a non-finite loss, in a few words."""
    where = f"batch {diverged['batch']}" if diverged["batch"] != "validation" else "its validation"
    return f"epoch {diverged['epoch']}, {where} (loss {diverged['loss']})"


ENCODE_BATCH_SIZE = 64  # inputs per encoder call in the one-off encoding (the test runs' default batch)


@dataclass(frozen=True)
class Hyperparameters:
    """How fast and how long: AdamW's step and weight decay, the epochs, the batch, and the seed of every draw."""

    lr: float = 1e-4
    weight_decay: float = 1e-4
    epochs: int = 10
    batch_size: int = 16
    seed: int = 0


@dataclass(frozen=True)
class TrainingConfig:
    """What a training run is asked: the label task, its hyperparameters, what it trains on (`augment`:
    Augmentations, augmentation.py; `adversarial`: an Adversarial, adversarial.py; `adaptation`: an Adaptation,
    adaptation.py, already applied to the detector, None for the head on frozen encoders), where its resumable state
    (`state_path`) and frozen features (`cache_dir`, the test runs' --memerobust-cache-dir; None: in memory) are
    kept, and `command`, what the run was asked (run/training resume_command), kept in the state so that a resume of
    another command is refused."""

    task: str = "hate"
    hyper: Hyperparameters = Hyperparameters()
    augment: tuple = ()
    adversarial: object = None
    adaptation: object = None
    state_path: Path | None = None
    cache_dir: Path | None = None
    command: dict | None = None


@dataclass(frozen=True)
class TrainingCallbacks:
    """What the caller follows and provides: `on_encoded()` once the one-off encoding is done, `encoding(what, n,
    total)` after each batch of it, `progress(row)` after each epoch; `run_batches`, where the one-off encoding's
    fixed-shape batches run (run/training's worker pool; None: here), each batch's rows the same bytes wherever."""

    progress: object = None
    on_encoded: object = None
    encoding: object = None
    run_batches: object = None


@dataclass(frozen=True)
class _LossSetup:
    """What every batch's adversarial loss shares, fixed for the run: whether the detector reads pictures and is
    multi-label, the positives' weights, whether the encoders train in the loop, and the seed of the attacks."""

    reads_images: bool
    multilabel: bool
    pos_weight: object
    in_loop: bool
    seed: int


@dataclass(frozen=True)
class _Batch:
    """A training batch as the adversarial loss needs it: its memes, captions and pictures (None when the detector
    is not fed pictures in the loop), clean features (image, text), targets, and where in the run it is."""

    memes: list
    captions: list
    pictures: list | None
    features: tuple
    target: object
    epoch: int


def _features(detector, dataset: Dataset, store: FeatureStore, encoding=None, run_batches=None):
    """`encoding(what, n, total)` after each batch encoded (`what`: e.g. `demo:train captions`); inputs read
    from the cache are not encoded, and not counted. `run_batches`: where the encoder's batches run
    (engine/features.encode_fixed; None: here)."""
    import torch

    tick = _ticker(encoding, dataset.name)
    if callable(getattr(detector, "encode_pairs", None)):  # a prompted model's probe: picture and caption read together
        return _pair_features(detector, dataset, tick("memes")), torch.zeros((len(dataset), 0))

    needs_images = "image" in getattr(detector, "modalities", ("image", "text"))
    images = (_stored(detector, store, "image", [m.image for m in dataset.memes], tick("pictures"), run_batches)
              if needs_images else torch.zeros((len(dataset), 0)))
    return images, _stored(detector, store, "text", [m.text for m in dataset.memes], tick("captions"), run_batches)


def _ticker(encoding, what: str):
    """Per side (`captions`, `pictures`), the feature store's per-batch callback that reports `what side` to
    `encoding(what, n, total)`; None without one."""
    return lambda side: None if encoding is None else lambda n, total: encoding(f"{what} {side}", n, total)


def _stored(detector, store: FeatureStore, side: str, inputs: list, tick=None, run_batches=None):
    """These inputs' features through the feature store (each input encoded once, in any run that shares it);
    `run_batches(side, encode, work, batch_size)` runs its batches (None: here)."""
    import torch

    encode = detector.encode_images if side == "image" else detector.encode_texts
    text = side == "text"
    rows = caption_rows(device_type(detector), ENCODE_BATCH_SIZE) if text else ENCODE_BATCH_SIZE
    run = None if run_batches is None else lambda *work: run_batches(side, *work)
    return torch.as_tensor(store.features(side, inputs, encode, rows, tick, buckets=caption_buckets(detector)
                                          if text else None, run_batches=run))


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
    """Through a Python file, whose failed write is an OSError with its errno (a full disk: atomic.DiskFull), where
    torch's own writer of a path raises a RuntimeError that says neither. (Its zip writer, ending the file after a
    failed write, still raises one: the OSError under it is what failed.)"""
    import torch

    with atomic_path(path) as tmp, open(tmp, "wb") as file:
        try:
            torch.save(state, file)
        except RuntimeError as exc:
            if isinstance(exc.__context__, OSError):
                raise exc.__context__ from None
            raise


def _encoded(detector, captions: list[str], pictures: list | None, reads_images: bool, grad: bool):
    """Features of these inputs straight from the encoders: with `grad`, the adapted encoders' tensors that the
    loss trains through; without, the test runs' no-gradient path (fixed-shape batches of ENCODE_BATCH_SIZE, as the
    feature store encodes)."""
    import torch

    if grad:
        text = detector.text_backbone.encode_texts(captions).float()
        image = (detector.backbone.encode_images(pictures).float() if reads_images
                 else torch.zeros((len(captions), 0), device=text.device))
        return image, text
    rows = caption_rows(device_type(detector), ENCODE_BATCH_SIZE)
    text = torch.as_tensor(encode_fixed(detector.encode_texts, captions, rows, caption_buckets(detector)))
    image = (torch.as_tensor(encode_fixed(detector.encode_images, pictures, ENCODE_BATCH_SIZE)) if reads_images
             else torch.zeros((len(captions), 0)))
    return image.to(detector.device), text.to(detector.device)


def _epoch_features(detector, captions, pictures, store: FeatureStore, clean, augmented: bool, what: str,
                    encoding=None, run_batches=None):
    """The training split's features as this epoch's augmentation left it: through the feature store (an input
    seen before, in this run or an earlier one, is read, not encoded)."""
    if not augmented:
        return clean
    tick = _ticker(encoding, what)
    xi = (_stored(detector, store, "image", pictures, tick("pictures"), run_batches).to(detector.device)
          if pictures is not None and clean[0].shape[1] else clean[0])
    return xi, _stored(detector, store, "text", captions, tick("captions"), run_batches).to(detector.device)


def _attacked_batch_loss(detector, adversarial, logits, batch: _Batch, setup: _LossSetup):
    """A training batch attacked against the current weights (the head in eval mode while the attack runs), its
    attacked memes encoded (through the encoders' gradients when they train), and the adversarial loss; the clean
    loss when the attack kept every meme clean."""
    module, (xi, xt), target = detector.head_module, batch.features, batch.target
    module.eval()
    rows, attacked_captions, attacked_pictures = attack_batch(adversarial, detector, batch.memes, batch.captions,
                                                              batch.pictures, target.cpu().numpy(),
                                                              xi.detach().cpu().numpy(), setup.seed, batch.epoch)
    module.train()
    if not rows:
        return classification_loss(logits, target, setup.multilabel, pos_weight=setup.pos_weight)
    on_pictures = setup.reads_images and adversarial.modality == "image"
    sub_pictures = [attacked_pictures[k] for k in rows] if attacked_pictures is not None else None
    axi, axt = _encoded(detector, [attacked_captions[k] for k in rows], sub_pictures, on_pictures,
                        grad=setup.in_loop)
    if not on_pictures:
        axi = xi[rows]
    if adversarial.modality == "image" and not adversarial.rewrites_caption:
        axt = xt[rows]
    return _adversarial_loss(adversarial, logits, detector.logits(axi, axt), target, rows, setup.multilabel,
                             setup.pos_weight)


def _adversarial_loss(adversarial, logits_clean, logits_attacked, target, attacked_rows, multilabel, pos_weight):
    """Cross-entropy on the batch as attacked (clean where a meme was kept clean), or TRADES: the clean
    cross-entropy plus beta times KL(clean || attacked), summed over the attacked memes and divided by the batch."""
    import torch
    import torch.nn.functional as F

    if adversarial.loss == "ce":
        mixed = logits_clean.clone()
        mixed[attacked_rows] = logits_attacked
        return classification_loss(mixed, target, multilabel, pos_weight=pos_weight)
    clean = classification_loss(logits_clean, target, multilabel, pos_weight=pos_weight)
    if multilabel:
        p = torch.sigmoid(logits_clean[attacked_rows])
        q = torch.sigmoid(logits_attacked).clamp(1e-7, 1 - 1e-7)
        kl = (p * (p.clamp(1e-7).log() - q.log()) + (1 - p) * ((1 - p).clamp(1e-7).log() - (1 - q).log())).sum()
    else:
        kl = F.kl_div(F.log_softmax(logits_attacked, dim=-1), F.softmax(logits_clean[attacked_rows], dim=-1),
                      reduction="sum")
    return clean + adversarial.beta * kl / len(target)


def train_head(detector, train: Dataset, val: Dataset, task: str = "hate", epochs: int = 10, lr: float = 1e-4,
               weight_decay: float = 1e-4, batch_size: int = 16, seed: int = 0, progress=None,
               state_path: Path | None = None, on_encoded=None, cache_dir: Path | None = None,
               encoding=None, augment=(), adversarial=None, adaptation=None, run_batches=None,
               command: dict | None = None) -> TrainingResult:
    """`run_training` with its config and callbacks given as keywords (see TrainingConfig, TrainingCallbacks)."""
    config = TrainingConfig(task, Hyperparameters(lr, weight_decay, epochs, batch_size, seed), tuple(augment),
                            adversarial, adaptation, state_path, cache_dir, command)
    return run_training(detector, train, val, config,
                        TrainingCallbacks(progress, on_encoded, encoding, run_batches))


def run_training(detector, train: Dataset, val: Dataset, config: TrainingConfig,
                 callbacks: TrainingCallbacks = TrainingCallbacks()) -> TrainingResult:
    """AdamW on what the adaptation trains (default: the head); keep the weights of the epoch with the best
    validation AUROC.

    A non-finite loss stops the epochs there: the best epoch so far is kept (`result.diverged` says where it
    stopped), or, before any epoch could be kept, TrainingDiverged says where."""
    from ...determinism import fixed_threads

    with fixed_threads():
        return _train(detector, train, val, config, callbacks)


def _train(detector, train: Dataset, val: Dataset, config: TrainingConfig,
           callbacks: TrainingCallbacks) -> TrainingResult:
    import time

    import torch

    from ...detectors.training.augmentation import augment_memes

    task, hyper, augment = config.task, config.hyper, config.augment
    adversarial, adaptation, state_path = config.adversarial, config.adaptation, config.state_path
    encoding, run_batches = callbacks.encoding, callbacks.run_batches
    seed, batch_size = hyper.seed, hyper.batch_size
    started = time.perf_counter()
    torch.manual_seed(seed)
    generator = torch.Generator().manual_seed(seed)
    module, device = detector.head_module, detector.device
    in_loop = bool(adaptation is not None and adaptation.encoders_trainable)
    params = (list(adaptation.parameters()) if adaptation is not None
              else [p for p in module.parameters() if p.requires_grad])
    reads_images = "image" in getattr(detector, "modalities", ("image", "text"))
    wants_pictures = reads_images and (in_loop or (adversarial is not None and adversarial.modality == "image"))
    # the encoders without autocast
    store = detector_feature_store(detector, "fp32", None if in_loop else config.cache_dir)
    multilabel = is_multilabel(detector)
    y = torch.as_tensor(train.labels(task), device=device)
    y_val = val.labels(task)
    clean = val_features = None
    if not in_loop:
        clean = tuple(t.to(device) for t in _features(detector, train, store, encoding, run_batches))
        val_features = tuple(t.to(device) for t in _features(detector, val, store, encoding, run_batches))
    if callbacks.on_encoded:
        callbacks.on_encoded()
    encoded_at = time.perf_counter()
    # FigMemes re-weights each label's positives by its negatives-to-positives ratio: rare labels still count
    pos_weight = (((len(y) - y.sum(0)) / y.sum(0).clamp(min=1)).float() if multilabel else None)
    setup = _LossSetup(reads_images, multilabel, pos_weight, in_loop, seed)
    optimiser = torch.optim.AdamW(params, lr=hyper.lr, weight_decay=hyper.weight_decay)
    result = TrainingResult(best_epoch=-1, best_val_auroc=-np.inf)
    best_state, start = None, 1
    if state_path is not None and Path(state_path).exists():
        saved = torch.load(state_path, map_location=device, weights_only=True)
        with torch.no_grad():
            for p, value in zip(params, saved["trained"]):
                p.copy_(value)
        optimiser.load_state_dict(saved["optimizer"])
        torch.set_rng_state(saved["torch_rng"])
        generator.set_state(saved["generator"])
        best_state, start = saved["best"], saved["epoch"] + 1
        result = TrainingResult(best_epoch=saved["best_epoch"], best_val_auroc=saved["best_val_auroc"],
                                history=saved["history"], resumed_from_epoch=saved["epoch"])
    memes = list(train.memes)
    diverged = None
    for epoch in range(start, hyper.epochs + 1):
        if augment:
            captions, pictures, _ = augment_memes(memes, augment, seed, epoch, device,
                                                  pictures=wants_pictures or None)
        else:
            captions, pictures = [m.text for m in memes], None
        features = None if in_loop else _epoch_features(detector, captions, pictures, store, clean,
                                                         bool(augment), f"{train.name} epoch {epoch}", encoding,
                                                         run_batches)
        module.train()
        order = torch.randperm(len(y), generator=generator).tolist()
        total = 0.0
        for begin in range(0, len(y), batch_size):
            idx = order[begin : begin + batch_size]
            target = y[idx]
            batch_captions = [captions[i] for i in idx]
            batch_pictures = ([pictures[i] if pictures is not None else memes[i].picture(device) for i in idx]
                              if wants_pictures else None)
            if in_loop:
                xi, xt = _encoded(detector, batch_captions, batch_pictures, reads_images, grad=True)
            else:
                xi, xt = features[0][idx], features[1][idx]
            logits = detector.logits(xi, xt)
            if adversarial is None:
                loss = classification_loss(logits, target, multilabel, pos_weight=pos_weight)
            else:
                batch = _Batch([memes[i] for i in idx], batch_captions, batch_pictures, (xi, xt), target, epoch)
                loss = _attacked_batch_loss(detector, adversarial, logits, batch, setup)
            if not torch.isfinite(loss.detach()).all():
                diverged = {"epoch": epoch, "batch": begin // batch_size + 1, "loss": float(loss.detach())}
                break
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
            total += loss.item() * len(idx)
        if diverged is not None:
            break
        module.eval()
        with torch.no_grad():
            vi, vt = (val_features if not in_loop else
                      _encoded(detector, [m.text for m in val.memes],
                               [m.picture(device) for m in val.memes] if reads_images else None, reads_images,
                               grad=False))
            proba = class_probabilities(detector.logits(vi, vt), multilabel).cpu().numpy()
        if not np.isfinite(proba).all():
            diverged = {"epoch": epoch, "batch": "validation", "loss": total / len(y)}
            break
        val_auroc = auroc(y_val, proba)
        row = {"epoch": epoch, "loss": total / len(y), "val_auroc": val_auroc,
               "val_accuracy": METRICS["accuracy"](y_val, proba), "val_macro_f1": METRICS["macro_f1"](y_val, proba)}
        result.history.append(row)
        if val_auroc > result.best_val_auroc:
            result.best_epoch, result.best_val_auroc = epoch, val_auroc
            best_state = [p.detach().clone() for p in params]
        if state_path is not None:
            _save_state(Path(state_path), {
                "epoch": epoch, "trained": [p.detach() for p in params], "optimizer": optimiser.state_dict(),
                "torch_rng": torch.get_rng_state(), "generator": generator.get_state(), "best": best_state,
                "best_epoch": result.best_epoch, "best_val_auroc": result.best_val_auroc, "history": result.history,
                "command": config.command})
        if callbacks.progress:
            callbacks.progress(row)
    if diverged is not None:
        if best_state is None:
            raise TrainingDiverged(f"training diverged at {divergence_line(diverged)} before any epoch could be "
                                   f"kept: nothing written; try a lower --lr (this run's: {hyper.lr:g})")
        result.diverged = diverged
    with torch.no_grad():
        for p, value in zip(params, best_state):
            p.copy_(value)
    module.eval()
    if adaptation is not None:
        adaptation.freeze()  # tested next, as a loaded checkpoint is: no gradient piles up in it, fingerprinted once
    result.feature_cache = asdict(store.stats)
    attack = (adversarial.spec, adversarial.loss_spec) if adversarial is not None else (None, None)
    result.recipe = TrainedRecipe(adaptation.method if adaptation is not None else "head",
                                  sum(p.numel() for p in params), [a.spec for a in augment], *attack)
    result.cost = TrainingCost(in_loop, encoded_at - started, time.perf_counter() - encoded_at)
    return result
