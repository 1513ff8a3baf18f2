"""The adaptation study in small (issue 53): how the way MiniLM is adapted changes a caption detector's robustness.

After the adaptation benchmark (`../shared/seeds/004_*.txt`), on PrideMM's real captions: the memeblip2-minilm card
trained with each adaptation method (head, linear, adapter, Compacter, LoRA at two ranks, prompt, full) on the same
small budget, and head and LoRA rank 4 on 10/25/50/100% of the training split; each checkpoint run as a user runs it
(pytest with its card) on a fixed random subsample of the test split, clean and under one caption condition per
family at severity 3. Prints, per method: trainable parameters, training wall time, clean accuracy and AUROC with 95%
bootstrap intervals, and relative robustness (accuracy under the condition / clean accuracy) per family with a paired
bootstrap interval; then the data-share table, and the paired differences behind the paper's findings 2 and 3.

Training and testing go through the `memerobust train` and `pytest` commands, one process at a time; each run's
results stay in OUT/runs/NAME, so a rerun of the same command skips what is done and only prints.

    OMP_NUM_THREADS=1 python bench/adaptation_study.py --out /tmp/adaptation-study [--epochs 3] [--test-memes 250]
"""
from __future__ import annotations

import argparse
import csv
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from pytest_memerobust.judge import metrics

PRIDEMM_FILE = "PrideMM.csv"
CARD = "memeblip2-minilm"
# One caption condition per family at severity 3: (family, condition as the suite names it, perturbation@severity)
CONDITIONS = (
    ("typos", "text=typos@3", "typos@3"),
    ("char_modification", "text=char_random_replace@3", "char_random_replace@3"),
    ("text_swap", "text=random_swap@3", "random_swap@3"),
    ("positional_drop", "text=drop_last@3", "drop_last@3"),
    ("text_addition", "text=append_irrelevant_phrase@3", "append_irrelevant_phrase@3"),
    ("human_edits", "text=leet_mix@3", "leet_mix@3"),
    ("evasion", "text=homoglyphs@3", "homoglyphs@3"),
)
# Methods on the full training split: name -> (--adaptation, lr or None for the card's). Full fine-tuning moves all
# 22.7M encoder weights: at the card's lr 1e-3 (tuned for a head on frozen features) that is outside the usual
# full fine-tuning range for a BERT-sized encoder, so it takes 1e-4, the project's default recipe.
METHODS = {
    "head": ("head", None),
    "linear": ("linear", None),
    "adapter": ("adapter", None),
    "compacter": ("compacter", None),
    "lora-r4": ("lora:rank=4", None),
    "lora-r16": ("lora:rank=16", None),
    "prompt-16": ("prompt:tokens=16", None),
    "full": ("full", 1e-4),
}
SHARE_METHODS = ("head", "lora-r4")
SHARES = (0.10, 0.25, 0.50, 1.00)
TRAIN_SPLIT, VAL_SPLIT, TEST_SPLIT = "train", "val", "test"


def meme_hash(name: str) -> float:
    """A meme's place in [0, 1) by the hash of its id: the data-share subsets are nested and the same for every
    method (10% is inside 25%, ...)."""
    return int(hashlib.sha256(name.encode()).hexdigest()[:12], 16) / 16 ** 12


def read_rows(data: Path) -> tuple[list[str], list[dict]]:
    with open(data / PRIDEMM_FILE, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        return list(reader.fieldnames or []), list(reader)


def write_rows(folder: Path, header: list[str], rows: list[dict]) -> Path:
    """A PrideMM folder holding `rows` (read by the pridemm loader like the original: same ids, tasks and splits)."""
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / PRIDEMM_FILE, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=header)
        writer.writeheader()
        writer.writerows(rows)
    return folder


def build_data(data: Path, out: Path, test_memes: int, seed: int) -> dict[str, Path]:
    """The test subsample (`test_memes` test memes drawn at random with `seed`) and, per share, the train memes whose
    id hash is below it plus the whole validation split."""
    header, rows = read_rows(data)
    test = [r for r in rows if r["split"] == TEST_SPLIT]
    if not 0 < test_memes <= len(test):
        raise SystemExit(f"--test-memes {test_memes}: the test split has {len(test)} memes")
    picked = sorted(np.random.default_rng(seed).choice(len(test), test_memes, replace=False))
    folders = {"test": write_rows(out / "data" / f"test{test_memes}", header, [test[i] for i in picked])}
    val = [r for r in rows if r["split"] == VAL_SPLIT]
    for share in SHARES:
        kept = [r for r in rows if r["split"] == TRAIN_SPLIT and meme_hash(r["name"]) < share]
        folders[share] = data if share == 1.0 else write_rows(out / "data" / f"train{round(share * 100)}", header,
                                                               kept + val)
    return folders


def write_suite(out: Path) -> Path:
    path = out / "memerobust-adaptation-study.toml"
    lines = ['[suite]', 'name = "adaptation-study"',
             'description = "one caption condition per family at severity 3 (the adaptation study in small)"', '',
             '[text]']
    lines += [f"{spec.split('@')[0]} = [{spec.split('@')[1]}]" for _, _, spec in CONDITIONS]
    path.write_text("\n".join(lines) + "\n")
    return path


def run_logged(cmd: list[str], log: Path, cwd: Path | None = None, ok=(0,)) -> float:
    """Run `cmd` with its output in `log`; the wall time in seconds. A code outside `ok` stops the study."""
    start = time.perf_counter()
    with open(log, "w") as f:
        code = subprocess.call(cmd, stdout=f, stderr=subprocess.STDOUT, cwd=cwd)
    if code not in ok:
        raise SystemExit(f"{' '.join(cmd)} exited {code}; see {log}")
    return time.perf_counter() - start


def run_one(name: str, adaptation: str, lr: float | None, data: Path, args, suite: Path, test: Path) -> dict:
    """Train and test one configuration (skipped when OUT/runs/NAME/done.json exists); its record (None with
    --report-only for a run not done)."""
    folder = args.out / "runs" / name
    done = folder / "done.json"
    if done.exists():
        return json.loads(done.read_text())
    if args.report_only:
        return None
    folder.mkdir(parents=True, exist_ok=True)
    bin_dir = Path(sys.executable).parent
    ckpt = folder / f"{name}.safetensors"
    train = [str(bin_dir / "memerobust"), "train", CARD, "--data", f"pridemm:{data}", "--adaptation", adaptation,
             "--seed", str(args.seed), "--epochs", str(args.epochs), "--batch-size", "16", "--out", str(ckpt),
             "--name", f"study-{name}", "--cache-dir", str(args.cache_dir), "--quiet"]
    if lr is not None:
        train += ["--lr", str(lr)]
    print(f"[{time.strftime('%H:%M:%S')}] training {name}: {adaptation} on {data}", flush=True)
    train_s = run_logged(train, folder / "train.log")
    trained = json.loads(ckpt.with_suffix(".metrics.json").read_text())
    baseline = folder / "baseline.json"
    test_cmd = [sys.executable, "-m", "pytest", str(suite), f"--rootdir={args.out}", "-p", "no:cacheprovider", "-q",
                f"--memerobust-model={ckpt.with_suffix('.card.toml')}", f"--memerobust-data=pridemm:{test}:test",
                f"--memerobust-cache-dir={args.cache_dir}", "--memerobust-workers=1",
                f"--memerobust-save-baseline={baseline}"]
    print(f"[{time.strftime('%H:%M:%S')}] testing {name}", flush=True)
    test_s = run_logged(test_cmd, folder / "test.log", cwd=args.out, ok=(0, 1))  # 1: some cases failed
    record = {"name": name, "adaptation": adaptation, "lr": lr or trained["hyperparameters"]["lr"],
              "data": str(data),
              "trainable_parameters": trained["trainable_parameters"], "train_s": train_s, "test_s": test_s,
              "best_epoch": trained["best_epoch"], "best_val_auroc": trained["best_val_auroc"],
              "baseline": str(baseline)}
    done.write_text(json.dumps(record, indent=2) + "\n")
    return record


def predictions(record: dict) -> dict:
    """condition -> (y, clean proba, perturbed proba) from a run's saved baseline."""
    saved = json.loads(Path(record["baseline"]).read_text())
    (model,) = saved["results"].values()
    (conditions,) = model.values()
    return {c: tuple(np.asarray(v[k]) for k in ("y", "clean", "perturbed")) for c, v in conditions.items()}


def interval(lo_hi) -> str:
    lo, hi = lo_hi
    return f"[{lo:.3f}, {hi:.3f}]"


def analyse(record: dict, n_resamples: int) -> dict:
    """Clean accuracy and AUROC with bootstrap intervals; relative robustness of accuracy per family with a paired
    one; the mean over families with its interval (the same resamples for every family)."""
    preds = predictions(record)
    y, clean, _ = preds["clean"]
    out = {"accuracy": metrics.compute_all(y, clean)["accuracy"], "auroc": metrics.compute_all(y, clean)["auroc"],
           "accuracy_ci": metrics.metric_ci("accuracy", y, clean, n_resamples),
           "auroc_ci": metrics.metric_ci("auroc", y, clean, n_resamples), "families": {}, "samples": {},
           "clean_samples": metrics.metric_samples("accuracy", y, clean, n_resamples)}
    for family, condition, _ in CONDITIONS:
        if condition not in preds:
            continue
        _, _, perturbed = preds[condition]
        samples = metrics.robustness_samples("accuracy", y, clean, perturbed, n_resamples=n_resamples)
        point = metrics.relative_robustness(metrics.compute_all(y, clean)["accuracy"],
                                            metrics.compute_all(y, perturbed)["accuracy"])
        out["families"][family] = (point, tuple(np.nanpercentile(samples, [2.5, 97.5])))
        out["samples"][family] = samples
    if out["samples"]:
        stacked = np.vstack(list(out["samples"].values()))
        out["mean_rr"] = float(np.mean([p for p, _ in out["families"].values()]))
        out["mean_rr_ci"] = tuple(np.nanpercentile(stacked.mean(axis=0), [2.5, 97.5]))
        out["mean_samples"] = stacked.mean(axis=0)
    return out


def difference(a: dict, b: dict, key: str = "mean_samples") -> str:
    """Point and 95% interval of a - b on the same resamples (same seed, same memes: a paired difference)."""
    d = a[key] - b[key]
    lo, hi = np.nanpercentile(d, [2.5, 97.5])
    point = float(np.nanmean(d))
    verdict = "a > b" if lo > 0 else "a < b" if hi < 0 else "no difference beyond noise"
    return f"{point:+.3f} [{lo:+.3f}, {hi:+.3f}] ({verdict})"


def method_table(records: dict, results: dict) -> str:
    families = [f for f, _, _ in CONDITIONS]
    head = ["method", "trainable", "train s", "clean acc [95% CI]", "clean AUROC [95% CI]",
            *[f"RR {f}" for f in families], "RR mean"]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, rec in records.items():
        r = results[name]
        cells = [f"{name} (lr {rec['lr']:g})", f"{rec['trainable_parameters']:,}", f"{rec['train_s']:.0f}",
                 f"{r['accuracy']:.3f} {interval(r['accuracy_ci'])}", f"{r['auroc']:.3f} {interval(r['auroc_ci'])}"]
        cells += [f"{r['families'][f][0]:.3f} {interval(r['families'][f][1])}" if f in r["families"] else "-"
                  for f in families]
        cells.append(f"{r['mean_rr']:.3f} {interval(r['mean_rr_ci'])}" if "mean_rr" in r else "-")
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=Path("/work/shared/data/pridemm"), help="the PrideMM folder")
    parser.add_argument("--out", type=Path, required=True, help="folder for the subsets, checkpoints and results")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--test-memes", dest="test_memes", type=int, default=250)
    parser.add_argument("--seed", type=int, default=1, help="training seed (the test subsample is drawn with 0)")
    parser.add_argument("--cache-dir", dest="cache_dir", type=Path, default=Path(".pytest_cache/d/memerobust"))
    parser.add_argument("--methods", nargs="*", default=list(METHODS), choices=list(METHODS))
    parser.add_argument("--shares", nargs="*", type=float, default=[s for s in SHARES if s < 1.0],
                        help="data shares below 1 to train head and lora-r4 on (1.0 is the method table's run)")
    parser.add_argument("--share-methods", dest="share_methods", nargs="*", default=list(SHARE_METHODS),
                        choices=list(SHARE_METHODS), help="the methods trained on the data shares")
    parser.add_argument("--resamples", type=int, default=1000)
    parser.add_argument("--report-only", dest="report_only", action="store_true",
                        help="train nothing: print the tables of the runs already done in --out")
    args = parser.parse_args(argv)
    if not (args.data / PRIDEMM_FILE).is_file():
        raise SystemExit(f"--data {args.data}: no {PRIDEMM_FILE} there")
    if unknown := [s for s in args.shares if s not in SHARES]:
        raise SystemExit(f"--shares {unknown}: the study's shares are {SHARES}")
    if args.epochs < 1:
        raise SystemExit(f"--epochs {args.epochs}: at least 1")
    args.out = args.out.resolve()
    args.cache_dir = args.cache_dir.resolve()
    args.out.mkdir(parents=True, exist_ok=True)
    folders = build_data(args.data, args.out, args.test_memes, seed=0)
    suite = write_suite(args.out)
    print(f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}; {args.epochs} epochs, seed {args.seed}, batch 16; "
          f"test: {args.test_memes} random PrideMM test memes; conditions: "
          f"{', '.join(spec for _, _, spec in CONDITIONS)}", flush=True)

    records = {name: run_one(name, *METHODS[name], folders[1.0], args, suite, folders["test"])
               for name in args.methods}
    records = {name: rec for name, rec in records.items() if rec is not None}
    share_records = {}
    for method in args.share_methods:
        for share in sorted(args.shares):
            name = f"{method}-{round(share * 100)}pct"
            share_records[(method, share)] = run_one(name, *METHODS[method], folders[share], args, suite,
                                                     folders["test"])
        if method in records:
            share_records[(method, 1.0)] = records[method]
    share_records = {key: rec for key, rec in share_records.items() if rec is not None}
    results = {rec["name"]: analyse(rec, args.resamples) for rec in [*records.values(), *share_records.values()]}

    print(f"\n## Methods ({args.epochs} epochs, seed {args.seed}, {args.test_memes} test memes; RR = accuracy under "
          f"the condition / clean accuracy, 95% paired bootstrap interval)\n")
    print(method_table(records, results))
    train_counts = {share: sum(1 for r in read_rows(folders[share])[1] if r["split"] == TRAIN_SPLIT)
                    for share in SHARES}
    print("\n## Data share (the same memes for both methods: train memes whose id hash is below the share)\n")
    print("| method | share | train memes | clean acc [95% CI] | clean AUROC [95% CI] | RR mean [95% CI] |")
    print("|---|---|---|---|---|---|")
    for (method, share), rec in sorted(share_records.items()):
        r = results[rec["name"]]
        print(f"| {method} | {share:.0%} | {train_counts[share]:,} | {r['accuracy']:.3f} {interval(r['accuracy_ci'])} "
              f"| {r['auroc']:.3f} {interval(r['auroc_ci'])} | {r['mean_rr']:.3f} {interval(r['mean_rr_ci'])} |")

    print("\n## Paired differences, a - b (95% interval on the same resampled memes): mean relative robustness over "
          "the families; clean accuracy\n")
    pairs = [("full", "adapter"), ("full", "compacter"), ("full", "lora-r4"), ("full", "head"), ("adapter", "head"),
             ("compacter", "adapter"), ("lora-r16", "lora-r4"), ("full", "linear"), ("prompt-16", "head")]
    for a, b in pairs:
        if a in results and b in results:
            print(f"- {a} - {b}: RR mean {difference(results[a], results[b])}; clean accuracy "
                  f"{difference(results[a], results[b], 'clean_samples')}")
    for (method, share), rec in sorted(share_records.items()):
        whole = share_records.get((method, 1.0))
        if whole is not None and share < 1.0:
            a, b = results[whole["name"]], results[rec["name"]]
            print(f"- {method} 100% - {method} {share:.0%}: RR mean {difference(a, b)}; clean accuracy "
                  f"{difference(a, b, 'clean_samples')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
