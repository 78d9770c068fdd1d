"""Tests of the depth schedules and their parser: statistics, switch points, determinism, bad input.

pytest -q tests/test_schedules.py
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from biosrecall.compute import schedules
from biosrecall.compute.schedules import (
    Curriculum,
    Fixed,
    FixedFirst,
    PoissonLognormal,
    Uniform,
    parse_schedule,
)
from biosrecall.errors import BiosrecallError

CANONICAL = {
    "fixed:4": "fixed:4",
    "uniform": "uniform:1-16",
    "uniform:2-8": "uniform:2-8",
    "fixed_first:k0=4,switch=0.8,finish=uniform": "fixed_first:k0=4,switch=0.8,finish=uniform,range=1-16",
    "fixed-first:switch=0.67,k0=2,finish=poisson-lognormal": (
        "fixed_first:k0=2,switch=0.67,finish=poisson_lognormal,mean=7.5,sigma=0.5"
    ),
    "poisson_lognormal:mean=8,sigma=0.5,cap=32": "poisson_lognormal:mean=8,sigma=0.5,cap=32",
    "curriculum:mean=8,warmup=0.5,shape=linear": "curriculum:mean=8,warmup=0.5,shape=linear,sigma=0.5",
    "curriculum:mean=8,warmup=0.75,shape=1-sqrt,cap=24": (
        "curriculum:mean=8,warmup=0.75,shape=1-sqrt,sigma=0.5,cap=24"
    ),
}


def mean_depth(schedule, update: int, total: int) -> float:
    """Expected depth of one update, from the schedule's exact distributions."""
    return next(dist.mean for start, stop, dist in schedule.segments(total) if start <= update < stop)


@pytest.mark.parametrize("text", CANONICAL)
def test_parse_canonical_round_trip(text):
    schedule = parse_schedule(text)
    assert schedule.spec == CANONICAL[text]
    assert parse_schedule(schedule.spec) == schedule


def test_parsed_objects():
    assert parse_schedule("fixed:4") == Fixed(4)
    assert parse_schedule(" uniform:1-16 ") == Uniform(1, 16)
    assert parse_schedule("fixed_first:k0=4,switch=0.8,finish=uniform") == FixedFirst(4, 0.8, Uniform(1, 16))
    assert parse_schedule("poisson_lognormal:mean=8") == PoissonLognormal(8.0, 0.5, None)
    assert parse_schedule("curriculum:mean=8,warmup=0.5") == Curriculum(8.0, 0.5, "linear")


def test_uniform_mean_over_many_draws():
    depths = Uniform(1, 16).depths(100_000, seed=11)
    assert depths.min() == 1 and depths.max() == 16
    sd = math.sqrt((16**2 - 1) / 12) / math.sqrt(len(depths))
    assert abs(depths.mean() - 8.5) < 4 * sd
    assert np.all(np.abs(np.bincount(depths)[1:] / len(depths) - 1 / 16) < 0.005)


@pytest.mark.parametrize(
    ("switch", "total", "expected"), [(0.8, 1000, 800), (0.67, 4800, 3216), (0.67, 20000, 13400)]
)
def test_fixed_first_switches_at_the_right_update(switch, total, expected):
    schedule = FixedFirst(4, switch, Uniform(1, 16))
    depths = schedule.depths(total, seed=3)
    assert schedule.switch_update(total) == expected
    assert np.all(depths[:expected] == 4)
    assert set(depths[expected:]) == set(range(1, 17))
    assert mean_depth(schedule, expected - 1, total) == 4 and mean_depth(schedule, expected, total) == 8.5


def test_poisson_lognormal_mean_is_mean_plus_one():
    schedule = PoissonLognormal(8.0)
    depths = schedule.depths(100_000, seed=5)
    sd = math.sqrt(8 + 64 * (math.exp(0.25) - 1)) / math.sqrt(len(depths))  # Var = E[lam] + Var[lam]
    assert abs(depths.mean() - 9.0) < 4 * sd
    assert depths.min() >= 1
    assert mean_depth(schedule, 0, 10) == pytest.approx(9.0, abs=1e-9)
    assert np.median(depths) == 8  # Huginn's figures for mean 8: median 8, p95 19, P(K > 16) about 8%
    assert np.percentile(depths, 95) == pytest.approx(19, abs=1)
    assert np.mean(depths > 16) == pytest.approx(0.08, abs=0.01)
    capped = PoissonLognormal(8.0, cap=12)
    assert capped.depths(20_000, seed=5).max() == 12
    assert mean_depth(capped, 0, 1) == pytest.approx(np.minimum(depths, 12).mean(), abs=0.05)


def test_curriculum_ramps_then_holds():
    linear = Curriculum(8.0, 0.5, "linear")
    means = linear.ramp(np.arange(1000), 1000)
    assert means[0] == 1 and np.all(np.diff(means) >= 0) and np.all(means[500:] == 8)
    assert means[250] == math.ceil(8 * 250 / 500)
    root = Curriculum(8.0, 0.5, "1-sqrt")
    assert root.ramp(np.array([250]), 1000)[0] == math.ceil(8 * (1 - math.sqrt(0.5)))
    depths = linear.depths(40_000, seed=2)
    assert depths[20_000:].mean() == pytest.approx(9.0, abs=0.15)
    assert depths[:2_000].mean() < 3
    expected = linear.expected_cost(400, lambda k: k)
    assert expected == pytest.approx(sum(mean_depth(linear, u, 400) for u in range(400)), rel=1e-9)


@pytest.mark.parametrize(
    "text",
    [
        "uniform:1-16",
        "fixed_first:k0=2,switch=0.67,finish=poisson_lognormal",
        "curriculum:mean=8,warmup=0.5,shape=1-sqrt",
    ],
)
def test_depth_draws_are_deterministic_and_rank_independent(text):
    schedule = parse_schedule(text)
    total, seed = 3000, 7
    reference = schedule.depths(total, seed)
    schedules._CACHE.clear()  # a fresh process (another rank, a resumed run) starts without the cache
    assert np.array_equal(schedule.depths(total, seed), reference)
    u, z = schedules.draws(seed, total)
    order = np.random.default_rng(0).permutation(total)[:300]
    assert all(schedules.draw(seed, int(update)) == (u[update], z[update]) for update in order)
    assert np.array_equal(schedule.depths(total // 2, seed)[:100], reference[:100]) or "curriculum" in text
    assert not np.array_equal(schedule.depths(total, seed + 1), reference)


def test_expected_cost_matches_mean_depths():
    schedule = parse_schedule("fixed_first:k0=4,switch=0.8,finish=uniform")
    assert schedule.expected_cost(100, lambda k: k) == pytest.approx(80 * 4 + 20 * 8.5)
    assert schedule.expected_cost(100, lambda k: k**2) == pytest.approx(
        80 * 16 + 20 * np.mean(np.arange(1, 17) ** 2)
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("fixed:0", "depth must be a positive integer, got 0"),
        ("fixed:-3", "depth must be a positive integer, got -3"),
        ("fixed:x", "depth='x' is not an integer"),
        ("uniform:0-16", "uniform lower depth must be a positive integer, got 0"),
        ("uniform:9-3", "uniform range 9-3 is empty"),
        ("uniform:1to16", "must look like LO-HI"),
        ("fixed_first:k0=20,switch=0.8,finish=uniform", "k0=20 lies outside the finish's depths 1-16"),
        ("fixed_first:k0=1,switch=0.8,finish=uniform,range=2-16", "k0=1 lies outside"),
        ("fixed_first:k0=0,switch=0.8,finish=uniform", "k0 must be a positive integer, got 0"),
        ("fixed_first:k0=4,switch=1.2,finish=uniform", "switch must be a number in (0, 1), got 1.2"),
        ("fixed_first:k0=4,switch=0,finish=uniform", "switch must be a number in (0, 1), got 0.0"),
        ("fixed_first:k0=4,switch=1,finish=uniform", "switch must be a number in (0, 1), got 1.0"),
        ("fixed_first:k0=4,switch=0.8,finish=cosine", "unknown finish 'cosine'"),
        ("fixed_first:k0=4,finish=uniform", "missing switch="),
        ("fixed_first:k0=4,switch=0.8,colour=red", "unknown key(s): colour"),
        ("fixed_first:k0=4,switch=0.8,k0=2", "'k0' is given twice"),
        ("fixed_first:k0=4,switch", "'switch' must look like key=value"),
        ("poisson_lognormal:mean=-2", "mean must be a number in (0, 1024], got -2.0"),
        ("poisson_lognormal:mean=8,sigma=-1", "sigma must be a non-negative finite number, got -1.0"),
        ("poisson_lognormal:mean=8,cap=0", "cap must be a positive integer, got 0"),
        ("curriculum:mean=8,warmup=1.5", "warmup must be a number in (0, 1], got 1.5"),
        ("curriculum:mean=8,warmup=0.5,shape=cubic", "shape must be linear or 1-sqrt"),
        ("curriculum:mean=0.5,warmup=0.5", "mean must be a number in [1, 1024], got 0.5"),
        ("zigzag:3", "unknown schedule 'zigzag'"),
        ("", "empty schedule"),
    ],
)
def test_bad_schedules_name_the_problem(text, message):
    with pytest.raises(ValueError) as info:
        parse_schedule(text)
    assert isinstance(info.value, BiosrecallError)
    assert message in str(info.value)


def test_bad_calls():
    schedule = Uniform()
    with pytest.raises(BiosrecallError, match="total updates"):
        schedule.depths(0, seed=0)
    with pytest.raises(BiosrecallError, match="seed"):
        schedule.depths(5, seed=-1)
