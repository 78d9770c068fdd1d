"""Experiment tracking (--log tensorboard|wandb|trackio): every metrics.jsonl record reaches the tracker
with the update as its step, resuming continues the tracker run, and a tracker never costs a run.

pytest -q tests/test_tracking.py
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import struct
import sys
from types import SimpleNamespace

import pytest
from harness import changes, run_cli, snapshot

from biosrecall.bios import generate_dataset
from biosrecall.cli.train import train as train_command
from biosrecall.train import tracking
from biosrecall.train.config import TRACKERS, TrainConfig
from biosrecall.train.progress import SilentReporter
from biosrecall.train.run_folder import RunFolder
from biosrecall.train.stops import Interrupted

TIMING = ("wall_s", "tokens_per_s", "flops_per_s")  # differ between two runs of the same settings
# 12 updates. A new run is built under a temporary name and swapped into its folder at its first save
# (the 25% checkpoint), so the trackers see the folder move mid-run.
TINY = {
    "schedule": "fixed:2",
    "batch_size": 4,
    "budget_of": "fixed:2:12",
    "seed": 1,
    "save_every": 5,
    "lr": 3e-3,
}
TINY_ARGS = ["--preset", "bios-tiny", "--quiet"]
for _name, _value in TINY.items():
    TINY_ARGS += [f"--{_name.replace('_', '-')}", str(_value)]


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    return generate_dataset(tmp_path_factory.mktemp("data") / "bios", people=40, seed=3)


@pytest.fixture(scope="module", autouse=True)
def trackers_dir(tmp_path_factory):
    """W&B and Trackio write under this folder and never go online. Module-wide: both libraries read
    their folder once per process, so each test finds its own run by the id kept in the run folder."""
    folder = tmp_path_factory.mktemp("trackers")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("WANDB_MODE", "offline")
        patch.setenv("WANDB_DIR", str(folder))
        patch.setenv("WANDB_SILENT", "true")
        patch.setenv("TRACKIO_DIR", str(folder / "trackio"))
        patch.setenv("HF_HUB_OFFLINE", "1")
        yield folder


def train(dataset, run_dir, reporter=None, resume=False, **overrides):
    from biosrecall.train.trainer import train_bios

    config = TrainConfig(**{**TINY, **overrides})
    return train_bios(dataset, run_dir, config, "bios-tiny", resume=resume, reporter=reporter)


def without_timing(rows):
    return [{k: v for k, v in row.items() if k not in TIMING} for row in rows]


def tensorboard_scalars(folder, tag):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(folder)).Reload()
    return [(event.step, event.value) for event in events.Scalars(tag)]


# ---- the --log option -------------------------------------------------------------------------------


def test_log_is_repeatable_and_a_comma_list():
    context = train_command.make_context(
        "train", ["--data", "d", "--out", "o", "--log", "tensorboard", "--log", "wandb,tensorboard"]
    )
    assert context.params["log"] == ("tensorboard", "wandb")
    assert train_command.make_context("train", ["--data", "d", "--out", "o"]).params["log"] == ()


def test_a_command_that_only_passes_log_on_gets_the_same_option():
    import click

    from biosrecall.cli.options import train_field_option

    alone = train_field_option("log")(click.command()(lambda log: None)).params[0]
    (shared,) = [p for p in train_command.params if p.name == "log"]
    assert (alone.opts, alone.multiple, alone.help) == (shared.opts, True, shared.help)
    assert alone.process_value(click.Context(train_command), ("wandb", "trackio,wandb")) == (
        "wandb",
        "trackio",
    )


def test_an_unknown_tracker_is_refused_while_the_command_line_is_read(capsys):
    code, stderr = run_cli(["train", "--data", "d", "--out", "o", "--log", "tensorbord"], capsys)
    assert code == 2
    assert stderr == (
        "error: Invalid value for '--log': unknown tracker 'tensorbord' in log (choose from tensorboard, "
        "wandb, trackio)\n"
    )


def test_a_tracker_that_is_not_installed_is_refused_before_anything_is_written(
    dataset, tmp_path, monkeypatch, capsys
):
    monkeypatch.setitem(sys.modules, "wandb", None)  # what `import wandb` finds when it is missing
    before = snapshot(tmp_path)
    code, stderr = run_cli(
        ["train", "--data", str(dataset), "--out", str(tmp_path / "run"), *TINY_ARGS, "--log", "wandb"],
        capsys,
    )
    assert code == 2
    assert stderr == "error: tracker wandb is not installed: pip install 'biosrecall[track]'\n"
    assert changes(before, snapshot(tmp_path)) == []


def test_only_the_main_process_tracks():
    setup = SimpleNamespace(dist=SimpleNamespace(is_main=False))
    reporter = SilentReporter()
    assert tracking.with_trackers(reporter, TrainConfig(log=("tensorboard",)), setup) is reporter


# ---- tensorboard ------------------------------------------------------------------------------------


def test_tensorboard_holds_every_updates_record_in_the_run_folder(dataset, tmp_path, capsys):
    pytest.importorskip("tensorboard")
    run = tmp_path / "run"
    argv = ["train", "--data", str(dataset), "--out", str(run), *TINY_ARGS, "--log", "tensorboard"]
    code, stderr = run_cli(argv, capsys)
    assert code == 0, stderr
    metrics = RunFolder(run).read_metrics()
    assert len(metrics) == 12
    for key in ("loss", "lr", "depth", "tokens_per_s"):
        logged = tensorboard_scalars(run / "tensorboard", key)
        # float32 in the event file; steps from before and after the run folder was swapped into place
        assert logged == [(row["update"], pytest.approx(row[key], rel=1e-6)) for row in metrics], key
    assert "warning" not in stderr


def test_a_resumed_run_continues_its_tracker_runs(dataset, tmp_path, trackers_dir):
    for module in TRACKERS.values():
        pytest.importorskip(module)
    run, everything = tmp_path / "run", tuple(TRACKERS)
    with pytest.raises(Interrupted):
        train(dataset, run, reporter=_stopping_at(7), log=everything)
    assert [step for step, _ in tensorboard_scalars(run / "tensorboard", "loss")] == list(range(8))
    ids = json.loads((run / tracking.IDS_FILE).read_text())
    train(dataset, run, resume=True, log=everything)
    assert json.loads((run / tracking.IDS_FILE).read_text()) == ids
    expected = [
        (row["update"], pytest.approx(row["loss"], rel=1e-6)) for row in RunFolder(run).read_metrics()
    ]
    assert tensorboard_scalars(run / "tensorboard", "loss") == expected
    assert _trackio_losses(ids["trackio"]) == expected  # one run, continued by its name
    # Offline, W&B keeps each process's part in its own folder under the one run id (`wandb sync` joins them).
    run_id = ids["wandb"]["id"]
    parts = sorted((trackers_dir / "wandb").glob(f"offline-run-*-{run_id}/run-{run_id}.wandb"))
    steps = [[_history(r)["_step"] for r in _wandb_records(part)["history"]] for part in parts]
    assert steps == [list(range(8)), list(range(8, 12))]


def test_a_run_resumed_with_another_log_starts_tracking_where_it_resumes(dataset, tmp_path):
    pytest.importorskip("tensorboard")
    run = tmp_path / "run"
    with pytest.raises(Interrupted):
        train(dataset, run, reporter=_stopping_at(7))
    train(dataset, run, resume=True, log=("tensorboard",))  # --log may change between resumes
    assert [step for step, _ in tensorboard_scalars(run / "tensorboard", "loss")] == list(range(8, 12))


def test_tensorboard_hides_what_a_killed_run_logged_after_its_last_save(tmp_path):
    pytest.importorskip("tensorboard")
    first, resumed = tracking.TensorBoardTracker(), tracking.TensorBoardTracker()
    first.start(tracking.TrackedRun(RunFolder(tmp_path), "run", {}, first_update=0))
    for step in range(10):
        first.log({"loss": 1.0}, step)
    first.finish()  # killed after update 9; its last save was after update 5
    resumed.start(tracking.TrackedRun(RunFolder(tmp_path), "run", {}, first_update=6))
    for step in range(6, 12):
        resumed.log({"loss": 2.0}, step)
    resumed.finish()
    assert tensorboard_scalars(tmp_path / "tensorboard", "loss") == [
        (s, 1.0 if s < 6 else 2.0) for s in range(12)
    ]


def _stopping_at(update: int):
    """A reporter that asks the trainer to stop (as Ctrl-C does) once `update` is done."""
    reporter = SilentReporter()

    def update_then_stop(record):
        if record["update"] == update:
            os.kill(os.getpid(), signal.SIGINT)

    reporter.update = update_then_stop
    return reporter


# ---- wandb and trackio ------------------------------------------------------------------------------


def test_wandb_offline_run_holds_the_config_and_the_history(dataset, tmp_path, trackers_dir):
    pytest.importorskip("wandb")
    run = tmp_path / "run"
    train(dataset, run, log=("wandb",))
    run_id = json.loads((run / tracking.IDS_FILE).read_text())["wandb"]["id"]
    (log,) = (trackers_dir / "wandb").glob(f"offline-run-*-{run_id}/run-{run_id}.wandb")
    records = _wandb_records(log)
    (config,) = [
        {item.key: json.loads(item.value_json) for item in r.run.config.update} for r in records["run"]
    ]
    assert config["train_config"]["budget_of"] == "fixed:2:12" and config["task"]["preset"] == "bios-tiny"
    assert config["plan"]["updates"] == 12
    history = [_history(record) for record in records["history"]]
    metrics = RunFolder(run).read_metrics()
    assert [row["_step"] for row in history] == [row["update"] for row in metrics]
    assert [row["loss"] for row in history] == [row["loss"] for row in metrics]


def _history(record) -> dict:
    return {
        "/".join(item.nested_key) or item.key: json.loads(item.value_json) for item in record.history.item
    }


def _wandb_records(path) -> dict[str, list]:
    """An offline run's transaction log (W&B's LevelDB-style log of protobuf records), by record type."""
    from wandb.proto import wandb_internal_pb2

    data, block, header = path.read_bytes(), 32768, 7
    assert data[:4] == b":W&B"
    found, position, pending = {}, header, b""
    while position + header <= len(data):
        if block - position % block < header:  # a block's tail too short for a header is padding
            position += block - position % block
            continue
        _, length, kind = struct.unpack("<IHB", data[position : position + header])
        pending += data[position + header : position + header + length]
        position += header + length
        if kind in (1, 4):  # a whole record, or the last piece of one
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            found.setdefault(record.WhichOneof("record_type"), []).append(record)
            pending = b""
    return found


def test_trackio_writes_every_record_to_its_local_database(dataset, tmp_path):
    pytest.importorskip("trackio")
    run = tmp_path / "run"
    train(dataset, run, log=("trackio",))
    ids = json.loads((run / tracking.IDS_FILE).read_text())["trackio"]
    assert _trackio_losses(ids) == [(row["update"], row["loss"]) for row in RunFolder(run).read_metrics()]


def _trackio_losses(ids) -> list[tuple[int, float]]:
    """(step, loss) of a Trackio run, read from its project's SQLite database."""
    from trackio.sqlite_storage import SQLiteStorage

    with sqlite3.connect(SQLiteStorage.get_project_db_path(ids["project"])) as db:
        rows = db.execute(
            "SELECT step, metrics FROM metrics WHERE run_name = ? ORDER BY step", (ids["name"],)
        )
        return [(step, json.loads(values)["loss"]) for step, values in rows]


# ---- failures ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("failing", ["start", "log"])
def test_a_failing_tracker_is_one_warning_and_the_run_is_unchanged(
    dataset, tmp_path, monkeypatch, capsys, failing
):
    pytest.importorskip("tensorboard")
    train(dataset, tmp_path / "plain")
    calls = []

    def broken(self, *args):
        calls.append(args)
        raise RuntimeError("tracker down\nsecond line")

    monkeypatch.setattr(tracking.TensorBoardTracker, failing, broken)
    capsys.readouterr()
    train(dataset, tmp_path / "tracked", log=("tensorboard",))
    stderr = capsys.readouterr().err
    assert stderr == (
        f"warning: tensorboard failed to {failing} (RuntimeError: tracker down); training goes on without "
        "it (metrics.jsonl holds every record)\n"
    )
    assert len(calls) == 1  # dropped after its first failure
    plain, tracked = (
        without_timing(RunFolder(tmp_path / name).read_metrics()) for name in ("plain", "tracked")
    )
    assert tracked == plain and len(tracked) == 12
