"""Joint image + caption attacks: an evader who controls the whole meme optimises both channels at once.

`co_attack` (after Co-Attack, Zhang et al., ACM MM 2022, which perturbs the caption first and then the picture against
the perturbed caption) alternates the two on the detector's own fused score, in two rounds: HotFlip edits of the
caption, drawn with HotFlip's own generator for the meme (so round one's caption is `hotflip@s`'s); then `pgd_linf@s`
itself (PGD's own generator for the meme, against the clean caption: the same picture PGD alone gives), kept if it
fools the detector; then L-infinity PGD on the picture against the attacked caption (10 steps of 2.5 eps / 10; round
one starts from a uniform random point of the eps ball drawn from the meme's own co_attack generator, and round two
continues from the round-one picture), then the caption chosen again against the attacked picture (from the clean
caption, within the same edits, with the co_attack generator), then the picture again (`co_attack_one` says how each
round is kept). So the joint attack fools every meme `hotflip@s` or `pgd_linf@s` fools, by construction. The
budgets are those of the single-channel attacks at the same severity: HotFlip's edits (perturb/attacks.py) and
image_attacks.py's L-infinity eps, so `co_attack@s` compares with `hotflip@s` and `pgd_linf@s` at equal budgets.

A detector without gradients (a hosted or prompted model) gets the black-box fallback: HotFlip by queries, then Square
(image_attacks.py) against the attacked caption, with the queries counted in the meme's record.

The attack is an image perturbation that also chooses the caption (`rewrites_caption`): the condition
`image=co_attack@3` shows the detector the attacked picture with the attacked caption; the engine reads the caption
from `joint_captions`. Each meme is attacked alone (its own keyed generator, no other meme in its batches), so its
picture and caption are the same in any shard or worker.
"""
from __future__ import annotations

import numpy as np

from .attacks import HOTFLIP_STEPS, AttackContext, CleanInputs, hotflip_batch
from .distance import words_changed
from .human_edits import human_candidates
from .image_attacks import (LINF_LEVELS, PGD_STEPS, _gradient, _project, _random_start, keep_records, margin, pgd,
                            picture_margin, square, targets, to_picture)
from .registry import register

ROUNDS = 2


def _caption_round(context, caption: str, row: int, picture, steps: int, rng, edits=None) -> tuple[str, int]:
    """HotFlip on one caption with `picture` as the meme's picture: (caption, queries asked)."""
    if steps <= 0:
        return caption, 0
    detector = context.detector
    split = callable(getattr(detector, "head", None)) and callable(getattr(detector, "encode_images", None))
    reads_image = "image" in getattr(detector, "modalities", ("image", "text"))
    features = None
    if split:
        features = detector.encode_images([picture]) if reads_image else np.zeros((1, 0), dtype=np.float32)
    one = AttackContext(detector, np.asarray([context.labels[row]]), CleanInputs(features, [picture]))
    counted = _Counting(one)
    return hotflip_batch([caption], [0], 1, [rng], counted, steps=steps, edits=edits)[0], counted.queries


class _Counting(AttackContext):
    """An attack context that counts the captions it asks the detector about (the black-box fallback's queries)."""

    def __init__(self, base: AttackContext):
        super().__init__(base.detector, base.labels, base.clean)
        self.queries = 0

    def probabilities(self, captions, rows, batch_size: int | None = None, per_query: bool = True):
        self.queries += len(captions)
        return super().probabilities(captions, rows, batch_size, per_query)


def _picture_round(target, x0, x, eps: float, rng, first: bool, scales: tuple[float, ...] = (1.0,)):
    """PGD on the picture against the target's (current) caption, from a random start or from `x`; with `scales`,
    each step follows the loss summed over the picture resized to each scale (SGA's set-level guidance)."""
    if first:
        x = _random_start(x0, eps, "linf", rng)
    step = 2.5 * eps / PGD_STEPS
    for _ in range(PGD_STEPS):
        grad = sum(_scaled_gradient(target, x, scale) for scale in scales)
        x = _project(x + step * grad.sign(), x0, eps, "linf")
    return x


def _scaled_gradient(target, x, scale: float):
    """d loss / d x with the picture shown to the detector resized by `scale` (bilinear, differentiable)."""
    import torch.nn.functional as F

    if scale == 1.0:
        return _gradient(target, x, "ce")[1]

    def resized(values):
        size = [max(2, round(n * scale)) for n in values.shape[-2:]]
        return F.interpolate(values, size=size, mode="bilinear", align_corners=False, antialias=scale < 1)

    return _gradient(target, x, "ce", view=resized)[1]


def co_attack_one(context, row: int, picture, severity: int, rng, edits=None,
                  scales: tuple[float, ...] = (1.0,)) -> tuple[object, str, dict]:
    """(picture, caption, record) of one meme under the joint attack; `edits` the word rewrites its caption rounds
    try (default HotFlip's).

    Round one is Co-Attack's order: the caption first (the severity's HotFlip edits, drawn with HotFlip's own
    generator for this meme, so this round is `hotflip@s` itself and the joint attack never does worse than it),
    then `pgd_linf@s`'s own picture (its generator, the clean caption: the joint attack never does worse than PGD
    either), then the picture against the attacked caption. Round two chooses the caption again, from the clean one
    and within the same edits, against the attacked picture, keeps whichever caption leaves the lower true-class
    margin, and moves the picture on against it. Each round stops the meme once it is fooled."""
    from .image_attacks import member_generator

    clean_caption = context.clean.captions[row]
    eps = float(LINF_LEVELS[severity - 1])
    budget = HOTFLIP_STEPS[severity - 1]
    x0 = picture.float()[None]
    x, queries = x0, 0
    white_box = targets(context, [row])[0].white_box
    attacked, caption = picture, clean_caption
    caption_rngs = [member_generator(context, "hotflip", row, severity, rng), rng]
    for k in range(ROUNDS):
        chosen, asked = _caption_round(context, clean_caption, row, attacked, budget, caption_rngs[k], edits)
        queries += asked
        if k == 0 or _margin(context, row, chosen, attacked) < _margin(context, row, caption, attacked):
            caption = chosen
        target = targets(context, [row], [caption])[0]
        if margin(target.scores([attacked])[0], target.label) < 0:
            break
        if white_box and k == 0:
            clean = targets(context, [row])[0]
            alone, _ = pgd(clean, picture, eps, "linf", member_generator(context, "pgd_linf", row, severity, rng))
            if picture_margin(clean, alone) < 0:
                attacked, caption = alone, clean_caption
                break
        if white_box:
            x = _picture_round(target, x0, x, eps, rng, first=k == 0, scales=scales)
            attacked = to_picture(x, x0, eps, "linf")
        else:
            attacked, record = square(target, attacked, eps, rng)
            queries += record["queries"]
        if margin(target.scores([attacked])[0], target.label) < 0:
            break
    record = {"success": bool(_margin(context, row, caption, attacked) < 0), "queries": queries,
              "words_changed": words_changed(clean_caption, caption), "white_box": white_box}
    return attacked, caption, record


def _margin(context, row: int, caption: str, picture) -> float:
    """The true class's margin for one meme's caption and picture, through the detector's real path."""
    target = targets(context, [row], [caption])[0]
    return float(margin(target.scores([picture])[0], target.label))


def _memo_key(context, name: str, severity: int, row: int) -> tuple:
    meme = context.ids[row] if context.ids is not None else row
    return ("joint caption", name, severity, context.fingerprint, meme)


def joint_batch(name: str, edits=None, scales: tuple[float, ...] = (1.0,)):
    """The batch function of joint attack `name`: each meme alone, its caption kept for the engine."""
    def batch(images, rows, severity, rngs, context):
        from ..data.pictures import as_picture, is_tensor_batch, to_array

        arrays = not is_tensor_batch(list(images))
        out, records = [], []
        for x, row, rng in zip(images, rows, rngs):
            picture, caption, record = co_attack_one(context, int(row), as_picture(x), severity, rng, edits, scales)
            context.memo[_memo_key(context, name, severity, int(row))] = caption
            records.append(record)
            out.append(to_array(picture) if arrays else picture)
        keep_records(context, name, severity, rows, records)
        return out

    return batch


co_attack_batch = joint_batch("co_attack")
co_attack_human_batch = joint_batch("co_attack_human", human_candidates)
SGA_SCALES = (1.0, 0.5, 0.75, 1.25, 1.5)  # SGA's scale set (Lu et al., ICCV 2023), the picture itself included
sga_batch = joint_batch("sga", scales=SGA_SCALES)


def joint_captions(context, name: str, severity: int, rows) -> list[str] | None:
    """The captions joint attack `name` chose for memes `rows`, or None if it has not run on all of them."""
    keys = [_memo_key(context, name, severity, int(r)) for r in rows]
    if not all(k in context.memo for k in keys):
        return None
    return [context.memo[k] for k in keys]


@register("co_attack", modality="image", family="co_attack", needs_model=True, rewrites_caption=True,
          tags=("white_box", "black_box", "per_meme", "joint"), batch=co_attack_batch, takes="tensor")
def co_attack(x, severity, rng, context, index):
    """Joint caption + picture attack (after Co-Attack): HotFlip edits and L-infinity PGD alternated in two rounds on
    the detector's fused score, at HotFlip's edits and 1 .. 16 /255 by severity (Square for a black box)."""
    return co_attack_batch([x], [index], severity, [rng], context)[0]


@register("co_attack_human", modality="image", family="co_attack", needs_model=True, rewrites_caption=True,
          tags=("white_box", "black_box", "per_meme", "joint", "human_plausible"), batch=co_attack_human_batch,
          takes="tensor")
def co_attack_human(x, severity, rng, context, index):
    """co_attack whose caption rounds try human-style rewrites (leetspeak, emoji, spacing: human_edits.py) instead
    of random character flips, so the attacked caption stays one a person would write."""
    return co_attack_human_batch([x], [index], severity, [rng], context)[0]


@register("sga", modality="image", family="co_attack", needs_model=True, rewrites_caption=True,
          tags=("white_box", "black_box", "per_meme", "joint", "transfer"), batch=sga_batch, takes="tensor")
def sga(x, severity, rng, context, index):
    """co_attack with SGA's set-level guidance (Lu et al., ICCV 2023): each picture step follows the loss over the
    picture at scales 0.5, 0.75, 1, 1.25 and 1.5, which carries it better to other detectors (transfer)."""
    return sga_batch([x], [index], severity, [rng], context)[0]
