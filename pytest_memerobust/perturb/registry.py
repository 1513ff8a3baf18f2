"""Perturbations by name: a decorator records each one; third parties add theirs through an entry-point group.

A perturbation is a pure function `fn(x, severity, rng)` of one caption (str) or one picture, with an explicit
`numpy.random.Generator`. `apply` derives that generator from (seed, meme id, name, severity), so an output is the
same on every run, machine and batch order.

A picture is a uint8 tensor 3 x H x W on the detector's device (data/pictures.py). An image perturbation registered with
`takes="tensor"` (or a `batch` function, which takes either kind) computes on that device; one registered with
`takes="array"` (a third party's numpy function, or a step that must draw with PIL) gets an H x W x 3 array and its
result is moved back, at that step only. Pictures come back in the kind they were given: tensors stay tensors on
their device; arrays handed in by a library user come back as arrays.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import Callable, Iterable, Sequence

import numpy as np

from ..errors import UnknownNameError

ENTRY_POINT_GROUP = "pytest_memerobust.perturbations"
MODALITIES = ("text", "image")


@dataclass(frozen=True)
class PerturbationCode:
    """The functions that compute a perturbation, and what they take."""

    fn: Callable = field(repr=False)
    # many items at once: fn(items, severity, rngs), or for attacks fn(items, indices, severity, rngs, context);
    # for pictures it takes tensors or arrays and returns the kind it was given
    batch: Callable | None = field(default=None, repr=False)
    # what `fn` takes for a picture: "tensor" (3 x H x W uint8 on its device) or "array" (H x W x 3 uint8)
    takes: str = "array"
    doc: str = ""  # the first line of fn's docstring (what `memerobust list` prints)


@dataclass(frozen=True)
class Traits:
    """What a perturbation does to a meme besides its own side: whether the label still holds, and how an image
    edit uses the caption (draws it, acts on where it sits, or chooses it)."""

    label_preserving: bool = True
    # An image edit that draws a caption, fn(x, severity, rng, caption): "condition" draws the caption the
    # condition gives the text channel (pixels and text agree), "clean" the clean one (they disagree under a
    # caption attack).
    caption_source: str | None = None
    # An image edit that acts on the text the picture shows: fn(x, severity, rng, ..., text_boxes=boxes or None)
    # (data/text_boxes.py: where the caption sits, from an OCR reading or the renderer).
    reads_text_boxes: bool = False
    # a joint attack: an image attack that also chooses the caption the detector reads with its picture (the
    # engine reads that caption as the condition's text side; joint.py)
    rewrites_caption: bool = False


@dataclass(frozen=True)
class Parameters:
    """How strong a perturbation is asked to be: its severities and, for an attack, its integer parameters; and
    what its random generators are keyed by."""

    severities: tuple[int, ...] = (1, 2, 3, 4, 5)
    # False: one generator per (seed, meme) for every severity: an attack whose severities are points on one search
    # (HotFlip: severity k is the search after k's number of edits), so the severities share it
    keyed_by_severity: bool = True
    # the integer parameters an attack takes, with their defaults (`apgd_ce:restarts=5`, `square:queries=5000`):
    # `batch` takes them, and the name to record its outcomes under, as keywords
    defaults: tuple[tuple[str, int], ...] = ()
    settings: tuple[tuple[str, int], ...] = ()  # the parameters this name sets (the others keep their defaults)
    # the name its generators are keyed by: an attack with parameters draws what its plain attack draws
    key: str = ""


@dataclass(frozen=True)
class Perturbation:
    """A registered perturbation: its name, side and family, its code, whether it attacks the detector, its tags,
    what it does besides its side, and how strong it is asked to be."""

    name: str
    modality: str
    family: str
    code: PerturbationCode
    needs_model: bool = False  # an attack: crafted against the detector (AttackContext)
    tags: frozenset[str] = frozenset()
    traits: Traits = Traits()
    parameters: Parameters = Parameters()

    def rng(self, seed: int, meme_id: str, severity: int | None) -> np.random.Generator:
        """The generator for one (seed, meme, perturbation, severity; not the severity for an attack not
        `keyed_by_severity`): independent of order and batch."""
        parameters = self.parameters
        key = (f"{seed}\0{meme_id}\0{parameters.key or self.name}\0"
               f"{severity if parameters.keyed_by_severity else '*'}").encode()
        digest = hashlib.blake2b(key, digest_size=16).digest()
        return np.random.default_rng(np.frombuffer(digest, dtype=np.uint32))

    @property
    def universal(self) -> bool:
        """An attack that fits one thing over many memes (a trigger, a UAP's pattern) and applies it to each: fitted
        once, before the shards, and shared with them (tag "universal"). Every other attack is per meme: it runs
        on each shard's memes, wherever the shard is evaluated."""
        return self.needs_model and "universal" in self.tags

    def check_severity(self, severity: int | None) -> None:
        severities = self.parameters.severities
        if severities and severity not in severities:
            raise ValueError(f"perturbation {self.name!r} has no severity {severity!r}; valid: {list(severities)}")

    def __call__(self, x, severity: int | None, rng: np.random.Generator, *extra):
        """One item; `extra` is what the kind needs besides (the caption, for a caption-drawing edit)."""
        self.check_severity(severity)
        return self._one(x, severity, rng, *extra)

    def _one(self, x, severity, rng, *extra, **keywords):
        """`fn` on one item, converting a picture to the kind `fn` takes and the result back to the kind given."""
        fn = self.code.fn
        if self.modality != "image":
            return fn(x, severity, rng, *extra, **keywords)
        from ..data.pictures import as_picture, to_array

        given_tensor = not isinstance(x, np.ndarray)
        if self.code.takes == "tensor":
            out = fn(as_picture(x), severity, rng, *extra, **keywords)
            return out if given_tensor else to_array(out)
        if given_tensor:  # a numpy step: the picture leaves its device for this step only
            return as_picture(fn(to_array(x), severity, rng, *extra, **keywords), x.device)
        return fn(x, severity, rng, *extra, **keywords)

    def apply(self, items: Sequence, meme_ids: Sequence[str], severity: int | None, seed: int,
              context=None, captions: Sequence[str] | None = None, text_boxes: Sequence | None = None,
              block: int | None = None) -> list:
        """Batch in, batch out: each item perturbed with its own deterministic generator. A perturbation that
        `needs_model` (a white-box attack) also receives `context` (an AttackContext) and the item's index; one
        that has a `caption_source` receives each item's caption; one that `reads_text_boxes`, each picture's text
        boxes (None for a picture whose boxes are unknown). `block`: a batched attack runs on blocks of this many
        items (from the first), each on its own, so an item's result depends on its block and never on how many
        items came with it: a shard that starts at a multiple of `block` gets what one pass over everything gets."""
        self.check_severity(severity)
        if text_boxes is not None and len(text_boxes) != len(items):
            raise ValueError(f"perturbation {self.name!r}: {len(text_boxes)} sets of text boxes for {len(items)} "
                             f"pictures")
        boxes = list(text_boxes) if text_boxes is not None else [None] * len(items)
        batch = self.code.batch

        def keywords(k: int) -> dict:
            return {"text_boxes": boxes[k]} if self.traits.reads_text_boxes else {}

        if self.traits.caption_source:
            if captions is None or len(captions) != len(items):
                raise ValueError(f"perturbation {self.name!r} draws the caption onto the picture: it needs one "
                                 f"caption per picture")
            return [self._one(x, severity, self.rng(seed, mid, severity), caption, **keywords(k))
                    for k, (x, mid, caption) in enumerate(zip(items, meme_ids, captions))]
        if not self.needs_model:
            rngs = [self.rng(seed, mid, severity) for mid in meme_ids]
            if batch is not None:  # batched on the pictures' device; same result per item
                return batch(list(items), severity, rngs)
            return [self._one(x, severity, rng, **keywords(k)) for k, (x, rng) in enumerate(zip(items, rngs))]
        if context is None:
            raise ValueError(f"perturbation {self.name!r} attacks a detector: it needs an AttackContext")
        rngs = [self.rng(seed, mid, severity) for mid in meme_ids]
        items = list(items)
        # A caption OCR read as nothing has nothing to attack: it stays empty. The others keep their positions,
        # which index the detector's labels.
        kept = [i for i, x in enumerate(items) if self.modality != "text" or str(x).strip()]
        out = list(items)
        if batch is not None:  # same result per item, computed a whole batch (or block) at once
            step = block or max(1, len(items))
            for start in range(0, len(items), step):
                rows = [i for i in kept if start <= i < start + step]
                if rows:
                    for i, value in zip(rows, batch([items[i] for i in rows], rows, severity,
                                                    [rngs[i] for i in rows], context)):
                        out[i] = value
            return out
        for i in kept:
            out[i] = self._one(items[i], severity, rngs[i], context, i)
        return out


_REGISTRY: dict[str, Perturbation] = {}
_entry_points_loaded = False


def register(
    name: str,
    *,
    modality: str,
    family: str | None = None,
    severities: Iterable[int] | None = (1, 2, 3, 4, 5),
    label_preserving: bool = True,
    needs_model: bool = False,
    caption_source: str | None = None,
    reads_text_boxes: bool = False,
    tags: Iterable[str] = (),
    batch: Callable | None = None,
    takes: str = "array",
    rewrites_caption: bool = False,
    parameters: dict[str, int] | None = None,
    keyed_by_severity: bool = True,
):
    """Decorator that records `fn(x, severity, rng)` under `name`; `takes` says whether an image perturbation's
    `fn` takes a picture tensor or an array (see the module's docstring); `parameters`, an attack's integer
    parameters with their defaults (its `batch` takes them as keywords); `keyed_by_severity=False`, an attack whose
    severities share one generator per meme (Parameters.keyed_by_severity)."""
    if rewrites_caption and (modality != "image" or not needs_model):
        raise ValueError(f"perturbation {name!r}: only an image attack (needs_model) may rewrite the caption")
    if takes not in ("tensor", "array"):
        raise ValueError(f"takes must be 'tensor' or 'array', got {takes!r}")
    if modality not in MODALITIES:
        raise ValueError(f"modality must be one of {MODALITIES}, got {modality!r}")
    if caption_source not in (None, "condition", "clean"):
        raise ValueError(f"caption_source must be 'condition' or 'clean', got {caption_source!r}")

    def decorator(fn):
        old = _REGISTRY.get(name)
        # The same function imported again (a reloaded module) replaces its entry; another function may not.
        old_fn = old.code.fn if old is not None else None
        if old_fn is not None and (old_fn.__module__, old_fn.__qualname__) != (fn.__module__, fn.__qualname__):
            raise ValueError(f"perturbation {name!r} is already registered by {old_fn.__module__}")
        _REGISTRY[name] = Perturbation(
            name=name,
            modality=modality,
            family=family or name,
            code=PerturbationCode(fn, batch, takes,
                                  doc=(fn.__doc__ or "").strip().splitlines()[0] if fn.__doc__ else ""),
            needs_model=needs_model,
            tags=frozenset(tags) | {modality},
            traits=Traits(label_preserving=label_preserving, caption_source=caption_source,
                          reads_text_boxes=reads_text_boxes, rewrites_caption=rewrites_caption),
            parameters=Parameters(severities=tuple(severities or ()), keyed_by_severity=keyed_by_severity,
                                  defaults=tuple(sorted((parameters or {}).items()))),
        )
        return fn

    return decorator


def _ensure_loaded() -> None:
    """Import the built-in catalogue and, once, every third-party entry point."""
    global _entry_points_loaded
    from . import (  # noqa: F401  (each module registers its perturbations on import)
        attacks, augmix_tensor, catalogue, evasion, human_edits, image_attacks, imagenet_c, joint, meme_edits, scaling,
        text, textattack_recipes, translation, typographic, uap,
    )

    if not _entry_points_loaded:
        _entry_points_loaded = True
        for ep in entry_points(group=ENTRY_POINT_GROUP):
            ep.load()


PARAMETER_LIMITS = {"restarts": (1, 100), "queries": (1, 100_000)}  # what a parameter may be set to, inclusive


def split_parameters(name: str) -> tuple[str, str]:
    """`apgd_ce:restarts=5` -> ("apgd_ce", "restarts=5"): the parameters are the last `:` part when it holds
    `key=value` pairs (the part before may hold a namespace's `:`, as in `textattack:pwws`); none -> (name, "")."""
    base, _, tail = name.rpartition(":")
    return (base, tail) if base and "=" in tail else (name, "")


def get(name: str) -> Perturbation:
    _ensure_loaded()
    if name in _REGISTRY:
        return _REGISTRY[name]
    base, tail = split_parameters(name)
    if tail and base in _REGISTRY:
        pairs = [part.partition("=") for part in tail.split(",")]
        return _with_parameters(_REGISTRY[base], {key.strip(): value.strip() for key, _, value in pairs})
    from .textattack_recipes import unregistered_reason

    raise UnknownNameError("perturbation", name, _REGISTRY, unregistered_reason(name))


def _with_parameters(base: Perturbation, given: dict[str, str]) -> Perturbation:
    """`base` with its parameters set: named `base:key=value,...` (sorted, defaults left out, so equal settings
    share one name and `apgd_ce:restarts=1` is `apgd_ce`), drawing `base`'s generators."""
    from dataclasses import replace
    from functools import partial

    defaults = dict(base.parameters.defaults)
    values = {}
    for key, text in given.items():
        if key not in defaults:
            raise UnknownNameError(f"parameter of {base.name!r}", key, defaults,
                                   "it takes none" if not defaults else "")
        low, high = PARAMETER_LIMITS[key]
        if not text.isdigit() or not low <= int(text) <= high:
            raise UnknownNameError(f"value of {base.name}'s {key}", text, (),
                                   f"{key} is a whole number from {low} to {high}")
        values[key] = int(text)
    chosen = {k: v for k, v in sorted(values.items()) if v != defaults[k]}
    if not chosen:
        return base
    name = base.name + ":" + ",".join(f"{k}={v}" for k, v in chosen.items())
    if name not in _PARAMETERISED:
        batch = partial(base.code.batch, name=name, **chosen)

        def fn(x, severity, rng, context, index):
            return batch([x], [index], severity, [rng], context)[0]

        _PARAMETERISED[name] = replace(base, name=name, code=replace(base.code, fn=fn, batch=batch),
                                       parameters=replace(base.parameters, key=base.name,
                                                          settings=tuple(chosen.items())))
    return _PARAMETERISED[name]


_PARAMETERISED: dict[str, Perturbation] = {}


def names(modality: str | None = None, tag: str | None = None) -> list[str]:
    """Registered names, optionally only one modality or those carrying a tag."""
    _ensure_loaded()
    return sorted(
        p.name
        for p in _REGISTRY.values()
        if (modality is None or p.modality == modality) and (tag is None or tag in p.tags)
    )
