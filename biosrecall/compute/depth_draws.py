"""Depth draws: the seeded primitive draw of each update and the exact Poisson-lognormal tables.

`schedules.py` maps these draws to depths through each schedule's inverse CDF; keeping them here keeps
the random stream (one generator per (seed, update)) and the numerics apart from the schedule grammar.

    u, z = draws(seed=0, total=4800)        # one uniform and one normal per update, cached per seed
    pmf = poisson_lognormal_pmf(7.5, 0.5, None)
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from biosrecall.numbers import MAX_DEPTH, check_seed

STREAM = 0x64657074  # separates depth draws from any other stream seeded by (seed, update)
MAX_SUPPORT = 32 * MAX_DEPTH  # an uncapped Poisson-lognormal's distribution is a table over 1..this
# Gauss-Hermite rule over the lognormal's normal variable; the outermost nodes (weight < 1e-20) are left out.
QUADRATURE_NODES, QUADRATURE_WEIGHTS = np.polynomial.hermite_e.hermegauss(64)
_KEPT = QUADRATURE_WEIGHTS / QUADRATURE_WEIGHTS.max() > 1e-20
QUADRATURE_NODES, QUADRATURE_WEIGHTS = QUADRATURE_NODES[_KEPT], QUADRATURE_WEIGHTS[_KEPT]
_CACHE: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # primitive draws per seed (8 seeds, newest last)


def draw(seed: int, update: int) -> tuple[float, float]:
    """The (uniform, normal) primitive draw of one update."""
    rng = np.random.default_rng([int(seed), int(update), STREAM])
    return rng.random(), rng.standard_normal()


def draws(seed: int, total: int) -> tuple[np.ndarray, np.ndarray]:
    """Primitive draws of updates 0..total-1 (as two arrays), cached per seed."""
    check_seed(seed)
    u, z = _CACHE.pop(int(seed), (np.empty(0), np.empty(0)))
    if len(u) < total:
        extra = np.array([draw(seed, i) for i in range(len(u), total)]).reshape(-1, 2)
        u, z = np.concatenate([u, extra[:, 0]]), np.concatenate([z, extra[:, 1]])
    _CACHE[int(seed)] = (u, z)
    if len(_CACHE) > 8:
        del _CACHE[next(iter(_CACHE))]
    return u[:total], z[:total]


@dataclass(frozen=True, eq=False)  # holds arrays: compare fields explicitly
class DepthDistribution:
    """An exact distribution over depths: probs[i] = P(K = values[i])."""

    values: np.ndarray
    probs: np.ndarray

    @property
    def mean(self) -> float:
        return float(np.dot(self.values, self.probs))


def poisson_icdf(u: np.ndarray, lam: np.ndarray, limit: int | None) -> np.ndarray:
    """Smallest j with P(Poisson(lam) <= j) >= u, elementwise (at most `limit`)."""
    out = np.zeros(len(u), dtype=np.int64)
    stop = 0 if not len(u) else support_top(float(lam.max())) if limit is None else limit
    active, log_lam, cdf = np.arange(len(u)), np.log(lam), np.zeros(len(u))
    for j in range(stop):  # only draws still below their u carry on: most stop within a few steps
        cdf = cdf + np.exp(j * log_lam - lam - math.lgamma(j + 1))
        below = cdf < u
        if not below.any():
            break
        out[active[below]] += 1
        active, u, lam, log_lam, cdf = (x[below] for x in (active, u, lam, log_lam, cdf))
    return out


def support_top(lam: float) -> int:
    """Poisson(lam) values worth tabulating (the rest has mass << 1e-16), at most MAX_SUPPORT."""
    return int(min(lam + 12 * math.sqrt(lam) + 40, MAX_SUPPORT))


@functools.lru_cache(maxsize=256)
def poisson_lognormal_pmf(mean: float, sigma: float, cap: int | None) -> DepthDistribution:
    """Exact distribution of 1 + Poisson(LogNormal(ln mean - sigma^2/2, sigma)) by Gauss-Hermite."""
    lam = np.exp(math.log(mean) - sigma**2 / 2 + sigma * QUADRATURE_NODES)[:, None]
    top = support_top(float(lam.max()))
    j = np.arange(top if cap is None else min(top, cap - 1))
    log_fact = np.array([math.lgamma(k + 1) for k in j])
    probs = QUADRATURE_WEIGHTS @ np.exp(j * np.log(lam) - lam - log_fact) / QUADRATURE_WEIGHTS.sum()
    if cap is not None and len(j) == cap - 1:
        probs = np.append(probs, max(1.0 - probs.sum(), 0.0))  # everything from cap on is clipped to cap
    probs = probs[: np.flatnonzero(probs > 1e-16)[-1] + 1]  # the far tail underflows; drop it
    return DepthDistribution(np.arange(1, len(probs) + 1), probs / probs.sum())
