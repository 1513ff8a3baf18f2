"""The run's side of the gate: a session's results saved as a baseline (or added to one, as another checkpoint of its
recipe), and a session's cases compared with the baseline it was given (`--memerobust-baseline`). The file format is
track/baseline.py's, the statistics and the decision judge/gate.py's; here the session's cases become the paired
cells they judge.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

from ..atomic import atomic_write_text, folder_locked
from ..errors import ConfigError
from ..judge.gate import (DEFAULT_CHECKS, DEFAULT_CONTROL, PairedCell, comparison_mode, compare_condition,
                          judge_family)
from ..perturb.conditions import Condition
from ..track.baseline import (FORMAT, VERSIONED, baseline_cell, baseline_checkpoints, baseline_condition_names,
                              baseline_contents, baseline_entry, card_record, checkpoint_cells, condition_name,
                              flip_ledger_of, load_baseline, merged_baselines, refuse_held_checkpoint,
                              refuse_mismatch, rekeyed)


def baseline_data(session) -> dict:
    """Everything a later run needs to compare against this one, with the per-meme probabilities, and per model and
    dataset the memes' ids and captions in the results' order (`memes`), so a flip ledger can name the memes; `run`
    holds the facts a gated run must share (limit, task per model and dataset, model cards). Models are keyed by
    their label (a card's name, also for a card given by path), so another checkpoint of the card is compared
    with them wherever its card file lies."""
    report = session.report()
    results: dict = {}
    memes: dict = {}
    tasks: dict = {}
    for (model, spec, condition), result in session.outcomes.results.items():
        label = session.model_label(model)
        entry = results.setdefault(label, {}).setdefault(spec, {})
        entry[condition] = baseline_cell(result)
        tasks.setdefault(label, {})[spec] = result.task
        if spec not in memes.get(label, {}) and (named := scored_memes(session, spec, result)) is not None:
            memes.setdefault(label, {})[spec] = named
    labels = {session.model_label(name): info for name, info in report["models"].items()}
    return {
        "format": FORMAT, "seed": report["seed"],
        "versions": {k: report["versions"].get(k) for k in VERSIONED},
        "datasets": {spec: info["fingerprint"] for spec, info in report["datasets"].items()},
        "checkpoints": [{"models": {label: info["checkpoint_sha256"] for label, info in labels.items()},
                         "paths": {label: info.get("checkpoint") for label, info in labels.items()}}],
        "run": {"limit": report.get("options", {}).get("limit"), "tasks": tasks,
                "cards": {label: card_record(info.get("card", {})) for label, info in labels.items()}},
        "results": results,
        "memes": memes,
    }


def scored_memes(session, spec: str, result) -> dict | None:
    """{"ids", "captions"} of the memes `result` scored, in its order (the dataset's memes labelled for its task, as
    the engine reads them); None from a session that cannot name them (one rebuilt from results alone)."""
    if getattr(session, "dataset", None) is None or result.task is None:
        return None
    scored = session.dataset(spec).labelled(result.task).memes
    if len(scored) != len(result.memes.y_true):
        return None
    return {"ids": [m.id for m in scored], "captions": [m.text for m in scored]}


def save_baseline(session, path: Path, write: Callable[[str], object] | None = None) -> dict:
    """Write the baseline (with `--memerobust-baseline-add`, the baseline at `path` with this run's checkpoint added
    to its recipe: `merged_baselines`, under a lock of its folder so that runs adding at once each add theirs) and
    say so through `write` (e.g. `terminal.terminal_line(config)`): a baseline saved without a word is easily
    compared against the wrong file later. Returns what was saved (track/baseline.baseline_contents, and its path)."""
    from ..report.gate_tables import baseline_saved_line

    path, add = Path(path), session.options.judging.baseline.add
    data = baseline_data(session)
    with folder_locked(path.parent):
        if add:
            data = merged_baselines(_add_target(session, path), data, names=(f"baseline {path}", "this run"))
        atomic_write_text(path, json.dumps(data) + "\n")
    contents = baseline_contents(data)
    if write is not None:
        write(baseline_saved_line(f"this run's checkpoint added to the baseline {path}" if add else
                                  f"baseline saved to {path}", contents))
    return {"path": path, **contents}


def _add_target(session, path: Path) -> dict:
    """The baseline `--memerobust-baseline-add` adds this run's checkpoint to, keyed as this run names its models."""
    return rekeyed(load_baseline(path), {m: session.model_label(m) for m in session.options.models})


def write_run_ledger(session, directory: Path) -> str:
    """The flip ledger of this run against the baseline it was gated on (`--memerobust-baseline`), written to
    `directory`; the summary line saying what flipped and where it went (or why none was written: a baseline of a
    recipe's several checkpoints has no one checkpoint to pair this run with)."""
    from ..report.ledger import write_ledger

    names = (str(session.options.judging.baseline.path), "this run")
    held = len(baseline_checkpoints(session.baseline))
    if held > 1:
        return (f"memerobust: no flip ledger: {names[0]} holds {held} checkpoints of a recipe and a ledger pairs two "
                "checkpoints (`memerobust compare ONE.json THIS.json --ledger DIR` pairs this run's saved baseline "
                "with one of them)")
    ledger = flip_ledger_of(session.baseline, baseline_data(session), names=names)
    paths = write_ledger(ledger, directory)
    wrong, right = (sum(c[key] for c in ledger["conditions"]) for key in ("n_newly_wrong", "n_newly_right"))
    if all(c.get("basis") for c in ledger["conditions"]):  # unlabelled memes: against each one's clean answer
        return (f"memerobust: flip ledger against {names[0]}: {wrong} memes newly flipped and {right} no longer "
                f"flipped (no labels: each checkpoint against its clean prediction) over {len(ledger['conditions'])} "
                f"conditions; written to {paths[0]} and {paths[1]}")
    return (f"memerobust: flip ledger against {names[0]}: {wrong} memes newly wrong and {right} newly right over "
            f"{len(ledger['conditions'])} conditions; written to {paths[0]} and {paths[1]}")


def regressions(session, model: str, condition, result, data: str | None = None,
                captions: str | None = None) -> list:
    """The gate's comparisons (judge.gate.Comparison) of `result` with the session's baseline, every rule that
    applies to the condition, failing or not, and those of the family means it is a member of; none without a
    baseline or without this condition in it. The run's cases are judged as one family (gate.judge_family), so the
    first call evaluates every case the baseline holds."""
    if session.baseline is None:
        return []
    spec = session.data_spec(data, captions)
    key = (session.model_label(model), spec, condition.id)
    then = baseline_entry(session.baseline, *key)
    if then is None:
        return []
    family = gate_family(session)
    if key in family:
        return family[key]
    _check_same_memes(key, then, result)  # a condition outside the planned cases
    return compare_condition(baseline_cell(result), then, key, condition.kind, **gate_options(session))


def baseline_key(session, model: str, condition, data: str | None = None, captions: str | None = None) -> str | None:
    """`model on spec: condition` when the session's baseline holds this case (so it is gated), else None; without
    a baseline, None. The run's verdict names the cases it holds not (new) and what it holds that did not run."""
    if session.baseline is None:
        return None
    key = (session.model_label(model), session.data_spec(data, captions), condition.id)
    return condition_name(*key) if baseline_entry(session.baseline, *key) is not None else None


def baseline_conditions(session) -> list[str]:
    """Every `model on spec: condition` the session's baseline holds (none without one)."""
    return baseline_condition_names(session.baseline) if session.baseline is not None else []


def gate_options(session) -> dict:
    """The options of `judge_family` the session's run asked for: rules, error control, mode and the decision's
    resampling (`--memerobust-gate-method`, `--memerobust-gate-resamples`; the intervals' confidence and scale are
    the run's)."""
    judging = session.options.judging
    stats = judging.stats
    return {"checks": judging.regression_checks or DEFAULT_CHECKS, "control": judging.gate_error or DEFAULT_CONTROL,
            "mode": comparison_mode(session.gate), "confidence": stats.confidence,
            "n_resamples": judging.gate_resamples, "method": judging.gate_method, "seed": stats.seed,
            "scale": stats.scale}


def _check_same_memes(key: tuple, then, result) -> None:
    if checkpoint_cells(then)[0]["y"] != result.memes.y_true.tolist():
        model, spec, condition = key
        raise ConfigError(f"baseline for {model} on {spec!r} holds other memes or labels ({condition}): the "
                          "comparison is refused")


def gate_family(session) -> dict[tuple, list]:
    """Every planned case the baseline holds, evaluated and compared as one family: {(model label, spec,
    condition id): comparisons}, computed once per session (`session.outcomes.gate_comparisons`). A family mean's
    comparisons (`typos (mean of 5)`) go with each of its member conditions, so a regression spread over a family
    fails its cases. A case that cannot be evaluated (it raises, or its model does not read the channel) is left
    out here and reports its own error when it runs."""
    if session.outcomes.gate_comparisons is None:
        from ..errors import MemeRobustError

        cells, here = {}, session.ordering.position
        for nodeid, model, data, task, group, captions, condition in session.planned.cases:
            key = (session.model_label(model), session.data_spec(data, captions), condition.id)
            then = baseline_entry(session.baseline, *key)
            if then is None or key in cells:
                continue
            # the report orders results by their case
            session.ordering.position = session.ordering.positions.get(nodeid, here)
            try:
                if session.skip_reason(model, condition, data, task, captions):
                    continue
                result = session.evaluate(model, condition, data=data, task=task, group=group, captions=captions)
            except (MemeRobustError, RuntimeError, ValueError, OSError):
                continue
            finally:
                session.ordering.position = here
            _check_same_memes(key, then, result)
            cells[key] = PairedCell(*key, condition.kind, baseline_cell(result), then)
        options = gate_options(session)
        family: dict[tuple, list] = {key: [] for key in cells}
        for c in judge_family(list(cells.values()), options.pop("checks"), **options):
            for condition in c.subject.members or (c.subject.condition,):
                family[(c.subject.model, c.subject.dataset, condition)].append(c)
        session.outcomes.gate_comparisons = family
    return session.outcomes.gate_comparisons


def check_baseline(session, cases) -> None:
    """Before any case runs: the session's baseline matches this run (seed, limit, task, card, data, versions) for
    the run's cases, given as (model, data, task, captions) tuples, and so does the baseline this run adds its
    checkpoint to (`--memerobust-baseline-add`), which must also hold the run's conditions and no others; a
    ConfigError naming the field otherwise."""
    add = session.options.judging.baseline.add
    if session.baseline is None and not add:
        return
    facts, labels = _run_facts(session, cases)
    # (nodeid, model, data, task, group, captions, condition) of the run's cases that evaluate something: a case that
    # skips (a channel its model does not read) is in no baseline, and no baseline misses it
    planned = [(nodeid, model, data, task, group, captions, c) for nodeid, model, data, task, group, captions, c
               in session.planned.cases if not session.skip_reason(model, c, data, task, captions)]
    if session.baseline is not None:
        _refuse_unlike(session, session.baseline, facts, labels, f"baseline {session.options.judging.baseline.path}")
        _note_held_candidate(session)
        held = [c for _, model, data, _, _, captions, c in planned
                if baseline_key(session, model, c, data, captions)]
        if planned and not held:  # the gate would compare nothing and pass
            ours = sorted({c.id for *_, c in planned})
            theirs = sorted({c for by_spec in session.baseline["results"].values() for by_c in by_spec.values()
                             for c in by_c})
            raise ConfigError(f"baseline {session.options.judging.baseline.path} holds none of this run's {len(ours)} "
                              f"conditions "
                              f"({', '.join(ours[:5])}{', ...' if len(ours) > 5 else ''}); it holds "
                              f"{', '.join(theirs[:5])}{', ...' if len(theirs) > 5 else ''}: nothing would be gated "
                              "(another suite or -k selection than the baseline's?)")
    if add:
        path = session.options.judging.baseline.save
        target = _add_target(session, path)
        where = f"baseline {path} (--memerobust-baseline-add)"
        _refuse_unlike(session, target, facts, labels, where)
        refuse_held_checkpoint(target, {session.model_label(m): session.detector(m).fingerprint
                                        for m in session.options.models}, names=(where, "this run"))
        ours = [condition_name(session.model_label(model), session.data_spec(data, captions), c.id)
                for _, model, data, _, _, captions, c in planned]
        theirs = baseline_condition_names(target)
        references = {condition_name(m, s, c) for m, by_spec in target["results"].items() for s, by_c in
                      by_spec.items() for c in by_c if Condition.parse(c).kind == "clean"}  # run beside any case
        for only, side in (([n for n in theirs if n not in set(ours) | references], f"{where} holds"),
                           ([n for n in ours if n not in set(theirs)], "this run plans")):
            if only:
                raise ConfigError(f"{side} {len(only)} condition{'s' * (len(only) != 1)} the other does not "
                                  f"({', '.join(only[:3])}{', ...' if len(only) > 3 else ''}): the checkpoints of "
                                  "one recipe are run on the same conditions (the same suites and -k selection)")


def _note_held_candidate(session) -> None:
    """A candidate that is one of the recipe baseline's own checkpoints is compared with a recipe that holds it: its
    seed pulls the recipe's mean toward itself, so the run says so in its notes."""
    from ..track.baseline import held_checkpoint_index

    held = baseline_checkpoints(session.baseline)
    if len(held) < 2:
        return
    digests = {session.model_label(m): session.detector(m).fingerprint for m in session.options.models}
    index = held_checkpoint_index(session.baseline, digests)
    if index is not None:
        session.notes.add(f"this run's checkpoint is checkpoint {index + 1} of the {len(held)} in the recipe "
                          f"baseline {session.options.judging.baseline.path} (the same weights): it is compared with "
                          "a recipe that holds it")


def _run_facts(session, cases) -> tuple[list[tuple], dict]:
    """(per case (model label, spec, task, card_record, dataset fingerprint), per (label, spec) the labels the run
    scores) of the run's cases: what a baseline it is compared with or added to must share."""
    from ..detectors import find_card
    from ..errors import ModeNotRead
    from .options import split_model

    facts, labels = [], {}
    for model, data, task, captions in cases:
        spec = session.data_spec(data, captions)
        card = session.cards.get(split_model(model)[0]) or find_card(split_model(model)[0])
        try:
            task = session.task(model, task)
        except ModeNotRead:  # the channel ablation's `:image` of a caption-only detector: its cases skip
            continue
        label = session.model_label(model)
        facts.append((label, spec, task, card_record(card.as_dict()), session.fingerprint(spec)))
        if (label, spec) not in labels:
            labels[(label, spec)] = lambda model=model, spec=spec, task=task: (
                session.scored_dataset(model, spec, task).labels(task).tolist())
    return facts, labels


def _refuse_unlike(session, baseline: dict, facts: list[tuple], labels: dict, where: str) -> None:
    """track/baseline.refuse_mismatch of `baseline` against this run's facts, reading the run's labels only where
    the baseline holds the model and dataset."""
    from .report import versions

    scored = {key: read() for key, read in labels.items() if key[1] in baseline["results"].get(key[0], {})}
    refuse_mismatch(baseline, seed=session.options.seed, limit=session.options.data.limit, cases=facts,
                    versions=versions(), labels=scored, names=(where, "this run"))
