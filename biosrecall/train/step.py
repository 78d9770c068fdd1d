"""One training step, shared by the trainer (`loop.py`) and the update diagnostic: a global batch to its
loss and its clipped gradient, left in the parameters' `.grad` for the optimizer to apply.

    loss = backward_and_clip(model, rows, pad_id, depth, grad_clip=1.0, grad_accum=2)
    optimizer.step()

The loss is the mean cross-entropy over the real (non-padding) targets of the whole global batch,
taken by the model's fused head and loss (`model(inputs, depth, targets=targets)`,
`biosrecall.model.layers.head_cross_entropy`): only the real targets' rows reach the head, and the
[tokens, vocab] logits are never held in full. It equals `F.cross_entropy` on the full logits to
within rounding (tests/test_fused_loss.py); under bf16 autocast it is that expression. Under
torchrun each rank passes the same global batch and `dist`: it trains on its own slice, and the
gradients averaged by DDP or FSDP equal those of one process on the whole batch. Because the diagnostic
calls this very function, its "batch-caused update" is the trainer's update, bit for bit on a CPU.
"""

from __future__ import annotations

import math
from contextlib import nullcontext
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import torch

from biosrecall.errors import BiosrecallError
from biosrecall.model.layers import IGNORE_INDEX
from biosrecall.train import distributed
from biosrecall.train.distributed import DistInfo

IGNORE = IGNORE_INDEX  # padding targets carry no loss
ONE_PROCESS = DistInfo()


class NonFiniteLoss(BiosrecallError):
    """The batch's loss is NaN or infinite, so its gradient is meaningless (raised before clipping)."""


class StepLoss(NamedTuple):
    mean: float  # mean loss per real target token of the global batch
    real_tokens: int  # real (non-padding) target tokens of the global batch


@dataclass(frozen=True)
class Batch:
    inputs: torch.Tensor  # this rank's input rows, int64 [rows, T], on the model's device
    targets: torch.Tensor  # the matching targets, IGNORE where the target is padding
    real_tokens: int  # real target tokens of the *global* batch (the loss is normalised by it)


def split_batch(rows: np.ndarray, pad_id: int | None, dist: DistInfo = ONE_PROCESS, device="cpu") -> Batch:
    """A global batch (int64 [B, T + 1]) as this rank trains on it: inputs are `row[:-1]`, targets
    `row[1:]` with padding ignored. A batch without a single real target is a broken dataset."""
    global_targets = torch.from_numpy(np.ascontiguousarray(rows[:, 1:]))
    if pad_id is not None:
        global_targets = global_targets.masked_fill(global_targets == pad_id, IGNORE)
    real = int((global_targets != IGNORE).sum())
    if real == 0:
        raise BiosrecallError("a training batch holds no real tokens (check the dataset)")
    local = distributed.local_rows(torch.from_numpy(rows), dist)
    targets = distributed.local_rows(global_targets, dist)
    return Batch(local[:, :-1].to(device, non_blocking=True), targets.to(device, non_blocking=True), real)


def backward_and_clip(
    model: torch.nn.Module,
    rows: np.ndarray,
    pad_id: int | None,
    depth: int,
    grad_clip: float,
    autocast=nullcontext,
    grad_accum: int = 1,
    *,
    dist: DistInfo = ONE_PROCESS,
    parallel: str = "ddp",
) -> StepLoss:
    """Add the gradient of the batch's loss at `depth` to `.grad` (in `grad_accum` micro-batches), then
    clip its global norm to `grad_clip` (0: no clipping). Raises NonFiniteLoss before clipping."""
    batch = split_batch(rows, pad_id, dist, next(model.parameters()).device)
    loss_sum = _accumulate_gradients(model, batch, depth, autocast, grad_accum, dist, parallel)
    mean = distributed.all_reduce_sum(loss_sum, dist).item() / batch.real_tokens
    if not math.isfinite(mean):
        raise NonFiniteLoss(f"the training loss is not finite at depth {depth}")
    if grad_clip > 0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    return StepLoss(mean, batch.real_tokens)


def _accumulate_gradients(model, batch: Batch, depth: int, autocast, grad_accum, dist, parallel):
    """Backward over the micro-batches of this rank's rows, syncing gradients across ranks only on the
    last; returns this rank's summed loss (detached)."""
    total = torch.zeros((), device=batch.inputs.device)
    for index, (inputs, targets) in enumerate(
        zip(batch.inputs.chunk(grad_accum), batch.targets.chunk(grad_accum), strict=True)
    ):
        with distributed.gradient_sync(model, dist, parallel, sync=index == grad_accum - 1):
            with autocast():
                loss_sum = model(inputs, depth, targets=targets)
            # Normalise by the real tokens of the *global* batch so the data-parallel gradient mean
            # (DDP or FSDP) over ranks and micro-batches equals one big batch.
            (loss_sum * (dist.world_size / batch.real_tokens)).backward()
        total += loss_sum.detach()
    return total
