"""Where an adaptation reaches inside an encoder: per backbone kind and tower, its transformer layers, the Linear
projections LoRA wraps, the sites the adapters follow and the module the prompt tokens join (adaptation_methods.py
places its tensors there; adaptation.py checks a detector's encoders against it)."""
from __future__ import annotations

import re
from dataclasses import dataclass

from torch import nn

# The projections of a transformer layer by role: what LoRA's `targets` name
LORA_TARGETS = ("query", "key", "value", "attention_output", "mlp_in", "mlp_out")


@dataclass(frozen=True)
class Tower:
    """Where one encoder tower's transformer layers are, relative to the backbone module: `layers` matches each
    layer's module name; `projections` names, per LoRA target, the Linear layers inside a layer (paths absent from
    a layer are skipped); `adapter_sites` the modules whose output gets a residual adapter (the attention's output
    projection and the MLP's, before the residual sum); `width` the path of a LayerNorm giving the layer's width
    where a site is not a Linear; `prompt` the module whose output the prompt tokens join ("text": CoOp through the
    backbone's own `text_prompt`, a path: VPT-shallow through a hook on that module), None where a prompt cannot be
    placed simply, `prompt_refusal` saying why."""

    layers: str
    adapter_sites: tuple[str, ...]
    projections: dict | None = None
    width: str | None = None
    prompt: str | None = None
    prompt_refusal: str = ""


_BERT_PROJECTIONS = {"query": ("attention.self.query",), "key": ("attention.self.key",),
                     "value": ("attention.self.value",), "attention_output": ("attention.output.dense",),
                     "mlp_in": ("intermediate.dense",), "mlp_out": ("output.dense",)}
_CLIP_PROJECTIONS = {"query": ("self_attn.q_proj",), "key": ("self_attn.k_proj",), "value": ("self_attn.v_proj",),
                     "attention_output": ("self_attn.out_proj",), "mlp_in": ("mlp.fc1",), "mlp_out": ("mlp.fc2",)}
_CLIP_TEXT_REFUSAL = ("its caption encoder pools the end-of-text token under a causal mask, which context tokens "
                      "placed before it would shift")
_OPEN_CLIP_TOWER = dict(adapter_sites=("ls_1", "ls_2"), width="ln_1", prompt_refusal=_CLIP_TEXT_REFUSAL)
# backbone kind -> tower ("text", "image") -> Tower
LAYOUTS = {
    "minilm": {"text": Tower(r"model\.encoder\.layer\.\d+", ("attention.output.dense", "output.dense"),
                             _BERT_PROJECTIONS, prompt="text")},
    "hf-clip": {tower: Tower(rf"model\.{tower}_model\.encoder\.layers\.\d+", ("self_attn.out_proj", "mlp.fc2"),
                             _CLIP_PROJECTIONS, prompt_refusal=_CLIP_TEXT_REFUSAL)
                for tower in ("text", "vision")},
    "hf-blip2": {"text": Tower(r"model\.qformer\.encoder\.layer\.\d+", ("attention.output.dense", "output.dense"),
                               {**_BERT_PROJECTIONS, "query": ("attention.attention.query",),
                                "key": ("attention.attention.key",), "value": ("attention.attention.value",)},
                               prompt="text"),
                 "vision": Tower(r"model\.vision_model\.encoder\.layers\.\d+", ("self_attn.projection", "mlp.fc2"),
                                 {**_CLIP_PROJECTIONS, "query": ("self_attn.qkv",), "key": ("self_attn.qkv",),
                                  "value": ("self_attn.qkv",), "attention_output": ("self_attn.projection",)},
                                 prompt="model.vision_model.embeddings")},
    # open_clip's attention is torch's MultiheadAttention, whose projections are read as raw weights (no Linear
    # call that LoRA could wrap); its LayerScale slots (ls_1, ls_2) take the adapters.
    "open_clip": {"text": Tower(r"model\.transformer\.resblocks\.\d+", **_OPEN_CLIP_TOWER),
                  "vision": Tower(r"model\.visual\.transformer\.resblocks\.\d+", **_OPEN_CLIP_TOWER)},
}
LORA_REFUSAL = {"open_clip": "its attention is torch's MultiheadAttention, whose q/k/v/o projections are not "
                             "Linear layers LoRA can wrap"}


def towers_of(backbone: nn.Module, names: list[str]) -> list[Tower]:
    """The layouts of the towers `names` ("text", "vision") of `backbone`, by its kind."""
    layout = LAYOUTS[backbone.spec.get("kind")]
    return [layout[name] for name in names]


def layers(backbone: nn.Module, tower: Tower) -> list[tuple[str, nn.Module]]:
    """(module name, module) of every transformer layer of `tower` in `backbone`."""
    pattern = re.compile(tower.layers + r"\Z")
    return [(name, module) for name, module in backbone.named_modules() if pattern.match(name)]


def resolve(root: nn.Module, path: str) -> tuple[nn.Module, str, nn.Module | None]:
    """(parent, attribute, module) of `path` under `root`; module None where the path is absent."""
    *parents, name = path.split(".")
    parent = root
    for part in parents:
        parent = getattr(parent, part, None)
        if parent is None:
            return root, name, None
    return parent, name, getattr(parent, name, None)
