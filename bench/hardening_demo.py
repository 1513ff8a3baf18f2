"""Does hardening memeblip2-tda's demo recipe with pictures buy image-channel robustness, and at what clean cost?

Trains the card's small [demo] recipe (inline two-layer BLIP-2, generated demo memes with pictures) several ways with
the same seed: plain; AugMix augmentation; ImageNet-C augmentation; PGD adversarial training (cross-entropy, and with
the TRADES loss). Each checkpoint then runs one suite of image conditions on the demo test split (clean,
imagenet_c@1..5, augmix@3, white-box pgd_linf@1..3 and apgd_ce@2 against that checkpoint, uap@3), saving a baseline
and a JSON report. Prints clean accuracy and AUROC with their 95% intervals, the relative robustness of accuracy
(accuracy under the condition / clean accuracy) per condition and per family, how far each head still reads the
picture (the built-in modality-reliance check), the training wall time, and for each hardened recipe what
`memerobust compare plain X` lists as improved and regressed beyond noise (family-wise error control, the gate's own
procedure).

    OMP_NUM_THREADS=1 python bench/hardening_demo.py [--out runs/] [--recipes plain augmix pgd] [--pgd-epochs 20]

Training and the runs are subprocesses of the installed `memerobust train` and `pytest`, the commands a user types.
Everything (checkpoints, the suite file, baselines, reports, feature cache) goes to --out, else to a temporary
folder removed at the end; a checkpoint, baseline and report already in --out for the same command are reused (the
recorded training time with them), so a second run only prints. Training runs with --no-cache, so each recipe's
time includes encoding its own inputs.
The demo memes are generated: the figures are the demo world's, not real memes'.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tabulate import tabulate

from pytest_memerobust.report.gate_tables import change_line  # the gate's own wording of a decision

CARD = "memeblip2-tda"
ADVERSARIAL = {"pgd": "ce", "trades": "trades:6"}
RECIPES = {  # name -> the flags of `memerobust train` beyond the card's demo recipe
    "plain": [],
    "augmix": ["--augment", "augmix@1-5:0.5"],
    "imagenet_c": ["--augment", "imagenet_c@1-5:0.5"],
    "pgd": ["--adversarial", "pgd_linf@2:0.5", "--adversarial-loss", ADVERSARIAL["pgd"]],
    "trades": ["--adversarial", "pgd_linf@2:0.5", "--adversarial-loss", ADVERSARIAL["trades"]],
}
SUITE = """\
[suite]
name = "hardening"
description = "image-channel robustness of a hardened demo detector"

[thresholds]
decision = "confident"
min_relative_robustness = { accuracy = 0.90, auroc = 0.90 }
max_flip_rate = 0.10

[image]
imagenet_c = "all"
augmix = [3]
pgd_linf = [1, 2, 3]
apgd_ce = [2]
uap = [3]
"""
FAMILIES = {"imagenet_c": ("imagenet_c",), "augmix": ("augmix",), "pgd/apgd": ("pgd_linf", "apgd_ce"),
            "uap": ("uap",)}


def _tool(name: str) -> str:
    return str(Path(sys.executable).with_name(name))


def train(recipe: str, work: Path, args) -> tuple[Path, float]:
    """`memerobust train CARD --demo` with the recipe's flags: its checkpoint and the command's wall time. A
    checkpoint in `work` trained by the same command (recorded in train-seconds.json) is reused."""
    checkpoint = work / f"{recipe}.safetensors"
    command = [_tool("memerobust"), "train", CARD, "--demo", "--out", str(checkpoint), "--seed", str(args.seed),
               "--no-cache", "--quiet", *RECIPES[recipe]]
    if recipe in ADVERSARIAL and args.pgd_epochs:
        command += ["--epochs", str(args.pgd_epochs)]
    said = " ".join(command[1:])
    timings_path = work / "train-seconds.json"
    timings = json.loads(timings_path.read_text()) if timings_path.exists() else {}
    if checkpoint.exists() and timings.get(recipe, {}).get("command") == said:
        print(f"$ {said}\n  reused ({timings[recipe]['seconds']:.0f} s when trained)", flush=True)
        return checkpoint, timings[recipe]["seconds"]
    print(f"$ {said}", flush=True)
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{recipe}: memerobust train exited {done.returncode}:\n{done.stderr[-3000:]}")
    print(f"  {done.stdout.strip().splitlines()[-1]} ({seconds:.0f} s)", flush=True)
    timings[recipe] = {"command": said, "seconds": seconds}
    timings_path.write_text(json.dumps(timings, indent=2) + "\n")
    for stale in (work / f"{recipe}.baseline.json", work / f"{recipe}.report.json"):
        stale.unlink(missing_ok=True)  # measured on the checkpoint this run replaced
    return checkpoint, seconds


def evaluate(recipe: str, checkpoint: Path, work: Path, args) -> tuple[Path, Path]:
    """The hardening suite on the demo test split against this checkpoint: (baseline, JSON report); both are reused
    when `work` holds them for this checkpoint."""
    baseline, report = work / f"{recipe}.baseline.json", work / f"{recipe}.report.json"
    if baseline.exists() and report.exists():
        return baseline, report
    command = [sys.executable, "-m", "pytest", f"--rootdir={work}", "-p", "no:cacheprovider", "-q", str(work),
               "-k", "hardening", f"--memerobust-model={CARD}", f"--memerobust-checkpoint={checkpoint}",
               f"--memerobust-cache-dir={work / 'cache'}", f"--memerobust-seed={args.seed}",
               f"--memerobust-bootstrap={args.bootstrap}", f"--memerobust-gate-resamples={args.resamples}",
               "--memerobust-workers=1", "--memerobust-tables=none",
               f"--memerobust-save-baseline={baseline}", f"--memerobust-report={report}"]
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, cwd=work)
    seconds = time.perf_counter() - start
    if not report.exists() or not baseline.exists():  # failing robustness cases are expected; no report is not
        raise SystemExit(f"{recipe}: the pytest run wrote no report (exit {done.returncode}):\n{done.stdout[-3000:]}")
    print(f"  evaluated in {seconds:.0f} s: {done.stdout.strip().splitlines()[-1]}", flush=True)
    return baseline, report


def caption_share(recipe: str, checkpoint: Path, work: Path, args) -> float:
    """The built-in modality-reliance check on this checkpoint (each meme's picture shown with another meme's caption):
    the share of informative swaps whose prediction followed the caption. Near 1, the head ignores the picture, and a
    picture attack cannot move it: its "robustness" there is blindness. The JSON is reused when `work` holds it."""
    report = work / f"{recipe}.reliance.json"
    if not report.exists():
        subprocess.run([sys.executable, "-m", "pytest", f"--rootdir={work}", "-p", "no:cacheprovider", "-q",
                        "-k", "both_channels", f"--memerobust-model={CARD}", f"--memerobust-checkpoint={checkpoint}",
                        f"--memerobust-seed={args.seed}", "--memerobust-tables=none", f"--memerobust-report={report}"],
                       capture_output=True, text=True, cwd=work)
    if not report.exists():
        raise SystemExit(f"{recipe}: the modality-reliance run wrote no report")
    [entry] = json.loads(report.read_text())["reliance"]
    return entry["swap"]["follows_text"]


def read_report(report: Path) -> dict:
    """Clean accuracy and AUROC with their intervals, and each image condition's relative robustness of accuracy and
    its accuracy, each with its interval, from the JSON report."""
    group = next(g for g in json.loads(report.read_text())["groups"] if g["suite"] == "hardening")
    clean = group["clean"]
    rows = [row for row in group["results"] if row["kind"] == "image"]
    conditions = {f"{row['image']}@{row['image_severity']}": (row["relative_robustness"]["accuracy"],
                                                              row["relative_robustness_ci"]["accuracy"])
                  for row in rows}
    accuracy = {f"{row['image']}@{row['image_severity']}": (row["metrics"]["accuracy"], row["metrics_ci"]["accuracy"])
                for row in rows}
    return {"clean": clean["metrics"], "clean_ci": clean["metrics_ci"], "conditions": conditions,
            "accuracy": accuracy}


def family_mean(conditions: dict, names: tuple[str, ...]) -> float:
    """The mean over a family's conditions of a {condition: (value, interval)} table."""
    values = [value for key, (value, _) in conditions.items() if key.split("@")[0] in names]
    return sum(values) / len(values)


def compare(plain: Path, other: Path, out: Path, args) -> dict:
    """`memerobust compare plain other --json out`, read back from its JSON."""
    out.unlink(missing_ok=True)
    done = subprocess.run([_tool("memerobust"), "compare", str(plain), str(other), "--json", str(out),
                           "--resamples", str(args.resamples)], capture_output=True, text=True)
    if not out.exists():  # exit 1 is a regression, with its JSON; no JSON is an error
        raise SystemExit(f"memerobust compare {plain.name} {other.name} exited {done.returncode}:\n{done.stderr}")
    return json.loads(out.read_text())


def _ci(value: float, ci) -> str:
    return f"{value:.3f} [{ci[0]:.3f}, {ci[1]:.3f}]"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, help="keep checkpoints, baselines, reports and the feature cache here "
                                                 "(default: a temporary folder, removed at the end)")
    parser.add_argument("--recipes", nargs="+", choices=list(RECIPES), default=list(RECIPES),
                        help="which recipes to train (plain is always trained: the others are compared with it)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--pgd-epochs", type=int, default=20,
                        help="epochs of the adversarial recipes (pgd, trades); 0: the card's demo recipe (80). "
                             "Each epoch attacks half the 480 training memes with 10-step PGD")
    parser.add_argument("--bootstrap", type=int, default=1000, help="resamples of the intervals")
    parser.add_argument("--resamples", type=int, default=2000, help="resamples of the gate's decision")
    args = parser.parse_args(argv)
    recipes = ["plain"] + [r for r in args.recipes if r != "plain"]
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        return run(recipes, args.out.resolve(), args)
    with tempfile.TemporaryDirectory(prefix="hardening-demo-") as folder:
        return run(recipes, Path(folder), args)


def run(recipes: list[str], work: Path, args) -> int:
    (work / "memerobust-hardening.toml").write_text(SUITE)
    results = {}
    for recipe in recipes:
        checkpoint, train_seconds = train(recipe, work, args)
        baseline, report = evaluate(recipe, checkpoint, work, args)
        results[recipe] = {"baseline": baseline, "train_s": train_seconds, **read_report(report),
                           "follows_caption": caption_share(recipe, checkpoint, work, args)}

    print(f"\n{CARD} demo recipe on the demo test split (160 generated memes), seed {args.seed}; relative "
          f"robustness = accuracy under the condition / clean accuracy; family = mean over its conditions; "
          f"intervals 95%, paired bootstrap of {args.bootstrap}")
    rows = [[recipe, _ci(r["clean"]["accuracy"], r["clean_ci"]["accuracy"]),
             _ci(r["clean"]["auroc"], r["clean_ci"]["auroc"]),
             *(f"{family_mean(r['conditions'], names):.3f} ({family_mean(r['accuracy'], names):.3f})"
               for names in FAMILIES.values()), f"{r['follows_caption']:.3f}", f"{r['train_s']:.0f}"]
            for recipe, r in results.items()]
    print("per family: relative robustness of accuracy (accuracy under the family), each the mean over its conditions; "
          "follows caption: the share of informative caption/picture swaps whose prediction followed the caption "
          "(the built-in modality-reliance check fails a detector above 0.95: it ignores the picture)")
    print(tabulate(rows, headers=["recipe", "clean accuracy", "clean AUROC", *FAMILIES, "follows caption", "train s"],
                   tablefmt="github", disable_numparse=True))
    conditions = list(next(iter(results.values()))["conditions"])
    for key, what in (("conditions", "relative robustness of accuracy"), ("accuracy", "accuracy")):
        print(f"\n{what} per condition [95% interval]")
        print(tabulate([[condition, *(_ci(*r[key][condition]) for r in results.values())]
                        for condition in conditions], headers=["condition", *results], tablefmt="github",
                       disable_numparse=True))

    for recipe in recipes[1:]:
        document = compare(results["plain"]["baseline"], results[recipe]["baseline"],
                           work / f"compare-plain-{recipe}.json", args)
        verdict = document["verdict"]
        improved = [change_line(c, True, c["condition"]) for c in document["comparisons"] if c.get("improved")]
        regressed = [change_line(c, False, c["condition"]) for c in document["comparisons"] if c.get("regressed")]
        print(f"\n{recipe} against plain (memerobust compare):\n  {verdict['summary']}\n  "
              f"{verdict.get('improved_summary') or 'nothing improved'}")
        print(f"  improved ({len(improved)}):" + "".join(f"\n    {line}" for line in improved))
        print(f"  regressed ({len(regressed)}):" + "".join(f"\n    {line}" for line in regressed))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
