"""The standard image adversary, per meme: PGD (L-infinity and L2), APGD (cross-entropy, DLR, L2, and the targeted
DLR: APGD-T), Square (score-based black box), the cheaper ensemble `strongest_image` and AutoAttack's sequence
`autoattack` (less FAB-T), on the detector's image channel with the caption fixed.

A verdict is only as strong as the strongest attack tried (Croce and Hein, ICML 2020: weak attacks overstated most
published defences), so the picture is attacked meme by meme, not only with one universal pattern (uap.py).

- White box: a detector with a `picture_logits(values, text_features)` hook (MemeCLIP, MemeBLIP2 and the demo
  detector, and their channel-ablation views; a prompted model, not split into encoders and a head, has
  `picture_logits(values, caption=...)`) is differentiated from the full-size picture (float 0-255 values, through
  the detector's own resize) to its class logits. Other detectors (hosted models, prompted models whose processor is
  not reproduced in torch: their `no_gradient_reason` says why) are attacked by queries alone (Square), and a
  white-box attack on them is an error that says so.
- Budgets by severity, in 0-255 pixel levels of the full-size picture: L-infinity 1, 2, 4, 8, 16 (/255); L2 the same
  as a root-mean-square change per value, halved (0.5 .. 8 /255 RMS, so that ||delta||_2 = rms * sqrt(3 H W)): the
  CIFAR convention of L2 0.5 against L-infinity 8/255 is a ratio of 0.29 in these units.
- Every attacked picture is rounded to uint8 and stays within its budget (L-infinity budgets are whole levels, so
  rounding to the nearest level keeps them; an L2 picture that rounding pushes out gives back its smallest changes
  until it fits: to_picture). What counts is what the detector sees: APGD and the ensembles judge success on the
  rounded picture through the detector's real path.
- Parameters (registry.get): `restarts` (every attack here but the ensembles: `apgd_ce:restarts=5`, in a condition
  `image=apgd_ce@4:restarts=5`; the first restart is the plain attack, the others draw children of the meme's
  generator) and `queries` (Square's budget: `square:queries=5000`; `strongest_image` 500 by default, `autoattack`
  5,000).
- Keyed and alone: each meme's random start comes from its own generator (registry.Perturbation.rng) and its
  gradients and queries are computed with no other meme in the batch, so a meme's picture is the same whichever
  shard, worker or batch it falls in.
- Reference behaviour: PGD as Madry et al. 2018 and torchattacks (10 steps of 2.5 x eps / steps, uniform random
  start); APGD as Croce and Hein 2020 (`autoattack/autopgd_base.py`: momentum 0.75, step 2 x eps halved at the
  checkpoints 0, 0.22, ... when fewer than 75% of the steps since the last raised the loss or the best loss has not
  moved, restart from the best point; DLR loss, which needs three classes, becomes the Carlini-Wagner margin for
  two; APGD-T toward the 9 highest other classes); Square as Andriushchenko et al. 2020 (p_init 0.8 and its halving
  schedule, vertical-stripe start, margin loss, one query per step). Each meme's record (success, queries, zero
  gradient, the attack that won) goes into the context's `outcomes`, from which the report reads the ensembles'
  sanity flags.
"""
from __future__ import annotations

import math
from typing import Callable, Sequence

import numpy as np

from ..errors import ConfigError
from .registry import register

LINF_LEVELS = (1, 2, 4, 8, 16)  # L-infinity budget per severity, in pixel levels (/255)
L2_RMS_LEVELS = (0.5, 1, 2, 4, 8)  # L2 budget per severity, as RMS pixel levels per value
PGD_STEPS = 10
APGD_STEPS = 100  # AutoAttack's standard version
APGD_MOMENTUM = 0.75
APGD_RHO = 0.75
SQUARE_QUERIES = 500  # per meme, the default (`square:queries=5000` is AutoAttack's standard version)
AUTOATTACK_SQUARE_QUERIES = 5000  # AutoAttack's standard Square
SQUARE_P_INIT = 0.8
APGD_TARGET_CLASSES = 9  # AutoAttack's standard APGD-T: toward the 9 highest other classes (fewer if the task has)
# strongest_image, the cheaper ensemble (AutoAttack's idea, not its sequence): each runs on the memes the ones
# before it missed
ENSEMBLE = ("apgd_ce", "apgd_dlr", "square")
APGD_NAMES = {("ce", "linf"): "apgd_ce", ("dlr", "linf"): "apgd_dlr", ("ce", "l2"): "apgd_l2",
              ("dlr_t", "linf"): "apgd_t"}  # (loss, norm) -> registered name


class NoGradient(ConfigError):
    """A white-box attack asked of a detector that has no differentiable image path."""


# --- what an attack needs from the detector ---------------------------------------------------------------------

class PictureTarget:
    """One meme as an attack sees it: the detector, its caption (fixed), its true class; `logits` (white box, on
    float 0-255 values [1, 3, H, W]) and `scores` (the real path: uint8 pictures through the detector's encoder and
    head, as the run evaluates them) both return class scores of which the attack lowers the true one's margin."""

    def __init__(self, context, caption: str, label: int, text_features: np.ndarray | None):
        self.context, self.caption, self.label = context, caption, int(label)
        self.detector = context.detector
        self.text_features = text_features
        self.queries = 0

    @property
    def white_box(self) -> bool:
        """A `picture_logits` hook, and no `no_gradient_reason` (a prompted model whose processor is not
        reproduced in torch says so there)."""
        return (callable(getattr(self.detector, "picture_logits", None))
                and not getattr(self.detector, "no_gradient_reason", None))

    def logits(self, values):
        import torch

        if self.text_features is None:  # a detector that is not split (a prompted model) reads the caption itself
            return self.detector.picture_logits(values, caption=self.caption)
        features = torch.as_tensor(self.text_features, device=values.device)
        return self.detector.picture_logits(values, features)

    def scores(self, pictures: list) -> np.ndarray:
        """Log class probabilities of uint8 pictures (each a query), read through the detector's real path."""
        self.queries += len(pictures)
        detector = self.detector
        if getattr(detector, "takes_pictures", "tensor") == "array":
            from ..data.pictures import to_array

            pictures = [to_array(p) for p in pictures]
        if self.text_features is not None and callable(getattr(detector, "head", None)):
            features = np.repeat(self.text_features, len(pictures), axis=0)
            proba = detector.head(detector.encode_images(pictures), features)
        else:
            proba = detector.predict_proba(pictures, [self.caption] * len(pictures))
        return np.log(np.clip(np.asarray(proba, dtype=np.float64), 1e-12, 1.0))


def targets(context, rows: Sequence[int], captions: Sequence[str] | None = None) -> list[PictureTarget]:
    """A PictureTarget per meme `rows[k]` of the context, with `captions[k]` (default: the clean caption)."""
    from ..data.meme import is_multilabel

    if is_multilabel(context.detector):
        raise ConfigError("the per-meme image attacks attack one true class per meme; this detector's task is "
                          "multi-label")
    if context.clean.captions is None:
        raise ValueError("an image attack holds the caption fixed: this attack context has no captions")
    captions = [context.clean.captions[r] for r in rows] if captions is None else list(captions)
    detector = context.detector
    split = callable(getattr(detector, "head", None)) and callable(getattr(detector, "encode_texts", None))
    reads_text = "text" in getattr(detector, "modalities", ("image", "text"))
    out = []
    for r, caption in zip(rows, captions):
        features = None
        if split:
            features = (detector.encode_texts([caption]) if reads_text else np.zeros((1, 0), dtype=np.float32))
        out.append(PictureTarget(context, caption, context.labels[r], features))
    return out


def margin(log_scores, label: int):
    """True class minus the best other class (numpy or torch, last axis): below 0, the attack succeeded."""
    import torch

    if isinstance(log_scores, torch.Tensor):
        others = log_scores.clone()
        others[..., label] = -torch.inf
        return log_scores[..., label] - others.max(dim=-1).values
    others = np.array(log_scores, dtype=np.float64)
    others[..., label] = -np.inf
    return log_scores[..., label] - others.max(axis=-1)


def _loss(kind: str, logits, label: int, toward: int | None = None):
    """What the white-box attacks raise: cross-entropy; DLR (Croce and Hein 2020, eq. 5), which needs three classes
    (with two it is the Carlini-Wagner margin); or the targeted DLR toward class `toward` (APGD-T:
    -(z_y - z_t) / (z_pi1 - (z_pi3 + z_pi4) / 2), which reads a fourth class; with three, the denominator is DLR's
    own z_pi1 - z_pi3)."""
    import torch
    import torch.nn.functional as F

    if kind == "ce":
        return F.cross_entropy(logits, torch.full((len(logits),), label, device=logits.device), reduction="sum")
    ordered = logits.sort(dim=-1).values
    if kind == "dlr_t":
        third = ordered[..., -3] if logits.shape[-1] < 4 else (ordered[..., -3] + ordered[..., -4]) / 2
        return (-(logits[..., label] - logits[..., toward]) / (ordered[..., -1] - third + 1e-12)).sum()
    loss = -margin(logits, label)
    if logits.shape[-1] >= 3:
        loss = loss / (ordered[..., -1] - ordered[..., -3] + 1e-12)
    return loss.sum()


def _gradient(target: PictureTarget, x, kind: str, view: Callable | None = None, toward: int | None = None):
    """(loss, d loss / d x) at float values x [1, 3, H, W]; `view` (differentiable) is what the detector is shown
    of x, by default x itself (SGA shows it rescaled)."""
    import torch

    x = x.detach().requires_grad_(True)
    with torch.enable_grad():
        loss = _loss(kind, target.logits(x if view is None else view(x)), target.label, toward)
        grad = torch.autograd.grad(loss, x, allow_unused=True)[0] if loss.requires_grad else None
    # a fusion that leaves the picture out (the text-only ablation) has no path from it: a zero gradient, flagged
    return float(loss.detach()), torch.zeros_like(x) if grad is None else grad.detach()


# --- projections and rounding -----------------------------------------------------------------------------------

def _project(x, x0, eps: float, norm: str):
    import torch

    if norm == "linf":
        x = torch.minimum(torch.maximum(x, x0 - eps), x0 + eps)
    else:
        delta = x - x0
        scale = (eps / delta.flatten().norm().clamp_min(1e-12)).clamp(max=1.0)
        x = x0 + delta * scale
    return x.clamp(0, 255)


def to_picture(x, x0, eps: float, norm: str):
    """The uint8 picture of an attack's float values, within the budget: each value rounded to the nearest level. An
    L-infinity budget is whole levels, so rounding keeps it; an L2 picture that rounding pushed out of its ball gives
    back its smallest changes (those of least float change first, each set to the original level) until it fits, so
    it keeps nearly all of its budget (its squared norm ends within one level's square of eps^2 when the changes
    given back are single levels)."""
    import torch

    rounded = torch.round(x).clamp(0, 255)
    if norm == "l2":
        squares = ((rounded - x0).double() ** 2).flatten()
        excess = float(squares.sum()) - eps * eps
        if excess > 0:
            order = torch.argsort((x - x0).abs().flatten(), stable=True)
            freed = torch.cumsum(squares[order], 0)
            given_back = order[: int(torch.searchsorted(freed, torch.tensor([excess], dtype=freed.dtype))) + 1]
            flat = rounded.flatten().clone()
            flat[given_back] = x0.flatten()[given_back]
            rounded = flat.view_as(rounded)
    return rounded.to(torch.uint8)[0]


def picture_margin(target: PictureTarget, picture) -> float:
    """The true class's margin of a uint8 picture through the detector's real path (one query): below 0, fooled."""
    return float(margin(target.scores([picture])[0], target.label))


def _budget(norm: str, severity: int, shape) -> float:
    if norm == "linf":
        return float(LINF_LEVELS[severity - 1])
    return float(L2_RMS_LEVELS[severity - 1]) * math.sqrt(float(np.prod(shape)))


def _random_start(x0, eps: float, norm: str, rng: np.random.Generator):
    import torch

    shape = tuple(x0.shape[1:])
    if norm == "linf":
        noise = rng.uniform(-eps, eps, size=shape).astype(np.float32)
    else:  # torchattacks' PGDL2: a Gaussian direction scaled to a uniform share of the radius
        direction = rng.standard_normal(size=shape).astype(np.float32)
        noise = direction / max(float(np.linalg.norm(direction)), 1e-12) * eps * float(rng.uniform())
    return _project(x0 + torch.from_numpy(noise).to(x0.device)[None], x0, eps, norm)


def _ascent(x, grad, step: float, norm: str):
    """One step up the gradient: its sign (L-infinity) or its direction (L2)."""
    if norm == "linf":
        return x + step * grad.sign()
    return x + step * grad / grad.flatten().norm().clamp_min(1e-12)


# --- the attacks, one meme each ---------------------------------------------------------------------------------

def pgd(target: PictureTarget, picture, eps: float, norm: str, rng: np.random.Generator, steps: int = PGD_STEPS,
        random_start: bool = True):
    """Projected gradient ascent on the cross-entropy from a random start (or the clean picture, to compare with a
    reference implementation step by step): the last iterate (Madry et al. 2018)."""
    x0 = picture.float()[None]
    step = 2.5 * eps / steps
    x = _random_start(x0, eps, norm, rng) if random_start else x0
    zero = False
    for k in range(steps):
        _, grad = _gradient(target, x, "ce")
        if k == 0 and not bool(grad.abs().max() > 0):
            zero = True
        x = _project(_ascent(x, grad, step, norm), x0, eps, norm)
    return to_picture(x, x0, eps, norm), {"zero_gradient": zero}


def apgd_checkpoints(steps: int) -> list[int]:
    """The iterations at which APGD may halve its step: w_j = ceil(p_j n), p_0 = 0, p_1 = 0.22,
    p_{j+1} = p_j + max(p_j - p_{j-1} - 0.03, 0.06)."""
    p = [0.0, 0.22]
    while p[-1] < 1:
        p.append(p[-1] + max(p[-1] - p[-2] - 0.03, 0.06))
    return sorted({math.ceil(q * steps) for q in p if q <= 1})


def _apgd_start(x0, eps: float, norm: str, rng: np.random.Generator):
    """APGD's random start: a uniform draw scaled to the L-infinity ball's surface, or a Gaussian one to the L2
    sphere (autopgd_base.py)."""
    import torch

    shape = tuple(x0.shape[1:])
    if norm == "linf":
        t = torch.from_numpy(rng.uniform(-1, 1, size=shape).astype(np.float32)).to(x0.device)[None]
        return _project(x0 + eps * t / t.abs().max().clamp_min(1e-12), x0, eps, norm)
    t = torch.from_numpy(rng.standard_normal(size=shape).astype(np.float32)).to(x0.device)[None]
    return _project(x0 + eps * t / t.flatten().norm().clamp_min(1e-12), x0, eps, norm)


def apgd(target: PictureTarget, picture, eps: float, loss: str, rng: np.random.Generator, steps: int | None = None,
         norm: str = "linf", toward: int | None = None):
    """Auto-PGD (Croce and Hein 2020), L-infinity or L2: momentum, a step of 2 eps halved at the checkpoints, the
    best point kept; `loss` "ce", "dlr", or "dlr_t" (the targeted DLR, toward class `toward`: APGD-T's run).

    Success is what the detector sees: at every iterate the rounded picture (to_picture) is judged through the
    detector's real path (one query). The attack runs on past a float success that rounding undoes, and returns the
    first rounded picture that fools the detector, else the rounded picture of lowest true-class margin seen."""
    steps = APGD_STEPS if steps is None else steps
    x0 = picture.float()[None]
    x = _apgd_start(x0, eps, norm, rng)
    checkpoints = [w for w in apgd_checkpoints(steps) if w > 0]
    eta = 2.0 * eps
    f, grad = _gradient(target, x, loss, toward=toward)
    zero = not bool(grad.abs().max() > 0)
    best_f, best_x, best_grad = f, x, grad
    chosen = to_picture(x, x0, eps, norm)
    chosen_margin = picture_margin(target, chosen)
    x_prev = x
    raised, last_check, eta_at_check, best_at_check = 0, 0, eta, best_f
    for k in range(steps):
        if chosen_margin < 0:
            break
        z = _project(_ascent(x, grad, eta, norm), x0, eps, norm)
        momentum = APGD_MOMENTUM if k > 0 else 1.0
        x_new = _project(x + momentum * (z - x) + (1 - momentum) * (x - x_prev), x0, eps, norm)
        x_prev, x = x, x_new
        f_new, grad = _gradient(target, x, loss, toward=toward)
        raised += f_new > f
        f = f_new
        if f > best_f:
            best_f, best_x, best_grad = f, x, grad
        rounded = to_picture(x, x0, eps, norm)
        value = picture_margin(target, rounded)
        if value < chosen_margin:
            chosen, chosen_margin = rounded, value
        if k + 1 in checkpoints:
            too_few = raised < APGD_RHO * (k + 1 - last_check)
            stalled = eta == eta_at_check and best_f == best_at_check
            eta_at_check, best_at_check = eta, best_f
            if too_few or stalled:  # halve the step and go back to the best point, with its gradient
                eta /= 2.0
                x, grad = best_x, best_grad
            raised, last_check = 0, k + 1
    return chosen, {"zero_gradient": zero, "margin": chosen_margin}


def apgd_targeted(target: PictureTarget, picture, eps: float, rng: np.random.Generator, steps: int | None = None,
                  norm: str = "linf", classes: int = APGD_TARGET_CLASSES):
    """APGD-T (Croce and Hein 2020; AutoAttack's standard version): APGD on the targeted DLR loss toward each of the
    `classes` classes the clean picture scores highest after the true one (as many as the task has), in turn, until
    one run's rounded picture fools the detector (any class but the true one counts). A task of three classes or
    more: with two, the targeted DLR is the untargeted margin (use apgd_dlr)."""
    import torch

    x0 = picture.float()[None]
    with torch.no_grad():
        logits = target.logits(x0)[0]
    if logits.shape[-1] < 3:
        raise ConfigError(f"apgd_t (APGD on the targeted DLR loss) needs a task of three classes or more; this one "
                          f"has {logits.shape[-1]}: attack it with apgd_ce, apgd_dlr or autoattack")
    order = [int(c) for c in torch.argsort(logits, descending=True, stable=True) if int(c) != target.label]
    best, best_record = None, None
    zero = False
    for toward in order[:classes]:
        attacked, record = apgd(target, picture, eps, "dlr_t", rng, steps, norm, toward=toward)
        zero = zero or record["zero_gradient"]
        if best is None or record["margin"] < best_record["margin"]:
            best, best_record = attacked, record
        if record["margin"] < 0:
            break
    return best, {**best_record, "zero_gradient": zero}


def square_size_share(it: int, queries: int, p_init: float = SQUARE_P_INIT) -> float:
    """Square's schedule of the share of pixels a square covers (its `p_selection`, on a 10,000-step scale)."""
    it = int(it / queries * 10000)
    for bound, divisor in ((10, 1), (50, 2), (200, 4), (500, 8), (1000, 16), (2000, 32), (4000, 64), (6000, 128),
                           (8000, 256)):
        if it <= bound:
            return p_init / divisor
    return p_init / 512


def square(target: PictureTarget, picture, eps: float, rng: np.random.Generator, queries: int | None = None):
    """Square Attack (Andriushchenko et al. 2020), L-infinity, score-based: random squares of +-eps per channel,
    kept when they lower the true class's margin; stops at the first success or when the queries run out."""
    import torch

    queries = SQUARE_QUERIES if queries is None else queries

    x0 = picture.to(torch.int32)
    c, h, w = x0.shape
    e = int(round(eps))
    stripes = rng.choice([-e, e], size=(c, 1, w)).astype(np.int32)
    best = (x0 + torch.from_numpy(stripes).to(x0.device)).clamp(0, 255)
    best_margin = float(margin(target.scores([best.to(torch.uint8)])[0], target.label))
    used = 1
    while best_margin >= 0 and used < queries:
        share = square_size_share(used - 1, queries)
        s = min(max(int(round(math.sqrt(share * h * w))), 1), min(h, w) - 1) if min(h, w) > 1 else 1
        top, left = int(rng.integers(0, h - s + 1)), int(rng.integers(0, w - s + 1))
        candidate = best.clone()
        window = candidate[:, top : top + s, left : left + s]
        for _ in range(10):  # a square that changes nothing is drawn again (the reference's loop)
            signs = torch.from_numpy(rng.choice([-e, e], size=(c, 1, 1)).astype(np.int32)).to(x0.device)
            new = (x0[:, top : top + s, left : left + s] + signs).clamp(0, 255)
            if bool((new != window).any()):
                break
        candidate[:, top : top + s, left : left + s] = new
        value = float(margin(target.scores([candidate.to(torch.uint8)])[0], target.label))
        used += 1
        if value < best_margin:
            best, best_margin = candidate, value
    return best.to(torch.uint8), {"queries": used, "margin": best_margin}


def restarted(attack: Callable, target: PictureTarget, rng: np.random.Generator, restarts: int):
    """`attack(generator) -> (picture, record)` from `restarts` random starts: the first draws the meme's own
    generator (so one restart is the plain attack, byte for byte), restart r its r-th child (numpy's spawn of the
    generator's seed: a function of seed, meme, attack, severity and r, never of the batch). The first picture that
    fools the detector through its real path, else the one of lowest true-class margin; the record says how many
    restarts ran."""
    if restarts == 1:
        return attack(rng)
    best, best_margin, zero = None, math.inf, False
    for r, generator in enumerate([rng, *rng.spawn(restarts - 1)]):
        attacked, record = attack(generator)
        zero = zero or bool(record.get("zero_gradient"))
        value = record["margin"] if "margin" in record else picture_margin(target, attacked)
        if best is None or value < best_margin:
            best, best_margin = (attacked, record), value
        if value < 0:
            break
    attacked, record = best
    return attacked, {**record, "zero_gradient": zero, "restarts_run": r + 1}


def first_to_fool(target: PictureTarget, picture, members: Sequence[tuple[str, Callable]]):
    """An ensemble on one meme: each `(name, run)` in turn, `run() -> (picture, record)`, until one's picture fools
    the detector through its real path. The meme's picture is that one, else the one of lowest true-class margin;
    the record names the members tried and the winner, and the sanity flags (a zero gradient at a white-box
    member's start; Square fooling a meme the white-box members missed)."""
    tried, best, best_margin, won, zero = [], picture, math.inf, None, False
    for member, run in members:
        attacked, record = run()
        zero = zero or bool(record.get("zero_gradient"))
        tried.append(member)
        value = picture_margin(target, attacked)
        target.queries -= 1  # judging a member's outcome is the ensemble's bookkeeping, not an attack's query
        if value < best_margin:
            best, best_margin = attacked, value
        if value < 0:
            won = member
            break
    return best, {"tried": tried, "won_by": won, "zero_gradient": zero,
                  "black_box_beat_white_box": won is not None and won.startswith("square") and len(tried) > 1}


# --- registered: batches of memes, each alone ---------------------------------------------------------------------

def _white_box_or_error(name: str, target: PictureTarget) -> None:
    if not target.white_box:
        reason = getattr(target.detector, "no_gradient_reason", None)
        raise NoGradient(f"{name} follows the detector's gradients, and {type(target.detector).__name__} has no "
                         f"differentiable image path (picture_logits{': ' + reason if reason else ''}); attack it "
                         f"with 'square' (queries only) or 'strongest_image'")


def _run(name: str, images, rows, severity: int, rngs, context, one: Callable, captions=None) -> list:
    """`one(target, picture, rng) -> (picture, record)` for each meme, records kept per meme in the context."""
    from ..data.pictures import as_picture, is_tensor_batch, to_array

    arrays = not is_tensor_batch(list(images))
    pictures = [as_picture(x, getattr(context.detector, "device", None)) for x in images]
    out, records = [], []
    for target, picture, rng, row in zip(targets(context, rows, captions), pictures, rngs, rows):
        attacked, record = one(target, picture, rng, row)
        record = {"queries": target.queries, **record}
        record.pop("margin", None)
        record["success"] = bool(margin(target.scores([attacked])[0], target.label) < 0)
        target.queries -= 1  # judging the outcome is the run's own evaluation, not the attack's query
        records.append(record)
        out.append(to_array(attacked) if arrays else attacked)
    keep_records(context, name, severity, rows, records)
    return out


def keep_records(context, name: str, severity: int, rows, records: list[dict]) -> None:
    """Per-meme records of an image attack, by context row, in `context.outcomes[("image", name, severity)]`."""
    table = context.outcomes.setdefault(("image", name, severity), {})
    for r, record in zip(rows, records):
        table[int(r)] = record


def pgd_batch(norm: str):
    def batch(images, rows, severity, rngs, context, captions=None, name=f"pgd_{norm}", restarts=1):
        def one(target, picture, rng, row):
            _white_box_or_error(name, target)
            eps = _budget(norm, severity, picture.shape)
            return restarted(lambda g: pgd(target, picture, eps, norm, g), target, rng, restarts)

        return _run(name, images, rows, severity, rngs, context, one, captions)

    return batch


def apgd_batch(loss: str, norm: str = "linf"):
    def batch(images, rows, severity, rngs, context, captions=None, name=APGD_NAMES[loss, norm], restarts=1):
        def one(target, picture, rng, row):
            _white_box_or_error(name, target)
            eps = _budget(norm, severity, picture.shape)
            if loss == "dlr_t":
                return restarted(lambda g: apgd_targeted(target, picture, eps, g, norm=norm), target, rng, restarts)
            return restarted(lambda g: apgd(target, picture, eps, loss, g, norm=norm), target, rng, restarts)

        return _run(name, images, rows, severity, rngs, context, one, captions)

    return batch


def square_batch(images, rows, severity, rngs, context, captions=None, name="square", restarts=1, queries=None):
    def one(target, picture, rng, row):
        eps = _budget("linf", severity, picture.shape)
        return restarted(lambda g: square(target, picture, eps, g, queries), target, rng, restarts)

    return _run(name, images, rows, severity, rngs, context, one, captions)


def member_generator(context, member: str, row: int, severity: int, fallback: np.random.Generator):
    """The generator `member` draws for this meme when it runs alone, so an ensemble repeats each member's own
    attack and is never weaker than it (a library caller's context without ids gets `fallback`)."""
    from .registry import get

    if context.ids is None:
        return fallback
    return get(member).rng(context.seed, context.ids[row], severity)


def strongest_batch(images, rows, severity, rngs, context, captions=None, name="strongest_image", queries=None):
    """The cheaper ensemble per meme (AutoAttack's idea, not its sequence): APGD-CE, then APGD-DLR on what it
    missed, then Square (500 queries unless `queries`) on what both missed (white-box members skipped, and said so,
    for a detector without gradients). Each member draws its own generator, so the ensemble fools every meme any
    member alone fools."""
    eps = float(LINF_LEVELS[severity - 1])

    def one(target, picture, rng, row):
        def member(attack: str):
            g = member_generator(context, attack, row, severity, rng)
            if attack == "square":
                return lambda: square(target, picture, eps, g, queries)
            return lambda: apgd(target, picture, eps, attack.split("_")[1], g)

        return first_to_fool(target, picture, [(m, member(m)) for m in ENSEMBLE
                                               if m == "square" or target.white_box])

    return _run(name, images, rows, severity, rngs, context, one, captions)


def autoattack_batch(images, rows, severity, rngs, context, captions=None, name="autoattack", queries=None):
    """AutoAttack's standard sequence per meme, less FAB-T (not built here): APGD-CE, then APGD-T (the targeted
    DLR toward the 9 highest other classes) on a task of three classes or more, then Square with 5,000 queries;
    each on the memes the ones before missed, each judged on the rounded picture through the detector's real path.
    A two-class task runs APGD-CE and Square (the targeted DLR needs a third class); a detector without gradients,
    Square alone."""
    eps = float(LINF_LEVELS[severity - 1])
    queries = AUTOATTACK_SQUARE_QUERIES if queries is None else queries

    def one(target, picture, rng, row):
        classes = len(getattr(context.detector, "classes", ()) or ()) or 2
        members = []
        if target.white_box:
            g_ce = member_generator(context, "apgd_ce", row, severity, rng)
            members.append(("apgd_ce", lambda: apgd(target, picture, eps, "ce", g_ce)))
            if classes >= 3:
                g_t = member_generator(context, "apgd_t", row, severity, rng)
                members.append(("apgd_t", lambda: apgd_targeted(target, picture, eps, g_t)))
        g_square = member_generator(context, "square", row, severity, rng)
        members.append(("square", lambda: square(target, picture, eps, g_square, queries)))
        return first_to_fool(target, picture, members)

    return _run(name, images, rows, severity, rngs, context, one, captions)


@register("pgd_linf", modality="image", family="pgd", needs_model=True, tags=("white_box", "per_meme"),
          batch=pgd_batch("linf"), takes="tensor", parameters={"restarts": 1})
def pgd_linf(x, severity, rng, context, index):
    """PGD, L-infinity (Madry et al. 2018): 10 steps of 2.5 eps / 10 from a random start; severity sets eps
    (1, 2, 4, 8, 16 /255); `pgd_linf:restarts=5` tries five random starts."""
    return pgd_batch("linf")([x], [index], severity, [rng], context)[0]


@register("pgd_l2", modality="image", family="pgd", needs_model=True, tags=("white_box", "per_meme"),
          batch=pgd_batch("l2"), takes="tensor", parameters={"restarts": 1})
def pgd_l2(x, severity, rng, context, index):
    """PGD, L2: 10 normalised-gradient steps from a random start; severity sets the RMS budget (0.5 .. 8 /255)."""
    return pgd_batch("l2")([x], [index], severity, [rng], context)[0]


@register("apgd_ce", modality="image", family="apgd", needs_model=True, tags=("white_box", "per_meme"),
          batch=apgd_batch("ce"), takes="tensor", parameters={"restarts": 1})
def apgd_ce(x, severity, rng, context, index):
    """APGD with the cross-entropy (Croce and Hein 2020), 100 steps, L-infinity 1 .. 16 /255 by severity."""
    return apgd_batch("ce")([x], [index], severity, [rng], context)[0]


@register("apgd_dlr", modality="image", family="apgd", needs_model=True, tags=("white_box", "per_meme"),
          batch=apgd_batch("dlr"), takes="tensor", parameters={"restarts": 1})
def apgd_dlr(x, severity, rng, context, index):
    """APGD with the DLR margin loss (the Carlini-Wagner margin for two classes), L-infinity 1 .. 16 /255."""
    return apgd_batch("dlr")([x], [index], severity, [rng], context)[0]


@register("apgd_l2", modality="image", family="apgd", needs_model=True, tags=("white_box", "per_meme"),
          batch=apgd_batch("ce", "l2"), takes="tensor", parameters={"restarts": 1})
def apgd_l2(x, severity, rng, context, index):
    """APGD with the cross-entropy in L2 (Croce and Hein 2020), 100 steps, L2 0.5 .. 8 /255 RMS by severity."""
    return apgd_batch("ce", "l2")([x], [index], severity, [rng], context)[0]


@register("apgd_t", modality="image", family="apgd", needs_model=True, tags=("white_box", "per_meme"),
          batch=apgd_batch("dlr_t"), takes="tensor", parameters={"restarts": 1})
def apgd_t(x, severity, rng, context, index):
    """APGD-T: APGD on the targeted DLR loss toward each of the 9 highest other classes (tasks of three classes or
    more), 100 steps each, L-infinity 1 .. 16 /255."""
    return apgd_batch("dlr_t")([x], [index], severity, [rng], context)[0]


@register("square", modality="image", family="square", needs_model=True, tags=("black_box", "per_meme"),
          batch=square_batch, takes="tensor", parameters={"restarts": 1, "queries": SQUARE_QUERIES})
def square_attack(x, severity, rng, context, index):
    """Square Attack (Andriushchenko et al. 2020): score-based black box, 500 queries per meme
    (`square:queries=5000`: AutoAttack's), L-infinity 1 .. 16 /255 by severity."""
    return square_batch([x], [index], severity, [rng], context)[0]


@register("strongest_image", modality="image", family="strongest_image", needs_model=True,
          tags=("white_box", "black_box", "per_meme", "ensemble"), batch=strongest_batch, takes="tensor",
          parameters={"queries": SQUARE_QUERIES})
def strongest_image(x, severity, rng, context, index):
    """The cheaper ensemble: the worst of APGD-CE, APGD-DLR and Square (500 queries) per meme, L-infinity
    1 .. 16 /255 (AutoAttack's idea; `autoattack` is its sequence)."""
    return strongest_batch([x], [index], severity, [rng], context)[0]


@register("autoattack", modality="image", family="autoattack", needs_model=True,
          tags=("white_box", "black_box", "per_meme", "ensemble"), batch=autoattack_batch, takes="tensor",
          parameters={"queries": AUTOATTACK_SQUARE_QUERIES})
def autoattack(x, severity, rng, context, index):
    """AutoAttack's standard sequence less FAB-T: APGD-CE, APGD-T (three classes or more), Square with 5,000
    queries, per meme, L-infinity 1 .. 16 /255."""
    return autoattack_batch([x], [index], severity, [rng], context)[0]


_RECORD_KEYS = {"success", "queries", "zero_gradient", "won_by", "tried", "black_box_beat_white_box",
                "words_changed", "white_box", "hidden"}


def summary(records: dict[int, dict]) -> dict:
    """What a report shows of an image attack's per-meme records: how many memes the detector gets wrong after it
    (`wrong_after_attack`, those it already got wrong clean included: how many it fooled, of those right clean, is
    the result's to count, judge.results.ConditionResult.fooled), queries, and the sanity flags."""
    values = [r for _, r in sorted(records.items()) if isinstance(r, dict)]
    n = len(values)
    judged = any("success" in r for r in values)  # image_scaling measures distances, not verdicts
    out = {"memes": n, "wrong_after_attack": sum(bool(r.get("success")) for r in values) if judged else None,
           "queries": int(sum(int(r.get("queries", 0)) for r in values)),
           "zero_gradient": sum(bool(r.get("zero_gradient")) for r in values)}
    if any("words_changed" in r for r in values):
        out["words_changed"] = float(np.mean([float(r.get("words_changed", 0.0)) for r in values]))
    if any("won_by" in r for r in values):
        won: dict[str, int] = {}
        for r in values:
            if r.get("won_by"):
                won[r["won_by"]] = won.get(r["won_by"], 0) + 1
        out["won_by"] = dict(sorted(won.items()))
        out["black_box_beat_white_box"] = sum(bool(r.get("black_box_beat_white_box")) for r in values)
    extra = sorted({k for r in values for k, v in r.items() if k not in _RECORD_KEYS and isinstance(v, float)})
    if extra:  # an attack's own measures (image_scaling's PSNR and view error): their medians
        out["medians"] = {k: float(np.nanmedian([float(r.get(k, np.nan)) for r in values])) for k in extra}
    hidden = sum(bool(r.get("hidden")) for r in values)
    flags = []
    if any("hidden" in r for r in values):  # image_scaling: a target hidden in what the detector's resize reads
        out["hidden"] = hidden
        if 2 * hidden > n:
            flags.append(f"the detector's own resize let a target hide in {hidden} of {n} memes (invisible at full "
                         f"size, seen once resized): its preprocessing is vulnerable; put area_resize or "
                         f"median_filter in front ([defence] image = [\"area_resize\"])")
    if out["zero_gradient"]:
        flags.append(f"zero gradient on {out['zero_gradient']} of {n} memes: the white-box attacks could not move "
                     f"them (a channel the detector ignores, or masked gradients)")
    if out.get("black_box_beat_white_box"):
        flags.append(f"Square fooled {out['black_box_beat_white_box']} memes the white-box attacks missed: the "
                     f"white-box attack is broken for them (gradient masking?)")
    out["flags"] = flags
    return out
