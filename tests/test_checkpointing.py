"""The trainer's checkpointing: which budget fractions an update crosses, and both `Checkpointer`s
(single-file for one process or DDP, DCP-sharded for FSDP) driven through the one interface the loop
uses: kept checkpoints, `latest` swapped safely (also when a kill lands between hiding an old state and
deleting it), and a restore that gives back the exact weights, optimizer and batch-source state.

The sharded checkpointer runs on two gloo processes on the CPU, like the FSDP runs of test_lm_train.py.

    pytest -q tests/test_checkpointing.py
"""

from __future__ import annotations

import shutil
from contextlib import nullcontext
from pathlib import Path
from unittest import mock

import numpy as np
import pytest
import torch
from harness import free_port

from biosrecall.model import LoopedTransformer, get_preset
from biosrecall.train import distributed
from biosrecall.train.checkpoint_files import load_checkpoint, load_training_state
from biosrecall.train.config import TrainConfig
from biosrecall.train.distributed import DistInfo
from biosrecall.train.optim import build_optimizer
from biosrecall.train.run_folder import RunFolder
from biosrecall.train.sharded import ShardedCheckpointer
from biosrecall.train.trainer import Checkpointer, backward_and_clip, fractions_crossed

SOURCE = {"seed": 7, "position": 123}  # what a batch source hands the checkpointer to save
CONFIG = TrainConfig(budget=1.0, lr=1e-2)

# ---- which fractions an update crosses ------------------------------------------------------------


def test_an_update_crossing_several_fractions_keeps_each_once():
    fractions = (0.25, 0.5, 1.0)
    assert fractions_crossed(fractions, [], flops=10.0, budget=100.0, finished=False) == []
    assert fractions_crossed(fractions, [], flops=60.0, budget=100.0, finished=False) == [0.25, 0.5]
    assert fractions_crossed(fractions, [0.25, 0.5], flops=60.0, budget=100.0, finished=False) == []


def test_the_final_update_keeps_the_largest_fraction_even_short_of_the_budget():
    fractions = (0.5, 1.0)
    assert fractions_crossed(fractions, [0.5], flops=99.0, budget=100.0, finished=False) == []
    assert fractions_crossed(fractions, [0.5], flops=99.0, budget=100.0, finished=True) == [1.0]
    assert fractions_crossed((0.5, 0.8), [], flops=70.0, budget=100.0, finished=True) == [0.5, 0.8]


# ---- both checkpointers through one interface -----------------------------------------------------


class Killed(BaseException):
    """Stands for a SIGKILL: nothing after it runs."""


def dies_while_deleting_old_states():
    """A process killed after an old state was hidden (renamed) and before it was deleted."""
    real_rmtree = shutil.rmtree

    def rmtree(path, *args, **kwargs):
        if Path(path).name.startswith(".state-") and Path(path).name.endswith(".old"):
            raise Killed(path)
        return real_rmtree(path, *args, **kwargs)

    return mock.patch.object(shutil, "rmtree", rmtree)


def build(dist: DistInfo, kind: str, run_dir: Path, seed: int):
    """A tiny model (FSDP-wrapped for the sharded kind), its AdamW, and the checkpointer under test."""
    torch.manual_seed(seed)
    raw = LoopedTransformer(get_preset("bios-tiny", vocab_size=64))
    model = distributed.wrap_model(raw, dist, "fsdp" if kind == "sharded" else "ddp", torch.device("cpu"))
    optimizer = build_optimizer(raw, CONFIG)
    checkpointer = {"local": Checkpointer, "sharded": ShardedCheckpointer}[kind]
    return model, optimizer, checkpointer(RunFolder(run_dir), dist, raw, optimizer)


def train_one_update(model, optimizer, dist: DistInfo, update: int) -> None:
    rows = np.random.default_rng(update).integers(0, 64, size=(4, 17))
    backward_and_clip(model, rows, None, depth=2, grad_clip=1.0, dist=dist, parallel="fsdp")
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def local(tensor: torch.Tensor) -> torch.Tensor:
    """This rank's part of a parameter or optimizer moment (the whole tensor when not sharded)."""
    return tensor.to_local() if hasattr(tensor, "to_local") else tensor


def snapshot(model, optimizer) -> list[torch.Tensor]:
    """This rank's weights and AdamW moments, copied."""
    tensors = []
    for p in model.parameters():
        moments = optimizer.state[p]
        tensors += [local(t).detach().clone() for t in (p, moments["exp_avg"], moments["exp_avg_sq"])]
    return tensors


def full_weights(model) -> dict[str, torch.Tensor]:
    """The whole weights on every rank (collective under FSDP)."""
    return {
        name: (p.full_tensor() if hasattr(p, "full_tensor") else p).detach().clone()
        for name, p in model.named_parameters()
    }


def meta(model, update: int, fraction: float | None = None) -> dict:
    return {"model_config": model.config.to_dict(), "update": update, "fraction": fraction}


def exercise(dist: DistInfo, kind: str, run_dir: Path) -> None:
    """Everything the loop asks of a checkpointer, on every rank (the sharded calls are collective)."""
    model, optimizer, checkpointer = build(dist, kind, run_dir, seed=1)
    raw, root = checkpointer.model, run_dir / "checkpoints"
    train_one_update(model, optimizer, dist, 0)
    checkpointer.save_kept([(RunFolder(run_dir).checkpoint_dir(0.5), meta(raw, 1, 0.5))], SOURCE)
    kept_weights = full_weights(raw)
    checkpointer.save_latest(meta(raw, 1), SOURCE)
    train_one_update(model, optimizer, dist, 1)
    saved = snapshot(raw, optimizer)

    with pytest.raises(Killed) if dist.is_main else nullcontext(), dies_while_deleting_old_states():
        checkpointer.save_latest(meta(raw, 2), SOURCE)
    if dist.is_main:
        distributed.barrier(dist)  # the one the killed rank never reached; its peer waits in it
        assert RunFolder(run_dir).latest_checkpoint().name == "state-00000002"
        assert (root / ".state-00000001.old").is_dir() and not (root / "state-00000001").exists()
    distributed.barrier(dist)

    # A resumed run (other initial weights) finds the complete state of update 2 behind `latest`.
    fresh_model, fresh_optimizer, resumed = build(dist, kind, run_dir, seed=2)
    restored_meta, source_state = resumed.restore(RunFolder(run_dir).latest_checkpoint())
    assert restored_meta["update"] == 2 and source_state == SOURCE
    assert all(
        torch.equal(a, b) for a, b in zip(saved, snapshot(resumed.model, fresh_optimizer), strict=True)
    )

    # The next saves (one of them the same update twice) clean the hidden leftover up.
    train_one_update(fresh_model, fresh_optimizer, dist, 2)
    resumed.save_latest(meta(resumed.model, 3), SOURCE)
    resumed.save_latest(meta(resumed.model, 3), SOURCE)
    if dist.is_main:
        assert sorted(path.name for path in root.iterdir()) == ["0.5", "latest", "state-00000003"]
        check_kept_checkpoint(RunFolder(run_dir).checkpoint_dir(0.5), kept_weights)


def check_kept_checkpoint(path: Path, weights: dict[str, torch.Tensor]) -> None:
    """A kept checkpoint is the single-file format: whole weights, and an optimizer state in
    `torch.optim`'s layout that an optimizer built on the loaded model accepts."""
    model, meta = load_checkpoint(path)
    assert meta["fraction"] == 0.5
    assert all(torch.equal(p, weights[name]) for name, p in model.named_parameters())
    training_state = load_training_state(path)
    assert training_state["source"] == SOURCE
    optimizer = build_optimizer(model, CONFIG)
    optimizer.load_state_dict(training_state["optimizer"])
    assert all(optimizer.state[p]["exp_avg"].shape == p.shape for p in model.parameters())


def exercise_on_rank(rank: int, world_size: int, port: int, kind: str, run_dir: Path) -> None:
    torch.set_num_threads(1)
    torch.distributed.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size
    )
    try:
        exercise(DistInfo(rank=rank, world_size=world_size), kind, run_dir)
    finally:
        torch.distributed.destroy_process_group()


def test_local_checkpointer_saves_restores_and_survives_a_kill_while_deleting(tmp_path):
    exercise(DistInfo(), "local", tmp_path / "run")


@pytest.mark.distributed
def test_sharded_checkpointer_saves_restores_and_survives_a_kill_while_deleting(tmp_path):
    torch.multiprocessing.spawn(
        exercise_on_rank, args=(2, free_port(), "sharded", tmp_path / "run"), nprocs=2, join=True
    )
