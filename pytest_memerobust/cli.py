"""The `memerobust` command: train a card's detector, list what is registered, re-render a saved report."""
from __future__ import annotations

import argparse
import sys
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

from .data.loaders import OutsideFolder
from .errors import ConfigError, MemeRobustError

OUTSIDE_PATHS = "--allow-outside-paths"  # the switch of the commands that read datasets (train, export, budgets)


def _train(args) -> int:
    from .detectors.cards import allow_downloads

    with allow_downloads(args.download):
        return _train_allowed(args)


def _train_allowed(args) -> int:
    from .detectors import find_card
    from .detectors.cards import WeightsNotHere, check_local_weights

    card = find_card(args.card)
    if args.demo:
        card = card.with_demo()
    out = Path(args.out) if args.out else (card.checkpoint_path() if args.demo else None)
    if out is None:
        raise MemeRobustError("pass --out PATH for the checkpoint, or --demo to rebuild the card's demo weights with "
                              "its [demo] configuration and recipe (on the demo memes unless --data says otherwise; "
                              "into the card's own checkpoint file only for a card outside the installed package, "
                              "else with --out)")
    if out.suffix != ".safetensors":  # said before the encoding and training, not after
        raise MemeRobustError(f"--out {out}: checkpoints are written as safetensors; name it "
                              f"{out.with_suffix('.safetensors').name}")
    refuse_shipped(out, given=args.out is not None)
    name = trained_card_name(out, card.name, args.name) if args.out is not None else card.name
    train_spec, val_spec = args.train, args.val
    data = args.data if args.data is not None or train_spec or val_spec or not args.demo else "demo"
    if data is not None:  # --demo rebuilds the shipped weights, which are trained on the demo memes
        train_spec, val_spec = f"{data}:train", f"{data}:val"
    if not (train_spec and val_spec):
        raise MemeRobustError("name the data: --data demo|NAME:PATH (its train/val splits), or --train and --val")
    if args.init is None:  # before torch loads: weights missing here are said at once, nothing waits on the hub
        try:
            check_local_weights(card)
        except WeightsNotHere as exc:
            demo = "; or --demo to train on the card's small demo backbone" if card.demo and not args.demo else ""
            raise ConfigError(f"{exc} (memerobust train --download){demo}") from None
    import torch

    from .data.reading import read_memes
    from .detectors import load_detector
    from .detectors.training import check_training_data, save_trained, train_head, training_task

    hyper = hyperparameters(card, args)
    torch.manual_seed(args.seed)  # initial head (and demo backbone) weights: a retrain reproduces the checkpoint
    fresh = replace(card, checkpoint=None, checkpoint_sha256=None)
    detector = load_detector(fresh, checkpoint=args.init, device=args.device)
    reads_pictures = "image" in getattr(detector, "modalities", ("image", "text"))
    ocr = _ocr_reader(args)
    train, val = (read_memes(spec, ocr=ocr, require_images=reads_pictures or ocr is not None,
                             allow_outside_paths=args.allow_outside_paths, ocr_option=OCR_OPTION)
                  for spec in (train_spec, val_spec))
    task = training_task(args.task or card.task, train, val, explicit=args.task is not None)
    if task != card.task:
        print(f"training task {task!r} (the card's is {card.task!r}); the card written says {task!r}")
    check_training_data(train, val, task, card.classes)
    card = replace(card, task=task)  # the card written beside the checkpoint names the task it was trained on
    if not args.quiet:
        print(f"encoding {len(train)} + {len(val)} memes once (the backbone is frozen), then {hyper['epochs']} epochs",
              file=sys.stderr)
    shown = Progress(disabled=args.quiet)

    def encoding(what, n, total):
        shown.advance(f"encoding {what}", n, total, unit="input")

    def progress(row):
        shown.advance(f"training {card.name}", 1, hyper["epochs"], unit="epoch", at=row["epoch"],
                      loss=f"{row['loss']:.4f}", val_auroc=f"{row['val_auroc']:.4f}",
                      val_acc=f"{row['val_accuracy']:.4f}", val_f1=f"{row['val_macro_f1']:.4f}")

    state_path = out.with_suffix(".train-state.pt")
    if not args.resume:
        state_path.unlink(missing_ok=True)
    cache_dir = None if args.no_cache else Path(args.cache_dir)
    try:
        result = train_head(detector, train, val, task=task, seed=args.seed, progress=progress,
                            state_path=state_path, encoding=encoding, cache_dir=cache_dir, **hyper)
    finally:
        shown.close()
    cached = result.feature_cache
    if cached:
        read, encoded = sum(cached["disk_hits"].values()), sum(cached["encoded"].values())
        where = f"the feature cache in {cache_dir}" if cache_dir else "no feature cache (--no-cache)"
        print(f"encoded {encoded} inputs and read {read} from {where}: features are kept by backbone, so every "
              f"head on this backbone reuses them")
    save_trained(detector, out, card, result, hyper, write_card=args.out is not None, name=name)
    state_path.unlink(missing_ok=True)
    written = [out.name, out.with_suffix(".metrics.json").name] + (
        [f"{out.with_suffix('.card.toml').name} (card {name!r})"] if args.out else [])
    print(f"best epoch {result.best_epoch} (val AUROC {result.best_val_auroc:.4f}); wrote {', '.join(written)} in {out.parent}")
    return 0


class Progress:
    """What `train` shows while it encodes and trains, on standard error: on a terminal a bar per stage (tqdm);
    elsewhere (a CI log, a file) a plain line each time a stage is another EVERY percent further, so a log gets a
    few lines, not a stream of carriage returns. One stage at a time: a new description ends the last one."""

    EVERY = 10  # percent between two plain lines

    def __init__(self, stream=None, disabled: bool = False):
        self.stream, self.disabled = stream if stream is not None else sys.stderr, disabled
        self.terminal = not disabled and callable(getattr(self.stream, "isatty", None)) and self.stream.isatty()
        self.stage, self.done, self.shown, self.bar = None, 0, -1, None

    def advance(self, stage: str, n: int, total: int, unit: str = "input", at: int | None = None, **postfix) -> None:
        """`n` more of `total` done in `stage` (or `at`: that many done in all), with `postfix` figures."""
        if self.disabled:
            return
        if stage != self.stage:
            self.close()
            self.stage, self.done, self.shown = stage, 0, -1
            if self.terminal:
                from tqdm import tqdm

                self.bar = tqdm(total=total, desc=stage, unit=unit, file=self.stream, mininterval=0.5)
        step = (at - self.done) if at is not None else n
        self.done += step
        if self.bar is not None:
            self.bar.update(step)
            if postfix:
                self.bar.set_postfix(postfix)
            return
        percent = 100 * self.done // max(total, 1)
        if percent // self.EVERY > self.shown:  # the first batch, then each further EVERY percent
            self.shown = percent // self.EVERY
            figures = "".join(f", {k} {v}" for k, v in postfix.items())
            print(f"{stage}: {self.done} of {total} {unit}s ({percent}%){figures}", file=self.stream, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        self.bar, self.stage = None, None


def trained_card_name(out: Path, source: str, given: str | None = None) -> str:
    """The name of the card `train --out` writes: `--name`, else the checkpoint's file name without its suffix
    (`minilm.safetensors` -> `minilm`). A name a registered card has (the one trained from, say) gets `-trained`:
    test ids name a card given by path by its card's name, so it must not pass for the shipped card."""
    from .detectors import available_cards

    taken = {*available_cards(), source}
    if given is not None:
        if given in taken or not given.strip():
            raise MemeRobustError(f"--name {given!r}: " + ("a name is needed" if not given.strip() else
                                  "a registered card has that name; the card train writes needs a name of its own"))
        return given
    name = out.stem
    return f"{name}-trained" if name in taken else name


# The paper's recipe (AdamW lr 1e-4, weight decay 1e-4, 10 epochs, batch 16): what a card's [training] table (and,
# with --demo, its [demo] training) overrides, and the flags override in turn.
TRAINING_DEFAULTS = {"lr": 1e-4, "weight_decay": 1e-4, "epochs": 10, "batch_size": 16}


def hyperparameters(card, args=None) -> dict:
    """The hyperparameters `train` uses for `card` (already `with_demo()` for --demo): the defaults, the card's
    [training], then the flags given. For a card with shipped demo weights this is the recipe they were trained
    with, so `train CARD --demo` reproduces them."""
    hyper = {**TRAINING_DEFAULTS, **card.training}
    if args is not None:
        hyper.update({k: getattr(args, k) for k in hyper if getattr(args, k, None) is not None})
    return hyper


def shipped_folders() -> list[Path]:
    """Folders whose files ship inside an installed package: this package (its built-in cards and suites included,
    wherever an editable install keeps them) and the card folders third parties publish."""
    from importlib.metadata import entry_points

    from .detectors.cards import CARD_ENTRY_POINT_GROUP, builtin_card_dir
    from .run.suite import builtin_suite_dir

    folders = [Path(__file__).parent, builtin_card_dir(), builtin_suite_dir()]
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


def _list(args) -> int:
    from .data import LOADERS
    from .detectors import architectures, available_cards
    from .perturb import get, names
    from .perturb.textattack_recipes import (INSTALL_HINT, PREFIX, RECIPES, WORD_BUDGET, installed, recipe_status,
                                             textattack_home)
    from .perturb.budget_edits import family_names, get_family
    from .run.suite import builtin_suite_paths

    print("models:")
    for line in model_lines(available_cards()):
        print(f"  {line}")
    print("architectures:", ", ".join(sorted(architectures())))
    print("datasets:", ", ".join(sorted(LOADERS)))
    for modality in ("text", "image"):
        print(f"{modality} perturbations:")
        for name in names(modality):
            p = get(name)
            if "textattack" not in p.tags:
                print(f"  {name:22s} severities {list(p.severities) or '-'}  {p.doc}")
    print(f"textattack recipes (text perturbations; severity s changes at most {list(WORD_BUDGET)}[s-1] words):")
    home = textattack_home(args.cache_dir)
    if not installed():
        print(f"  (textattack is not installed: {INSTALL_HINT})")
    for recipe in RECIPES.values():
        name = PREFIX + recipe.name
        print(f"  {name:29s} {recipe_status(recipe, home)}")
    print("defences (suites' [defence] text = [...]; chained in order):")
    for line in defence_lines():
        print(f"  {line}")
    print("evasion-budget families (suites' [budgets], memerobust budgets --family):")
    for family in (get_family(n) for n in family_names()):
        levels = list(family.levels)
        contiguous = levels == list(range(levels[0], levels[-1] + 1))
        shown = f"{levels[0]} to {levels[-1]}" if contiguous else ", ".join(map(str, levels))
        edits = "the caption" if family.modality == "text" else "the picture"
        print(f"  {family.name:22s} edits {edits:11s}  budgets {shown} ({family.unit})")
    print("built-in suites:", ", ".join(p.name for p in builtin_suite_paths()))
    return 0


def defence_lines() -> list[str]:
    """One line per registered normaliser: what it undoes, and what it lacks on this machine."""
    from .detectors import defences
    from .errors import BackendMissing

    lines = []
    for name in defences.names():
        normaliser = defences.get(name)
        try:
            normaliser("")  # a normaliser whose backend is missing says so even on an empty caption
            status = ""
        except BackendMissing as exc:
            status = f"  (not available here: {exc})"
        except Exception as exc:  # a third party's normaliser that fails on an empty caption
            status = f"  (fails here: {type(exc).__name__}: {exc})"
        lines.append(f"{name:22s} {normaliser.description}{status}")
    return lines


def model_lines(cards: dict) -> list[str]:
    """One line per card: its backbone's weights and whether they are on this machine, and its head's checkpoint."""
    from .detectors import load_card
    from .detectors.backbones import backbone_weights

    here = {True: "on this machine", False: "not on this machine", None: "unknown here (open_clip missing)"}
    lines = []
    for name, path in cards.items():
        try:
            card = load_card(path)
        except MemeRobustError as exc:
            lines.append(f"{name:22s} unreadable card: {exc}")
            continue
        if card.demo_weights:
            weights, present = "demo weights (tiny random backbone, shipped)", True
        else:
            weights, present = backbone_weights(card.backbone)
        checkpoint = card.checkpoint_path()
        head = ("head: none shipped (train one; pass --memerobust-checkpoint)" if checkpoint is None
                else f"head: {checkpoint.name}" + ("" if checkpoint.is_file() else " (missing)"))
        if card.architecture == "hosted":  # an endpoint: whether its key is set is what can be told here
            import os

            env = str(card.params.get("api_key_env", "OPENAI_API_KEY"))
            from .detectors.hosted import redact

            weights = f"endpoint {redact(str(card.params.get('base_url')))} model {card.params.get('model')}"
            present = f"key {'set' if os.environ.get(env) else 'not set'} in ${env}"
            head = f"prompted, label words {' / '.join(card.params.get('label_words', ['No', 'Yes']))}"
        elif card.backbone.get("kind") == "vlm":  # no head: asked, answered through its label words
            weights = f"vision-language model {card.backbone.get('name')}"
            head = f"prompted, label words {' / '.join(card.params.get('label_words', ['No', 'Yes']))}"
        elif card.backbone.get("kind") == "shieldgemma2":  # no head: its policies' answers, combined
            weights = f"safety classifier {card.backbone.get('name')}"
            head = (f"policies {', '.join(card.params.get('policies', ['dangerous', 'sexual', 'violence']))} "
                    f"({card.params.get('combine', 'max')})")
        status = present if isinstance(present, str) else here[present]
        lines.append(f"{name:22s} {card.architecture:17s} backbone: {weights}, {status}; {head}")
    return lines


def _report(args) -> int:
    from .report import read_report, render, write_report
    from .report.outline import verdict_lines

    path = Path(args.json)
    report = read_report(path)
    outputs = [Path(args.md)] if args.md else []
    if args.html or args.out:
        out = Path(args.out) if args.out else path.with_suffix(".html")
        wanted = (".html",) if args.html else (".html", ".md")
        if out.suffix not in wanted:
            raise ConfigError(f"-o {out}: {'--html writes' if args.html else 'the format follows the suffix:'} "
                              f"{' or '.join(wanted)}")
        outputs.append(out)
    damaged = (KeyError, TypeError, ValueError, IndexError, AttributeError)
    try:
        text = "\n".join(verdict_lines(report)) + "\n\n" + render(report)
    except damaged as exc:
        raise ConfigError(f"{path}: damaged pytest-memerobust report ({type(exc).__name__}: {exc})") from None
    for out in outputs:
        try:
            write_report(out, report)
        except OSError as exc:
            raise ConfigError(f"cannot write {out}: {exc.strerror or exc}") from None
        except damaged as exc:
            raise ConfigError(f"{path}: damaged pytest-memerobust report ({type(exc).__name__}: {exc})") from None
    print(text)
    for out in outputs:
        print(f"memerobust: wrote {out}")
    return 0


def _plot(args) -> int:
    """Every figure of a saved JSON report (report/plots.py) written as a file; nothing written on bad input."""
    from .report import read_report
    from .report.plots import report_plots, write_plots

    path = Path(args.json)
    report = read_report(path)
    if report.get("partial"):
        raise ConfigError(f"{path} is a partial report ({report['partial']}): it holds the verdict and the cases' "
                          "records but no numbers to plot")
    try:
        plots = report_plots(report)
    except (KeyError, TypeError, ValueError, IndexError, AttributeError) as exc:
        raise ConfigError(f"{path}: damaged pytest-memerobust report ({type(exc).__name__}: {exc})") from None
    if not plots:
        raise ConfigError(f"{path} has nothing to plot: no perturbation with severities, no evasion budgets and no "
                          "abstentions")
    try:
        written = write_plots(plots, Path(args.out), args.format)
    except OSError as exc:
        raise ConfigError(f"cannot write the figures to {args.out}: {exc.strerror or exc}") from None
    for out in written:
        print(out)
    return 0


def _budgets(args) -> int:
    """The smallest edit that gets each harmful meme past a detector, per edit family (budgets.py)."""
    from .detectors import find_card
    from .detectors.cards import check_local_weights

    card = find_card(args.card)
    if args.checkpoint is None and not card.demo_weights:
        check_local_weights(card)  # before torch loads: weights missing here are said at once
    import json

    from .atomic import atomic_write_text
    from .perturb.budget_edits import get_family
    from .run.analyses import evaluate_budgets
    from .data.reading import read_memes
    from .detectors import load_detector
    from .engine import Engine
    from .report.tables import budget_table

    for name in args.family or ():
        get_family(name)  # an unknown family is said before anything loads
    detector = load_detector(card, checkpoint=args.checkpoint, device=args.device)
    reads_pictures = "image" in getattr(detector, "modalities", ("image", "text"))
    task = args.task or card.task
    ocr = _ocr_reader(args)
    data = read_memes(args.data, ocr=ocr, require_images=reads_pictures or ocr is not None,
                      allow_outside_paths=args.allow_outside_paths, ocr_option=OCR_OPTION,
                      limit=args.limit).labelled(task)
    engine = Engine(detector, data, seed=args.seed, batch_size=args.batch_size)
    entries = evaluate_budgets(engine, data.labels(task), args.family, seed=args.seed, n_resamples=args.bootstrap)
    print(f"evasion budgets: {card.name} on {args.data} ({sum(data.labels(task) == 1)} harmful memes; the searched "
          f"ones are those it flags when clean)")
    print(budget_table(entries))
    for e in entries:
        for w in e["worst"][:3]:
            print(f"  {e['family']} {w['budget']:g}: {w['id']}: {w['caption'][:60]!r} -> "
                  f"{(w['evasion'] or '(picture edited)')[:60]!r}")
    if args.json:
        atomic_write_text(Path(args.json), json.dumps({"model": card.name, "data": args.data, "task": task,
                                                       "budgets": entries}, indent=2) + "\n")
        print(f"wrote {args.json}")
    return 0


OCR_OPTION = "--ocr rapidocr"  # how train, budgets and preview ask for captions read off the pictures


def _ocr_reader(args):
    """The OCR backend a command's --ocr names (None without it), caching its readings where the command caches:
    memes without a caption are read as a pytest run reads them (data/reading.py)."""
    if not getattr(args, "ocr", None):
        return None
    from .data.ocr import ocr_backend

    cache = None if getattr(args, "no_cache", False) else getattr(args, "cache_dir", None)
    return ocr_backend(args.ocr, cache, getattr(args, "device", None) or "cpu")


def _preview(args) -> int:
    from .data import load_rgb
    from .data.reading import read_memes
    from .data.render import draw_meme
    from .data.text_boxes import TEXT_BOXES
    from .perturb import get, names
    from .report.gallery import gallery, save_gallery

    boxes = None
    if args.image:
        image, meme_id, caption = load_rgb(Path(args.image)), Path(args.image).name, args.caption
    else:
        dataset = read_memes(args.data, ocr=_ocr_reader(args), require_images=not args.render,
                             ocr_option=OCR_OPTION)
        if not 0 <= args.index < len(dataset):
            raise MemeRobustError(f"--index {args.index} is outside {args.data!r} ({len(dataset)} memes)")
        meme = dataset.memes[args.index]
        meme_id, caption = meme.id, args.caption or meme.text
        if args.render:  # the caption drawn as meme text on a picture of that size; the boxes are where it went
            image, boxes = draw_meme(meme.text, args.render, seed=args.index)
        else:
            image, boxes = meme.image, meme.meta.get(TEXT_BOXES)
    if boxes is None and args.ocr:
        boxes = _ocr_reader(args).read_boxes(image)
    chosen = args.perturbations or [n for n in names("image")
                                    if not get(n).needs_model and (caption or not get(n).caption_source)]
    for name in chosen:
        if get(name).modality != "image":
            raise MemeRobustError(f"{name!r} is not an image perturbation")
    save_gallery(gallery(image, meme_id, chosen, seed=args.seed, tile=args.tile, caption=caption, text_boxes=boxes),
                 Path(args.out))
    where = ("its text boxes unknown: the typographic edits use the bottom band (--ocr rapidocr finds them)"
             if boxes is None else f"{len(boxes)} text boxes")
    print(f"wrote {args.out}: {len(chosen)} perturbations x their severities of {meme_id} ({where})")
    return 0


def _compare(args) -> int:
    """The gate's rules and summary on two saved baselines (A = before, B = now): the same family, error control,
    table and summary line as `pytest --memerobust-baseline`, exit 1 when B fails the gate."""
    from tabulate import tabulate

    from .judge.gate import (DEFAULT_CHECKS, ErrorControl, RegressionCheck, check_resamples, compare_baselines,
                             comparison_headers, comparison_rows, load_baseline, memes_needed_line, power_line,
                             summarize, unmatched_conditions)

    try:
        checks = tuple(RegressionCheck.parse(s) for s in args.fail_on) if args.fail_on else DEFAULT_CHECKS
    except ValueError as exc:
        raise ConfigError(f"--fail-on: {exc}") from None
    try:
        control = ErrorControl.parse(args.gate_error)
    except ValueError as exc:
        raise ConfigError(f"--gate-error: {exc}") from None
    if not 0 < args.confidence < 1:
        raise ConfigError(f"--confidence {args.confidence}: must lie strictly between 0 and 1, e.g. 0.95")
    check_resamples(control, args.bootstrap, "--bootstrap")  # too few resamples: a gate that cannot fail
    before, after = load_baseline(Path(args.before)), load_baseline(Path(args.after))
    mode = "non-inferiority" if args.non_inferiority else "regressions"
    comparisons = compare_baselines(before, after, checks, names=(args.before, args.after), control=control,
                                    mode=mode, confidence=args.confidence, n_resamples=args.bootstrap,
                                    seed=after["seed"])
    new, missing = unmatched_conditions(before, after)
    summary = summarize(comparisons, closest=len(comparisons), new=new, missing=missing)
    print(f"A = {args.before} (baseline), B = {args.after} (now); rules {', '.join(c.spec for c in checks)}; "
          f"{mode}: one-sided paired tests of B against A over the same memes ({args.bootstrap} bootstrap "
          f"resamples shared by every condition), {control.describe()}; per condition its rule nearest to, or "
          f"furthest past, failing")
    print(tabulate(comparison_rows(summary["rows"]), headers=comparison_headers(args.confidence), tablefmt="simple",
                   disable_numparse=True))
    print(summary["summary"])
    for line in filter(None, [power_line(summary), memes_needed_line(summary)]):
        print(line)
    if args.ledger:
        from .judge.ledger import flip_ledger
        from .report.ledger import write_ledger

        ledger = flip_ledger(before, after, names=(args.before, args.after))
        paths = write_ledger(ledger, Path(args.ledger))
        wrong, right = (sum(c[key] for c in ledger["conditions"]) for key in ("n_newly_wrong", "n_newly_right"))
        print(f"flip ledger: {wrong} memes newly wrong and {right} newly right in B over "
              f"{len(ledger['conditions'])} conditions; wrote {' and '.join(map(str, paths))}")
    return 1 if summary["regressed"] else 0


def _history(args) -> int:
    """The trend of a run history: the runs, then per model and family the worst case's relative robustness run by
    run, its change and whether it eroded (judge/trend.py)."""
    from .judge.trend import trend_series
    from .report.history import (DEFAULT_NAME, SHOWN_RUNS, STATE_LEGEND, distinct_runs, erosion_lines, printable,
                                 read_history, runs_table, trend_tables)

    def warn(message: str) -> None:
        print(f"memerobust history: warning: {message}", file=sys.stderr)

    if args.mlflow:
        from .track.mlflow_run import mlflow_history

        entries, where = mlflow_history(args.mlflow, args.experiment, warn=warn), f"MLflow {args.mlflow}"
    else:
        path = Path(args.path or Path(".pytest_cache") / "d" / "memerobust" / DEFAULT_NAME)
        entries, where = read_history(path, warn=warn), printable(str(path))
    shown = distinct_runs(entries[-(args.last or SHOWN_RUNS):])
    if not shown:
        print(f"memerobust history: {where} holds no run yet")
        return 0
    series = trend_series(shown, model=args.model, family=args.family)
    if (args.model or args.family) and not series:
        raise ConfigError(f"{where}: no run has " + " and ".join(
            f"{what} {value!r}" for what, value in (("model", args.model), ("family", args.family)) if value))
    print(f"run history: {where}: the last {len(shown)} of {len(entries)} runs")
    print(runs_table(shown))
    print()
    print(trend_tables(series, [e["run"] for e in shown]))
    print(STATE_LEGEND)
    for line in erosion_lines(series):
        print(line)
    return 1 if args.fail_on_erosion and any(s["state"] == "eroded" for s in series) else 0


def _export(args) -> int:
    """The perturbed memes of a saved report's run as a `datasets` set (track/export.py)."""
    from .options import checkpoints
    from .track.export import export_report, summary_line

    info = export_report(Path(args.json), Path(args.out), conditions=args.conditions, models=args.model,
                         counterexamples=args.counterexamples, layout=args.format, device=args.device,
                         checkpoints=checkpoints(args.checkpoint or []),
                         cache_dir=None if args.no_cache else Path(args.cache_dir),
                         allow_outside_paths=args.allow_outside_paths)
    print(summary_line(info, Path(args.out)))
    print(f"every condition's predictions, and the clean ones, match {args.json}'s digests")
    return 0


# Exit statuses of a stopped command, the shell's 128 + signal: SIGINT (Ctrl-C), SIGTERM (a CI job cancelled, `kill`),
# SIGPIPE (the reader of its output left)
INTERRUPTED, TERMINATED, PIPE_CLOSED = 130, 143, 141


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM stopped the command; `code` is the exit status that says which. A KeyboardInterrupt, so
    every `finally` and context manager on the way out runs: an export removes its staging folder."""

    def __init__(self, code: int = INTERRUPTED):
        super().__init__(code)
        self.code = code


@contextmanager
def _signals_interrupt():
    """While a command runs, SIGINT and SIGTERM raise Interrupted (main thread only; a handler someone else set is
    kept); the handlers before are put back after."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum, frame):
        raise Interrupted(TERMINATED if signum == signal.SIGTERM else INTERRUPTED)

    before = {}
    for number in (signal.SIGINT, signal.SIGTERM):
        if signal.getsignal(number) in (signal.SIG_DFL, signal.default_int_handler):
            before[number] = signal.signal(number, interrupt)
    try:
        yield
    except KeyboardInterrupt as exc:  # Ctrl-C before the handler was set, or from a library: the same one line
        raise exc if isinstance(exc, Interrupted) else Interrupted() from None
    finally:
        for number, handler in before.items():
            signal.signal(number, handler)


def _silence_stdout() -> None:
    """Point standard output at /dev/null, so the interpreter's last flush at exit finds no closed pipe (Python's
    recipe for SIGPIPE)."""
    import os

    try:
        sys.stdout.fileno()
    except (AttributeError, ValueError, OSError):  # not a real file (a test's capture): nothing to flush at exit
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def main(argv=None) -> int:
    from . import __version__
    from .options import device, positive_int

    parser = argparse.ArgumentParser(prog="memerobust", description=__doc__)
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    from .data.ocr import OCR_BACKENDS

    sub = parser.add_subparsers(dest="command", required=True)
    train = sub.add_parser("train", help="fit a card's trainable head and write its checkpoint")
    train.add_argument("card", help="model card name or .toml path")
    train.add_argument("--data", help="'demo' or NAME:PATH: use its train and val splits")
    train.add_argument("--train", help="dataset spec of the training split, e.g. pridemm:/data/PrideMM:train")
    train.add_argument("--val", help="dataset spec of the validation split")
    train.add_argument("--demo", action="store_true",
                       help="use the card's small [demo] configuration and recipe, on the demo memes unless --data "
                            "says otherwise; without --out, write the card's own checkpoint file (refused for a "
                            "card shipped inside a package: pass --out)")
    train.add_argument("--out", help="checkpoint path (.safetensors); metrics and a card are written beside it; never "
                                     "inside the installed package")
    train.add_argument("--name", help="the name of the card written beside the checkpoint (default: the --out "
                       "file's name without .safetensors; a registered card's name gets -trained)")
    train.add_argument("--init", help="start from the weights of this checkpoint")
    train.add_argument("--resume", action="store_true", help="continue an interrupted run of the same command")
    train.add_argument("--task")
    train.add_argument("--epochs", type=int, help="default: the card's [training] (with --demo, updated by its [demo] "
                       "training), else 10")
    train.add_argument("--lr", type=float, help="default: the card's [training] (with --demo, updated by its [demo] "
                       "training), else 1e-4")
    train.add_argument("--weight-decay", dest="weight_decay", type=float, help="default: card, else 1e-4")
    train.add_argument("--batch-size", dest="batch_size", type=int, help="default: card, else 16")
    train.add_argument("--seed", type=int, default=0)
    train.add_argument("--device", type=device, default="cpu", help="cpu (default), auto, cuda, cuda:N or mps")
    train.add_argument("--cache-dir", dest="cache_dir", default=str(Path(".pytest_cache") / "d" / "memerobust"),
                       help="where encoded features are kept, by backbone, for later heads and pytest runs (default: "
                            "the plugin's, .pytest_cache/d/memerobust)")
    train.add_argument("--no-cache", dest="no_cache", action="store_true", help="keep features in memory only")
    train.add_argument("--quiet", action="store_true", help="no progress (by default a bar on a terminal while it "
                       "encodes and trains, else a line every 10%%, on standard error)")
    train.add_argument("--ocr", choices=OCR_BACKENDS, help="read the captions memes lack off their pictures with "
                       "this OCR backend, as a pytest run with --memerobust-ocr does")
    train.add_argument(OUTSIDE_PATHS, dest="allow_outside_paths", action="store_true",
                       help="let the data's image paths lead outside its folder")
    train.add_argument("--download", action="store_true", help="let a backbone named by hub id that is not on this "
                       "machine download (into the Hugging Face cache); without it such a backbone is an error")
    train.set_defaults(run=_train)
    listing = sub.add_parser("list", help="models, datasets, perturbations (textattack's recipes with what each "
                                          "lacks here), defences, evasion-budget families and suites")
    listing.add_argument("--cache-dir", dest="cache_dir", default=str(Path(".pytest_cache") / "d" / "memerobust"),
                         help="the test runs' cache folder, where textattack's cache lives (its textattack/ folder)")
    listing.set_defaults(run=_list)
    report = sub.add_parser("report", help="print the verdict and tables of a saved JSON report; re-render its "
                            "Markdown or HTML page")
    report.add_argument("json")
    report.add_argument("--md", help="also write the Markdown report to this .md file")
    report.add_argument("--html", action="store_true", help="also write the HTML report (to -o, default: the JSON's "
                        "name with .html, beside it)")
    report.add_argument("-o", "--out", help="where to write the page (.html, or .md); with --html, an .html file")
    report.set_defaults(run=_report)
    plot = sub.add_parser("plot", help="write the figures of a saved JSON report as files: robustness curves, "
                          "evasion curves of the budgets, abstention shares")
    plot.add_argument("json", help="the report (.json, from --memerobust-report=FILE.json)")
    plot.add_argument("--out", required=True, metavar="DIR", help="folder for the figures (made if missing)")
    plot.add_argument("--format", choices=("png", "svg"), default="png", help="png (default) or svg")
    plot.set_defaults(run=_plot)
    history = sub.add_parser("history", help="the trend of a run history (--memerobust-history): per model and "
                             "perturbation family, the worst case's relative robustness run by run and whether it "
                             "eroded")
    history.add_argument("path", nargs="?", help="the .jsonl history (default: .pytest_cache/d/memerobust/"
                         "history.jsonl, where --memerobust-history writes when given no path)")
    history.add_argument("--last", type=positive_int, help="show the last N runs (default 8)")
    history.add_argument("--model", help="only this model (its label in the reports)")
    history.add_argument("--family", help="only this perturbation family")
    history.add_argument("--mlflow", help="read the runs from this MLflow tracking URI instead (runs logged with "
                         "--memerobust-mlflow)")
    history.add_argument("--experiment", help="the MLflow experiment (default: $MLFLOW_EXPERIMENT_NAME, else "
                         "pytest-memerobust)")
    history.add_argument("--fail-on-erosion", dest="fail_on_erosion", action="store_true",
                         help="exit 1 when a family eroded beyond noise over the runs shown")
    history.set_defaults(run=_history)
    export = sub.add_parser("export", help="the perturbed memes of a saved report's run as a Hugging Face datasets "
                            "set (parquet, or an imagefolder): pictures and captions as the detector read them, with "
                            "its clean and perturbed probabilities, checked against the report")
    export.add_argument("json", help="the run's JSON report (--memerobust-report=FILE.json)")
    export.add_argument("--out", required=True, help="a new or empty folder to write the set into")
    export.add_argument("--conditions", nargs="+", metavar="ID", help="condition ids of the report, e.g. "
                        "text=typos@3 image=jpeg_compression@3 (default: every condition that perturbs the memes)")
    export.add_argument("--model", action="append", help="only this model's results (its label in the report); "
                        "repeatable")
    export.add_argument("--counterexamples", action="store_true",
                        help="only the memes that flipped: right clean, wrong under the condition")
    export.add_argument("--format", choices=("parquet", "imagefolder"), default="parquet",
                        help="parquet (default: one file, pictures as PNG bytes inside) or imagefolder (PNG files "
                             "and a metadata.jsonl)")
    export.add_argument("--device", type=device, help="where the detector runs (default: the run's); the predictions "
                        "must match the report's, so a GPU run is exported on a GPU")
    export.add_argument("--checkpoint", action="append", metavar="[MODEL=]PATH",
                        help="the run's checkpoint where it has moved (its sha256 is checked); repeatable")
    export.add_argument("--cache-dir", dest="cache_dir", default=str(Path(".pytest_cache") / "d" / "memerobust"),
                        help="the runs' cache: encoded features, fitted attacks and a hosted model's answers are "
                             "read from it rather than computed or asked again (default: the plugin's, "
                             ".pytest_cache/d/memerobust)")
    export.add_argument("--no-cache", dest="no_cache", action="store_true",
                        help="compute everything again, in memory only")
    export.add_argument(OUTSIDE_PATHS, dest="allow_outside_paths", action="store_true",
                        help="read a dataset whose files lie outside its folder")
    export.set_defaults(run=_export)
    preview = sub.add_parser("preview", help="a PNG gallery of one meme under every image perturbation and severity")
    preview.add_argument("--data", default="demo", help="dataset spec to take the meme from (default: demo)")
    preview.add_argument("--index", type=int, default=0, help="which meme of the dataset (default 0)")
    preview.add_argument("--image", help="or a picture file")
    preview.add_argument("--caption", default="", help="the caption the caption-drawing edits draw (default: the "
                         "meme's own; with --image, none, and those edits are left out)")
    preview.add_argument("--render", type=int, metavar="SIZE", help="draw the meme's caption as meme text (white "
                         "capitals, black outline, top and bottom) on a SIZE px picture and preview that: for "
                         "caption-only data, or to see the typographic edits at real size")
    preview.add_argument("--ocr", choices=OCR_BACKENDS, help="find where the picture shows its text with this OCR "
                         "backend, when the dataset does not say (the typographic edits act there), and read the "
                         "caption off the picture when the dataset has none")
    preview.add_argument("--perturbations", nargs="+", help="names (default: every model-free image perturbation)")
    preview.add_argument("--seed", type=int, default=0)
    preview.add_argument("--tile", type=int, default=128, help="tile side in pixels")
    preview.add_argument("--out", default="gallery.png")
    preview.set_defaults(run=_preview)
    budgets = sub.add_parser("budgets", help="the smallest edit that gets each harmful meme past a detector, per "
                             "edit family (median budget, evasion curve, intervals)")
    budgets.add_argument("card", help="model card name or .toml path")
    budgets.add_argument("--data", required=True, help="dataset spec, e.g. pridemm:../shared/data/pridemm:test")
    budgets.add_argument("--checkpoint", help="the head to test (default: the card's)")
    budgets.add_argument("--family", action="append", help="edit family (repeatable; default: every family the "
                         "detector reads: char_edits, lookalikes, word_substitutions, covered_caption, image_linf)")
    budgets.add_argument("--task")
    budgets.add_argument("--limit", type=int, help="the first N memes")
    budgets.add_argument("--seed", type=int, default=0)
    budgets.add_argument("--bootstrap", type=int, default=1000, help="bootstrap resamples for the intervals")
    budgets.add_argument("--batch-size", dest="batch_size", type=int, default=64)
    budgets.add_argument("--device", type=device, default="cpu", help="cpu (default), auto, cuda, cuda:N or mps")
    budgets.add_argument("--ocr", choices=OCR_BACKENDS, help="read the captions memes lack off their pictures "
                         "with this OCR backend, as a pytest run with --memerobust-ocr does")
    budgets.add_argument(OUTSIDE_PATHS, dest="allow_outside_paths", action="store_true",
                         help="read a dataset whose files lie outside its folder")
    budgets.add_argument("--json", help="write the budgets (with the worst memes) to this JSON file")
    budgets.set_defaults(run=_budgets)
    compare = sub.add_parser("compare", help="side-by-side table of two baselines (exit 1 on a regression)")
    compare.add_argument("before", help="baseline A (.json, from --memerobust-save-baseline)")
    compare.add_argument("after", help="baseline B")
    compare.add_argument("--fail-on", "--metric", action="append", metavar="RULE",
                         help="regression rule as in --memerobust-fail-on: acc, auroc, f1, flip, rel_acc... with an "
                              "optional minimum effect (acc:1%%); repeatable; default: acc, auroc, f1 and flip")
    compare.add_argument("--gate-error", default="fwer", metavar="CONTROL",
                         help="error control over every condition and rule, as --memerobust-gate-error: fwer "
                              "(default), holm, fdr or none, optionally with a level (fwer:0.01)")
    compare.add_argument("--non-inferiority", action="store_true",
                         help="ask the non-inferiority question: B passes only where every rule is shown no worse "
                              "than A by more than its margin (--fail-on acc:2%%; 2 points unless given)")
    compare.add_argument("--confidence", type=float, default=0.95)
    compare.add_argument("--bootstrap", type=int, default=1000)
    compare.add_argument("--ledger", metavar="DIR", help="also write the flip ledger (the memes B newly gets wrong "
                         "and newly gets right, with McNemar's test) to DIR/flip-ledger.json and DIR/flip-ledger.md")
    compare.set_defaults(run=_compare)
    args = parser.parse_args(argv)
    try:
        with _signals_interrupt():
            code = args.run(args)
            sys.stdout.flush()  # a closed pipe (`| head`) is found here, not at exit
        return code
    except Interrupted as exc:
        what = ", nothing written" if args.command == "export" else ""
        print(f"memerobust {args.command}: interrupted{what}", file=sys.stderr)
        return exc.code
    except BrokenPipeError:  # the reader left (`memerobust history | head`): stop quietly, as `cat` does
        _silence_stdout()
        return PIPE_CLOSED
    except OutsideFolder as exc:  # said with this command's own switch, or none where it has none
        print(f"memerobust: error: {exc.naming(OUTSIDE_PATHS if hasattr(args, 'allow_outside_paths') else None)}",
              file=sys.stderr)
        return 2
    except MemeRobustError as exc:
        print(f"memerobust: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
