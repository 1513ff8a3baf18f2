"""Prompt edits: the `prompt` side of a condition (`prompt=paraphrase@2`), which rewords a prompted detector's
instruction instead of perturbing its inputs. A shipped list of paraphrases of the instruction, the answer options in
the other order, and the system message left out (or, for a card without one, added). run/analyses.py asks a
detector under every variant; the engine applies one as a condition."""
from __future__ import annotations

from dataclasses import replace

PARAPHRASES = (
    'Here is a meme. Its text says: "{caption}". Is it hateful? Reply {options}.',
    'Meme caption: "{caption}". Does this meme attack people for who they are? Answer {options}.',
    'Look at the picture and its caption "{caption}". Would a content moderator call this meme hateful? {options}?',
    'Caption: "{caption}". Question: is this meme hateful? Answer with one word, {options}.',
    'You see a meme with the words "{caption}". Answer {options}: is the meme hateful?',
    'Is the following meme hateful? Its caption is "{caption}". Answer {options}.',
)
ALTERNATIVE_SYSTEM = "You are a content moderator. You judge whether memes are hateful."

# prompt edits by name -> their severities (() = none): the `prompt` side of a condition (`prompt=paraphrase@2`)
PROMPT_EDITS = {"paraphrase": tuple(range(1, len(PARAPHRASES) + 1)), "options_reversed": (), "system": ()}


def check_prompt_edit(name: str, severity: int | None) -> None:
    """A ValueError naming what is wrong with a prompt edit: an unknown name, or a severity it does not have."""
    if name not in PROMPT_EDITS:
        raise ValueError(f"unknown prompt edit {name!r}; known: {', '.join(PROMPT_EDITS)}")
    if (severity is None) != (not PROMPT_EDITS[name]) or (severity is not None and severity not in PROMPT_EDITS[name]):
        valid = list(PROMPT_EDITS[name]) or "none"
        raise ValueError(f"prompt edit {name!r} has no severity {severity!r}; valid: {valid}")


def prompt_edit(prompt, name: str, severity: int | None = None):
    """`prompt` (a detectors.vlm.Prompt) under one edit: the severity-th paraphrase of its instruction, its options
    in the other order, or its system message left out (added, where it has none)."""
    check_prompt_edit(name, severity)
    if name == "paraphrase":
        return replace(prompt, instruction=PARAPHRASES[severity - 1])
    if name == "options_reversed":
        reordered = " or ".join(reversed(prompt.label_words))
        return replace(prompt, instruction=prompt.instruction.replace("{options}", reordered))
    return replace(prompt, system=None if prompt.system else ALTERNATIVE_SYSTEM)


def prompt_variants(prompt) -> dict[str, object]:
    """Name -> every prompt edit of `prompt` that changes it: the paraphrases, the options in the other order,
    and the system message left out (or added where the card has none)."""
    variants = {f"paraphrase {k}": prompt_edit(prompt, "paraphrase", k) for k in PROMPT_EDITS["paraphrase"]}
    variants["options reversed"] = prompt_edit(prompt, "options_reversed")
    variants["system left out" if prompt.system else "system added"] = prompt_edit(prompt, "system")
    return {name: variant for name, variant in variants.items() if variant != prompt}


def supports_prompts(detector) -> bool:
    return callable(getattr(detector, "with_prompt", None)) and getattr(detector, "prompt", None) is not None
