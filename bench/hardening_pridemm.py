"""Rainbow Noise's follow-up on real captions: does training on the edits fix what the tests find, and at what cost?

The MiniLM caption detector (memeblip2-minilm) is trained on PrideMM's training split four ways, same seed and
recipe otherwise: plain; augmented with typos; augmented with back-translation (where its MarianMT
models are installed; otherwise the row says why it did not run); adversarially trained against HotFlip. Each
checkpoint then runs every built-in suite on the test split (a caption-only detector: the picture conditions skip),
saving a baseline and a JSON report; the table gives clean accuracy and AUROC with their 95% intervals and the
relative robustness per caption family, and `memerobust compare plain X` lists what improved and what regressed
beyond noise, under the gate's family-wise error control.

    python bench/hardening_pridemm.py --data /path/to/PrideMM --work runs/ --cache-dir .cache/memerobust

Training and the runs are subprocesses of the installed `memerobust` and `pytest`, the commands a user types; a
checkpoint or baseline already in --work is reused (delete it to redo it).
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

RECIPES = {  # name -> the flags of `memerobust train` beyond the plain recipe
    "plain": [],
    "typos": ["--augment", "typos@1-5:0.5"],
    "back-translation": ["--augment", "back_translation:0.5"],
    "hotflip-adversarial": ["--adversarial", "hotflip@1:0.5"],
}
FAMILIES = ("typos", "hotflip", "universal_triggers", "back_translation")


def _bin(name: str) -> str:
    return str(Path(sys.executable).with_name(name))


def train(recipe: str, flags: list[str], args) -> dict:
    """`memerobust train` for one recipe (reused when its checkpoint exists): its folder and the seconds its
    epochs took (the metrics file's; the one-off encoding is counted apart)."""
    folder = args.work / recipe
    checkpoint = folder / "minilm.safetensors"
    if not checkpoint.exists():
        command = [_bin("memerobust"), "train", "memeblip2-minilm", "--data", f"pridemm:{args.data}", "--seed",
                   str(args.seed), "--cache-dir", str(args.cache_dir), "--out", str(checkpoint), "--name", "minilm",
                   "--quiet", *flags] + (["--epochs", str(args.epochs)] if args.epochs else [])
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            return {"folder": folder, "error": (done.stderr.strip().splitlines() or ["failed"])[-1]}
    metrics = json.loads(checkpoint.with_suffix(".metrics.json").read_text())
    return {"folder": folder, "seconds": metrics.get("training_seconds")}


def evaluate(recipe: str, args) -> tuple[Path, Path]:
    """Every built-in suite on the test split: a baseline file and a JSON report (reused when both exist)."""
    folder = args.work / recipe
    baseline, report = folder / "baseline.json", folder / "report.json"
    if baseline.exists() and report.exists():
        return baseline, report
    from pytest_memerobust.run.suite import builtin_suite_dir

    subprocess.run([_bin("python"), "-m", "pytest", f"--rootdir={folder}", "-p", "no:cacheprovider", "-q",
                    f"--memerobust-model={folder / 'minilm.card.toml'}",
                    f"--memerobust-data=pridemm:{args.data}:test", f"--memerobust-cache-dir={args.cache_dir}",
                    f"--memerobust-save-baseline={baseline}", f"--memerobust-report={report}",
                    str(builtin_suite_dir())], cwd=folder, capture_output=True, text=True)
    return baseline, report


def summary(report: Path) -> dict:
    """Clean accuracy and AUROC with their intervals, and each family's mean relative robustness of accuracy
    (the mean over the family's conditions, with the smallest and largest condition's)."""
    data = json.loads(report.read_text())
    group = next(g for g in data["groups"] if g["suite"] == "rainbow-noise")
    clean = group["clean"]
    families: dict[str, list[float]] = {}
    for group in data["groups"]:
        for row in group["results"]:
            if row["kind"] == "text" and row.get("relative_robustness"):
                families.setdefault(row["text"], []).append(row["relative_robustness"]["accuracy"])
    return {"n": clean["n"], "clean": clean["metrics"], "clean_ci": clean["metrics_ci"], "families": families}


def compare(plain: Path, other: Path, out: Path) -> tuple[list[str], list[str], str]:
    """`memerobust compare plain other --json`: (improved lines, regressed lines, the summary lines)."""
    done = subprocess.run([_bin("memerobust"), "compare", str(plain), str(other), "--json", str(out)],
                          capture_output=True, text=True)
    verdict = json.loads(out.read_text())
    lines = [line for line in done.stdout.splitlines() if "regressed" in line or "improved" in line]
    improved = [line.strip() for line in done.stdout.splitlines() if line.strip().endswith(")")
                and ", improved;" in line]
    regressed = [line.strip() for line in done.stdout.splitlines() if line.strip().endswith(")")
                 and ", regressed;" in line]
    return improved, regressed, "\n".join(lines[:2]) if lines else json.dumps(verdict)[:200]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path("../shared/data/pridemm"), help="the PrideMM folder")
    parser.add_argument("--work", type=Path, default=Path("hardening-runs"))
    parser.add_argument("--cache-dir", type=Path, default=Path(".pytest_cache/d/memerobust"))
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--epochs", type=int, help="default: the card's recipe (10)")
    parser.add_argument("--recipes", nargs="+", default=list(RECIPES), choices=list(RECIPES))
    args = parser.parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    rows, reports = [], {}
    for recipe in args.recipes:
        trained = train(recipe, RECIPES[recipe], args)
        if "error" in trained:
            rows.append(f"| {recipe} | not run: {trained['error']} |")
            continue
        _, report = evaluate(recipe, args)
        reports[recipe] = args.work / recipe
        s = summary(report)
        acc, auc = s["clean"]["accuracy"], s["clean"]["auroc"]
        (al, ah), (ul, uh) = s["clean_ci"]["accuracy"], s["clean_ci"]["auroc"]
        fam = " | ".join(f"{sum(v) / len(v):.3f} ({min(v):.3f}..{max(v):.3f})" if (v := s["families"].get(f))
                         else "-" for f in FAMILIES)
        seconds = f"{trained['seconds']:.0f}" if trained.get("seconds") else "-"
        rows.append(f"| {recipe} | {acc:.3f} ({al:.3f}..{ah:.3f}) | {auc:.3f} ({ul:.3f}..{uh:.3f}) | {fam} | "
                    f"{seconds} |")
    print(f"PrideMM test split, memeblip2-minilm, seed {args.seed}; relative robustness of accuracy per family: "
          f"mean over its conditions (smallest..largest)")
    print("| recipe | clean accuracy (95%) | clean AUROC (95%) | " + " | ".join(FAMILIES) + " | training s |")
    print("|---|---|---|" + "---|" * len(FAMILIES) + "---|")
    print("\n".join(rows))
    if "plain" in reports:
        for recipe, folder in reports.items():
            if recipe == "plain":
                continue
            improved, regressed, said = compare(reports["plain"] / "baseline.json", folder / "baseline.json",
                                                folder / "compare.json")
            print(f"\n{recipe} against plain (memerobust compare):\n{said}")
            for line in improved + regressed:
                print(f"  {line}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
