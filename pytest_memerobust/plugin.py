"""pytest hooks only: options, suite collection, items, fixtures and the summary. The work is in the library."""
from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

import pytest

from . import options as conv
from .errors import ConfigError, MemeRobustError
from .stash import DISABLED_HINT, SESSION_KEY, session_of as _session  # the run's session, read below the plugin too

OUTCOMES_KEY = pytest.StashKey[list]()  # the robustness tests' outcomes, read once all have run
REPORT_LINES_KEY = pytest.StashKey[list]()  # what pytest_sessionfinish wrote (and could not), for the summary
COLLECTED_KEY = pytest.StashKey[int]()  # how many robustness tests were selected: an interrupted run says how far

# name, converter (None: plain string), repeatable, help
_OPTIONS = [
    ("model", None, True, "detector to test: a model card name (e.g. demo) or a card .toml path; repeatable"),
    ("data", None, False, "dataset spec NAME:PATH[:SPLIT], e.g. pridemm:/data/PrideMM:test (default: demo)"),
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
     "good checkpoint fails the run at most 5% of the time; bootstrap max-T), holm, fdr (false discovery rate) or "
     "none (each rule alone), with an optional level: fwer:0.01, fdr:10%"),
    ("tables", conv.tables, False,
     "robustness tables at the end of the run: summary (default: one line per perturbation family with its worst "
     "case), full (every table) or none"),
    ("save-baseline", conv.output_json_path, False, "save this run's results (with per-meme predictions) as a baseline"),
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


def pytest_addoption(parser):
    group = parser.getgroup("memerobust", "robustness of harmful-meme detectors")
    for name, convert, repeatable, help_text in _OPTIONS:
        action = "append" if repeatable else "store_true" if convert is conv.flag else "store"
        kwargs = {} if convert is conv.flag else {"type": convert}
        if name in _BARE:
            kwargs.update(nargs="?", const=_BARE[name])
        # argparse %-formats option help (a bare "%" made `pytest --help` crash); ini help is printed as it is
        group.addoption(f"--memerobust-{name}", dest=f"memerobust_{name.replace('-', '_')}", action=action,
                        default=None, help=help_text.replace("%", "%%"), **kwargs)
        parser.addini(f"memerobust_{name.replace('-', '_')}", help_text, type="args" if repeatable else "string")


def _value(config, name: str, convert, repeatable: bool):
    """The command line wins over the ini file; ini values go through the same converter."""
    key = f"memerobust_{name.replace('-', '_')}"
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
    from .judge.gate import ErrorControl
    from .results import StatsConfig
    from .session import Options

    v = {name.replace("-", "_"): _value(config, name, convert, rep) for name, convert, rep, _ in _OPTIONS}
    stats = StatsConfig(n_resamples=v["bootstrap"] or 1000, confidence=v["confidence"] or 0.95,
                        seed=v["seed"] or 0, scale=v["robustness_scale"] or "percent")
    return Options(
        models=tuple(dict.fromkeys(v["model"] or ())), data=v["data"],
        checkpoints=conv.checkpoints(v["checkpoint"] or []), device=v["device"] or "auto",
        batch_size=v["batch_size"] or 64, seed=v["seed"] or 0, limit=v["limit"], task=v["task"],
        reports=tuple(v["report"] or ()), stats=stats, group=v["group"],
        cache_dir=v["cache_dir"] or (config.cache.mkdir("memerobust") if getattr(config, "cache", None) else None),
        feature_cache=not v["no_cache"], feature_memory_mib=v["feature_memory"] or FEATURE_MEMORY_MIB,
        precision=v["precision"] or "auto", ocr=v["ocr"],
        captions=v["captions"] or "dataset", ocr_view=v["ocr_view"] or 0,
        fuzz_examples=v["fuzz_examples"] or 50, fuzz_deadline_ms=v["fuzz_deadline"],
        fuzz_confidence=v["fuzz_confidence"] or 0.9,
        baseline=v["baseline"], save_baseline=v["save_baseline"], regression_checks=tuple(v["fail_on"] or ()),
        gate=v["gate"], gate_error=v["gate_error"] or ErrorControl(), tables=v["tables"] or "summary",
        allow_outside_paths=bool(v["allow_outside_paths"]),
        counterexamples=v["counterexamples"], replay=v["replay"],
        shard_size=v["shard_size"], ray=v["ray"], mlflow=v["mlflow"], wandb=v["wandb"],
        history=v["history"], export=v["export"], export_counterexamples=bool(v["export_counterexamples"]),
    )


SIGTERM_KEY = pytest.StashKey()
SHARD_FOLDER_KEY = pytest.StashKey[Path]()  # the pytest-xdist workers' shared shards, removed by the controller


class Terminated(KeyboardInterrupt):
    """SIGTERM (a CI system cancelling the job, `kill`): pytest's interrupted path, so the run says it stopped and
    writes no partial report, instead of dying mid-write."""


def _raise_terminated(signum, frame):
    raise Terminated(f"terminated by signal {signum}")


def _interrupt_on_sigterm(config) -> None:
    """Turn SIGTERM into an interruption for this run (main thread only; a handler someone else set is kept)."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        config.stash[SIGTERM_KEY] = signal.signal(signal.SIGTERM, _raise_terminated)


def pytest_unconfigure(config):
    import signal

    session = config.stash.get(SESSION_KEY, None)
    if session is not None:
        session.close()
    folder = config.stash.get(SHARD_FOLDER_KEY, None)
    if folder is not None:
        import shutil

        shutil.rmtree(folder, ignore_errors=True)

    previous = config.stash.get(SIGTERM_KEY, None)
    if previous is not None and signal.getsignal(signal.SIGTERM) is _raise_terminated:
        signal.signal(signal.SIGTERM, previous)


def _check_baseline_paths(baseline: Path | None, save: Path | None) -> None:
    """A run never overwrites the baseline it is gated against: its regressions would become the reference, and the
    next gated run would pass."""
    if baseline is None or save is None:
        return
    same = Path(baseline).resolve() == Path(save).resolve() or (
        Path(baseline).exists() and Path(save).exists() and Path(baseline).samefile(save))
    if same:
        raise ConfigError(f"--memerobust-save-baseline={save} is the file --memerobust-baseline={baseline} gates this "
                          "run against: a run never overwrites its own baseline (a regression would become the "
                          "reference and the next gated run would pass); save to another file and replace the "
                          "baseline once this run is reviewed")


def pytest_configure(config):
    from .session import RobustnessSession, share_cpu_threads, shard_folder, worker_device
    from .suite import builtin_suite_arg, builtin_suite_paths, find_suite_files

    try:
        options = build_options(config)
        worker = getattr(config, "workerinput", None)  # a pytest-xdist worker: its own GPU when there are several
        if worker is not None and options.models:
            options = dataclasses.replace(options, device=worker_device(options.device, worker["workerid"]),
                                          shard_folder=shard_folder(options, worker["testrunuid"]))
            share_cpu_threads(int(worker.get("workercount", 1)))
        elif options.models and getattr(config.option, "numprocesses", None):  # the pytest-xdist controller: it
            import uuid  # names the run, so it can remove the workers' shard folder at the end

            if getattr(config.option, "testrunuid", None) is None:
                config.option.testrunuid = uuid.uuid4().hex
            config.stash[SHARD_FOLDER_KEY] = shard_folder(options, config.option.testrunuid)
        if options.ray and (worker is not None or getattr(config.option, "numprocesses", None)):
            raise ConfigError("--memerobust-ray with pytest-xdist (-n): choose one; Ray spreads the shards over its "
                              "actors itself")
        _check_baseline_paths(options.baseline, options.save_baseline)
        if worker is None and options.models and (options.mlflow is not None or options.wandb is not None):
            from .track.trackers import check_trackers  # a tracker that cannot take the run: before any case

            check_trackers(options.mlflow, options.wandb, options.cache_dir)
        if worker is None and options.models and options.history is not None:
            from .report.history import check_history, history_path  # a history the run could not append to

            check_history(history_path(options.history, options.cache_dir))
        session = RobustnessSession(options)
    except MemeRobustError as exc:
        raise pytest.UsageError(str(exc)) from None
    config.stash[SESSION_KEY] = session
    config.addinivalue_line("markers", "memerobust: a robustness case collected from a memerobust suite file")
    if session.options.replay is not None:  # the manifest's counterexamples instead of the suites
        from .replay import read_manifest, replay_arguments

        try:
            read_manifest(session.options.replay)  # a bad manifest is one usage error, before anything runs
        except MemeRobustError as exc:
            raise pytest.UsageError(str(exc)) from None
        config.args[:] = replay_arguments(config.args, session.options.replay,
                                          named=config.args_source == pytest.Config.ArgsSource.ARGS)
        return
    if not session.options.models:
        if config.args_source == pytest.Config.ArgsSource.ARGS:  # a pasted built-in case id, without its model
            from .suite import builtin_suite_model_hint

            hint = next(filter(None, map(builtin_suite_model_hint, config.args)), None)
            if hint is not None:
                raise pytest.UsageError(hint)
        return
    _interrupt_on_sigterm(config)
    from .replay import LOG_PLUGIN, CounterexampleLog

    config.pluginmanager.register(CounterexampleLog(), LOG_PLUGIN)  # failing cases' memes, for the manifest
    config.pluginmanager.register(CaseLog(), CASE_LOG)  # every case's verdict record, for the reports
    if config.args_source == pytest.Config.ArgsSource.ARGS:
        # A pasted node id of a built-in suite re-runs from any directory.
        config.args[:] = [builtin_suite_arg(arg) for arg in config.args]
    else:
        # A model and no paths: the robustness job. The built-in suites and the user's memerobust-*.toml suites
        # under the test paths run, not the rest of the test tree (a project's unit tests are not robustness cases;
        # name their paths to run them too).
        config.args[:] = [*map(str, builtin_suite_paths()), *map(str, find_suite_files(config.args))]


def pytest_report_header(config):
    session = _session(config)
    if session.options.replay is not None:
        return [f"memerobust: replaying the counterexamples of {session.options.replay}"]
    if not session.options.models:
        return [DISABLED_HINT]
    o = session.options
    return [f"memerobust: models {', '.join(o.models)}; data {session.data_spec()}; seed {o.seed}; "
            f"device {o.device}" + (f"; first {o.limit} memes" if o.limit else "")]


def _builtin_nodeid(file_path: Path) -> str | None:
    """Built-in suites are named by their name wherever they are installed: `rainbow-noise`, `test_caption_fuzz.py`
    (outside the rootdir pytest would give them an empty file part)."""
    from .suite import builtin_suite_dir

    if file_path.resolve().parent != builtin_suite_dir().resolve():
        return None
    return file_path.stem if file_path.suffix == ".toml" else file_path.name


def pytest_collect_file(file_path: Path, parent):
    from .replay import manifest_file
    from .suite import is_suite_file

    manifest = manifest_file(file_path, parent, _session(parent.config).options.replay)
    if manifest is not None:
        return manifest
    if is_suite_file(file_path):
        from .items import SuiteFile

        return SuiteFile.from_parent(parent, path=file_path, nodeid=_builtin_nodeid(file_path))
    return None


def pytest_pycollect_makemodule(module_path: Path, parent):
    nodeid = _builtin_nodeid(module_path)
    if nodeid is not None:
        return pytest.Module.from_parent(parent, path=module_path, nodeid=nodeid)
    return None


@pytest.fixture(scope="session")
def memerobust_session(request):
    """The run's shared RobustnessSession: loaded detectors, datasets and results, shared with the suites."""
    return _session(request.config)


@pytest.fixture
def memerobust(memerobust_session):
    """Evaluate conditions in a hand-written test: `memerobust.evaluate(text="typos", severity=3)`."""
    from .probe import Probe

    if not memerobust_session.options.models:
        pytest.skip(DISABLED_HINT)
    return Probe(memerobust_session, memerobust_session.options.models[0])


@pytest.fixture
def memerobust_detector(memerobust):
    return memerobust.detector


@pytest.fixture
def memerobust_dataset(memerobust):
    return memerobust.dataset


def _is_robustness_test(report) -> bool:
    """A suite case or a test of a built-in Python suite: collection marked both (`_mark_robustness_tests`)."""
    return any(name in ("memerobust.model", "memerobust.suite") for name, _ in report.user_properties)


def _mark_robustness_tests(items, session) -> None:
    """Properties every report of a robustness test carries (also to a pytest-xdist controller): a case's model
    label, or the built-in Python suite a test comes from."""
    from .items import BudgetItem, CaseItem
    from .suite import builtin_suite_paths

    builtin = {p.name for p in builtin_suite_paths() if p.suffix == ".py"}
    for item in items:
        if isinstance(item, (CaseItem, BudgetItem)):
            item.user_properties.append(("memerobust.model", session.model_label(item.model)))
            item.user_properties.append(("memerobust.where", json.dumps(_where(item, session))))
        elif Path(str(item.path)).name in builtin:
            item.user_properties.append(("memerobust.suite", Path(str(item.path)).name))


def _where(item, session) -> dict:
    """Where a case sits, for the record of a case that is skipped before it runs."""
    from .items import CaseItem
    from .judge.verdict import condition_family

    s = item.suite
    condition = item.condition if isinstance(item, CaseItem) else None
    return {"model": session.model_label(item.model), "dataset": session.data_spec(s.dataset, s.captions),
            "suite": s.name, "condition": condition.id if condition else item.name,
            "family": condition_family(condition) if condition else "evasion budgets"}


class CaseLog:
    """The robustness tests' reports as they arrive (on a pytest-xdist controller too): what the run's verdict and
    the reports' case records are built from."""

    def __init__(self):
        self.reports = []

    def pytest_runtest_logreport(self, report):
        if _is_robustness_test(report) and (report.when == "call" or report.outcome != "passed"):
            self.reports.append(report)


CASE_LOG = "memerobust-case-log"


def _outcome(report) -> str:
    return "xfailed" if hasattr(report, "wasxfail") else report.outcome


def _reason(report) -> str | None:
    if hasattr(report, "wasxfail"):
        return report.wasxfail
    if report.skipped and isinstance(report.longrepr, tuple):
        return str(report.longrepr[2]).removeprefix("Skipped: ")
    return None


def case_records(config) -> list[dict]:
    """Every robustness test's record (judge.verdict.record_from_report), in collection order."""
    from .judge.verdict import record_from_report

    log = config.pluginmanager.get_plugin(CASE_LOG)
    if log is None:
        return []
    order = _session(config).positions
    reports = sorted(log.reports, key=lambda r: order.get(r.nodeid, 0))
    return [record_from_report(r.nodeid, _outcome(r), r.user_properties, _reason(r)) for r in reports]


def _outcomes(terminalreporter) -> list:
    """The robustness tests' outcomes as the verdict reads them, in the order they ran."""
    reports = [r for key in ("passed", "failed", "skipped") for r in terminalreporter.stats.get(key, [])
               if getattr(r, "nodeid", None) is not None and (r.when == "call" or r.outcome != "passed")
               and _is_robustness_test(r)]
    order = _session(terminalreporter.config).positions
    reports.sort(key=lambda r: order.get(r.nodeid, 0))
    return _outcomes_of(reports)


def compact_failures(config) -> bool:
    """A failing robustness test prints one line in the memerobust section instead of pytest's failure section and
    short summary: unless the user asked pytest for them (-v, --tb=..., -r with other characters than the default)."""
    return (config.get_verbosity() <= 0 and getattr(config.option, "tbstyle", "auto") == "auto"
            and getattr(config.option, "reportchars", "fE") in ("fE", "Ef", "f"))


@pytest.hookimpl(specname="pytest_terminal_summary", wrapper=True, tryfirst=True)
def pytest_terminal_summary_compact(terminalreporter, config):
    """By default a failing robustness test is left out of pytest's failures and short summary (its line is in the
    memerobust section, which ends the output); `-v`, `--tb` or `-r` give pytest's own sections as well."""
    session = config.stash.get(SESSION_KEY, None)
    if session is not None and session.options.models:
        config.stash[OUTCOMES_KEY] = _outcomes(terminalreporter)
    failed = terminalreporter.stats.get("failed", [])
    ours = [r for r in failed if _is_robustness_test(r)] if session is not None and compact_failures(config) else []
    if ours:
        terminalreporter.stats["failed"] = [r for r in failed if r not in ours]
    try:
        return (yield)
    finally:
        if ours:
            terminalreporter.stats["failed"] = failed


def _raised(item, call) -> bool:
    """A robustness case that raised instead of being measured (an error, or a detector that declined every meme),
    as opposed to one failing its thresholds or regressing: its record says which exception."""
    from .items import BudgetFailure, BudgetItem, CaseItem, RobustnessFailure

    if call.when != "call":
        return True
    return isinstance(item, (CaseItem, BudgetItem)) and not isinstance(call.excinfo.value,
                                                                        (RobustnessFailure, BudgetFailure))


def _outcomes_of(reports) -> list:
    from .judge.verdict import CaseOutcome

    return [CaseOutcome.from_properties(r.nodeid, r.outcome, r.user_properties) for r in reports]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """A failing test of a built-in Python suite (caption fuzzing, reliance) keeps its failure's message and
    Hypothesis' falsifying example as its compact line, without the traceback."""
    report = yield
    if report.failed and call.excinfo is not None and _is_robustness_test(report) \
            and not any(name == "memerobust.line" for name, _ in report.user_properties):
        exc = call.excinfo.value
        lines = [f"{type(exc).__name__}: {line}" if i == 0 else line
                 for i, line in enumerate(str(exc).strip().splitlines()[:6] or [""])]
        # Hypothesis' note with the failing example ("Falsifying example:" or, lately, "Failing test case:")
        lines += [note for note in getattr(exc, "__notes__", [])
                  if note.startswith(("Falsifying", "Failing test case"))][:1]
        report.user_properties.append(("memerobust.line", "\n".join(lines)))
    if report.failed and call.excinfo is not None and _is_robustness_test(report) and _raised(item, call):
        report.user_properties.append(("memerobust.error", call.excinfo.typename))  # the case's record names it
    rs = item.config.stash.get(SESSION_KEY, None)
    if report.failed and call.excinfo is not None and rs is not None and rs.gate == "regressions" \
            and any(name == "memerobust.suite" for name, _ in report.user_properties):
        # a built-in Python suite's check is absolute, not a regression: reported, not gating
        line = dict(report.user_properties).get("memerobust.line", "").splitlines()[:1]
        report.outcome, report.wasxfail = "skipped", ("failed its check, not gating under --memerobust-gate="
                                                      f"regressions: {line[0] if line else ''}")
    return report


def pytest_terminal_summary(terminalreporter, config):
    """The tables first (per-family roll-ups by default), what was written, then the failing tests, the gate's
    side-by-side comparison and the verdict: the last screen says what failed."""
    session = config.stash.get(SESSION_KEY, None)
    if session is None or not session.options.models:
        return
    from .report.outline import baseline_notes
    from .report.tables import family_rollup, gate_table, verdict_lines

    tr = terminalreporter
    if session.results or session.reliance_results or session.prompt_results:
        _write_tables(tr, session, family_rollup)
        for note in session.run_notes():
            _say(tr, f"memerobust: {note}")
        _say(tr, f"memerobust: {session.cache_summary()}")
    for line in config.stash.get(REPORT_LINES_KEY, []):  # what was written (an interrupted run: what was not)
        _say(tr, line)
    outcomes = config.stash.get(OUTCOMES_KEY, [])
    failed = [o for o in outcomes if o.outcome == "failed"]
    if failed:
        from .judge.verdict import failure_lines

        tr.write_sep("=", f"memerobust: {len(failed)} failing robustness test{'s' * (len(failed) != 1)}"
                     + (" (-v for details)" if compact_failures(config) else ""), red=True)
        for line in failure_lines(failed):
            _say(tr, line)
    verdict = getattr(session, "verdict", None)
    if verdict is None:
        return
    if verdict.get("baseline"):
        b = verdict["baseline"]
        tr.write_sep("=", f"memerobust gate: this run against the baseline {b['path']}")
        if b["rows"]:
            tr.write_line(_fit(gate_table(b), tr))
        _say(tr, b["summary"], red=bool(b["regressed"]), green=not b["regressed"])
        for line in baseline_notes(b):  # the error control, the power, conditions only one side has
            _say(tr, line)
    tr.write_sep("=", "memerobust verdict", red=not verdict["passed"], green=verdict["passed"])
    for line in verdict_lines(verdict):
        last = line.startswith(("PASSED", "FAILED", "INTERRUPTED"))
        _say(tr, line, bold=last, red=last and not verdict["passed"] and not verdict.get("interrupted"),
             yellow=last and bool(verdict.get("interrupted")), green=last and verdict["passed"])
    from .outputs import written_line

    written = config.stash.get(REPORT_LINES_KEY, [])
    for path in session.options.reports:  # where the whole story is, as the very last line
        if path.suffix == ".html" and written_line(path) in written:
            _say(tr, f"memerobust: the full report is {path.resolve()}")


def _say(tr, line: str, **markup) -> None:
    """One line, whole: CI logs and `grep` read these lines, so prose is never broken (tables are fitted)."""
    tr.write_line(line, **markup)


def _write_tables(tr, session, family_rollup) -> None:
    """`--memerobust-tables`: summary (one line per perturbation family), full (every table) or none."""
    if session.options.tables == "none":
        return
    from .report import render
    from .session import split_model

    full = session.options.tables == "full"
    tr.write_sep("=", "memerobust tables" + ("" if full else " per family (--memerobust-tables=full: all)"))
    for model in dict.fromkeys(split_model(key[0])[0] for key in session.results):
        card = session.detector(model).card
        if card.demo_weights and model not in session.options.checkpoints and "" not in session.options.checkpoints:
            _say(tr, f"note: {model!r} runs with demo weights trained on generated memes; pass "
                     f"--memerobust-checkpoint=PATH (and --memerobust-data=NAME:PATH) to test real weights on real "
                     "memes")
    try:
        report = session.report()
        tr.write_line(_fit(render(report) if full else family_rollup(report), tr, crop=not full))
    except Exception as exc:  # the hooks never crash: say what failed, keep the rest of the summary
        tr.write_line(f"memerobust: the tables could not be built ({type(exc).__name__}: {exc})")


def _fit(text: str, tr, crop: bool = True) -> str:
    """Lines cut to the terminal's width (with an ellipsis) so a table never wraps into an unreadable mess."""
    width = tr._tw.fullwidth
    if not crop or width <= 0:
        return text
    return "\n".join(line if len(line) <= width else line[:width - 1] + "…" for line in text.splitlines())


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(session, config, items):
    """Positions of the selected tests, which order the report the same with or without pytest-xdist, and the
    conditions they will evaluate, whose perturbations the engine then computes ahead."""
    from .items import CaseItem

    rs = _session(config)
    rs.positions = {item.nodeid: i for i, item in enumerate(items)}
    if rs.options.models:
        _mark_robustness_tests(items, rs)
        config.stash[COLLECTED_KEY] = sum(_is_robustness_test(item) for item in items)
    cases = {}
    for item in items:
        if isinstance(item, CaseItem):
            s = item.suite
            rs.plan(item.model, s.dataset, item.condition, s.captions, task=s.task, group=s.group, nodeid=item.nodeid)
            cases.setdefault((item.model, s.dataset, s.task, s.captions, s.group), item.nodeid)
    if any(("memerobust.suite", Path(str(item.path)).name) in item.user_properties for item in items):
        cases.setdefault((rs.options.models[0], None, None, None, None), "")  # the Python suites' model and data
    # Options, cards, checkpoints, modes and dataset rows checked once, before any case runs: a problem is one
    # usage error naming the culprit, not the same failure in every case.
    for (model, data, task, captions, group), nodeid in cases.items():
        try:
            rs.check_case(model, data, task, captions, group)
        except MemeRobustError as exc:
            where = f" (the dataset a suite names, first used by {nodeid})" if data and not rs.options.data else ""
            raise pytest.UsageError(f"memerobust: {exc}{where}") from None
    try:  # a suite's [defence] whose extra is missing: one usage error, not every defended case skipped
        from .defences import check_defences

        check_defences((i.condition.defence, Path(str(i.path)).name) for i in items if isinstance(i, CaseItem))
    except MemeRobustError as exc:
        raise pytest.UsageError(f"memerobust: {exc}") from None
    try:  # a baseline that does not match the run: one usage error naming the field
        rs.check_baseline([(model, data, task, captions) for model, data, task, captions, _ in cases])
    except MemeRobustError as exc:
        raise pytest.UsageError(f"memerobust: {exc}") from None
    if rs.options.replay is not None:  # likewise every counterexample's model, dataset, perturbations and meme
        from .replay import ReplayItem, check_replay

        try:
            check_replay(rs, [(i.manifest, i.index, i.entry, i.model) for i in items if isinstance(i, ReplayItem)])
        except MemeRobustError as exc:
            raise pytest.UsageError(f"memerobust: {exc}") from None


def pytest_runtest_setup(item):
    rs = item.config.stash.get(SESSION_KEY, None)
    if rs is not None:
        rs.position = rs.positions.get(item.nodeid, rs.position)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """On the pytest-xdist controller: merge a finished worker's results, so the tables cover the whole grid."""
    wire = getattr(node, "workeroutput", {}).get("memerobust")
    if wire is not None:
        _session(node.config).merge_wire(wire)


def pytest_sessionfinish(session, exitstatus):
    rs = session.config.stash.get(SESSION_KEY, None)
    if rs is None:
        return
    if hasattr(session.config, "workeroutput"):  # a pytest-xdist worker: the controller reports
        session.config.workeroutput["memerobust"] = rs.to_wire()
        return
    if rs.options.models and rs.options.replay is None and exitstatus != pytest.ExitCode.USAGE_ERROR:
        from .judge.verdict import run_verdict

        rs.case_records = case_records(session.config)
        rs.verdict = run_verdict(rs.case_records, gate=rs.gate, baseline=rs.options.baseline,
                                 baseline_conditions=rs.baseline_conditions(),
                                 interrupted=exitstatus == pytest.ExitCode.INTERRUPTED,
                                 collected=_collected(session))
    if not (rs.results or rs.reliance_results or rs.prompt_results or rs.case_records) \
            and exitstatus != pytest.ExitCode.INTERRUPTED:
        return  # nothing ran (no case selected): no report claims anything
    from .judge.gate import terminal_line
    from .outputs import write_outputs
    from .replay import LOG_PLUGIN

    log = session.config.pluginmanager.get_plugin(LOG_PLUGIN)  # the failing cases' counterexamples
    session.config.stash[REPORT_LINES_KEY] = write_outputs(
        rs, interrupted=exitstatus == pytest.ExitCode.INTERRUPTED, root=session.config.rootpath,
        counterexample_cases=log.cases if log is not None else None, write=terminal_line(session.config))


def _collected(session) -> int | None:
    """How many robustness tests the run selected (on a pytest-xdist controller, which collects nothing itself, how
    many tests its workers collected); None when it was interrupted before collection ended."""
    collected = session.config.stash.get(COLLECTED_KEY, None)
    if collected is None and getattr(session.config.option, "numprocesses", None):
        return session.testscollected or None
    return collected
