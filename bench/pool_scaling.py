"""A few expensive cases on 2 cores: wall time at 1 worker process and at N, and whether the reports are the same bytes.

The situation of issue 50: a user who selects a few expensive cases (here clean, typos@3, HotFlip@1 and HotFlip@3 on
120 PrideMM test memes, the MiniLM caption-only card: 480 (meme, condition) pairs, each HotFlip pair about a
second) got one core of two, because the pool started by count (4,096 pairs). The pool now starts once a pass has
run as long as a worker's start. Each run is the job as a user runs it, from a folder holding only the suite file,
with no pytest cache, one run after the other (never two at once):

    python bench/pool_scaling.py                       # 120 memes, workers 1 and 2
    python bench/pool_scaling.py --memes 32 --workers 1 2 4

It also measures a worker's start (spawn to engine built: interpreter, torch, the detector, the memes) on the demo
and the MiniLM engines, the figure behind executors.POOL_START_S. The MiniLM card is trained once into the output
folder (bench/cpu_scaling.py's `minilm_card`).
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cpu_scaling import SHARED, minilm_card, run  # noqa: E402

SUITE = """[suite]
name = "poolbench"
description = "clean, typos@3, HotFlip@1 and HotFlip@3: a few expensive cases"

[text]
typos = [3]
hotflip = [1, 3]
"""


def worker_start(model: str, data: str | None) -> float:
    """Seconds from a pool worker's spawn to its first engine built, as the pool measures it (a pass of two shards
    handed to a pool of one worker at once)."""
    from pytest_memerobust.engine import Condition, executors
    from pytest_memerobust.judge.results import StatsConfig
    from pytest_memerobust.run.options import CacheOptions, ComputeOptions, DataOptions, JudgingOptions, Options
    from pytest_memerobust.run.session import RobustnessSession

    executors.POOL_START_S = 0  # hand the pass over at once
    session = RobustnessSession(Options(models=(model,), data=DataOptions(spec=data, limit=16),
                                        compute=ComputeOptions(batch_size=8, cache=CacheOptions(features=False),
                                                               workers=2),
                                        judging=JudgingOptions(stats=StatsConfig(n_resamples=20))))
    try:
        session.plan(model, None, Condition())
        session.evaluate(model, "clean")
        return session.executor._ready_s
    finally:
        session.close()


def load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memes", type=int, default=120, help="the first N PrideMM test memes")
    parser.add_argument("--workers", nargs="*", default=["1", "2"], help="worker counts (none: the start only)")
    parser.add_argument("--pridemm", default=f"pridemm:{SHARED / 'data' / 'pridemm'}")
    parser.add_argument("--no-start", action="store_true", help="skip the worker start measurement")
    parser.add_argument("--out", type=Path, default=Path("/tmp/memerobust-pool-scaling"))
    options = parser.parse_args()
    out = options.out.resolve()
    card = minilm_card(out, options.pridemm)
    print(f"{len(os.sched_getaffinity(0))} usable cores; python {sys.version.split()[0]}; "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; load {load()}")
    if not options.no_start:
        for model, data in (("memeblip2-tda", None), (str(card), f"{options.pridemm}:test")):
            print(f"worker start (spawn to engine built), {Path(model).name}: {worker_start(model, data):.2f} s")
    if not options.workers:
        return
    args = [f"--memerobust-model={card}", f"--memerobust-data={options.pridemm}:test",
            f"--memerobust-limit={options.memes}", "-k", "poolbench"]
    rows = []
    for n in options.workers:
        folder = out / f"workers-{n}"
        (folder / "suite").mkdir(parents=True, exist_ok=True)
        (folder / "suite" / "memerobust-poolbench.toml").write_text(SUITE)
        before = load()
        result = run(args + [f"--memerobust-workers={n}"], folder, None)
        text = (folder / "stdout.txt").read_text(errors="replace")
        note = next((line for line in text.splitlines() if "worker process" in line), "(no pool note)")
        rows.append((n, result, before, load(), note))
    print(f"\n{' '.join(args)}")
    print(f"{'workers':<8} {'wall s':>8} {'cpu s':>8} {'speed-up':>9}  {'report sha256':<13} rc  load before/after")
    base = rows[0][1]["wall"]
    for n, r, before, after, note in rows:
        print(f"{n:<8} {r['wall']:8.1f} {r['cpu']:8.1f} {base / r['wall']:8.2f}x  {r['digest']:<13} {r['rc']:<3} "
              f"{before} / {after}\n{'':<8} {r['last'][:100]}\n{'':<8} {note.strip()[:160]}")
    same = len({r["digest"] for _, r, *_ in rows}) == 1
    print(f"reports: {'the same bytes at every worker count' if same else 'DIFFER'}")


if __name__ == "__main__":
    main()
