"""Prompt invariance: does a prompted detector's verdict depend on the wording of its instruction?

The clean memes are asked again (run/analyses.py asks the detector) under variants of the card's prompt
(perturb/prompts.py): paraphrases of the instruction (a shipped list), the answer options listed in the other order,
and the system message left out (or, for a card without one, added). A meme's prompt flip share is the share of
variants whose verdict (a class, or "declined") differs from the card's own prompt. The mean share and the share of memes that flip under at least one variant come with paired
bootstrap intervals; the memes most sensitive to wording are listed for the report.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from . import metrics

MOST_SENSITIVE = 5
MAX_FUZZED_MEMES = 16  # each drawn wording asks the model about this many memes at most


def prompt_invariance_figures(base, variants: Sequence[tuple], labels, ids, captions, n_resamples: int = 1000,
                              confidence: float = 0.95, seed: int = 0) -> dict:
    """The prompt-invariance figures (see the module's docstring) from each meme's verdict (a class, or -1 where
    declined) under the card's own prompt (`base`) and under each variant: (name, PromptSpec, verdicts) in order."""
    labels = np.asarray(labels)
    rows, flips = [], []
    for name, variant, verdicts in variants:
        flipped = verdicts != base
        flips.append(flipped)
        answered = verdicts >= 0
        rows.append({"variant": name, "instruction": variant.instruction, "system": variant.system,
                     "flip_rate": float(flipped.mean()), "declined": float((~answered).mean()),
                     "accuracy": float((verdicts[answered] == labels[answered]).mean()) if answered.any()
                     else float("nan")})
    per_meme = np.stack(flips, axis=1).mean(axis=1)  # [N]: share of variants that change the meme's verdict
    boot = {"n_resamples": n_resamples, "confidence": confidence, "seed": seed}
    mean_ci = metrics.paired_bootstrap_ci(lambda s: float(np.mean(s)), per_meme, **boot)
    any_ci = metrics.paired_bootstrap_ci(lambda s: float(np.mean(s > 0)), per_meme, **boot)
    order = np.argsort(-per_meme, kind="stable")[:MOST_SENSITIVE]
    return {"n": int(len(captions)), "base_accuracy": float((base[base >= 0] == labels[base >= 0]).mean())
            if (base >= 0).any() else float("nan"),
            "variants": rows, "mean_flip_share": float(per_meme.mean()), "mean_flip_share_ci": list(mean_ci),
            "any_flip_share": float((per_meme > 0).mean()), "any_flip_share_ci": list(any_ci),
            "most_sensitive": [{"id": ids[i], "caption": captions[i], "flip_share": float(per_meme[i])}
                               for i in order if per_meme[i] > 0]}


def confident_memes(verdicts, proba, labels, confidence: float) -> list[int]:
    """The memes (indices, at most MAX_FUZZED_MEMES) whose verdict is their label with probability >= `confidence`:
    those a prompt fuzzer asks about."""
    labels = np.asarray(labels)
    chosen = [i for i in range(len(verdicts))
              if verdicts[i] >= 0 and verdicts[i] == labels[i] and proba[i].max() >= confidence]
    return chosen[:MAX_FUZZED_MEMES]
