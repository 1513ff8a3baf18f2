"""How large an adaptation may be on an encoder, read from its configuration alone (backbones.backbone_config: no
weights), so that a size out of range is one line before anything loads or encodes (issue 62), not a traceback
after an attempt to allocate 160 GB:

    lora rank, adapter and      1 .. the layer width (LoRA's rank at most its narrowest projection; an adapter's
    compacter reduction         bottleneck, width // reduction, at least one unit)
    compacter phm               a divisor of both the layer width and its bottleneck (the Kronecker factors split both)
    prompt tokens               BERT (minilm): its positions less the longest caption (the prompt takes positions);
                                BLIP-2's Q-Former: its positions (the prompt joins after the caption's); VPT on a
                                ViT: its patch positions
"""
from __future__ import annotations

from dataclasses import dataclass

from ...errors import ConfigError


@dataclass(frozen=True)
class TowerLimits:
    """One encoder tower's limits: `width` the hidden size of its layers (what LoRA and the adapters wrap),
    `prompt` the most prompt tokens it takes (None: no prompt is placed on it), `prompt_why` how that follows."""

    name: str  # e.g. "the backbone's text encoder (kind 'minilm')"
    width: int
    prompt: int | None = None
    prompt_why: str = ""


def _minilm(config, tower: str) -> tuple:
    from ..backbones import MiniLMBackbone

    positions = config.max_position_embeddings
    caption = min(MiniLMBackbone.max_length, positions)  # captions are truncated to it: the longest bucket
    return config.hidden_size, positions - caption, f"its {positions} positions less {caption} for the longest caption"


def _blip2(config, tower: str) -> tuple:
    if tower == "text":
        qformer = config.qformer_config
        positions = qformer.max_position_embeddings
        return qformer.hidden_size, positions, f"the Q-Former's {positions} positions"
    vision = config.vision_config
    patches = (vision.image_size // vision.patch_size) ** 2 + 1
    return vision.hidden_size, patches, f"its {patches} patch positions"


def _clip(config, tower: str) -> tuple:
    return getattr(config, f"{tower}_config").hidden_size, None, ""


def _open_clip(config: dict, tower: str) -> tuple:
    from open_clip.model import CLIPTextCfg, CLIPVisionCfg

    table, defaults = (config.get("text_cfg", {}), CLIPTextCfg) if tower == "text" else \
        (config.get("vision_cfg", {}), CLIPVisionCfg)
    return table.get("width", defaults.width), None, ""


READERS = {"minilm": _minilm, "hf-blip2": _blip2, "hf-clip": _clip, "open_clip": _open_clip}


def tower_limits(spec: dict, towers, prefix: str) -> list[TowerLimits]:
    """The limits of `towers` ("text", "vision") of the encoder `spec` names, saved under `prefix`; empty where its
    configuration cannot be read here without building it (its library or files missing)."""
    from ..backbones import backbone_config
    from ..cards import WeightsNotHere

    kind = spec.get("kind")
    if kind not in READERS or not towers:
        return []
    try:
        config = backbone_config(spec)
    except (ImportError, WeightsNotHere):  # its library or files missing: the build (or the weights check) says so
        return []
    return [] if config is None else [TowerLimits(f"the {prefix}'s {tower} encoder (kind {kind!r})",
                                                  *READERS[kind](config, tower)) for tower in towers]


def check_rank(rank: int, limits: list[TowerLimits], where: str) -> None:
    """A LoRA rank at most the narrowest tower's layer width, else one ConfigError naming `where` the spec came
    from, the value and the valid range."""
    _within_width("rank", rank, "", limits, where)


def check_reduction(reduction: int, limits: list[TowerLimits], where: str) -> None:
    """An adapter's reduction at most the narrowest layer width: its bottleneck, width // reduction, holds a unit."""
    _within_width("reduction", reduction, " (its bottleneck, width // reduction, would be empty)", limits, where)


def _within_width(key: str, value: int, why: str, limits: list[TowerLimits], where: str) -> None:
    narrowest = min(limits, key=lambda t: t.width)
    if value > narrowest.width:
        raise ConfigError(f"{where}: {key} = {value} is more than the layer width of {narrowest.name}{why}: valid "
                          f"1..{narrowest.width}")


def check_kronecker(phm: int, reduction: int, limits: list[TowerLimits], where: str) -> None:
    """Compacter's `phm` Kronecker factors dividing every tower's layer width and its bottleneck (width //
    `reduction`), else one ConfigError naming the tower and the valid counts."""
    splits = [(t, t.width, t.width // reduction) for t in limits]
    bad = next(((t, w, b) for t, w, b in splits if w % phm or b % phm), None)
    if bad is not None:
        valid = [n for n in range(1, min(b for _, _, b in splits) + 1) if all(w % n == b % n == 0
                                                                               for _, w, b in splits)]
        tower, width, bottleneck = bad
        raise ConfigError(f"{where}: phm = {phm} Kronecker factors must divide both the layer width {width} and "
                          f"its bottleneck {bottleneck} (width // reduction {reduction}) of {tower.name}: valid "
                          f"phm {', '.join(map(str, valid))}")


def check_prompt_tokens(tokens: int, limits: list[TowerLimits], where: str) -> None:
    """As many prompt tokens as the tightest tower that places them takes, else one ConfigError saying how many
    it takes and why."""
    placed = [t for t in limits if t.prompt is not None]
    if not placed:
        return
    tightest = min(placed, key=lambda t: t.prompt)
    if tokens > tightest.prompt:
        valid = f"1..{tightest.prompt}" if tightest.prompt >= 1 else "none"
        raise ConfigError(f"{where}: tokens = {tokens} is more prompt tokens than {tightest.name} takes: valid "
                          f"{valid} ({tightest.prompt_why})")
