"""What the installed plugin costs a pytest run that does not use it: `pytest --help`, and a run of one unrelated
test (`def test_x(): pass` in a fresh folder), each timed with the plugin and with `-p no:memerobust` (pytest
alone, the same environment otherwise), alternating. Goal: within 0.1 s of pytest alone.

    python bench/plugin_cost.py --runs 5

Prints, per command, the median wall time of each side, and the difference. To time another tree of the package
(an earlier commit's worktree), put it first on the path: `PYTHONPATH=/tmp/old python bench/plugin_cost.py`.
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

COMMANDS = {"pytest --help": ["--help"], "one unrelated test": ["-q", "-p", "no:cacheprovider", "test_x.py"]}
SIDES = {"with the plugin": [], "pytest alone": ["-p", "no:memerobust"]}


def wall_time(args: list[str], folder: Path) -> float:
    began = time.perf_counter()
    subprocess.run([sys.executable, "-m", "pytest", *args], cwd=folder, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    return time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5, help="timed runs of each command on each side (median)")
    runs = parser.parse_args().runs
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "test_x.py").write_text("def test_x():\n    pass\n")
        for name, args in COMMANDS.items():
            for side in SIDES.values():  # one untimed run each: files cached, as in a developer's second run
                wall_time([*side, *args], folder)
            times = {label: [] for label in SIDES}
            for _ in range(runs):
                for label, side in SIDES.items():
                    times[label].append(wall_time([*side, *args], folder))
            medians = {label: statistics.median(values) for label, values in times.items()}
            difference = medians["with the plugin"] - medians["pytest alone"]
            print(f"{name}: " + ", ".join(f"{label} {value:.3f} s" for label, value in medians.items())
                  + f"; the plugin adds {difference:+.3f} s (median of {runs})")


if __name__ == "__main__":
    main()
