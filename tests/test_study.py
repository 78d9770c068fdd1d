"""The Figure-1 study's plan: which runs it trains, where, at which learning rate, and its bad input."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from biosrecall.cli import main
from biosrecall.errors import BiosrecallError
from biosrecall.experiments.figure1_results import chosen_lr, grid_table
from biosrecall.experiments.study import (
    FIXED_K4,
    MAIN_SCHEDULES,
    UNIFORM,
    UPDATE_MATCHED,
    StudyOptions,
    dataset_seed,
    grid_runs,
    study_runs,
)
from biosrecall.model.presets import parse_model_overrides
from biosrecall.train.config import TrainConfig

BASE = TrainConfig(lr=1e-2, seed=0, budget_of="fixed:4:300")
TASKS = {seed: {"data": f"data_seed{seed}", "preset": "bios-tiny"} for seed in (0, 1)}


def grid_curves(scores: dict[tuple[str, float], float]) -> pd.DataFrame:
    """Recall rows whose mean over K=1..16 at 100% is the given score; K>16 and 45% rows mislead."""
    rows = []
    for (name, lr), score in scores.items():
        for depth in range(1, 65):
            bits = score if depth <= 16 else 100.0 - score  # beyond K=16 must not count
            rows.append(
                {"name": name, "lr": lr, "fraction": 1.0, "depth": depth, "attribute": "all", "bits": bits}
            )
            rows.append(
                {"name": name, "lr": lr, "fraction": 0.45, "depth": depth, "attribute": "all", "bits": 99.0}
            )
    return pd.DataFrame(rows)


def test_lr_grid_keeps_each_schedules_own_best_by_mean_bits_over_k_1_to_16_at_100():
    scores = {
        (FIXED_K4, 3e-3): 20.0, (FIXED_K4, 1e-2): 30.0, (FIXED_K4, 3e-2): 25.0,
        (UNIFORM, 3e-3): 12.0, (UNIFORM, 1e-2): 4.0, (UNIFORM, 3e-2): 1.0,
        ("fixed_first_k4_80", 3e-3): 31.0, ("fixed_first_k4_80", 1e-2): 31.0, ("fixed_first_k4_80", 3e-2): 2.0,
    }  # fmt: skip
    grid = grid_table(grid_curves(scores))
    assert len(grid) == 9 and grid["chosen"].sum() == 3
    assert chosen_lr(grid) == {
        FIXED_K4: 1e-2,
        UNIFORM: 3e-3,
        "fixed_first_k4_80": 3e-3,
    }  # a tie: the lower lr
    assert grid.set_index(["name", "lr"])["score"][(UNIFORM, 3e-3)] == pytest.approx(12.0)


def test_runs_of_a_study_with_seeds_controls_grid_and_sweep():
    study = StudyOptions(seeds=(0, 1), update_matched=True, lr_grid=(3e-3, 1e-2), fixed_sweep=(2, 4, 8))
    grid = grid_runs(study, BASE, TASKS)
    assert len(grid) == 6 and {r.config.seed for r in grid} == {0}
    assert {r.name for r in grid if r.config.lr == 1e-2} == {f"seed0/{n}" for n in MAIN_SCHEDULES}
    assert {r.name for r in grid if r.config.lr == 3e-3} == {f"seed0/{n}_lr0.003" for n in MAIN_SCHEDULES}
    best = {name: 1e-2 for name in MAIN_SCHEDULES} | {UNIFORM: 3e-3}
    runs = study_runs(study, BASE, TASKS, best, fixed4_updates=800)
    assert len(runs) == 2 * (3 + 1 + 2)  # per seed: three schedules, the control, fixed K=2 and K=8
    control = [r for r in runs if r.labels["name"] == UPDATE_MATCHED]
    assert [(r.config.updates, r.config.budget_of, r.config.lr, r.config.schedule, r.labels["role"])
            for r in control] == [(800, None, 3e-3, "uniform:1-16", "control")] * 2  # fmt: skip
    uniform = {r.name for r in runs if r.labels["name"] == UNIFORM}
    assert uniform == {"seed0/uniform_1_16_lr0.003", "seed1/uniform_1_16_lr0.003"}  # its grid point, reused
    assert {r.labels["name"] for r in runs if r.labels["role"] == "sweep"} == {"fixed_k2", "fixed_k8"}
    # Each run is described once: its config is the study's with its schedule, seed and lr, its task its seed's.
    main = next(r for r in runs if r.name == "seed1/fixed_first_k4_80")
    assert (main.config.schedule, main.config.seed, main.config.budget_of) == (
        MAIN_SCHEDULES["fixed_first_k4_80"],
        1,
        "fixed:4:300",
    )
    assert main.task == TASKS[1] and main.labels == {
        "name": "fixed_first_k4_80", "label": "fixed_first_k4_80", "role": "main", "budget": 1.0
    }  # fmt: skip


def test_dataset_seed_is_the_first_seed_unless_per_run():
    assert [dataset_seed(StudyOptions(seeds=(3, 4)), s) for s in (3, 4)] == [3, 3]
    assert [dataset_seed(StudyOptions(seeds=(3, 4), dataset_seed_per_run=True), s) for s in (3, 4)] == [3, 4]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"seeds": ()}, "--seeds is empty"),
        ({"seeds": (0, 1, 0)}, "--seeds repeats 0"),
        ({"seeds": (-1,)}, "non-negative"),
        ({"lr_grid": (1e-2, 0.0)}, "--lr-grid values must be positive"),
        ({"lr_grid": (1e-2, -3e-3)}, "--lr-grid values must be positive"),
        ({"lr_grid": (float("nan"),)}, "--lr-grid values must be positive"),
    ],
)
def test_bad_study_options_are_refused(options, message):
    with pytest.raises(BiosrecallError, match=message):
        StudyOptions(**options)


def test_model_overrides_are_typed_and_checked():
    assert parse_model_overrides(["norm=sandwich", "init_state=noise", "n_block=2"]) == {
        "norm": "sandwich", "init_state": "noise", "n_block": 2,
    }  # fmt: skip
    with pytest.raises(BiosrecallError, match="unknown model config field 'nrm'"):
        parse_model_overrides(["nrm=sandwich"])
    with pytest.raises(BiosrecallError, match="norm must be one of pre, sandwich"):
        parse_model_overrides(["norm=post"])


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        (["--seeds", ""], "--seeds is empty"),
        (["--seeds", "0,1,1"], "--seeds repeats 1"),
        (["--seeds", "0,-2"], "non-negative"),
        (["--seeds", "a"], "comma-separated seeds"),
        (["--lr-grid", "1e-2,0"], "'--lr-grid': learning rates must be a number in (0, 1], got 0.0"),
        (["--lr-grid", "x"], "comma-separated learning rates such as 3e-3,1e-2"),
        (["--model-override", "nrm=sandwich"], "unknown model config field 'nrm'"),
        (["--model-override", "norm=post"], "norm must be one of"),
        (["--model-override", "n_block=two"], "expected int"),
    ],
)
def test_figure1_bad_study_input_is_one_line_exit_2_nothing_written(tmp_path, capsys, extra, named):
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as exit_info:
        main(["figure1", "--preset", "quick", "--out", str(out), "--quiet", *extra])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1 and err.startswith("error: ") and named in err
    assert not out.exists() and list(Path(tmp_path).iterdir()) == []


def test_grid_scores_ignore_the_45_percent_checkpoint_and_depths_beyond_16():
    curves = grid_curves({(FIXED_K4, 1e-2): 10.0, (FIXED_K4, 3e-2): 20.0})
    assert np.isclose(grid_table(curves)["score"], [10.0, 20.0]).all()
