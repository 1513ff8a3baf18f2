"""The run's options: what a run is asked to do, as one frozen value every process of the run is built from, and
the small rules that read a model or data spec."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..engine.features import FEATURE_MEMORY_MIB
from ..judge.gate import DEFAULT_RESAMPLES
from ..judge.results import StatsConfig

DEFAULT_DATA = "demo"


def training_spec(spec: str) -> str | None:
    """`pridemm:/data:test` -> `pridemm:/data:train`, `csv:/x.csv:test` -> `csv:/x.csv:train` (a generic file's
    split column may hold one); None when the loader knows no training split, or `spec` is that split itself."""
    from ..data.loaders import LOADER_SPLITS, parse_spec

    name, path, split = parse_spec(spec)
    if name == "demo":  # `demo:train` names its split where other loaders have a path
        split = str(path) if str(path) in LOADER_SPLITS["demo"] else split
    generic = not LOADER_SPLITS.get(name) and split is not None  # csv/jsonl: any word of the split column
    if split == "train" or ("train" not in LOADER_SPLITS.get(name, ()) and not generic):
        return None
    return f"{name}:train" if name == "demo" else f"{name}:{path}:train"


def shard_folder(options: "Options", run_id: str) -> Path:
    """Where the pytest-xdist workers of run `run_id` leave the shards each evaluated, for the others to read."""
    import tempfile

    return Path(options.cache_dir or tempfile.gettempdir()) / "memerobust-shards" / run_id


def split_model(model: str) -> tuple[str, str | None]:
    """`memeclip:text` -> ("memeclip", "text"): a card name (or .toml path) and an optional fusion mode."""
    if model.endswith(".toml") or ":" not in model:
        return model, None
    name, _, mode = model.rpartition(":")
    return name, mode


@dataclass(frozen=True)
class Options:
    models: tuple[str, ...] = ()
    data: str | None = None
    checkpoints: dict[str, str] = field(default_factory=dict)  # model -> path; key "" applies to every model
    device: str = "auto"
    batch_size: int = 64
    seed: int = 0
    limit: int | None = None
    sample: int | None = None  # evaluate a seeded sample of this many memes, stratified by label (data/selection.py)
    task: str | None = None
    reports: tuple[Path, ...] = ()
    cache_dir: Path | None = None  # where features, fitted attacks (universal triggers, UAPs) are kept between runs
    feature_cache: bool = True  # keep encoded features under cache_dir (False: in memory, this run only)
    feature_memory_mib: int = FEATURE_MEMORY_MIB  # features held in memory at most; beyond, read again from cache_dir
    precision: str = "auto"  # encoders in fp32 or bf16; auto: bf16 on a GPU
    ocr: str | None = None  # OCR backend that reads the captions a dataset lacks (data/ocr.py)
    captions: str = "dataset"  # or "ocr": every condition's captions read off its (perturbed) pictures
    ocr_view: int = 0  # memes per image condition whose pictures OCR reads for the OCR-robustness view (0: none)
    fuzz_examples: int = 50  # Hypothesis examples per caption-fuzzing test
    fuzz_deadline_ms: int | None = None  # Hypothesis deadline per example (None: no deadline)
    fuzz_confidence: float = 0.9  # only predictions at least this confident are fuzzed
    group: str | None = None  # meta field whose values are the groups of per-group robustness (e.g. target)
    baseline: Path | None = None  # compare against this saved baseline
    save_baseline: Path | None = None  # write this run's baseline here
    baseline_add: bool = False  # ... adding this run's checkpoint to the recipe the baseline there holds
    regression_checks: tuple = ()  # gate.RegressionCheck; empty: the default checks
    gate: str | None = None  # what fails the run: thresholds, regressions, both or non-inferiority (None: both with a
    # baseline)
    gate_error: object = None  # gate.ErrorControl over the run's comparisons (None: the family-wise error at 5%)
    gate_method: str = "auto"  # how the gate resamples for its decision: auto, bootstrap or permutation
    gate_resamples: int = DEFAULT_RESAMPLES  # the decision's resamples (stats.n_resamples: the intervals')
    tables: str = "summary"  # the terminal's tables: summary (per-family roll-ups), full or none
    allow_outside_paths: bool = False  # a dataset's image paths may lead outside its folder
    stats: StatsConfig = field(default_factory=StatsConfig)
    counterexamples: Path | None = None  # failing cases' worst memes go here (None: counterexamples.json in cache_dir)
    replay: Path | None = None  # a counterexamples manifest whose entries this run replays as tests (replay.py)
    shard_size: int | None = None  # memes per shard of the shard-major pass (None: from the pictures' size)
    workers: int | None = None  # on a CPU, worker processes that evaluate the shards (None: the usable cores)
    ray: str | None = None  # evaluate the shards on a Ray cluster: auto, local:N or ADDRESS (engine/executors.py)
    shard_folder: Path | None = None  # pytest-xdist workers: the run's folder where they split each pass's shards
    mlflow: str | None = None  # log the run to MLflow: a tracking URI, or options.DEFAULT (SQLite beside the cache)
    wandb: str | None = None  # log the run to W&B in this project (WANDB_MODE decides online or offline)
    history: Path | str | None = None  # append the run to this .jsonl history (options.DEFAULT: in the cache dir)
    export: Path | None = None  # write the run's perturbed memes as a datasets parquet set here (track/export.py)
    export_counterexamples: bool = False  # ... only the memes that flipped
    run_folder: Path | None = None  # a folder every process of the run shares (a hosted endpoint's rate and breaker)
