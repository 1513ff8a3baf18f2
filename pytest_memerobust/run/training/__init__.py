"""A training run of a card's trainable head (`memerobust train`): what it is asked checked before anything loads
(the checkpoint's path and name, the data, the weights on this machine), the detector loaded and the memes read as a
pytest run reads them, then the head fitted on the frozen backbone's features (loop.py) and written
with its metrics and, for a new checkpoint, a card of its own."""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

from ...data.reading import OCR_OPTION
from ...errors import ConfigError, DiskFull, MemeRobustError

# The paper's recipe (AdamW lr 1e-4, weight decay 1e-4, 10 epochs, batch 16): what a card's [training] table (and,
# with --demo, its [demo] training) overrides, and the flags override in turn.
TRAINING_DEFAULTS = {"lr": 1e-4, "weight_decay": 1e-4, "epochs": 10, "batch_size": 16}
# A card's [training] keys that say what is trained and on what, rather than how fast (training_recipe)
RECIPE_KEYS = ("augment", "adversarial", "adversarial_loss", "adaptation")


def hyperparameters(card, flags: dict | None = None) -> dict:
    """The hyperparameters a training run uses for `card` (already `with_demo()` for --demo): the defaults, the
    card's [training], then the `flags` given (None: not given). For a card with shipped demo weights this is the
    recipe they were trained with, so `train CARD --demo` reproduces them."""
    hyper = {**TRAINING_DEFAULTS, **{k: v for k, v in card.network.training.items() if k not in RECIPE_KEYS}}
    given = {k: flags[k] for k in hyper if flags is not None and flags.get(k) is not None}
    for key in TRAINING_DEFAULTS:
        where = (f"--{key.replace('_', '-')} {given[key]!r}" if key in given else
                 f"card {card.name} [training] {key} = {hyper[key]!r}" if key in card.network.training else None)
        if where is not None:
            check_hyperparameter(key, given.get(key, hyper[key]), where)
    hyper.update(given)
    return {k: int(v) if k in ("epochs", "batch_size") else v for k, v in hyper.items()}


# each number's valid range, said in one line when a value falls outside it
HYPERPARAMETER_RANGES = {"epochs": "a whole number >= 1", "batch_size": "a whole number >= 1",
                         "lr": "a finite number > 0", "weight_decay": "a finite number >= 0"}


def check_hyperparameter(key: str, value, where: str) -> None:
    """A training number in its range, else one MemeRobustError naming where it came from (`where`: the flag or the
    card's line) and the range: said before any encoding, not as a traceback minutes later."""
    import math

    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if key in ("epochs", "batch_size"):
        fine = number and float(value).is_integer() and value >= 1
    else:
        fine = number and math.isfinite(value) and (value > 0 if key == "lr" else value >= 0)
    if not fine:
        raise MemeRobustError(f"{where}: {key.replace('_', ' ')} must be {HYPERPARAMETER_RANGES[key]}")


def trained_card_name(out: Path, source: str, given: str | None = None) -> str:
    """The name of the card `train --out` writes: `--name`, else the checkpoint's file name without its suffix
    (`minilm.safetensors` -> `minilm`). A name a registered card has (the one trained from, say) gets `-trained`:
    test ids name a card given by path by its card's name, so it must not pass for the shipped card."""
    from ...detectors import available_cards

    taken = {*available_cards(), source}
    if given is not None:
        if given in taken or not given.strip():
            raise MemeRobustError(f"--name {given!r}: " + ("a name is needed" if not given.strip() else
                                  "a registered card has that name; the card train writes needs a name of its own"))
        return given
    name = out.stem
    return f"{name}-trained" if name in taken else name


def shipped_folders() -> list[Path]:
    """Folders whose files ship inside an installed package: this package (its built-in cards and suites included,
    wherever an editable install keeps them) and the card folders third parties publish."""
    from importlib.metadata import entry_points

    from ...detectors.cards import CARD_ENTRY_POINT_GROUP, builtin_card_dir
    from ..suite import builtin_suite_dir

    folders = [Path(__file__).parent.parent, builtin_card_dir(), builtin_suite_dir()]
    for ep in entry_points(group=CARD_ENTRY_POINT_GROUP):
        try:
            folders.append(Path(str(ep.load())))
        except Exception:  # a broken third-party entry point is `list`'s to report, not a reason to write into it
            continue
    return [f.resolve() for f in folders]


def refuse_shipped(out: Path, given: bool) -> None:
    """Training never writes inside an installed package: a checkpoint shipped there (the demo weights) would be
    replaced for every later run, and the metrics, card and resume state written beside it would join the package."""
    target = Path(out).expanduser().resolve()
    folder = next((f for f in shipped_folders() if target.is_relative_to(f)), None)
    if folder is None:
        return
    what = (f"{out} ships inside the installed package: training never overwrites it" if target.exists() else
            f"{out} is inside the installed package ({folder}): training never writes there")
    how = "--out names it" if given else "--demo without --out writes the card's own checkpoint, which ships there"
    raise MemeRobustError(f"{what} ({how}); pass --out PATH outside the package, e.g. --out {target.name}, then "
                          f"test it with --memerobust-checkpoint={target.name}")


def check_out(out: Path, force: bool = False) -> None:
    """The checkpoint path proved usable before any work (a training run may take hours, and used to find out at its
    end): in a folder this process can write (tried with a file of its own, removed at once), and not
    a finished checkpoint, which is replaced only with `force`."""
    import tempfile

    folder = next(p for p in (out.parent.absolute(), *out.parent.absolute().parents) if p.exists())
    try:
        if not folder.is_dir():
            raise NotADirectoryError(f"{folder} is a file")
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".memerobust-write-check-"):
            pass
    except OSError as exc:
        raise MemeRobustError(f"--out {out}: cannot write in {folder} ({exc.strerror or exc}): name a checkpoint in "
                              f"a folder you can write") from None
    if out.exists() and not force:
        raise MemeRobustError(f"--out {out} is a finished checkpoint{_trained_with(out)}: training never replaces "
                              f"one unasked; name another --out, or pass --force to replace it, its metrics and card")


def _trained_with(out: Path) -> str:
    """` (best epoch N, val AUROC A; lr ..., epochs ...)` from the checkpoint's metrics, if they can be read."""
    import json

    try:
        metrics = json.loads(out.with_suffix(".metrics.json").read_text())
        hyper = metrics.get("hyperparameters", {})
        recipe = ", ".join(f"{k} {v}" for k, v in hyper.items() if k in (*TRAINING_DEFAULTS, *RECIPE_KEYS))
        return (f" (best epoch {metrics['best_epoch']}, val AUROC {metrics['best_val_auroc']:.4f}"
                + (f"; {recipe}" if recipe else "") + ")")
    except (OSError, ValueError, KeyError, TypeError):
        return ""


@dataclass(frozen=True)
class OutputTarget:
    """Where the checkpoint goes: `out` as given (--out; None: the card's own, with `demo`), the `name` of the card
    written beside it (--name), and whether a finished checkpoint there is replaced (--force)."""

    out: str | None = None
    name: str | None = None
    force: bool = False


@dataclass(frozen=True)
class MemeSource:
    """The memes trained and validated on: `data`'s train and val splits, or `train` and `val` (dataset specs); the
    label `task` (None: the card's); whether the data's image paths may lead outside its folder; and how the caller
    asks for captions read off the pictures (`ocr_option`, named when captions are missing)."""

    data: str | None = None
    train: str | None = None
    val: str | None = None
    task: str | None = None
    allow_outside_paths: bool = False
    ocr_option: str = OCR_OPTION


@dataclass(frozen=True)
class StartingPoint:
    """Where the weights start: a checkpoint's (`init`), the state an interrupted run left (`resume`), and the
    `seed` of every draw."""

    init: str | None = None
    resume: bool = False
    seed: int = 0


@dataclass(frozen=True)
class RecipeFlags:
    """What is trained and on what, as the flags give it (each None: the card's [training]): the --augment specs,
    --adversarial and --adversarial-loss, --adaptation (else head)."""

    augment: tuple[str, ...] | None = None
    adversarial: str | None = None
    adversarial_loss: str | None = None
    adaptation: str | None = None


@dataclass(frozen=True)
class TrainingCompute:
    """Where the work runs: the `device`, the processes the one-off encoding runs on, on a CPU (`workers`; None: the
    usable cores), and where encoded features are kept (`cache_dir`; None: in memory only)."""

    device: str = "cpu"
    workers: int | None = None
    cache_dir: Path | None = None


@dataclass(frozen=True)
class TrainingRequest:
    """What a training run is asked: the card (name or .toml path), with `demo` its demo configuration and recipe;
    where the checkpoint goes, the memes, where to start, the recipe and hyperparameter `flags` given (epochs, lr,
    weight_decay, batch_size), and where it runs."""

    card: str
    demo: bool = False
    output: OutputTarget = field(default_factory=OutputTarget)
    memes: MemeSource = field(default_factory=MemeSource)
    start: StartingPoint = field(default_factory=StartingPoint)
    recipe: RecipeFlags = field(default_factory=RecipeFlags)
    compute: TrainingCompute = field(default_factory=TrainingCompute)
    flags: dict = field(default_factory=dict)


@dataclass(frozen=True)
class TrainingRecipe:
    """What is trained and on what, parsed: the augmentations, the attack trained against (an Adversarial) and the
    adaptation (an AdaptationSpec; None: the head on frozen encoders)."""

    augment: tuple = ()
    adversarial: object = None
    adaptation: object = None

    def card_entries(self) -> dict:
        """The recipe as the card written beside the checkpoint records it ([training] augment, adversarial,
        adversarial_loss, adaptation): what a retrain of that card runs again."""
        out = {}
        if self.augment:
            out["augment"] = [a.spec for a in self.augment]
        if self.adversarial is not None:
            out["adversarial"] = self.adversarial.spec
            out["adversarial_loss"] = self.adversarial.loss_spec
        if self.adaptation is not None:
            out["adaptation"] = self.adaptation.to_dict()
        return out


@dataclass(frozen=True)
class TrainingPlan:
    """A request checked: the card (its demo configuration with `demo`), the checkpoint path and the name of the
    card written beside it, the splits, the hyperparameters and the recipe, parsed."""

    card: object
    out: Path
    name: str
    train_spec: str
    val_spec: str
    hyper: dict
    recipe: TrainingRecipe = field(default_factory=TrainingRecipe)


def training_recipe(card, flags: RecipeFlags) -> TrainingRecipe:
    """The recipe from the `flags`, else the card's [training]: each part parsed and checked against the registries
    before torch loads (an unknown perturbation, a severity out of range, a probability outside 0..1, an attack
    given as an augmentation, an adaptation beyond the card's encoders: one error now, not after the encoding)."""
    from ...detectors.training.adversarial import parse_adversarial
    from ...detectors.training.augmentation import parse_augmentations

    training = dict(card.network.training)
    augment_specs = flags.augment if flags.augment is not None else training.get("augment", [])
    if isinstance(augment_specs, str):
        augment_specs = [augment_specs]
    where = "--augment" if flags.augment is not None else f"card {card.name} [training] augment"
    augment = parse_augmentations(list(augment_specs), where)
    spec = flags.adversarial if flags.adversarial is not None else training.get("adversarial")
    loss = flags.adversarial_loss if flags.adversarial_loss is not None else training.get("adversarial_loss")
    if loss is not None and spec is None:
        raise MemeRobustError(f"--adversarial-loss {loss}: name the attack to train against with --adversarial")
    adversarial = parse_adversarial(spec, loss) if spec else None
    adaptation_value = flags.adaptation if flags.adaptation is not None else training.get("adaptation")
    adaptation = None
    if adaptation_value is not None:
        from ...detectors.meme_models import card_encoders
        from ...detectors.training.adaptation import check_encoders
        from ...detectors.training.adaptation_methods import HeadSpec, parse_adaptation

        adaptation = parse_adaptation(adaptation_value)
        where = (f"--adaptation {adaptation_value}" if flags.adaptation is not None
                 else f"card {card.name} [training] adaptation")
        check_encoders(adaptation, card_encoders(card), where)  # its sizes within the backbone's, before it loads
        if isinstance(adaptation, HeadSpec):
            adaptation = None
    return TrainingRecipe(augment, adversarial, adaptation)


@dataclass
class TrainingData:
    """The detector with a fresh head and the memes it is trained and validated on, for `task`."""

    card: object
    detector: object
    train: object
    val: object
    task: str
    adaptation: object = None  # the Adaptation applied (None: the head on frozen encoders)


def plan_training(request: TrainingRequest) -> TrainingPlan:
    """The checks said before torch loads: the numbers and the recipe (an adaptation's sizes within what the card's
    backbone allows), the checkpoint path (a .safetensors outside the installed package), the data named, the
    card's weights on this machine (unless `init` gives them); a MemeRobustError names the fix."""
    from ...detectors import find_card
    from ...detectors.cards import WeightsNotHere, check_local_weights

    card = find_card(request.card)
    if request.demo:
        card = card.with_demo()
    hyper = hyperparameters(card, request.flags)  # each number in its range, said first
    recipe = training_recipe(card, request.recipe)  # then the recipe's (adaptation sizes too)
    target = request.output
    out = Path(target.out) if target.out else (card.checkpoint_path() if request.demo else None)
    if out is None:
        raise MemeRobustError("pass --out PATH for the checkpoint, or --demo to rebuild the card's demo weights with "
                              "its [demo] configuration and recipe (on the demo memes unless --data says otherwise; "
                              "into the card's own checkpoint file only for a card outside the installed package, "
                              "else with --out)")
    if out.is_dir():
        raise MemeRobustError(f"--out {out} is a folder: name the checkpoint file in it, e.g. --out "
                              f"{out / 'model.safetensors'}")
    if out.suffix != ".safetensors":  # said before the encoding and training, not after
        raise MemeRobustError(f"--out {out}: checkpoints are written as safetensors; name it "
                              f"{out.with_suffix('.safetensors').name}")
    refuse_shipped(out, given=target.out is not None)
    check_out(out, force=target.force)
    name = trained_card_name(out, card.name, target.name) if target.out is not None else card.name
    memes = request.memes
    train_spec, val_spec = memes.train, memes.val
    data = (memes.data if memes.data is not None or train_spec or val_spec or not request.demo else "demo")
    if data is not None:  # --demo rebuilds the shipped weights, which are trained on the demo memes
        train_spec, val_spec = f"{data}:train", f"{data}:val"
    if not (train_spec and val_spec):
        raise MemeRobustError("name the data: --data demo|NAME:PATH (its train/val splits), or --train and --val")
    init = request.start.init
    if init is not None:
        check_init(card, Path(init))
    if init is None:  # before torch loads: weights missing here are said at once, nothing waits on the hub
        try:
            check_local_weights(card)
        except WeightsNotHere as exc:
            demo = ("; or --demo to train on the card's small demo backbone"
                    if card.network.demo and not request.demo else "")
            raise ConfigError(f"{exc} (memerobust train --download){demo}") from None
    return TrainingPlan(card, out, name, train_spec, val_spec, hyper, recipe)


def load_training(plan: TrainingPlan, request: TrainingRequest, ocr: Callable[[], object] = lambda: None,
                  say: Callable[[str], None] = print) -> TrainingData:
    """The detector with a fresh head (seeded: a retrain reproduces the checkpoint) and the train and val memes,
    read as a pytest run reads them (`ocr()` gives the OCR backend for captions memes lack, or None); `say` tells a
    task other than the card's. Checked before any encoding: the task's labels in both splits."""
    import torch

    from ...data.reading import read_memes
    from ...detectors import load_detector
    from ...detectors.training import check_training_data, training_task

    card, memes = plan.card, request.memes
    torch.manual_seed(request.start.seed)  # initial head (and demo backbone) weights: a retrain reproduces it
    fresh = card.without_checkpoint()
    detector = load_detector(fresh, checkpoint=request.start.init, device=request.compute.device)
    reads_pictures = "image" in getattr(detector, "modalities", ("image", "text"))
    reader = ocr()
    train, val = (read_memes(spec, ocr=reader, require_images=reads_pictures or reader is not None,
                             allow_outside_paths=memes.allow_outside_paths, ocr_option=memes.ocr_option)
                  for spec in (plan.train_spec, plan.val_spec))
    task = training_task(memes.task or card.task, train, val, explicit=memes.task is not None)
    if task != card.task:
        say(f"training task {task!r} (the card's is {card.task!r}); the card written says {task!r}")
    check_training_data(train, val, task, card.classes)
    adaptation = _recipe_checked(plan, detector, train, request)
    # the card written beside the checkpoint names the task it was trained on
    return TrainingData(replace(card, task=task), detector, train, val, task, adaptation)


def _recipe_checked(plan: TrainingPlan, detector, train, request: TrainingRequest):
    """Before any encoding: each augmentation tried once (a missing backend said now), the attack's gradient path,
    the adaptation checked against the backbone and applied (returned; None for the head)."""
    from ...detectors.training.adversarial import check_gradient_path
    from ...detectors.training.augmentation import check_backends, reads_pictures

    recipe = plan.recipe
    if recipe.augment:
        _pictures_checked(recipe.augment, detector, train)
        first = train.memes[0]
        check_backends(recipe.augment, first.text, first.picture(request.compute.device)
                       if reads_pictures(recipe.augment) else None)
    if recipe.adversarial is not None:
        check_gradient_path(recipe.adversarial, detector)
    if recipe.adaptation is None:
        return None
    from ...detectors.training.adaptation import adapt, check_adaptation

    check_adaptation(recipe.adaptation, detector)
    return adapt(detector, recipe.adaptation, request.start.seed)


def _pictures_checked(augment, detector, train) -> None:
    """A picture augmentation needs pictures to edit and a detector that reads them; said before any encoding, naming
    the augmentation, rather than as a bare missing-image error mid-run (or as epochs that change nothing)."""
    edits = [a.spec for a in augment if a.modality == "image"]
    if not edits:
        return
    named = ", ".join(f"--augment {spec}" for spec in edits)
    without = next((m for m in train.memes if not m.has_picture), None)
    if without is not None:
        raise ConfigError(f"{named} edits pictures, but {train.name}'s meme {without.id!r} has none (caption-only "
                          f"data): use a caption augmentation, or data with pictures")
    if "image" not in getattr(detector, "modalities", ("image", "text")):
        raise ConfigError(f"{named} edits pictures, but this detector reads only "
                          f"{', '.join(detector.modalities)}: the edits would change nothing it sees")


def fit_head(plan: TrainingPlan, request: TrainingRequest, data: TrainingData, encoding=None, progress=None):
    """The head fitted (loop.run_training: each input encoded once, then the epochs), resuming from the
    state an interrupted run of the same request left when `request.start.resume`, else from scratch. The one-off
    encoding runs on the worker pool the evaluation uses (`encoding_pool`), the epochs here. `encoding(what, n,
    total)` and `progress(row)` follow it (row: an epoch's loss and validation figures)."""
    from .loop import Hyperparameters, TrainingCallbacks, TrainingConfig, run_training

    state_path = plan.out.with_suffix(".train-state.pt")
    command = resume_command(plan, request, data)
    if not request.start.resume:
        state_path.unlink(missing_ok=True)
    elif state_path.exists():
        check_resume_state(state_path, command)
    pool, recipe = encoding_pool(plan, request, data)
    try:
        config = TrainingConfig(data.task, Hyperparameters(**plan.hyper, seed=request.start.seed),
                                tuple(plan.recipe.augment), plan.recipe.adversarial, data.adaptation, state_path,
                                request.compute.cache_dir, command)
        callbacks = TrainingCallbacks(progress=progress, encoding=encoding,
                                      run_batches=None if pool is None else pool.encode_batches(recipe))
        result = run_training(data.detector, data.train, data.val, config, callbacks)
    finally:
        if pool is not None:
            pool.close()
    result.cost = replace(result.cost, encoding_workers=pool.size if pool is not None and pool.batches else 1)
    return result


def resume_command(plan: TrainingPlan, request: TrainingRequest, data: TrainingData) -> dict:
    """What decides a run's weights, as its resume state records it: a resume of any other command is refused
    (`check_resume_state`), since its epochs would continue another recipe's and its card record only the second."""
    start = request.start
    return {"card": plan.card.name, "train": plan.train_spec, "val": plan.val_spec, "task": data.task,
            "init": str(Path(start.init).resolve()) if start.init else None, "seed": start.seed,
            **{k: plan.hyper[k] for k in TRAINING_DEFAULTS}, **{k: None for k in RECIPE_KEYS},
            **plan.recipe.card_entries()}


def check_init(card, init: Path) -> None:
    """`--init` starts from a checkpoint of the detector the card describes: the checkpoint's recorded encoders (and
    the head sizes the card sets) must be the card's, else one line naming both. Loading prefers a checkpoint's
    metadata to its card (the shipped demo weights' small backbone), so another card's checkpoint would train that
    other detector under this card's name."""
    import json

    from ...detectors.checkpoints import read_checkpoint_metadata

    if not init.is_file():
        raise MemeRobustError(f"--init {init}: no such checkpoint file")
    try:
        metadata = read_checkpoint_metadata(init)
    except Exception as exc:  # safetensors and torch raise their own kinds on a damaged or foreign file
        raise MemeRobustError(f"--init {init}: cannot be read as a checkpoint ({type(exc).__name__})") from None
    source = metadata.get("card", "another card")
    differs = []
    for key in ("backbone", "text_backbone"):
        if key in metadata and json.loads(metadata[key]) != (getattr(card.network, key, None) or {}):
            differs.append(f"its {key.replace('_', ' ')} is {_encoder(json.loads(metadata[key]))}, the card's "
                           f"{_encoder(getattr(card.network, key, None) or {})}")
    params = json.loads(metadata.get("params", "{}"))
    differs += [f"its {key} is {params[key]}, the card's {value}" for key, value in sorted(card.network.params.items())
                if key in params and params[key] != value]
    if differs:
        raise MemeRobustError(f"--init {init} is a checkpoint of another detector (trained from card {source!r}; "
                              f"{'; '.join(differs)}) than card {card.name!r} describes: start from a checkpoint of "
                              f"{card.name!r}, or train {source!r}")


def _encoder(spec: dict) -> str:
    """An encoder spec in a few words: its kind and name (`hf-blip2 Salesforce/blip2-itm-vit-g`, `minilm`)."""
    if not spec:
        return "none"
    named = spec.get("name") or ("(inline config)" if "config" in spec else None)
    return " ".join(str(x) for x in (spec.get("kind"), named) if x)


def check_resume_state(path: Path, command: dict) -> None:
    """Before any encoding: the state an interrupted run left at `path` can be read, and was left by this command;
    else one line that names the file, what differs, and the fix."""
    import torch

    try:
        saved = torch.load(path, map_location="cpu", weights_only=True)
        if not isinstance(saved, dict) or "epoch" not in saved:
            raise ValueError("not a training state")
    except Exception as exc:  # torch raises many kinds on a damaged file (pickle, zip, EOF, runtime)
        raise MemeRobustError(f"--resume: {path} cannot be read ({type(exc).__name__}); it is damaged or not a "
                              f"training state: delete it, or run without --resume, to train from the start") from None
    before = saved.get("command")
    if before is None:
        raise MemeRobustError(f"--resume: {path} does not record the command that left it (an earlier release): "
                              f"run without --resume to train from the start")
    differs = [f"{key} {_shown(before.get(key))} then, {_shown(command.get(key))} now"
               for key in sorted(set(before) | set(command)) if before.get(key) != command.get(key)]
    if differs:
        raise MemeRobustError(f"--resume: the interrupted run at {path} was another command ({'; '.join(differs)}): "
                              f"resume it with the same command, or run without --resume to start this one over")


def _shown(value) -> str:
    return "none" if value is None else ", ".join(map(str, value)) if isinstance(value, list) else str(value)


def encoding_pool(plan: TrainingPlan, request: TrainingRequest, data: TrainingData):
    """(the pool of worker processes the one-off encoding runs on, the recipe its workers build their encoders
    from), or (None, None): on a GPU (one process feeds it), at one worker, or when the encoders train (nothing is
    encoded once). The workers build the detector as `load_training` did (the same card, --init, seed) and check
    that its encoders' fingerprints are this run's, so their features are the ones this process would compute."""
    import functools

    from ...determinism import device_type
    from ...engine.executors import make_executor
    from ...engine.features import encoder_namespaces

    adaptation = data.adaptation
    if device_type(data.detector) != "cpu" or (adaptation is not None and adaptation.encoders_trainable):
        return None, None
    pool = make_executor(workers=request.compute.workers)
    if pool is None:
        return None, None
    fresh = plan.card.without_checkpoint()
    namespaces = encoder_namespaces(data.detector, "fp32")[0]
    start = request.start
    return pool, functools.partial(training_encoders, fresh, start.init, request.compute.device, start.seed,
                                   namespaces)


def training_encoders(card, init: str | None, device: str, seed: int, namespaces: dict):
    """A training run's detector built again (in a pool worker) for its frozen encoders; an error when they are not
    the run's (their fingerprints differ): features from other encoders must never join the run's."""
    import torch

    from ...detectors import load_detector
    from ...engine.features import encoder_namespaces

    torch.manual_seed(seed)
    detector = load_detector(card, checkpoint=init, device=device)
    built = encoder_namespaces(detector, "fp32")[0]
    if built != namespaces:
        raise RuntimeError(f"a pool worker built other encoders than the training run's (card {card.name!r}, "
                           f"--init {init}): {built} != {namespaces}")
    return detector


@contextmanager
def resumable(plan: TrainingPlan):
    """A full disk during the epochs or the final writes (a DiskFull naming the file) says what to run once space is
    freed: the same command with --resume where the epochs finished so far are kept in the resume state."""
    try:
        yield
    except DiskFull as exc:
        state = plan.out.with_suffix(".train-state.pt")
        if not state.is_file():
            raise
        raise exc.named(hint=f"run the same command with --resume: it goes on from the epochs kept in {state}") \
            from None


def save_head(plan: TrainingPlan, request: TrainingRequest, data: TrainingData, result) -> list[str]:
    """The checkpoint and its metrics written (and, for a checkpoint given by `out`, a card of its own beside it);
    the resume state is removed. Returns what was written, as the names to show."""
    from ...detectors.training import save_trained

    out = plan.out
    given = request.output.out
    save_trained(data.detector, out, data.card, result, {**plan.hyper, **plan.recipe.card_entries()},
                 write_card=given is not None, name=plan.name)
    out.with_suffix(".train-state.pt").unlink(missing_ok=True)
    return [out.name, out.with_suffix(".metrics.json").name] + (
        [f"{out.with_suffix('.card.toml').name} (card {plan.name!r})"] if given else [])


def describe_recipe(plan: TrainingPlan, data: TrainingData) -> str:
    """What the run is about to do, in one paragraph: what is encoded once and what is cached, the augmentations,
    the attack trained against and the adaptation (with its count of trainable parameters)."""
    adaptation = data.adaptation
    epochs = plan.hyper["epochs"]
    if adaptation is not None and adaptation.encoders_trainable:
        parts = [f"training {adaptation.method} ({adaptation.trainable_parameters:,} trainable parameters) for "
                 f"{epochs} epoch{'s' * (epochs != 1)} on {len(data.train)} memes: the encoders run on every "
                 f"batch, so no features are cached"]
    else:
        method = adaptation.method if adaptation is not None else "head"
        parts = [f"encoding {len(data.train)} + {len(data.val)} memes once (the backbone is frozen), then {epochs} "
                 f"epoch{'s' * (epochs != 1)} ({method})"]
    recipe = plan.recipe
    if recipe.augment:
        parts.append(f"augmented with {', '.join(a.spec for a in recipe.augment)}, drawn per meme and epoch (augmented "
                     f"inputs are cached like clean ones: a rerun encodes none)")
    if recipe.adversarial is not None:
        parts.append(f"each batch attacked with {recipe.adversarial.spec} against the current weights, loss "
                     f"{recipe.adversarial.loss_spec} (what the attack makes is encoded as it comes, never cached)")
    return "; ".join(parts)
