"""AugMix with Pillow, one picture at a time: the reference the registered `augmix` (pytest_memerobust/perturb/
augmix_tensor.py, on picture tensors) is tested against, draw for draw and pixel for pixel. The paper's code
(Hendrycks et al., ICLR 2020, `augment_and_mix`) with its PIL operations; the random draws are the package's own
(`draw_level`, `scaled_int`, `scaled_float`, `signed`), so both sides take the same numbers from one generator."""
from __future__ import annotations

import numpy as np
from PIL import Image, ImageOps

from pytest_memerobust.data.pictures import check_array
from pytest_memerobust.perturb.augmix_tensor import draw_level, scaled_float, scaled_int, signed


def autocontrast(img, level, rng):
    return ImageOps.autocontrast(img)


def equalize(img, level, rng):
    return ImageOps.equalize(img)


def posterize(img, level, rng):
    return ImageOps.posterize(img, 4 - scaled_int(level, 4))


def rotate(img, level, rng):
    return img.rotate(signed(scaled_int(level, 30), rng), resample=Image.BILINEAR)


def solarize(img, level, rng):
    return ImageOps.solarize(img, 256 - scaled_int(level, 256))


def _affine(img, matrix):
    return img.transform(img.size, Image.AFFINE, matrix, resample=Image.BILINEAR)


def shear_x(img, level, rng):
    return _affine(img, (1, signed(scaled_float(level, 0.3), rng), 0, 0, 1, 0))


def shear_y(img, level, rng):
    return _affine(img, (1, 0, 0, signed(scaled_float(level, 0.3), rng), 1, 0))


def translate_x(img, level, rng):
    return _affine(img, (1, 0, signed(scaled_int(level, img.size[0] // 3), rng), 0, 1, 0))


def translate_y(img, level, rng):
    return _affine(img, (1, 0, 0, 0, 1, signed(scaled_int(level, img.size[1] // 3), rng)))


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
            chain = operation(chain, draw_level(rng, aug_severity), rng)
        mix += weight * np.asarray(chain, dtype=np.float64)
    mixed = (1 - m) * x.astype(np.float64) + m * mix
    return np.clip(np.rint(mixed), 0, 255).astype(np.uint8)


def augmix(x: np.ndarray, severity: int, rng: np.random.Generator) -> np.ndarray:
    """AugMix compositional noise; severity sets the operations' magnitude (the paper's default, 3, is severity 2)."""
    c = [1, 3, 5, 7, 10][severity - 1]  # aug_severity on the paper's 0-10 scale; width 3, depth 1-3, alpha 1
    return augment_and_mix(x, rng, aug_severity=c)
