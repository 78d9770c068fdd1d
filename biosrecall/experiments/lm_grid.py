"""The language-model study's grid: the paper's 200M schedules (`scripts/lm/sweep-200m.toml`) by name.

    GRID["ff-k2-s0.67-uniform"]    # "fixed_first:k0=2,switch=0.67,finish=uniform"

Shared by the study that trains and judges them (`biosrecall.experiments.lm_study`), the depth study
that reuses some (`biosrecall.experiments.depth_study`) and the archive that copies a finished study
(`biosrecall.experiments.study_archive`, which must not import torch).
"""

from __future__ import annotations

UNIFORM, MATCHED, FIXED_K4, CURRICULUM = "uniform", "uniform-matched-k4-s0.67", "fixed-k4", "curriculum"
FINISHES = ("uniform", "poisson_lognormal")
RECORD = "lm_study.json"  # the study's resolved settings, in its output folder


def fixed_first_name(k0: int, switch: float, finish: str) -> str:
    return f"ff-k{k0}-s{switch:g}-{finish}"


# Grid item -> its depth schedule, in the order of scripts/lm/sweep-200m.toml (the legend order).
GRID: dict[str, str] = {UNIFORM: "uniform:1-16"}
GRID.update(
    {
        fixed_first_name(k0, switch, finish): f"fixed_first:k0={k0},switch={switch:g},finish={finish}"
        for finish in FINISHES
        for k0 in (1, 2, 4)
        for switch in (0.67, 0.8)
    }
)
GRID[CURRICULUM] = "curriculum:mean=8,warmup=0.75,shape=1-sqrt"  # as in `biosrecall flops`
GRID[MATCHED] = "uniform:1-16"  # for as many updates as K0=4 / 67%'s modeled compute buys
GRID[FIXED_K4] = "fixed:4"
MATCHED_TO = fixed_first_name(4, 0.67, "uniform")
SERVING = (1, 16)  # the serving depths the paper's mean NLL averages over
# The update diagnostic (the paper's Figure 4): K0=4 / 67%'s switch checkpoint, continued 16 uniform
# updates, then a K=16 update against a K=4 (its K0) one of the same size.
DIAGNOSED, AFTER_UNIFORM, DIAGNOSE = MATCHED_TO, 16, "diagnose"
