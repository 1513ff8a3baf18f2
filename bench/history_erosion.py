"""Five checkpoints of decreasing quality, each gated against the one before: every step passes (or fails) its gate
on its own, and the run history shows what the steps add up to.

The checkpoints are MemeBLIP2+TDA's demo weights with the head's caption path (the map that reads the caption's
features) scaled up by a growing factor, so at each step the model leans a little more on the caption's words, as a
retrain on caption-heavy data might: its clean accuracy barely moves, and what typos and caption attacks cost grows. Each run appends to one history
(--memerobust-history) and saves the baseline the next run is gated against; then `memerobust history` prints the
trend and the last run's HTML draws it.

    python bench/history_erosion.py --out /tmp/erosion [--limit 96] [--step 0.25] [-k EXPR]
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from safetensors import safe_open
from safetensors.numpy import load_file, save_file

ROOT = Path(__file__).resolve().parents[1]
WEIGHTS = ROOT / "models" / "memeblip2-tda.demo.safetensors"
CAPTION_PATH = ("head.text_map.",)


def checkpoints(out: Path, steps: int, step: float) -> list[Path]:
    """Checkpoint k: the demo weights with the caption path's weights and biases times (1 + k x `step`)."""
    weights = load_file(str(WEIGHTS))
    with safe_open(str(WEIGHTS), framework="np") as f:
        metadata = f.metadata()  # what says the file is this card's checkpoint
    paths = []
    for k in range(steps):
        changed = {name: (value * np.float32(1 + k * step)).astype(value.dtype) if name.startswith(CAPTION_PATH)
                   else value for name, value in weights.items()}
        path = out / f"step-{k}.safetensors"
        save_file(changed, str(path), metadata=metadata)
        paths.append(path)
    return paths


def trained(out: Path, epochs: list[int]) -> list[Path]:
    """Checkpoint k: the card's demo recipe trained for epochs[k] epochs (`memerobust train --demo`), fewer each
    step, as a team cutting its training budget would get."""
    paths = []
    for k, count in enumerate(epochs):
        path = out / f"step-{k}.safetensors"
        subprocess.run([str(Path(sys.executable).parent / "memerobust"), "train", "memeblip2-tda", "--demo", "--quiet",
                        "--epochs", str(count), "--out", str(path), "--cache-dir", str(out / "train-cache")],
                       check=True, capture_output=True)
        paths.append(path)
    return paths


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--step", type=float, default=0.25, help="growth of the caption path's scale per step")
    parser.add_argument("--limit", type=int, default=96)
    parser.add_argument("--epochs", type=int, nargs="+", help="train the checkpoints instead: epochs of each step")
    parser.add_argument("-k", dest="select", default="rainbow-noise", help="which cases run (pytest -k)")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    history = args.out / "history.jsonl"
    history.unlink(missing_ok=True)
    bin_dir = Path(sys.executable).parent
    made = trained(args.out, args.epochs) if args.epochs else checkpoints(args.out, args.steps, args.step)
    for k, ckpt in enumerate(made):
        command = [str(bin_dir / "pytest"), "-p", "no:cacheprovider", "-q", "--no-header", "-rN",
                   "--memerobust-model=memeblip2-tda", f"--memerobust-checkpoint={ckpt}", f"--memerobust-limit={args.limit}",
                   "-k", args.select, f"--memerobust-history={history}", f"--memerobust-save-baseline=step-{k}.json",
                   f"--memerobust-report=step-{k}.json", f"--memerobust-report=step-{k}.html"]
        if k:
            command.append(f"--memerobust-baseline=step-{k - 1}.json")
        started = time.perf_counter()
        done = subprocess.run(command, cwd=args.out, capture_output=True, text=True,
                              env={**os.environ, "GIT_COMMIT": f"step-{k}"})
        tail = [line for line in done.stdout.splitlines() if line.startswith(("PASSED", "FAILED", "memerobust: gate",
                                                                               "memerobust: baseline"))]
        print(f"step {k}: exit {done.returncode} in {time.perf_counter() - started:.0f} s: " + " | ".join(tail[-3:]))
    shown = subprocess.run([str(bin_dir / "memerobust"), "history", str(history)], capture_output=True, text=True)
    print(shown.stdout + shown.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
