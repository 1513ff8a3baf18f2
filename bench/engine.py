"""What the evaluation engine costs against what the encoders alone cost: the Rainbow Noise grid plus every
ImageNet-C corruption (the built-in rainbow-noise.toml and imagenet-c.toml suites), measured in one run:

- engine: one Engine, each distinct input encoded once, the next perturbations computed in the background;
- ceiling: the encoders alone on device-ready inputs: the normalised pixels of exactly the distinct pictures the
  engine encoded (already resized, on the device), and its distinct captions;
- naive (unless --skip-naive): every condition on its own, re-encoding every picture and caption it shows;
- stages, each on the same distinct inputs, in pictures/s: decode (files or arrays to tensors on the device),
  perturb (every model-free image side of the grid), preprocess (resize, crop, normalise on the device), encode
  (the image encoder on those pixels), head; so the bottleneck is visible.

    python bench/engine.py --model memeclip --memes 64                 # the card's demo weights, on the CPU
    python bench/engine.py --backbone vit-l-14 --device cuda --memes 100 --size 512 --precision bf16 --skip-naive
    python bench/engine.py --data pridemm:/data/PrideMM:test --task hate --backbone vit-b-32 --device cuda
    python bench/engine.py --suites rainbow-noise.toml                 # the paper's grid alone

`--size` draws the demo memes at that many pixels (real memes are about 512). Attacks (HotFlip, universal triggers,
UAP) are left out unless --attacks: the naive way would fit them once per condition, and their queries count as
encoded inputs. Prints the times, the stage rates and the ratio the issue sets a target for (engine / ceiling
<= 1.5 on a GPU).
"""
from __future__ import annotations

import argparse
import dataclasses
import time

import numpy as np
import torch

from tabulate import tabulate

from pytest_memerobust.data import load_dataset
from pytest_memerobust.data.demo import demo_dataset
from pytest_memerobust.detectors import find_card, load_detector
from pytest_memerobust.engine import AttackState, Condition, EncodingSettings, Engine
from pytest_memerobust.perturb import get
from pytest_memerobust.run.options import training_spec
from pytest_memerobust.run.suite import builtin_suite_dir, load_suite


def clip_backbone(vision: dict, text_width: int, text_layers: int, projection: int) -> dict:
    """A CLIP of real shapes with random weights (the MiniLM WordPiece vocabulary): it times like the real one."""
    heads = text_width // 64
    return {"kind": "hf-clip", "tokenizer": "minilm", "config": {
        "projection_dim": projection,
        "text_config": {"vocab_size": 30522, "hidden_size": text_width, "intermediate_size": 4 * text_width,
                        "num_hidden_layers": text_layers, "num_attention_heads": heads,
                        "max_position_embeddings": 77, "bos_token_id": 101, "eos_token_id": 102, "pad_token_id": 0},
        "vision_config": {"intermediate_size": 4 * vision["hidden_size"], "image_size": 224, **vision}}}


BACKBONES = {  # name -> (backbone spec, MemeCLIP map_dim): CLIP ViT-L/14 is MemeCLIP's backbone
    "vit-l-14": (clip_backbone({"hidden_size": 1024, "num_hidden_layers": 24, "num_attention_heads": 16,
                                "patch_size": 14}, 768, 12, 768), 1024),
    "vit-b-32": (clip_backbone({"hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12,
                                "patch_size": 32}, 512, 12, 512), 768),
}


def grid(suites: list[str], attacks: bool) -> list[Condition]:
    """The conditions of built-in suites that need no extra backend (and no attack, unless asked)."""
    out = []
    for name in suites:
        for condition in load_suite(builtin_suite_dir() / name).conditions:
            sides = [get(n) for n in (condition.text, condition.image) if n]
            if any("needs_backend" in p.tags for p in sides) or (not attacks and any(p.needs_model for p in sides)):
                continue
            if condition not in out:
                out.append(condition)
    return out


class Recording:
    """The detector, remembering every input it is asked to encode (the engine's distinct inputs; pictures stay
    tensors on the device)."""

    def __init__(self, detector):
        self._detector, self.images, self.texts = detector, [], []

    def encode_images(self, images):
        self.images.extend(images)
        return self._detector.encode_images(images)

    def encode_texts(self, texts):
        self.texts.extend(texts)
        return self._detector.encode_texts(texts)

    def __getattr__(self, name):
        return getattr(self._detector, name)


def timed(fn) -> float:
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    start = time.perf_counter()
    fn()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return time.perf_counter() - start


def batches(items: list, size: int):
    for start in range(0, len(items), size):
        yield items[start : start + size]


def stage_rates(detector, data, conditions, pictures: list, texts: list, args) -> list[tuple[str, int, float]]:
    """(stage, inputs, seconds) for each stage of the image path, and the caption encoder, on the same inputs."""
    from pytest_memerobust.data.pictures import fit_to_encoder

    device = str(detector.device)
    autocast = torch.autocast(device.split(":")[0], dtype=torch.bfloat16, enabled=args.precision == "bf16")
    rows = []
    decoded: list = []
    rows.append(("decode", len(data), timed(lambda: decoded.extend(m.picture(device) for m in data.memes))))
    sides = dict.fromkeys((c.image, c.image_severity) for c in conditions if c.image)
    sides = [(get(n), s) for n, s in sides if not get(n).needs_model and not get(n).traits.caption_source]
    ids = [m.id for m in data.memes]
    rows.append(("perturb", len(sides) * len(decoded),
                 timed(lambda: [p.apply(decoded, ids, s, seed=0) for p, s in sides])))
    backbone = getattr(detector, "backbone", None)
    with torch.no_grad(), autocast:
        if backbone is not None and backbone.image_dim:
            from pytest_memerobust.detectors.backbones import CLIP_MEAN, CLIP_STD

            pixels: list = []
            rows.append(("preprocess", len(pictures), timed(lambda: pixels.extend(
                fit_to_encoder(b, backbone.image_size, backbone.center_crop, CLIP_MEAN, CLIP_STD, device)
                for b in batches(pictures, args.batch_size)))))
            rows.append(("encode pictures (ceiling)", len(pictures),
                         timed(lambda: [backbone.encode_pixels(b) for b in pixels])))
        elif pictures:
            rows.append(("encode pictures (ceiling)", len(pictures),
                         timed(lambda: [detector.encode_images(b) for b in batches(pictures, args.batch_size)])))
        rows.append(("encode captions (ceiling)", len(texts),
                     timed(lambda: [detector.encode_texts(b) for b in batches(texts, args.batch_size)])))
    n = len(pictures) or len(texts)
    image_features = np.zeros((n, 0), np.float32)
    if pictures:
        image_features = np.concatenate([detector.encode_images(b) for b in batches(pictures[:n], args.batch_size)])
    text_features = np.concatenate([detector.encode_texts(b) for b in batches((texts * n)[:n], args.batch_size)])
    rows.append(("head", n, timed(lambda: [detector.head(image_features[i : i + args.batch_size],
                                                         text_features[i : i + args.batch_size])
                                           for i in range(0, n, args.batch_size)])))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="memeclip", help="model card (with its demo weights unless --backbone)")
    parser.add_argument("--backbone", choices=sorted(BACKBONES), help="MemeCLIP on a CLIP of this size, random")
    parser.add_argument("--suites", nargs="+", default=["rainbow-noise.toml", "imagenet-c.toml"])
    parser.add_argument("--data", default="demo", help="a dataset spec, as --memerobust-data (default: demo memes)")
    parser.add_argument("--task", help="label task (default: the card's)")
    parser.add_argument("--size", type=int, help="draw the demo memes this many pixels square (real memes: 512)")
    parser.add_argument("--memes", type=int, default=64)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--precision", default="fp32", choices=("fp32", "bf16"))
    parser.add_argument("--attacks", action="store_true", help="include HotFlip, universal triggers and UAP")
    parser.add_argument("--skip-naive", action="store_true", help="when naive would take too long")
    args = parser.parse_args()

    card = find_card(args.model)
    if args.backbone:
        backbone, map_dim = BACKBONES[args.backbone]
        memeclip = find_card("memeclip")
        card = dataclasses.replace(memeclip, network=dataclasses.replace(
            memeclip.network, backbone=backbone, checkpoint=None, demo_weights=False,
            params={**memeclip.network.params, "map_dim": map_dim}))
    detector = load_detector(card, None, args.device)
    task = args.task or detector.card.task
    if args.size and not args.data.startswith("demo"):
        parser.error("--size draws demo memes: it goes with --data demo[:split]")
    if args.size:
        split = args.data.partition(":")[2] or "test"
        data, training_data = demo_dataset(split, size=args.size), demo_dataset("train", size=args.size)
    else:
        reads_pictures = "image" in getattr(detector, "modalities", ("image", "text"))  # caption-only data is fine
        data = load_dataset(args.data, require_images=reads_pictures)
        training_data = load_dataset(training_spec(args.data) or args.data, require_images=reads_pictures)
    data = data.labelled(task).head(args.memes)
    conditions = grid(args.suites, args.attacks)

    def training():
        return [m.text for m in training_data.memes], training_data.labels(task), training_data.memes

    def parts() -> dict:  # each engine's own attack state, as the engine built it before it took its parts
        return dict(asking=EncodingSettings(args.batch_size, args.precision),
                    attacks=AttackState(data.labels(task), training))

    def naive() -> None:
        for condition in conditions:  # a fresh engine per condition: nothing carried over
            Engine(detector, data, 0, **parts()).predict(condition)

    recording = Recording(detector)

    def engine() -> None:
        run = Engine(recording, data, 0, **parts())
        run.plan(conditions)
        for condition in conditions:
            run.predict(condition)

    engine_s = timed(engine)
    stages = stage_rates(detector, data, conditions, recording.images, recording.texts, args)
    ceiling_s = sum(seconds for name, _, seconds in stages if "ceiling" in name)
    naive_s = float("nan") if args.skip_naive else timed(naive)
    shown = len(conditions) * len(data)
    size = "x".join(str(v) for v in data.memes[0].picture().shape[1:])
    print(f"{detector.card.name}{f' ({args.backbone}-sized CLIP, random)' if args.backbone else ''} on {args.device}, "
          f"{args.precision}, batch {args.batch_size}, torch {torch.__version__} ({torch.get_num_threads()} threads); "
          f"{len(data)} memes of {size} ({data.name}) x {len(conditions)} conditions = {shown} (picture, caption) "
          f"pairs shown to the detector")
    print(f"inputs the engine encoded (attack queries included): {len(recording.images)} pictures, "
          f"{len(recording.texts)} captions (naive encodes {shown} of each)")
    print(tabulate([(name, n, f"{seconds:.3f}", f"{n / seconds:,.0f}" if seconds else "-")
                    for name, n, seconds in stages],
                   headers=["stage", "inputs", "seconds", "inputs/s"], colalign=("left", "right", "right", "right")))
    print(f"naive    {naive_s:8.2f} s   naive / engine   = {naive_s / engine_s:6.2f}x")
    print(f"engine   {engine_s:8.2f} s")
    print(f"ceiling  {ceiling_s:8.2f} s   engine / ceiling = {engine_s / ceiling_s:6.2f}x   (target <= 1.5 on a GPU)")


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
