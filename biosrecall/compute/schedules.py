"""Depth schedules: which recurrent depth K each training update uses, and what that is expected to cost.

    s = parse_schedule("fixed_first:k0=4,switch=0.8,finish=uniform")
    s.depths(total=4800, seed=0)                # every update's K (int64 [4800])
    s.switch_update(4800), s.spec               # 3840 (first uniform update); canonical text

Text forms (`parse_schedule`, the one parser; E[K] is the expected depth):

    fixed:K                                  every update at depth K
    uniform:LO-HI                            K ~ U{LO..HI} (default 1-16)
    poisson_lognormal:mean=M[,sigma=S,cap=C] Huginn: K = 1 + Poisson(e^tau), tau ~ Normal(ln M - S^2/2, S)
                                             (S = 0.5 by default; E[K] = M + 1), optionally min(K, C)
    fixed_first:k0=K0,switch=F,finish=uniform[,range=LO-HI]  or  ...,finish=poisson_lognormal[,mean=M,...]
                                             K0 for the first round(F x total) updates, then the finish
                                             (Poisson-lognormal default mean 7.5: E[K] = 8.5, as U{1..16})
    curriculum:mean=M,warmup=W[,shape=linear|1-sqrt,sigma=S,cap=C]
                                             McLeish et al.: Poisson-lognormal with mean m(u), x = u / (W total):
                                             linear m = max(1, ceil(M x)), 1-sqrt m = max(1, ceil(M (1 - sqrt(1 - x))))
                                             while x < 1, then M

Update u draws one uniform and one normal from `np.random.default_rng([seed, u, STREAM])`, mapped by the
schedule's inverse CDF: depth is a pure function of (seed, update, total), reproducible on any rank.
The draws and the exact Poisson-lognormal tables the expected costs are priced from are here too:

    u, z = draws(seed=0, total=4800)        # one uniform and one normal per update, cached per seed
    pmf = poisson_lognormal_pmf(7.5, 0.5, None)

Bounds, checked in closed form before anything is drawn: depths and means <= `MAX_DEPTH`, an uncapped
Poisson-lognormal's reach <= `MAX_SUPPORT`, a sigma whose mean the quadrature keeps, <= `MAX_UPDATES` updates.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import MISSING, dataclass, fields

import numpy as np

from biosrecall.errors import BiosrecallError
from biosrecall.numbers import (
    MAX_DEPTH,
    Limit,
    check_count,
    check_depth,
    check_number,
    check_seed,
    parse_float,
    parse_int,
    rates,
)

# Each update's draw costs one seeded generator (about 40 us) and a plan keeps about 40 bytes per update:
# the longest run plans in under a minute and 40 MB.
MAX_UPDATES = 10**6

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


def _check_total(total: int) -> int:
    return check_count(total, "total updates", high=MAX_UPDATES, why="a plan keeps every update's depth")


class Schedule:
    """A map (update, total updates, seed) -> depth with its exact expected cost. Subclasses give `spec`
    (canonical text, parsed back to an equal schedule), `max_depth` (None: an uncapped Poisson tail),
    `segments(total)` ((start, stop, DepthDistribution) runs over updates 0..total-1), `_from_draws`."""

    def switch_update(self, total: int) -> int | None:
        """First update of the finishing phase, for schedules that have one."""
        return None

    def depths(self, total: int, seed: int) -> np.ndarray:
        """Depth of every update 0..total-1 of a `total`-update run."""
        total = _check_total(total)
        u, z = draws(seed, total)
        return self._fromdraws(np.arange(total), total, u, z)

    def expected_cost(self, total: int, cost: Callable[[np.ndarray], np.ndarray]) -> float:
        """Expected sum of cost(K) over a `total`-update run (cost vectorised over depths)."""
        return sum((b - a) * float(np.dot(cost(d.values), d.probs)) for a, b, d in self.segments(total))


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else repr(float(x))


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise BiosrecallError(message)


@dataclass(frozen=True)
class Fixed(Schedule):
    """Every update at depth k."""

    k: int

    def __post_init__(self) -> None:
        check_depth(self.k, "depth")

    spec = property(lambda self: f"fixed:{self.k}")
    max_depth = property(lambda self: self.k)

    def _fromdraws(self, updates, total, u, z):
        return np.full(len(updates), self.k, dtype=np.int64)

    def segments(self, total):
        return [(0, _check_total(total), DepthDistribution(np.array([self.k]), np.ones(1)))]


@dataclass(frozen=True)
class Uniform(Schedule):
    """K ~ U{lo..hi} on every update."""

    lo: int = 1
    hi: int = 16

    def __post_init__(self) -> None:
        check_depth(self.lo, "uniform lower depth")
        check_depth(self.hi, "uniform upper depth")
        _require(self.lo <= self.hi, f"uniform range {self.lo}-{self.hi} is empty (lower > upper)")

    spec = property(lambda self: f"uniform:{self.lo}-{self.hi}")
    max_depth = property(lambda self: self.hi)

    def _fromdraws(self, updates, total, u, z):
        return self.lo + np.floor(u * (self.hi - self.lo + 1)).astype(np.int64)

    def segments(self, total):
        values = np.arange(self.lo, self.hi + 1)
        return [(0, _check_total(total), DepthDistribution(values, np.full(len(values), 1 / len(values))))]


class _PoissonFamily(Schedule):
    """K = 1 + Poisson(e^tau), tau ~ Normal(ln m(u) - sigma^2/2, sigma); subclasses give sigma, cap, ramp = m."""

    max_depth = property(lambda self: self.cap)

    def _fromdraws(self, updates, total, u, z):
        lam = np.exp(np.log(self.ramp(updates, total)) - self.sigma**2 / 2 + self.sigma * z)
        return 1 + poisson_icdf(u, lam, None if self.cap is None else self.cap - 1)

    def segments(self, total):
        means = self.ramp(np.arange(_check_total(total)), total)
        edges = np.flatnonzero(np.diff(means)) + 1
        pmfs = {m: poisson_lognormal_pmf(m, self.sigma, self.cap) for m in map(float, np.unique(means))}
        runs = zip(np.r_[0, edges], np.r_[edges, total], strict=True)
        return [(int(a), int(b), pmfs[float(means[a])]) for a, b in runs]


@dataclass(frozen=True)
class PoissonLognormal(_PoissonFamily):
    """Huginn's sampler with a constant mean: E[K] = mean + 1 (without cap)."""

    mean: float
    sigma: float = 0.5
    cap: int | None = None

    def __post_init__(self) -> None:
        _check_pl(self.mean, self.sigma, self.cap, rates(0, MAX_DEPTH, low_open=True))

    @property
    def spec(self) -> str:
        cap = "" if self.cap is None else f",cap={self.cap}"
        return f"poisson_lognormal:mean={_num(self.mean)},sigma={_num(self.sigma)}{cap}"

    def ramp(self, updates, total):
        return np.full(len(updates), float(self.mean))


@dataclass(frozen=True)
class FixedFirst(Schedule):
    """K0 for the first round(switch x total) updates, then the `finish` schedule."""

    k0: int
    switch: float
    finish: Uniform | PoissonLognormal

    def __post_init__(self) -> None:
        check_depth(self.k0, "k0")
        check_number("switch", self.switch, rates(0, 1, low_open=True, high_open=True))
        lo, hi = getattr(self.finish, "lo", 1), self.finish.max_depth
        _require(lo <= self.k0 <= (hi or self.k0), f"k0={self.k0} lies outside the finish's depths {lo}-{hi}")

    @property
    def spec(self) -> str:
        head = f"fixed_first:k0={self.k0},switch={_num(self.switch)}"
        if isinstance(self.finish, Uniform):
            return f"{head},finish=uniform,range={self.finish.lo}-{self.finish.hi}"
        return f"{head},finish={self.finish.spec.replace(':', ',', 1)}"

    @property
    def max_depth(self) -> int | None:
        return None if self.finish.max_depth is None else max(self.k0, self.finish.max_depth)

    def switch_update(self, total: int) -> int:
        return int(math.floor(self.switch * _check_total(total) + 0.5))

    def _fromdraws(self, updates, total, u, z):
        depths, late = np.full(len(updates), self.k0, dtype=np.int64), updates >= self.switch_update(total)
        depths[late] = self.finish._fromdraws(updates[late], total, u[late], z[late])
        return depths

    def segments(self, total):
        switch = self.switch_update(total)
        fixed = DepthDistribution(np.array([self.k0]), np.ones(1))
        runs = [(0, switch, fixed), (switch, total, self.finish.segments(total)[0][2])]
        return [run for run in runs if run[1] > run[0]]


@dataclass(frozen=True)
class Curriculum(_PoissonFamily):
    """McLeish et al.: Poisson-lognormal whose mean ramps to `mean` over a warmup fraction, then holds."""

    mean: float
    warmup: float
    shape: str = "linear"
    sigma: float = 0.5
    cap: int | None = None

    def __post_init__(self) -> None:
        _check_pl(self.mean, self.sigma, self.cap, rates(1, MAX_DEPTH))  # a ramp starts at depth 1
        check_number("warmup", self.warmup, rates(0, 1, low_open=True))
        _require(self.shape in ("linear", "1-sqrt"), f"shape must be linear or 1-sqrt, got {self.shape!r}")

    @property
    def spec(self) -> str:
        cap = "" if self.cap is None else f",cap={self.cap}"
        warmup, sigma = _num(self.warmup), _num(self.sigma)
        return f"curriculum:mean={_num(self.mean)},warmup={warmup},shape={self.shape},sigma={sigma}{cap}"

    def ramp(self, updates: np.ndarray, total: int) -> np.ndarray:
        """Poisson-lognormal mean m(u) of each update."""
        x = np.minimum(np.asarray(updates, dtype=np.float64) / (self.warmup * total), 1.0)
        frac = x if self.shape == "linear" else 1.0 - np.sqrt(1.0 - x)
        m = np.maximum(1.0, np.ceil(self.mean * frac - 1e-9))  # the epsilon absorbs float error in M x
        return np.where(x >= 1.0, float(self.mean), np.minimum(m, float(self.mean)))


def _check_pl(mean: float, sigma: float, cap: int | None, means: Limit) -> None:
    """Refuse parameters whose distribution cannot be tabulated in bounded memory, in closed form
    (`means`: the schedule's allowed means)."""
    check_number("mean", mean, means)
    check_number("sigma", sigma, rates())
    if cap is not None:
        check_depth(cap, "cap")
    log_lam = math.log(mean) - sigma**2 / 2 + sigma * QUADRATURE_NODES
    got = float(QUADRATURE_WEIGHTS @ np.exp(log_lam) / QUADRATURE_WEIGHTS.sum())
    _require(abs(got / mean - 1) < 1e-6, f"sigma={sigma!r} is too wide to tabulate (use sigma <= 5)")
    lam_top = float(np.exp(log_lam.max()))
    reach = lam_top + 12 * math.sqrt(lam_top) + 40
    _require(
        cap is not None or reach <= MAX_SUPPORT,
        f"mean={mean!r}, sigma={sigma!r} reaches depth {reach:,.0f} (to probability 1e-16), beyond the "
        f"limit of {MAX_SUPPORT:,}; lower the mean or sigma, or give cap=",
    )


_EXAMPLES = "e.g. fixed:4, uniform:1-16, fixed_first:k0=4,switch=0.8,finish=uniform"


def parse_schedule(text: str) -> Schedule:
    """The one parser from text (see the module docstring) to a schedule; a malformed or impossible
    schedule is a `BiosrecallError` quoting the text and naming the bad part.

    Spaces may surround the whole spec but not sit inside it (`fixed : 4`), a colon needs a value
    after it (`uniform:`), and a key=value list may hold no empty item (`k0=4,,switch=0.8`): each is
    refused, saying what was expected, rather than read as something else."""
    text = text.strip() if isinstance(text, str) else ""
    foreign = next((char for char in text if not char.isascii()), None)
    # A spec is recorded as written: a full-width digit or a look-alike letter would be kept.
    _require(foreign is None, f"schedule {text!r}: {foreign!r} is not ASCII; write schedules in ASCII")
    _require(
        not any(char.isspace() for char in text),
        f"schedule {text!r}: no spaces inside a schedule; expected NAME:PARAMETERS ({_EXAMPLES})",
    )
    name, colon, body = text.partition(":")
    name = name.lower().replace("-", "_")
    problem = f"unknown schedule {name!r} in {text!r}" if name else "empty schedule"
    _require(name in _BUILDERS, f"{problem}; use one of: {', '.join(_BUILDERS)} (e.g. fixed:4, uniform:1-16)")
    _require(
        not colon or bool(body),
        f"schedule {text!r}: the colon needs the schedule's parameters after it; expected NAME or "
        f"NAME:PARAMETERS ({_EXAMPLES})",
    )
    try:
        return _BUILDERS[name](body)
    except BiosrecallError as exc:
        raise BiosrecallError(f"schedule {text!r}: {exc}") from None


def _value(raw: str, kind: type, key: str) -> int | float:
    try:
        return parse_int(raw) if kind is int else parse_float(raw)
    except BiosrecallError:
        raise BiosrecallError(f"{key}={raw!r} is not {'an integer' if kind is int else 'a number'}") from None


def _range(raw: str, key: str = "range") -> tuple[int, int]:
    lo, dash, hi = raw.partition("-")
    _require(bool(dash), f"{key} {raw!r} must look like LO-HI, e.g. 1-16")
    return _value(lo, int, key), _value(hi, int, key)


def _pairs(body: str) -> dict[str, str]:
    """The key=value pairs of a schedule's body, each key given once."""
    pairs: dict[str, str] = {}
    parts = body.split(",") if body else []
    _require(
        all(parts),
        "an empty item in the key=value list (two commas in a row, or one at an end); expected "
        "key=value pairs separated by single commas",
    )
    for part in parts:
        key, eq, raw = part.partition("=")
        key = key.lower()
        _require(bool(key and eq and raw), f"{part!r} must look like key=value")
        _require(key not in pairs, f"{key!r} is given twice")
        pairs[key] = raw
    return pairs


def _take(cls: type, pairs: dict[str, str], **given: object) -> Schedule:
    """A `cls` from the pairs named like its fields (each read as its field's type, and removed from
    `pairs`), else from `given`, else the field's default."""
    for field in fields(cls):
        if field.name in pairs:
            raw, kind = pairs.pop(field.name), field.type  # the annotation's text: "int | None", "str"
            given[field.name] = (
                raw if kind == "str" else _value(raw, int if "int" in kind else float, field.name)
            )
        else:
            _require(field.name in given or field.default is not MISSING, f"missing {field.name}=...")
    return cls(**given)


def _fixed_first(pairs: dict[str, str]) -> Schedule:
    finish = pairs.pop("finish", "uniform").lower().replace("-", "_")
    known = finish in ("uniform", "poisson_lognormal")
    _require(known, f"unknown finish {finish!r}; use uniform or poisson_lognormal")
    if finish == "uniform":
        return _take(FixedFirst, pairs, finish=Uniform(*_range(pairs.pop("range", "1-16"))))
    return _take(FixedFirst, pairs, finish=_take(PoissonLognormal, pairs, mean=7.5))


def _keyed(build: Callable[[dict[str, str]], Schedule]) -> Callable[[str], Schedule]:
    """The builder of a schedule from its body's key=value pairs, every one of which it must use."""

    def from_body(body: str) -> Schedule:
        pairs = _pairs(body)
        schedule = build(pairs)
        _require(not pairs, f"unknown key(s): {', '.join(pairs)}")
        return schedule

    return from_body


_BUILDERS: dict[str, Callable[[str], Schedule]] = {
    "fixed": lambda body: Fixed(_value(body.removeprefix("k="), int, "depth")),
    "uniform": lambda body: Uniform(*_range(body or "1-16")),
    "poisson_lognormal": _keyed(lambda pairs: _take(PoissonLognormal, pairs)),
    "fixed_first": _keyed(_fixed_first),
    "curriculum": _keyed(lambda pairs: _take(Curriculum, pairs)),
}
