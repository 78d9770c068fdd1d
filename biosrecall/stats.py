"""Seed statistics: a mean and a 95% interval over runs that differ only in their seed.

    seed_interval([20.1, 18.4, 22.0])            # SeedInterval(mean=20.17, low=15.7, high=24.6, n=3)
    aggregate_seeds(table, ["run", "depth"], ["bits"])   # one row per group: bits, bits_low, bits_high, n_seeds
    check_seed_replicates({"s0": config0, "s1": config1})  # BiosrecallError naming a field that differs

The interval is Student's t over seeds: mean +- t(0.975, n-1) * sd / sqrt(n). Seeds are the
independent unit here (a seed changes the weights, the batches and the depth draws together), and with
3 seeds a bootstrap would only ever resample 10 distinct means, so it understates the spread; the t
interval is wide at n=3 (t = 4.30) and says so honestly. People are not resampled: every seed scores
the same people, so their variation is inside each seed's number already. One seed has no interval
(low = high = NaN), which the claims read as "inconclusive".

`seeds_to_decide(mean, sd, threshold)` is the planning side of the same interval: the seed count at
which it would exclude the threshold if the observed mean and per-seed sd held (`sd_from_interval`
recovers the sd from a written interval).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd

from biosrecall.errors import BiosrecallError

SEED_COLUMN = "seed"
SEEDS_CAP = 1000  # seeds_to_decide searches no further: a claim needing more is not one to plan for
# Two-sided 95% Student t critical values t(0.975, df) for df = 1..30 (standard tables).
_T975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip


@dataclass(frozen=True)
class SeedInterval:
    mean: float
    low: float
    high: float
    n: int


def t_critical(df: int) -> float:
    """t(0.975, df); beyond the table, the Cornish-Fisher expansion around 1.96 (error < 1e-3)."""
    if df < 1:
        raise ValueError("a t interval needs at least two values")
    if df <= len(_T975):
        return _T975[df - 1]
    z = 1.959964
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)


def seed_interval(values: Iterable[float]) -> SeedInterval:
    """Mean and 95% t interval of per-seed values; NaN values are dropped, one value has no interval."""
    array = np.asarray([v for v in values if not math.isnan(v)], dtype=float)
    n = int(array.size)
    if n == 0:
        return SeedInterval(math.nan, math.nan, math.nan, 0)
    mean = float(array.mean())
    if n == 1:
        return SeedInterval(mean, math.nan, math.nan, 1)
    half = t_critical(n - 1) * float(array.std(ddof=1)) / math.sqrt(n)
    return SeedInterval(mean, mean - half, mean + half, n)


def sd_from_interval(low: float, high: float, n: int) -> float:
    """The per-seed sd behind a `seed_interval` of `n` values (half-width t(0.975, n-1) * sd / sqrt(n))."""
    return (high - low) / 2 * math.sqrt(n) / t_critical(n - 1)


def seeds_to_decide(mean: float, sd: float, threshold: float, cap: int = SEEDS_CAP) -> int | None:
    """The smallest n >= 2 with |mean - threshold| > t(0.975, n-1) * sd / sqrt(n): the seed count whose
    95% interval would exclude `threshold` if this mean and per-seed sd held. None when no n up to
    `cap` does (always when mean == threshold). A planning estimate: new seeds move the mean and sd.

    The right side shrinks as n grows, so the first n that passes is the answer and every larger one
    passes too; an interval that already excludes the threshold gives its own n or a smaller one.
    """
    gap = abs(mean - threshold)
    for n in range(2, cap + 1):
        if gap > t_critical(n - 1) * sd / math.sqrt(n):
            return n
    return None


def interval_text(mean: float, low: float, high: float, fmt: str = "{:.1f}") -> str:
    """A seed interval for a table: "mean [low, high]" in `fmt`, the mean alone without one (one seed)."""
    if pd.isna(low):
        return fmt.format(mean)
    return f"{fmt.format(mean)} [{fmt.format(low)}, {fmt.format(high)}]"


def aggregate_seeds(table: pd.DataFrame, keys: list[str], values: list[str]) -> pd.DataFrame:
    """One row per `keys` group: for each value column its mean (same name), `<v>_low`, `<v>_high`,
    and `n_seeds`. Each row of `table` is one seed's value; groups keep their first-seen order."""
    rows = []
    for group, part in table.groupby(keys, sort=False, dropna=False):
        row = dict(zip(keys, group if isinstance(group, tuple) else (group,), strict=True))
        n = 0
        for value in values:
            interval = seed_interval(part[value].astype(float))
            row.update({value: interval.mean, f"{value}_low": interval.low, f"{value}_high": interval.high})
            n = max(n, interval.n)
        row["n_seeds"] = n
        rows.append(row)
    columns = [*keys, *(c for v in values for c in (v, f"{v}_low", f"{v}_high")), "n_seeds"]
    return pd.DataFrame(rows, columns=columns)


def check_seed_replicates(configs: Mapping[str, Mapping], ignore: Iterable[str] = ()) -> None:
    """Refuse to aggregate runs (label -> resolved config) that differ in anything but the seed.

    `ignore` names settings that do not change results (threads, device, output paths). Nested
    settings are compared whole and named by their top-level key.
    """
    skip = {SEED_COLUMN, *ignore}
    items = list(configs.items())
    first_label, first = items[0]
    for label, config in items[1:]:
        for key in dict.fromkeys([*first, *config]):
            if key in skip or first.get(key) == config.get(key):
                continue
            raise BiosrecallError(
                f"cannot aggregate {first_label} and {label} over seeds: they differ in {key} "
                f"({first.get(key)!r} against {config.get(key)!r}), not only in the seed"
            )
