"""Universal adversarial perturbation: within its budget, raises the training loss, fitted once, cached on disk."""
import numpy as np
import pytest

from pytest_memerobust.data import demo_dataset
from pytest_memerobust.detectors import load_detector
from pytest_memerobust.perturb import get
from pytest_memerobust.perturb import uap as uap_module
from pytest_memerobust.perturb.attacks import AttackContext, CleanInputs
from pytest_memerobust.perturb.uap import add_pattern, fit_uap, pattern_for


@pytest.fixture(scope="module")
def setup():
    detector = load_detector("memeblip2-tda")
    train = demo_dataset("train").head(32)
    test = demo_dataset("test").head(6)
    training = lambda: ([m.text for m in train.memes], train.labels("hate"), train.memes)
    features = detector.encode_images([m.image for m in test.memes])
    return detector, train, test, training, features


def _context(setup, cache_dir=None, detector=None):
    det, train, test, training, features = setup
    detector = detector or det
    split = detector is det
    clean = CleanInputs(features if split else None, [m.image for m in test.memes])
    return AttackContext(detector, test.labels("hate"), clean, training=training, cache_dir=cache_dir)


def _training_loss(detector, train, pattern):
    proba = detector.predict_proba([add_pattern(m.image, pattern) for m in train.memes], [m.text for m in train.memes])
    return float(-np.log(proba[np.arange(len(train)), train.labels("hate")] + 1e-12).mean())


def test_fitted_pattern_stays_in_budget_and_raises_the_training_loss(setup):
    detector, train = setup[0], setup[1]
    epsilon = 8 / 255
    pattern = fit_uap(_context(setup), epsilon, steps=3, examples=32)
    assert pattern.shape == (64, 64, 3) and np.abs(pattern).max() <= epsilon + 1e-7
    assert _training_loss(detector, train, pattern) > _training_loss(detector, train, np.zeros_like(pattern))


def test_added_to_any_size_within_the_budget_in_pixels(setup):
    pattern = np.full((8, 8, 3), 4 / 255, dtype=np.float32)
    x = np.full((37, 53, 3), 100, dtype=np.uint8)
    out = add_pattern(x, pattern)
    assert out.shape == x.shape and out.dtype == np.uint8 and (out == 104).all()
    assert (add_pattern(np.full((5, 5, 3), 254, np.uint8), pattern) == 255).all()  # clipped


def test_fitted_once_kept_on_disk_and_a_corrupt_entry_recomputed(setup, tmp_path, monkeypatch):
    calls = []
    real = uap_module.fit_uap
    monkeypatch.setattr(uap_module, "fit_uap", lambda *a, **k: calls.append(1) or real(*a, steps=1, **{
        key: v for key, v in k.items() if key != "steps"}))
    first = pattern_for(_context(setup, tmp_path), 4 / 255)
    assert len(calls) == 1 and list((tmp_path / "uap").glob("*.npy"))
    again = pattern_for(_context(setup, tmp_path), 4 / 255)  # a new context reads the file
    assert len(calls) == 1 and np.array_equal(first, again)
    path = next((tmp_path / "uap").glob("*.npy"))
    path.write_bytes(b"not numpy")
    pattern_for(_context(setup, tmp_path), 4 / 255)
    assert len(calls) == 2


def test_the_perturbation_applies_one_pattern_to_every_picture(setup):
    context = _context(setup)
    test = setup[2]
    images = [m.image for m in test.memes]
    out = get("uap").apply(images, [m.id for m in test.memes], 3, 0, context)
    diffs = [o.astype(int) - x.astype(int) for o, x in zip(out, images)]
    assert all(np.abs(d).max() <= 8 + 1 for d in diffs) and any(np.abs(d).max() > 0 for d in diffs)
    with pytest.raises(ValueError, match="AttackContext"):
        get("uap").apply(images, [m.id for m in test.memes], 3, 0)


def test_black_box_detectors_get_a_random_search_pattern(setup):
    demo = load_detector("demo")
    pattern = fit_uap(_context(setup, detector=demo), 8 / 255, examples=8)
    assert np.allclose(np.abs(pattern), 8 / 255)  # a full-budget sign pattern
