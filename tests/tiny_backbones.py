"""Tiny random configurations of every backbone kind, shared by the tests that run suites and attacks on each:
open_clip, transformers CLIP and BLIP-2 built from inline configs (random frozen weights), and the real MiniLM
caption encoder (or, where a test needs only its code path, a tiny BERT saved as a downloaded one is:
`save_tiny_bert`). Each becomes a MemeCLIP / MemeBLIP2 card with a head of width 32."""
from __future__ import annotations

from pytest_memerobust.detectors.training.checkpoint import _toml_value

OPEN_CLIP_TINY = {"embed_dim": 32,
                  "vision_cfg": {"image_size": 64, "layers": 2, "width": 32, "head_width": 16, "patch_size": 16},
                  "text_cfg": {"context_length": 77, "vocab_size": 49408, "width": 32, "heads": 2, "layers": 2}}
HF_CLIP_TINY = {"projection_dim": 32,
                "text_config": {"vocab_size": 30522, "hidden_size": 32, "intermediate_size": 64,
                                "num_hidden_layers": 2, "num_attention_heads": 2, "max_position_embeddings": 77,
                                "bos_token_id": 101, "eos_token_id": 102, "pad_token_id": 0},
                "vision_config": {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
                                  "num_attention_heads": 2, "image_size": 64, "patch_size": 16}}
BLIP2_TINY = {"num_query_tokens": 8, "image_text_hidden_size": 32,
              "vision_config": {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
                                "num_attention_heads": 2, "image_size": 64, "patch_size": 8,
                                "initializer_range": 0.02},
              "qformer_config": {"vocab_size": 30522, "hidden_size": 32, "num_hidden_layers": 2,
                                 "num_attention_heads": 2, "intermediate_size": 64, "encoder_hidden_size": 32,
                                 "max_position_embeddings": 64, "cross_attention_frequency": 1,
                                 "use_qformer_text_input": True, "initializer_range": 0.5}}

# kind -> (architecture, head params, backbone spec)
KINDS = {
    "open_clip": ("memeclip", {"map_dim": 32}, {"kind": "open_clip", "config": OPEN_CLIP_TINY}),
    "hf-clip": ("memeclip", {"map_dim": 32}, {"kind": "hf-clip", "tokenizer": "minilm", "config": HF_CLIP_TINY}),
    "hf-blip2": ("memeblip2", {"map_dim": 32, "tda": True},
                 {"kind": "hf-blip2", "tokenizer": "minilm", "config": BLIP2_TINY}),
    "minilm": ("memeblip2", {"map_dim": 32}, {"kind": "minilm"}),
}


def save_tiny_bert(folder, seed: int = 0):
    """A 2-layer BERT sentence encoder (width 32) with MiniLM's tokenizer, saved the way a downloaded one is: what
    `{"kind": "minilm", "name": folder}` loads through the MiniLM backbone's code, at a fraction of its cost."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel

    from pytest_memerobust.detectors.tokenizers import MINILM_TOKENIZER

    torch.manual_seed(seed)
    BertModel(BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                         intermediate_size=64)).save_pretrained(folder)
    AutoTokenizer.from_pretrained(str(MINILM_TOKENIZER)).save_pretrained(folder)
    return folder


def card_toml(kind: str, backbone: dict | None = None) -> str:
    """A model card (TOML) of `kind`'s tiny detector, without a checkpoint: `memerobust train` gives it one.
    `backbone` replaces the kind's backbone spec (a tiny BERT's folder for "minilm")."""
    architecture, params, spec = KINDS[kind]
    backbone = spec if backbone is None else backbone
    return "\n".join([f'name = "tiny-{kind}"', f'architecture = "{architecture}"', 'task = "hate"',
                      'classes = ["non-hateful", "hateful"]', "", "[params]",
                      *(f"{key} = {_toml_value(value)}" for key, value in params.items()), "", "[backbone]",
                      *(f"{key} = {_toml_value(value)}" for key, value in backbone.items())]) + "\n"


def trained_detector(kind: str, epochs: int = 40, seed: int = 0, mode: str = "multimodal"):
    """`kind`'s tiny detector with its head trained on the demo memes, as `memerobust train` does; `mode` "image"
    trains the head on the image channel alone (the fusion mode of the channel ablation)."""
    import torch

    from pytest_memerobust.data.demo import demo_dataset
    from pytest_memerobust.detectors import ModelCard, Network, load_detector
    from pytest_memerobust.run.training.loop import train_head

    architecture, params, backbone = KINDS[kind]
    torch.manual_seed(seed)
    card = ModelCard(name=f"tiny-{kind}", architecture=architecture, classes=("non-hateful", "hateful"),
                     network=Network(params=dict(params), backbone=dict(backbone)))
    detector = load_detector(card)
    detector.head_module.mode = mode
    train_head(detector, demo_dataset("train"), demo_dataset("val"), epochs=epochs, lr=3e-3, seed=seed)
    detector.head_module.mode = "multimodal"
    return detector
