"""Wall time of the main jobs on a CPU, at 1, 2, 4 and N worker processes, against the release before the pool.

Runs each job as a user does, `pytest --memerobust-model=...` from an empty folder, one after the other (never two
at once: they would share the cores), and prints, per job, the wall and CPU seconds of each run, its ratio to the
previous release's run, and whether its JSON report is the same bytes as the others':

    python bench/cpu_scaling.py                                   # demo and PrideMM, workers 1 2 and the cores
    python bench/cpu_scaling.py --jobs pridemm --workers 1 2 4 --previous ef467cc
    python bench/cpu_scaling.py --jobs demo --xdist               # also the same job under pytest -n 2
    python bench/cpu_scaling.py --jobs pridemm --pridemm-limit 64 --batch-size 32   # a shorter PrideMM run

Jobs:
- demo: the README's main job, `--memerobust-model=memeblip2-tda` on the 160 embedded demo memes.
- pridemm: the MiniLM caption-only card (memerobust train memeblip2-minilm on PrideMM's train/val split, trained once
  into the output folder) on PrideMM's test split (507 real captions), every built-in suite (`--pridemm-limit` takes
  the first N memes for a shorter run).

The previous release (`--previous`, a git ref of this repository) is unpacked into the output folder and put first on
PYTHONPATH, so it runs with the same interpreter and packages; it has no --memerobust-workers. Runs have no pytest
cache (`-p no:cacheprovider`): no encoded features or fitted triggers carry over from one run to the next.
"""
from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import resource
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"


def unpack(ref: str, out: Path) -> Path:
    """The package of git ref `ref`, with its cards and suites inside it, under out/previous-<ref>."""
    folder = out / f"previous-{ref}"
    if not (folder / "pytest_memerobust" / "__init__.py").is_file():
        archive = subprocess.run(["git", "-C", str(REPO), "archive", ref, "pytest_memerobust", "models", "suites"],
                                 check=True, capture_output=True).stdout
        folder.mkdir(parents=True, exist_ok=True)
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(folder)
        # an installed package finds its cards and suites as pytest_memerobust.models/.suites (pyproject's
        # package-dir); put them there, or this checkout's editable install serves its own
        for data in ("models", "suites"):
            (folder / data).rename(folder / "pytest_memerobust" / data)
    return folder


def minilm_card(out: Path, data: str) -> Path:
    """The MiniLM caption-only card trained on PrideMM's train/val split, once."""
    card = out / "minilm" / "minilm.card.toml"
    if not card.is_file():
        card.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run([str(Path(sys.executable).parent / "memerobust"), "train", "memeblip2-minilm", "--data", data,
                        "--out", str(card.parent / "minilm.safetensors"), "--quiet"], check=True, cwd=card.parent)
    if not card.is_file():
        found = sorted(card.parent.glob("*.toml"))
        if not found:
            raise SystemExit(f"memerobust train wrote no card in {card.parent}")
        return found[0]
    return card


def add_release_arguments(parser: argparse.ArgumentParser) -> None:
    """--previous, --out and the hidden --child of a bench that runs releases_side_by_side."""
    parser.add_argument("--previous", help="a git ref of this repository to measure beside this checkout")
    parser.add_argument("--out", type=Path, default=Path("/tmp/memerobust-cpu-scaling"))
    parser.add_argument("--child", help=argparse.SUPPRESS)  # the card: measure in this process, print JSON


def releases_side_by_side(script: str, child_args: list[str], previous: str | None, out: Path) -> dict:
    """Release name -> the JSON `script --child CARD *child_args` prints, run on the MiniLM PrideMM card for the
    earlier release `previous` (unpacked from git, first on PYTHONPATH) and then for this checkout, one after the
    other, each in a process of its own."""
    card = str(minilm_card(out, f"pridemm:{SHARED / 'data' / 'pridemm'}"))
    releases = {"this checkout": None}
    if previous:
        releases = {previous: unpack(previous, out), **releases}
    results = {}
    for name, package in releases.items():
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(package or ""), str(REPO / "bench")) if p)}
        run = subprocess.run([sys.executable, script, "--child", card, *child_args], env=env, capture_output=True,
                             text=True, check=True)
        results[name] = json.loads(run.stdout.strip().splitlines()[-1])
    return results


def _default_sigint() -> None:
    """Ctrl-C's default in the job, which a bench started in the background (`nohup ... &`) would pass on ignored,
    so that --previous-timeout's SIGINT stops it as a user's Ctrl-C does."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def run(args: list[str], folder: Path, pythonpath: Path | None, timeout: float | None = None) -> dict:
    """One pytest run from an empty `folder`: wall and CPU seconds (its own and its children's), exit code, report.

    A run still going after `timeout` seconds is stopped with SIGINT; its wall time is then a lower bound."""
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.iterdir():
        if old.is_file():
            old.unlink()
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    with open(folder / "stdout.txt", "w") as log:
        job = subprocess.Popen([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--durations=8",
                                "--memerobust-report=r.json", *args], cwd=folder, env=env, stdout=log,
                               stderr=subprocess.STDOUT, text=True, preexec_fn=_default_sigint)
        stopped = False
        try:
            job.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            # stop it as a user's Ctrl-C would, so it writes its interrupted report (how many cases it ran)
            stopped = True
            job.send_signal(signal.SIGINT)
            try:
                job.wait(timeout=300)
            except subprocess.TimeoutExpired:
                job.kill()
                job.wait()
    wall = timeout if stopped else time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    report = folder / "r.json"
    digest = hashlib.sha256(report.read_bytes()).hexdigest()[:12] if report.is_file() and not stopped else "-"
    text = (folder / "stdout.txt").read_text(errors="replace")
    last = [line for line in text.splitlines() if line.strip()][-1:] or ["(no output)"]
    if stopped:
        verdict = json.loads(report.read_text()).get("verdict", {}) if report.is_file() else {}
        last = [f"stopped after {timeout:.0f} s: {verdict.get('cases_run', '?')} of "
                f"{verdict.get('cases_collected', '?')} cases had run"]
    return {"wall": wall, "cpu": cpu, "rc": job.returncode, "digest": digest, "last": last[0], "stopped": stopped}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", nargs="+", default=["demo", "pridemm"], choices=["demo", "pridemm"])
    parser.add_argument("--workers", nargs="+", default=None,
                        help="worker counts of this release (default: 1, 2 and the usable cores)")
    parser.add_argument("--previous", default="ef467cc", help="git ref of the release to compare with")
    parser.add_argument("--no-previous", action="store_true", help="this release only")
    parser.add_argument("--xdist", action="store_true", help="also run each job under pytest -n 2 (workers 1)")
    parser.add_argument("--pridemm", default=f"pridemm:{SHARED / 'data' / 'pridemm'}")
    parser.add_argument("--pridemm-limit", type=int, default=None, help="the first N test memes only")
    parser.add_argument("--batch-size", type=int, default=None,
                        help="--memerobust-batch-size of the PrideMM runs (a shard holds one batch on a CPU)")
    parser.add_argument("--previous-timeout", type=float, default=None,
                        help="stop the previous release's run after this many seconds (its time is then a lower bound, "
                             "and so is the speed-up)")
    parser.add_argument("--out", type=Path, default=Path("/tmp/memerobust-cpu-scaling"))
    options = parser.parse_args()
    cores = len(os.sched_getaffinity(0))
    workers = options.workers or sorted({"1", "2", str(cores)}, key=int)
    out = options.out.resolve()
    previous = None if options.no_previous else unpack(options.previous, out)
    jobs = {}
    if "demo" in options.jobs:
        jobs["demo"] = ["--memerobust-model=memeblip2-tda"]
    if "pridemm" in options.jobs:
        card = minilm_card(out, options.pridemm)
        jobs["pridemm"] = [f"--memerobust-model={card}", f"--memerobust-data={options.pridemm}:test"] + (
            [f"--memerobust-limit={options.pridemm_limit}"] if options.pridemm_limit else []) + (
            [f"--memerobust-batch-size={options.batch_size}"] if options.batch_size else [])
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    print(f"{cores} usable cores; python {sys.version.split()[0]}; {when}")
    for job, args in jobs.items():
        rows = []
        if previous is not None:
            rows.append((f"previous ({options.previous})", run(args, out / job / "previous", previous,
                                                                   options.previous_timeout)))
        for n in workers:
            rows.append((f"workers={n}", run(args + [f"--memerobust-workers={n}"], out / job / f"workers-{n}", None)))
        if options.xdist:
            rows.append(("-n 2", run(args + ["-n", "2"], out / job / "xdist", None)))
        base = rows[0][1]["wall"]
        print(f"\n{job}: {' '.join(args)}")
        print(f"{'run':<22} {'wall s':>8} {'cpu s':>8} {'speed-up':>9}  {'report sha256':<13} rc  last line")
        for name, r in rows:
            bound = ">" if rows[0][1].get("stopped") else " "
            print(f"{name:<22} {r['wall']:8.1f} {r['cpu']:8.1f} {bound}{base / r['wall']:7.2f}x  {r['digest']:<13} "
                  f"{r['rc']:<3} {r['last'][:70]}")
        ours = {r["digest"] for name, r in rows if not name.startswith("previous")}
        print(f"this release's reports: {'the same bytes at every worker count' if len(ours) == 1 else 'DIFFER'}"
              + (f"; the previous release's: {'the same' if rows[0][1]['digest'] in ours else 'other'} bytes"
                 if previous is not None else ""))


if __name__ == "__main__":
    main()
