"""A study's runs through the sweep engine (`biosrecall.experiments.engine`): a branch starts from
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
from biosrecall.experiments.engine import StudyRunFailed, train_study_runs
from biosrecall.locking import lock_path
from biosrecall.sweep.executors import LocalExecutor
from biosrecall.sweep.jobs import SweepRun
from biosrecall.train.config import TrainConfig
from biosrecall.train.run_folder import RunFolder

BASE = TrainConfig(batch_size=4, seq_len=96, seed=0, lr=1e-2, lr_schedule="wsd", warmup_updates=2,
                  checkpoint_fractions=(1.0,))  # fmt: skip
FIXED_FIRST = "fixed_first:k0=4,switch=0.8,finish=uniform"


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    return generate_dataset(tmp_path_factory.mktemp("data") / "bios", people=8, seed=0)


def trunk(data_dir: Path, **task) -> SweepRun:
    config = replace(BASE, schedule="fixed:4", updates=20, keep_updates=(12,))
    return SweepRun("seed0/trunk", "train", config, {"data": data_dir, "preset": "bios-tiny", **task})


def branch(data: Path, label: str, at: int) -> SweepRun:
    """A branch of the trunk as a study describes it: its task names the trunk's run and the update."""
    config = replace(BASE, schedule=FIXED_FIRST, updates=15)
    task = {"data": data, "preset": "bios-tiny", "from": "seed0/trunk", "at_update": at}
    return SweepRun(f"seed0/{label}", "train", config, task)


def final_weights(run: Path) -> dict:
    return load_file(str(RunFolder(run).fraction_checkpoints()[1.0] / "model.safetensors"))


def test_branches_start_from_the_kept_state_and_equal_a_run_from_scratch(data, tmp_path):
    """12 is kept by the trunk: a branch. 13 is not (as for a budget added after the trunk finished):
    trained from scratch, which is the same run, so both end with the same weights."""
    runs = tmp_path / "runs"
    trained = [trunk(data), branch(data, "kept", 12), branch(data, "unkept", 13)]
    train_study_runs(runs, trained, LocalExecutor(workers=2))
    assert all(1.0 in RunFolder(runs / run.name).fraction_checkpoints() for run in trained)
    assert RunFolder(runs / "seed0/kept").read_config()["branch"]["at_update"] == 12
    assert "branch" not in RunFolder(runs / "seed0/unkept").read_config()
    kept, scratch = final_weights(runs / "seed0/kept"), final_weights(runs / "seed0/unkept")
    assert all((kept[name] == scratch[name]).all() for name in kept)
    assert (runs / ".sweep" / "seed0" / "kept.log").stat().st_size > 0  # each run's log
    spec = json.loads((runs / ".sweep" / ".specs" / "seed0" / "kept.json").read_text())  # what its train read
    assert (spec["task"]["from"], spec["task"]["at_update"]) == (str(runs / "seed0/trunk"), 12)
    assert spec["out"] == str(runs / "seed0/kept") and spec["train_config"]["schedule"] == FIXED_FIRST


def test_a_failing_run_is_named_with_its_error_and_log_and_the_others_finish(data, tmp_path):
    runs = tmp_path / "runs"
    not_a_dataset = tmp_path / "empty"
    not_a_dataset.mkdir()
    bad = replace(trunk(data, data=not_a_dataset), name="seed0/bad")
    with pytest.raises(StudyRunFailed) as failed:
        train_study_runs(runs, [bad, trunk(data)], LocalExecutor(workers=1))
    message = str(failed.value)
    assert message.startswith("run seed0/bad failed (exit 2): error: ") and "bad.log" in message
    assert 1.0 in RunFolder(runs / "seed0/trunk").fraction_checkpoints()  # the other run still finished


def test_a_studys_architecture_override_reaches_its_runs(data, tmp_path):
    """figure1 --model-override passes any model field to each run's `train` (here n_block=2)."""
    overridden = trunk(data, model_overrides={"n_block": 2, "norm": "sandwich"})
    train_study_runs(tmp_path / "runs", [overridden], LocalExecutor(workers=1))
    model = RunFolder(tmp_path / "runs" / "seed0/trunk").read_config()["model_config"]
    assert (model["n_block"], model["norm"]) == (2, "sandwich")


def test_a_run_another_process_is_training_is_refused_not_evaluated(data, tmp_path):
    runs = tmp_path / "runs"
    (runs / "seed0").mkdir(parents=True)
    lock_path(runs / "seed0/trunk").write_text(str(os.getpid()))  # a live holder of the run's folder
    with pytest.raises(BiosrecallError, match="run seed0/trunk is being trained by another process"):
        train_study_runs(runs, [trunk(data)], LocalExecutor(workers=1))


@pytest.mark.parametrize("record", [True, False])
def test_a_study_record_survives_a_later_interrupted_write_of_its_first_call(tmp_path, record):
    """Within one command, a write stopped by Ctrl-C takes back what the command wrote into folders it
    created; once the study's record is written, OUT and what is in it are the study's and stay (a
    rerun continues them), while the cut write's own new folders still go."""
    from biosrecall.atomic import atomic_write_path, atomic_write_text, command_outputs
    from biosrecall.experiments.engine import write_study_record

    out = tmp_path / "new" / "study"
    with command_outputs():
        atomic_write_text(out / "data" / "manifest.json", "{}")  # the command creates OUT
        if record:
            write_study_record(out / "study.json", "{}\n")
        else:
            atomic_write_text(out / "notes.txt", "written before the cut, with no record")
        with pytest.raises(KeyboardInterrupt), atomic_write_path(out / "diagnose" / "seed0" / "t.parquet"):
            raise KeyboardInterrupt
    assert not (out / "diagnose").exists()
    assert (out / "data" / "manifest.json").is_file()
    assert (out / "study.json").is_file() if record else not (out / "notes.txt").exists()


@pytest.mark.parametrize("killed", ["moving aside", "preparing the new output", "deleting the old one"])
def test_an_overwrite_killed_half_way_leaves_one_whole_output(tmp_path, killed):
    """A SIGKILL during `--overwrite` (no clean-up ran): the next lock of OUT puts the old entries back,
    or, once the new output was prepared and the old one was being deleted, keeps the new one; a
    user's own file stays either way."""
    import tempfile

    from biosrecall.locking import ASIDE_SUFFIX, TEMPORARY_SUFFIX, output_lock, temporary_prefix

    out = tmp_path / "out"
    (out / "data").mkdir(parents=True)
    (out / "notes.txt").write_text("mine")
    aside = Path(tempfile.mkdtemp(prefix=temporary_prefix(out), suffix=ASIDE_SUFFIX, dir=tmp_path))
    (aside / "runs").mkdir()
    (aside / "data").mkdir()
    (aside / "data" / "manifest.json").write_text("old")
    if killed == "moving aside":  # the record moves last: it is still in OUT
        (out / "figure1.json").write_text("old")
    else:
        (aside / "figure1.json").write_text("old")
        (out / "figure1.json").write_text("new")
    if killed == "deleting the old one":
        aside.rename(aside.with_name(aside.name.removesuffix(ASIDE_SUFFIX) + TEMPORARY_SUFFIX))
    with output_lock(out):
        pass
    expected = "new" if killed == "deleting the old one" else "old"
    assert (out / "figure1.json").read_text() == expected
    assert (out / "runs").is_dir() == (expected == "old")
    assert (out / "notes.txt").read_text() == "mine"
    assert [
        p.name for p in tmp_path.iterdir() if p.name.startswith(".") and not p.name.endswith(".lock")
    ] == []
