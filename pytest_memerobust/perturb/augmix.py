"""AugMix (Hendrycks et al., ICLR 2020): `width` chains of 1-3 random operations, mixed with Dirichlet weights,
then mixed with the original with a Beta weight. Rainbow Noise's image noise 3.

The operation set is the paper's (autocontrast, equalize, posterize, rotate, solarize, shear and translate along
x and y); it leaves out the colour, contrast, brightness and sharpness operations on purpose, since those overlap
the ImageNet-C corruptions AugMix is evaluated against. Magnitudes follow the paper's code: an operation's level is
drawn uniformly in [0.1, aug_severity] on a 0-10 scale. All randomness comes from the explicit `rng`.

The registered `augmix` (registered in augmix_tensor.py) runs on picture tensors on their device, batched, drawing
from `rng` exactly as the PIL version here, which is the reference it is tested against.
"""
from __future__ import annotations

import numpy as np
from PIL import Image, ImageOps

from ..data.pictures import check_array


def _level(rng: np.random.Generator, severity: float) -> float:
    return float(rng.uniform(0.1, severity))


def _int(level: float, maxval: int) -> int:
    return int(level * maxval / 10)


def _float(level: float, maxval: float) -> float:
    return level * maxval / 10


def _signed(value: float, rng: np.random.Generator) -> float:
    return -value if rng.random() > 0.5 else value


def autocontrast(img, level, rng):
    return ImageOps.autocontrast(img)


def equalize(img, level, rng):
    return ImageOps.equalize(img)


def posterize(img, level, rng):
    return ImageOps.posterize(img, 4 - _int(level, 4))


def rotate(img, level, rng):
    return img.rotate(_signed(_int(level, 30), rng), resample=Image.BILINEAR)


def solarize(img, level, rng):
    return ImageOps.solarize(img, 256 - _int(level, 256))


def _affine(img, matrix):
    return img.transform(img.size, Image.AFFINE, matrix, resample=Image.BILINEAR)


def shear_x(img, level, rng):
    return _affine(img, (1, _signed(_float(level, 0.3), rng), 0, 0, 1, 0))


def shear_y(img, level, rng):
    return _affine(img, (1, 0, 0, _signed(_float(level, 0.3), rng), 1, 0))


def translate_x(img, level, rng):
    return _affine(img, (1, 0, _signed(_int(level, img.size[0] // 3), rng), 0, 1, 0))


def translate_y(img, level, rng):
    return _affine(img, (1, 0, 0, 0, 1, _signed(_int(level, img.size[1] // 3), rng)))


OPERATIONS = (autocontrast, equalize, posterize, rotate, solarize, shear_x, shear_y, translate_x, translate_y)


def augment_and_mix(x: np.ndarray, rng: np.random.Generator, aug_severity: float = 3, width: int = 3,
                     depth: int = -1, alpha: float = 1.0) -> np.ndarray:
    """The paper's `augment_and_mix`: depth -1 draws 1 to 3 operations per chain."""
    x = check_array(x)
    image = Image.fromarray(x)
    weights = rng.dirichlet([alpha] * width)
    m = rng.beta(alpha, alpha)
    mix = np.zeros(x.shape, dtype=np.float64)
    for weight in weights:
        chain = image
        for _ in range(depth if depth > 0 else int(rng.integers(1, 4))):
            operation = OPERATIONS[int(rng.integers(len(OPERATIONS)))]
            chain = operation(chain, _level(rng, aug_severity), rng)
        mix += weight * np.asarray(chain, dtype=np.float64)
    mixed = (1 - m) * x.astype(np.float64) + m * mix
    return np.clip(np.rint(mixed), 0, 255).astype(np.uint8)


def augmix(x: np.ndarray, severity: int, rng: np.random.Generator) -> np.ndarray:
    """AugMix compositional noise; severity sets the operations' magnitude (the paper's default, 3, is severity 2)."""
    c = [1, 3, 5, 7, 10][severity - 1]  # aug_severity on the paper's 0-10 scale; width 3, depth 1-3, alpha 1
    return augment_and_mix(x, rng, aug_severity=c)
