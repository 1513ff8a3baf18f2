"""The --memerobust-* options: the table pytest registers (one group, each option also an ini key) and the run's
Options read from it. The converters that parse each value are in options.py; plugin.py only calls `add_options`
and `run_options`."""
from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

import pytest

from . import options as conv
from .errors import ConfigError

# name, converter (None: plain string), repeatable, help
_OPTIONS = [
    ("model", None, True, "detector to test: a model card name (e.g. demo) or a card .toml path; repeatable"),
    ("data", None, False, "dataset spec NAME:PATH[:SPLIT], e.g. pridemm:/data/PrideMM:test, or a folder of pictures "
     "(default: demo)"),
    ("checkpoint", None, True, "weights overriding the card's: PATH, or MODEL=PATH; repeatable"),
    ("device", conv.device, False, "auto (default), cpu, cuda, cuda:N or mps"),
    ("batch-size", conv.positive_int, False, "inference batch size (default 64; halved on a GPU out-of-memory)"),
    ("precision", conv.precision, False,
     "encoder precision: auto (default: bf16 on a GPU, fp32 on a CPU), fp32 or bf16"),
    ("cache-dir", conv.directory, False,
     "where encoded features, fitted attacks and translations are kept between runs (default: pytest's cache, "
     ".pytest_cache/d/memerobust)"),
    ("no-cache", conv.flag, False, "keep encoded features in memory only, for this run"),
    ("feature-memory", conv.positive_int, False,
     "MiB of encoded features held in memory at most (default 1024); beyond it the least recently used are read "
     "again from the cache, so a run over many memes and conditions stays within it"),
    ("shard-size", conv.positive_int, False,
     "memes per shard: every condition is evaluated a shard of memes at a time, so memory is bounded by the shard, "
     "not the dataset (default: as many as 16 MiB of decoded pictures hold, a multiple of the batch size)"),
    ("workers", conv.workers, False,
     "on a CPU, evaluate the shards on N worker processes of this machine, each at one thread, the same bytes as one "
     "process (default auto: its usable cores; 1 inside a pytest-xdist worker; never more than the usable cores or "
     "the shards handed over); a pass runs in this process until it has run as long as the workers' start takes; "
     "on a GPU one process feeds the device"),
    ("ray", conv.ray_target, False,
     "evaluate the shards on a Ray cluster (the [ray] extra): auto (the cluster this host belongs to, else a local "
     "one), local:N (a local cluster of N CPUs) or ADDRESS (host:port of a running cluster); one actor per GPU, or "
     "per CPU on a cluster without GPUs, each loading the detector once"),
    ("ocr", conv.ocr, False, "read the captions a dataset lacks off the pictures: rapidocr (the [ocr] extra)"),
    ("captions", conv.captions, False,
     "dataset (default): the dataset's captions; ocr: every condition's captions read off its (perturbed) pictures, "
     "end to end"),
    ("ocr-view", conv.positive_int, False,
     "OCR-robustness view: read the first N memes' pictures under every image condition with OCR (rapidocr, the "
     "[ocr] extra) and report how much of the caption it still reads next to the detector's drop"),
    ("seed", conv.seed, False, "seed of every perturbation and bootstrap (default 0)"),
    ("limit", conv.positive_int, False, "use only the first N memes, for quick runs"),
    ("sample", conv.sample_size, False,
     "use a sample of N memes of the split, stratified by label and drawn from the seed and the memes' ids (the same "
     "memes on any machine and in any row order); not with --memerobust-limit"),
    ("task", None, False, "label task to evaluate (default: the model card's, e.g. hate)"),
    ("group", None, False, "meta field to slice every metric by (e.g. target); suites may limit the gap"),
    ("report", conv.report_path, True,
     "write the results, with every case's verdict, to this .json, .md or .html file; repeatable"),
    ("bootstrap", conv.positive_int, False, "bootstrap resamples for confidence intervals (default 1000)"),
    ("confidence", conv.confidence, False, "confidence level of the intervals (default 0.95)"),
    ("fuzz-examples", conv.positive_int, False, "Hypothesis examples per caption-fuzzing test (default 50)"),
    ("fuzz-deadline", conv.positive_int, False, "Hypothesis deadline per example in ms (default: none)"),
    ("fuzz-confidence", conv.confidence, False, "fuzz only predictions at least this confident (default 0.9)"),
    ("baseline", conv.json_path, False,
     "compare every condition, clean included, with this saved baseline (paired on the same memes) and fail the "
     "cases that regressed beyond noise"),
    ("gate", conv.gate, False,
     "what fails the run: thresholds (the suites' absolute thresholds), regressions (only what regressed against "
     "--memerobust-baseline; threshold failures are reported as xfail), both, or non-inferiority (pass only where "
     "each rule is shown no worse than the baseline by more than its margin, --memerobust-fail-on=acc:2%, 2 points "
     "unless given); default: both with a baseline, thresholds without"),
    ("gate-error", conv.gate_error, False,
     "error control of the baseline comparison over every condition and rule of the run: fwer (default: an equally "
     "good checkpoint fails the run at most 5% of the time; step-down max-T), holm, fdr (false discovery rate) or "
     "none (each rule alone), with an optional level: fwer:0.01, fdr:10%"),
    ("gate-method", conv.gate_method, False,
     "how the baseline comparison resamples for its decision: auto (default: paired permutations of the two "
     "checkpoints' outputs per meme below 100 memes, the paired bootstrap of the memes from 100), bootstrap or "
     "permutation"),
    ("gate-resamples", conv.positive_int, False,
     "resamples of the baseline comparison's decision (default 10000); --memerobust-bootstrap is the intervals' "
     "count"),
    ("tables", conv.tables, False,
     "robustness tables at the end of the run: summary (default: one line per perturbation family with its worst "
     "case), full (every table) or none"),
    ("save-baseline", conv.output_json_path, False, "save this run's results (with per-meme predictions) as a baseline"),
    ("baseline-add", conv.flag, False,
     "with --memerobust-save-baseline=FILE: add this run's checkpoint to the baseline FILE holds, as another "
     "checkpoint of its recipe (the same card, data, seed, memes limit, labels and conditions), so that a run gated "
     "against it is judged against the recipe's own seed-to-seed spread"),
    ("fail-on", conv.regression_check, True,
     "regression rule: acc, auroc, f1 (the metric under each condition may not drop beyond noise), flip (the flip "
     "rate may not rise beyond noise), rel_acc/rel_auroc/rel_f1 (relative robustness), each with an optional "
     "minimum effect, e.g. acc:1%; repeatable; default: acc, auroc, f1 and flip"),
    ("allow-outside-paths", conv.flag, False,
     "let a dataset's image paths lead outside its folder (absolute paths, '..', links); off by default, so a "
     "dataset file cannot make the run read, or the HTML report show, other files"),
    ("robustness-scale", conv.robustness_scale, False,
     "absolute robustness scale: percent (the definition, default) or paper (the numbers Rainbow Noise prints)"),
    ("counterexamples", conv.output_json_path, False,
     "write the worst memes of every failing case (the caption as fed, the picture's digest and the recipe that "
     "regenerates it) to this .json manifest (default: counterexamples.json in the cache dir)"),
    ("mlflow", None, False,
     "log the run to MLflow (the [mlflow] extra): one run with the options and cards as params, every condition's "
     "figures with their interval bounds as metrics, the reports and counterexamples as artifacts; a tracking URI, "
     "or alone for a local SQLite store next to the cache (sqlite:///.../mlflow.db)"),
    ("wandb", None, False,
     "log the run to Weights & Biases (the [wandb] extra) in this project (alone: pytest-memerobust); "
     "WANDB_MODE=offline keeps it on disk for `wandb sync`"),
    ("history", conv.history_path, False,
     "append this run's verdict and per-family figures to this .jsonl history (alone: history.jsonl in the cache "
     "dir); `memerobust history` prints the trend, the HTML report draws it"),
    ("export", conv.export_folder, False,
     "write the run's perturbed memes (pictures and captions as the detector read them, with its clean and perturbed "
     "probabilities) as a Hugging Face datasets parquet set into this new or empty folder (the [export] extra); "
     "`memerobust export REPORT.json` does it later from a saved report"),
    ("export-counterexamples", conv.flag, False,
     "with --memerobust-export: only the memes that flipped (right clean, wrong under the condition)"),
    ("replay", conv.json_path, False,
     "run the counterexamples of this manifest as tests instead of the suites: each fails while its meme still "
     "evades the detector (the recorded one, or --memerobust-model)"),
]


# options whose value may be left out (`--memerobust-mlflow` alone): the value they then take
_BARE = {"mlflow": conv.DEFAULT, "wandb": "pytest-memerobust", "history": conv.DEFAULT}


SHARD_FOLDER_KEY = pytest.StashKey[Path]()  # the pytest-xdist workers' shared shards, removed by the controller


def add_options(parser) -> None:
    """Every option in one group, `--memerobust-NAME`, each also settable as the ini key `memerobust_NAME`."""
    group = parser.getgroup("memerobust", "robustness of harmful-meme detectors")
    for name, convert, repeatable, help_text in _OPTIONS:
        action = "append" if repeatable else "store_true" if convert is conv.flag else "store"
        kwargs = {} if convert is conv.flag else {"type": convert}
        if name in _BARE:
            kwargs.update(nargs="?", const=_BARE[name])
        # argparse %-formats option help (a bare "%" made `pytest --help` crash); ini help is printed as it is
        group.addoption(f"--memerobust-{name}", dest=_key(name), action=action,
                        default=None, help=help_text.replace("%", "%%"), **kwargs)
        parser.addini(_key(name), help_text, type="args" if repeatable else "string")


def _key(name: str) -> str:
    """An option's destination and ini key: `batch-size` -> `memerobust_batch_size`."""
    return f"memerobust_{name.replace('-', '_')}"


def any_given(config) -> bool:
    """Whether the run names a --memerobust-* option, on its command line or in its ini file."""
    return any(config.getoption(_key(name)) is not None or config.getini(_key(name)) for name, *_ in _OPTIONS)


def _value(config, name: str, convert, repeatable: bool):
    """The command line wins over the ini file; ini values go through the same converter."""
    key = _key(name)
    value = config.getoption(key)
    if value is not None:
        return value
    raw = config.getini(key)
    if not raw:
        return None
    try:
        if repeatable:
            return [convert(v) if convert else v for v in raw]
        return convert(raw) if convert else raw
    except argparse.ArgumentTypeError as exc:
        raise pytest.UsageError(f"ini option {key}: {exc}") from None


def build_options(config):
    from .engine.features import FEATURE_MEMORY_MIB
    from .judge.gate import DEFAULT_RESAMPLES, ErrorControl
    from .judge.results import StatsConfig
    from .run.options import (BaselineOptions, CacheOptions, ComputeOptions, DataOptions, JudgingOptions, Options,
                              OutputOptions, ProbeOptions)

    v = {name.replace("-", "_"): _value(config, name, convert, rep) for name, convert, rep, _ in _OPTIONS}
    if v["limit"] and v["sample"]:
        raise ConfigError(f"--memerobust-limit={v['limit']} and --memerobust-sample={v['sample']} both choose the "
                          "memes evaluated: pass one (the sample keeps each class's share of the split)")
    stats = StatsConfig(n_resamples=v["bootstrap"] or 1000, confidence=v["confidence"] or 0.95,
                        seed=v["seed"] or 0, scale=v["robustness_scale"] or "percent")
    data = DataOptions(spec=v["data"], task=v["task"], limit=v["limit"], sample=v["sample"], group=v["group"],
                       allow_outside_paths=bool(v["allow_outside_paths"]), ocr=v["ocr"],
                       captions=v["captions"] or "dataset")
    cache = CacheOptions(folder=v["cache_dir"] or _pytest_cache_dir(config), features=not v["no_cache"],
                         memory_mib=v["feature_memory"] or FEATURE_MEMORY_MIB)
    compute = ComputeOptions(device=v["device"] or "auto", batch_size=v["batch_size"] or 64,
                             precision=v["precision"] or "auto", shard_size=v["shard_size"], workers=v["workers"],
                             ray=v["ray"], cache=cache)
    judging = JudgingOptions(stats=stats, gate=v["gate"], gate_error=v["gate_error"] or ErrorControl(),
                             gate_method=v["gate_method"] or "auto",
                             gate_resamples=v["gate_resamples"] or DEFAULT_RESAMPLES,
                             regression_checks=tuple(v["fail_on"] or ()),
                             baseline=BaselineOptions(path=v["baseline"], save=v["save_baseline"],
                                                      add=bool(v["baseline_add"])))
    outputs = OutputOptions(reports=tuple(v["report"] or ()), tables=v["tables"] or "summary",
                            counterexamples=v["counterexamples"], export=v["export"],
                            export_counterexamples=bool(v["export_counterexamples"]), mlflow=v["mlflow"],
                            wandb=v["wandb"], history=v["history"])
    probes = ProbeOptions(ocr_view=v["ocr_view"] or 0, fuzz_examples=v["fuzz_examples"] or 50,
                          fuzz_deadline_ms=v["fuzz_deadline"], fuzz_confidence=v["fuzz_confidence"] or 0.9,
                          replay=v["replay"])
    return Options(models=tuple(dict.fromkeys(v["model"] or ())), checkpoints=conv.checkpoints(v["checkpoint"] or []),
                   seed=v["seed"] or 0, data=data, compute=compute, judging=judging, outputs=outputs, probes=probes)


def _pytest_cache_dir(config) -> Path | None:
    """pytest's cache folder for this plugin (None with -p no:cacheprovider), created; one that cannot be is a
    ConfigError (a usage error), as a --memerobust-cache-dir that cannot be written is in run_options."""
    cache = getattr(config, "cache", None)
    if cache is None:
        return None
    try:
        return cache.mkdir("memerobust")
    except OSError as exc:
        raise ConfigError(f"the cache dir (pytest's cache) cannot be created ({type(exc).__name__}: "
                          f"{exc.strerror or exc}: {exc.filename}): name one with --memerobust-cache-dir=DIR, or run "
                          "without a cache (-p no:cacheprovider)") from None


def run_options(config):
    """This process's Options, checked before any case: on a pytest-xdist worker its own device and the shared shard
    folder, on the controller that folder's name (kept in config.stash for pytest_unconfigure to remove); a baseline
    the run would overwrite, Ray with pytest-xdist, a tracker or a history the run could not write are refused
    (MemeRobustError)."""
    from .run.options import shard_folder
    from .run.workers import share_cpu_threads, worker_device

    options = build_options(config)
    worker = getattr(config, "workerinput", None)  # a pytest-xdist worker: its own GPU when there are several
    if worker is not None and options.models:
        compute = options.compute
        options = dataclasses.replace(options, compute=dataclasses.replace(
            compute, device=worker_device(compute.device, worker["workerid"]),
            folders=dataclasses.replace(compute.folders, shards=shard_folder(options, worker["testrunuid"]))))
        share_cpu_threads(int(worker.get("workercount", 1)))
    elif options.models and getattr(config.option, "numprocesses", None):  # the pytest-xdist controller: it
        import uuid  # names the run, so it can remove the workers' shard folder at the end

        if getattr(config.option, "testrunuid", None) is None:
            config.option.testrunuid = uuid.uuid4().hex
        config.stash[SHARD_FOLDER_KEY] = shard_folder(options, config.option.testrunuid)
    if options.compute.ray and (worker is not None or getattr(config.option, "numprocesses", None)):
        raise ConfigError("--memerobust-ray with pytest-xdist (-n): choose one; Ray spreads the shards over its "
                          "actors itself")
    baseline = options.judging.baseline
    check_baseline_paths(baseline.path, baseline.save, baseline.add)
    if worker is None and options.models and options.compute.cache.folder is not None:  # before any case, anywhere
        named = config.getoption("memerobust_cache_dir") or config.getini("memerobust_cache_dir")
        conv.check_writable_folder(options.compute.cache.folder, "--memerobust-cache-dir" if named else
                                   "the cache dir (pytest's cache)", "name a folder this run may write" if named else
                                   "name one with --memerobust-cache-dir=DIR, or run without (-p no:cacheprovider)")
    if worker is None and options.models and (options.outputs.mlflow is not None or options.outputs.wandb is not None):
        from .track.trackers import check_trackers  # a tracker that cannot take the run: before any case

        check_trackers(options.outputs.mlflow, options.outputs.wandb, options.compute.cache.folder)
    if worker is None and options.models and options.outputs.history is not None:
        from .report.history import HistoryWarning, check_history, history_path  # one it could not append to

        damaged = check_history(history_path(options.outputs.history, options.compute.cache.folder))
        if damaged:  # its damaged lines, said once, in pytest's warnings summary (-W error makes it fatal)
            config.issue_config_time_warning(HistoryWarning(damaged), stacklevel=2)
    return options


def reports_named(config) -> tuple[Path, ...]:
    """The report files a run that names a model asks for, read leniently from its command line (else its ini
    file): for a run refused before its options were parsed, whose report paths must still say so. Only paths that
    could be this tool's reports (a report suffix, an existing folder)."""
    from .report import REPORT_SUFFIXES

    lenient = argparse.ArgumentParser(add_help=False, allow_abbrev=False, exit_on_error=False)
    for name in ("report", "model"):
        lenient.add_argument(f"--memerobust-{name}", action="append", default=[])
    try:
        named, _ = lenient.parse_known_args([str(arg) for arg in config.invocation_params.args])
    except (argparse.ArgumentError, SystemExit):
        return ()

    def ini(name: str) -> list[str]:
        try:
            return list(config.getini(f"memerobust_{name}") or [])
        except (ValueError, KeyError):
            return []

    if not (named.memerobust_model or ini("model")):
        return ()
    paths = [Path(text).expanduser() for text in named.memerobust_report or ini("report")]
    return tuple(p for p in paths if p.suffix in REPORT_SUFFIXES and p.parent.is_dir())


def check_baseline_paths(baseline: Path | None, save: Path | None, add: bool = False) -> None:
    """A run never overwrites the baseline it is gated against: its regressions would become the reference, and the
    next gated run would pass. `--memerobust-baseline-add` adds to the baseline --memerobust-save-baseline names,
    which must exist (a typo would otherwise start a recipe of one checkpoint)."""
    if add and save is None:
        raise ConfigError("--memerobust-baseline-add adds this run's checkpoint to the baseline "
                          "--memerobust-save-baseline=FILE names: pass that option too")
    if add and not Path(save).is_file():
        raise ConfigError(f"--memerobust-baseline-add: there is no baseline {save} to add this run's checkpoint to: "
                          "save the recipe's first checkpoint without --memerobust-baseline-add, then add the others")
    if baseline is None or save is None:
        return
    same = Path(baseline).resolve() == Path(save).resolve() or (
        Path(baseline).exists() and Path(save).exists() and Path(baseline).samefile(save))
    if same:
        raise ConfigError(f"--memerobust-save-baseline={save} is the file --memerobust-baseline={baseline} gates this "
                          "run against: a run never overwrites its own baseline (a regression would become the "
                          "reference and the next gated run would pass); save to another file and replace the "
                          "baseline once this run is reviewed")
