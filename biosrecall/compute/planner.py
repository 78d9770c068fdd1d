"""Matched-FLOP planning: how many updates of a schedule fit a modeled-FLOP budget.

    budget = budget_of(cfg, "fixed:4", updates=3000, tokens_per_update=8192, seed=0)
    plan = plan_run(cfg, "uniform:1-16", tokens_per_update=8192, budget=budget, seed=0)
    plan.updates, plan.total_flops, plan.saving_vs_uniform

A plan is exact for its seed: it draws the run's real depths (`Schedule.depths`, which for
fixed-first and the curriculum depend on the run length through the switch and the ramp), prices each
update with `flops.update_flops`, and returns the largest N whose realised total fits, in the sense
cost(N) <= budget < cost(N + 1); the leftover is therefore less than one update. Realised cost can dip
by a few updates' worth when a longer run moves its switch later, so N is found by bracketing and
bisection over that boundary (vectorised cost sums; budgets of 10^5 updates plan in a few seconds). A
budget's update count is estimated in closed form first, and one beyond `MAX_UPDATES` is refused before
any depth is drawn.
A plan's `expected_flops` prices the schedule's exact depth distributions instead, free of sampling
noise, and the saving against uniform U{1..16} at the same number of updates (`saving_vs_uniform`) is
computed from those.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from biosrecall.compute.flops import check_tokens_per_update, train_flops_table
from biosrecall.compute.schedules import MAX_UPDATES, Schedule, Uniform, parse_schedule
from biosrecall.errors import BiosrecallError
from biosrecall.model.config import ModelConfig
from biosrecall.numbers import check_number, rates

REFERENCE = Uniform(1, 16)
# What a plan holds per update: the cached uniform and normal draws, the depth and the FLOPs (8 bytes each).
_BYTES_PER_UPDATE = 32


@dataclass(frozen=True, eq=False)  # holds arrays: compare fields explicitly
class Plan:
    """A schedule's run sized to a budget: its depths, their FLOPs and the comparison to uniform."""

    schedule: str
    """Canonical schedule text."""
    updates: int
    """Number of optimizer updates that fit the budget."""
    switch_update: int | None
    """First update of the finishing phase (fixed-first), else None."""
    depths: np.ndarray
    """Depth K of every update (int64 [updates])."""
    flops_per_update: np.ndarray
    """Modeled training FLOPs of every update (float64 [updates])."""
    total_flops: float
    """Sum of `flops_per_update`: what the run will spend (<= budget)."""
    budget: float
    """The FLOP budget the plan was sized to."""
    tokens_per_update: int
    """Tokens in one update (batch x sequence length)."""
    seq_len: int
    """Sequence length the attention FLOPs were counted with."""
    seed: int
    """Seed of the depth draws."""
    expected_flops: float
    """Expected FLOPs of `updates` updates of this schedule (over the depth distributions)."""
    uniform_expected_flops: float
    """Expected FLOPs of uniform U{1..16} over the same number of updates."""

    @property
    def saving_vs_uniform(self) -> float:
        """Fraction of modeled compute saved against uniform U{1..16} at the same number of updates."""
        return 1.0 - self.expected_flops / self.uniform_expected_flops

    def summary(self) -> dict[str, Any]:
        """JSON-safe scalars (no per-update arrays), e.g. for a run's config.json: the fields, the
        saving, the mean depth and the tokens of the whole run."""
        left_out = ("depths", "flops_per_update", "uniform_expected_flops")
        scalars = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in left_out}
        return {
            **scalars,
            "saving_vs_uniform": self.saving_vs_uniform,
            "mean_depth": float(self.depths.mean()),
            "tokens": self.tokens_per_update * self.updates,
        }


class _UpdateCost:
    """Training FLOPs of one update by depth, a lookup table grown on demand."""

    def __init__(self, config: ModelConfig, tokens: int, seq_len: int | None, backprop_depth: int | None):
        self.args = (config, seq_len, backprop_depth)
        self.tokens = check_tokens_per_update(tokens)
        self.table = np.zeros(1)

    def __call__(self, depths: np.ndarray) -> np.ndarray:
        top = int(np.max(depths))
        if top >= len(self.table):
            config, seq_len, keep = self.args
            self.table = self.tokens * train_flops_table(config, max(top, 2 * len(self.table)), seq_len, keep)
        return self.table[depths]


def _schedule(schedule: Schedule | str) -> Schedule:
    return parse_schedule(schedule) if isinstance(schedule, str) else schedule


def saving_vs_uniform(
    config: ModelConfig,
    schedule: Schedule | str,
    updates: int,
    *,
    seq_len: int | None = None,
    backprop_depth: int | None = None,
) -> float:
    """Fraction of expected modeled compute saved against uniform U{1..16} at the same update count."""
    cost = _UpdateCost(config, 1, seq_len, backprop_depth)
    return 1.0 - _schedule(schedule).expected_cost(updates, cost) / REFERENCE.expected_cost(updates, cost)


def budget_of(
    config: ModelConfig,
    schedule: Schedule | str,
    updates: int,
    tokens_per_update: int,
    seed: int,
    *,
    seq_len: int | None = None,
    backprop_depth: int | None = None,
) -> float:
    """The realised FLOPs `schedule` spends in `updates` updates with this seed."""
    cost = _UpdateCost(config, tokens_per_update, seq_len, backprop_depth)
    return float(cost(_schedule(schedule).depths(updates, seed)).sum())


def plan_run(
    config: ModelConfig,
    schedule: Schedule | str,
    tokens_per_update: int,
    budget: float,
    seed: int,
    *,
    seq_len: int | None = None,
    backprop_depth: int | None = None,
) -> Plan:
    """The largest run of `schedule` whose realised modeled FLOPs fit `budget` (see the module doc)."""
    schedule = _schedule(schedule)
    cost = _UpdateCost(config, tokens_per_update, seq_len, backprop_depth)
    budget = float(check_number("budget", budget, rates(low_open=True)))  # in FLOPs

    def spend(n: int) -> float:
        return float(cost(schedule.depths(n, seed)).sum())

    first = spend(1)
    if first > budget:
        raise BiosrecallError(
            f"budget {budget:.4g} FLOPs is smaller than one update of {schedule.spec} ({first:.4g} FLOPs)"
        )
    per_update = schedule.expected_cost(1000, cost) / 1000  # the mean is flat in N: a good first guess
    estimate = budget / per_update
    if estimate > MAX_UPDATES:  # refused before a depth is drawn, with the plan's size
        count = f"{int(estimate):,}" if estimate < 1e15 else f"{estimate:.3g}"
        raise BiosrecallError(
            f"budget {budget:.4g} FLOPs buys {schedule.spec} at {per_update:.4g} FLOPs per update: about "
            f"{count} updates, beyond the planner's limit of {MAX_UPDATES:,} (a plan holds "
            f"{_BYTES_PER_UPDATE} bytes per update: {estimate * _BYTES_PER_UPDATE / 2**30:.3g} GiB)"
        )
    updates = _largest_fitting(
        spend, budget, max(1, int(budget / per_update)), _max_update_cost(schedule, cost)
    )
    return _plan_of(schedule, updates, cost, budget, config, seq_len, seed)


def plan_updates(
    config: ModelConfig,
    schedule: Schedule | str,
    updates: int,
    tokens_per_update: int,
    seed: int,
    *,
    seq_len: int | None = None,
    backprop_depth: int | None = None,
) -> Plan:
    """Exactly `updates` updates of `schedule` (token-matched runs); the budget is their realised total."""
    schedule = _schedule(schedule)
    cost = _UpdateCost(config, tokens_per_update, seq_len, backprop_depth)
    return _plan_of(schedule, updates, cost, None, config, seq_len, seed)


def _plan_of(schedule: Schedule, updates: int, cost, budget, config, seq_len, seed) -> Plan:
    depths = schedule.depths(updates, seed)
    flops = cost(depths)
    total = float(flops.sum())
    return Plan(
        schedule=schedule.spec,
        updates=updates,
        switch_update=schedule.switch_update(updates),
        depths=depths,
        flops_per_update=flops,
        total_flops=total,
        budget=total if budget is None else budget,
        tokens_per_update=int(cost.tokens),
        seq_len=config.context_length if seq_len is None else int(seq_len),
        seed=int(seed),
        expected_flops=schedule.expected_cost(updates, cost),
        uniform_expected_flops=REFERENCE.expected_cost(updates, cost),
    )


def _max_update_cost(schedule: Schedule, cost) -> float:
    """An upper bound on one update's FLOPs (depth capped at 64 for uncapped Poisson tails)."""
    deepest = schedule.max_depth or 64
    return float(cost(np.array([deepest]))[0])


def _largest_fitting(spend, budget: float, guess: int, max_update_cost: float) -> int:
    """The largest N with spend(N) <= budget; spend(1) fits.

    Realised cost is not monotone in N for every schedule: lengthening a fixed-first run moves its
    switch, turning a finishing-phase update into a cheaper fixed one, so spend(N + 1) can be below
    spend(N). A bracket-and-bisect finds *a* crossing; the scan after it checks the larger N whose
    cost could still dip under the budget (a dip never exceeds one update's cost per step).
    """
    step = max(1, guess // 64)
    if spend(guess) <= budget:
        lo, hi = guess, guess + step
        while spend(hi) <= budget:
            lo, step = hi, 2 * step
            hi = lo + step
    else:
        lo, hi = max(1, guess - step), guess
        while spend(lo) > budget:
            hi, step = lo, 2 * step
            lo = max(1, hi - step)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if spend(mid) <= budget:
            lo = mid
        else:
            hi = mid
    best, n = lo, lo + 1
    while (cost := spend(n)) <= budget + 2 * max_update_cost:
        if cost <= budget:
            best = n
        n += 1
    return best
