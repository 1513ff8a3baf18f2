"""The report document of a run: every number, the verdict and the cases' records, the worst examples with their
pictures, read from the session once the run has judged it. report/ renders this document; this module gathers it
(it asks the session for detectors and engines, and the analysis registry for the analyses' parts, which report/
never does)."""
from __future__ import annotations

import platform
from importlib.metadata import PackageNotFoundError, version

import numpy as np

from ..data.ocr import SCENE_TEXT
from ..judge.metrics import true_probability
from ..judge.summaries import defence_summary, grid_summary
from ..report import REPORT_FORMAT
from .analysis_registry import empty_report_entries, place_analyses

_VERSIONED = ("pytest-memerobust", "numpy", "torch", "pillow", "pytest", "tabulate", "hypothesis",
              "imagecorruptions", "open_clip_torch", "transformers", "textattack")


def versions() -> dict[str, str | None]:
    out = {"python": platform.python_version(), "platform": platform.platform()}
    for name in _VERSIONED:
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = None
    return out


THUMBNAIL = 224  # px: the worst examples' pictures, large enough to read a meme's text


def _thumbnail(image, side: int = THUMBNAIL) -> str:
    import base64
    import io

    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(image).resize((side, side), Image.BILINEAR).save(buffer, format="PNG")
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def worst_examples(session, model: str, spec: str, n: int = 6, conditions=None) -> list[dict]:
    """The `n` memes whose probability of the true class fell the most, each under the condition that hurt it most
    (`also`: the other conditions among the candidates that hurt it, worst first), with what a person needs to see
    them: a thumbnail of the picture, the caption before and after, and both probabilities. `conditions`: only
    these condition ids (one suite's). `caption_source`: where the caption before came from, `dataset` or the OCR
    backend that read it off the clean picture (the meme had none, or the run reads every caption by OCR);
    `perturbed_caption_source`: the OCR backend, where the caption after was read off the perturbed picture."""
    from ..perturb.conditions import Condition

    candidates = []
    for (m, s, cid), result in session.outcomes.results.items():
        if m != model or s != spec or result.condition.kind == "clean" or (conditions is not None
                                                                          and cid not in conditions):
            continue
        reference = result.reference  # the true labels (unlabelled memes: the clean predictions)
        answers = result.answers
        drop = true_probability(answers.proba_clean, reference) - true_probability(answers.proba, reference)
        declined = [a for a in (answers.abstained_clean, answers.abstained) if a is not None]
        if declined:  # a meme the detector declined is scored nowhere: its label words' share says nothing
            drop = np.where(np.logical_or.reduce(declined), -np.inf, drop)
        candidates += [(float(drop[i]), int(i), result) for i in np.argsort(-drop)[:n] if drop[i] > 0]
    out = []
    if not candidates:
        return out
    engine = session.engine(model, spec, candidates[0][2].task)  # the task scored (a suite's, not the card's)
    dataset = engine.dataset  # the memes labelled for the model's task, in the results' order
    chosen: dict[int, tuple] = {}  # one entry per meme, under the condition that hurt it most; the others listed
    also: dict[int, list[str]] = {}
    for drop, i, result in sorted(candidates, key=lambda t: -t[0]):
        if i in chosen:
            also[i].append(result.condition.id)
        elif len(chosen) < n:
            chosen[i], also[i] = (drop, i, result), []
    for drop, i, result in chosen.values():
        meme, c = dataset.memes[i], result.condition
        engine = session.engine(model, spec, result.task, c.defence, c.source)  # the one that computed it
        thumbnail = _thumbnail(engine.picture(c, i)) if meme.has_picture else None  # (an attack's first: a joint
        caption = engine.caption(c, i)  # attack's caption is kept with its picture)
        reader = getattr(engine.ocr, "name", "ocr") if engine.ocr is not None else None  # every caption by OCR
        source = reader or meme.meta.get("caption_source") or "dataset"
        classes, truth = session.detector(model).classes, np.asarray(result.reference[i])
        label = (classes[int(truth)] if truth.ndim == 0
                 else ", ".join(name for name, on in zip(classes, truth) if on) or "none")
        p_clean, p_perturbed = (float(true_probability(p[i : i + 1], result.reference[i : i + 1])[0])
                                for p in (result.answers.proba_clean, result.answers.proba))
        out.append({"id": meme.id, "condition": c.id,
                    "caption": engine.caption(Condition(), i) if reader else meme.text, "perturbed_caption": caption,
                    "caption_source": source, **({"perturbed_caption_source": reader} if reader else {}),
                    "label": label, **({} if result.labelled else {"label_basis": "clean prediction"}),
                    **({"scene_text": meme.meta[SCENE_TEXT]} if meme.meta.get(SCENE_TEXT) else {}),
                    "p_true_clean": p_clean, "p_true_perturbed": p_perturbed, "also": also[i],
                    "thumbnail": thumbnail})
    return out


def suite_groups(session, model: str, spec: str, rows: list[dict]) -> list[tuple[str | None, list[dict]]]:
    """The results of one (model, dataset) split by the suite that asked for them, in the order the suites ran;
    a condition two suites share is in both. A suite that ran only its clean case has its group too, without rows
    (the group's clean row is that case's), so the reports give that case its suite's verdict. Results no suite
    declared (a hand-written test's) form one more group."""
    suites = [(suite, conditions) for (m, s, suite), (_, _, conditions) in session.planned.grids.items()
              if m == model and s == spec and suite is not None]
    out, claimed = [], set()
    for suite, conditions in suites:
        wanted = set(conditions)
        mine = [r for r in rows if r["condition"] in wanted]
        claimed |= {r["condition"] for r in mine}
        out.append((suite, mine))
    rest = [r for r in rows if r["condition"] not in claimed]
    if rest or not out:
        out.append((None, rest))
    return out


# how much of an attack's flip rate a defence must take away to count as neutralising it, and at most to count as


def build_report(session) -> dict:
    """Everything needed to trust and reproduce the numbers: results, seed, versions, cards, data fingerprints.
    One group per (model, dataset, suite): each suite has its own tables, grid and heat map."""
    results = [r.as_dict() for r in session.outcomes.results.values()]
    groups = []  # a run with only reliance tests has no condition results
    for model, spec in dict.fromkeys((r["model"], r["dataset"]) for r in results):
        rows = [r for r in results if r["model"] == model and r["dataset"] == spec]
        defended = [r for r in rows if r.get("defence")]  # the defence table reads them, beside the undefended
        rows = [r for r in rows if not r.get("defence")]
        clean = next(r for r in rows if r["kind"] == "clean")
        for suite, mine in suite_groups(session, model, spec, [r for r in rows if r["kind"] != "clean"]):
            combined = [r for r in mine if r["kind"] == "combined"]
            declared_text, declared_image, _ = session.planned.grids.get((model, spec, suite), ((), (), ()))
            cells = {r["condition"] for r in combined}
            grid_text = [t for t in dict.fromkeys([*declared_text, *(c.split("+")[0] for c in cells)])
                         if any(c.startswith(t + "+") for c in cells)]
            grid_image = [i for i in dict.fromkeys([*declared_image, *(c.split("+")[1] for c in cells)])
                          if any(c.endswith("+" + i) for c in cells)]
            group = {"model": model, "label": session.model_label(model), "dataset": spec, "suite": suite,
                     "task": clean.get("task") or session.task(model), "clean": clean, "results": mine,
                     "grid_text": grid_text, "grid_image": grid_image}
            if combined:
                group["grid_summary"] = grid_summary(clean["metrics"], combined)
            declared = session.planned.grids.get((model, spec, suite), ((), (), None))[2]
            defences = defence_summary(clean, mine, [r for r in defended if declared is None
                                                     or r["condition"] in declared])
            if defences:
                group["defences"] = defences
            ids = {r["condition"] for r in mine}
            group["worst_examples"] = worst_examples(session, model, spec, conditions=ids)
            groups.append(group)
    models = {}
    for model in dict.fromkeys(r["model"] for r in results):
        detector = session.detector(model)
        models[model] = {"card": detector.card.as_dict(), "checkpoint": str(detector.checkpoint),
                         "checkpoint_sha256": detector.fingerprint, **_prompt_of(detector)}
        if hasattr(detector, "configuration"):  # what ran, where the checkpoint's metadata overrides the card
            models[model]["configuration"] = detector.configuration()
        adaptation = getattr(detector, "adaptation", None)
        if adaptation is not None:  # how it was trained: `adaptation lora (r=8), 73,728 trainable parameters`
            models[model]["adaptation"] = adaptation.describe()
    datasets = {}
    for spec in dict.fromkeys(r["dataset"] for r in results):
        ds = session.dataset(spec)
        datasets[spec] = {"name": ds.name, "n": len(ds), "fingerprint": session.fingerprint(spec)}
        fits = session.fit_memes_of(spec)
        if fits:  # what the universal attacks on these memes were fitted on: never one of them
            datasets[spec]["fit_memes"] = fits
    return place_analyses(session, {**_run_header(session), "models": models, "datasets": datasets,
                                    "groups": groups})


def _run_header(session) -> dict:
    """What every report starts with: the tool, format and seed, the run's verdict and every case's record
    (judge.verdict: what the renderers show first), the options and the versions."""
    o = session.options
    stats = o.judging.stats
    return {
        "tool": "pytest-memerobust", "format": REPORT_FORMAT, "seed": o.seed,
        "verdict": session.outcomes.verdict, "cases": list(session.outcomes.case_records),
        "options": {"data": o.data.spec, "device": o.compute.device, "batch_size": o.compute.batch_size,
                    "limit": o.data.limit, "sample": o.data.sample, "task": o.data.task,
                    "n_resamples": stats.n_resamples, "confidence": stats.confidence, "robustness_scale": stats.scale,
                    "captions": o.data.captions, "ocr": o.data.ocr, "ocr_view": o.probes.ocr_view},
        "versions": versions(),
    }


def verdict_report(session, partial: str) -> dict:
    """The verdict and the cases' records without any numbers: what an interrupted run, or one whose full report
    could not be built, leaves at the report's path, so that an earlier run's report there is never read as this
    run's, and a partial one never passes for the whole run. `partial` says why the numbers are missing."""
    return {**_run_header(session), "partial": partial, "models": {}, "datasets": {}, "groups": [],
            **empty_report_entries()}


def _prompt_of(detector) -> dict:
    """A prompted vision-language model's question: the instruction, system message and label words it was asked
    with, and below what mass on those words it declines; nothing for other detectors."""
    from ..detectors.vlm import Prompt

    prompt = getattr(detector, "prompt", None)
    if not isinstance(prompt, Prompt):
        return {}
    return {"prompt": {"instruction": prompt.instruction, "system": prompt.system,
                       "label_words": list(prompt.label_words), "abstain_below": getattr(detector, "abstain_below",
                                                                                          None)}}
