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

    return Path(options.compute.cache.folder or tempfile.gettempdir()) / "memerobust-shards" / run_id


def split_model(model: str) -> tuple[str, str | None]:
    """`memeclip:text` -> ("memeclip", "text"): a card name (or .toml path) and an optional fusion mode."""
    if model.endswith(".toml") or ":" not in model:
        return model, None
    name, _, mode = model.rpartition(":")
    return name, mode


@dataclass(frozen=True)
class DataOptions:
    """What memes the run evaluates and how it reads them."""

    spec: str | None = None  # the dataset spec (None: a suite's, else DEFAULT_DATA)
    task: str | None = None
    limit: int | None = None
    sample: int | None = None  # evaluate a seeded sample of this many memes, stratified by label (data/selection.py)
    group: str | None = None  # meta field whose values are the groups of per-group robustness (e.g. target)
    allow_outside_paths: bool = False  # a dataset's image paths may lead outside its folder
    ocr: str | None = None  # OCR backend that reads the captions a dataset lacks (data/ocr.py)
    captions: str = "dataset"  # or "ocr": every condition's captions read off its (perturbed) pictures


@dataclass(frozen=True)
class CacheOptions:
    """What the run keeps between runs: features, fitted attacks (universal triggers, UAPs), translations."""

    folder: Path | None = None  # where they are kept (None: nowhere)
    features: bool = True  # keep encoded features in `folder` (False: in memory, this run only)
    memory_mib: int = FEATURE_MEMORY_MIB  # features held in memory at most; beyond, read again from `folder`


@dataclass(frozen=True)
class RunFolders:
    """Folders every process of one run shares (set by the run, not by its user)."""

    shards: Path | None = None  # pytest-xdist workers: where they split each pass's shards
    run: Path | None = None  # a hosted endpoint's rate and breaker


@dataclass(frozen=True)
class ComputeOptions:
    """Where and how the detector is asked."""

    device: str = "auto"
    batch_size: int = 64
    precision: str = "auto"  # encoders in fp32 or bf16; auto: bf16 on a GPU
    shard_size: int | None = None  # memes per shard of the shard-major pass (None: from the pictures' size)
    workers: int | None = None  # on a CPU, worker processes that evaluate the shards (None: the usable cores)
    ray: str | None = None  # evaluate the shards on a Ray cluster: auto, local:N or ADDRESS (engine/executors.py)
    cache: CacheOptions = CacheOptions()
    folders: RunFolders = RunFolders()


@dataclass(frozen=True)
class BaselineOptions:
    """The saved baseline a run is compared with, and the one it saves."""

    path: Path | None = None  # compare against this saved baseline
    save: Path | None = None  # write this run's baseline here
    add: bool = False  # ... adding this run's checkpoint to the recipe the baseline there holds


@dataclass(frozen=True)
class JudgingOptions:
    """How the run's numbers are judged: intervals, the gate and its error control, the baseline."""

    stats: StatsConfig = StatsConfig()
    gate: str | None = None  # what fails the run: thresholds, regressions, both or non-inferiority (None: both with
    # a baseline)
    gate_error: object = None  # gate.ErrorControl over the run's comparisons (None: the family-wise error at 5%)
    gate_method: str = "auto"  # how the gate resamples for its decision: auto, bootstrap or permutation
    gate_resamples: int = DEFAULT_RESAMPLES  # the decision's resamples (stats.n_resamples: the intervals')
    regression_checks: tuple = ()  # gate.RegressionCheck; empty: the default checks
    baseline: BaselineOptions = BaselineOptions()


@dataclass(frozen=True)
class OutputOptions:
    """What the run writes besides pytest's own output."""

    reports: tuple[Path, ...] = ()
    tables: str = "summary"  # the terminal's tables: summary (per-family roll-ups), full or none
    counterexamples: Path | None = None  # failing cases' worst memes go here (None: counterexamples.json in the cache)
    export: Path | None = None  # write the run's perturbed memes as a datasets parquet set here (track/export.py)
    export_counterexamples: bool = False  # ... only the memes that flipped
    mlflow: str | None = None  # log the run to MLflow: a tracking URI, or options.DEFAULT (SQLite beside the cache)
    wandb: str | None = None  # log the run to W&B in this project (WANDB_MODE decides online or offline)
    history: Path | str | None = None  # append the run to this .jsonl history (options.DEFAULT: in the cache dir)


@dataclass(frozen=True)
class ProbeOptions:
    """The run's tests besides the suites' robustness cases: the OCR view, caption fuzzing, replayed memes."""

    ocr_view: int = 0  # memes per image condition whose pictures OCR reads for the OCR-robustness view (0: none)
    fuzz_examples: int = 50  # Hypothesis examples per caption-fuzzing test
    fuzz_deadline_ms: int | None = None  # Hypothesis deadline per example (None: no deadline)
    fuzz_confidence: float = 0.9  # only predictions at least this confident are fuzzed
    replay: Path | None = None  # a counterexamples manifest whose entries this run replays as tests (replay.py)


@dataclass(frozen=True)
class Options:
    """What a run is asked to do (the --memerobust-* options, option_table.py), by part."""

    models: tuple[str, ...] = ()
    checkpoints: dict[str, str] = field(default_factory=dict)  # model -> path; key "" applies to every model
    seed: int = 0
    data: DataOptions = DataOptions()
    compute: ComputeOptions = ComputeOptions()
    judging: JudgingOptions = JudgingOptions()
    outputs: OutputOptions = OutputOptions()
    probes: ProbeOptions = ProbeOptions()
