"""Counter-based random numbers computed on the device from a key, so a picture's noise is a function of
(seed, perturbation, severity, picture key, field, element index) and nothing else.

A streaming generator gives a picture different numbers when it moves to another batch, worker or GPU (a CUDA
`torch.Generator` even depends on the GPU's SM count once a draw spans several waves). Here every element's number
is a hash of its key and its index, evaluated with torch integer ops wherever the tensor lives: the same uniforms on
a CPU and on any GPU, for any batch, and no field is ever drawn on the CPU and copied over.

The hash is two rounds of MurmurHash3's 32-bit finaliser (a bijection of the 32-bit index for each key) in int32
arithmetic, whose multiplication wraps as uint32 arithmetic does; a logical right shift is an arithmetic shift
masked to the shifted width. Uniforms carry 24 bits; normals come from Box-Muller on two uniforms.
"""
from __future__ import annotations

import hashlib
import math
from typing import Sequence

import torch

_M1, _M2 = -0x7A1435B5, -0x3D4D51CB  # 0x85EBCA6B and 0xC2B2AE35 as int32
_GOLDEN = -0x61C88647  # 0x9E3779B9 as int32


def _fmix32(h: torch.Tensor) -> torch.Tensor:
    """MurmurHash3's finaliser on uint32 values held in int32."""
    h = h ^ ((h >> 16) & 0xFFFF)
    h = h * _M1
    h = h ^ ((h >> 13) & 0x7FFFF)
    h = h * _M2
    return h ^ ((h >> 16) & 0xFFFF)


def _as_int32(value: int) -> int:
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value >= 1 << 31 else value


def field_keys(key: int, stream: int) -> tuple[int, int]:
    """The two 32-bit round keys of one field (`stream`) of one picture (`key`)."""
    digest = hashlib.blake2b(f"{key}\0{stream}".encode(), digest_size=8).digest()
    return _as_int32(int.from_bytes(digest[:4], "little")), _as_int32(int.from_bytes(digest[4:], "little"))


def random_bits(keys: torch.Tensor, numel: int) -> torch.Tensor:
    """[B, numel] uint32 values (in int32) for B fields, one row per pair of round keys in `keys` [B, 2] (int32)."""
    index = torch.arange(numel, device=keys.device, dtype=torch.int32)
    h = _fmix32(index[None, :] ^ keys[:, :1])
    return _fmix32((h + _GOLDEN) ^ keys[:, 1:])


def uniforms(keys: torch.Tensor, shape: Sequence[int], dtype=torch.float32) -> torch.Tensor:
    """[B, *shape] uniforms in (0, 1): 24 bits each, centred in their interval, so neither 0 nor 1 occurs."""
    numel = math.prod(shape)
    bits = (random_bits(keys, numel) >> 8) & 0xFFFFFF
    return ((bits.to(dtype) + 0.5) * 2.0**-24).reshape(len(keys), *shape)


def normals(keys_pair: tuple[torch.Tensor, torch.Tensor], shape: Sequence[int], dtype=torch.float32) -> torch.Tensor:
    """[B, *shape] standard normals by Box-Muller from two independent uniform fields."""
    u1 = uniforms(keys_pair[0], shape, torch.float32)
    u2 = uniforms(keys_pair[1], shape, torch.float32)
    z = torch.sqrt(-2.0 * torch.log(u1)) * torch.cos(2.0 * math.pi * u2)
    return z.to(dtype)


def poisson(lam: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Poisson counts with means `lam` by inversion of uniforms `u` (same shape): start at the Cornish-Fisher guess
    of the u-quantile, whose CDF is the regularised upper incomplete gamma function, and walk up or down one count
    at a time, only over the elements not yet settled. Exact up to float64 rounding of the CDF (the guess only
    decides where the walk starts); about one step per element whatever the mean."""
    lam64, u64 = lam.double().flatten(), u.double().flatten()
    out = torch.zeros_like(lam64)
    live = torch.nonzero(lam64 > 0).flatten()
    if live.numel() == 0:
        return out.reshape(lam.shape).to(lam.dtype)
    mean, target = lam64[live], u64[live]
    z = torch.special.ndtri(target.clamp(1e-12, 1 - 1e-12))
    k = torch.floor(mean + torch.sqrt(mean) * z + (z * z - 1) / 6 + 0.5).clamp_(min=0)
    cdf = torch.special.gammaincc(k + 1, mean)  # P(X <= k)
    pmf = torch.exp(k * torch.log(mean) - mean - torch.lgamma(k + 1))  # P(X = k)
    down = target <= cdf
    # Walk down while P(X <= k - 1) >= u: the answer is the smallest k with P(X <= k) >= u.
    rows = torch.nonzero(down & (k > 0)).flatten()
    while rows.numel():
        below = cdf[rows] - pmf[rows]
        step = target[rows] <= below
        rows = rows[step]
        if rows.numel() == 0:
            break
        cdf[rows] = cdf[rows] - pmf[rows]
        pmf[rows] = pmf[rows] * k[rows] / mean[rows]
        k[rows] = k[rows] - 1
        rows = rows[k[rows] > 0]
    # Walk up while P(X <= k) < u; the cap guards against a CDF that rounding keeps just below u.
    rows = torch.nonzero(~down).flatten()
    cap = float(mean.max()) + 40 * math.sqrt(float(mean.max())) + 40
    while rows.numel():
        k[rows] = k[rows] + 1
        pmf[rows] = pmf[rows] * mean[rows] / k[rows]
        cdf[rows] = cdf[rows] + pmf[rows]
        rows = rows[(target[rows] > cdf[rows]) & (k[rows] < cap)]
    out[live] = k
    return out.reshape(lam.shape).to(lam.dtype)


def poisson_of_levels(means: torch.Tensor, levels: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Poisson counts where each element's mean is one of a few `means` (L,), chosen by the integer `levels`
    (same shape as `u`): pictures have 256 grey levels, so shot noise has 256 means. Inversion of `u` as `poisson`
    does, through one CDF table per mean and a single `searchsorted` instead of a walk: the tables are laid end to
    end, row r offset by r, so one sorted sequence serves every element."""
    means = means.double().to(u.device)
    top = float(means.max()) if means.numel() else 0.0
    counts = torch.arange(math.ceil(top + 12 * math.sqrt(top) + 30) + 1, dtype=torch.float64, device=u.device)
    rate = means[:, None]
    log_pmf = counts * torch.log(rate) - rate - torch.lgamma(counts + 1)
    pmf = torch.where(rate > 0, torch.exp(log_pmf), (counts == 0).double())  # a mean of 0 gives 0 counts
    cdf = torch.cumsum(pmf, dim=1)
    cdf[:, -1] = 1.0  # the tail beyond the table, which rounding would otherwise leave just below 1
    rows = torch.arange(means.numel(), dtype=torch.float64, device=u.device)[:, None]
    table = (cdf + rows).flatten()
    index = levels.long()
    found = torch.searchsorted(table, (index.double() + u.double()).contiguous())
    return (found - index * counts.numel()).clamp_(0, counts.numel() - 1).to(torch.float64)
