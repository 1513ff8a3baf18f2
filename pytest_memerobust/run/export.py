"""A run's perturbed memes exported as a Hugging Face `datasets` set: the run's half of the export, which evaluates
a report's recipe again through a session (or takes a finished run's own) and checks every prediction against the
report's digests before anything is written. What the set is (its columns, its layouts, its card and export.json,
the folder written whole or not at all) is track/export.py's."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ..errors import MemeRobustError
from ..track.export import (LAYOUTS, ExportError, ImageFolderRows, ParquetRows, Part, Staged, card, check_out,
                            check_report, class_names, features, provenance, require_datasets, select, summary_line,
                            write_texts)


def session_for(report: dict, parts: list[Part], *, device: str | None = None, checkpoints=None,
                cache_dir: Path | None = None, allow_outside_paths: bool = False):
    """A session that evaluates the report's recipe again: its options, seed and models, each with the checkpoint
    the run recorded (or `checkpoints`: name -> path, where it has moved; "" for every model), on `device` (default:
    the run's). `cache_dir`: a run's cache (encoded features, fitted attacks, a hosted model's answers, all keyed by
    what they depend on), else everything is computed again and held in memory."""
    from ..judge.results import StatsConfig
    from .options import CacheOptions, ComputeOptions, DataOptions, JudgingOptions, Options, split_model
    from .session import RobustnessSession

    from ..errors import UnknownNameError

    options = report.get("options") or {}
    models = tuple(dict.fromkeys(p.model for p in parts))
    given = dict(checkpoints or {})
    held = {split_model(m)[0] for m in (*(report.get("models") or {}), *models)}
    for name in given:
        if name and name not in held:  # a typo would otherwise leave the run's checkpoint in use, unsaid
            raise UnknownNameError("model", name, held, hint=f"--checkpoint {name}=PATH names a model of the run")
    wanted = {}
    for model in models:
        name = split_model(model)[0]
        recorded = (report.get("models") or {}).get(model) or {}
        path = given.get(name) or given.get("")
        if path is None and recorded.get("checkpoint") not in (None, "None"):
            path = recorded["checkpoint"]
            if not Path(path).is_file():
                raise ExportError(f"model {model}: the run's checkpoint {path} is not here; pass --checkpoint "
                                  f"{name}=PATH (its sha256 must be {recorded.get('checkpoint_sha256')})")
        if path is not None:
            wanted[name] = str(path)
    stats = StatsConfig(n_resamples=options.get("n_resamples", 1000), confidence=options.get("confidence", 0.95),
                        seed=report.get("seed", 0), scale=options.get("robustness_scale", "percent"))
    return RobustnessSession(Options(models=models,
                                     data=DataOptions(spec=options.get("data"), limit=options.get("limit"),
                                                      sample=options.get("sample"), task=options.get("task"),
                                                      captions=options.get("captions", "dataset"),
                                                      ocr=options.get("ocr"), allow_outside_paths=allow_outside_paths),
                                     checkpoints=wanted,
                                     compute=ComputeOptions(device=device or options.get("device", "auto"),
                                                            batch_size=options.get("batch_size", 64),
                                                            cache=CacheOptions(folder=cache_dir,
                                                                               features=cache_dir is not None)),
                                     seed=report.get("seed", 0), judging=JudgingOptions(stats=stats)))


def check_recipe(session, report: dict, parts: list[Part], layout: str, path="the report") -> tuple[list, bool]:
    """Before the long work: each model has the weights the run had (the checkpoint's sha256), each dataset the
    memes it had (their fingerprint), each case fits its detector (session.check_case), and the chosen conditions
    share one label task. Returns (the task's class names, whether it is multi-label)."""
    for model in dict.fromkeys(p.model for p in parts):
        recorded = ((report.get("models") or {}).get(model) or {}).get("checkpoint_sha256")
        now = session.detector(model).fingerprint
        if recorded is not None and now != recorded:
            raise ExportError(f"model {model}: its weights have sha256 {now}, the run of {path} had {recorded}: "
                              f"another checkpoint gives other predictions; pass --checkpoint with the run's")
    tasks = {}
    for p in parts:
        spec, captions = p.data
        session.check_case(p.model, spec, p.task, captions)
        if session.data_spec(spec, captions) != p.dataset:
            raise ExportError(f"{p.label} on {p.dataset}: this session reads {session.data_spec(spec, captions)!r}")
        dataset = session.dataset(p.dataset)
        classes = class_names(dataset.classes[p.task], session.detector(p.model).classes)
        tasks[(classes, p.task in dataset.multilabel)] = p.task
        if layout == "imagefolder" and not all(m.has_picture for m in dataset.memes):
            raise ExportError(f"{p.dataset} has memes without a picture, which an imagefolder cannot hold: export "
                              f"it as parquet (--format parquet)")
    for spec in dict.fromkeys(p.dataset for p in parts):
        recorded = ((report.get("datasets") or {}).get(spec) or {}).get("fingerprint")
        if recorded is not None and session.fingerprint(spec) != recorded:
            raise ExportError(f"dataset {spec}: its memes (ids, captions, labels, pictures) differ from those the "
                              f"run of {path} read (fingerprint {session.fingerprint(spec)[:16]}, recorded "
                              f"{recorded[:16]}; --memerobust-limit={report.get('options', {}).get('limit')})")
    if len(tasks) > 1:
        listed = "; ".join(f"{task}: {', '.join(names)}" for (names, _), task in tasks.items())
        raise ExportError(f"the chosen conditions score different label tasks ({listed}): one export holds one "
                          f"task's labels; choose with --model or --conditions")
    [(classes, multilabel)] = list(tasks)
    return list(classes), multilabel


def evaluate(session, parts: list[Part], path="the report") -> list:
    """(part, result) of each part, evaluated through the session as the run evaluated it (planned together, so
    one shard-major pass computes them), with its predictions and the clean ones checked against the report's
    digests: a difference is an ExportError, and nothing is written."""
    from ..perturb.conditions import Condition

    for p in parts:
        spec, captions = p.data
        if (p.model, p.dataset, p.condition) not in session.outcomes.results:  # (a run exporting its own: there)
            session.plan(p.model, spec, Condition.parse(p.condition), captions)
    out = []
    for p in parts:
        spec, captions = p.data
        result = session.evaluate(p.model, p.condition, data=spec, task=p.task, captions=captions)
        clean = session.outcomes.results[(p.model, p.dataset, Condition().id)]
        for what, recorded, now in (("clean", p.clean_digest, clean.predictions_digest),
                                    (p.condition, p.digest, result.predictions_digest)):
            if now != recorded:
                raise ExportError(
                    f"{p.label} on {p.dataset}, {what}: the regenerated predictions hash to {now[:16]}, the run of "
                    f"{path} recorded {recorded[:16]}: the detector, its checkpoint, the data or the device differ "
                    f"from the run's (a GPU run exported on a CPU differs: --device); nothing was written")
        out.append((p, result))
    return out


def outcomes(result) -> dict[str, np.ndarray]:
    """Per meme of a result: right clean, right under the condition, declined (clean or here), and flipped (right
    clean, wrong here, answered both times: what replay.worst_flips ranks)."""
    from .replay import truth_codes
    from ..judge.results import predicted_labels

    y = result.reference  # the true labels (unlabelled memes: the clean predictions, so "correct" is "kept")
    truth = truth_codes(y)
    right_clean = predicted_labels(y, result.answers.proba_clean) == truth
    right = predicted_labels(y, result.answers.proba) == truth
    declined = np.zeros(len(y), bool)
    for abstained in (result.answers.abstained_clean, result.answers.abstained):
        if abstained is not None:
            declined |= np.asarray(abstained, bool)
    return {"correct_clean": right_clean, "correct": right, "declined": declined,
            "flipped": right_clean & ~right & ~declined}


def rows(session, part: Part, result, counterexamples: bool = False):
    """The part's rows, in the dataset's order (only the flipped memes with `counterexamples`): each a dict of the
    columns but `image`, and the picture fed (H x W x 3 uint8, None for a meme without one)."""
    from ..perturb.conditions import Condition
    from .replay import picture_digest

    condition = Condition.parse(part.condition)
    engine = session.engine(part.model, part.dataset, part.task, condition.defence, condition.source)
    y = np.asarray(result.memes.y_true)
    told = outcomes(result)
    words = engine.words_changed(condition)
    chosen = np.flatnonzero(told["flipped"]) if counterexamples else range(len(y))

    def flag(values, i):
        return None if values is None else bool(np.asarray(values)[i])

    for i in chosen:
        i = int(i)
        meme = engine.dataset.memes[i]
        picture = engine.picture(condition, i) if meme.has_picture else None  # first: a joint attack's caption
        caption = engine.caption(condition, i)  # is computed with its picture
        original_source = meme.meta.get("caption_source") or "dataset"  # data.ocr.fill_missing_captions marks it
        row = {
            "caption": caption, "original_caption": meme.text, "original_caption_source": original_source,
            "caption_source": getattr(engine.ocr, "name", "ocr") if engine.ocr is not None else original_source,
            "label": [k for k, on in enumerate(y[i]) if on] if y.ndim == 2 else int(y[i]),
            "condition": part.condition, "text_perturbation": condition.text,
            "text_severity": condition.text_severity, "image_perturbation": condition.image,
            "image_severity": condition.image_severity, "seed": int(engine.seed), "meme_id": meme.id,
            "model": part.label, "dataset": part.dataset, "task": part.task,
            "proba_clean": np.asarray(result.answers.proba_clean[i], dtype=np.float64).tolist(),
            "proba": np.asarray(result.answers.proba[i], dtype=np.float64).tolist(),
            "correct_clean": bool(told["correct_clean"][i]), "correct": bool(told["correct"][i]),
            "flipped": bool(told["flipped"][i]), "abstained_clean": flag(result.answers.abstained_clean, i),
            "abstained": flag(result.answers.abstained, i),
            "words_changed": None if words is None else float(words[i]),
            "picture_digest": None if picture is None else picture_digest(picture)}
        yield row, picture


def export(session, report: dict, out: Path, *, conditions=None, models=None, counterexamples: bool = False,
           layout: str = "parquet", path="the report", replace: bool = False) -> dict:
    """Write the perturbed memes of `report`'s run (evaluated by `session`) to the folder `out`; its export.json.
    Every check that needs no evaluation comes first; the folder appears only once the export is whole.
    `replace`: an earlier export in `out` is replaced (a suite's [export], run after run)."""
    require_datasets()
    if layout not in LAYOUTS:
        raise ExportError(f"--format {layout!r}: expected one of {', '.join(LAYOUTS)}")
    out = check_out(out, replace=replace)
    check_report(report, path)
    parts = select(report, conditions, models, path)
    classes, multilabel = check_recipe(session, report, parts, layout, path)
    evaluated = evaluate(session, parts, path)
    schema = features(classes, multilabel)
    counts = []
    with Staged(out, replace) as folder:
        with (ParquetRows if layout == "parquet" else ImageFolderRows)(folder, schema) as writer:
            for part, result in evaluated:
                n = 0
                for row, picture in rows(session, part, result, counterexamples):
                    writer.add(row, picture)
                    n += 1
                counts.append({"model": part.label, "dataset": part.dataset, "condition": part.condition,
                               "memes": int(len(result.memes.y_true)), "rows": n,
                               "flipped": int(outcomes(result)["flipped"].sum())})
        files = writer.files
        if not any(c["rows"] for c in counts):
            raise ExportError(f"no meme flipped under the {len(parts)} chosen conditions of {path}: no "
                              f"counterexample to export, nothing written")
        info = provenance(report, parts, counts, layout, counterexamples, files + ["README.md", "export.json"],
                          classes, multilabel)
        write_texts(folder, {"README.md": card(info), "export.json": json.dumps(info, indent=2, allow_nan=True) + "\n"})
    return info


def export_report(path: Path, out: Path, *, conditions=None, models=None, counterexamples: bool = False,
                  layout: str = "parquet", device: str | None = None, checkpoints=None, cache_dir: Path | None = None,
                  allow_outside_paths: bool = False) -> dict:
    """`memerobust export`: the report read and checked, the output folder checked and the conditions chosen
    before any detector loads; then its run evaluated again and exported (`export`)."""
    from ..track.baseline import read_report

    require_datasets()
    check_out(out)
    report = read_report(Path(path))
    check_report(report, path)
    parts = select(report, conditions, models, path)
    session = session_for(report, parts, device=device, checkpoints=checkpoints, cache_dir=cache_dir,
                          allow_outside_paths=allow_outside_paths)
    try:
        return export(session, report, out, conditions=conditions, models=models, counterexamples=counterexamples,
                      layout=layout, path=path)
    finally:
        session.close()


def export_after_run(session, report: dict, out: Path, counterexamples: bool = False) -> str:
    """--memerobust-export: the run's own perturbed memes, from its session (nothing evaluated again); the line
    that says what was written, or why nothing was."""
    try:
        info = export(session, report, out, counterexamples=counterexamples, path="this run's report")
    except MemeRobustError as exc:
        return f"memerobust: no export written to {out}: {exc}"
    return f"memerobust: {summary_line(info, out)}"


def export_suite_after_run(session, report: dict, suite: str, spec: dict) -> str:
    """A suite's [export] at the end of the run: its own conditions' perturbed memes (of every model that ran it),
    from the run's session, replacing the suite's earlier export; the line that says what was written or why not."""
    out = Path(spec["out"])
    conditions = list(dict.fromkeys(row["condition"] for group in report.get("groups", [])
                                    if group.get("suite") == suite for row in group["results"]
                                    if row["kind"] not in ("clean", "prompt") and not row.get("defence")))
    try:
        info = export(session, report, out, conditions=conditions, counterexamples=spec["counterexamples"],
                      layout=spec["format"], path=f"suite {suite!r} of this run's report", replace=True)
    except MemeRobustError as exc:
        return f"memerobust: suite {suite}: no export written to {out}: {exc}"
    return f"memerobust: suite {suite}: {summary_line(info, out)}"
