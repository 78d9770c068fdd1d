"""A run spec (`biosrecall.sweep.run_spec`): the file every sweep and study run is started from, read by
`biosrecall train --config` as it is, giving back the very TrainConfig it was written from.

    pytest -q tests/test_run_spec.py
"""

from __future__ import annotations

import tomllib

import pytest

from biosrecall.cli.options import split_options
from biosrecall.errors import BiosrecallError
from biosrecall.sweep.commands import click_command
from biosrecall.sweep.jobs import SweepRun, build_jobs
from biosrecall.sweep.run_spec import config_options, run_spec_text
from biosrecall.train.config import TrainConfig

STUDY_RUN = TrainConfig(
    schedule="fixed_first:k0=4,switch=0.8,finish=uniform", budget_of="fixed:4:300", batch_size=8,
    seq_len=128, lr=0.01, warmup_updates=5, lr_schedule="wsd", decay=0.3, betas=(0.9, 0.99),
    checkpoint_fractions=(0.45, 1.0), keep_updates=(3, 7), seed=1, compile=True, threads=2,
)  # fmt: skip


def read_by_train(path) -> dict:
    """The parameters `biosrecall train --config PATH` gets."""
    with click_command("train").make_context("train", ["--config", str(path)]) as context:
        return dict(context.params)


def test_train_reads_a_run_spec_back_into_the_same_config(tmp_path):
    options = config_options(
        STUDY_RUN, data="data/bios", preset="bios-tiny", model_override=["norm=sandwich"]
    )
    path = tmp_path / "run.toml"
    path.write_text(run_spec_text({**options, "from": "runs/trunk", "at_update": 12, "out": "runs/a"}))
    params = read_by_train(path)
    config, _ = split_options(params)
    assert config == TrainConfig.from_dict(
        {**STUDY_RUN.to_dict(), "threads": None}
    )  # threads: the executor's
    assert (params["data_dir"], params["run_dir"], params["preset"]) == ("data/bios", "runs/a", "bios-tiny")
    assert (params["parent"], params["at_update"]) == ("runs/trunk", 12)
    assert params["model_override"] == {"norm": "sandwich"}


def test_every_float_and_string_survives_the_file():
    values = {
        "lr": [1e-05, 0.1 + 0.2, 3e16, float("inf"), -0.0],
        "text": ['a "quoted" \\ path', "tab\there\nline", "caf\u00e9 \U0001f600", "del\x7f"],
    }
    assert tomllib.loads(run_spec_text(values)) == values
    assert "threads" not in run_spec_text(config_options(STUDY_RUN))


def test_a_value_toml_cannot_hold_is_refused():
    with pytest.raises(BiosrecallError, match="nested takes text, a number"):
        run_spec_text({"nested": {"a": 1}})


def test_a_sweep_job_trains_from_its_run_spec(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # relative paths are the current folder's
    run = SweepRun("seed0/a", "train", {"data": "data", "schedule": "fixed:2", "updates": 5, "decay": None})
    (job,) = build_jobs(tmp_path / "out", [run], threads=2)
    assert job.train_args == ("train", "--config", str(tmp_path / "out/.sweep/seed0/a.toml"))
    spec = tomllib.loads(job.spec_text)
    assert spec == {"data": str(tmp_path / "data"), "schedule": "fixed:2", "updates": 5,
                    "out": str(tmp_path / "out/seed0/a")}  # fmt: skip


def test_a_run_naming_a_config_file_gets_its_values_under_its_own(tmp_path, monkeypatch):
    """As `train --config base.toml --updates 5` would: the run's values win, its size replaces the file's."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "base.toml").write_text('batch-size = 16\nbudget_of = "fixed:4:80"\nschedule = "fixed:4"\n')
    options = {"config": str(tmp_path / "base.toml"), "data": "data", "schedule": "fixed:2", "updates": 5}
    (job,) = build_jobs(tmp_path / "out", [SweepRun("a", "train", options)])
    spec = tomllib.loads(job.spec_text)
    assert {key: spec[key] for key in ("batch-size", "schedule", "updates")} == {
        "batch-size": 16, "schedule": "fixed:2", "updates": 5
    }  # fmt: skip
    assert "budget_of" not in spec and "config" not in spec
