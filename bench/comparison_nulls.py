"""False alarms of the recipe and detector comparisons on their null constructions, and the recipe comparison's power.

Recipe against recipe (judge/recipes.py): two disjoint seed sets of one recipe (simulated checkpoints:
judge/simulated.py, a fresh world of memes and fresh seeds per comparison) compared again and again; a false alarm is
any rule said worse or better beyond the seeds' spread. Then the same with a real recipe effect (`--shift`), for the
power. Detector against detector (judge/detectors.py): two detectors' outputs swapped meme by meme by a fair coin (the
same coin in every condition), so the two pseudo-detectors differ in nothing; on simulated detectors, and on the real
outputs of a saved baseline of a run with several models (`--baseline three.json`: its first two models).

    .venv/bin/python bench/comparison_nulls.py --comparisons 300 --baseline three.json

Prints one line per construction: comparisons, the share with any claim, and each direction's share.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pytest_memerobust.judge.detectors import DetectorOutputs, compare_detectors, verdict  # noqa: E402
from pytest_memerobust.judge.recipes import RecipeCell, judge_recipes  # noqa: E402
from pytest_memerobust.judge.simulated import simulated_checkpoint, simulated_world, swapped  # noqa: E402


def recipe_rates(comparisons: int, seeds: int, shift: float, resamples: int, memes: int) -> dict:
    rng = np.random.default_rng(20261129 + seeds)
    worse = better = either = 0
    for i in range(comparisons):
        world = simulated_world(rng, memes)
        a = [simulated_checkpoint(world, rng) for _ in range(seeds)]
        b = [simulated_checkpoint(world, rng, shift=shift) for _ in range(seeds)]
        cells = [RecipeCell("m", "sim", c, "clean" if c == "clean" else "perturbed", tuple(x[c] for x in a),
                            tuple(x[c] for x in b)) for c in a[0]]
        out = judge_recipes(cells, n_resamples=resamples, seed=i)
        w, bt = any(c.decision.regressed for c in out), any(c.improvement.improved for c in out)
        worse, better, either = worse + w, better + bt, either + (w or bt)
    return {"worse": worse / comparisons, "better": better / comparisons, "any": either / comparisons}


def detector_rates(first: dict, second: dict, comparisons: int, resamples: int, seed: int = 7) -> dict:
    rng = np.random.default_rng(seed)
    worse = better = either = 0
    for i in range(comparisons):
        one, two = swapped(first, second, rng)
        out = compare_detectors([DetectorOutputs("one", "d", one), DetectorOutputs("two", "d", two)],
                                n_resamples=resamples, seed=i)
        w = any(verdict(c) == "worse" for c in out)
        bt = any(verdict(c) == "better" for c in out)
        worse, better, either = worse + w, better + bt, either + (w or bt)
    return {"worse": worse / comparisons, "better": better / comparisons, "any": either / comparisons}


def baseline_pair(path: Path) -> tuple[dict, dict, str]:
    from pytest_memerobust.track.baseline import checkpoint_cells, load_baseline

    data = load_baseline(path)
    models = [m for m in data["results"] if ":" not in m][:2]  # detectors, not one detector's channels
    spec = next(iter(data["results"][models[0]]))
    cells = [{c: checkpoint_cells(e)[0] for c, e in data["results"][m][spec].items()} for m in models]
    common = set(cells[0]) & set(cells[1])
    return ({c: v for c, v in cells[0].items() if c in common}, {c: v for c, v in cells[1].items() if c in common},
            f"{models[0]} / {models[1]} on {spec}, {len(common)} conditions")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--comparisons", type=int, default=300)
    parser.add_argument("--resamples", type=int, default=1000)
    parser.add_argument("--memes", type=int, default=300)
    parser.add_argument("--seeds", type=int, nargs="*", default=[3, 5], help="seeds a side (none: detectors only)")
    parser.add_argument("--shift", type=float, default=0.3, help="the recipe effect for the power line")
    parser.add_argument("--baseline", type=Path, help="a saved baseline of a run with two or more models")
    args = parser.parse_args()
    print(f"{args.comparisons} comparisons each, {args.resamples} resamples, two-sided at 5%")
    for k in args.seeds:
        for shift, what in ((0.0, "null: two seed sets of one recipe"), (args.shift, f"recipe effect {args.shift}")):
            start = time.perf_counter()
            r = recipe_rates(args.comparisons, k, shift, args.resamples, args.memes)
            print(f"recipes {k} + {k} seeds, {what}: any claim {r['any']:.3f} (worse {r['worse']:.3f}, better "
                  f"{r['better']:.3f}) [{time.perf_counter() - start:.0f} s]")
    rng = np.random.default_rng(3)
    world = simulated_world(rng, args.memes)
    pairs = [(simulated_checkpoint(world, rng), simulated_checkpoint(world, rng), "simulated detectors")]
    if args.baseline:
        pairs.append(baseline_pair(args.baseline))
    for first, second, what in pairs:
        start = time.perf_counter()
        r = detector_rates(first, second, args.comparisons, args.resamples)
        print(f"detectors, per-meme swaps of {what}: any claim {r['any']:.3f} (less robust {r['worse']:.3f}, more "
              f"robust {r['better']:.3f}) [{time.perf_counter() - start:.0f} s]")


if __name__ == "__main__":
    main()
