"""Golden outputs of every built-in perturbation, so a numpy/Pillow/torch upgrade that silently changes what a
perturbation does fails here. Regenerate deliberately with `MEMEROBUST_REGEN_GOLDEN=1 pytest tests/test_golden.py`."""
import json
import os
from pathlib import Path

import numpy as np
import pytest

from pytest_memerobust.perturb import get, names

GOLDEN = Path(__file__).resolve().parents[1] / "fixtures" / "golden-perturbations.json"
CAPTION = "trans rights are human rights and nobody gets to vote on that"
# Largest per-pixel difference accepted for images: JPEG depends on the libjpeg build inside Pillow, and the torch
# ImageNet-C corruptions sum in float32, whose last bit may change with the CPU's vector width (one level).
IMAGE_TOLERANCE = {"jpeg_compression": 12}
FLOAT32_TOLERANCE = 1


def _image() -> np.ndarray:
    y, x = np.mgrid[0:12, 0:10]
    return np.stack([y * 20, x * 25, (x + y) * 10], axis=-1).astype(np.uint8)


def _outputs() -> dict:
    out = {}
    for name in names():
        p = get(name)
        if p.needs_model or "needs_backend" in p.tags:  # a detector's weights or a model not installed here
            continue
        for severity in p.parameters.severities or (None,):
            x = CAPTION if p.modality == "text" else _image()
            captions = [CAPTION] if p.traits.caption_source else None
            y = p.apply([x], ["golden-meme"], severity, seed=7, captions=captions)[0]
            out[f"{name}@{severity}"] = y if isinstance(y, str) else y.tolist()
    return out


@pytest.fixture(autouse=True)
def _no_system_fonts(monkeypatch):
    """FigStep's layout (perturb/typographic.py) draws with a bold monospace font found at run time: pinned to
    Pillow's own here, so the golden outputs do not depend on the fonts a machine has."""
    from pytest_memerobust.perturb import typographic

    monkeypatch.setattr(typographic, "MONO_BOLD_FONTS", ())
    typographic.figstep_font_name.cache_clear()
    yield
    typographic.figstep_font_name.cache_clear()


def test_perturbation_outputs_match_the_golden_file():
    outputs = _outputs()
    if os.environ.get("MEMEROBUST_REGEN_GOLDEN"):
        GOLDEN.write_text(json.dumps(outputs, separators=(",", ":"), sort_keys=True) + "\n")
        pytest.skip(f"rewrote {GOLDEN}")
    golden = json.loads(GOLDEN.read_text())
    assert sorted(outputs) == sorted(golden), "perturbations added or removed: regenerate the golden file"
    for key, value in outputs.items():
        if isinstance(value, str):
            assert value == golden[key], key
        else:
            name = key.split("@")[0]
            tolerance = IMAGE_TOLERANCE.get(name, FLOAT32_TOLERANCE if "imagenet_c" in get(name).tags else 0)
            diff = np.abs(np.array(value, dtype=int) - np.array(golden[key], dtype=int)).max()
            assert diff <= tolerance, f"{key}: max pixel difference {diff} > {tolerance}"
