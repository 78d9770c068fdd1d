"""Compute accounting: the one modeled-FLOP account, depth schedules, and matched-budget planning.

    from biosrecall.compute import parse_schedule, plan_run, update_flops
    plan = plan_run(cfg, parse_schedule("uniform:1-16"), tokens_per_update=8192, budget=1e15, seed=0)

`flops.py` prices updates, `schedules.py` says which depth each update uses (from the seeded draws and
exact tables of `depth_draws.py`), `planner.py` sizes runs.
"""

from biosrecall.compute.flops import (
    FlopBreakdown,
    forward_flops_per_token,
    param_counts,
    recurrent_ratio,
    train_flops_per_token,
    update_flops,
)
from biosrecall.compute.planner import Plan, budget_of, expected_flops, plan_run, saving_vs_uniform
from biosrecall.compute.schedules import Schedule, parse_schedule

__all__ = [
    "FlopBreakdown",
    "Plan",
    "Schedule",
    "budget_of",
    "expected_flops",
    "forward_flops_per_token",
    "param_counts",
    "parse_schedule",
    "plan_run",
    "recurrent_ratio",
    "saving_vs_uniform",
    "train_flops_per_token",
    "update_flops",
]
