"""How a run saves and restores its checkpoints, behind one interface the training loop calls without
knowing how the run is parallel. `Trainer._checkpointer` picks the implementation:

    checkpointer.save_kept([(path, meta), ...], source.state_dict())   # budget fractions, the switch
    checkpointer.save_latest(meta, source.state_dict())                # the resumable `latest`
    meta, source_state = checkpointer.restore(path)                    # weights and optimizer loaded

- `LocalCheckpointer` (one process, or DDP where every rank holds the whole model): rank 0 writes the
  single-file format of `checkpoint_files.py`.
- `ShardedCheckpointer` (FSDP, in `sharded.py`): every call is collective; `latest` is a sharded
  `torch.distributed.checkpoint`, kept checkpoints are gathered into the single-file format.

Both publish `latest` through `RunFolder.swap_latest`, so a kill at any moment leaves a complete
state behind. Which kept checkpoints an update earns is the pure function `fractions_crossed`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from biosrecall.errors import first_line
from biosrecall.train import checkpoint_files, distributed
from biosrecall.train.distributed import DistInfo
from biosrecall.train.run_folder import RunFolder

KeptCheckpoint = tuple[Path, dict[str, Any]]  # (folder, meta) of a checkpoint to keep


class Checkpointer(ABC):
    """Saves and restores one run's model (unwrapped) and optimizer; every rank calls every method."""

    def __init__(
        self, folder: RunFolder, dist: DistInfo, model: torch.nn.Module, optimizer: torch.optim.Optimizer
    ):
        self.folder = folder
        self.dist = dist
        self.model = model
        self.optimizer = optimizer

    @abstractmethod
    def save_kept(self, kept: Sequence[KeptCheckpoint], source_state: dict[str, Any]) -> None:
        """Write each (folder, meta) as a single-file checkpoint with the optimizer state."""

    @abstractmethod
    def save_latest(self, meta: dict[str, Any], source_state: dict[str, Any]) -> Path:
        """Save the resumable state of update `meta["update"]` and point `latest` at it."""

    @abstractmethod
    def restore(self, path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
        """Load the weights and optimizer saved at `path`; returns (meta, batch source state)."""


class LocalCheckpointer(Checkpointer):
    """Every rank holds the whole model: rank 0 writes, and the others wait so none runs ahead of a
    `latest` that does not exist yet."""

    def save_kept(self, kept: Sequence[KeptCheckpoint], source_state: dict[str, Any]) -> None:
        if self.dist.is_main:
            training_state = self._training_state(source_state)
            for path, meta in kept:
                checkpoint_files.save_checkpoint(path, self.model, meta, training_state)

    def save_latest(self, meta: dict[str, Any], source_state: dict[str, Any]) -> Path:
        if self.dist.is_main:
            self.folder.save_latest(self.model, meta, self._training_state(source_state))
        distributed.barrier(self.dist)
        return self.folder.state_dir(meta["update"])

    def restore(self, path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
        saved, meta = checkpoint_files.load_checkpoint(path)
        training_state = checkpoint_files.load_training_state(path)
        self.model.load_state_dict(saved.state_dict())
        load_optimizer_state(self.optimizer, training_state["optimizer"], path)
        return meta, training_state["source"]

    def _training_state(self, source_state: dict[str, Any]) -> dict[str, Any]:
        return {"optimizer": self.optimizer.state_dict(), "source": source_state}


def load_optimizer_state(optimizer: torch.optim.Optimizer, state: dict[str, Any], path: Path) -> None:
    """Load a saved optimizer state; one that does not fit the model is a damaged checkpoint."""
    try:
        optimizer.load_state_dict(state)
    except (KeyError, ValueError, TypeError, RuntimeError, IndexError) as exc:
        raise checkpoint_files.DamagedCheckpoint(
            f"the optimizer state in {path / checkpoint_files.STATE_FILE} does not fit the model: "
            f"{first_line(exc)}"
        ) from None


def fractions_crossed(
    fractions: Sequence[float], done: Sequence[float], flops: float, budget: float, finished: bool
) -> list[float]:
    """The budget fractions not kept yet whose share of `budget` the running `flops` have reached. At the
    final update the largest fraction counts as reached: a run's realised FLOPs may stop just short."""
    largest = max(fractions, default=None)
    return [
        fraction
        for fraction in fractions
        if fraction not in done and (flops >= fraction * budget or (finished and fraction == largest))
    ]
