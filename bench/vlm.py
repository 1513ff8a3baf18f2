"""A prompted vision-language detector in the engine against the model's bare forward pass, on the same memes:
memes/s of the built-in grid's conditions (each one batch-by-batch through VlmDetector: chat template, processor,
one forward pass, label-word logits) next to memes/s of the forward pass alone on inputs already processed.

The model is a real-shape Qwen2-VL with random weights (`--config 2b`: Qwen2-VL-2B's dimensions) or the tests' tiny
one, saved to a temporary folder with a word-level tokenizer built here (tests/tiny_vlms.py), so nothing is
downloaded. The demo memes are drawn at `--size` pixels.

    python bench/vlm.py --config tiny --memes 16                               # a CPU smoke run
    python bench/vlm.py --config 2b --device cuda --memes 256 --size 512 --batch-size 16
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from tiny_vlms import CHAT_TEMPLATES, save_tiny_vlm, tokenizer  # noqa: E402

from pytest_memerobust.data.demo import demo_dataset  # noqa: E402
from pytest_memerobust.detectors import load_detector  # noqa: E402
from pytest_memerobust.detectors.cards import ModelCard, Network  # noqa: E402
from pytest_memerobust.detectors.vlm import PictureFeatures  # noqa: E402
from pytest_memerobust.engine import Condition, EncodingSettings, Engine  # noqa: E402

# Qwen2-VL-2B-Instruct's dimensions (its config.json), random weights
QWEN2_VL_2B = {"vision": {"depth": 32, "embed_dim": 1280, "hidden_size": 1536, "num_heads": 16, "mlp_ratio": 4,
                          "patch_size": 14, "spatial_merge_size": 2, "temporal_patch_size": 2, "in_channels": 3},
               "text": {"vocab_size": 151936, "hidden_size": 1536, "intermediate_size": 8960,
                        "num_hidden_layers": 28, "num_attention_heads": 12, "num_key_value_heads": 2,
                        "max_position_embeddings": 32768, "rope_theta": 1000000.0,
                        "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]}}}
CONDITIONS = [Condition(), Condition(text="typos", text_severity=3), Condition(image="gaussian_noise", image_severity=3),
              Condition(image="jpeg_compression", image_severity=3),
              Condition(text="typos", text_severity=3, image="gaussian_noise", image_severity=3)]


def save_2b(folder: Path) -> Path:
    """Qwen2-VL-2B's shape with random bf16 weights and the real image processor's defaults (a 512 px picture is
    324 merged patches), saved with a word-level tokenizer."""
    from transformers import Qwen2VLConfig, Qwen2VLForConditionalGeneration, Qwen2VLImageProcessor, Qwen2VLProcessor
    from transformers.models.qwen2_vl.video_processing_qwen2_vl import Qwen2VLVideoProcessor

    tok = tokenizer("qwen2_vl")
    ids = tok.convert_tokens_to_ids
    config = Qwen2VLConfig(vision_config=QWEN2_VL_2B["vision"],
                           text_config={**QWEN2_VL_2B["text"], "bos_token_id": tok.pad_token_id,
                                        "eos_token_id": tok.eos_token_id, "pad_token_id": tok.pad_token_id},
                           image_token_id=ids("<|image_pad|>"), video_token_id=ids("<|video_pad|>"),
                           vision_start_token_id=ids("<|vision_start|>"), vision_end_token_id=ids("<|vision_end|>"),
                           pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)
    torch.manual_seed(0)
    model = Qwen2VLForConditionalGeneration(config).to(torch.bfloat16)
    model.save_pretrained(folder)
    processor = Qwen2VLProcessor(image_processor=Qwen2VLImageProcessor(), tokenizer=tok,
                                 video_processor=Qwen2VLVideoProcessor(), chat_template=CHAT_TEMPLATES["qwen2_vl"])
    processor.save_pretrained(folder)
    return folder


def synchronize(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", choices=("tiny", "2b"), default="tiny")
    parser.add_argument("--memes", type=int, default=16)
    parser.add_argument("--size", type=int, default=512)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--batch-size", type=int, default=8)
    args = parser.parse_args()

    folder = Path(tempfile.mkdtemp(prefix="memerobust-vlm-"))
    started = time.perf_counter()
    folder = save_2b(folder) if args.config == "2b" else save_tiny_vlm("qwen2_vl", folder)
    card = ModelCard(name=f"qwen2-vl-{args.config}", architecture="vlm", classes=("non-hateful", "hateful"),
                     network=Network(params={"abstain_below": 0.0}, backbone={"kind": "vlm", "name": str(folder)}))
    detector = load_detector(card, device=args.device)
    print(f"model: {sum(p.numel() for p in detector.model.parameters()) / 1e9:.2f} B parameters, "
          f"{detector.model.dtype}, on {args.device}; built and loaded in {time.perf_counter() - started:.1f} s")

    data = demo_dataset("test", size=args.size).head(args.memes)

    def grid_rate(pictures: PictureFeatures) -> float:
        detector.pictures = pictures
        engine = Engine(detector, data, asking=EncodingSettings(batch_size=args.batch_size))
        engine.predict(Condition())  # warm-up: decode the pictures, first kernels
        synchronize(args.device)
        started = time.perf_counter()
        for condition in CONDITIONS:
            engine.predict(condition)
        synchronize(args.device)
        return len(CONDITIONS) * len(data) / (time.perf_counter() - started)

    unshared = grid_rate(PictureFeatures(detector.model, 0))
    shared = PictureFeatures(detector.model, 4 * 2**30)
    grid = grid_rate(shared)
    engine = Engine(detector, data, asking=EncodingSettings(batch_size=args.batch_size))

    pictures, captions = engine.inputs("image", None, None), engine.inputs("text", None, None)
    batches = []
    for start in range(0, len(captions), args.batch_size):
        batch = detector.processor(images=[[p] for p in pictures[start : start + args.batch_size]],
                                   text=detector.prompts(captions[start : start + args.batch_size]), padding=True,
                                   return_tensors="pt")
        batches.append({k: (v.to(args.device, detector.model.dtype) if torch.is_floating_point(v)
                            else v.to(args.device)) for k, v in batch.items()})
    with torch.inference_mode():
        detector.model(**batches[0], logits_to_keep=1)  # warm-up
        synchronize(args.device)
        started = time.perf_counter()
        for _ in range(len(CONDITIONS)):
            for batch in batches:
                detector.model(**batch, logits_to_keep=1)
        synchronize(args.device)
    bare = len(CONDITIONS) * len(data) / (time.perf_counter() - started)
    tokens = int(np.mean([b["input_ids"].shape[1] for b in batches]))
    print(f"{len(data)} memes at {args.size} px, {len(CONDITIONS)} conditions, batch {args.batch_size}, "
          f"{tokens} tokens per prompt")
    print(f"engine (the grid's conditions): {grid:.1f} memes/s, each distinct picture encoded once "
          f"({shared.pictures_encoded} vision passes for {(len(CONDITIONS) + 1) * len(data)} memes asked); "
          f"{unshared:.1f} memes/s encoding every picture every time")
    print(f"bare forward pass: {bare:.1f} memes/s; ratio bare / engine {bare / grid:.2f}")


if __name__ == "__main__":
    main()
