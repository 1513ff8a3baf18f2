"""Counter-based random numbers: right distributions, and a picture's draws a function of its key alone."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from pytest_memerobust.data import keyed
from pytest_memerobust.perturb.imagenet_c import CORRUPTIONS, run_batched
from pytest_memerobust.perturb.imagenet_c.tensor import Draws, normal_fields, uniform_fields

scipy_stats = pytest.importorskip("scipy.stats", reason="scipy comes with the dev extra (scikit-learn)")


def _keys(*pairs):
    return torch.tensor(pairs, dtype=torch.int32)


def test_uniforms_are_uniform_and_never_zero_or_one():
    u = keyed.uniforms(_keys(keyed.field_keys(1, 0)), (200_000,))[0].double()
    assert 0 < float(u.min()) and float(u.max()) < 1
    assert abs(float(u.mean()) - 0.5) < 0.003 and abs(float(u.var()) - 1 / 12) < 0.001
    counts = np.histogram(u.numpy(), bins=20, range=(0, 1))[0]
    assert scipy_stats.chisquare(counts).pvalue > 1e-4


def test_normals_are_standard_normal():
    k = keyed.field_keys(5, 0), keyed.field_keys(5, 1)
    z = keyed.normals((_keys(k[0]), _keys(k[1])), (200_000,))[0].double().numpy()
    assert abs(z.mean()) < 0.01 and abs(z.std() - 1) < 0.01
    assert scipy_stats.kstest(z, "norm").pvalue > 1e-4


def test_fields_of_other_keys_and_neighbouring_elements_are_uncorrelated():
    a, b = keyed.uniforms(_keys(keyed.field_keys(1, 0), keyed.field_keys(2, 0)), (100_000,)).double().numpy()
    assert abs(np.corrcoef(a, b)[0, 1]) < 0.02
    assert abs(np.corrcoef(a[:-1], a[1:])[0, 1]) < 0.02


def test_a_field_depends_on_its_key_only_not_on_the_batch():
    keys = [keyed.field_keys(k, 0) for k in range(4)]
    together = keyed.uniforms(_keys(*keys), (3, 5))
    for i, key in enumerate(keys):
        assert torch.equal(keyed.uniforms(_keys(key), (3, 5))[0], together[i])


@pytest.mark.parametrize("lam", [0.0, 0.2, 3.0, 24.5, 60.0])
def test_poisson_inverts_the_exact_cdf(lam):
    u = keyed.uniforms(_keys(keyed.field_keys(9, int(lam * 10))), (20_000,), torch.float64)[0]
    counts = keyed.poisson(torch.full_like(u, lam), u)
    np.testing.assert_array_equal(counts.numpy(), scipy_stats.poisson.ppf(u.numpy(), lam) if lam else 0)


@pytest.mark.parametrize("scale", [60, 3])
def test_poisson_of_grey_levels_is_the_walks_inversion_by_table(scale):
    means = torch.arange(256, dtype=torch.float64) / 255 * scale
    levels = torch.arange(256).repeat(200)
    u = keyed.uniforms(_keys(keyed.field_keys(5, scale)), levels.shape, torch.float64)[0]
    u[255], u[511] = 0.0, 1.0  # the extremes stay inside the table of the largest mean
    table = keyed.poisson_of_levels(means, levels, u)
    assert torch.equal(table[:511], keyed.poisson(means[levels], u)[:511])
    assert table[255] == 0 and scale < table[511] < scale + 12 * scale ** 0.5 + 31
    np.testing.assert_array_equal(table[256:511].numpy(),
                                  scipy_stats.poisson.ppf(u[256:511].numpy(), means[:255].numpy()))


def test_poisson_of_mixed_means_keeps_each_elements_mean():
    lam = torch.tensor([0.0, 1.5, 60.0, 7.0]).repeat(5000)
    u = keyed.uniforms(_keys(keyed.field_keys(3, 3)), lam.shape, torch.float64)[0]
    counts = keyed.poisson(lam, u).reshape(5000, 4)
    assert counts[:, 0].eq(0).all()
    np.testing.assert_allclose(counts[:, 1:].mean(0).numpy(), [1.5, 60.0, 7.0], rtol=0.03)
    np.testing.assert_allclose(counts[:, 1:].var(0).numpy(), [1.5, 60.0, 7.0], rtol=0.1)


def test_draws_give_a_picture_the_same_fields_alone_or_in_a_batch():
    draws = [Draws(np.random.default_rng(s)) for s in range(3)]
    batch = normal_fields(draws, (4, 4)), uniform_fields(draws, -1, 1, (2,))
    for s in range(3):
        alone = Draws(np.random.default_rng(s))
        assert torch.equal(alone.normal((4, 4)), batch[0][s]) and torch.equal(alone.uniform(-1, 1, (2,)), batch[1][s])


@pytest.mark.parametrize("name", ["gaussian_noise", "shot_noise", "impulse_noise", "glass_blur", "snow", "spatter"])
def test_a_corrupted_picture_depends_on_its_key_only(name):
    rng = np.random.default_rng(0)
    pictures = [torch.from_numpy(rng.integers(0, 256, (3, 20, 24), dtype=np.uint8)) for _ in range(3)]
    keys = lambda: [np.random.default_rng(100 + i) for i in range(3)]  # noqa: E731
    together = run_batched(CORRUPTIONS[name], pictures, 3, keys())
    reversed_ = run_batched(CORRUPTIONS[name], pictures[::-1], 3, keys()[::-1])[::-1]
    one_by_one = [run_batched(CORRUPTIONS[name], [p], 3, [k])[0] for p, k in zip(pictures, keys())]
    for a, b, c in zip(together, reversed_, one_by_one):
        assert torch.equal(a, b) and torch.equal(a, c)
    assert not torch.equal(together[0], pictures[0])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_uniforms_are_the_same_on_a_gpu():
    keys = _keys(keyed.field_keys(1, 0), keyed.field_keys(2, 7))
    assert torch.equal(keyed.uniforms(keys, (1000,)), keyed.uniforms(keys.cuda(), (1000,)).cpu())
