"""Checkpoints of FSDP runs: sharded `torch.distributed.checkpoint` (DCP) state and full exports.

Under `torchrun ... --parallel fsdp` no rank holds the whole model, so the `Trainer` gets
a `ShardedCheckpointer` (overriding every method of the trainer's `Checkpointer`), whose every method
is collective (all ranks call it):

    RUN_DIR/checkpoints/latest -> state-<update>/
        dcp/                 model and optimizer shards plus DCP's `.metadata`, written by every rank
                             (DCP reshards on load, so a resume may use another number of processes)
        meta.json            the same sidecar as every checkpoint
        training_state.pt    the batch source's state (the optimizer lives in dcp/)

The folder is assembled under a temporary name and renamed into place before `latest` is swapped by
the same `RunFolder.swap_latest` as single-process runs use, so a kill at any moment leaves a
complete state behind.

Kept checkpoints (budget fractions, the switch, the final one) use the one single-file format of
`checkpoint_files.py`: full weights are gathered on rank 0 (on the CPU) and written with `save_checkpoint`,
with the full optimizer state converted to `torch.optim`'s own layout. `load_checkpoint`, evaluation
and the update diagnostic therefore read FSDP runs exactly like single-process ones.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
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

from biosrecall.errors import BiosrecallError, first_line
from biosrecall.model import LoopedTransformer
from biosrecall.train import checkpoint_files, distributed
from biosrecall.train.run_folder import hide_state, temporary_path
from biosrecall.train.trainer import Checkpointer, KeptCheckpoint

DCP_DIR = "dcp"


class ShardedCheckpointer(Checkpointer):
    """FSDP: no rank holds the whole model, so every method is collective (all ranks call it)."""

    def save_latest(self, meta: dict[str, Any], source_state: dict[str, Any]) -> None:
        """Every rank writes its shards into `.state-<update>.tmp/`; rank 0 adds the sidecar, renames
        the folder into place and points `latest` at it."""
        state = self.folder.state_dir(meta["update"])
        tmp = temporary_path(state)
        if self.dist.is_main:
            shutil.rmtree(tmp, ignore_errors=True)  # left by a kill during an earlier save
            with checkpoint_files.writing(tmp):
                tmp.mkdir(parents=True)
        distributed.barrier(self.dist)
        dcp.save(self._sharded_state(), checkpoint_id=tmp / DCP_DIR)
        if self.dist.is_main:
            with checkpoint_files.writing(state):
                checkpoint_files.write_meta(tmp, meta)
                checkpoint_files.write_training_state(
                    tmp / checkpoint_files.STATE_FILE, {"source": source_state}
                )
                if state.exists():  # the same update saved twice (a stop right after a save)
                    hide_state(state)
                os.replace(tmp, state)
            self.folder.swap_latest(meta["update"])
        distributed.barrier(self.dist)

    def restore(self, path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
        if not (path / DCP_DIR).is_dir():
            raise BiosrecallError(
                f"cannot resume: {path} is not a sharded (FSDP) checkpoint; resume with the run's own "
                "--parallel mode"
            )
        # Building the state first gives every tensor (optimizer moments included) a place to load into.
        meta = checkpoint_files.read_meta(path)
        source_state = checkpoint_files.load_training_state(path, optimizer=False)["source"]
        state = self._sharded_state()
        try:
            dcp.load(state, checkpoint_id=path / DCP_DIR)
        except Exception as exc:  # DCP wraps each rank's failure (missing or truncated shards)
            raise checkpoint_files.DamagedCheckpoint(
                f"sharded state {path / DCP_DIR} is corrupt: {first_line(exc)}"
            ) from None
        set_state_dict(
            self.model,
            self.optimizer,
            model_state_dict=state["model"],
            optim_state_dict=state["optimizer"],
        )
        return meta, source_state

    def save_kept(self, kept: Sequence[KeptCheckpoint], source_state: dict[str, Any]) -> None:
        """Gather full weights and optimizer state on rank 0 (on the CPU) and write each checkpoint."""
        options = StateDictOptions(full_state_dict=True, cpu_offload=True)
        model_state = get_model_state_dict(self.model, options=options)
        optimizer_state = get_optimizer_state_dict(self.model, self.optimizer, options=options)
        if self.dist.is_main:
            model = full_model(self.model.config, model_state)
            training_state = {"optimizer": indexed_optimizer_state(optimizer_state), "source": source_state}
            for path, meta in kept:
                checkpoint_files.save_checkpoint(path, model, meta, training_state)
        distributed.barrier(self.dist)

    def _sharded_state(self) -> dict[str, Any]:
        model_state, optimizer_state = get_state_dict(self.model, self.optimizer)
        return {"model": model_state, "optimizer": optimizer_state}


def full_model(config, state: dict[str, torch.Tensor]) -> torch.nn.Module:
    """A CPU `LoopedTransformer` holding `state` (built on the meta device: no wasted initialisation)."""

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
