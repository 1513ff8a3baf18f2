"""How many requests a run will send a hosted endpoint, known before the first: an upper bound per case, from the
budgets the attacks' own modules set (HOTFLIP_STEPS, SQUARE_QUERIES, the joint attack's ROUNDS, TextAttack's
QUERY_BUDGET, the trigger search's and the UAP's defaults), read from there rather than restated.

A hosted model is a black box: each query of an attack is one request. Per meme:
- the condition's own evaluation: 1 request, k for a card that samples (detectors/sampling.py);
- HotFlip (and its human-style edits) by queries: 1 + steps x (1 + words + HOTFLIP_WORDS x HOTFLIP_EDITS), the
  words those of 2+ letters in the caption (attacks.hotflip_batch: each step asks the loss with each word deleted,
  then up to 8 edits in each of the top 3 words);
- Square: SQUARE_QUERIES + 1 (judging the outcome; `square:queries=N,restarts=R`: R x N + 1), the ensembles one
  more (their member's margin): strongest_image's Square SQUARE_QUERIES, autoattack's AUTOATTACK_SQUARE_QUERIES;
- the joint attacks (co_attack, co_attack_human, sga): ROUNDS x (a HotFlip round + Square + 4 margins) + 1;
- a TextAttack recipe: QUERY_BUDGET;
- white-box attacks (PGD, APGD, image_scaling) cannot run on a black box: none.
Universal attacks are fitted once per run and length: a trigger of L words asks examples x (1 + rounds x L x
candidates), a UAP UAP_PATTERNS x examples; each meme then costs its evaluation alone. Answers in the response cache
cost nothing, so a re-run sends fewer.
"""
from __future__ import annotations

import inspect
import re

HOTFLIP_WORDS = 3  # words whose edits HotFlip tries per step (attacks.hotflip_batch: `[:3]`)
HOTFLIP_EDITS = 8  # edits tried per word (attacks.hotflip_batch: `edits(..., 8)`)
UAP_PATTERNS = 8  # random sign patterns a black-box UAP fit judges (uap.fit_uap: `range(8)`)
NO_QUERIES = frozenset({"pgd_linf", "pgd_l2", "apgd_ce", "apgd_dlr", "image_scaling"})  # white box only: they fail
_WORD = re.compile(r"[A-Za-z]{2,}")
MARGINS_PER_ROUND = 4  # a joint attack's round: its caption's margin twice, the picture's before and after Square


def _defaults(function) -> dict:
    return {name: p.default for name, p in inspect.signature(function).parameters.items()
            if p.default is not inspect.Parameter.empty}


def hotflip_queries(caption: str, severity: int) -> int:
    """Requests HotFlip sends for one caption at `severity`, at most."""
    from ..perturb.attacks import HOTFLIP_STEPS

    words = len(_WORD.findall(caption or ""))
    return 1 + HOTFLIP_STEPS[severity - 1] * (1 + words + HOTFLIP_WORDS * HOTFLIP_EDITS)


def attack_queries(name: str | None, severity: int | None, caption: str) -> int:
    """Requests a per-meme attack (`name` at `severity`) sends for one meme of `caption`, at most; 0 for a
    perturbation that asks nothing, a universal attack (see `fit_queries`) or a white-box one."""
    if not name or name in NO_QUERIES:
        return 0
    from ..perturb import get

    perturbation = get(name)
    if not perturbation.needs_model or perturbation.universal:
        return 0
    from ..perturb.image_attacks import AUTOATTACK_SQUARE_QUERIES, SQUARE_QUERIES

    settings = dict(perturbation.parameters.settings)  # `square:queries=5000,restarts=2`: what its name sets
    if perturbation.family == "hotflip":
        return hotflip_queries(caption, severity)
    if perturbation.family == "square":
        return settings.get("restarts", 1) * settings.get("queries", SQUARE_QUERIES) + 1
    if perturbation.family == "strongest_image":
        return settings.get("queries", SQUARE_QUERIES) + 2
    if perturbation.family == "autoattack":  # on a black box, its Square alone
        return settings.get("queries", AUTOATTACK_SQUARE_QUERIES) + 2
    if perturbation.traits.rewrites_caption:  # the joint attacks
        from ..perturb.joint import ROUNDS

        return ROUNDS * (hotflip_queries(caption, severity) + SQUARE_QUERIES + MARGINS_PER_ROUND) + 1
    if perturbation.family == "textattack":
        from ..perturb.textattack_recipes import QUERY_BUDGET

        return QUERY_BUDGET
    return SQUARE_QUERIES + 1  # a third party's attack: as much as the largest built-in per-meme budget


def fit_queries(name: str | None, severity: int | None, fit_memes: int | None = None) -> int:
    """Requests fitting universal attack `name` at `severity` on `fit_memes` memes (None: as many as it takes)
    sends, once per run (0 for any other attack)."""
    if not name:
        return 0
    from ..perturb import get

    if not get(name).universal:
        return 0
    if name == "universal_trigger":
        from ..perturb.attacks import find_trigger

        d = _defaults(find_trigger)
        return min(fit_memes or d["examples"], d["examples"]) * (1 + d["rounds"] * severity * d["candidates"])
    if name == "uap":
        from ..perturb.uap import fit_uap

        examples = _defaults(fit_uap)["examples"]
        return UAP_PATTERNS * min(fit_memes or examples, examples)
    return fit_memes or 0  # a third party's universal attack: one pass over what it fits on, at least


def case_requests(condition, captions, samples: int = 1) -> int:
    """Requests one case (`condition` on memes with these `captions`) sends, at most: its attacks' queries and its
    own evaluation (k requests a meme for a card that samples); fits and the clean condition not included."""
    if condition.source:  # attacks crafted on another model: this one only evaluates them
        per_meme = [0] * len(captions)
    else:
        per_meme = [attack_queries(condition.text, condition.text_severity, c)
                    + attack_queries(condition.image, condition.image_severity, c) for c in captions]
    return sum(per_meme) + samples * len(captions)


def estimate(cases) -> tuple[list[tuple[str, int]], int]:
    """([(case, requests)] in the run's order, and the total) for `cases` of hosted models, given as (label, model,
    spec, condition, captions of its memes, samples per meme): each case's requests, each (model, spec)'s clean
    evaluation once and each universal fit once (counted with the first case that needs it)."""
    rows, seen = [], set()
    for label, model, spec, condition, captions, samples in cases:
        requests = 0 if (model, spec, condition.id) in seen else case_requests(condition, captions, samples)
        seen.add((model, spec, condition.id))
        if (model, spec, "clean") not in seen:  # the clean condition each case compares with, asked once
            seen.add((model, spec, "clean"))
            requests += samples * len(captions) if condition.kind != "clean" else 0
        if not condition.source:
            for name, severity in ((condition.text, condition.text_severity),
                                   (condition.image, condition.image_severity)):
                if name and ("fit", model, spec, name, severity) not in seen:
                    seen.add(("fit", model, spec, name, severity))
                    requests += fit_queries(name, severity)
        rows.append((label, requests))
    return rows, sum(r for _, r in rows)
