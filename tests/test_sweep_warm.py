"""Warm starts (`biosrecall.warm`): a command forked from the sweep's warm server behaves as the
same command started fresh, so the sweep's runs train the same numbers either way.

- exit status and error line: a bad option exits 2 with one `error:` line in the log, no traceback;
- folder, environment and threads: relative paths resolve in the caller's folder, and the run records
  the torch threads its OMP_NUM_THREADS asks for;
- signals: the run has a session of its own, and SIGINT stops it with exit 130 and its progress saved;
- numbers: a sweep run forked warm and the same run started cold (BIOSRECALL_WARM_START=0) write
  byte-identical weights and the same losses.

    pytest -q tests/test_sweep_warm.py
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
from harness import wait_for_updates

from biosrecall.bios.dataset import generate_dataset
from biosrecall.sweep.engine import run_sweep
from biosrecall.sweep.executors import LocalExecutor
from biosrecall.sweep.jobs import SweepRun
from biosrecall.train.config import TrainConfig
from biosrecall.train.run_folder import RunFolder
from biosrecall.warm import SWITCH, start_warm

TINY = ["--preset", "bios-tiny", "--batch-size", "4", "--seq-len", "96", "--schedule", "fixed:2"]


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    return generate_dataset(tmp_path_factory.mktemp("data") / "bios", people=6, seed=0)


def environment(**extra: str) -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", **extra}


def test_a_mistake_exits_2_with_one_error_line_in_the_log(tmp_path):
    log = tmp_path / "run.log"
    process = start_warm(["train", "--data", str(tmp_path / "missing"), "--out", "x"], log, environment())
    assert process.wait() == 2
    text = log.read_text()
    assert "Traceback" not in text
    assert [line for line in text.splitlines() if line.startswith("error:")] == [text.strip()]


def test_relative_paths_resolve_in_the_callers_folder_with_its_threads(data, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    log = tmp_path / "run.log"
    args = ["train", "--data", str(data), "--out", "run", "--updates", "3", "--quiet", *TINY]
    process = start_warm(args, log, environment(OMP_NUM_THREADS="2"))
    assert process.wait() == 0, log.read_text()
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert config["machine"]["torch_threads"] == 2
    assert 1.0 in RunFolder(tmp_path / "run").fraction_checkpoints()


def test_sigint_stops_a_run_in_a_session_of_its_own_with_its_progress_saved(data, tmp_path):
    log, run = tmp_path / "run.log", tmp_path / "run"
    args = ["train", "--data", str(data), "--out", str(run), "--updates", "3000", "--quiet", *TINY]
    process = start_warm(args, log, environment())
    wait_for_updates(run, 3, process)
    assert os.getsid(process.pid) == process.pid  # a Ctrl-C at the terminal reaches the sweep only
    process.send_signal(signal.SIGINT)
    assert process.wait() == 130, log.read_text()
    assert log.read_text().strip().splitlines()[-1].startswith("error: interrupted at update ")
    assert RunFolder(run).latest_checkpoint() is not None and 1.0 not in RunFolder(run).fraction_checkpoints()


def test_a_warm_run_trains_the_same_numbers_as_a_cold_one(data, tmp_path, monkeypatch):
    config = TrainConfig(batch_size=4, seq_len=96, schedule="uniform:1-3", updates=8, seed=3)
    task = {"data": str(data), "preset": "bios-tiny", "quiet": True}
    finals = {}
    for switch in ("1", "0"):
        monkeypatch.setenv(SWITCH, switch)
        out = tmp_path / f"warm{switch}"
        result = run_sweep(out, [SweepRun("a", "train", config, task)], executor=LocalExecutor(workers=1))
        assert [outcome.state for outcome in result.outcomes] == ["done"]
        final = RunFolder(out / "a").fraction_checkpoints()[1.0]
        losses = [row["loss"] for row in RunFolder(out / "a").read_metrics()]
        finals[switch] = ((final / "model.safetensors").read_bytes(), losses)
    assert finals["1"] == finals["0"]
