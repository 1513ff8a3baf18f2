"""Prompt invariance: does a prompted detector's verdict depend on the wording of its instruction?

The clean memes are asked again under variants of the card's prompt: paraphrases of the instruction (a shipped
list), the answer options listed in the other order, and the system message left out (or, for a card without one,
added). A meme's prompt flip share is the share of variants whose verdict (a class, or "declined") differs from the
card's own prompt. The mean share and the share of memes that flip under at least one variant come with paired
bootstrap intervals; the memes most sensitive to wording are listed for the report.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from . import metrics

PARAPHRASES = (
    'Here is a meme. Its text says: "{caption}". Is it hateful? Reply {options}.',
    'Meme caption: "{caption}". Does this meme attack people for who they are? Answer {options}.',
    'Look at the picture and its caption "{caption}". Would a content moderator call this meme hateful? {options}?',
    'Caption: "{caption}". Question: is this meme hateful? Answer with one word, {options}.',
    'You see a meme with the words "{caption}". Answer {options}: is the meme hateful?',
    'Is the following meme hateful? Its caption is "{caption}". Answer {options}.',
)
ALTERNATIVE_SYSTEM = "You are a content moderator. You judge whether memes are hateful."
MOST_SENSITIVE = 5


def prompt_variants(prompt) -> dict[str, object]:
    """Name -> a variant of `prompt` (a detectors.vlm.Prompt): the paraphrases, the options in the other order,
    and the system message left out (or added where the card has none)."""
    variants = {f"paraphrase {k + 1}": replace(prompt, instruction=text) for k, text in enumerate(PARAPHRASES)}
    reordered = " or ".join(reversed(prompt.label_words))
    variants["options reversed"] = replace(prompt, instruction=prompt.instruction.replace("{options}", reordered))
    variants["system left out" if prompt.system else "system added"] = replace(
        prompt, system=None if prompt.system else ALTERNATIVE_SYSTEM)
    return {name: variant for name, variant in variants.items() if variant != prompt}


def supports_prompts(detector) -> bool:
    return callable(getattr(detector, "with_prompt", None)) and getattr(detector, "prompt", None) is not None


def _verdicts(detector, pictures, captions, batch_size: int) -> tuple[np.ndarray, np.ndarray]:
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
    """The prompt-invariance figures of `detector` on clean memes (see the module's docstring)."""
    labels = np.asarray(labels)
    base, _ = _verdicts(detector, pictures, captions, batch_size)
    rows, flips = [], []
    for name, variant in prompt_variants(detector.prompt).items():
        verdicts, _ = _verdicts(detector.with_prompt(variant), pictures, captions, batch_size)
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
