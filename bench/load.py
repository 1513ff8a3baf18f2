"""Memory and time of a large run: a generated dataset of many memes, a suite of many conditions, peak RSS.

Generates `--memes` memes (a csv of captions and labels next to `--size` px PNG pictures, drawn from a seed), then
evaluates `--conditions` conditions on them through a RobustnessSession, the library the pytest suites call, with the
feature cache on disk, and builds the JSON report at the end. Conditions are a grid of model-free text sides x image
sides (each side perturbed and encoded once, then re-paired by the head), topped up with single-side conditions.

Prints, per phase, the time and the resident memory (VmRSS after the phase, and the peak so far), so a growth with the
number of memes or conditions is visible:

    python bench/load.py --memes 50000 --conditions 12              # many memes
    python bench/load.py --memes 500 --conditions 1000              # many conditions
    python bench/load.py --memes 50000 --conditions 12 --memory-budget 64   # features held in memory: 64 MiB at most
    python bench/load.py --memes 5000 --size 512 --only gaussian_noise@3,jpeg_compression@3   # 512 px pictures

The conditions are planned before the first is asked for, as the pytest suites plan theirs, so the engine evaluates
them shard by shard (`--shard-size` memes at a time; default: from the pictures' size); `--ray local:2` hands the
shards to a local Ray cluster's actors.
"""
from __future__ import annotations

import argparse
import json
import resource
import tempfile
import time
from pathlib import Path

import numpy as np

from pytest_memerobust.engine import Condition
from pytest_memerobust.perturb import get

TEXT_SIDES = ["typos", "char_keyboard", "char_swap", "char_delete", "char_insert", "case_mixing", "dotted_letters",
              "char_random_swap", "char_random_insert", "char_random_delete", "char_random_replace",
              "char_shuffle_middle", "append_irrelevant_phrase"]
IMAGE_SIDES = ["gaussian_noise", "contrast", "brightness", "pixelate", "impulse_noise", "occlusion", "saturate",
               "shot_noise", "speckle_noise"]
WORDS = ("gay men trans women lesbians queer kids drag queens pride love hate respect disgusting freaks welcome "
         "monday morning group chat tax season cat pizza weekend protect rights ban school ruin proud valid").split()


def rss_mib() -> tuple[float, float]:
    """(resident memory now, peak resident memory so far) of this process, in MiB."""
    now = next(int(line.split()[1]) for line in Path("/proc/self/status").read_text().splitlines()
               if line.startswith("VmRSS:"))
    return now / 1024, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def generate(folder: Path, memes: int, size: int, seed: int = 0) -> Path:
    """`memes` memes with distinct captions and pictures: a csv and one PNG per meme (blocks of colour, a band)."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    rows = ["id,image,text,label"]
    for i in range(memes):
        picture = folder / f"{i:06d}.png"
        if not picture.exists():
            blocks = rng.integers(0, 256, (4, 4, 3), dtype=np.uint8)
            pixels = np.kron(blocks, np.ones((size // 4, size // 4, 1), dtype=np.uint8))
            pixels[-size // 5:] = 255
            Image.fromarray(pixels).save(picture, compress_level=1)
        words = " ".join(rng.choice(WORDS, size=int(rng.integers(4, 12))))
        rows.append(f"m{i},{picture.name},{words} {i},{int(rng.integers(0, 2))}")
    csv = folder / "memes.csv"
    csv.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return csv


def conditions(count: int) -> list[Condition]:
    """`count` conditions: text x image pairs first (every side at severities 1, 3, 5), then single sides."""
    for name in TEXT_SIDES + IMAGE_SIDES:
        get(name)  # fails at once on a name this version lacks
    text = [(n, s) for s in (1, 3, 5) for n in TEXT_SIDES]
    image = [(n, s) for s in (1, 3, 5) for n in IMAGE_SIDES]
    single = [Condition(text=n, text_severity=s) for n, s in text] + \
             [Condition(image=n, image_severity=s) for n, s in image]
    pairs = [Condition(n, s, m, r) for n, s in text for m, r in image]
    if count <= len(single):
        return single[:count]
    if count > len(single) + len(pairs):
        raise SystemExit(f"at most {len(single) + len(pairs)} conditions")
    return single + pairs[: count - len(single)]


def named_conditions(names: str) -> list[Condition]:
    """`gaussian_noise@3,typos@2` -> one single-side condition each (the side's modality from the catalogue)."""
    out = []
    for part in names.split(","):
        name, _, severity = part.strip().partition("@")
        side = {"text": name, "text_severity": None} if get(name).modality == "text" else \
            {"image": name, "image_severity": None}
        key = "text_severity" if "text" in side else "image_severity"
        side[key] = int(severity) if severity else None
        out.append(Condition(**side))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memes", type=int, default=2000)
    parser.add_argument("--conditions", type=int, default=24)
    parser.add_argument("--size", type=int, default=32, help="picture side in pixels")
    parser.add_argument("--model", default="demo")
    parser.add_argument("--workdir", type=Path, default=None, help="where the memes and the cache go (default: temp)")
    parser.add_argument("--bootstrap", type=int, default=200)
    parser.add_argument("--memory-budget", type=int, default=None, help="MiB of features held in memory")
    parser.add_argument("--only", default=None,
                        help="these conditions instead of the grid: image or text sides, NAME@SEVERITY, comma-separated")
    parser.add_argument("--shard-size", type=int, default=None, help="memes per shard (default: from picture size)")
    parser.add_argument("--ray", default=None, help="evaluate the shards on Ray: auto, local:N or ADDRESS")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--no-cache", action="store_true", help="keep features in memory only")
    parser.add_argument("--json", type=Path, default=None, help="write the figures here")
    args = parser.parse_args()

    from pytest_memerobust.run.report import build_report
    from pytest_memerobust.judge.results import StatsConfig
    from pytest_memerobust.run.options import CacheOptions, ComputeOptions, DataOptions, JudgingOptions, Options
    from pytest_memerobust.run.session import RobustnessSession

    work = args.workdir or Path(tempfile.mkdtemp(prefix="memerobust-load-"))
    phases = []

    def phase(name: str, started: float, **extra) -> None:
        now, peak = rss_mib()
        phases.append({"phase": name, "seconds": round(time.perf_counter() - started, 2), "rss_mib": round(now),
                       "peak_rss_mib": round(peak), **extra})
        print(json.dumps(phases[-1]), flush=True)

    started = time.perf_counter()
    csv = generate(work / "memes", args.memes, args.size)
    phase("generate", started, memes=args.memes, size=args.size)

    started = time.perf_counter()
    todo = named_conditions(args.only) if args.only else conditions(args.conditions)
    cache = CacheOptions(folder=work / "cache", features=not args.no_cache,
                         **({} if args.memory_budget is None else {"memory_mib": args.memory_budget}))
    session = RobustnessSession(Options(models=(args.model,), data=DataOptions(spec=f"csv:{csv}", task="label"),
                                        compute=ComputeOptions(device=args.device, shard_size=args.shard_size,
                                                               ray=args.ray, cache=cache),
                                        judging=JudgingOptions(stats=StatsConfig(n_resamples=args.bootstrap))))
    for condition in todo:
        session.plan(args.model, None, condition)
    session.evaluate(args.model, Condition())
    phase("load and clean", started)

    started = time.perf_counter()
    every = max(1, len(todo) // 10)
    for k, condition in enumerate(todo, 1):
        session.evaluate(args.model, condition)
        if k % every == 0 or k == len(todo):
            phase(f"conditions 1-{k}", started, per_condition_s=round((time.perf_counter() - started) / k, 4))

    started = time.perf_counter()
    report = build_report(session)
    size = len(json.dumps(report))
    phase("report", started, report_mib=round(size / 2**20, 1))
    session.close()
    if args.json:
        args.json.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "phases": phases},
                                        indent=1))


if __name__ == "__main__":
    main()
