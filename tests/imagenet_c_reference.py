"""The reference, `imagecorruptions` 1.1.2, run side by side with our batched corruptions on the same draws.

Two shims let the reference run on numpy 2 / scikit-image 0.26 (DESIGN.md section 6): skimage's `gaussian` lost
its `multichannel=True` argument (now `channel_axis=-1`), and numpy lost `np.float_` (now `np.float64`). Nothing
else of the reference is changed, so what it computes is the published definition.

`ReferenceDraws` hands our corruption the numbers numpy's global generator gives the reference, call for call, so
the two outputs can be compared pixel by pixel. A corruption must therefore ask for its draws in the reference's
order and shapes (fields in H x W x 3 or H x W, as the reference draws them).
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

imagecorruptions = pytest.importorskip("imagecorruptions", reason="the fidelity reference is in the dev extra")
from imagecorruptions import corruptions as _reference_module  # noqa: E402

from imagenet_c_reference_pictures import test_picture  # noqa: E402,F401  (re-exported for the fidelity tests)
from pytest_memerobust.perturb.imagenet_c import CORRUPTIONS  # noqa: E402
from pytest_memerobust.perturb.imagenet_c.tensor import to_uint8  # noqa: E402

_skimage_gaussian = _reference_module.gaussian


def _gaussian(image, *args, multichannel=None, **kwargs):
    if multichannel:
        kwargs["channel_axis"] = -1
    return _skimage_gaussian(image, *args, **kwargs)


def reference(name: str, image: np.ndarray, severity: int, seed: int) -> np.ndarray:
    """imagecorruptions' output for `name` with numpy's global generator seeded by `seed`."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_reference_module, "gaussian", _gaussian)
        patch.setattr(np, "float_", np.float64, raising=False)
        np.random.seed(seed)
        return imagecorruptions.corrupt(image, corruption_name=name, severity=severity)


class ReferenceDraws:
    """The `Draws` interface served from numpy's global generator, as the reference draws."""

    device = torch.device("cpu")

    def normal(self, shape, loc=0.0, scale=1.0):
        return torch.from_numpy(np.random.normal(size=shape, loc=loc, scale=scale)).float()

    def uniform(self, low, high, shape=None):
        if shape is None:
            return float(np.random.uniform(low, high))
        return torch.from_numpy(np.random.uniform(low, high, size=shape)).float()

    def integers(self, low, high, shape=None):
        if shape is None:
            return int(np.random.randint(low, high))
        return torch.from_numpy(np.random.randint(low, high, size=shape)).long()

    def poisson(self, lam):
        return torch.from_numpy(np.random.poisson(lam.double().cpu().numpy())).float()


def ours(name: str, image: np.ndarray, severity: int, seed: int) -> np.ndarray:
    """Our corruption of one picture, fed the reference's draws for `seed`."""
    x = torch.from_numpy(image).permute(2, 0, 1)[None].float() / 255.0
    np.random.seed(seed)
    with torch.no_grad():
        y = to_uint8(CORRUPTIONS[name](x, severity, [ReferenceDraws()]))
    return y[0].permute(1, 2, 0).numpy()


def differences(a: np.ndarray, b: np.ndarray) -> dict:
    """Largest and mean absolute difference in uint8 levels, and the share of values more than 1 level apart."""
    d = np.abs(a.astype(int) - b.astype(int))
    return {"max": int(d.max()), "mean": float(d.mean()), "over_1": float((d > 1).mean())}




def assert_matches_reference(name: str, size: tuple[int, int], severity: int, max_levels: int,
                             mean_levels: float) -> None:
    """Ours and the reference on the same picture and draws differ by at most `max_levels` anywhere and
    `mean_levels` on average."""
    picture = test_picture(*size, seed=severity)
    got = differences(ours(name, picture, severity, seed=severity), reference(name, picture, severity, seed=severity))
    assert got["max"] <= max_levels and got["mean"] <= mean_levels, (name, size, severity, got)
