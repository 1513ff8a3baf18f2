"""Ray against one process: the same planned grid evaluated in-process and by Ray actor pools of several sizes.

Generates `--memes` memes (bench/load.py's generator: a csv and PNG pictures of `--size` px), plans a grid of
caption and picture edits and their pairs, and evaluates it through a RobustnessSession (what the pytest suites
call) three or more ways in one run: in this process, then on a fresh local Ray cluster of N CPUs with N actors for
each N of `--actors` (on a GPU machine, `--device cuda` puts one actor on each GPU, so N is the number of GPUs).
Prints each run's wall time (cluster start and the actors' model loading included, and without them) and the ratios
to the in-process run, and checks that every run gave the in-process probabilities to the last bit.

    python bench/ray_actors.py --memes 256 --actors 1,2                     # this 2-core machine
    python bench/ray_actors.py --memes 2048 --actors 1,4,8,14 --size 512    # a 16-core machine, CPU actors
    python bench/ray_actors.py --memes 4096 --device cuda --actors 1        # one actor per GPU (bench/gpu.sh)
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from load import generate  # noqa: E402

from pytest_memerobust.engine import Condition  # noqa: E402

TEXT = [("typos", 3), ("homoglyphs", 3), ("char_swap", 3)]
IMAGE = [("gaussian_noise", 3), ("jpeg_compression", 3), ("contrast", 3), ("pixelate", 3)]


def grid() -> list[Condition]:
    """Each side alone, then every text x image pair: the shape of a suite's grid."""
    return ([Condition(text=n, text_severity=s) for n, s in TEXT]
            + [Condition(image=n, image_severity=s) for n, s in IMAGE]
            + [Condition(t, ts, i, is_) for t, ts in TEXT for i, is_ in IMAGE])


def evaluate(csv: Path, args, ray: str | None) -> dict:
    from pytest_memerobust.judge.results import StatsConfig
    from pytest_memerobust.run.options import CacheOptions, ComputeOptions, DataOptions, JudgingOptions, Options
    from pytest_memerobust.run.session import RobustnessSession

    started = time.perf_counter()
    session = RobustnessSession(Options(models=(args.model,), data=DataOptions(spec=f"csv:{csv}", task="label"),
                                        compute=ComputeOptions(device=args.device, cache=CacheOptions(features=False),
                                                               ray=ray, shard_size=args.shard_size,
                                                               batch_size=args.batch_size),
                                        judging=JudgingOptions(stats=StatsConfig(n_resamples=20))))
    conditions = grid()
    for condition in conditions:
        session.plan(args.model, None, condition)
    connected = time.perf_counter()
    proba = {c.id: session.evaluate(args.model, c).answers.proba for c in [Condition(), *conditions]}
    done = time.perf_counter()
    session.close()
    return {"executor": ray or "in-process", "seconds": round(done - started, 2),
            "evaluate_seconds": round(done - connected, 2), "proba": proba}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memes", type=int, default=256)
    parser.add_argument("--size", type=int, default=224, help="picture side in pixels")
    parser.add_argument("--model", default="memeblip2-tda")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--actors", default="1,2", help="Ray pool sizes, comma-separated")
    parser.add_argument("--shard-size", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--json", type=Path, default=None, help="write the figures here")
    args = parser.parse_args()

    work = args.workdir or Path(tempfile.mkdtemp(prefix="memerobust-ray-"))
    csv = generate(work / "memes", args.memes, args.size)
    runs = [evaluate(csv, args, None)]
    for n in (int(a) for a in args.actors.split(",")):
        # a GPU pool takes one actor per GPU of the cluster; a CPU pool one per CPU of a local cluster of n CPUs
        runs.append(evaluate(csv, args, "local:%d" % n if args.device == "cpu" else "auto"))
        runs[-1]["actors"] = n
    base = runs[0]
    rows = []
    for run in runs:
        same = all(np.array_equal(run["proba"][k], base["proba"][k]) for k in base["proba"])
        rows.append({k: v for k, v in run.items() if k != "proba"} | {
            "speedup_vs_in_process": round(base["seconds"] / run["seconds"], 3),
            "evaluate_speedup_vs_in_process": round(base["evaluate_seconds"] / run["evaluate_seconds"], 3),
            "identical_to_in_process": same})
        print(json.dumps(rows[-1]), flush=True)
    print(json.dumps({"memes": args.memes, "size": args.size, "conditions": len(grid()) + 1, "device": args.device}))
    if args.json:
        args.json.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "runs": rows}, indent=1))


if __name__ == "__main__":
    main()
