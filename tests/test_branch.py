"""Finishing branches (`train --from RUN --at-update N`): a branch of a constant-rate trunk ends
bit-identical to the standalone run with its schedule, learning-rate schedule and seed; branches that
could not be that run are refused with one line and nothing written.

    pytest -q tests/test_branch.py
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from safetensors.torch import load_file

from biosrecall.cli import main
from biosrecall.errors import BiosrecallError
from biosrecall.train.branch import Branch
from biosrecall.train.config import TrainConfig
from biosrecall.train.optim import learning_rate
from biosrecall.train.run_folder import RunFolder, update_dirname
from biosrecall.train.trainer import train_bios

TIMING_FIELDS = {"wall_s", "tokens_per_s", "flops_per_s"}
FIXED_FIRST = "fixed_first:k0=2,switch=0.8,finish=uniform,range=1-4"
# wsd with an absolute warm-up: the trunk's rate before the branch point is the peak whatever its length.
WSD = {"lr_schedule": "wsd", "warmup_updates": 2, "lr": 3e-3, "batch_size": 4, "seq_len": 96}
BRANCH_AT = 8  # the fixed-first run of 10 updates switches (and starts decaying) at update 8


def config(schedule: str, updates: int, **extra) -> TrainConfig:
    return TrainConfig(schedule=schedule, updates=updates, seed=3, **WSD, **extra)


def final_weights(run: Path) -> dict:
    return load_file(str(RunFolder(run).fraction_checkpoints()[1.0] / "model.safetensors"))


def losses(run: Path) -> list[tuple]:
    return [
        tuple(v for k, v in sorted(row.items()) if k not in TIMING_FIELDS)
        for row in RunFolder(run).read_metrics()
    ]


@pytest.fixture(scope="module")
def trunk(bios_dataset_dir, tmp_path_factory) -> Path:
    """Fixed depth 2 for 16 updates at a constant rate, keeping its state after update 8."""
    run = tmp_path_factory.mktemp("branch") / "trunk"
    train_bios(bios_dataset_dir, run, config("fixed:2", 16, keep_updates=(BRANCH_AT,)), "bios-tiny")
    return run


def test_a_branch_equals_the_standalone_run_bit_for_bit(bios_dataset_dir, trunk, tmp_path):
    standalone, branched = tmp_path / "standalone", tmp_path / "branched"
    train_bios(bios_dataset_dir, standalone, config(FIXED_FIRST, 10), "bios-tiny")
    branch = Branch(trunk, BRANCH_AT)
    train_bios(bios_dataset_dir, branched, config(FIXED_FIRST, 10), "bios-tiny", branch=branch)

    mine, theirs = final_weights(branched), final_weights(standalone)
    assert mine.keys() == theirs.keys()
    assert all(mine[name].equal(theirs[name]) for name in mine)
    assert losses(branched) == losses(standalone)
    assert RunFolder(branched).read_config()["branch"] == {
        "path": str(trunk.resolve()),
        "at_update": BRANCH_AT,
    }
    # The branch keeps what the standalone run keeps from the branch point on: its switch (the
    # branch point itself) and the fractions crossed later; earlier ones belong to the trunk.
    kept = {
        p.name
        for p in (branched / "checkpoints").iterdir()
        if not p.name.startswith((".", "state-", "latest"))
    }
    assert {"switch", "1.0"} <= kept <= {p.name for p in (standalone / "checkpoints").iterdir()}
    switch = [
        load_file(str(run / "checkpoints" / "switch" / "model.safetensors")) for run in (branched, standalone)
    ]
    assert all(switch[0][name].equal(switch[1][name]) for name in switch[0])
    # The branch is trained from the trunk: its updates before the branch point are the trunk's own.
    assert losses(branched)[:BRANCH_AT] == losses(trunk)[:BRANCH_AT]


def test_the_trunk_keeps_its_branch_point_and_a_branch_decays_on_its_own_schedule(
    bios_dataset_dir, trunk, tmp_path
):
    assert (trunk / "checkpoints" / update_dirname(BRANCH_AT) / "training_state.pt").is_file()
    run = tmp_path / "k2-decay"
    branch = Branch(trunk, 12)  # not kept: refused, naming the kept points
    with pytest.raises(BiosrecallError, match="kept states after updates 4, 8, 11, 13, 16 only"):
        train_bios(bios_dataset_dir, run, config("fixed:2", 10), "bios-tiny", branch=branch)
    # The same schedule with its own decay: fixed depth 2 at a 10-update budget, from the trunk.
    train_bios(bios_dataset_dir, run, config("fixed:2", 10), "bios-tiny", branch=Branch(trunk, BRANCH_AT))
    rates = [row["lr"] for row in RunFolder(run).read_metrics()]
    assert rates == [learning_rate(u, 10, config("fixed:2", 10)) for u in range(10)]


def test_a_branch_on_a_moved_copy_of_the_data_trains(bios_dataset_dir, trunk, tmp_path):
    """The dataset is matched by its manifest hash, not by where it lies."""
    data = tmp_path / "data-elsewhere"
    shutil.copytree(bios_dataset_dir, data)
    run = tmp_path / "k2"
    train_bios(data, run, config("fixed:2", 10), "bios-tiny", branch=Branch(trunk, BRANCH_AT))
    assert 1.0 in RunFolder(run).fraction_checkpoints()


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--at-update", "20"], "saved states only up to update 16"),
        (["--at-update", "5"], "train it with --keep-updates 5"),
        (["--at-update", "8", "--seed", "4"], "seed differs"),
        (["--at-update", "8", "--batch-size", "8"], "batch_size differs"),
        (["--at-update", "8", "--warmup-updates", "3"], "update 0 has learning rate"),
        (["--at-update", "8", "--schedule", "fixed:3"], "update 0 trains at depth 3 here but 2"),
        (["--at-update", "8", "--preset", "bios-cpu"], "the parent's model_config.context_length differs"),
        (["--at-update", "0"], "at_update must be a positive integer"),
        ([], "--from and --at-update go together"),
    ],
)
def test_a_branch_that_is_not_the_parents_continuation_is_one_line_exit_2(
    bios_dataset_dir, trunk, tmp_path, capsys, args, named
):
    out = tmp_path / "out"
    settings = ["--lr-schedule", "wsd", "--lr", "3e-3", "--batch-size", "4", "--seq-len", "96"]
    base = ["train", "--data", str(bios_dataset_dir), "--out", str(out), "--preset", "bios-tiny", "--quiet"]
    defaults = {"--seed": "3", "--warmup-updates": "2", "--schedule": FIXED_FIRST}
    extra = [item for key, value in defaults.items() if key not in args for item in (key, value)]
    with pytest.raises(SystemExit) as exit_info:
        main([*base, *settings, "--updates", "10", "--from", str(trunk), *args, *extra])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1 and err.startswith("error: ") and named in err
    assert list(tmp_path.iterdir()) == []


def test_decay_share_and_absolute_warm_up_shape_the_rate():
    wsd = config("fixed:2", 100, decay=0.5)
    rates = [learning_rate(u, 100, wsd) for u in range(100)]
    assert rates[0] == pytest.approx(1.5e-3) and rates[1] == rates[49] == 3e-3  # two warm-up updates
    assert rates[50] == 3e-3 and rates[51] < 3e-3 and rates[99] == pytest.approx(3e-4)
    with pytest.raises(BiosrecallError, match="decay applies to lr_schedule wsd only"):
        TrainConfig(decay=0.5)
