"""The run's side of the gate: a session's results saved as a baseline, and a session's cases compared with the
baseline it was given (`--memerobust-baseline`). The file format is track/baseline.py's, the statistics and the
decision judge/gate.py's; here the session's cases become the paired cells they judge.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

from ..atomic import atomic_write_text
from ..errors import ConfigError
from ..judge.gate import (DEFAULT_CHECKS, DEFAULT_CONTROL, PairedCell, comparison_mode, compare_condition,
                          judge_family)
from ..track.baseline import (FORMAT, VERSIONED, baseline_cell, baseline_condition_names, baseline_entry, card_digest,
                              condition_name, flip_ledger_of, refuse_mismatch)


def baseline_data(session) -> dict:
    """Everything a later run needs to compare against this one, with the per-meme probabilities, and per model and
    dataset the memes' ids and captions in the results' order (`memes`), so a flip ledger can name the memes; `run`
    holds the facts a gated run must share (limit, task per model and dataset, model cards)."""
    report = session.report()
    results: dict = {}
    memes: dict = {}
    tasks: dict = {}
    for (model, spec, condition), result in session.results.items():
        entry = results.setdefault(model, {}).setdefault(spec, {})
        entry[condition] = baseline_cell(result)
        tasks.setdefault(model, {})[spec] = result.task
        if spec not in memes.get(model, {}) and (named := scored_memes(session, spec, result)) is not None:
            memes.setdefault(model, {})[spec] = named
    return {
        "format": FORMAT, "seed": report["seed"],
        "versions": {k: report["versions"].get(k) for k in VERSIONED},
        "datasets": {spec: info["fingerprint"] for spec, info in report["datasets"].items()},
        "models": {name: info["checkpoint_sha256"] for name, info in report["models"].items()},
        "run": {"limit": report.get("options", {}).get("limit"), "tasks": tasks,
                "cards": {name: card_digest(info.get("card", {})) for name, info in report["models"].items()}},
        "results": results,
        "memes": memes,
    }


def scored_memes(session, spec: str, result) -> dict | None:
    """{"ids", "captions"} of the memes `result` scored, in its order (the dataset's memes labelled for its task, as
    the engine reads them); None from a session that cannot name them (one rebuilt from results alone)."""
    if getattr(session, "dataset", None) is None or result.task is None:
        return None
    scored = session.dataset(spec).labelled(result.task).memes
    if len(scored) != len(result.y_true):
        return None
    return {"ids": [m.id for m in scored], "captions": [m.text for m in scored]}


def save_baseline(session, path: Path, write: Callable[[str], object] | None = None) -> dict:
    """Write the baseline and say so through `write` (e.g. `terminal.terminal_line(config)`): a baseline saved
    without a word is easily compared against the wrong file later. Returns what was saved."""
    from ..report.gate_tables import baseline_saved_line, count_conditions

    data = baseline_data(session)
    atomic_write_text(Path(path), json.dumps(data) + "\n")
    if write is not None:
        write(baseline_saved_line(path, data))
    return {"path": Path(path), "conditions": count_conditions(data), "models": list(data["results"]),
            "datasets": list(data["datasets"]), "seed": data["seed"]}


def write_run_ledger(session, directory: Path) -> str:
    """The flip ledger of this run against the baseline it was gated on (`--memerobust-baseline`), written to
    `directory`; the summary line saying what flipped and where it went."""
    from ..report.ledger import write_ledger

    names = (str(session.options.baseline), "this run")
    ledger = flip_ledger_of(session.baseline, baseline_data(session), names=names)
    paths = write_ledger(ledger, directory)
    wrong, right = (sum(c[key] for c in ledger["conditions"]) for key in ("n_newly_wrong", "n_newly_right"))
    return (f"memerobust: flip ledger against {names[0]}: {wrong} memes newly wrong and {right} newly right over "
            f"{len(ledger['conditions'])} conditions; written to {paths[0]} and {paths[1]}")


def regressions(session, model: str, condition, result, data: str | None = None,
                captions: str | None = None) -> list:
    """The gate's comparisons (judge.gate.Comparison) of `result` with the session's baseline, every rule that
    applies to the condition, failing or not; none without a baseline or without this condition in it. The run's
    cases are judged as one family (gate.judge_family), so the first call evaluates every case the baseline
    holds."""
    if session.baseline is None:
        return []
    spec = session.data_spec(data, captions)
    then = baseline_entry(session.baseline, model, spec, condition.id)
    if then is None:
        return []
    key = (session.model_label(model), spec, condition.id)
    family = gate_family(session)
    if key in family:
        return family[key]
    _check_same_memes(model, spec, condition, then, result)  # a condition outside the planned cases
    return compare_condition(baseline_cell(result), then, key, condition.kind, **gate_options(session))


def baseline_key(session, model: str, condition, data: str | None = None, captions: str | None = None) -> str | None:
    """`model on spec: condition` when the session's baseline holds this case (so it is gated), else None; without
    a baseline, None. The run's verdict names the cases it holds not (new) and what it holds that did not run."""
    if session.baseline is None:
        return None
    spec = session.data_spec(data, captions)
    held = baseline_entry(session.baseline, model, spec, condition.id) is not None
    return condition_name(model, spec, condition.id) if held else None


def baseline_conditions(session) -> list[str]:
    """Every `model on spec: condition` the session's baseline holds (none without one)."""
    return baseline_condition_names(session.baseline) if session.baseline is not None else []


def gate_options(session) -> dict:
    """The options of `judge_family` the session's run asked for: rules, error control, mode and resampling."""
    stats = session.options.stats
    return {"checks": session.options.regression_checks or DEFAULT_CHECKS,
            "control": session.options.gate_error or DEFAULT_CONTROL, "mode": comparison_mode(session.gate),
            "confidence": stats.confidence, "n_resamples": stats.n_resamples, "seed": stats.seed,
            "scale": stats.scale}


def _check_same_memes(model, spec, condition, then, result) -> None:
    if then["y"] != result.y_true.tolist():
        raise ConfigError(f"baseline for {model} on {spec!r} holds other memes or labels ({condition.id}): the "
                          "comparison is refused")


def gate_family(session) -> dict[tuple, list]:
    """Every planned case the baseline holds, evaluated and compared as one family: {(model label, spec,
    condition id): comparisons}, computed once per session (`session.gate_comparisons`). A case that cannot be
    evaluated (it raises, or its model does not read the channel) is left out here and reports its own error when
    it runs."""
    if session.gate_comparisons is None:
        from ..errors import MemeRobustError

        cells, here = {}, session.position
        for nodeid, model, data, task, group, captions, condition in session.cases:
            spec = session.data_spec(data, captions)
            then = baseline_entry(session.baseline, model, spec, condition.id)
            key = (session.model_label(model), spec, condition.id)
            if then is None or key in cells:
                continue
            session.position = session.positions.get(nodeid, here)  # the report orders results by their case
            try:
                if session.unread_modalities(model, condition, captions):
                    continue
                result = session.evaluate(model, condition, data=data, task=task, group=group, captions=captions)
            except (MemeRobustError, RuntimeError, ValueError, OSError):
                continue
            finally:
                session.position = here
            _check_same_memes(model, spec, condition, then, result)
            cells[key] = PairedCell(*key, condition.kind, baseline_cell(result), then)
        options = gate_options(session)
        family: dict[tuple, list] = {key: [] for key in cells}
        for c in judge_family(list(cells.values()), options.pop("checks"), **options):
            family[(c.model, c.dataset, c.condition)].append(c)
        session.gate_comparisons = family
    return session.gate_comparisons


def check_baseline(session, cases) -> None:
    """Before any case runs: the session's baseline matches this run (seed, limit, task, card, data, versions) for
    the run's cases, given as (model, data, task, captions) tuples; a ConfigError naming the field otherwise."""
    if session.baseline is None:
        return
    from ..detectors import find_card
    from ..errors import ModeNotRead
    from .report import versions
    from .options import split_model

    facts = []
    for model, data, task, captions in cases:
        spec = session.data_spec(data, captions)
        card = session.cards.get(split_model(model)[0]) or find_card(split_model(model)[0])
        try:
            task = session.task(model, task)
        except ModeNotRead:  # the channel ablation's `:image` of a caption-only detector: its cases skip
            continue
        facts.append((model, spec, task, card_digest(card.as_dict()), session.fingerprint(spec)))
    labels = {(m, s): session.scored_dataset(m, s, t).labels(t).tolist() for m, s, t, *_ in facts
              if s in session.baseline["results"].get(m, {})}  # the labels the run scores, against the baseline's
    refuse_mismatch(session.baseline, seed=session.options.seed, limit=session.options.limit, cases=facts,
                    versions=versions(), labels=labels, names=(f"baseline {session.options.baseline}", "this run"))
    planned = session.cases  # (nodeid, model, data, task, group, captions, condition) of the run's cases
    held = [c for _, model, data, _, _, captions, c in planned if baseline_key(session, model, c, data, captions)]
    if planned and not held:  # the gate would compare nothing and pass
        ours = sorted({c.id for *_, c in planned})
        theirs = sorted({c for by_spec in session.baseline["results"].values() for by_c in by_spec.values()
                         for c in by_c})
        raise ConfigError(f"baseline {session.options.baseline} holds none of this run's {len(ours)} conditions "
                          f"({', '.join(ours[:5])}{', ...' if len(ours) > 5 else ''}); it holds "
                          f"{', '.join(theirs[:5])}{', ...' if len(theirs) > 5 else ''}: nothing would be gated "
                          "(another suite or -k selection than the baseline's?)")
