"""A run (bioS or LM) at one of its kept checkpoints, for the update diagnostic: weights, the AdamW state
rebuilt as the trainer builds it, the run's batch stream and planned depths, and the run's next updates.

    state, task = load_run_state("runs/ff", "switch")        # any one-checkpoint selector: 0.8, final
    state.lr()                                               # the LR of the run's next update
    continue_run(state, 16)                                  # the run's own next 16 updates, in place

`continue_run` is the trainer's step (planned depth, scheduled LR, the run's batch, loss, clipping,
AdamW) without its bookkeeping; continuing a fixed-first run from its switch to its last update
reproduces the run's final weights bit for bit on a CPU (tests/test_diagnose.py, test_diagnose_lm.py).
The checkpoint is chosen with the selector syntax of every command (`biosrecall.train.run_folder`), naming exactly
one checkpoint. What is scored, and the batch source, depend on the kind of run: `diagnose.tasks`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from biosrecall.compute.schedules import parse_schedule
from biosrecall.diagnose.tasks import DiagnosisTask, RunInfo, load_task
from biosrecall.errors import BiosrecallError
from biosrecall.train.checkpoint_files import load_checkpoint, load_training_state, read_meta
from biosrecall.train.config import TrainConfig
from biosrecall.train.distributed import autocast_for, resolve_device
from biosrecall.train.optim import build_optimizer, learning_rate, set_learning_rate
from biosrecall.train.run_folder import SWITCH, RunFolder, seq_len_of
from biosrecall.train.trainer import BatchSource, backward_and_clip


@dataclass
class RunState:
    """A run's weights and AdamW state before its update `update`, and what taking its next updates needs."""

    checkpoint: str  # the label of the checkpoint it was loaded from ("switch", "0.8", ...)
    model: torch.nn.Module
    optimizer: torch.optim.AdamW
    config: TrainConfig
    source: BatchSource
    depths: np.ndarray  # the planned depth of every update of the run
    switch_update: int | None
    update: int
    autocast: Callable

    @property
    def planned(self) -> int:
        return len(self.depths)

    def lr(self) -> float:
        return learning_rate(self.update, self.planned, self.config)


def load_run_state(
    run_dir, checkpoint=SWITCH, device="auto", data_dir=None, people=None, val_sequences=None
) -> tuple[RunState, DiagnosisTask]:
    """The run at the one checkpoint `checkpoint` selects, its optimizer rebuilt as the trainer builds it,
    and what the diagnostic scores on it (`people`: bioS runs only, `val_sequences`: LM runs only; None =
    the default)."""
    run_dir = Path(run_dir)
    label, path = RunFolder(run_dir).select_checkpoint(checkpoint)
    record = RunFolder(run_dir).read_config()
    config = TrainConfig.from_dict(record["train_config"])
    device = resolve_device(str(device))
    # bf16 autocast exists on CUDA only; a CUDA-trained run diagnosed on a CPU is evaluated in fp32.
    autocast = nullcontext if device.type == "cpu" else autocast_for(device, config.precision)
    run = RunInfo(run_dir, record, read_meta(path), config, seq_len_of(record), autocast)
    task = load_task(run, data_dir, people, val_sequences)
    training_state = load_training_state(path)
    model, meta = load_checkpoint(path, device=device)
    optimizer = build_optimizer(model, config)
    try:
        optimizer.load_state_dict(training_state["optimizer"])
    except (KeyError, ValueError) as exc:
        raise BiosrecallError(f"the optimizer state in {path} does not fit the model: {exc}") from None
    planned = int(record["plan"]["updates"])
    state = RunState(
        checkpoint=label,
        model=model,
        optimizer=optimizer,
        config=config,
        source=task.source,
        depths=parse_schedule(config.schedule).depths(planned, config.seed),
        switch_update=record["plan"].get("switch_update"),
        update=int(meta["update"]),
        autocast=autocast,
    )
    return state, task


def continue_run(state: RunState, updates: int) -> None:
    """Take the run's next `updates` updates in place: the trainer's step (planned depth, scheduled LR,
    the run's batch, loss, clipping and AdamW) without its bookkeeping."""
    if state.update + updates > state.planned:
        raise BiosrecallError(
            f"cannot continue {updates} updates from update {state.update}: the run plans {state.planned}"
        )
    model, optimizer, config = state.model, state.optimizer, state.config
    for _ in range(updates):
        set_learning_rate(optimizer, learning_rate(state.update, state.planned, config))
        rows = state.source.batch(state.update)
        depth = int(state.depths[state.update])
        backward_and_clip(
            model, rows, state.source.pad_id, depth, config.grad_clip, state.autocast, config.grad_accum
        )
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        state.update += 1


def check_continuation(state: RunState, after: Sequence[int]) -> None:
    """Refuse continuations past the run's last update, or through a fixed phase (before the switch)."""
    checkpoint = state.checkpoint
    furthest = state.update + max(after)
    if furthest > state.planned:
        raise BiosrecallError(
            f"--after-uniform {max(after)} runs past the run's end: checkpoint {checkpoint} is at update "
            f"{state.update} of {state.planned}"
        )
    if max(after) > 0 and state.switch_update is not None and state.update < state.switch_update:
        raise BiosrecallError(
            f"checkpoint {checkpoint} (update {state.update}) is before the switch at update "
            f"{state.switch_update}: continuing it trains the fixed phase; use --checkpoint switch"
        )
