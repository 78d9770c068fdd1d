"""Seed statistics: the t interval on values with a known answer, the aggregation layout, replicate checks."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from biosrecall.errors import BiosrecallError
from biosrecall.stats import aggregate_seeds, check_seed_replicates, seed_interval, t_critical


def test_t_interval_of_three_seeds_matches_the_textbook_formula():
    # mean 20, sd 2 (values 18, 20, 22): half-width = 4.303 * 2 / sqrt(3) = 4.9687.
    interval = seed_interval([18.0, 20.0, 22.0])
    assert interval.n == 3 and interval.mean == pytest.approx(20.0)
    assert interval.high - interval.mean == pytest.approx(4.303 * 2 / math.sqrt(3), abs=1e-9)
    assert interval.low == pytest.approx(2 * 20.0 - interval.high)


def test_t_critical_values_and_the_large_sample_limit():
    assert t_critical(1) == pytest.approx(12.706) and t_critical(2) == pytest.approx(4.303)
    assert t_critical(30) == pytest.approx(2.042, abs=1e-3)
    assert t_critical(40) == pytest.approx(2.021, abs=1e-3)  # beyond the table: the expansion
    assert t_critical(10_000) == pytest.approx(1.960, abs=1e-3)
    with pytest.raises(ValueError):
        t_critical(0)


def test_interval_covers_the_true_mean_about_95_percent_of_the_time():
    rng = np.random.default_rng(0)
    covered = 0
    for _ in range(4000):
        interval = seed_interval(rng.normal(5.0, 3.0, size=3))
        covered += interval.low <= 5.0 <= interval.high
    assert 0.93 < covered / 4000 < 0.97


def test_one_value_has_no_interval_and_nan_values_are_dropped():
    single = seed_interval([7.0, math.nan])
    assert (single.mean, single.n) == (7.0, 1) and math.isnan(single.low) and math.isnan(single.high)
    assert seed_interval([]).n == 0


def test_aggregate_seeds_keeps_group_order_and_reports_every_value():
    table = pd.DataFrame(
        {
            "run": ["b", "b", "b", "a", "a"],
            "depth": [1, 1, 1, 1, 1],
            "bits": [18.0, 20.0, 22.0, 5.0, 7.0],
            "other": [1.0, 1.0, 1.0, 2.0, 2.0],
        }
    )
    out = aggregate_seeds(table, ["run", "depth"], ["bits", "other"])
    assert list(out["run"]) == ["b", "a"] and list(out["n_seeds"]) == [3, 2]
    assert out.loc[0, "bits"] == pytest.approx(20.0)
    assert out.loc[0, "bits_high"] == pytest.approx(20.0 + 4.303 * 2 / math.sqrt(3))
    assert out.loc[1, "bits_low"] == pytest.approx(6.0 - 12.706 * math.sqrt(2) / math.sqrt(2))
    assert out.loc[0, "other_low"] == pytest.approx(1.0)  # no spread: a zero-width interval
    assert list(out.columns) == [
        "run", "depth", "bits", "bits_low", "bits_high", "other", "other_low", "other_high", "n_seeds",
    ]  # fmt: skip


def test_replicates_may_differ_in_seed_and_ignored_settings_only():
    base = {"seed": 0, "lr": 0.01, "threads": 2}
    check_seed_replicates({"s0": base, "s1": {**base, "seed": 1, "threads": 1}}, ignore=("threads",))
    with pytest.raises(BiosrecallError, match=r"differ in lr \(0.01 against 0.003\)"):
        check_seed_replicates({"s0": base, "s1": {**base, "seed": 1, "lr": 0.003}})
