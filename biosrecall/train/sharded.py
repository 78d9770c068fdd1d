"""Checkpoints of FSDP runs: sharded `torch.distributed.checkpoint` (DCP) state and full exports.

Under `torchrun ... --parallel fsdp` no rank holds the whole model, so the trainer (`loop.py`)
dispatches here instead of to `checkpoint.py`, and every call below is collective (all ranks call it):

    RUN_DIR/checkpoints/latest -> state-<update>/
        dcp/                 model and optimizer shards plus DCP's `.metadata`, written by every rank
                             (DCP reshards on load, so a resume may use another number of processes)
        meta.json            the same sidecar as every checkpoint
        training_state.pt    the batch source's state (the optimizer lives in dcp/)

The folder is assembled under a temporary name and renamed into place before `latest` is swapped,
exactly as for single-process runs, so a kill at any moment leaves a complete state behind.

Kept checkpoints (budget fractions, the switch, the final one) use the one single-file format of
`checkpoint.py`: full weights are gathered on rank 0 (on the CPU) and written with `save_checkpoint`,
with the full optimizer state converted to `torch.optim`'s own layout. `load_checkpoint`, evaluation
and the update diagnostic therefore read FSDP runs exactly like single-process ones.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    get_state_dict,
    set_state_dict,
)

from biosrecall.errors import BiosrecallError
from biosrecall.train import checkpoint as ckpt
from biosrecall.train import distributed as distributed_

DCP_DIR = "dcp"


def save_latest(setup, meta: dict[str, Any], source_state: dict[str, Any]) -> Path:
    """Write `state-<update>/` from every rank, then (rank 0) point `latest` at it and drop older ones."""
    root = setup.run_dir / "checkpoints"
    name = f"state-{int(meta['update']):08d}"
    tmp = root / f".{name}.tmp"
    if setup.dist.is_main:
        shutil.rmtree(tmp, ignore_errors=True)  # left by a kill during an earlier save
        tmp.mkdir(parents=True)
    distributed_.barrier(setup.dist)
    dcp.save(_sharded_state(setup), checkpoint_id=tmp / DCP_DIR)
    if setup.dist.is_main:
        (tmp / ckpt.META_FILE).write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
        torch.save({"source": source_state}, tmp / ckpt.STATE_FILE)
        _publish(root, tmp, name)
    distributed_.barrier(setup.dist)
    return root / name


def _publish(root: Path, tmp: Path, name: str) -> None:
    """Rename the finished folder into place and swap the `latest` link to it atomically."""
    final = root / name
    if final.exists():  # the same update saved twice (a stop right after a periodic save)
        shutil.rmtree(final)
    os.replace(tmp, final)
    link_tmp = root / f".{ckpt.LATEST}.tmp"
    link_tmp.unlink(missing_ok=True)
    os.symlink(name, link_tmp)
    os.replace(link_tmp, root / ckpt.LATEST)
    for old in root.glob("state-*"):
        if old.name != name:
            shutil.rmtree(old, ignore_errors=True)


def restore(setup, path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """Load model and optimizer shards from `path` into this run; returns (meta, training_state)."""
    if not (path / DCP_DIR).is_dir():
        raise BiosrecallError(
            f"cannot resume: {path} is not a sharded (FSDP) checkpoint; resume with the run's own "
            "--parallel mode"
        )
    # Building the state first gives every tensor (optimizer moments included) a place to load into.
    state = _sharded_state(setup)
    dcp.load(state, checkpoint_id=path / DCP_DIR)
    set_state_dict(
        setup.raw_model,
        setup.optimizer,
        model_state_dict=state["model"],
        optim_state_dict=state["optimizer"],
    )
    return ckpt.read_meta(path), ckpt.load_training_state(path)


def _sharded_state(setup) -> dict[str, Any]:
    model_state, optimizer_state = get_state_dict(setup.raw_model, setup.optimizer)
    return {"model": model_state, "optimizer": optimizer_state}


def save_kept(setup, keep: list[tuple[Path, dict[str, Any]]], source_state: dict[str, Any]) -> None:
    """Gather full weights and optimizer state on rank 0 and write each (path, meta) as a checkpoint."""
    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    model_state = get_model_state_dict(setup.raw_model, options=options)
    optimizer_state = get_optimizer_state_dict(setup.raw_model, setup.optimizer, options=options)
    if setup.dist.is_main:
        model = full_model(setup.raw_model.config, model_state)
        training_state = {"optimizer": indexed_optimizer_state(optimizer_state), "source": source_state}
        for path, meta in keep:
            ckpt.save_checkpoint(path, model, meta, training_state)
    distributed_.barrier(setup.dist)


def full_model(config, state: dict[str, torch.Tensor]) -> torch.nn.Module:
    """A CPU `LoopedTransformer` holding `state` (built on the meta device: no wasted initialisation)."""
    from biosrecall.model import LoopedTransformer

    with torch.device("meta"):
        model = LoopedTransformer(config)
    # Gathered tensors can be views into one larger buffer, which safetensors refuses to save.
    model.load_state_dict({name: tensor.clone() for name, tensor in state.items()}, assign=True)
    return model


def indexed_optimizer_state(state: dict[str, Any]) -> dict[str, Any]:
    """DCP's full optimizer state is keyed by parameter name; `torch.optim` keys parameters by their
    position over the param groups. Numbering the names in group order gives exactly the state an
    optimizer built by `build_optimizer` on the unsharded model would hold."""
    index: dict[str, int] = {}
    groups = []
    for group in state["param_groups"]:
        ids = []
        for name in group["params"]:
            index[name] = len(index)
            ids.append(index[name])
        groups.append({**group, "params": ids})
    return {"state": {index[name]: value for name, value in state["state"].items()}, "param_groups": groups}
