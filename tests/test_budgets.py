"""The budget sweep: which runs it trains (trunks before their branches, each branch at the last update
it shares with its trunk), compute-to-target on crafted curves (interpolation on log FLOPs, intervals
over seeds, "not reached"), the compute claim, branch against independent runs, the Markdown tables,
and bad input.

    pytest -q tests/test_budgets.py
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from biosrecall.cli import main
from biosrecall.experiments.budget_results import (
    MODES_COLUMNS,
    TARGETS_COLUMNS,
    budget_curve,
    compute_to_target,
    flops_to_target,
    mode_agreement,
    saving_claim,
)
from biosrecall.experiments.budgets import budget_runs
from biosrecall.experiments.study import (
    FIXED_FIRST,
    FIXED_K4,
    UNIFORM,
    UPDATE_MATCHED,
    StudyOptions,
    scaled_budget,
)
from biosrecall.outputs import markdown_columns
from biosrecall.train.config import TrainConfig

BASE = TrainConfig(lr=1e-2, seed=0, budget_of="fixed:4:100")
TASKS = {seed: {"data": "data", "preset": "bios-tiny"} for seed in (0, 1)}

LR = {FIXED_K4: 1e-2, FIXED_FIRST: 1e-2, UNIFORM: 1e-2}


@dataclass
class FakePlan:
    updates: int
    switch_update: int | None


def planner(run):
    """Plans like the real ones in shape: fixed K=4 takes 100 updates per budget unit, fixed-first 90
    (switching at 80%), uniform 50; the update-matched control its given updates."""
    per_unit = {FIXED_K4: 100, FIXED_FIRST: 90, UNIFORM: 50}
    name = run.labels["name"]
    updates = run.config.updates or round(per_unit[name] * run.labels["budget"])
    return FakePlan(updates, round(0.8 * updates) if name == FIXED_FIRST else None)


def by_label(runs):
    return {run.labels["label"]: run for run in runs}


def branch_of(run):
    return (run.task["from"], run.task["at_update"]) if "from" in run.task else None


def test_branch_mode_trains_each_trunk_first_and_branches_where_it_stops_sharing():
    study = StudyOptions(seeds=(0,), budgets=(0.5, 1, 2), update_matched=True)
    runs = budget_runs(study, BASE, TASKS, LR, planner, warmup_updates=5)
    labelled = by_label(runs)
    assert len(runs) == 12
    assert all(run.config.lr_schedule == "wsd" and run.config.warmup_updates == 5 for run in runs)
    fixed_trunk, uniform_trunk = labelled["fixed_k4_wsd_b2"], labelled[f"{UPDATE_MATCHED}_wsd_b2"]
    assert runs.index(fixed_trunk) == 0 and branch_of(fixed_trunk) is None
    assert fixed_trunk.name == "seed0/fixed_k4_wsd_b2" and fixed_trunk.config.budget_of == "fixed:4:200"
    # fixed K=4 at 1x: 100 updates, its decay starts at 80; fixed-first at 1x: 90 updates, switch at 72.
    assert branch_of(labelled["fixed_k4_wsd_b1"]) == (fixed_trunk.name, 80)
    assert branch_of(labelled["fixed_first_k4_80_wsd_b1"]) == (fixed_trunk.name, 72)
    assert fixed_trunk.config.keep_updates == (36, 40, 72, 80, 144)
    # The update-matched control at 2x (200 updates) is the longest uniform run, so it is the trunk.
    assert uniform_trunk.config.updates == 200 and branch_of(uniform_trunk) is None
    assert branch_of(labelled["uniform_1_16_wsd_b2"]) == (uniform_trunk.name, 80)
    for run in runs:
        if branch_of(run) is not None:
            parent = next(r for r in runs if r.name == run.task["from"])
            assert (
                runs.index(parent) < runs.index(run) and run.task["at_update"] in parent.config.keep_updates
            )


def test_independent_mode_reuses_the_main_runs_at_the_base_budget():
    study = StudyOptions(seeds=(0, 1), budgets=(0.5, 1), budget_mode="independent")
    runs = budget_runs(study, BASE, TASKS, LR, planner, warmup_updates=5)
    labels = [run.labels["label"] for run in runs]
    assert labels.count("fixed_k4") == 2 and "fixed_k4_b0.5" in labels
    assert all(branch_of(run) is None and run.config.lr_schedule == "cosine" for run in runs)


def test_a_multiple_scales_the_budget_it_is_given():
    assert scaled_budget(TrainConfig(budget_of="fixed:4:800"), 0.25).budget_of == "fixed:4:200"
    assert scaled_budget(TrainConfig(budget=2e12), 2).budget == 4e12


def curve_rows(name: str, seed: int, bits: list[float], flops=(1e12, 1e13, 1e14)) -> list[dict]:
    return [
        {
            "name": name,
            "seed": seed,
            "budget_multiple": m,
            "flops": f,
            "bits_1_16": b,
            "bits_1_64": b,
            "ceiling_bits": 40.0,
        }
        for m, f, b in zip((0.5, 1, 2), flops, bits, strict=True)
    ]


def test_compute_to_target_interpolates_on_log_flops_with_an_interval_over_seeds():
    curve = pd.DataFrame(
        curve_rows(FIXED_FIRST, 0, [10, 20, 30])
        + curve_rows(FIXED_FIRST, 1, [10, 30, 35])
        + curve_rows(UNIFORM, 0, [5, 10, 20])
        + curve_rows(UNIFORM, 1, [10, 15, 25])
    )
    targets = compute_to_target(curve).set_index(["kind", "subject", "target", "depths"])
    half = targets.loc[("flops", FIXED_FIRST, 0.5, "K=1..16")]
    # 20 bits (50% of 40): seed 0 exactly at 1e13, seed 1 halfway (in log FLOPs) from 1e12 to 1e13.
    assert half["value"] == pytest.approx(10**12.75) and half["n_seeds"] == 2
    assert half["low"] < half["value"] < half["high"]
    assert math.isnan(targets.loc[("flops", FIXED_FIRST, 0.9, "K=1..16"), "value"])
    assert targets.loc[("flops", FIXED_FIRST, 0.9, "K=1..16"), "note"] == "not reached within the sweep"
    # Savings are paired by seed: seed 0 needs 1e13 against 1e14, seed 1 10**12.5 against 10**13.5.
    saving = targets.loc[("saving", f"{FIXED_FIRST} vs {UNIFORM}", 0.5, "K=1..16")]
    assert saving["value"] == pytest.approx(0.9) and saving["n_seeds"] == 2
    row = saving_claim(compute_to_target(curve))
    assert row["verdict"] == "inconclusive" and row["n_seeds"] == 0  # 90%: neither schedule reached it
    assert saving_claim()["verdict"] == "not measured"  # no sweep


def test_a_target_met_by_the_smallest_budget_is_an_upper_bound():
    points = pd.DataFrame(curve_rows(FIXED_K4, 0, [25, 30, 35]))
    assert flops_to_target(points, "bits_1_16", 20.0) == (
        1e12,
        "reached at the smallest budget (an upper bound)",
    )


def test_the_compute_claim_is_judged_from_the_saving_interval():
    seeds = range(3)
    curve = pd.DataFrame(
        [r for s in seeds for r in curve_rows(FIXED_FIRST, s, [20, 37, 39 + 0.1 * s])]
        + [r for s in seeds for r in curve_rows(UNIFORM, s, [10, 20, 37 + 0.2 * s])]
    )
    row = saving_claim(compute_to_target(curve))
    assert row["verdict"] == "holds" and row["n_seeds"] == 3 and row["low"] > 0


def test_budget_curve_summarises_each_final_checkpoint():
    depths = np.arange(1, 65)
    bits = np.where(depths <= 16, 30.0, 10.0)
    curves = pd.DataFrame(
        {"name": FIXED_FIRST, "seed": 0, "budget_multiple": 1.0, "attribute": "all", "depth": depths,
         "bits": bits, "flops": 5e12, "update": 300, "ceiling_bits": 33.4}
    )  # fmt: skip
    row = budget_curve(curves).iloc[0]
    assert (row["bits_1_16"], row["bits_17_64"], row["worst_bits"], row["updates"]) == (30.0, 10.0, 10.0, 300)


@pytest.mark.parametrize(
    ("value", "named"),
    [
        ("0", "'--budgets': budget multiples must be a positive finite number, got 0.0"),
        ("-1,2", "'--budgets': budget multiples must be a positive finite number, got -1.0"),
        ("1,1", "repeats"),
        ("a", "comma-separated budget multiples such as 0.5,1,2"),
    ],
)
def test_bad_budgets_are_one_line_exit_2_nothing_written(tmp_path: Path, capsys, value, named):
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as exit_info:
        main(["figure1", "--preset", "quick", "--out", str(out), "--quiet", "--budgets", value])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1 and err.startswith("error: ") and named in err
    assert list(tmp_path.iterdir()) == []


def test_runs_share_a_trunk_only_at_the_same_learning_rate():
    """A grid that gives fixed-first another rate than fixed K=4 gives it a fixed-depth trunk of its own."""
    study = StudyOptions(seeds=(0,), budgets=(1, 2))
    runs = budget_runs(study, BASE, TASKS, {**LR, FIXED_FIRST: 3e-3}, planner, warmup_updates=5)
    trunk = next(run for run in runs if run.labels["role"] == "trunk")
    assert (trunk.config.schedule, trunk.config.lr, trunk.config.updates, trunk.labels["label"]) == (
        "fixed:4",
        3e-3,
        180,
        "fixed_k4_trunk_lr0.003_wsd",
    )
    assert trunk.config.keep_updates == (72, 144)
    for run in runs:
        if run.labels["name"] == FIXED_FIRST:
            assert branch_of(run)[0] == trunk.name and run.config.lr == 3e-3
        elif run.labels["name"] == FIXED_K4 and branch_of(run) is not None:
            assert branch_of(run)[0] == "seed0/fixed_k4_wsd_b2"


def test_a_saving_from_an_upper_bound_says_so():
    curve = pd.DataFrame(curve_rows(FIXED_FIRST, 0, [25, 30, 35]) + curve_rows(UNIFORM, 0, [10, 25, 30]))
    saving = compute_to_target(curve).set_index(["kind", "subject", "target", "depths"])
    row = saving.loc[("saving", f"{FIXED_FIRST} vs {UNIFORM}", 0.5, "K=1..16")]
    assert "upper bound" in row["note"] and row["value"] == pytest.approx(1 - 1e12 / 10 ** (12 + 2 / 3))


def mode_rows(seeds_bits: dict[int, float]) -> pd.DataFrame:
    rows = [r for s, b in seeds_bits.items() for r in curve_rows(FIXED_FIRST, s, [b - 5, b, b + 5])]
    return pd.DataFrame(rows).assign(bits_17_64=lambda t: t["bits_1_16"] / 2)


def test_the_two_modes_agree_only_when_the_difference_interval_lies_within_the_margin():
    """The margin is 10% of the 40-bit ceiling: 4 bits. Inside it they agree, wholly outside they
    differ, and whether the interval holds 0 decides nothing."""
    branch = mode_rows({0: 20.0, 1: 25.0, 2: 30.0})
    same = mode_rows({0: 20.5, 1: 24.5, 2: 30.0})
    independent = same[same["budget_multiple"] == 1]  # independent runs exist at 1x only
    modes = mode_agreement(branch, independent).set_index("depths")
    assert list(modes["budget_multiple"]) == [1.0, 1.0] and (modes["n_seeds"] == 3).all()
    assert modes.loc["K=1..16", "branch"] == pytest.approx(25.0) and modes.loc["K=1..16", "margin"] == 4.0
    assert modes.loc["K=1..16", "difference"] == pytest.approx(0.0)
    assert set(modes["modes"]) == {"agree"}
    lower = mode_rows({0: 10.0, 1: 14.0, 2: 18.0})  # 10, 11 and 12 bits below the branches
    assert set(mode_agreement(branch, lower)["modes"]) == {"differ"}
    # 5, 6 and 4 bits below: the interval excludes 0 but reaches into the margin, so it is open.
    near = mode_rows({0: 15.0, 1: 19.0, 2: 26.0})
    near = mode_agreement(branch, near[near["budget_multiple"] == 1]).set_index("depths")
    assert near.loc["K=1..16", "difference_low"] > 0 and near.loc["K=1..16", "modes"] == "inconclusive"
    scattered = mode_rows({0: 10.0, 1: 25.0, 2: 36.0})  # differences 10, 0 and -6: holds 0, wider than 4
    assert set(mode_agreement(branch, scattered)["modes"]) == {"inconclusive"}
    one_seed = mode_agreement(branch[branch["seed"] == 0], independent)
    assert set(one_seed["modes"]) == {"inconclusive"}


def test_the_markdown_tables_say_not_reached_and_give_savings_as_shares():
    curve = pd.DataFrame(
        [r for s in range(2) for r in curve_rows(FIXED_FIRST, s, [10, 20 + s, 30])]
        + [r for s in range(2) for r in curve_rows(UNIFORM, s, [5, 10, 20 + s])]
    )
    text = markdown_columns(compute_to_target(curve), TARGETS_COLUMNS)
    assert text.count("\n") == 2 + len(compute_to_target(curve))
    assert "| fixed_first_k4_80 | 90% | K=1..16 | not reached | 0/2 | not reached within the sweep |" in text
    assert f"| saving: {FIXED_FIRST} vs {UNIFORM} | 50% | K=1..16 | 9" in text  # about 90%
    modes = mode_agreement(mode_rows({0: 20.0, 1: 25.0}), mode_rows({0: 21.0, 1: 25.0}))
    assert "| fixed_first_k4_80 | 1x | K=1..16 | 22.5 [" in markdown_columns(modes, MODES_COLUMNS)
