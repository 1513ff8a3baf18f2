"""`memerobust compare` of detectors: baselines of different detectors on the same memes (or one baseline of a run with
several models), every pair judged on what each loses to the edits (judge/detectors.py). Exit 0 whatever the answer:
it informs a choice of detector, it gates no checkpoint."""
from __future__ import annotations

import json
from pathlib import Path

from ..errors import ConfigError
from .common import check_output_json, parsed_rules, strict_json

DETECTORS_FORMAT = "pytest-memerobust-detectors/1"


def detector_outputs(baselines: list[dict], names: list[str]) -> tuple[list, list[str]]:
    """(judge.detectors.DetectorOutputs per (file, model), notes): every model of every file, each of one checkpoint,
    all on one protocol (the same seed, limit, data fingerprints, meme ids and labels, perturbation versions), refused
    naming the first fact and the two entries that differ. A condition some detectors lack is left out, said in a
    note."""
    from ..judge.detectors import DetectorOutputs
    from ..judge.leaderboard import protocol, protocol_difference
    from ..run.options import split_model
    from ..track.baseline import baseline_checkpoints, checkpoint_cells

    outputs, seen, facts = [], set(), []
    for data, name in zip(baselines, names):
        held = len(baseline_checkpoints(data))
        if held > 1:
            raise ConfigError(f"{name} holds {held} checkpoints of a recipe: a detector is compared on one checkpoint "
                              "(compare recipes with --recipe A*.json --recipe B*.json)")
        for model, by_spec in data["results"].items():
            if split_model(model)[1] is not None:
                continue  # one detector's channel (`memeclip:text`, the channel ablation): not another detector
            label = model if model not in seen else f"{model} ({name})"
            seen.add(label)
            for spec, by_condition in by_spec.items():
                mine = protocol(data, model)
                mine = {k: (v if not isinstance(v, dict) or k == "versions" else {spec: v.get(spec)})
                        for k, v in mine.items()}
                mine.pop("conditions"), mine.pop("tasks")
                for other_label, other in facts:
                    if other.get("datasets", {}).keys() != mine["datasets"].keys():
                        continue
                    why = protocol_difference(other, mine)
                    if why is not None:
                        raise ConfigError(f"{other_label} and {label} ({name}) were not tested under one protocol: "
                                          f"{why}; detectors are compared on the same memes, seed and perturbations")
                facts.append((label, mine))
                outputs.append(DetectorOutputs(label, spec, {c: checkpoint_cells(e)[0]
                                                             for c, e in by_condition.items()}))
    if len(outputs) < 2:
        raise ConfigError(f"{' and '.join(names)} hold{'s' * (len(names) == 1)} one detector: a detector comparison "
                          "needs two or more (a run with several --memerobust-model, or one baseline per detector)")
    notes = []
    by_spec: dict[str, list] = {}
    for o in outputs:
        by_spec.setdefault(o.dataset, []).append(o)
    for spec, group in by_spec.items():
        common = set.intersection(*(set(o.cells) for o in group))
        for o in group:
            lacking = sorted(set(o.cells) - common)
            if lacking:
                notes.append(f"{len(lacking)} condition{'s' * (len(lacking) != 1)} of {o.name} on {spec} not held by "
                             f"every detector, not compared: {', '.join(lacking[:4])}"
                             + (" ..." if len(lacking) > 4 else ""))
    return outputs, notes


def run(args, baselines: list[dict]) -> int:
    from ..judge.detectors import DETECTOR_CHECKS, compare_detectors, verdict
    from ..perturb.conditions import attack_conditions
    from ..report.comparisons import LISTED, detector_lines

    if args.fail_on:
        raise ConfigError("--fail-on: detectors are compared on what they lose (drops, dropping rate, flip rate, "
                          "accuracy under attack); the rules are not chosen per run")
    _, control = parsed_rules(args, DETECTOR_CHECKS)
    if args.json is not None:
        check_output_json(Path(args.json), "--json", reads=args.files)
    outputs, notes = detector_outputs(baselines, list(args.files))
    attacks = attack_conditions({c for o in outputs for c in o.cells})
    method = "bootstrap" if args.method == "auto" else args.method
    comparisons = compare_detectors(outputs, attacks=attacks, control=control, n_resamples=args.resamples,
                                    seed=baselines[0]["seed"], confidence=args.confidence, method=method)
    rows = [{**c.as_dict(), "verdict": verdict(c)} for c in comparisons]
    for line in detector_lines([o.name for o in outputs], rows, control.alpha, control.method, every=args.every,
                               limit=None if args.every else LISTED) + notes:
        print(line)
    if args.json is not None:
        from ..atomic import atomic_write_text

        document = {"format": DETECTORS_FORMAT, "files": list(args.files), "detectors": [o.name for o in outputs],
                    "control": {"spec": control.spec, "two_sided": True}, "notes": notes,
                    "comparisons": rows}
        atomic_write_text(Path(args.json), json.dumps(strict_json(document), indent=2, allow_nan=False) + "\n")
        print(f"wrote {len(comparisons)} comparisons to {args.json}")
    return 0
