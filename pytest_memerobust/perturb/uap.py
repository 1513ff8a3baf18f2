"""Universal adversarial perturbation (Moosavi-Dezfooli et al., CVPR 2017): one image-agnostic pattern per detector,
fitted once on training memes under an L-infinity budget, then added to every test picture. Rainbow Noise's image
noise 1.

The pattern lives at the image encoder's input resolution, in [0, 1] pixel units, and is resized to each picture.
With a `pixel_loss_gradient` hook (white box) it is fitted by projected sign-gradient ascent on the loss over batches
of training memes (the stochastic variant of the UAP algorithm); without one, by random search over sign patterns
with queries. It is cached in memory and on disk, keyed by the checkpoint fingerprint and the budget.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from .attacks import AttackContext
from .registry import register


def fit_uap(context: AttackContext, epsilon: float, seed: int = 0, steps: int = 20, examples: int = 64,
            batch_size: int = 16, size: int = 64) -> np.ndarray:
    """The pattern [S, S, 3] in [-epsilon, epsilon] that raises the detector's loss on training memes the most."""
    import torch

    if context.training is None:
        raise ValueError("a universal perturbation is fitted on training memes: this context has none")
    texts, labels, memes = context.training()
    rng = np.random.default_rng(seed)
    rows = rng.permutation(len(memes))[:examples]
    detector = context.detector
    images, y = [memes[r].image for r in rows], np.asarray(labels)[rows]
    if callable(getattr(detector, "pixel_loss_gradient", None)):
        backbone = detector.backbone
        pixels = backbone.pixels(images)
        text_features = detector.encode_texts([texts[r] for r in rows])
        s = backbone.image_size
        delta = torch.zeros(3, s, s)
        # One sign step per pass over all the examples (gradients summed over their batches), of an eighth of the
        # budget: per-batch steps of a quarter made the pattern oscillate, with a third of its pixels back at 0.
        step = epsilon / 8
        for _ in range(steps):
            grad = torch.zeros_like(delta)
            for k in range(0, len(rows), batch_size):
                grad += detector.pixel_loss_gradient(pixels[k : k + batch_size], delta, y[k : k + batch_size],
                                                     text_features[k : k + batch_size]).cpu()
            delta = (delta + step * grad.sign()).clamp(-epsilon, epsilon)
        return delta.permute(1, 2, 0).numpy().astype(np.float32)
    # Black box: the best of a few random sign patterns, judged by queries.
    best, best_loss = np.zeros((size, size, 3), np.float32), -np.inf
    for _ in range(8):
        pattern = (rng.choice([-1.0, 1.0], size=(size, size, 3)) * epsilon).astype(np.float32)
        proba = detector.predict_proba([add_pattern(img, pattern) for img in images], [texts[r] for r in rows])
        loss = float(-np.log(proba[np.arange(len(rows)), y] + 1e-12).mean())
        if loss > best_loss:
            best, best_loss = pattern, loss
    return best


def add_pattern(x, pattern: np.ndarray):
    """`x` (a picture tensor, or an array) plus the pattern resized to its size (bilinear), in 0-255 units, clipped
    to uint8; the kind it was given."""
    return add_pattern_batch([x], pattern)[0]


def add_pattern_batch(images: list, pattern: np.ndarray) -> list:
    """`add_pattern` for many pictures, computed on their device: the pattern is resized once per picture size."""
    import torch

    from ..data.pictures import as_picture, groups_by_size, is_tensor_batch, to_array

    arrays = not is_tensor_batch(images)
    pictures = [as_picture(x) for x in images]
    out: list = [None] * len(pictures)
    for (h, w), rows in groups_by_size(pictures).items():
        device = pictures[rows[0]].device
        source = torch.from_numpy(np.ascontiguousarray(pattern)).permute(2, 0, 1)[None].to(device)
        resized = torch.nn.functional.interpolate(source, size=(h, w), mode="bilinear", align_corners=False)[0]
        for i in rows:
            picture = torch.round(pictures[i].float() + 255.0 * resized).clamp(0, 255).to(torch.uint8)
            out[i] = to_array(picture) if arrays else picture
    return out


def pattern_for(context: AttackContext, epsilon: float, seed: int = 0) -> np.ndarray:
    """The pattern for this detector, budget and seed, fitted once on the run's fit memes (data/fit_memes.py) and
    kept in memory and in the cache folder, keyed by the checkpoint and those memes."""
    fit = context.fit_digest
    key = ("uap", context.fingerprint, fit, epsilon, seed)
    if key not in context.memo:
        path = None
        if context.cache_dir is not None:
            path = Path(context.cache_dir) / "uap" / f"{context.fingerprint[:16]}-{fit}-{epsilon:.5f}-{seed}.npy"
        if path is not None and path.is_file():
            try:
                pattern = np.load(path, allow_pickle=False)
                if pattern.ndim == 3 and pattern.shape[2] == 3 and np.abs(pattern).max() <= epsilon + 1e-6:
                    context.memo[key] = pattern.astype(np.float32)
            except (ValueError, OSError):
                pass  # a corrupt or foreign entry is recomputed, never trusted
        if key not in context.memo:
            context.memo[key] = fit_uap(context, epsilon, seed)
            if path is not None:
                from ..atomic import atomic_path

                with atomic_path(path) as tmp:
                    with open(tmp, "wb") as f:
                        np.save(f, context.memo[key], allow_pickle=False)
    return context.memo[key]


def uap_batch(images, rows, severity, rngs, context: AttackContext):
    epsilon = [2, 4, 8, 12, 16][severity - 1] / 255
    pattern = pattern_for(context, epsilon)
    return add_pattern_batch(list(images), pattern)


@register("uap", modality="image", family="uap", needs_model=True, tags=("white_box", "universal"), batch=uap_batch,
          takes="tensor")
def uap(x, severity: int, rng: np.random.Generator, context: AttackContext, index: int):
    """Add the detector's universal adversarial perturbation; severity sets its L-infinity budget (2-16 / 255)."""
    return uap_batch([x], [index], severity, [rng], context)[0]
