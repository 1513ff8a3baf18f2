"""Rainbow Noise's follow-up on real captions: does training on the edits fix what the tests find, and at what cost?

The MiniLM caption detector (memeblip2-minilm) is trained on PrideMM's training split, same seed and recipe
otherwise: plain; augmented with typos; augmented with back-translation (where its MarianMT models are installed;
otherwise the row says why it did not run); adversarially fine-tuned against HotFlip from the plain checkpoint (one
epoch, half of each batch attacked: HotFlip costs about half a second of one core per caption on a CPU). Each
checkpoint runs the built-in rainbow-noise suite's caption families on the test split, one pytest run per family
(clean + typos 1-5; clean + hotflip 1 and 3), each saving a baseline of every meme's probabilities. From those
baselines: clean accuracy and AUROC with 95% bootstrap intervals, each family's relative robustness of accuracy
(the mean over its severities, with the interval of that mean on the same resamples), and `memerobust compare plain
X` per family, whose improved and regressed lists are decided under the gate's family-wise error control.

    python bench/hardening_pridemm.py --data /path/to/PrideMM --work runs/ --cache-dir .cache/memerobust
    python bench/hardening_pridemm.py ... --seeds 1 2 3 --recipes plain typos --families typos   # recipe level

Training and the runs are subprocesses of the installed `memerobust` and `pytest`, the commands a user types; a
checkpoint or baseline already in --work is reused (delete it to redo it). Universal triggers (refitted for every
checkpoint over the training split) and hotflip@5 are left out for their cost on a CPU; `--families` adds none of
them, the suite file has them.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

PLAIN = "plain"
RECIPES = {  # name -> the flags of `memerobust train` beyond the plain recipe ({plain}: the plain checkpoint)
    PLAIN: [],
    "typos": ["--augment", "typos@1-5:0.5"],
    "back-translation": ["--augment", "back_translation:0.5"],
    "hotflip-adversarial": ["--init", "{plain}", "--epochs", "1", "--adversarial", "hotflip@1:0.5"],
}
FAMILIES = {  # family -> the pytest -k expression of its cases in the rainbow-noise suite
    "typos": "rainbow and (clean or typos) and not image and not uap and not augmix and not imagenet and not text",
    "hotflip": "rainbow and (clean or hotflip) and not hotflip-5 and not image and not uap and not augmix and not "
               "imagenet and not text",
}
RESAMPLES = 2000


def _bin(name: str) -> str:
    return str(Path(sys.executable).with_name(name))


def _checkpoint(work: Path, recipe: str) -> Path:
    return work / recipe / "minilm.safetensors"


def train(recipe: str, args) -> dict:
    """`memerobust train` for one recipe (reused when its checkpoint exists): its folder and the seconds its
    epochs took (the metrics file's; the one-off encoding is counted apart)."""
    checkpoint = _checkpoint(args.work, recipe)
    if not checkpoint.exists():
        flags = [f.format(plain=_checkpoint(args.work, PLAIN)) for f in RECIPES[recipe]]
        command = [_bin("memerobust"), "train", "memeblip2-minilm", "--data", f"pridemm:{args.data}", "--seed",
                   str(args.seed), "--cache-dir", str(args.cache_dir), "--out", str(checkpoint), "--name", "minilm",
                   "--quiet", *flags]
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            return {"error": (done.stderr.strip().splitlines() or ["failed"])[-1]}
    metrics = json.loads(checkpoint.with_suffix(".metrics.json").read_text())
    return {"seconds": metrics.get("training_seconds")}


def baseline(recipe: str, family: str, args) -> Path:
    """The family's cases on the test split, saved as a baseline (reused when it exists)."""
    folder = args.work / recipe
    path = folder / f"{family}.base.json"
    if not path.exists():
        from pytest_memerobust.run.suite import builtin_suite_dir

        subprocess.run([_bin("python"), "-m", "pytest", f"--rootdir={folder}", "-p", "no:cacheprovider", "-q",
                        f"--memerobust-model={folder / 'minilm.card.toml'}",
                        f"--memerobust-data=pridemm:{args.data}:test", f"--memerobust-cache-dir={args.cache_dir}",
                        f"--memerobust-save-baseline={path}", "-k", FAMILIES[family], str(builtin_suite_dir())],
                       cwd=folder, capture_output=True, text=True)
    return path


def figures(path: Path) -> dict:
    """From a baseline: clean accuracy and AUROC with their intervals, and the family's mean relative robustness
    of accuracy over its perturbed conditions with the interval of that mean (every condition on the same
    resamples of the memes)."""
    from pytest_memerobust.judge.metrics import METRICS, metric_ci, robustness_samples

    data = json.loads(path.read_text())
    (model,) = data["results"].values()
    (conditions,) = model.values()
    clean = conditions["clean"]
    y, proba = np.asarray(clean["y"]), np.asarray(clean["clean"])
    out = {name: (METRICS[name](y, proba), metric_ci(name, y, proba, RESAMPLES)) for name in ("accuracy", "auroc")}
    perturbed = [c for key, c in conditions.items() if key != "clean"]
    ratios = [METRICS["accuracy"](y, np.asarray(c["perturbed"])) / out["accuracy"][0] for c in perturbed]
    samples = np.nanmean([robustness_samples("accuracy", y, np.asarray(c["clean"]), np.asarray(c["perturbed"]),
                                             n_resamples=RESAMPLES) for c in perturbed], axis=0)
    out["relative"] = (float(np.mean(ratios)), tuple(np.nanpercentile(samples, [2.5, 97.5])))
    return out


def compare(plain: Path, other: Path, out: Path) -> list[str]:
    """`memerobust compare plain other --json out`: its two summary lines and the improved and regressed rules."""
    done = subprocess.run([_bin("memerobust"), "compare", str(plain), str(other), "--json", str(out)],
                          capture_output=True, text=True)
    return [line.strip() for line in done.stdout.splitlines()
            if " of " in line and ("regressed" in line or "improved" in line) or line.startswith("  ")]


def _interval(value: float, bounds) -> str:
    return f"{value:.3f} ({bounds[0]:.3f}..{bounds[1]:.3f})"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path("../shared/data/pridemm"), help="the PrideMM folder")
    parser.add_argument("--work", type=Path, default=Path("hardening-runs"))
    parser.add_argument("--cache-dir", type=Path, default=Path(".pytest_cache/d/memerobust"))
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--seeds", type=int, nargs="+", help="several seeds (each in WORK/seedN), then every recipe "
                        "against plain over them with `memerobust compare --recipe`")
    parser.add_argument("--recipes", nargs="+", default=list(RECIPES), choices=list(RECIPES))
    parser.add_argument("--families", nargs="+", default=list(FAMILIES), choices=list(FAMILIES))
    args = parser.parse_args(argv)
    if args.seeds:
        return over_seeds(args)
    recipes = [PLAIN] + [r for r in args.recipes if r != PLAIN]
    rows, done = [], []
    for recipe in recipes:
        (args.work / recipe).mkdir(parents=True, exist_ok=True)
        trained = train(recipe, args)
        if "error" in trained:
            rows.append(f"| {recipe} | not run: {trained['error']} |")
            continue
        done.append(recipe)
        cells = []
        for family in args.families:
            f = figures(baseline(recipe, family, args))
            if not cells:
                cells += [_interval(*f["accuracy"]), _interval(*f["auroc"])]
            cells.append(_interval(*f["relative"]))
        seconds = f"{trained['seconds']:.0f}" if trained.get("seconds") else "-"
        rows.append(f"| {recipe} | " + " | ".join(cells) + f" | {seconds} |")
    print(f"PrideMM test split (the first family's run gives the clean figures), memeblip2-minilm, seed {args.seed}; "
          f"95% bootstrap intervals ({RESAMPLES} resamples)")
    print("| recipe | clean accuracy | clean AUROC | " + " | ".join(f"{f}: relative accuracy" for f in args.families)
          + " | epochs' seconds |")
    print("|---|---|---|" + "---|" * len(args.families) + "---|")
    print("\n".join(rows))
    for recipe in done:
        if recipe == PLAIN:
            continue
        for family in args.families:
            lines = compare(args.work / PLAIN / f"{family}.base.json", args.work / recipe / f"{family}.base.json",
                            args.work / recipe / f"{family}.compare.json")
            print(f"\n{recipe} against plain, {family} family (memerobust compare):")
            print("\n".join(f"  {line}" for line in lines))
    return 0


def over_seeds(args) -> int:
    """Each seed's checkpoints and baselines in WORK/seedN (this script with --seed N), then per recipe and family
    `memerobust compare --recipe` of plain's seeds against the recipe's: the recipe's effect against the seeds'
    spread."""
    for seed in args.seeds:
        main(["--data", str(args.data), "--work", str(args.work / f"seed{seed}"), "--cache-dir", str(args.cache_dir),
              "--seed", str(seed), "--recipes", *args.recipes, "--families", *args.families])
    for recipe in [r for r in args.recipes if r != PLAIN]:
        for family in args.families:
            arms = [[str(args.work / f"seed{s}" / r / f"{family}.base.json") for s in args.seeds]
                    for r in (PLAIN, recipe)]
            if not all(Path(p).exists() for arm in arms for p in arm):
                continue
            done = subprocess.run([_bin("memerobust"), "compare", "--recipe", *arms[0], "--recipe", *arms[1],
                                   "--json", str(args.work / f"{recipe}-{family}.recipes.json")],
                                  capture_output=True, text=True)
            print(f"\n{recipe} against plain over seeds {', '.join(map(str, args.seeds))}, {family} family "
                  "(memerobust compare --recipe):")
            print(done.stdout.rstrip() or done.stderr.rstrip())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
