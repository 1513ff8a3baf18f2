"""Training-time augmentation with the registered perturbations: `typos@1-5:0.5` edits each meme's caption with
probability 0.5 per epoch, at a severity drawn from 1-5.

Every draw is keyed by (seed, epoch, meme id, perturbation), never by order or batch, so a training run is
reproducible and the same command draws the same edits: the feature store, which keys features by input, then holds
every augmented caption and picture once, and a second run of the command encodes nothing. The perturbation itself
is keyed as a test run keys it, with the epoch folded into the meme's key (`id#e3`), so each epoch sees a fresh
edit of the same meme.
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ...errors import BackendMissing, ConfigError, UnknownNameError

DEFAULT_PROBABILITY = 0.5
_SPEC = re.compile(r"^(?P<name>[^@:]+)(?:@(?P<low>\d+)(?:-(?P<high>\d+))?)?(?::(?P<p>[^:]+))?$")


@dataclass(frozen=True)
class Augmentation:
    """One augmentation: a registered perturbation, the severities drawn from (empty: one without severities) and
    the probability that a meme is edited by it in an epoch."""

    name: str
    modality: str
    severities: tuple[int, ...]
    probability: float

    @property
    def spec(self) -> str:
        """The form it was given in (canonical): `typos@1-5:0.5`."""
        sev = ""
        if self.severities:
            low, high = self.severities[0], self.severities[-1]
            sev = f"@{low}" if low == high else f"@{low}-{high}"
        return f"{self.name}{sev}:{self.probability:g}"

    def draw(self, seed: int, epoch: int, meme_id: str) -> int | None | bool:
        """Whether this meme is edited in this epoch, and at which severity: False when not, else the severity
        (None for a perturbation without severities)."""
        digest = hashlib.blake2b(f"augment\0{seed}\0{epoch}\0{meme_id}\0{self.name}".encode(),
                                 digest_size=16).digest()
        rng = np.random.default_rng(np.frombuffer(digest, dtype=np.uint32))
        if rng.random() >= self.probability:
            return False
        return int(self.severities[rng.integers(len(self.severities))]) if self.severities else None


def parse_augmentation(text: str, where: str = "--augment") -> Augmentation:
    """`NAME[@S|@LOW-HIGH][:P]` checked against the registry: a known perturbation that needs no model (attacks
    train through --adversarial), severities it has, a probability in 0..1 (default 0.5)."""
    from ...perturb.registry import get

    match = _SPEC.match(text.strip())
    if not match:
        raise ConfigError(f"{where} {text!r}: expected NAME[@SEVERITY or @LOW-HIGH][:PROBABILITY], e.g. "
                          f"typos@1-5:0.5")
    name = match["name"].strip()
    try:
        perturbation = get(name)
    except UnknownNameError as exc:
        raise ConfigError(f"{where} {text!r}: {exc}") from None
    if perturbation.needs_model:
        raise ConfigError(f"{where} {text!r}: {name} attacks the detector being trained (a model-aware attack); "
                          f"train against it with --adversarial {name}@SEVERITY instead")
    valid = perturbation.parameters.severities
    if match["low"] is None:
        severities = valid
    elif not valid:
        raise ConfigError(f"{where} {text!r}: {name} has no severities; write it without @")
    else:
        low, high = int(match["low"]), int(match["high"] or match["low"])
        if low > high or low not in valid or high not in valid:
            raise ConfigError(f"{where} {text!r}: {name}'s severities are {valid[0]}-{valid[-1]}; "
                              f"@{match['low']}{'-' + match['high'] if match['high'] else ''} is out of range")
        severities = tuple(s for s in valid if low <= s <= high)
    try:
        probability = DEFAULT_PROBABILITY if match["p"] is None else float(match["p"])
    except ValueError:
        probability = float("nan")
    if not 0.0 <= probability <= 1.0:
        raise ConfigError(f"{where} {text!r}: the probability {match['p']!r} is not a number in 0..1")
    return Augmentation(perturbation.name, perturbation.modality, tuple(severities), probability)


def parse_augmentations(specs: Sequence[str], where: str = "--augment") -> tuple[Augmentation, ...]:
    """Each spec parsed; a perturbation named twice is an error (its draws would be the same coin)."""
    parsed = tuple(parse_augmentation(s, where) for s in specs)
    seen = [a.name for a in parsed]
    twice = sorted({n for n in seen if seen.count(n) > 1})
    if twice:
        raise ConfigError(f"{where}: {', '.join(twice)} named more than once; give one range per perturbation")
    return parsed


def check_backends(augmentations: Sequence[Augmentation], caption: str, picture) -> None:
    """Each augmentation tried once on one meme before any encoding: one whose backend is missing here
    (back-translation without its MarianMT models) is said now, not after minutes of training."""
    from ...perturb.registry import get

    for aug in augmentations:
        perturbation = get(aug.name)
        item = caption if aug.modality == "text" else picture
        extra = {"captions": [caption]} if perturbation.traits.caption_source else {}
        try:
            perturbation.apply([item], ["probe"], aug.severities[0] if aug.severities else None, seed=0, **extra)
        except BackendMissing as exc:
            raise ConfigError(f"--augment {aug.spec}: {exc}") from None


def reads_pictures(augmentations: Sequence[Augmentation]) -> bool:
    return any(a.modality == "image" for a in augmentations)


def augment_memes(memes: Sequence, augmentations: Sequence[Augmentation], seed: int, epoch: int,
                  device: str = "cpu", pictures: bool | None = None) -> tuple[list[str], list | None, list[list[str]]]:
    """The memes' captions and pictures as epoch `epoch` sees them: each augmentation applied, in the order given,
    to the memes its draw picks (text ones to the caption, image ones to the picture, a caption-drawing edit with
    the caption as edited so far). Returns (captions, pictures or None when `pictures` is False and no augmentation
    reads them, what was applied to each meme as `name@severity`)."""
    from ...perturb.registry import get

    captions = [m.text for m in memes]
    wanted = reads_pictures(augmentations) if pictures is None else pictures
    shown = [m.picture(device) for m in memes] if wanted else None
    applied: list[list[str]] = [[] for _ in memes]
    for aug in augmentations:
        perturbation = get(aug.name)
        picked: dict = {}
        for i, meme in enumerate(memes):
            severity = aug.draw(seed, epoch, meme.id)
            if severity is not False:
                picked.setdefault(severity, []).append(i)
        for severity, rows in sorted(picked.items(), key=lambda kv: (kv[0] is None, kv[0] or 0)):
            keys = [f"{memes[i].id}#e{epoch}" for i in rows]
            if aug.modality == "text":
                out = perturbation.apply([captions[i] for i in rows], keys, severity, seed=seed)
                for i, value in zip(rows, out):
                    captions[i] = value
            else:
                extra = {"captions": [captions[i] for i in rows]} if perturbation.traits.caption_source else {}
                out = perturbation.apply([shown[i] for i in rows], keys, severity, seed=seed, **extra)
                for i, value in zip(rows, out):
                    shown[i] = value
            label = aug.name if severity is None else f"{aug.name}@{severity}"
            for i in rows:
                applied[i].append(label)
    return captions, shown, applied
