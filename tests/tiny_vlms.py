"""Tiny random vision-language models of real families, built here and saved to a folder, so the `vlm` detector kind
is tested offline through exactly the code a hub id takes (`AutoProcessor` / `AutoModelForImageTextToText`
`.from_pretrained(folder)`): a tokenizer trained on a few sentences, the family's own image processor and processor
class, a chat template in the family's style, and a model of a few hundred thousand parameters."""
from __future__ import annotations

from pathlib import Path

FAMILIES = ("llava", "qwen2_vl", "idefics3")

_WORDS = """yes no is this meme hateful answer or the caption of reads a you are content moderator who judges whether
memes are nobody wants those people here love wins go back home when wifi finally works and to in it that for on with
as be at by from they we say she he his her their what so up out if about get make can like time just know take people
into year your good some could them see other than then now look only come its over think also back after use two how
our work first well way even new because any these give day most us system user assistant image picture""".split()
SPECIAL = {"llava": ["<pad>", "<unk>", "<s>", "</s>", "<image>"],
           "qwen2_vl": ["<|endoftext|>", "<unk>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>",
                        "<|image_pad|>", "<|video_pad|>"],
           "idefics3": ["<|endoftext|>", "<unk>", "<|im_start|>", "<end_of_utterance>", "<fake_token_around_image>",
                        "<global-img>", "<image>"],
           "shieldgemma2": ["<pad>", "<unk>", "<bos>", "<eos>", "<start_of_turn>", "<end_of_turn>", "<start_of_image>",
                            "<end_of_image>", "<image_soft_token>"]}
EOS = {"llava": "</s>", "qwen2_vl": "<|im_end|>", "idefics3": "<end_of_utterance>", "shieldgemma2": "<eos>"}
CHAT_TEMPLATES = {
    # LLaVA 1.5's style: "USER: <image>\n... ASSISTANT:"
    # (transformers renders templates with trim_blocks: a newline right after a tag is dropped, hence {{ NL }})
    "llava": ("{% set NL = '\\n' %}{% for message in messages %}{% if message['role'] == 'system' %}"
              "{{ message['content'][0]['text'] }}{{ NL }}"
              "{% else %}{{ message['role'].upper() }}: {% for item in message['content'] %}"
              "{% if item['type'] == 'image' %}<image>{{ NL }}{% else %}{{ item['text'] }}{% endif %}{% endfor %}"
              "{{ NL }}{% endif %}{% endfor %}{% if add_generation_prompt %}ASSISTANT:{% endif %}"),
    # Qwen2-VL's style: <|im_start|>role ... <|im_end|>, the picture between vision markers
    "qwen2_vl": ("{% set NL = '\\n' %}{% for message in messages %}<|im_start|>{{ message['role'] }}{{ NL }}"
                 "{% for item in message['content'] %}{% if item['type'] == 'image' %}"
                 "<|vision_start|><|image_pad|><|vision_end|>{% else %}{{ item['text'] }}{% endif %}{% endfor %}"
                 "<|im_end|>{{ NL }}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant{{ NL }}"
                 "{% endif %}"),
    # Idefics3/SmolVLM's style: "<|im_start|>User:<image> ...<end_of_utterance>\nAssistant:"
    "idefics3": ("{% set NL = '\\n' %}<|im_start|>{% for message in messages %}"
                 "{{ message['role'] | capitalize }}:{% for item in message['content'] %}"
                 "{% if item['type'] == 'image' %}<image>{% else %} {{ item['text'] }}{% endif %}{% endfor %}"
                 "<end_of_utterance>{{ NL }}{% endfor %}{% if add_generation_prompt %}Assistant:{% endif %}"),
    # ShieldGemma 2's style: the policy inside a fixed question, the answer's turn opened
    "shieldgemma2": ("{% set NL = '\\n' %}{{ bos_token }}{% for message in messages %}<start_of_turn>user{{ NL }}"
                     "You are a policy expert. {% for item in message['content'] %}{% if item['type'] == 'image' %}"
                     "<start_of_image>{% else %}Policy: {{ item['text'] }} Does the image violate the policy? "
                     "Answer Yes or No.{% endif %}{% endfor %}<end_of_turn>{{ NL }}{% endfor %}"
                     "<start_of_turn>model{{ NL }}"),
}


def tokenizer(family: str):
    """A word-level tokenizer over `_WORDS` (capitalised too, so "Yes" and "No" are single tokens) and the family's
    special tokens, built without any download."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    special = SPECIAL[family]
    words = list(dict.fromkeys(_WORDS + [w.capitalize() for w in _WORDS] + list(".,:;!?\"'()-_/|<>")))
    vocab = {token: i for i, token in enumerate(special + [w for w in words if w not in special])}
    unk = "<unk>"
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token=unk))
    core.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split("\n", "isolated"),
                                                  pre_tokenizers.WhitespaceSplit(),
                                                  pre_tokenizers.Punctuation()])
    pad = special[0]
    fast = PreTrainedTokenizerFast(tokenizer_object=core, unk_token=unk, pad_token=pad,
                                   eos_token=EOS[family],
                                   additional_special_tokens=[t for t in special if t not in (pad, unk)])
    return fast


def vocab_size(tok) -> int:
    """One past the largest id the tokenizer can give (special tokens included, wherever they were numbered)."""
    return max(tok.get_vocab().values()) + 1


def save_tiny_vlm(family: str, folder: Path) -> Path:
    """Builds, seeds and saves a tiny random model of `family` with its processor into `folder`; returns it."""
    import torch

    folder = Path(folder)
    torch.manual_seed(0)
    tok = tokenizer(family)
    if family == "llava":
        model, processor = _llava(tok)
    elif family == "qwen2_vl":
        model, processor = _qwen2_vl(tok)
    elif family == "idefics3":
        model, processor = _idefics3(tok)
    else:
        raise ValueError(f"unknown family {family!r}; known: {FAMILIES}")
    model.save_pretrained(folder)
    processor.save_pretrained(folder)
    return folder


def save_tiny_decliner(folder: Path) -> Path:
    """A tiny Qwen2-VL whose label words ("Yes", "No") get almost none of its answer's mass: their rows of the output
    layer are zero and every other row is scaled up, so the other words' logits tower over theirs. With a card's
    default `abstain_below` it declines every meme, clean or perturbed."""
    import torch

    from pytest_memerobust.detectors.vlm import DEFAULT_LABEL_WORDS, label_token_ids

    folder = Path(folder)
    torch.manual_seed(0)
    tok = tokenizer("qwen2_vl")
    model, processor = _qwen2_vl(tok)
    with torch.no_grad():
        head = model.get_output_embeddings().weight
        head.mul_(200.0)
        head[[i for ids in label_token_ids(tok, DEFAULT_LABEL_WORDS) for i in ids]] = 0.0
    model.save_pretrained(folder)
    processor.save_pretrained(folder)
    return folder


def _llava(tok):
    from transformers import (CLIPImageProcessor, CLIPVisionConfig, LlamaConfig, LlavaConfig,
                              LlavaForConditionalGeneration, LlavaProcessor)

    vision = CLIPVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                              image_size=32, patch_size=16, projection_dim=32)
    text = LlamaConfig(vocab_size=vocab_size(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                       num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=512,
                       pad_token_id=tok.pad_token_id, bos_token_id=tok.convert_tokens_to_ids("<s>"),
                       eos_token_id=tok.eos_token_id)
    config = LlavaConfig(vision_config=vision, text_config=text,
                         image_token_index=tok.convert_tokens_to_ids("<image>"),
                         vision_feature_select_strategy="default", vision_feature_layer=-1)
    model = LlavaForConditionalGeneration(config).eval()
    images = CLIPImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32})
    processor = LlavaProcessor(image_processor=images, tokenizer=tok, patch_size=16,
                               vision_feature_select_strategy="default", num_additional_image_tokens=1,
                               chat_template=CHAT_TEMPLATES["llava"])
    return model, processor


def _qwen2_vl(tok):
    from transformers import Qwen2VLConfig, Qwen2VLForConditionalGeneration, Qwen2VLImageProcessor, Qwen2VLProcessor
    from transformers.models.qwen2_vl.video_processing_qwen2_vl import Qwen2VLVideoProcessor

    ids = tok.convert_tokens_to_ids
    vision = {"depth": 2, "embed_dim": 32, "hidden_size": 32, "num_heads": 2, "mlp_ratio": 2, "patch_size": 14,
              "spatial_merge_size": 2, "temporal_patch_size": 2, "in_channels": 3}
    text = {"vocab_size": vocab_size(tok), "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
            "num_attention_heads": 2, "num_key_value_heads": 2, "max_position_embeddings": 512,
            "rope_scaling": {"type": "mrope", "mrope_section": [2, 3, 3]}, "rope_theta": 10000.0,
            "bos_token_id": tok.pad_token_id, "eos_token_id": tok.eos_token_id, "pad_token_id": tok.pad_token_id}
    config = Qwen2VLConfig(vision_config=vision, text_config=text, image_token_id=ids("<|image_pad|>"),
                           video_token_id=ids("<|video_pad|>"), vision_start_token_id=ids("<|vision_start|>"),
                           vision_end_token_id=ids("<|vision_end|>"), pad_token_id=tok.pad_token_id,
                           eos_token_id=tok.eos_token_id)
    model = Qwen2VLForConditionalGeneration(config).eval()
    pixels = 4 * 28 * 28  # a 512 px picture becomes 2 x 2 merged patches: 4 image tokens
    images = Qwen2VLImageProcessor(min_pixels=pixels, max_pixels=pixels)
    videos = Qwen2VLVideoProcessor(min_pixels=pixels, max_pixels=pixels)
    processor = Qwen2VLProcessor(image_processor=images, tokenizer=tok, video_processor=videos,
                                 chat_template=CHAT_TEMPLATES["qwen2_vl"])
    return model, processor


def _idefics3(tok):
    """SmolVLM's architecture: a SigLIP-style tower (32 px, 8 px patches) whose 16 patches the connector's pixel
    shuffle (scale 2) makes 4 image tokens, one picture without splitting."""
    from transformers import (Idefics3Config, Idefics3ForConditionalGeneration, Idefics3ImageProcessor,
                              Idefics3Processor)

    vision = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
              "image_size": 32, "patch_size": 8}
    text = {"model_type": "llama", "vocab_size": vocab_size(tok), "hidden_size": 32, "intermediate_size": 64,
            "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 2, "max_position_embeddings": 512,
            "pad_token_id": tok.pad_token_id, "eos_token_id": tok.eos_token_id}
    config = Idefics3Config(vision_config=vision, text_config=text, scale_factor=2,
                            image_token_id=tok.convert_tokens_to_ids("<image>"), pad_token_id=tok.pad_token_id)
    model = Idefics3ForConditionalGeneration(config).eval()
    images = Idefics3ImageProcessor(do_image_splitting=False, size={"longest_edge": 32},
                                    max_image_size={"longest_edge": 32})
    processor = Idefics3Processor(image_processor=images, tokenizer=tok, image_seq_len=4,
                                  chat_template=CHAT_TEMPLATES["idefics3"])
    return model, processor


def save_tiny_shieldgemma2(folder: Path) -> Path:
    """A tiny random ShieldGemma 2 (Gemma 3 with a SigLIP tower, 4 image tokens) with its processor and a Gemma-style
    tokenizer (its boi/eoi/image tokens named as Gemma's are), saved to `folder`. The multimodal projection, which
    Gemma 3 initialises to zeros, is drawn at random so that the picture reaches the answer."""
    import torch
    from transformers import (Gemma3ImageProcessor, PreTrainedTokenizerFast, ShieldGemma2Config,
                              ShieldGemma2ForImageClassification, ShieldGemma2Processor)

    torch.manual_seed(0)
    words = tokenizer("shieldgemma2")
    tok = PreTrainedTokenizerFast(tokenizer_object=words.backend_tokenizer, unk_token="<unk>", pad_token="<pad>",
                                  eos_token="<eos>", bos_token="<bos>",
                                  extra_special_tokens={"boi_token": "<start_of_image>", "eoi_token": "<end_of_image>",
                                                        "image_token": "<image_soft_token>"})
    ids = tok.convert_tokens_to_ids
    text = {"vocab_size": vocab_size(tok), "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
            "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 16, "max_position_embeddings": 512,
            "sliding_window": 64, "pad_token_id": tok.pad_token_id, "eos_token_id": tok.eos_token_id,
            "bos_token_id": tok.bos_token_id, "initializer_range": 0.5}
    vision = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
              "image_size": 32, "patch_size": 8}
    config = ShieldGemma2Config(text_config=text, vision_config=vision, mm_tokens_per_image=4,
                                boi_token_index=ids("<start_of_image>"), eoi_token_index=ids("<end_of_image>"),
                                image_token_index=ids("<image_soft_token>"))
    config.yes_token_index, config.no_token_index = ids("Yes"), ids("No")
    model = ShieldGemma2ForImageClassification(config).eval()
    with torch.no_grad():
        torch.nn.init.normal_(model.model.model.multi_modal_projector.mm_input_projection_weight, std=0.5)
    processor = ShieldGemma2Processor(image_processor=Gemma3ImageProcessor(size={"height": 32, "width": 32}),
                                      tokenizer=tok, image_seq_length=4, chat_template=CHAT_TEMPLATES["shieldgemma2"])
    model.save_pretrained(folder)
    processor.save_pretrained(folder)
    return Path(folder)


if __name__ == "__main__":
    import sys
    import tempfile
    import time

    import torch
    from transformers import AutoModelForImageTextToText, AutoProcessor

    for family in sys.argv[1:] or FAMILIES:
        start = time.perf_counter()
        folder = save_tiny_vlm(family, Path(tempfile.mkdtemp()))
        processor = AutoProcessor.from_pretrained(folder, local_files_only=True)
        model = AutoModelForImageTextToText.from_pretrained(folder, local_files_only=True)
        processor.tokenizer.padding_side = "left"
        question = {"type": "text", "text": "Is this meme hateful"}
        conversation = [{"role": "user", "content": [{"type": "image"}, question]}]
        text = processor.apply_chat_template(conversation, add_generation_prompt=True, tokenize=False)
        picture = torch.randint(0, 256, (3, 512, 512), dtype=torch.uint8)
        batch = processor(images=[[picture]], text=[text], return_tensors="pt")
        logits = model(**batch).logits[:, -1]
        print(family, f"{sum(p.numel() for p in model.parameters()):,} parameters",
              f"{time.perf_counter() - start:.2f} s", repr(text), tuple(logits.shape))
