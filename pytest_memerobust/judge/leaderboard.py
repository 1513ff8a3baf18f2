"""A leaderboard of detectors tested under one protocol: their figures with intervals, a ranking, and the groups of
detectors that do not differ beyond noise.

An entry is one detector's saved results (a baseline's model; several checkpoints of one recipe stand as one entry,
their seeds' mean). Entries are comparable only under one protocol: the same seed, memes limit, data (fingerprint
and meme ids), task and conditions (suites and severities) and perturbation libraries; `protocol` reads them,
`protocol_fingerprint` names them in 16 hex digits, and `refuse_other_protocols` names the first fact that differs.

Figures per entry, each with a percentile interval on the gate's draws of the memes (the same draws for every entry):
clean accuracy, AUROC and macro-F1; per perturbation family the mean drop of accuracy over its severities and its
dropping rate (the drop over clean accuracy); accuracy under the strongest attack (per meme the worst case over every
attack condition, as AutoAttack counts robust accuracy); and the ranking figure, the average drop of accuracy over
every perturbed condition (Rainbow Noise's table 5). A recipe's figures are its seeds' means, their intervals widened
by the seeds' spread. Groups: every pair of entries tested on the ranking figure, two-sided, max-T over all pairs at
the level; entries joined by no difference share a letter (a compact letter display, Piepho 2004's insert-and-absorb).
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from itertools import combinations

import numpy as np

from .gate import _family_of, _Resampler
from .metrics import METRICS, _percentile_interval, correct
from .multiplicity import maxt_adjusted_p

PROTOCOL_FACTS = ("seed", "limit", "datasets", "memes", "tasks", "conditions", "versions")


def protocol(baseline: dict, model: str) -> dict:
    """The facts that make `model`'s results in `baseline` comparable with another's (see PROTOCOL_FACTS): meme ids
    by digest, conditions sorted per dataset."""
    results = baseline["results"][model]
    memes = {}
    for spec in results:
        ids = (baseline.get("memes", {}).get(model, {}).get(spec) or {}).get("ids")
        cell = next(iter(results[spec].values()))
        y = (cell[0] if isinstance(cell, list) else cell)["y"]
        memes[spec] = hashlib.sha256(json.dumps([ids, y]).encode()).hexdigest()[:16]
    return {"seed": baseline.get("seed"), "limit": baseline.get("run", {}).get("limit"),
            "datasets": {spec: baseline["datasets"].get(spec) for spec in sorted(results)},
            "memes": memes,
            "tasks": {spec: baseline.get("run", {}).get("tasks", {}).get(model, {}).get(spec)
                      for spec in sorted(results)},
            "conditions": {spec: sorted(results[spec]) for spec in sorted(results)},
            "versions": dict(baseline.get("versions") or {})}


def protocol_fingerprint(facts: dict) -> str:
    return hashlib.sha256(json.dumps(facts, sort_keys=True, default=str).encode()).hexdigest()[:16]


def protocol_difference(first: dict, other: dict) -> str | None:
    """The first fact in which two protocols differ, said with both values; None when they are one protocol."""
    for fact in PROTOCOL_FACTS:
        a, b = first.get(fact), other.get(fact)
        if a == b:
            continue
        if fact == "conditions":
            for spec in sorted(set(a) | set(b)):
                only_a = sorted(set(a.get(spec, ())) - set(b.get(spec, ())))
                only_b = sorted(set(b.get(spec, ())) - set(a.get(spec, ())))
                if only_a or only_b:
                    return (f"conditions on {spec}: only in the first {_few(only_a)}; only in the other {_few(only_b)}"
                            " (other suites, severities or -k selection)")
        if fact == "memes":
            return f"memes: other meme ids or labels on {', '.join(s for s in a if a.get(s) != b.get(s)) or 'the data'}"
        return f"{fact}: {_short(a)} against {_short(b)}"
    return None


def _few(names: list) -> str:
    return (", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")) if names else "none"


def _short(value) -> str:
    text = json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= 120 else text[:117] + "..."


@dataclass
class Entry:
    """One detector (or recipe) on one dataset: its name, its checkpoints' cells per condition (one list entry per
    seed), the attack conditions, and where it came from."""

    name: str
    dataset: str
    cells: dict  # condition -> list of cells, one per checkpoint
    attacks: frozenset = frozenset()
    source: str = ""
    figures: dict = field(default_factory=dict)

    @property
    def seeds(self) -> int:
        return len(next(iter(self.cells.values())))


def _figure(values: np.ndarray, draws: np.ndarray, confidence: float) -> dict:
    """A figure over k checkpoints: the seed mean, and an interval from the memes' draws of the seed mean (its
    percentile interval, widened by 1.96 seeds' standard errors in quadrature where k >= 2)."""
    value = float(np.mean(values))
    mean_draws = draws.mean(axis=0)
    low, high = _percentile_interval(mean_draws, confidence)
    if len(values) >= 2:  # each side's half-width and the seeds' in quadrature: independent sources of noise
        half = 1.959963984540054 * float(np.std(values, ddof=1)) / np.sqrt(len(values))
        low, high = value - np.hypot(value - low, half), value + np.hypot(high - value, half)
    return {"value": value, "low": float(low), "high": float(high), "draws": mean_draws,
            "seed_var": float(np.var(values, ddof=1)) / len(values) if len(values) >= 2 else 0.0}


def entry_figures(entry: Entry, side: _Resampler, confidence: float = 0.95) -> dict:
    """The entry's figures (see the module), each {"value", "low", "high"} plus the draws the groups read."""
    y = side.y
    conditions = list(entry.cells)
    k = entry.seeds

    def per_checkpoint(condition, key):
        cells = entry.cells[condition]
        return [np.asarray(c[key], dtype=np.float64) for c in cells]

    clean_key = "clean" if "clean" in entry.cells else conditions[0]
    clean_probas = per_checkpoint(clean_key, "clean")
    out, clean = {}, {}
    for name in ("accuracy", "auroc", "macro_f1"):
        clean[name] = (np.array([METRICS[name](y, p) for p in clean_probas]),
                       np.stack([side.metric(name, p) for p in clean_probas]))
        out[f"clean {name}"] = _figure(*clean[name], confidence)
    clean_acc, clean_draws = clean["accuracy"]
    perturbed = [c for c in conditions if c != "clean"]
    drops = {}
    for condition in perturbed:
        probas = per_checkpoint(condition, "perturbed")
        acc = np.array([METRICS["accuracy"](y, p) for p in probas])
        draws = np.stack([side.metric("accuracy", p) for p in probas])
        drops[condition] = (clean_acc - acc, clean_draws - draws)
    families: dict[str, list[str]] = {}
    for condition in perturbed:
        family = _family_of(condition) if "+" not in condition else None
        if family is not None:
            families.setdefault(family[0].partition("=")[2] or family[0], []).append(condition)
    for family, members in sorted(families.items()):
        values = np.mean([drops[c][0] for c in members], axis=0)
        draws = np.mean([drops[c][1] for c in members], axis=0)
        out[f"{family} drop"] = _figure(values, draws, confidence)
        with np.errstate(divide="ignore", invalid="ignore"):
            out[f"{family} dropping rate"] = _figure(values / clean_acc, draws / clean_draws, confidence)
    if perturbed:
        values = np.mean([drops[c][0] for c in perturbed], axis=0)
        draws = np.mean([drops[c][1] for c in perturbed], axis=0)
        out["average drop"] = _figure(values, draws, confidence)
        with np.errstate(divide="ignore", invalid="ignore"):
            out["dropping rate"] = _figure(values / clean_acc, draws / clean_draws, confidence)
    attacked = [c for c in perturbed if c in entry.attacks]
    if attacked:
        worst = [np.logical_and.reduce([correct(y, np.asarray(entry.cells[c][i]["perturbed"], dtype=np.float64))
                                        for c in attacked]).astype(np.float64) for i in range(k)]
        values = np.array([w.mean() for w in worst])
        draws = np.stack([side.resamples.mean(w) for w in worst])
        out["robust accuracy"] = {**_figure(values, draws, confidence), "attacks": len(attacked)}
    return out


RANKED_BY = "average drop"


def ranking(entries: list[Entry], *, n_resamples: int = 2000, seed: int = 0, confidence: float = 0.95,
            alpha: float = 0.05) -> dict:
    """Figures of every entry, their order by the average drop (least first), every pair's two-sided test of it (max-T
    over the pairs) and the letters of a compact letter display. All entries must be on one dataset, over the same
    memes."""
    if not entries:
        raise ValueError("no entries to rank")
    y = np.asarray(next(iter(entries[0].cells.values()))[0]["y"])
    key = (seed, entries[0].dataset, _Resampler._digest(y))
    side = _Resampler(y, n_resamples, key)
    for e in entries:
        e.figures = entry_figures(e, side, confidence)
    ranked = sorted(entries, key=lambda e: (e.figures.get(RANKED_BY, {}).get("value", np.inf), e.name))
    pairs = list(combinations(range(len(ranked)), 2))
    different = set()
    tests = []
    if pairs and all(RANKED_BY in e.figures for e in ranked):
        z, draws = [], []
        for i, j in pairs:
            fi, fj = ranked[i].figures[RANKED_BY], ranked[j].figures[RANKED_BY]
            d = fi["value"] - fj["value"]
            d_draws = fi["draws"] - fj["draws"]
            meme_sd = float(np.nanstd(d_draws, ddof=1))
            se = float(np.sqrt(meme_sd ** 2 + fi["seed_var"] + fj["seed_var"]))
            z.append(abs(d) / se if se > 0 else (np.inf if d else -np.inf))
            draws.append(np.abs(d_draws - np.nanmean(d_draws)) / se if se > 0 else np.full(n_resamples, -np.inf))
        p = maxt_adjusted_p(np.array(z), np.stack(draws))
        for (i, j), pv, zi in zip(pairs, p, z):
            tests.append({"a": ranked[i].name, "b": ranked[j].name, "p": float(pv),
                          "difference": ranked[i].figures[RANKED_BY]["value"] - ranked[j].figures[RANKED_BY]["value"],
                          "differ": bool(pv <= alpha)})
            if pv <= alpha:
                different.add((i, j))
    letters = compact_letters(len(ranked), different)
    return {"entries": ranked, "letters": letters, "pairs": tests, "alpha": alpha, "resamples": n_resamples,
            "ranked_by": RANKED_BY, "memes": len(y), "dataset": entries[0].dataset}


def compact_letters(n: int, different: set[tuple[int, int]]) -> list[str]:
    """Letters for n ordered items such that two items share a letter exactly when they were not found different
    (`different`: pairs (i, j), i < j): Piepho's (2004) insert-and-absorb. Starts with every item in one group;
    each significant pair splits every group holding both in two; groups contained in another are absorbed."""
    groups = [set(range(n))]
    for i, j in sorted(different):
        split = []
        for g in groups:
            if i in g and j in g:
                split += [g - {i}, g - {j}]
            else:
                split.append(g)
        groups = [g for g in split if g and not any(g < h for h in split)]
        groups = [g for k, g in enumerate(groups) if g not in groups[:k]]
    groups.sort(key=lambda g: (min(g), sorted(g)))
    letters = [""] * n
    for index, g in enumerate(groups):
        for item in sorted(g):
            letters[item] += _letter(index)
    return letters


def _letter(index: int) -> str:
    alphabet = "abcdefghijklmnopqrstuvwxyz"
    return alphabet[index] if index < 26 else alphabet[index // 26 - 1] + alphabet[index % 26]
