"""What a run tells its user besides the tables, worked out from the session's parts: its notes (what it decided,
what OCR and the typographic edits met, which fonts drew re-rendered captions), what its hosted models sent or will
send at most, and what its stores of encoded inputs did. The session keeps the state (session_parts.RunNotes, the
detectors, the stores); these read it."""
from __future__ import annotations

import dataclasses
from pathlib import Path

from ..data.reading import CAPTIONS_BY_OCR
from ..engine.features import CacheStats
from ..errors import ConfigError, ModeNotRead
from ..perturb import get as get_perturbation


def run_notes(session, hosted: bool = True) -> list[str]:
    """The notes, and one line per typographic edit that met pictures whose text boxes are unknown (it then
    used the band at the bottom of the picture, where captions usually sit); with `hosted`, one per hosted
    model, its requests summed over every process of the run."""
    lines = list(session.notes.lines)
    if callable(getattr(session.executor, "note", None)) and session.executor.note():
        lines.append(session.executor.note())
    if hosted:
        lines += hosted_notes(session)
    for spec in dict.fromkeys(r.dataset for r in session.outcomes.results.values()):  # here: any executor fits
        for fit in session.fits_of(spec):
            note = fit.note(spec.removesuffix(CAPTIONS_BY_OCR))
            if note not in lines:
                lines.append(note)
    if any(r.condition.image and get_perturbation(r.condition.image).traits.caption_source
           for r in session.outcomes.results.values()):  # their pixels depend on the fonts this machine has
        from ..perturb.typography import caption_font_name

        lines.append(f"re-rendered captions: {caption_font_name()}")
    for (model, spec, task, *_defence), engine in session.loaded.engines.items():
        unread = engine.unread() if engine.abstentions else ()  # memes it predicted on only
        if any(unread):
            ids = [i for i, blank in zip(engine.ids, unread) if blank]
            line = (f"{spec.removesuffix(CAPTIONS_BY_OCR)}: OCR read nothing off the pictures of {len(ids)} of "
                    f"{len(engine.ids)} memes ({', '.join(ids[:5])}{', ...' if len(ids) > 5 else ''}): with no "
                    f"caption to judge, each is an abstention under every condition of a detector that reads "
                    f"captions, left out of its metrics (its abstention rate)")
            if line not in lines:
                lines.append(line)
        for edit, pictures in sorted(engine.boxless.items()):
            hint = "" if session.ocr() else " (--memerobust-ocr=rapidocr finds them)"
            line = (f"{spec.removesuffix(CAPTIONS_BY_OCR)}: {edit} met {len(pictures)} of {len(engine.ids)} "
                    f"pictures whose text boxes are unknown{hint}, and used the band at the bottom instead")
            if line not in lines:
                lines.append(line)
    return lines

def hosted_usage(session) -> list[dict]:
    """What this process's hosted models sent (their shards on pool workers included), one record each."""
    return [d.usage_record() for d in session.loaded.detectors.values() if callable(getattr(d, "usage_record", None))]

def hosted_notes(session) -> list[str]:
    """One note per hosted model: requests, cached answers, tokens and cost, over this process and, on a
    pytest-xdist controller, every worker."""
    from ..detectors.hosted import sum_usage, usage_note

    return [usage_note(record) for record in sum_usage(hosted_usage(session) + session.from_workers.hosted)]

def hosted_requests(session) -> list[str]:
    """Before the first request: per hosted model of the run, a note of the requests its planned cases will
    send at most (detectors/hosted_cost.py: attacks' queries, samples, fits); a ConfigError naming the largest
    cases where that is more than its card's `max_requests`."""
    from ..detectors.hosted_cost import estimate

    by_model: dict[str, list] = {}
    texts: dict[tuple[str, str], list[str]] = {}  # (spec, task) -> the captions of its scored memes
    for nodeid, model, data, task, _group, captions, condition in session.planned.cases:
        try:
            detector = session.detector(model)
        except ModeNotRead:
            continue
        if not callable(getattr(detector, "usage_record", None)):
            continue
        spec, task = session.data_spec(data, captions), session.task(model, task)
        if (spec, task) not in texts:
            texts[spec, task] = [m.text or "" for m in session.evaluated_as_stored(spec).labelled(task).memes]
        sampling = getattr(detector, "sampling", None)
        by_model.setdefault(model, []).append((nodeid, model, spec, condition, texts[spec, task],
                                               sampling.k if sampling is not None else 1))
    lines = []
    for model, cases in by_model.items():
        rows, total = estimate(cases)
        detector, largest = session.detector(model), sorted(rows, key=lambda row: -row[1])[:3]
        named = ", ".join(f"{nodeid} ({n:,})" for nodeid, n in largest)
        if detector.max_requests is not None and total > detector.max_requests:
            raise ConfigError(f"model card {detector.card.name!r}: the {len(rows)} selected cases would send up to "
                              f"{total:,} requests to {detector.usage_record()['endpoint']}, more than its "
                              f"max_requests = {int(detector.max_requests):,}; the largest: {named}. Select "
                              f"fewer cases (-k) or memes (--memerobust-limit), or raise max_requests")
        lines.append(f"{detector.card.name}: its {len(rows)} cases send at most {total:,} requests to "
                     f"{detector.usage_record()['endpoint']} (fewer where the response cache has answers); the "
                     f"largest: {named}")
    return lines


def cache_stats(session) -> dict:
    """Inputs encoded, served from memory and read from disk, per modality, over every model's store, the stores
    of the worker processes that evaluated shards (--memerobust-workers, Ray actors) and, on a pytest-xdist
    controller, every worker's."""
    total = CacheStats()
    for counts in [store.stats for store in session.loaded.feature_stores.values()] + session.from_workers.cache_stats + [
            getattr(session.executor, "worker_stats", CacheStats())]:
        total.add(counts)
    return dataclasses.asdict(total)

def cache_summary(session) -> str:
    t = cache_stats(session)
    cache = session.options.compute.cache
    where = f"{Path(cache.folder) / 'features'}" if cache.features and cache.folder else "memory only"
    line = (f"encoded {t['encoded']['image']} pictures and {t['encoded']['text']} captions; reused "
            f"{sum(t['memory_hits'].values())} from this run and read {sum(t['disk_hits'].values())} from the "
            f"feature cache ({where})")
    if t["dropped"]:
        line += (f"; {t['dropped']} inputs' features left memory to stay within --memerobust-feature-memory="
                 f"{session.options.compute.cache.memory_mib}")
    return line + (f"; {t['rejected_files']} damaged cache files recomputed" if t["rejected_files"] else "")
