"""Tests of matched-FLOP planning: budgets are spent to within one update, and uniform gets fewer updates.

pytest -q tests/test_planner.py
"""

from __future__ import annotations

import numpy as np
import pytest

from biosrecall.compute.flops import update_flops
from biosrecall.compute.planner import budget_of, plan_run, saving_vs_uniform
from biosrecall.compute.schedules import parse_schedule
from biosrecall.errors import BiosrecallError
from biosrecall.model import get_preset

CFG = get_preset("bios-cpu")
TOKENS = 32 * 128
TRIO = ("fixed:4", "fixed_first:k0=4,switch=0.8,finish=uniform", "uniform:1-16")


def test_figure1_trio_spends_one_budget():
    budget = budget_of(CFG, "fixed:4", 3000, TOKENS, seed=0, seq_len=128)
    plans = {spec: plan_run(CFG, spec, TOKENS, budget, seed=0, seq_len=128) for spec in TRIO}
    for spec, plan in plans.items():
        assert plan.total_flops <= budget, spec
        assert budget - plan.total_flops < plan.flops_per_update.max(), spec
        assert plan.budget == budget and plan.tokens_per_update == TOKENS and plan.seq_len == 128
    fixed, first, uniform = (plans[spec] for spec in TRIO)
    assert fixed.updates == 3000
    assert uniform.updates < first.updates < fixed.updates
    assert first.switch_update == round(0.8 * first.updates) and fixed.switch_update is None


def test_plan_is_the_seeded_run():
    schedule = parse_schedule("curriculum:mean=8,warmup=0.5,shape=1-sqrt")
    budget = 2e14
    plan = plan_run(CFG, schedule, TOKENS, budget, seed=3)
    assert len(plan.depths) == len(plan.flops_per_update) == plan.updates
    assert np.array_equal(plan.depths, schedule.depths(plan.updates, 3))
    for k in (1, int(plan.depths.max())):
        assert plan.flops_per_update[plan.depths == k][0] == update_flops(CFG, k, TOKENS)
    assert plan.total_flops == pytest.approx(plan.flops_per_update.sum())
    assert budget_of(CFG, schedule, plan.updates + 1, TOKENS, 3) > budget >= plan.total_flops
    per_update = np.vectorize(lambda k: update_flops(CFG, int(k), TOKENS))  # the exact distributions'
    assert plan.expected_flops == pytest.approx(schedule.expected_cost(plan.updates, per_update))
    assert plan.summary()["updates"] == plan.updates and plan.summary()["schedule"] == schedule.spec


@pytest.mark.parametrize("spec", ["uniform:1-16", "fixed:2"])
def test_budget_of_round_trips(spec):
    budget = budget_of(CFG, spec, 777, TOKENS, seed=1)
    assert plan_run(CFG, spec, TOKENS, budget, seed=1).updates == 777


def test_savings_against_uniform():
    assert saving_vs_uniform(CFG, "uniform:1-16", 1000) == pytest.approx(0.0)
    assert saving_vs_uniform(CFG, "fixed:16", 1000) < 0
    plan = plan_run(CFG, "fixed_first:k0=4,switch=0.8,finish=uniform", TOKENS, 1e14, seed=0)
    assert plan.saving_vs_uniform == pytest.approx(
        saving_vs_uniform(CFG, "fixed_first:k0=4,switch=0.8,finish=uniform", plan.updates)
    )
    assert 0 < plan.saving_vs_uniform < 0.8 * 4.5 / 8.5  # below the head-free, attention-free bound


def test_planning_a_long_run_fills_its_budget():
    # No wall-time bound here: on a shared machine it failed under load (13.6 s against 10).
    budget = budget_of(CFG, "uniform:1-16", 100_000, TOKENS, seed=9)
    plan = plan_run(CFG, "fixed_first:k0=2,switch=0.67,finish=poisson_lognormal", TOKENS, budget, seed=9)
    assert plan.updates > 100_000 and budget - plan.total_flops < plan.flops_per_update.max()


def test_bad_budgets():
    one = update_flops(CFG, 4, TOKENS)
    with pytest.raises(BiosrecallError, match="smaller than one update"):
        plan_run(CFG, "fixed:4", TOKENS, one / 2, seed=0)
    assert plan_run(CFG, "fixed:4", TOKENS, one, seed=0).updates == 1
    for bad in (0, -5.0, float("nan")):
        with pytest.raises(BiosrecallError, match="budget"):
            plan_run(CFG, "fixed:4", TOKENS, bad, seed=0)
    with pytest.raises(BiosrecallError, match="tokens per update"):
        plan_run(CFG, "fixed:4", 0, 1e15, seed=0)
    with pytest.raises(BiosrecallError, match="unknown schedule"):
        plan_run(CFG, "sometimes:3", TOKENS, 1e15, seed=0)
