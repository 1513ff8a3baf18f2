"""The test picture of the ImageNet-C fidelity tests and benchmarks, apart from the reference so that a benchmark
can draw it without the dev extra's `imagecorruptions`."""
from __future__ import annotations

import numpy as np


def test_picture(height: int = 64, width: int = 80, seed: int = 0) -> np.ndarray:
    """A picture with smooth gradients, hard edges and texture, so blurs, noises and colour maps all show."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width]
    picture = np.stack([255 * x / max(width - 1, 1), 255 * y / max(height - 1, 1),
                        127 + 100 * np.sin(x / 5.0) * np.cos(y / 7.0)], axis=-1)
    picture[height // 4 : height // 2, width // 4 : width // 2] = [250, 30, 40]  # a block with hard edges
    picture += rng.normal(scale=12, size=picture.shape)
    return np.clip(picture, 0, 255).astype(np.uint8)


test_picture.__test__ = False  # a helper, not a test
