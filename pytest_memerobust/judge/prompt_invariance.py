"""Prompt invariance: does a prompted detector's verdict depend on the wording of its instruction?

The clean memes are asked again under variants of the card's prompt (perturb/prompts.py): paraphrases of the
instruction (a shipped list), the answer options listed in the other order, and the system message left out (or, for
a card without one, added). A meme's prompt flip share is the share of variants whose verdict (a class, or "declined") differs from the
card's own prompt. The mean share and the share of memes that flip under at least one variant come with paired
bootstrap intervals; the memes most sensitive to wording are listed for the report.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from . import metrics
from ..determinism import fixed_threads
from ..perturb.prompts import prompt_variants

MOST_SENSITIVE = 5


@fixed_threads()  # every variant's verdicts at every thread count, as the engine's steps (determinism.py)
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


# A small grammar of instructions: an opening, where the caption goes, the question, how to answer (4 x 3 x 4 x 3 =
# 144 wordings); Hypothesis draws from it, and shrinks a failure towards the first choice of each part.
OPENINGS = ("", "Here is a meme. ", "Look at this meme. ", "You are shown a meme. ")
CAPTION_FRAMES = ('Its caption reads "{caption}". ', 'The text on it says "{caption}". ', 'Caption: "{caption}". ')
QUESTIONS = ("Is it hateful?", "Is this meme hateful?", "Does this meme express hate?",
             "Would a content moderator remove it as hateful?")
ANSWERS = (" Answer {options}.", " Reply with {options}.", " Answer with one word: {options}.")
MAX_FUZZED_MEMES = 16  # each drawn wording asks the model about this many memes at most


def rewordings():
    """A Hypothesis strategy of instructions from the grammar above."""
    from hypothesis import strategies as st

    return st.builds(lambda *parts: "".join(parts), st.sampled_from(OPENINGS), st.sampled_from(CAPTION_FRAMES),
                     st.sampled_from(QUESTIONS), st.sampled_from(ANSWERS))


class PromptFuzzer:
    """The memes a prompted detector classifies correctly and confidently with its own prompt (at most
    MAX_FUZZED_MEMES), and which of them a reworded instruction flips."""

    def __init__(self, detector, pictures, captions, labels, ids, confidence: float, batch_size: int = 16):
        self.detector, self.batch_size = detector, batch_size
        verdicts, proba = _verdicts(detector, pictures, captions, batch_size)
        labels = np.asarray(labels)
        chosen = [i for i in range(len(captions))
                  if verdicts[i] >= 0 and verdicts[i] == labels[i] and proba[i].max() >= confidence]
        chosen = chosen[:MAX_FUZZED_MEMES]
        self.confident = chosen
        self.pictures, self.captions = [pictures[i] for i in chosen], [captions[i] for i in chosen]
        self.ids, self.verdicts = [ids[i] for i in chosen], verdicts[chosen]

    def flipped(self, instruction: str) -> list[str]:
        """The ids of the confident memes whose verdict `instruction` changes (a class, or declining)."""
        variant = self.detector.with_prompt(replace(self.detector.prompt, instruction=instruction))
        verdicts, _ = _verdicts(variant, self.pictures, self.captions, self.batch_size)
        return [meme for meme, before, now in zip(self.ids, self.verdicts, verdicts) if before != now]
