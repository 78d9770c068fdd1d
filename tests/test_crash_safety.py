"""Crash safety: SIGKILL a `biosrecall train` process at seeded random points, then resume.

After every kill, each checkpoint folder on disk must load (a hard kill never leaves a half-written
checkpoint), and every resumed run must end with weights bit-identical to an uninterrupted run's.
Kill points are drawn from a seeded generator: a training update to wait for (the `latest` link shows
progress at every save) plus a random delay, so kills land mid-update and mid-save alike.

    pytest -q -m slow tests/test_crash_safety.py      # about a minute
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from biosrecall.bios import generate_dataset
from biosrecall.train.checkpoint_files import load_checkpoint
from biosrecall.train.run_folder import RunFolder

pytestmark = pytest.mark.slow

KILLS = 3
KILL_SEED = 20240


def train_command(data: Path, run_dir: Path, *extra: str) -> list[str]:
    return [
        sys.executable, "-m", "biosrecall", "train", "--data", str(data), "--out", str(run_dir),
        "--preset", "bios-tiny", "--batch-size", "4", "--seed", "1", "--lr", "3e-3",
        "--schedule", "fixed_first:k0=4,switch=0.8,finish=uniform", "--budget-of", "fixed:2:60",
        "--checkpoint-fractions", "0.25,0.45,0.67,0.8,1.0", "--save-every", "2", "--quiet", *extra,
    ]  # fmt: skip


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> tuple[Path, Path]:
    """The dataset and one uninterrupted run of it."""
    root = tmp_path_factory.mktemp("crash")
    data = generate_dataset(root / "data", people=60, seed=3)
    subprocess.run(train_command(data, root / "whole"), check=True, capture_output=True)
    return data, root / "whole"


def saved_update(run_dir: Path) -> int:
    """The update of the newest resumable state, from the `latest` link's target name."""
    link = run_dir / "checkpoints" / "latest"
    try:
        return int(os.readlink(link).rsplit("-", 1)[1])
    except (FileNotFoundError, ValueError, IndexError):
        return -1


def kill_at(process: subprocess.Popen, run_dir: Path, update: int, delay: float) -> None:
    """SIGKILL once a state at or after `update` is saved and `delay` more seconds have passed."""
    deadline = time.monotonic() + 120
    while saved_update(run_dir) < update:
        assert process.poll() is None, "the run ended before the kill point"
        assert time.monotonic() < deadline, f"no state saved at update {update} within 120 s"
        time.sleep(0.005)
    time.sleep(delay)
    assert process.poll() is None, "the run ended before the kill point; draw an earlier one"
    os.kill(process.pid, signal.SIGKILL)
    process.wait(timeout=30)
    assert process.returncode == -signal.SIGKILL


def assert_every_checkpoint_loads(run_dir: Path) -> None:
    """Every checkpoint folder (fractions, switch, state-*, latest) loads; temporaries are hidden."""
    folders = [p for p in (run_dir / "checkpoints").iterdir() if not p.name.startswith(".")]
    assert folders, "the kill came before any checkpoint"
    for folder in folders:
        load_checkpoint(folder)


def kill_points(total_updates: int) -> list[tuple[int, float]]:
    """Seeded (update, delay) pairs, one in each of KILLS equal stretches of the run (the last few
    updates are left out so the run cannot finish before the kill)."""
    rng = random.Random(KILL_SEED)
    span = total_updates - 6
    edges = [1 + i * span // KILLS for i in range(KILLS + 1)]
    return [(rng.randrange(lo, hi), rng.uniform(0.0, 0.12)) for lo, hi in zip(edges, edges[1:], strict=False)]


def test_sigkill_at_random_points_then_resume_matches_an_uninterrupted_run(reference, tmp_path):
    data, whole = reference
    total = RunFolder(whole).read_config()["plan"]["updates"]
    expected = load_file(str(RunFolder(whole).fraction_checkpoints()[1.0] / "model.safetensors"))
    expected_losses = [row["loss"] for row in RunFolder(whole).read_metrics()]
    for index, (update, delay) in enumerate(kill_points(total)):
        run_dir = tmp_path / f"cut-{index}"
        process = subprocess.Popen(train_command(data, run_dir), stderr=subprocess.DEVNULL)
        kill_at(process, run_dir, update, delay)
        assert_every_checkpoint_loads(run_dir)
        subprocess.run(train_command(data, run_dir, "--resume"), check=True, capture_output=True)
        got = load_file(str(RunFolder(run_dir).fraction_checkpoints()[1.0] / "model.safetensors"))
        assert got.keys() == expected.keys()
        changed = [name for name in expected if not torch.equal(got[name], expected[name])]
        assert changed == [], f"kill at update {update} (+{delay:.3f} s): weights differ in {changed}"
        assert [row["loss"] for row in RunFolder(run_dir).read_metrics()] == expected_losses
        assert sorted(RunFolder(run_dir).fraction_checkpoints()) == sorted(
            RunFolder(whole).fraction_checkpoints()
        )


# A kill at one exact instant, too narrow for the random kills above to hit reliably: while `latest`
# has been swapped to the new state and the old state folder is being deleted file by file.
KILLED_DURING_CLEANUP = """
import os, shutil, signal, sys
from biosrecall.model import LoopedTransformer, get_preset
from biosrecall.train.run_folder import RunFolder
model = LoopedTransformer(get_preset("bios-tiny"))
meta = {"model_config": model.config.to_dict(), "update": 1}
RunFolder(sys.argv[1]).save_latest(model, meta, {"optimizer": {}})

def rmtree_then_die(path, ignore_errors=False):
    os.remove(os.path.join(path, sorted(os.listdir(path))[0]))
    os.kill(os.getpid(), signal.SIGKILL)

shutil.rmtree = rmtree_then_die
RunFolder(sys.argv[1]).save_latest(model, {**meta, "update": 2}, {"optimizer": {}})
"""


def test_a_kill_while_the_previous_state_is_deleted_leaves_only_loadable_folders(tmp_path):
    done = subprocess.run([sys.executable, "-c", KILLED_DURING_CLEANUP, str(tmp_path / "run")])
    assert done.returncode == -signal.SIGKILL
    assert saved_update(tmp_path / "run") == 2
    assert_every_checkpoint_loads(tmp_path / "run")
