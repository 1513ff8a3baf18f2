"""The analyses that predate the registry (analysis_registry.py), registered with the report keys and renderers
their readers know: modality reliance, prompt invariance and evasion budgets (asked by the shipped suites), the
transfer matrices and the OCR view (made when the report is built); and the fuzzers of the shipped Python suites.

Each asks a detector (through an engine where it can), or reads the run's results, and passes what came back
(predictions, verdicts, budgets, readings) to the statistics of judge/ (reliance.py, prompt_invariance.py,
budgets.py, ocr_view.py, transfer.py), which never see a detector. The functions of a session (`reliance`,
`prompt_invariance`, `budgets`) compute once per run and keep what they found on the session, for the report.
"""
from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Mapping, Sequence

import numpy as np

from ..data.digests import input_digest
from ..data.ocr import read_texts
from ..determinism import fixed_threads
from ..judge.budgets import budget_summary, worst
from ..judge.ocr_view import ocr_view_rows
from ..judge.prompt_invariance import confident_memes, prompt_invariance_figures
from ..judge.reliance import confounder_pairs, confounder_scores, swap_partners, swap_reliance
from ..judge.transfer import TransferCell, transfer_cell, transfer_from_results
from ..perturb.budget_edits import FAMILIES, get_family, minimal_budgets
from ..perturb.conditions import Condition
from ..perturb.prompts import prompt_variants, supports_prompts
from .analysis_registry import OF_THE_RUN, PER_GROUP, Analysis, analysed, register

if TYPE_CHECKING:
    from ..judge.caption_fuzz import FlipCheck
    from ..perturb.fuzz import Edit


# --- modality reliance ----------------------------------------------------------------------------------------


def evaluate_reliance(engine, labels: np.ndarray, seed: int = 0, text_only=None, image_only=None) -> dict:
    """Modality swap, confounder pairs and per-meme unimodal predictions for one detector (`engine`); `text_only`
    and `image_only` are the engines of its channel-ablation views, when it has them."""
    from ..errors import DataError

    memes = engine.dataset.memes
    pictureless = next((m.id for m in memes if not m.has_picture), None)
    if pictureless is not None:
        raise DataError(f"a modality swap pairs each meme's picture with another's caption: meme {pictureless!r} has "
                        f"no picture (caption-only data)")
    own, partners = np.arange(len(memes)), swap_partners(len(memes), seed)
    pred_clean = engine.predict(Condition()).argmax(1)
    # both directions: each meme's picture with its partner's caption, and its caption with its partner's picture
    image_from, text_from = np.concatenate([own, partners]), np.concatenate([partners, own])
    pred_swapped = engine.predict_pairs(image_from, text_from).argmax(1)
    labels = np.asarray(labels)
    pairs = confounder_pairs([m.text for m in memes], [input_digest(m.image) for m in memes], labels)
    per_meme = {"id": [m.id for m in memes], "label": labels.tolist(), "multimodal": pred_clean.tolist()}
    for name, view in (("text_only", text_only), ("image_only", image_only)):
        if view is not None:
            per_meme[name] = view.predict(Condition()).argmax(1).tolist()
    return {"n": len(memes), "swap": swap_reliance(pred_clean, pred_swapped, text_from, image_from).as_dict(),
            "confounders": {kind: confounder_scores(p, labels, pred_clean) for kind, p in pairs.items()},
            "per_meme": per_meme}


def reliance(session, model: str, data: str | None = None) -> dict:
    """Modality swap, confounder pairs and per-meme unimodal predictions of `model` (evaluate_reliance), computed
    once per run and kept on the session for the report."""
    return analysed(session, "reliance", model, data)


def _run_reliance(session, model: str, spec: str, task: str) -> dict:
    from ..errors import ConfigError

    views = {}
    for mode in ("text", "image"):
        try:
            views[mode] = session.engine(f"{model}:{mode}", spec, task)
        except ConfigError:  # a detector without channel-ablation modes
            views[mode] = None
    engine = session.engine(model, spec, task)
    return evaluate_reliance(engine, session.dataset(spec).labelled(task).labels(task), session.options.seed,
                             views["text"], views["image"])


# --- prompt invariance ------------------------------------------------------------------------------------------


@fixed_threads()  # every variant's verdicts at every thread count, as the engine's steps (determinism.py)
def prompted_verdicts(detector, pictures, captions, batch_size: int) -> tuple[np.ndarray, np.ndarray]:
    """(predicted class, or -1 where declined; probabilities) of every meme, in batches."""
    probas, declined = [], []
    for start in range(0, len(captions), batch_size):
        p, d = detector.predict_with_abstentions(pictures[start : start + batch_size],
                                                 captions[start : start + batch_size])
        probas.append(np.asarray(p))
        declined.append(np.asarray(d, bool))
    proba, declined = np.concatenate(probas), np.concatenate(declined)
    return np.where(declined, -1, proba.argmax(axis=1)), proba


def evaluate_prompt_invariance(detector, pictures, captions, labels, ids, batch_size: int = 16,
                               n_resamples: int = 1000, confidence: float = 0.95, seed: int = 0) -> dict:
    """The prompt-invariance figures of `detector` on clean memes (judge/prompt_invariance.py): its verdicts under
    its own prompt and under every variant of it (perturb/prompts.py)."""
    base, _ = prompted_verdicts(detector, pictures, captions, batch_size)
    variants = [(name, variant, prompted_verdicts(detector.with_prompt(variant), pictures, captions, batch_size)[0])
                for name, variant in prompt_variants(detector.prompt).items()]
    return prompt_invariance_figures(base, variants, labels, ids, captions, n_resamples, confidence, seed)


def _prompted_inputs(session, model: str, spec: str):
    """(detector, engine, labels) of a prompted `model` on the clean memes of the data spec `spec`; None for a
    detector without a prompt."""
    detector = session.detector(model)
    if not supports_prompts(detector):
        return None
    task = session.task(model)
    return detector, session.engine(model, spec, task), session.dataset(spec).labelled(task).labels(task)


def prompt_invariance(session, model: str, data: str | None = None) -> dict | None:
    """How `model`'s verdicts on the clean memes change with the wording of its prompt (evaluate_prompt_invariance),
    computed once per run and kept on the session for the report; None for a detector without a prompt."""
    if not supports_prompts(session.detector(model)):
        return None
    return analysed(session, "prompt_invariance", model, data)


def _run_prompt_invariance(session, model: str, spec: str, task: str) -> dict:
    detector, engine, labels = _prompted_inputs(session, model, spec)
    stats = session.options.judging.stats
    return evaluate_prompt_invariance(detector, engine.inputs("image", None, None), engine.inputs("text", None, None),
                                      labels, engine.ids, session.options.compute.batch_size, stats.n_resamples,
                                      stats.confidence, stats.seed)


class PromptFuzzer:
    """The memes a prompted detector classifies correctly and confidently with its own prompt (at most
    judge.prompt_invariance.MAX_FUZZED_MEMES), and which of them a reworded instruction flips."""

    def __init__(self, detector, pictures, captions, labels, ids, confidence: float, batch_size: int = 16):
        self.detector, self.batch_size = detector, batch_size
        verdicts, proba = prompted_verdicts(detector, pictures, captions, batch_size)
        chosen = confident_memes(verdicts, proba, labels, confidence)
        self.confident = chosen
        self.pictures, self.captions = [pictures[i] for i in chosen], [captions[i] for i in chosen]
        self.ids, self.verdicts = [ids[i] for i in chosen], verdicts[chosen]

    def flipped(self, instruction: str) -> list[str]:
        """The ids of the confident memes whose verdict `instruction` changes (a class, or declining)."""
        variant = self.detector.with_prompt(replace(self.detector.prompt, instruction=instruction))
        verdicts, _ = prompted_verdicts(variant, self.pictures, self.captions, self.batch_size)
        return [meme for meme, before, now in zip(self.ids, self.verdicts, verdicts) if before != now]


def prompt_fuzzer(session, model: str, data: str | None = None) -> PromptFuzzer | None:
    """The PromptFuzzer of `model` on the clean memes of `data`, at the run's --memerobust-fuzz-confidence and batch
    size; None for a detector without a prompt."""
    prompted = _prompted_inputs(session, model, session.data_spec(data))
    if prompted is None:
        return None
    detector, engine, labels = prompted
    options = session.options
    return PromptFuzzer(detector, engine.inputs("image", None, None), engine.inputs("text", None, None), labels,
                        engine.ids, options.probes.fuzz_confidence, options.compute.batch_size)


# --- evasion budgets --------------------------------------------------------------------------------------------


def evaluate_budgets(engine, labels, families: Sequence[str] | None = None, *, seed: int = 0,
                     n_resamples: int = 1000, confidence: float = 0.95, threshold: float = 0.5,
                     worst_k: int = 5) -> list[dict]:
    """Per family, how little an evader must change to get a harmful meme (label 1) past the detector: the searched
    memes are the harmful ones it flags when clean (without labels, every meme it flags when clean). `engine`
    (engine.Engine) holds the detector and the memes; families default to every one whose modality the detector
    reads. Each entry is `judge.budgets.budget_summary` plus the `worst` memes (smallest budgets) with their ids and
    evading captions."""
    detector = engine.detector
    reads = getattr(detector, "modalities", ("image", "text"))
    names = list(families) if families else [n for n in FAMILIES if FAMILIES[n].modality in reads]
    for name in names:
        fam = get_family(name)
        if fam.modality not in reads:
            raise ValueError(f"family {name!r} edits the {fam.modality}, which this detector does not read "
                             f"(it reads: {', '.join(reads)})")
    labels = engine.held_against(labels)  # no labels: what it flags when clean is what an evader must get past
    harmful = np.flatnonzero(labels == 1)
    captions = [engine.inputs("text", None, None)[i] for i in harmful]
    pictures = ([engine.inputs("image", None, None)[i] for i in harmful] if "image" in reads else None)

    def predict(texts, images):
        return engine.probabilities(images if images is not None else [None] * len(texts), list(texts))[:, 1]

    entries = []
    for name in names:
        result = minimal_budgets(predict, captions, pictures, np.ones(len(harmful), dtype=int), name, key=seed,
                                 threshold=threshold)
        summary = budget_summary(result, n_resamples=n_resamples, confidence=confidence, seed=seed)
        summary["worst"] = [{**w, "id": engine.ids[int(harmful[w["index"]])],
                             "caption": captions[w["index"]]} for w in worst(result, worst_k)]
        entries.append(summary)
    return entries


def budgets(session, model: str, families, data: str | None = None, task: str | None = None,
            captions: str | None = None) -> list[dict]:
    """The evasion budgets of `model` for these edit families (evaluate_budgets), each family searched once per run
    and kept on the session for the report."""
    spec = session.data_spec(data, captions)
    task = session.task(model, task)
    known = session.analyses.records.setdefault(("budgets", model, spec), {})
    missing = [f for f in families if f not in known]
    if missing:
        known.update(_run_budgets(session, model, spec, task, missing))
    return [known[f] for f in families]


def _run_budgets(session, model: str, spec: str, task: str, families: Sequence[str] = ()) -> dict:
    """The budgets' record: family -> entry (evaluate_budgets), for `families` (default: every one it reads)."""
    stats, labels = session.options.judging.stats, session.scored_dataset(model, spec, task).labels(task)
    entries = evaluate_budgets(session.engine(model, spec, task), labels, families, seed=session.options.seed,
                               n_resamples=stats.n_resamples, confidence=stats.confidence)
    return {entry["family"]: entry for entry in entries}


# --- the OCR view -----------------------------------------------------------------------------------------------


def ocr_view(session, model: str, spec: str) -> list[dict]:
    """The OCR-robustness view of one model on one dataset (judge/ocr_view.py): its image conditions' pictures read
    by the OCR backend on the first `options.probes.ocr_view` memes that have a picture; [] when off. Readings are
    kept on the session (`ocr_readings`), by picture condition."""
    from ..data.reading import CAPTIONS_BY_OCR
    from ..perturb import get as get_perturbation

    if not session.options.probes.ocr_view:
        return []
    engine = session.engine(model, spec)
    memes = engine.dataset.memes
    indices = [i for i, m in enumerate(memes) if m.has_picture]
    indices = indices[: session.options.probes.ocr_view]
    results = [r for (m, s, _), r in session.outcomes.results.items() if m == model and s == spec
               and r.condition.kind == "image"]
    if not indices or not results:
        return []
    reader = session.ocr(required=True)

    def read(condition: Condition) -> list[str]:
        """The pictures of `condition` read once: an attack's are those crafted on the detector it attacked (this
        model, or the source of a transferred attack), so they are kept apart by both."""
        attack = condition.image is not None and get_perturbation(condition.image).needs_model
        source = condition.source if attack and condition.source != model else None
        key = ("ocr-view", spec.removesuffix(CAPTIONS_BY_OCR), condition.image, condition.image_severity,
               model if attack else None, source)
        if key not in session.analyses.ocr_readings:
            crafted = engine if source is None else session.engine(model, spec, source=source)
            session.analyses.ocr_readings[key] = read_texts(reader, [crafted.picture(condition, i) for i in indices])
        return session.analyses.ocr_readings[key]

    readings = {r.condition.id: read(r.condition) for r in results}
    stats = session.options.judging.stats
    return ocr_view_rows(readings, read(Condition()), [r.as_dict() for r in results],
                         stats.n_resamples, stats.confidence, stats.seed)


def ocr_view_of_group(session, group: dict) -> dict | None:
    """A report group's part of the OCR view: the rows of its own conditions (of its model and dataset's view, read
    in the order the run's results are), the backend that read them and on how many memes; None without a row."""
    conditions = {r["condition"] for r in group["results"]}
    rows = [row for row in ocr_view(session, group["model"], group["dataset"]) if row["condition"] in conditions]
    if not rows:
        return None
    return {"backend": session.ocr(required=True).name, "memes": session.options.probes.ocr_view, "rows": rows}


# --- transfer ---------------------------------------------------------------------------------------------------


def transfer_of_the_run(session) -> list[dict]:
    """The run's transfer matrices (judge/transfer.py): one per dataset and attack that some model faced crafted on
    another."""
    return transfer_from_results(session.outcomes.results.values())


def transfer_cells(detectors: Mapping[str, object], dataset, labels, condition, training=None,
                   seed: int = 0) -> list[TransferCell]:
    """Every (source, target) cell of `condition`'s attack: crafted on the source (its gradients or queries, its
    fitted patterns), evaluated by the target on the same memes (the engine runs both)."""
    from ..engine import AttackState, Engine

    clean = {name: Engine(det, dataset, seed, attacks=AttackState(labels)).predict(Condition()) for name, det in
             detectors.items()}
    cells = []
    for source, crafted_on in detectors.items():
        for target, detector in detectors.items():
            engine = Engine(detector, dataset, seed, attacks=AttackState(
                labels, training, source=None if source == target else crafted_on))
            cells.append(transfer_cell(source, target, condition.id, labels, clean[target],
                                       engine.predict(condition)))
    return cells


# --- caption fuzzing --------------------------------------------------------------------------------------------


class CaptionFuzzer:
    """A detector and dataset prepared for fuzzing (the check behind suites/test_caption_fuzz.py; users import it
    from `pytest_memerobust.fuzz`): pictures encoded once (split detectors), the confidently and correctly
    classified memes found (unlabelled memes: the confidently classified), each check one small batch."""

    @fixed_threads()  # the same confident memes and flips at every thread count (determinism.py)
    def __init__(self, detector, dataset, task: str, threshold: float = 0.9):
        self.detector, self.dataset = detector, dataset
        memes = dataset.memes
        reads_images = "image" in getattr(detector, "modalities", ("image", "text"))
        self.split = callable(getattr(detector, "head", None))
        if self.split:
            self.image_features = (detector.encode_images([m.image for m in memes]) if reads_images
                                   else np.zeros((len(memes), 0), dtype=np.float32))
            proba = detector.head(self.image_features, detector.encode_texts([m.text for m in memes]))
        else:
            proba = detector.predict_proba([m.image for m in memes], [m.text for m in memes])
        keep = proba.max(axis=1) >= threshold
        if not dataset.unlabelled:  # unlabelled memes: every confident prediction, right or not, is to keep
            keep &= proba.argmax(axis=1) == dataset.labels(task)
        self.confident = [int(i) for i in np.flatnonzero(keep)]

    @fixed_threads()
    def check(self, index: int, edits: Sequence[Edit]) -> FlipCheck:
        from ..judge.caption_fuzz import FlipCheck
        from ..perturb.fuzz import apply_edits

        meme = self.dataset.memes[index]
        edited = apply_edits(meme.text, edits)
        if self.split:
            proba = self.detector.head(self.image_features[[index, index]],
                                       self.detector.encode_texts([meme.text, edited]))
        else:
            proba = self.detector.predict_proba([meme.image, meme.image], [meme.text, edited])
        return FlipCheck(meme.text, edited, list(edits), proba[0], proba[1], self.detector.classes)


# --- the registered built-ins (report keys and renderers of their own, from before the registry) ----------------
# (the report document's keys follow the order they are registered in)


register(Analysis("reliance", _run_reliance, report_key="reliance",
                  entry=lambda model, label, spec, record: {"model": model, "dataset": spec, **record}))
register(Analysis("prompt_invariance", _run_prompt_invariance, report_key="prompt_invariance",
                  entry=lambda model, label, spec, record: {"model": model, "dataset": spec, **record}))
register(Analysis("budgets", _run_budgets, merge=lambda kept, new: {**kept, **new}, report_key="budgets",
                  entry=lambda model, label, spec, record: {"model": model, "label": label, "dataset": spec,
                                                            "entries": list(record.values())}))
register(Analysis("transfer", transfer_of_the_run, report_key="transfer", scope=OF_THE_RUN))
register(Analysis("ocr_view", ocr_view_of_group, report_key="ocr_view", scope=PER_GROUP))
