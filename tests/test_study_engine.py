"""A study's runs through the sweep engine (`biosrecall.experiments.study_engine`): a branch starts from
the state its trunk kept (or from scratch when the trunk kept none there, giving the same run), a
failing run is named with its error and log while the others finish, a run another process holds is
refused, and a study's architecture override reaches every run.

    pytest -q tests/test_study_engine.py
"""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import pytest
from safetensors.torch import load_file

from biosrecall.bios.dataset import generate_dataset
from biosrecall.errors import BiosrecallError
from biosrecall.experiments.study import make_run
from biosrecall.experiments.study_engine import StudyRunFailed, train_study_runs
from biosrecall.locking import lock_path
from biosrecall.sweep.executors import LocalExecutor
from biosrecall.train.config import TrainConfig
from biosrecall.train.run_folder import RunFolder

BASE = TrainConfig(batch_size=4, seq_len=96, seed=0, lr=1e-2, lr_schedule="wsd", warmup_updates=2,
                  checkpoint_fractions=(1.0,))  # fmt: skip
TRUNK = replace(
    make_run("fixed_k4", "fixed:4", 0, 1e-2, "budget", 1e-2, updates=20), label="trunk", keep_updates=(12,)
)


def branch_spec(label: str, at: int):
    spec = make_run(
        "fixed_first_k4_80", "fixed_first:k0=4,switch=0.8,finish=uniform", 0, 1e-2, "budget", 1e-2
    )
    return replace(spec, label=label, updates=15, branch=(TRUNK.folder, at))


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    return generate_dataset(tmp_path_factory.mktemp("data") / "bios", people=8, seed=0)


def describe_for(data: Path):
    def describe(spec) -> tuple[TrainConfig, dict]:
        config = replace(
            BASE, schedule=spec.schedule, updates=spec.updates, keep_updates=spec.keep_updates or None
        )
        return config, {"data": data, "preset": "bios-tiny"}

    return describe


def final_weights(run: Path) -> dict:
    return load_file(str(RunFolder(run).fraction_checkpoints()[1.0] / "model.safetensors"))


def test_branches_start_from_the_kept_state_and_equal_a_run_from_scratch(data, tmp_path):
    """12 is kept by the trunk: a branch. 13 is not (as for a budget added after the trunk finished):
    trained from scratch, which is the same run, so both end with the same weights."""
    runs = tmp_path / "runs"
    specs = [TRUNK, branch_spec("kept", 12), branch_spec("unkept", 13)]
    paths = train_study_runs(runs, specs, describe_for(data), LocalExecutor(workers=2))
    assert all(1.0 in RunFolder(paths[s]).fraction_checkpoints() for s in specs)
    assert RunFolder(paths[specs[1]]).read_config()["branch"]["at_update"] == 12
    assert "branch" not in RunFolder(paths[specs[2]]).read_config()
    kept, scratch = final_weights(paths[specs[1]]), final_weights(paths[specs[2]])
    assert all((kept[name] == scratch[name]).all() for name in kept)
    assert (runs / ".sweep" / "seed0" / "kept.log").stat().st_size > 0  # each run's log
    spec = json.loads((runs / ".sweep" / ".specs" / "seed0" / "kept.json").read_text())  # what its train read
    assert (spec["task"]["from"], spec["task"]["at_update"]) == (str(runs / TRUNK.folder), 12)
    assert spec["out"] == str(paths[specs[1]]) and spec["train_config"]["schedule"] == specs[1].schedule


def test_a_failing_run_is_named_with_its_error_and_log_and_the_others_finish(data, tmp_path):
    runs = tmp_path / "runs"
    not_a_dataset = tmp_path / "empty"
    not_a_dataset.mkdir()
    good = describe_for(data)

    def describe(spec) -> tuple[TrainConfig, dict]:
        config, task = good(spec)
        return (config, {**task, "data": not_a_dataset}) if spec.label == "bad" else (config, task)

    bad = replace(TRUNK, label="bad", keep_updates=())
    with pytest.raises(StudyRunFailed) as failed:
        train_study_runs(runs, [bad, TRUNK], describe, LocalExecutor(workers=1))
    message = str(failed.value)
    assert message.startswith("run seed0/bad failed (exit 2): error: ") and "bad.log" in message
    assert 1.0 in RunFolder(runs / TRUNK.folder).fraction_checkpoints()  # the other run still finished


def test_a_studys_architecture_override_reaches_its_runs(data, tmp_path):
    """figure1 --model-override passes any model field to each run's `train` (here n_block=2)."""
    plain = describe_for(data)

    def describe(spec) -> tuple[TrainConfig, dict]:
        config, task = plain(spec)
        return config, {**task, "model_overrides": {"n_block": 2, "norm": "sandwich"}}

    run = train_study_runs(tmp_path / "runs", [TRUNK], describe, LocalExecutor(workers=1))[TRUNK]
    model = RunFolder(run).read_config()["model_config"]
    assert (model["n_block"], model["norm"]) == (2, "sandwich")


def test_a_run_another_process_is_training_is_refused_not_evaluated(data, tmp_path):
    runs = tmp_path / "runs"
    (runs / "seed0").mkdir(parents=True)
    lock_path(runs / TRUNK.folder).write_text(str(os.getpid()))  # a live holder of the run's folder
    with pytest.raises(BiosrecallError, match="run seed0/trunk is being trained by another process"):
        train_study_runs(runs, [TRUNK], describe_for(data), LocalExecutor(workers=1))
