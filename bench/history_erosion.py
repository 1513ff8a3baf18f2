"""Five checkpoints, each gated against the one before, appended to one run history: what the steps add up to.

The checkpoints are MemeBLIP2+TDA's demo recipe (`memerobust train memeblip2-tda --demo`) trained for more epochs
at each step (default 2, 4, 8, 16, 80: the card's own recipe last), as a team training longer at each commit would
get: clean accuracy climbs while what typos and caption attacks cost grows, since the longer-trained head leans
harder on the caption's WordPiece tokens. Each run appends to one history (--memerobust-history), saves the baseline
the next run is gated against and writes its reports; then `memerobust history` prints the trend and the last run's
HTML draws it (step-4.html, section "Trend").

    python bench/history_erosion.py --out /tmp/erosion [--limit 160] [--epochs 2 4 8 16 80] [-k rainbow-noise]
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

BIN = Path(sys.executable).parent


def trained(out: Path, epochs: list[int]) -> list[Path]:
    """Checkpoint k: the card's demo recipe trained for epochs[k] epochs."""
    paths = []
    for k, count in enumerate(epochs):
        path = out / f"step-{k}.safetensors"
        subprocess.run([str(BIN / "memerobust"), "train", "memeblip2-tda", "--demo", "--quiet", "--epochs", str(count),
                        "--out", str(path), "--cache-dir", str(out / "train-cache")], check=True, capture_output=True)
        paths.append(path)
    return paths


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--limit", type=int, default=160)
    parser.add_argument("--epochs", type=int, nargs="+", default=[2, 4, 8, 16, 80], help="epochs of each step")
    parser.add_argument("-k", dest="select", default="rainbow-noise", help="which cases run (pytest -k)")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    history = args.out / "history.jsonl"
    history.unlink(missing_ok=True)
    for k, ckpt in enumerate(trained(args.out, args.epochs)):
        command = [str(BIN / "pytest"), "-p", "no:cacheprovider", "-q", "--no-header", "-rN",
                   "--memerobust-model=memeblip2-tda", f"--memerobust-checkpoint={ckpt}", f"--memerobust-limit={args.limit}",
                   "-k", args.select, f"--memerobust-history={history}", f"--memerobust-save-baseline=baseline-{k}.json",
                   f"--memerobust-report=step-{k}.json", f"--memerobust-report=step-{k}.html"]
        if k:
            command.append(f"--memerobust-baseline=baseline-{k - 1}.json")
        started = time.perf_counter()
        done = subprocess.run(command, cwd=args.out, capture_output=True, text=True,
                              env={**os.environ, "GIT_COMMIT": f"step-{k}"})
        said = [line for line in done.stdout.splitlines()
                if line.startswith(("PASSED", "FAILED", "memerobust: gate", "memerobust: ERODED", "memerobust: ERODING"))]
        print(f"step {k} ({args.epochs[k]} epochs): exit {done.returncode} in {time.perf_counter() - started:.0f} s: "
              + " | ".join(said))
    shown = subprocess.run([str(BIN / "memerobust"), "history", str(history)], capture_output=True, text=True)
    print(shown.stdout + shown.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
