"""What people do to memes to slip past moderation or simply by sharing them: scribbles over the picture, covering
part of it (the caption included), stickers on top, repeated re-upload compression, screenshot framing, and the
typographic edits of the text the picture shows (typography.py: re-rendering the caption, counter-text).

Every edit keeps the picture's size and mode (RGB uint8 in, the same shape out), draws all its randomness from the
explicit `rng`, and starts with its severity table. The edits run on picture tensors on their device
(meme_edits_tensor.py; PIL draws only the masks of strokes and stickers); tests/meme_edits_reference.py holds the
numpy versions they are tested against, pixel for pixel.
"""
from __future__ import annotations

import numpy as np

from . import meme_edits_tensor, typography
from .registry import register

_TAGS = ("meme_edit",)
_TYPOGRAPHIC = (*_TAGS, "typographic")  # edits of the text the picture shows


@register("rendered_caption", modality="image", family="meme_edit", severities=None, tags=_TYPOGRAPHIC,
          caption_source="condition", reads_text_boxes=True, takes="tensor")
def rendered_caption(x, severity, rng: np.random.Generator, caption: str, text_boxes=None):
    """Show the caption the text channel gets (perturbed, in a combined condition) in the picture: the picture's
    own caption erased from its text boxes and this one drawn into them, so pixels and caption agree, as when an
    attacker edits the meme's own text (a band at the bottom when the boxes are unknown)."""
    return typography.render_caption(x, caption, text_boxes)


@register("rendered_clean_caption", modality="image", family="meme_edit", severities=None, tags=_TYPOGRAPHIC,
          caption_source="clean", reads_text_boxes=True, takes="tensor")
def rendered_clean_caption(x, severity, rng: np.random.Generator, caption: str, text_boxes=None):
    """Show the clean caption in the picture, re-rendered in its text boxes exactly as `rendered_caption` renders
    (the same erase, font and layout). On its own it is the control of `text=typos@k+image=rendered_caption`: what
    flips here is the re-rendering's doing, not the typos'. Under a caption attack the pixels keep the original
    words while the text channel gets the edited ones, a deliberate disagreement between the inputs."""
    return typography.render_caption(x, caption, text_boxes)


@register("counter_text", modality="image", family="meme_edit", tags=_TYPOGRAPHIC, reads_text_boxes=True,
          takes="tensor")
def counter_text(x, severity: int, rng: np.random.Generator, text_boxes=None):
    """Type short benign phrases ("just a joke", "love is love") onto the picture, clear of its caption."""
    return typography.counter_text(x, severity, rng, text_boxes)


def _register_device_edits() -> None:
    """The edits of meme_edits_tensor.py as registered perturbations."""
    for name, fn in meme_edits_tensor.EDITS.items():
        reads_boxes = name == "caption_cover"  # it covers the text boxes when they are known
        register(name, modality="image", family="meme_edit", tags=_TYPOGRAPHIC if reads_boxes else _TAGS,
                 takes="tensor", reads_text_boxes=reads_boxes)(fn)


_register_device_edits()
