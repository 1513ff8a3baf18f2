"""The library's front door: options in, detectors and datasets loaded once, results recorded for the report.

The pytest plugin builds one of these per run; hand-written tests, the suites and the report all share it.
It is plain Python, so the same evaluation runs without pytest.
"""
from __future__ import annotations

import functools
from dataclasses import replace
from pathlib import Path

import numpy as np

from ..data import Dataset
from ..detectors import find_card, load_detector
from ..detectors.registry import check_device, resolve_device
from ..data.meme import is_multilabel
from ..engine import AttackState, EncodingSettings, Engine, Readers, RunPlace, engine_sides
from ..perturb.conditions import Condition
from ..engine.engine import channels_read
from ..perturb import get as get_perturbation
from ..errors import ConfigError, DataError, ModeNotRead, NothingToFitOn
from ..engine.features import FeatureStore, detector_feature_store
from ..engine.executors import make_executor
from ..engine.shards import ShardRunner
from ..judge.results import Answers, AttackMeasures, ConditionResult, Memes
from ..data.fit_memes import FitMemes
from ..data.loaders import check_task
from ..data.ocr import SCENE_TEXT
from ..data.reading import CAPTIONS_BY_OCR, load_memes, read_missing_captions
from .analysis_registry import AnalysisRecords
from .options import DEFAULT_DATA, BaselineOptions, Options, RunFolders, split_model, training_spec
from .session_parts import Execution, Loaded, Outcomes, ResultOrder, RunNotes, RunPlan
from .workers import WorkerReturns

# bf16 encoders must give the fp32 predictions within this, on the run's first memes, to be used (see `precision`)
BF16_TOLERANCE = {"mean_abs_diff": 0.01, "agreement": 0.99}
BF16_CHECK_MEMES = 64


def bf16_check(detector, dataset: Dataset) -> dict:
    """Clean class probabilities of `dataset` with the encoders in bf16 and in fp32, and whether they agree within
    BF16_TOLERANCE (mean absolute difference of probabilities, share of equal predicted classes)."""
    fp32 = Engine(detector, dataset, asking=EncodingSettings(precision="fp32")).predict(Condition())
    bf16 = Engine(detector, dataset, asking=EncodingSettings(precision="bf16")).predict(Condition())
    mean_abs_diff = float(np.abs(fp32 - bf16).mean())
    agreement = float((fp32.argmax(1) == bf16.argmax(1)).mean())
    return {"n": len(dataset), "mean_abs_diff": mean_abs_diff, "agreement": agreement,
            "passed": mean_abs_diff <= BF16_TOLERANCE["mean_abs_diff"] and agreement >= BF16_TOLERANCE["agreement"]}


def _defence(defence_id: str | None):
    """The defences.Defence of an id ("nfkc+confusables"), or None."""
    if not defence_id:
        return None
    from ..detectors.defences import Defence

    return Defence.parse(defence_id)


def engine_in_worker(options: Options, model: str, spec: str, task: str | None, defence: str | None,
                     source: str | None = None) -> Engine:
    """The engine of `model` on `spec` built from `options` in another process (a local pool worker or a Ray
    actor): the same detector, memes and settings as the run's, for the shards it is handed."""
    return RobustnessSession(options).engine(model, spec, task, defence, source)


class RobustnessSession:
    """One run: its options and model cards, and the parts it is assembled from (session_parts.py). Constructing it
    reads the cards and checks the options (an unknown model, device or checkpoint fails here); `start` reaches
    outside the process (loads the baseline, reaches a Ray cluster), so that what fails there fails before any case.
    The plugin starts its session at once; for a library user who does not, the baseline is loaded and the executor
    made when first asked for."""

    def __init__(self, options: Options):
        self.options = options
        self.cards = {m: find_card(split_model(m)[0]) for m in options.models}  # fails early on an unknown name
        if options.models:
            check_device(options.compute.device)
        self._check_checkpoints()
        self.loaded = Loaded()
        self.notes = RunNotes()
        self.analyses = AnalysisRecords()  # what the analyses that run a detector found (run/analysis_registry.py)
        self.from_workers = WorkerReturns()  # what pytest-xdist workers handed the controller (run/workers.py)
        self.planned = RunPlan()
        self.ordering = ResultOrder()
        self.outcomes = Outcomes()
        self.execution = Execution(self._make_executor)
        from ..judge.gate import gate_mode

        self.gate = gate_mode(options.judging.gate, options.judging.baseline.path is not None)  # what fails the run

    def start(self) -> "RobustnessSession":
        """Load the baseline (an unreadable one fails here), refuse a gate that could never fail, and make the
        executor (a cluster is reached now, so a bad one is one usage error before any case)."""
        options = self.options
        from ..judge.gate import DEFAULT_CONTROL, check_resamples, gates_regressions

        if self.baseline is not None and gates_regressions(self.gate):  # the baseline is loaded now
            check_resamples(options.judging.gate_error or DEFAULT_CONTROL, options.judging.gate_resamples,
                            "--memerobust-gate-resamples")
        self.execution.executor  # noqa: B018  made now
        return self

    def _make_executor(self):
        """Who evaluates the shards (None: this process): a Ray cluster, a local pool or this process."""
        options = self.options
        return make_executor(options.compute.ray if options.models else None, options.compute.folders.shards,
                             gpus=bool(options.models) and resolve_device(options.compute.device).startswith("cuda"),
                             workers=options.compute.workers if options.models else 1)

    @property
    def baseline(self) -> dict | None:
        """The saved baseline this run is compared with (None without one), loaded when first asked for: an
        unreadable one fails then (`start` asks for it before any case)."""
        path = self.options.judging.baseline.path
        if path is not None and self.loaded.baseline is None:
            from ..track.baseline import load_baseline, rekeyed

            self.loaded.baseline = rekeyed(load_baseline(path), {m: self.model_label(m) for m in self.options.models})
        return self.loaded.baseline

    @property
    def executor(self):
        """The executor that evaluates shards (None: this process), made when first asked for."""
        return self.execution.executor

    def _check_checkpoints(self) -> None:
        """At the start, not in every case: a `MODEL=PATH` checkpoint names a model of this run (a typo would
        silently leave the shipped weights in place) and every checkpoint file exists."""
        names = sorted({split_model(m)[0] for m in self.options.models})
        for model, path in self.options.checkpoints.items():
            if model and model not in names:
                raise ConfigError(f"--memerobust-checkpoint={model}={path}: {model!r} is not a model of this run "
                                  f"(models: {', '.join(names) or 'none'})")
            if not Path(path).is_file():
                raise ConfigError(f"--memerobust-checkpoint={f'{model}=' if model else ''}{path}: no such file")

    def detector(self, model: str):
        """The loaded detector for a model spec `NAME[:MODE]`; modes (text, image) share the base's weights."""
        if model not in self.loaded.detectors:
            name, mode = split_model(model)
            if mode:
                base = self.detector(name)
                if not hasattr(base, "with_mode"):  # the channel ablation skips its cases with this message
                    raise ModeNotRead(f"model {name!r} has no channel-ablation modes (asked for {model!r}): it has no "
                                      f"head that fuses the two channels")
                self.loaded.detectors[model] = base.with_mode(mode)
            else:
                checkpoint = self.options.checkpoints.get(name) or self.options.checkpoints.get("")
                detector = self._load_seeded(self.cards.get(name) or find_card(name), checkpoint)
                if callable(getattr(detector, "use_cache", None)):  # a hosted model's answers
                    cache = self.options.compute.cache
                    detector.use_cache(cache.folder if cache.features else None)
                if callable(getattr(detector, "use_run_folder", None)):  # its pace and breaker
                    detector.use_run_folder(self.run_folder())
                self.loaded.detectors[model] = detector
        return self.loaded.detectors[model]

    def _load_seeded(self, card, checkpoint):
        """The detector loaded with torch's CPU generator at the run's seed (and given back as it was after): the
        weights a checkpoint does not set (an untrained head, `untrained:NAME`) are then the same in every process of
        the run and in every run of the same command; they were drawn from wherever the generator stood."""
        import torch

        with torch.random.fork_rng(devices=[]):
            torch.default_generator.manual_seed(self.options.seed)
            return load_detector(card, checkpoint, self.options.compute.device)

    def plan(self, model: str, data: str | None, condition: Condition, captions: str | None = None, *,
             task: str | None = None, group: str | None = None, nodeid: str | None = None) -> None:
        """Announce a condition the run will evaluate (in order), so its perturbations can be computed ahead; with
        its case's `nodeid`, the case is one of the gate's family (every case a baseline can judge)."""
        self.planned.conditions.setdefault((model, self.data_spec(data, captions)), []).append(condition)
        if nodeid is not None:
            self.planned.cases.append((nodeid, model, data, task, group, captions, condition))

    def precision(self, model: str) -> str:
        """fp32 or bf16 for a model's encoders. `auto` means bf16 on a GPU (about twice as fast) once it passes
        `bf16_check` on the run's first memes, else fp32. An explicit bf16 that fails the check is kept, with a note."""
        name = split_model(model)[0]
        if name not in self.loaded.precisions:
            wanted = self.options.compute.precision
            on_gpu = str(getattr(self.detector(name), "device", "cpu")).startswith("cuda")
            if wanted == "fp32" or (wanted == "auto" and not on_gpu):
                self.loaded.precisions[name] = "fp32"
            else:
                check = bf16_check(self.detector(name), self.dataset(self.data_spec()).head(BF16_CHECK_MEMES))
                self.loaded.precisions[name] = "bf16" if check["passed"] or wanted == "bf16" else "fp32"
                if not check["passed"]:
                    self.notes.add(
                        f"{name}: bf16 predictions differ from fp32 on the first {check['n']} memes (mean |dp| "
                        f"{check['mean_abs_diff']:.4f}, agreement {check['agreement']:.3f}; tolerance "
                        f"{BF16_TOLERANCE}); running {self.loaded.precisions[name]}")
        return self.loaded.precisions[name]

    def feature_store(self, model: str) -> FeatureStore:
        """One store of encoded inputs per model, shared by its engines on every dataset and by its ablation views,
        and on disk with every model and `memerobust train` run on the same frozen backbone (see
        `features.encoder_namespaces`)."""
        if model not in self.loaded.feature_stores:
            directory = self.options.compute.cache.folder if self.options.compute.cache.features else None
            self.loaded.feature_stores[model] = detector_feature_store(
                self.detector(model), self.precision(model), directory, self.held_features_limit())
        return self.loaded.feature_stores[model]

    def held_features_limit(self) -> int:
        """Bytes of features held in memory by each of a model's two holders (its store of inputs, its engine's
        condition sides): half of --memerobust-feature-memory each."""
        return self.options.compute.cache.memory_mib * 2**20 // 2

    def run_folder(self) -> Path:
        """A folder every process of this run sees (its pool workers, its pytest-xdist workers): where a hosted
        model's rate limit and breaker live. The options' own (a pool worker gets its driver's), else one in the
        pytest-xdist run's shard folder, else a new temporary one that `close` removes."""
        execution = self.execution
        if execution.run_folder is None:
            if self.options.compute.folders.run is not None:
                execution.run_folder = Path(self.options.compute.folders.run)
            elif self.options.compute.folders.shards is not None:
                execution.run_folder = Path(self.options.compute.folders.shards) / "run"
            else:
                import tempfile

                execution.run_folder = execution.owned_run_folder = Path(tempfile.mkdtemp(prefix="memerobust-run-"))
            execution.run_folder.mkdir(parents=True, exist_ok=True)
        return execution.run_folder

    def data_spec(self, suite_default: str | None = None, captions: str | None = None) -> str:
        """The dataset a run or suite evaluates; with captions read by OCR (the option, or a suite's `captions =
        "ocr"`) the spec carries CAPTIONS_BY_OCR, which keeps those results apart from the dataset's own captions."""
        spec = self.options.data.spec or suite_default or DEFAULT_DATA
        return spec + CAPTIONS_BY_OCR if "ocr" in (captions, self.options.data.captions) else spec

    def dataset(self, spec: str) -> Dataset:
        """The evaluated memes of `spec` (`_chosen`), their missing captions read by OCR."""
        spec = spec.removesuffix(CAPTIONS_BY_OCR)  # the same memes; only where the captions come from differs
        if spec not in self.loaded.datasets:
            self.loaded.datasets[spec] = read_missing_captions(self.evaluated_as_stored(spec), spec, self.ocr())
            scene = [m for m in self.loaded.datasets[spec].memes if m.meta.get(SCENE_TEXT)]
            if scene:  # what OCR read that is not the caption: said once, kept on each meme
                self.notes.add(f"{spec}: OCR kept text of the scene (a sign's, a T-shirt's, a watermark's) out of "
                                  f"{len(scene)} of the captions it read, e.g. {scene[0].id}: "
                                  f"{scene[0].meta[SCENE_TEXT]!r} (each meme's meta['{SCENE_TEXT}'])")
        return self.loaded.datasets[spec]

    def evaluated_as_stored(self, spec: str) -> Dataset:
        """The evaluated memes of `spec` as its files hold them, missing captions not yet read: what the checks
        that need no picture (task, classes) look at, before any OCR."""
        spec = spec.removesuffix(CAPTIONS_BY_OCR)
        key = ("as stored", spec)
        if spec in self.loaded.datasets:  # read already (the task and classes are the same)
            return self.loaded.datasets[spec]
        if key not in self.loaded.datasets:
            self.loaded.datasets[key] = self._read(spec, chosen=True, ocr=False)
        return self.loaded.datasets[key]

    def _read(self, spec: str, chosen: bool = False, evaluated: Dataset | None = None,
              ocr: bool = True) -> Dataset:
        """Memes of `spec` as every part of the run reads them (data/reading.py): those the run evaluates
        (`chosen`), or those outside `evaluated`, the captions a meme lacks read off its picture when the run has
        an OCR backend (and `ocr`)."""
        dataset = load_memes(spec, require_captions=self.ocr() is None, require_images=self.reads_pictures(),
                             allow_outside_paths=self.options.data.allow_outside_paths,
                             outside=[m.id for m in evaluated.memes] if evaluated is not None else ())
        if chosen:
            dataset = self._chosen(dataset, spec)
        if ocr:
            dataset = read_missing_captions(dataset, spec, self.ocr())
        without = sum(not m.has_picture for m in dataset.memes)
        note = (f"{spec}: {without} of {len(dataset)} memes have no picture; the models of this run read only "
                f"captions, so none is needed")
        if without:
            self.notes.add(note)
        return dataset

    def _chosen(self, dataset: Dataset, spec: str) -> Dataset:
        """The memes of `spec` the run evaluates: a --memerobust-sample stratified by the run's tasks (its
        --memerobust-task, else its models' cards'), else the first --memerobust-limit, whose one class where the
        split holds several is kept in `warnings`."""
        from ..data.selection import one_class_head, stratified_sample

        o = self.options
        tasks = [o.data.task] if o.data.task else [card.task for card in self.cards.values()]
        if o.data.sample is not None:
            return stratified_sample(dataset, o.data.sample, o.seed, tasks, spec)
        warning = one_class_head(dataset, o.data.limit, tasks, spec)
        if warning is not None:
            self.notes.warn(warning)
        return dataset.head(o.data.limit)

    def reads_pictures(self) -> bool:
        """Whether any model of this run reads pictures (itself, or through OCR with --memerobust-captions=ocr): only
        then must a dataset have one for every meme."""
        return self.options.data.captions == "ocr" or any(
            "image" in getattr(self.detector(model), "modalities", ("image", "text")) for model in self.options.models)

    def ocr(self, required: bool = False):
        """The OCR backend, loaded once; None unless --memerobust-ocr, --memerobust-captions=ocr or (`required`) a
        suite reading its captions off the pictures asks for one."""
        name = self.options.data.ocr or ("rapidocr" if required or self.options.data.captions == "ocr" else None)
        if name is None:
            return None
        if self.loaded.ocr is None:
            from ..data.ocr import ocr_backend

            compute = self.options.compute
            self.loaded.ocr = ocr_backend(name, compute.cache.folder, resolve_device(compute.device))
            readings = getattr(self.executor, "ocr_readings", None)  # the local worker pool reads pictures too
            if readings is not None and not getattr(self.loaded.ocr, "use_cuda", False):
                self.loaded.ocr.read_elsewhere = readings(functools.partial(ocr_backend, name))
        return self.loaded.ocr

    def engine(self, model: str, spec: str, task: str | None = None, defence: str | None = None,
               source: str | None = None) -> Engine:
        """The engine of `model` on `spec`; with `defence` (a defences.Defence id) one whose captions pass through
        that defence, sharing the model's store of encoded inputs (keyed by the inputs themselves); with `source`
        (another model) one whose attacks are crafted on that model (transfer)."""
        task = self.task(model, task)
        source = None if source == model else source
        key = (model, spec, task) + ((defence,) if defence else ()) + ((("from", source),) if source else ())
        if key not in self.loaded.engines:
            name, mode = split_model(model)
            detector, dataset = self.detector(model), self.dataset(spec).labelled(task)
            compute = self.options.compute
            self.loaded.engines[key] = Engine(
                detector, dataset, self.options.seed,
                sides=(self.engine(name, spec, task, defence, source).sides if mode else
                       engine_sides(detector, dataset, self.feature_store(name), self.held_features_limit())),
                asking=EncodingSettings(compute.batch_size, self.precision(name), _defence(defence)),
                attacks=AttackState(dataset.labels(task), lambda: self.training_memes(spec, task),
                                    compute.cache.folder, source=self.detector(source) if source else None),
                readers=Readers(self.ocr(required=True) if spec.endswith(CAPTIONS_BY_OCR) else None, self.ocr()),
                place=RunPlace(ShardRunner(self.executor, compute.shard_size),
                               functools.partial(engine_in_worker, self.worker_options(), model, spec, task, defence,
                                                 source),
                               f"{model} on {spec}, task {task}" + (f", defence {defence}" if defence else "")
                               + (f", attacks crafted on {source}" if source else "")))
            if (defence or source) and not mode:  # the pictures are the plain engine's: decoded once
                self.loaded.engines[key].share_pictures(self.engine(model, spec, task))
            self.loaded.engines[key].plan([c for c in self.planned.conditions.get((model, spec), [])
                                     if c.defence == defence and (None if c.source == model else c.source) == source])
            if key in self.from_workers.attacks:  # a pytest-xdist controller: what the workers' attacks chose
                self.loaded.engines[key].adopt_attacks(*self.from_workers.attacks[key])
        return self.loaded.engines[key]

    def worker_options(self) -> Options:
        """These options as a worker that evaluates shards builds its engines from: no cluster of its own, and
        nothing of the run's end (baselines, reports, counterexamples)."""
        o = self.options
        compute = replace(o.compute, ray=None, workers=1, folders=RunFolders(run=self.execution.run_folder))
        return replace(o, compute=compute, judging=replace(o.judging, baseline=BaselineOptions()),
                       outputs=replace(o.outputs, reports=(), counterexamples=None),
                       probes=replace(o.probes, replay=None))

    def close(self) -> None:
        """Let go of what the run started (a Ray pool, and the local cluster it started; its own run folder)."""
        self.execution.close()

    def training_memes(self, spec: str, task: str) -> FitMemes:
        """The memes attacks fitted once per detector (universal triggers, patterns) fit on, read as the run reads
        memes (OCR included): the train split that goes with `spec`, else the memes of `spec` outside the evaluated
        ones. Never an evaluated meme: with neither, a DataError that names the fixes."""
        spec = spec.removesuffix(CAPTIONS_BY_OCR)  # the fit memes keep their own captions (OCR reads missing ones)
        key = ("fit", spec, task)
        if key not in self.loaded.datasets:
            evaluated = self.dataset(spec)
            if evaluated.unlabelled:
                raise NothingToFitOn(f"{spec}: no labels, and universal attacks (triggers, patterns) fit to the memes' "
                                     f"labels: label a train split (train/ with class subfolders) to run them")
            train, fit = training_spec(spec), None
            if train is not None:
                try:
                    memes = self._read(train, evaluated=evaluated).labelled(task).memes
                    fit = FitMemes(f"the train split {train}", tuple(memes), task) if memes else None
                except DataError:  # a csv whose split column has no train rows, or no split column
                    fit = None
            if fit is None:
                memes = self._read(spec, evaluated=evaluated).labelled(task).memes
                fit = FitMemes(f"the {len(memes)} memes of {spec} outside the {len(evaluated)} evaluated",
                               tuple(memes), task)
            if not len(fit):
                raise NothingToFitOn(f"{spec}: no memes to fit universal attacks on outside the {len(evaluated)} "
                                f"evaluated ones (a trigger fitted on the memes it is judged on overstates its "
                                f"effect): give the data a train split, or evaluate fewer memes "
                                f"(--memerobust-limit) to hold the rest out for fitting")
            self.loaded.datasets[key] = fit
        return self.loaded.datasets[key]

    def task(self, model: str, suite_task: str | None = None) -> str:
        return self.options.data.task or suite_task or self.detector(model).card.task

    def groups(self, spec: str, field: str | None, task: str | None = None) -> np.ndarray | None:
        """Each meme's group under meta field `field` (as text; "" where the meme has none), over the memes that
        have a label for `task`."""
        if field is None:
            return None
        memes = (self.dataset(spec).labelled(task) if task else self.dataset(spec)).memes
        if not any(field in m.meta for m in memes):
            raise ConfigError(f"dataset {spec!r} has no meta field {field!r} to group by; fields: "
                              f"{sorted({k for m in memes for k in m.meta})}")
        return np.array(["" if m.meta.get(field) is None else str(m.meta[field]) for m in memes])

    def evaluate(self, model: str, condition: Condition | str, data: str | None = None,
                 task: str | None = None, group: str | None = None, captions: str | None = None) -> ConditionResult:
        """The result of `condition` for `model` (cached; the clean result is recorded alongside). `captions="ocr"`
        reads every caption off the condition's pictures."""
        condition = Condition.parse(condition) if isinstance(condition, str) else condition
        spec = self.data_spec(data, captions)
        key = (model, spec, condition.id)
        if key in self.outcomes.results:
            return self.outcomes.results[key]
        task = self.task(model, task)
        dataset = self.scored_dataset(model, spec, task)
        engine = self.engine(model, spec, task, condition.defence, condition.source)
        groups = self.groups(spec, self.options.data.group or group, task)
        reference = Condition(defence=condition.defence)  # clean, behind the same defence
        clean_key = (model, spec, reference.id)
        first_asked, position = self.ordering.first_asked, self.ordering.position
        first_asked.setdefault(clean_key, position)
        first_asked.setdefault(key, position)
        if clean_key not in self.outcomes.results:
            proba = engine.predict(reference)
            abstained = engine.abstentions.get(reference.id)
            samples = engine.samples.get(reference.id)  # a repeat-sampled detector's answers (else None)
            self.outcomes.results[clean_key] = ConditionResult(
                model, spec, reference, Memes(dataset.labels(task), groups),
                Answers(proba, proba, abstained, abstained, samples, samples), self.options.judging.stats, task)
        clean = self.outcomes.results[clean_key]
        if condition.kind != "clean":
            proba = engine.predict(condition)
            self.outcomes.results[key] = ConditionResult(
                model, spec, condition, clean.memes,
                Answers(clean.answers.proba, proba, clean.answers.abstained, engine.abstentions.get(condition.id),
                        clean.answers.sampled, engine.samples.get(condition.id)),
                self.options.judging.stats, task,
                AttackMeasures(engine.caption_edit(condition), engine.picture_attack(condition)))
        return self.outcomes.results[key]

    def check_case(self, model: str, data: str | None = None, task: str | None = None,
                   captions: str | None = None, group: str | None = None) -> None:
        """Load what a case of `model` on `data` needs and check that it fits (card, checkpoint, mode, dataset
        rows, task, classes, group field), raising the one error that names the culprit: the plugin calls this
        once per (model, dataset) before any case runs, so a wrong option is one message, not one per case."""
        from ..errors import ModeNotRead

        spec = self.data_spec(data, captions)
        try:
            self.detector(model)
        except ModeNotRead:  # the channel ablation's `:image` of a caption-only detector: its cases skip
            return
        task = self.task(model, task)
        self.scored_dataset(model, spec, task)
        self.groups(spec, self.options.data.group or group, task)

    def scored_dataset(self, model: str, spec: str, task: str) -> Dataset:
        """The memes of `spec` labelled for `task`, after checking that `model` can be scored on them: on the memes
        as stored, before OCR reads a picture, each refusal naming its fix."""
        explicit = task != self.detector(model).card.task  # asked for (option, suite), not the card's own
        check_task(task, spec.removesuffix(CAPTIONS_BY_OCR), explicit=explicit)  # a generic file: from its spec
        dataset = self.evaluated_as_stored(spec)
        if dataset.unlabelled:  # any task: measured by the label-free measures, on the detector's own classes
            if is_multilabel(self.detector(model)):
                raise ConfigError(f"{spec!r} has no labels, and model {model!r} is multi-label: an unlabelled run "
                                  f"measures flips of single-label detectors only; label the memes "
                                  f"(metadata.csv with a label column) to score it")
            return self.dataset(spec)
        check_task(task, spec.removesuffix(CAPTIONS_BY_OCR), dataset.classes, explicit=explicit)
        dataset = dataset.labelled(task)  # memes without a label for this task are not scored on it
        if not dataset.memes:
            raise ConfigError(f"no meme of {spec!r} has a label for task {task!r}")
        n_classes, detector = len(dataset.classes[task]), self.detector(model)
        if (task in dataset.multilabel) != is_multilabel(detector):
            kind = lambda yes: "multi-label" if yes else "single-label"  # noqa: E731
            raise ConfigError(f"task {task!r} of {spec!r} is {kind(task in dataset.multilabel)} but model {model!r} "
                              f"is {kind(is_multilabel(detector))} (model card: multilabel = ...)")
        if n_classes != len(detector.classes):
            raise ConfigError(f"model {model!r} predicts {len(detector.classes)} classes but task {task!r} of "
                              f"{spec!r} has {n_classes}: {list(dataset.classes[task])}")
        return self.dataset(spec).labelled(task)

    def report(self) -> dict:
        """The report of everything evaluated so far, built once per set of results (the JSON/Markdown writers
        and the terminal summary all read the same one)."""
        from .report import build_report

        outcomes = self.outcomes
        state = (len(outcomes.results), sum(map(len, self.analyses.records.values())), len(self.analyses.records),
                 len(outcomes.case_records), id(outcomes.verdict))
        if outcomes.report_for != state:
            outcomes.report, outcomes.report_for = build_report(self), state
        return outcomes.report

    def fingerprint(self, spec: str) -> str:
        if spec not in self.loaded.fingerprints:
            self.loaded.fingerprints[spec] = self.dataset(spec).fingerprint()
        return self.loaded.fingerprints[spec]

    def unread_modalities(self, model: str, condition: Condition, captions: str | None = None) -> list[str]:
        """The modalities `condition` perturbs that the model ignores (e.g. the image for `memeclip:text`). With
        captions read by OCR (`captions`, or the option) a caption-only detector reads the picture through the OCR:
        every picture edit reaches it, except an attack that needs the detector's own view of the picture."""
        from ..perturb.prompts import supports_prompts

        detector = self.detector(model)
        by_ocr = "ocr" in (captions, self.options.data.captions)
        reads, own = channels_read(detector, by_ocr), channels_read(detector, False)
        unread = [m for m, name in (("image", condition.image), ("text", condition.text)) if name and m not in reads]
        if condition.image and "image" not in own and "image" in reads:  # a caption classifier behind OCR
            attack = get_perturbation(condition.image)
            if attack.needs_model and not attack.traits.rewrites_caption:
                unread.append(f"image itself (it reads the picture's text through OCR, and {condition.image!r} "
                              f"attacks the detector's view of the picture)")
        if condition.image and by_ocr and get_perturbation(condition.image).traits.rewrites_caption:
            unread.append(f"caption {condition.image!r} chooses (the caption is read off the picture by OCR)")
        if condition.prompt and not supports_prompts(detector):
            unread.append("prompt (it is not prompted)")
        return unread

    def skip_reason(self, model: str, condition: Condition, data: str | None = None, task: str | None = None,
                    captions: str | None = None) -> str | None:
        """Why a case of `condition` on `model` skips before it runs, or None: a channel or mode the model does not
        read, or a universal attack with nothing to fit on. Such a case evaluates nothing, so it is no planned
        condition of the run (a baseline it is gated on or added to does not miss it)."""
        try:
            unread = self.unread_modalities(model, condition, captions)
        except ModeNotRead as exc:  # the channel ablation's `:image` of a caption-only detector
            return f"{model}: {exc}"
        if unread:
            return f"{model} does not read the {' or '.join(unread)}"
        return self.unfittable(model, condition, data, task, captions)

    def fit_memes_of(self, spec: str) -> list[dict]:
        """For the report: per task, the memes the universal attacks of the results on `spec` were fitted on (their
        source, number, ids and digest); empty when no result of `spec` ran a universal attack. Worked out from the
        results, so a pytest-xdist controller, which fitted nothing, reports the same."""
        return [{"task": fit.task, "source": fit.source, "n": len(fit), "digest": fit.digest,
                 "ids": [m.id for m in fit.memes]} for fit in self.fits_of(spec)]

    def fits_of(self, spec: str) -> list[FitMemes]:
        """The fit memes of the universal attacks among the results on `spec`, one per task scored."""
        tasks = dict.fromkeys(r.task or self.task(r.model) for r in self.outcomes.results.values()
                              if r.dataset == spec and any(name and get_perturbation(name).universal
                                                           for name in (r.condition.text, r.condition.image)))
        return [self.training_memes(spec, task) for task in tasks]

    def unfittable(self, model: str, condition: Condition, data: str | None = None, task: str | None = None,
                   captions: str | None = None) -> str | None:
        """Why `condition` cannot run on `model` honestly, or None: a universal attack of it with no memes to fit
        on outside the evaluated ones (the case skips with this reason, naming the fixes)."""
        if not any(name and get_perturbation(name).universal for name in (condition.text, condition.image)):
            return None
        try:
            self.training_memes(self.data_spec(data, captions), self.task(model, task))
        except NothingToFitOn as exc:
            return str(exc)
        return None

    def declare_grid(self, model: str, data: str | None, text_sides, image_sides, captions: str | None = None,
                     suite: str | None = None, conditions=()) -> None:
        """Remember a suite's text x image ordering (so the grid table numbers rows as the suite lists them) and
        its condition ids (so each suite gets its own tables)."""
        self.declare(model, self.data_spec(data, captions), suite, text_sides, image_sides, conditions)

    def declare(self, model: str, spec: str, suite: str | None, text_sides, image_sides, conditions) -> None:
        key = (model, spec, suite)
        old_text, old_image, old_conditions = self.planned.grids.get(key, ((), (), ()))
        self.planned.grids[key] = (tuple(dict.fromkeys(old_text + tuple(text_sides))),
                           tuple(dict.fromkeys(old_image + tuple(image_sides))),
                           tuple(dict.fromkeys(old_conditions + tuple(conditions))))

    def model_label(self, model: str) -> str:
        """How ids and titles name a model: the card's name for a card given by path (unless two cards of the run
        share it), with the fusion mode, e.g. `memeclip:text`."""
        name, mode = split_model(model)
        label = self._card_label(name)
        if name.endswith(".toml") and [self._card_label(split_model(m)[0]) for m in
                                       dict.fromkeys(split_model(m)[0] for m in self.options.models)].count(label) > 1:
            label = name
        return f"{label}:{mode}" if mode else label

    def _card_label(self, name: str) -> str:
        card = self.cards.get(name)
        return card.name if card is not None and name.endswith(".toml") else name
