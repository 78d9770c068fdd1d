"""Hostile outputs: paths that overlap the working folder or an input, an `--overwrite` that fails
part-way, a second writer of the same output, and the leftovers of a writer killed by SIGKILL.

Uses the world and the checks of `test_hostile_data` (exit 2, one `error:` line, no traceback, nothing
under the test's folder touched). Real second processes are used where another process is the point.

    pytest -q tests/test_hostile_outputs.py
"""

from __future__ import annotations

import errno
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import test_hostile_data as hostile
from harness import changes, run_cli, snapshot
from test_hostile_data import PREPARE, _cases, assert_refused, hidden

from biosrecall import atomic
from biosrecall.bios import load_dataset
from biosrecall.errors import BiosrecallError
from biosrecall.locking import output_lock

world, case_dir = hostile.world, hostile.case_dir  # the same fixtures: a fresh copy of the world per test

# ---- outputs that overlap the working folder or an input ------------------------------------------

OVERLAPS = [
    ("generate-dot", ["generate", "--out", ".", "--overwrite"], "is the working folder"),
    ("generate-dotdot", ["generate", "--out", "..", "--overwrite"], "is the working folder or one of its parents"),
    ("generate-x-dotdot", ["generate", "--out", "x/..", "--overwrite"], "is the working folder"),
    ("generate-templates", ["generate", "--out", "templates", "--templates", "templates", "--overwrite"],
     "is the input templates"),
    ("generate-inside-templates", ["generate", "--out", "templates/new", "--templates", "templates"],
     "lies inside the input templates"),
    ("prepare-corpus-onto-itself", ["lm", "prepare", "corpus", "--out", "corpus", "--overwrite"],
     "output corpus is the input corpus"),
    ("prepare-output-holds-input", ["lm", "prepare", "corpus/good.txt", "--out", "corpus", "--overwrite"],
     "contains the input corpus/good.txt"),
    ("prepare-output-inside-input", ["lm", "prepare", "corpus", "--out", "corpus/shards"], "lies inside the input"),
    ("prepare-through-a-symlink", ["lm", "prepare", "linked", "--out", "corpus", "--overwrite"],
     "is the input linked"),
    ("prepare-over-its-tokenizer", ["lm", "prepare", "corpus/good.txt", "--out", "shards", "--overwrite",
                                    "--tokenizer", "shards/tokenizer.json"], "contains the input shards/tokenizer.json"),
    ("prepare-dot", [*PREPARE, "--out", ".", "--overwrite"], "is the working folder"),
]  # fmt: skip


class TestOverlappingOutputs:
    @pytest.mark.parametrize(("argv", "expect"), _cases(OVERLAPS))
    def test_refused_with_nothing_left_behind(self, case_dir, capsys, argv, expect):
        os.symlink("corpus", case_dir / "linked")
        assert_refused(argv, expect, case_dir.parent.parent, capsys)

    @pytest.mark.parametrize("out", [".", "..", "x/.."])
    def test_atomic_directory_refuses_them_before_making_temporaries(self, case_dir, out):
        before = snapshot(case_dir.parent.parent)
        with (
            pytest.raises(BiosrecallError, match="working folder"),
            atomic.atomic_directory(out, overwrite=True),
        ):
            pass
        assert changes(before, snapshot(case_dir.parent.parent)) == []


# ---- --overwrite is a swap -------------------------------------------------------------------------

COMMANDS = {
    "generate": (["generate", "--out", "out", "--people", "12", "--overwrite"], "biosrecall.bios.dataset",
                 "_write_folder", "people.parquet"),
    "prepare": ([*PREPARE, "--out", "out", "--overwrite"], "biosrecall.lm.shards", "_encode_splits",
                "train-00000.bin"),
}  # fmt: skip


def _make_old_output(case_dir: Path, command: str) -> dict[str, bytes]:
    source = case_dir / ("data" if command == "generate" else "shards")
    shutil.copytree(source, case_dir / "out")
    return {p.name: p.read_bytes() for p in (case_dir / "out").iterdir()}


class TestOverwriteSwap:
    @pytest.mark.parametrize("command", COMMANDS)
    def test_a_failure_while_building_keeps_the_old_output(self, case_dir, capsys, monkeypatch, command):
        argv, module, function, partial = COMMANDS[command]
        old = _make_old_output(case_dir, command)

        def fail_midway(folder, *args):
            folder = next(a for a in (folder, *args) if isinstance(a, Path))
            (folder / partial).write_bytes(b"partial")
            raise BiosrecallError("disk full (simulated)")

        monkeypatch.setattr(f"{module}.{function}", fail_midway)
        assert_refused(argv, "disk full (simulated)", case_dir / "out", capsys)
        assert {p.name: p.read_bytes() for p in (case_dir / "out").iterdir()} == old
        assert hidden(case_dir) == []

    @pytest.mark.parametrize("command", COMMANDS)
    def test_a_failure_in_the_swap_puts_the_old_output_back(self, case_dir, capsys, monkeypatch, command):
        argv = COMMANDS[command][0]
        old = _make_old_output(case_dir, command)
        real_replace = os.replace

        def failing_replace(src, dst):
            if str(src).endswith(".tmp") and Path(dst).name == "out":
                raise OSError(errno.EIO, "simulated I/O error", str(dst))
            real_replace(src, dst)

        monkeypatch.setattr(atomic.os, "replace", failing_replace)
        code, stderr = run_cli(argv, capsys)
        assert code == 2 and stderr.count("\n") == 1 and "simulated I/O error" in stderr, stderr
        assert {p.name: p.read_bytes() for p in (case_dir / "out").iterdir()} == old
        assert hidden(case_dir) == []

    @pytest.mark.parametrize("command", COMMANDS)
    def test_a_successful_overwrite_replaces_it_and_leaves_nothing_hidden(self, case_dir, capsys, command):
        old = _make_old_output(case_dir, command)
        code, stderr = run_cli(COMMANDS[command][0], capsys)
        assert (code, stderr) == (0, "")
        assert {p.name: p.read_bytes() for p in (case_dir / "out").iterdir()} != old
        assert hidden(case_dir) == []


# ---- one writer per output; leftovers of killed writers ---------------------------------------------

HOLD_LOCK = """
import sys
from biosrecall.locking import output_lock
with output_lock(sys.argv[1]):
    print("ready", flush=True)
    sys.stdin.read()
"""

KILLED_WRITER = """
import os, signal, sys
from biosrecall.atomic import atomic_directory
from biosrecall.locking import output_lock
with output_lock(sys.argv[1]):
    with atomic_directory(sys.argv[1], overwrite=True) as tmp:
        (tmp / "half-written.bin").write_bytes(b"half")
        os.kill(os.getpid(), signal.SIGKILL)
"""

NEW_OUTPUT = {
    "generate": ["generate", "--out", "out", "--people", "12"],
    "prepare": [*PREPARE, "--out", "out"],
}


class TestConcurrentAndKilledWriters:
    @pytest.mark.parametrize("command", NEW_OUTPUT)
    def test_a_second_writer_is_refused_naming_the_first(self, case_dir, capsys, command):
        holder = subprocess.Popen(
            [sys.executable, "-c", HOLD_LOCK, "out"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        try:
            assert holder.stdout.readline() == "ready\n"
            assert_refused(NEW_OUTPUT[command], f"in use by another biosrecall process (pid {holder.pid})",
                           case_dir.parent.parent, capsys)  # fmt: skip
        finally:
            holder.communicate(timeout=30)
        assert run_cli(NEW_OUTPUT[command], capsys) == (0, "")
        assert hidden(case_dir) == []

    def test_two_generate_processes_on_one_new_output_leave_one_whole_dataset(self, case_dir):
        argv = [sys.executable, "-m", "biosrecall", "generate", "--out", "out", "--people", "500"]
        racers = [subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
                  for _ in range(2)]  # fmt: skip
        results = sorted((r.wait(timeout=120), r.stderr.read()) for r in racers)
        assert [code for code, _ in results] == [0, 2], results
        error = results[1][1]
        assert error.count("\n") == 1 and error.startswith("error: ") and "Traceback" not in error
        assert "in use by another biosrecall process" in error or "--overwrite" in error, error
        assert load_dataset(case_dir / "out").num_people == 500
        assert hidden(case_dir) == []

    @pytest.mark.parametrize("command", NEW_OUTPUT)
    def test_the_next_run_removes_a_killed_writers_leftovers(self, case_dir, capsys, command):
        done = subprocess.run([sys.executable, "-c", KILLED_WRITER, "out"], capture_output=True)
        assert done.returncode == -signal.SIGKILL
        left = hidden(case_dir)
        assert ".out.lock" in left and any(name.endswith(".tmp") for name in left), left
        assert run_cli(NEW_OUTPUT[command], capsys) == (0, "")
        assert hidden(case_dir) == []
        assert not (case_dir / "out" / "half-written.bin").exists()

    def test_a_swap_killed_half_way_gets_the_old_output_back(self, case_dir):
        shutil.copytree(case_dir / "data", case_dir / "out")
        aside = case_dir / ".out.abcd1234.old"
        aside.mkdir()
        os.replace(case_dir / "out", aside / "previous")  # where a swap keeps it until the new one is in
        with output_lock(case_dir / "out"):
            pass
        assert load_dataset(case_dir / "out").manifest_hash == load_dataset(case_dir / "data").manifest_hash
        assert hidden(case_dir) == []
