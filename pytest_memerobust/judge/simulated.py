"""Simulated checkpoints for measuring a comparison's error on its null construction, without training anything.

A world of memes (labels and how hard each is to get right, and how much each perturbation family's severity takes
from it) and a recipe (how much its seeds differ: a global shift per seed and a per-meme shift per seed, as two
trainings of one recipe differ). A checkpoint is one seed's per-meme probabilities under every condition, in the
baseline cells' shape ({"y", "clean", "perturbed"}). Two disjoint sets of seeds of one recipe are two arms with no
recipe effect; a detector's outputs swapped meme by meme with another's are two detectors with none. Deterministic in
its generator; used by tests and bench/comparison_nulls.py.
"""
from __future__ import annotations

import numpy as np

CONDITIONS = ("clean", "typos@1", "typos@3", "typos@5", "jpeg@2", "jpeg@4")


def simulated_world(rng: np.random.Generator, n_memes: int = 300, conditions=CONDITIONS) -> dict:
    """Labels, per-meme ease (a logit margin) and per (condition, meme) the margin a perturbation takes."""
    y = rng.integers(0, 2, n_memes)
    ease = rng.normal(0.8, 1.2, n_memes)
    cost = {}
    for condition in conditions:
        family, _, severity = condition.partition("@")
        level = int(severity) if severity else 0
        cost[condition] = level * 0.25 * rng.uniform(0.0, 2.0, n_memes) if family != "clean" else np.zeros(n_memes)
    return {"y": y, "ease": ease, "cost": cost}


def simulated_checkpoint(world: dict, rng: np.random.Generator, seed_sd: float = 0.15, meme_sd: float = 0.5,
                         shift: float = 0.0) -> dict:
    """One seed of a recipe: {condition: cell}. `seed_sd` is the seed's global shift, `meme_sd` its per-meme one
    (shared by every condition, as a trained checkpoint's quirks are), `shift` a recipe effect on every perturbed
    condition's margin (0: the recipe of the world's checkpoints)."""
    y, ease = world["y"], world["ease"]
    own = rng.normal(0.0, seed_sd) + rng.normal(0.0, meme_sd, len(y))
    margin = ease + own
    cells = {}
    clean = _proba(y, margin)
    for condition, cost in world["cost"].items():
        perturbed = clean if condition == "clean" else _proba(y, margin - cost * (1.0 - shift))
        cells[condition] = {"y": y.tolist(), "clean": clean.tolist(), "perturbed": perturbed.tolist()}
    return cells


def _proba(y: np.ndarray, margin: np.ndarray) -> np.ndarray:
    """[N, 2] probabilities whose true class gets sigmoid(margin), rounded as a baseline stores them."""
    right = 1.0 / (1.0 + np.exp(-margin))
    p1 = np.where(y == 1, right, 1.0 - right)
    return np.round(np.stack([1.0 - p1, p1], axis=1), 6)


def swapped(first: dict, second: dict, rng: np.random.Generator) -> tuple[dict, dict]:
    """Two detectors' cells with each meme's outputs swapped between them by one fair coin, the same coin in every
    condition: two detectors that differ in nothing but noise (the detector comparison's null construction)."""
    conditions = list(first)
    n = len(first[conditions[0]]["y"])
    coin = rng.random(n) < 0.5
    out = ({}, {})
    for condition in conditions:
        for side, (mine, other) in enumerate(((first, second), (second, first))):
            cell = {"y": mine[condition]["y"]}
            for key in ("clean", "perturbed"):
                a, b = np.asarray(mine[condition][key]), np.asarray(other[condition][key])
                cell[key] = np.where(coin[:, None], b, a).tolist()
            out[side][condition] = cell
    return out
