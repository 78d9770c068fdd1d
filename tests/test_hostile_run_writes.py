"""Hostile writes to run folders: an `--overwrite` that fails part-way (the old run stays, byte for
byte), outputs that are or hold the dataset, a second writer or resumer of a run, and a disk that
fills while a checkpoint is saved (then a resume that ends bit-identical).

Uses the world of `test_hostile_runs` (a dataset and one finished run) and the checks of
`test_hostile_data`. Real second processes are used where another process is the point.

    pytest -q tests/test_hostile_run_writes.py
"""

from __future__ import annotations

import errno
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from harness import changes, run_cli, snapshot
from safetensors import SafetensorError
from test_hostile_data import assert_refused, hidden
from test_hostile_runs import assert_same_run, case_dir, final_weights, stopped_at, train_args, world

from biosrecall.errors import BiosrecallError
from biosrecall.train import checkpoint_files
from biosrecall.train.run_folder import MetricsLog, RunFolder
from biosrecall.train.trainer import Trainer

__all__ = ["case_dir", "world"]  # the shared fixtures: a fresh copy of the world per test

# ---- --overwrite is a swap -------------------------------------------------------------------------


def full_disk(target: str, call: int = 1):
    """Make the `call`-th write of `target` (safetensors weights or torch.save state) find the disk full."""

    def inject(monkeypatch) -> None:
        module, name = (checkpoint_files, "save_model") if target == "weights" else (torch, "save")
        real, calls = getattr(module, name), []

        def write(*args, **kwargs):
            calls.append(1)
            if len(calls) == call and target == "weights":
                raise SafetensorError(
                    "Error while serializing: I/O error: No space left on device (os error 28)"
                )
            if len(calls) == call:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            return real(*args, **kwargs)

        monkeypatch.setattr(module, name, write)

    return inject


def failing_update(update: int):
    def inject(monkeypatch) -> None:
        real = Trainer._one_update

        def one_update(trainer):
            if trainer.progress.update == update:
                raise BiosrecallError("injected failure")
            return real(trainer)

        monkeypatch.setattr(Trainer, "_one_update", one_update)

    return inject


OVERWRITE_FAILURES = [
    ("save-every-zero", ["--save-every", "0"], None, "save_every"),
    ("seed-overflows", ["--seed", str(2**70)], None, "seed"),
    ("batch-too-large", ["--batch-size", str(10**12)], None, "batch"),
    ("disk-full-at-the-first-save", [], full_disk("weights"), "No space left on device (errno 28, ENOSPC)"),
    ("failure-before-the-first-save", [], failing_update(2), "injected failure"),
]


def limit_file_size(limit: int):
    return lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))


OVERLAPS = [
    ("is-the-dataset", "nest/data", "is the input"),
    ("inside-the-dataset", "nest/data/run", "lies inside the input"),
    ("holds-the-dataset", "nest", "contains the input"),
    ("the-working-folder", ".", "is the working folder"),
]


class TestOverwriteIsASwap:
    @pytest.mark.parametrize(
        ("extra", "inject", "expect"), [pytest.param(*c[1:], id=c[0]) for c in OVERWRITE_FAILURES]
    )
    def test_a_failure_part_way_keeps_the_old_run(self, case_dir, capsys, monkeypatch, extra, inject, expect):
        if inject:
            inject(monkeypatch)
        assert_refused(train_args("run", "--overwrite", "--seed", "2", *extra), expect, case_dir, capsys)

    @pytest.mark.parametrize(
        "extra", [pytest.param(["--overwrite"], id="overwrite"), pytest.param([], id="new-run")]
    )
    def test_a_disk_full_under_ulimit_leaves_nothing_but_the_old_run(self, case_dir, extra):
        out = "run" if extra else "fresh"
        before = snapshot(case_dir)
        done = subprocess.run([sys.executable, "-m", "biosrecall", *train_args(out, "--seed", "2", *extra)],
                              capture_output=True, text=True, preexec_fn=limit_file_size(100_000))  # fmt: skip
        assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
        assert "File too large (errno 27, EFBIG)" in done.stderr and "Traceback" not in done.stderr
        left = "is as it was before" if extra else "was not created"
        assert f"nothing of this run was kept, and {out} {left}" in done.stderr
        assert changes(before, snapshot(case_dir)) == []

    def test_a_successful_overwrite_replaces_the_run_and_leaves_nothing_hidden(self, case_dir, world, capsys):
        assert run_cli(train_args("run", "--overwrite", "--seed", "2"), capsys) == (0, "")
        assert RunFolder(case_dir / "run").read_config()["train_config"]["seed"] == 2
        assert hidden(case_dir) == [] and hidden(case_dir / "run" / "checkpoints") == []
        old, new = final_weights(world / "run"), final_weights(case_dir / "run")
        assert not all(torch.equal(old[name], new[name]) for name in old)

    @pytest.mark.parametrize(("out", "expect"), [pytest.param(*c[1:], id=c[0]) for c in OVERLAPS])
    def test_the_run_may_not_be_hold_or_sit_inside_its_dataset(self, case_dir, capsys, out, expect):
        shutil.copytree(case_dir / "data", case_dir / "nest" / "data")
        assert_refused(train_args(out, "--overwrite", data="nest/data"), expect, case_dir, capsys)


# ---- one writer per run ----------------------------------------------------------------------------

HOLD_LOCK = """
import sys
from biosrecall.locking import output_lock
with output_lock(sys.argv[1]):
    print("ready", flush=True)
    sys.stdin.readline()
"""

SLOW_RESUME = """
import sys, time
from biosrecall.train.trainer import Trainer
real = Trainer._one_update
def slow(*args):
    time.sleep(0.5)
    return real(*args)
Trainer._one_update = slow
from biosrecall.cli import main
main(sys.argv[1:])
"""


def wait_for_lock(case_dir: Path, process: subprocess.Popen) -> None:
    """Until `process` holds the run's lock (its pid is in the lock file)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and process.poll() is None:
        lock = case_dir / ".run.lock"
        if lock.exists() and lock.read_text().strip() == str(process.pid):
            return
        time.sleep(0.02)
    raise AssertionError("the first process never held the lock")


class TestOneWriterPerRun:
    @pytest.mark.parametrize(
        ("out", "extra"),
        [("run", ["--resume"]), ("run", ["--overwrite"]), ("run", []), ("fresh", [])],
        ids=["resume", "overwrite", "plain", "new-run"],
    )
    def test_a_second_writer_is_refused_naming_the_first(self, case_dir, capsys, out, extra):
        holder = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, out], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True)  # fmt: skip
        try:
            assert holder.stdout.readline() == "ready\n"
            expect = f"output {out} is in use by another biosrecall process (pid {holder.pid})"
            assert_refused(train_args(out, *extra), expect, case_dir, capsys)
        finally:
            holder.communicate(timeout=30)

    def test_two_resumes_at_once_train_each_update_once(self, case_dir, world, capsys):
        stopped_at(case_dir, 5, capsys)
        first = subprocess.Popen([sys.executable, "-c", SLOW_RESUME, *train_args("run", "--resume")],
                                 stderr=subprocess.PIPE, text=True)  # fmt: skip
        try:
            wait_for_lock(case_dir, first)
            for extra in (["--resume"], ["--overwrite"]):
                code, stderr = run_cli(train_args("run", *extra), capsys)
                assert code == 2 and f"(pid {first.pid})" in stderr and stderr.count("\n") == 1, stderr
        finally:
            _, stderr = first.communicate(timeout=120)
        assert first.returncode == 0, stderr
        assert_same_run(case_dir / "run", world / "run")  # read_metrics refuses a row logged twice


# ---- a disk that fills while saving ----------------------------------------------------------------


class FullDisk:
    def write(self, data) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def full_disk_for_metrics(update: int):
    """Make the metrics row of `update` find the disk full."""

    def inject(monkeypatch) -> None:
        real = MetricsLog.append

        def append(self, record):
            if record["update"] == update:
                self._handle = FullDisk()
            return real(self, record)

        monkeypatch.setattr(MetricsLog, "append", append)

    return inject


class TestFullDiskWhileSaving:
    @pytest.mark.parametrize(
        ("inject", "saved"),
        [(full_disk("state", 3), 3), (full_disk("weights", 4), 3), (full_disk_for_metrics(7), 6)],
        ids=["kept-checkpoint-state", "latest-weights", "metrics-row"],
    )
    def test_latest_survives_and_the_resume_ends_bit_identical(self, case_dir, world, capsys, inject, saved):
        shutil.rmtree(case_dir / "run")
        with pytest.MonkeyPatch.context() as patch:
            inject(patch)
            code, stderr = run_cli(train_args("run"), capsys)
        assert code == 2 and stderr.count("\n") == 1 and "Traceback" not in stderr, stderr
        assert "cannot write run" in stderr and "No space left on device (errno 28, ENOSPC)" in stderr
        assert f"still holds the complete state of update {saved}" in stderr
        assert RunFolder(case_dir / "run").latest_checkpoint().name == f"state-{saved:08d}"
        checkpoint_files.load_checkpoint(case_dir / "run" / "checkpoints" / "latest")
        assert hidden(case_dir) == [] and hidden(case_dir / "run" / "checkpoints") == []
        assert run_cli(train_args("run", "--resume"), capsys) == (0, "")
        assert_same_run(case_dir / "run", world / "run")
