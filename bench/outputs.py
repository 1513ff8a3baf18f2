"""What the run's outputs beyond its reports cost: the same demo run bare, with MLflow (a SQLite store), with W&B
(offline), with both, with the run history, and with an export of its flips, side by side in one process tree, as
wall-time ratios to the bare run; then the HTML report's size with and without its figures.

    python bench/outputs.py [--limit 48] [-k "rainbow-noise"] [--repeat 2]
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BIN = Path(sys.executable).parent
VARIANTS = {
    "bare": [],
    "mlflow": ["--memerobust-mlflow"],
    "wandb (offline)": ["--memerobust-wandb"],
    "mlflow + wandb": ["--memerobust-mlflow", "--memerobust-wandb"],
    "history": ["--memerobust-history"],
    "export (flips)": ["--memerobust-export=flips", "--memerobust-export-counterexamples"],
}


def run(args: list[str], limit: int, select: str) -> float:
    """Seconds of one run in a fresh folder (its own cache: features are encoded each time, as in CI)."""
    with tempfile.TemporaryDirectory() as folder:
        started = time.perf_counter()
        done = subprocess.run([str(BIN / "pytest"), "-q", "--memerobust-model=memeblip2-tda",
                               f"--memerobust-limit={limit}", "-k", select, "--memerobust-report=r.json",
                               "--memerobust-report=r.html", *args], cwd=folder, capture_output=True, text=True,
                              env={**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true"})
        seconds = time.perf_counter() - started
        if done.returncode not in (0, 1):
            raise SystemExit(f"{args}: exit {done.returncode}\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
        return seconds


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=48)
    parser.add_argument("-k", dest="select", default="rainbow-noise")
    parser.add_argument("--repeat", type=int, default=2, help="runs per variant, interleaved; the median is shown")
    args = parser.parse_args(argv)
    times: dict[str, list[float]] = {name: [] for name in VARIANTS}
    for _ in range(args.repeat):
        for name, extra in VARIANTS.items():
            times[name].append(run(extra, args.limit, args.select))
    bare = statistics.median(times["bare"])
    print(f"memeblip2-tda, {args.limit} demo memes, -k {args.select!r}, {os.cpu_count()} cores, median of "
          f"{args.repeat}")
    print(f"{'outputs':<18} {'wall s':>7} {'x bare':>7}")
    for name, seconds in times.items():
        median = statistics.median(seconds)
        print(f"{name:<18} {median:7.1f} {median / bare:7.2f}")
    from pytest_memerobust.report.html import to_html
    import json

    with tempfile.TemporaryDirectory() as folder:
        subprocess.run([str(BIN / "pytest"), "-q", "--memerobust-model=memeblip2-tda", f"--memerobust-limit={args.limit}",
                        "-k", args.select, "--memerobust-report=r.json"], cwd=folder, capture_output=True)
        report = json.loads((Path(folder) / "r.json").read_text())
        page = to_html(report)
        figures = sum(len(part.split("</figure>")[0]) for part in page.split("<figure class='plot'>")[1:])
        print(f"HTML report: {len(page):,} characters, of which its {page.count('<figure class=')} figures "
              f"{figures:,} ({figures / len(page):.0%})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
