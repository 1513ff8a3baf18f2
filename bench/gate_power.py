"""The gate on real captions: how often it fails a checkpoint that is no worse, and how often it catches one that is,
with and without the family means in the family; the recipe-spread gate; the permutation gate on a tiny class.

Inputs are baselines of checkpoints of one recipe (one per seed) on the same memes, e.g. the MiniLM caption detector
trained on PrideMM at seeds 1-8 and scored on its test split under clean and typos 1-5:

    memerobust train memeblip2-minilm --data pridemm:../shared/data/pridemm --seed S --out seedS.safetensors
    pytest --memerobust-model=seed1.card.toml --memerobust-checkpoint=seedS.safetensors \
        --memerobust-data=pridemm:../shared/data/pridemm:test -k "rainbow and (clean or typos) and not uap and not \
        imagenet and not augmix and not text and not image" --memerobust-save-baseline=bS.json
    python bench/gate_power.py b1.json ... b8.json --null 224 --power 100

Scenarios (each one a pure function of the saved per-meme outputs and a seed):
- null: two seeds' outputs swapped per meme by a fair coin (the same coin in every condition): neither side is better,
  every failure is a false alarm.
- uniform loss: a null pair whose candidate loses `--loss` accuracy points at every typo severity (that share of
  the memes it gets right, drawn per severity, made wrong).
- one-condition loss: the same at typos@3 only (`--one-loss` points).
- reseed: every seed gated against every other (the plain gate, one checkpoint as the baseline).
- recipe: 4 seeds as the baseline, a fifth as the candidate (every choice), and the fifth made 5 points worse (the
  same memes made wrong in every condition).
- tiny class: 30 memes, 2 of them hateful, null pairs gated by paired permutations and by the bootstrap.
"""
from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pytest_memerobust.judge.gate import PairedCell, judge_family, summarize  # noqa: E402
from pytest_memerobust.judge.instructions import wilson_interval  # noqa: E402


def read_outputs(path: Path) -> dict:
    """{condition: {"y", "clean", "perturbed"} as arrays} of a baseline's one model on one dataset."""
    data = json.loads(Path(path).read_text())
    (by_spec,) = data["results"].values()
    (by_condition,) = by_spec.values()
    return {c: {k: np.asarray(v, dtype=np.float64 if k != "y" else np.int64) for k, v in cell.items() if k != "declined"}
            for c, cell in by_condition.items()}


def swapped(a: dict, b: dict, rng) -> tuple[dict, dict]:
    """(A', B'): each meme's outputs in every condition swapped between A and B by one fair coin."""
    n = len(next(iter(a.values()))["y"])
    coin = rng.random(n) < 0.5
    left, right = {}, {}
    for c in a:
        left[c] = {"y": a[c]["y"]}
        right[c] = {"y": a[c]["y"]}
        for k in ("clean", "perturbed"):
            left[c][k] = np.where(coin[:, None], b[c][k], a[c][k])
            right[c][k] = np.where(coin[:, None], a[c][k], b[c][k])
    return left, right


def made_wrong(cell: dict, which: np.ndarray, key: str = "perturbed") -> dict:
    """The cell with the memes `which` given the other class's probabilities (binary: the columns reversed)."""
    out = dict(cell)
    out[key] = np.where(which[:, None], cell[key][:, ::-1], cell[key])
    return out


def lose(cell: dict, points: float, rng, key: str = "perturbed") -> dict:
    """`points` of accuracy lost: that share of all memes, drawn from those the cell gets right, made wrong."""
    right = np.flatnonzero(cell[key].argmax(1) == cell["y"])
    k = int(round(points * len(cell["y"])))
    which = np.zeros(len(cell["y"]), bool)
    which[rng.choice(right, size=k, replace=False)] = True
    return made_wrong(cell, which, key)


def cells_of(then, now) -> list[PairedCell]:
    thens = then if isinstance(then, list) else [then]
    return [PairedCell("m", "d", c, "clean" if c == "clean" else "perturbed", now[c],
                       [t[c] for t in thens] if isinstance(then, list) else then[c]) for c in now]


def fails(then, now, **options) -> bool:
    return summarize(judge_family(cells_of(then, now), **options))["regressed"] > 0


def rate(k: int, n: int) -> str:
    low, high = wilson_interval(k, n)
    return f"{k} of {n} ({k / n:.1%}; 95% {low:.1%}..{high:.1%})"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("baselines", nargs="+", type=Path)
    parser.add_argument("--null", type=int, default=224, help="null pairs (per-meme swaps of two seeds)")
    parser.add_argument("--power", type=int, default=100, help="trials per loss scenario")
    parser.add_argument("--loss", type=float, default=0.03, help="uniform loss at every typo severity")
    parser.add_argument("--one-loss", type=float, default=0.044, help="loss at typos@3 alone")
    parser.add_argument("--resamples", type=int, default=10_000)
    parser.add_argument("--recipe", type=int, default=0, help="(4 seeds, fifth) choices for the recipe gate; 0: all")
    parser.add_argument("--tiny", type=int, default=200, help="null pairs of 30 memes with 2 of one class")
    parser.add_argument("--only", action="append",
                        help="run only these scenarios (null, uniform, one, reseed, recipe, tiny)")
    args = parser.parse_args(argv)
    runs = [read_outputs(p) for p in args.baselines]
    n = len(runs[0]["clean"]["y"])
    typos = [c for c in runs[0] if "typos@" in c]
    print(f"{len(runs)} checkpoints, {n} memes, conditions {', '.join(runs[0])}; {args.resamples} resamples")
    pairs = list(itertools.permutations(range(len(runs)), 2))
    options = {"n_resamples": args.resamples}
    wanted = set(args.only or ["null", "uniform", "one", "reseed", "recipe", "tiny"])
    started = time.perf_counter()

    if "null" in wanted:
        failed = {True: 0, False: 0}
        for i in range(args.null):
            a, b = pairs[i % len(pairs)]
            then, now = swapped(runs[a], runs[b], np.random.default_rng(i))
            for means in failed:
                failed[means] += fails(then, now, seed=i, family_means=means, **options)
        print(f"null pairs failing, with family means: {rate(failed[True], args.null)}; "
              f"without: {rate(failed[False], args.null)}")

    for scenario, conditions, points in (("uniform", typos, args.loss), ("one", ["text=typos@3"], args.one_loss)):
        if scenario not in wanted:
            continue
        caught = {True: 0, False: 0}
        for i in range(args.power):
            a, b = pairs[i % len(pairs)]
            rng = np.random.default_rng(10_000 + i)
            then, now = swapped(runs[a], runs[b], rng)
            now = {c: lose(cell, points, rng) if c in conditions else cell for c, cell in now.items()}
            for means in caught:
                caught[means] += fails(then, now, seed=i, family_means=means, **options)
        what = f"{points:.1%} lost at every typo severity" if scenario == "uniform" else f"{points:.1%} at typos@3"
        print(f"{what}: caught with family means {rate(caught[True], args.power)}; "
              f"without {rate(caught[False], args.power)}")

    if "reseed" in wanted:
        failed = sum(fails(runs[a], runs[b], seed=i, **options) for i, (a, b) in enumerate(pairs))
        print(f"seed against seed (every directed pair, the plain gate): {rate(failed, len(pairs))} fail")

    if "recipe" in wanted and len(runs) >= 5:
        choices = [(list(base), c) for base in itertools.combinations(range(len(runs)), 4)
                   for c in range(len(runs)) if c not in base]
        if args.recipe:
            choices = [choices[i] for i in np.random.default_rng(0).permutation(len(choices))[:args.recipe]]
        passed, caught, inflations = 0, 0, []
        for i, (base, c) in enumerate(choices):
            then = [runs[k] for k in base]
            comparisons = judge_family(cells_of(then, runs[c]), seed=i, **options)
            inflations.append(comparisons[0].procedure.inflation)
            passed += summarize(comparisons)["regressed"] == 0
            rng = np.random.default_rng(20_000 + i)
            right = np.flatnonzero(runs[c]["clean"]["perturbed"].argmax(1) == runs[c]["clean"]["y"])
            which = np.zeros(n, bool)
            which[rng.choice(right, size=int(round(0.05 * n)), replace=False)] = True
            worse = {cond: made_wrong(made_wrong(cell, which, "perturbed"), which, "clean")
                     for cond, cell in runs[c].items()}
            caught += fails(then, worse, seed=i, **options)
        print(f"recipe of 4 seeds, a fifth seed: passes {rate(passed, len(choices))}; the fifth made 5 points worse "
              f"on the same memes everywhere: fails {rate(caught, len(choices))}; spread factor median "
              f"{np.median(inflations):.2f} ({min(inflations):.2f}..{max(inflations):.2f})")

    if "tiny" in wanted:
        failed = {"permutation": 0, "bootstrap": 0}
        states = set()
        for i in range(args.tiny):
            rng = np.random.default_rng(30_000 + i)
            y = runs[0]["clean"]["y"]
            pick = np.concatenate([rng.choice(np.flatnonzero(y == 1), 2, replace=False),
                                   rng.choice(np.flatnonzero(y == 0), 28, replace=False)])
            a, b = pairs[i % len(pairs)]
            small = [{c: {k: v[pick] for k, v in cell.items()} for c, cell in runs[k].items()} for k in (a, b)]
            then, now = swapped(*small, rng)
            for method in failed:
                comparisons = judge_family(cells_of(then, now), seed=i, method=method, **options)
                failed[method] += summarize(comparisons)["regressed"] > 0
                states |= {c.decision.state for c in comparisons if c.subject.rule in ("auroc", "f1")}
        print(f"30 memes, 2 hateful, null pairs failing: permutation {rate(failed['permutation'], args.tiny)}; "
              f"bootstrap {rate(failed['bootstrap'], args.tiny)}; AUROC and macro-F1 rules: {sorted(states)}")
    print(f"({time.perf_counter() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
