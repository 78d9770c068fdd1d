"""A run spec (`biosrecall.sweep.run_spec`): the file every sweep and study run is started from, read by
`biosrecall train --config` as it is, giving back the very TrainConfig it was written from.

    pytest -q tests/test_run_spec.py
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from biosrecall.cli.options import split_options
from biosrecall.errors import BiosrecallError
from biosrecall.model.presets import DEFAULT_BIOS_PRESET
from biosrecall.sweep.commands import click_command, run_description
from biosrecall.sweep.jobs import PROGRAM, SweepRun, build_jobs, check_runs
from biosrecall.sweep.run_spec import run_spec_text
from biosrecall.train.config import TrainConfig

STUDY_RUN = TrainConfig(
    schedule="fixed_first:k0=4,switch=0.8,finish=uniform", budget_of="fixed:4:300", batch_size=8,
    seq_len=128, lr=0.1 + 0.2, warmup_updates=5, lr_schedule="wsd", decay=0.3, betas=(0.9, 0.99),
    checkpoint_fractions=(0.45, 1.0), keep_updates=(3, 7), seed=1, compile=True, threads=2,
)  # fmt: skip
TASK = {"data": "data/bios", "preset": "bios-tiny", "model_overrides": {"norm": "sandwich", "n_block": 2},
        "from": "runs/trunk", "at_update": 12, "out": "runs/a"}  # fmt: skip


def read_by_train(path, *args):
    """(TrainConfig, model overrides, parameters) of `biosrecall train --config PATH ARGS`, as its body
    gets them."""
    with click_command("train").make_context("train", ["--config", str(path), *args]) as context:
        params = dict(context.params)
        config, overrides = split_options(params)
    return config, {**overrides, **params["model_override"]}, params


def test_train_reads_a_run_spec_back_into_the_same_config(tmp_path):
    path = tmp_path / "run.json"
    path.write_text(run_spec_text("train", STUDY_RUN, TASK))
    config, overrides, params = read_by_train(path)
    assert config == replace(STUDY_RUN, threads=None)  # threads: the executor's --threads
    assert config.lr == 0.1 + 0.2  # every float survives the file exactly
    assert (params["data_dir"], params["run_dir"], params["preset"]) == ("data/bios", "runs/a", "bios-tiny")
    assert (params["parent"], params["at_update"]) == ("runs/trunk", 12)
    assert {key: value for key, value in overrides.items() if value is not None} == TASK["model_overrides"]


def test_the_command_line_replaces_only_what_it_gives(tmp_path):
    """`train --config RUN.json --lr 0.5 --updates 9 --threads 3`: the run size replaces the file's."""
    path = tmp_path / "run.json"
    path.write_text(run_spec_text("train", STUDY_RUN, TASK))
    config, _, params = read_by_train(path, "--lr", "0.5", "--updates", "9", "--threads", "3", "--out", "b")
    assert config == replace(STUDY_RUN, lr=0.5, budget_of=None, updates=9, threads=3)
    assert params["run_dir"] == "b"


def test_a_run_config_json_repeats_its_run(tmp_path):
    """A run's own config.json has the spec's sections: the same reader gives back its TrainConfig."""
    record = json.loads(run_spec_text("train", STUDY_RUN, {"data": "data/bios", "preset": "bios-tiny"}))
    record["task"] = {"name": "bios", "preset": "bios-tiny"}
    record["model_config"] = {"norm": "sandwich", "n_block": 3, "d_model": 64}  # the preset fixes the rest
    path = tmp_path / "config.json"
    path.write_text(json.dumps(record))
    config, overrides, params = read_by_train(path, "--out", "again")
    assert config == replace(STUDY_RUN, threads=None)
    assert {key: value for key, value in overrides.items() if value is not None} == {"norm": "sandwich"}
    assert params["data_dir"] == "data/bios"


def test_a_corrupt_train_config_is_one_line_naming_the_file(tmp_path):
    path = tmp_path / "run.json"
    record = json.loads(run_spec_text("train", STUDY_RUN, TASK))
    record["train_config"]["lr"] = -1
    path.write_text(json.dumps(record))
    with pytest.raises(Exception, match=r"run\.json: train_config: .*lr") as error:
        read_by_train(path)
    assert "\n" not in str(error.value)


def test_a_sweep_job_trains_from_its_run_spec(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # relative paths are the current folder's
    run = SweepRun("seed0/a", "train", TrainConfig(schedule="fixed:2", updates=5), {"data": "data"})
    (job,) = build_jobs(tmp_path / "out", [run], threads=2)
    spec_file = str(tmp_path / "out/.sweep/.specs/seed0/a.json")
    assert job.train_command(resume=False) == [*PROGRAM, "train", "--config", spec_file, "--threads", "2"]
    spec = json.loads(job.spec_text)
    assert spec["task"] == {"name": "bios"}
    assert (spec["dataset"], spec["out"]) == ({"path": str(tmp_path / "data")}, str(tmp_path / "out/seed0/a"))
    assert TrainConfig.from_dict(spec["train_config"]) == TrainConfig(schedule="fixed:2", updates=5)
    assert "threads" not in spec["train_config"]


def test_a_sweep_refuses_a_run_it_could_not_start(tmp_path):
    (tmp_path / "data").mkdir()
    good = {"data": str(tmp_path / "data")}
    with pytest.raises(BiosrecallError, match="run a: data folder .*none does not exist"):
        check_runs([SweepRun("a", "train", TrainConfig(updates=5), {"data": str(tmp_path / "none")})])
    with pytest.raises(BiosrecallError, match="run a: .*bios-huge"):
        check_runs([SweepRun("a", "train", TrainConfig(updates=5), {**good, "preset": "bios-huge"})])
    with pytest.raises(BiosrecallError, match="run a: .*(budget|run size)"):  # no run size at all
        check_runs([SweepRun("a", "train", TrainConfig(), good)])
    with pytest.raises(BiosrecallError, match="run a: unknown task key.*lr"):
        check_runs([SweepRun("a", "train", TrainConfig(updates=5), {**good, "lr": 0.1})])


def test_a_run_naming_a_config_file_gets_its_values_under_its_own(tmp_path, monkeypatch):
    """As `train --config base.toml --updates 5` would: the run's values win, its size replaces the file's."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "base.toml").write_text('batch-size = 16\nbudget_of = "fixed:4:80"\nschedule = "fixed:4"\n')
    options = {"config": str(tmp_path / "base.toml"), "data": "data", "schedule": "fixed:2", "updates": 5}
    config, task = run_description("train", options, "run a")
    assert (config.batch_size, config.schedule, config.updates, config.budget_of) == (16, "fixed:2", 5, None)
    assert task == {"data": "data", "preset": DEFAULT_BIOS_PRESET}
