"""The update diagnostic's arithmetic: the trainer's loss and gradient, the batch-caused AdamW update, RMS
matching, adding an update to the weights, and answer NLL / recalled bits over serving depths.

`biosrecall.eval.diagnose` documents the method and runs it; each piece here is tested on its own
(`pytest -q tests/test_diagnose.py`).

    params = optimizer_params(optimizer)
    grads = batch_gradient(model, params, rows, pad_id, depth=16, grad_clip=1.0)
    delta = adamw_batch_update(optimizer, grads, lr)          # float64, one tensor per parameter
    delta = scale_to_rms(delta, rms(other_delta))
    with applied(params, delta):
        nll, bits = answer_scores(model, eval_set, pool_sizes, serving_depths=range(1, 17))
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext

import numpy as np
import torch
import torch.nn.functional as F

from biosrecall.errors import BiosrecallError
from biosrecall.eval.recall import score_exact

# The answer-position layout of an eval batch belongs to the recall sweep; the diagnostic reads the same
# positions so its "recalled" means exactly what `recall-curve` means.
from biosrecall.eval.sweep import _make_batch, _rows_exact, plan_batches

IGNORE = -100  # cross-entropy's ignore_index, as in the trainer


def optimizer_params(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    """Every parameter the optimizer updates, in its group order (the order of all update lists here)."""
    return [p for group in optimizer.param_groups for p in group["params"]]


def split_batch(rows: np.ndarray, pad_id: int | None) -> tuple[torch.Tensor, torch.Tensor, int]:
    """A batch (int64 [B, T + 1]) as the trainer splits it: inputs, targets with padding ignored, and
    the number of real target tokens."""
    rows = torch.from_numpy(np.ascontiguousarray(rows))
    targets = rows[:, 1:].contiguous()
    if pad_id is not None:
        targets = targets.masked_fill(targets == pad_id, IGNORE)
    real = int((targets != IGNORE).sum())
    if real == 0:
        raise BiosrecallError("a training batch holds no real tokens (check the dataset)")
    return rows[:, :-1], targets, real


def backward_and_clip(
    model, rows, pad_id, depth: int, grad_clip: float, autocast=nullcontext, grad_accum: int = 1
) -> float:
    """Accumulate the gradient of the trainer's loss (mean cross-entropy over non-pad targets at depth
    `depth`, in `grad_accum` micro-batches) and clip its global norm as the trainer does; returns the loss."""
    device = next(model.parameters()).device
    inputs, targets, real = split_batch(rows, pad_id)
    total = 0.0
    for micro_inputs, micro_targets in zip(inputs.chunk(grad_accum), targets.chunk(grad_accum), strict=True):
        with autocast():
            logits = model(micro_inputs.to(device), depth)
        loss_sum = F.cross_entropy(
            logits.float().flatten(0, 1),
            micro_targets.to(device).flatten(),
            ignore_index=IGNORE,
            reduction="sum",
        )
        # Normalised as the trainer does (each sum times 1 / real tokens of the whole batch), so a
        # continued run matches the trainer bit for bit.
        (loss_sum * (1 / real)).backward()
        total += loss_sum.item()
    if not math.isfinite(total):
        raise BiosrecallError(f"the training loss is not finite at depth {depth}")
    if grad_clip > 0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    return total / real


def batch_gradient(
    model,
    params: Sequence[torch.Tensor],
    rows,
    pad_id,
    depth: int,
    grad_clip: float,
    autocast=nullcontext,
    grad_accum: int = 1,
) -> list[torch.Tensor]:
    """The clipped training gradient of one batch at `depth`, one tensor per entry of `params`."""
    model.zero_grad(set_to_none=True)
    backward_and_clip(model, rows, pad_id, depth, grad_clip, autocast, grad_accum)
    grads = [torch.zeros_like(p) if p.grad is None else p.grad.detach().clone() for p in params]
    model.zero_grad(set_to_none=True)
    return grads


def adamw_batch_update(
    optimizer: torch.optim.AdamW, grads: Sequence[torch.Tensor], lr: float
) -> list[torch.Tensor]:
    """The part of AdamW's next step caused by `grads`: step(grads) - step(zero gradient), float64.

    Both steps start from the optimizer's state and use torch's AdamW formula (decay, then the bias-
    corrected moment ratio). Weight decay and the momentum-only part are the same in both and cancel;
    for an all-zero gradient the two computations are identical, so the result is exactly zero.
    """
    params = optimizer_params(optimizer)
    if len(grads) != len(params):
        raise BiosrecallError(f"{len(grads)} gradients for {len(params)} parameters")
    deltas, position = [], 0
    for group in optimizer.param_groups:
        if group.get("amsgrad") or group.get("maximize"):
            raise BiosrecallError("the diagnostic reproduces plain AdamW only (no amsgrad, no maximize)")
        for p in group["params"]:
            state = optimizer.state.get(p)
            if not state:
                raise BiosrecallError("the optimizer state lacks a parameter (checkpoint before any update?)")
            grad = grads[position].to(device=p.device, dtype=torch.float64)
            move = _adamw_move(state, group["betas"], group["eps"], lr)
            deltas.append(move(grad) - move(torch.zeros_like(grad)))
            position += 1
    return deltas


def _adamw_move(state: Mapping, betas, eps: float, lr: float) -> Callable[[torch.Tensor], torch.Tensor]:
    """Gradient -> AdamW's moment step from `state` (without decay), as `torch.optim.AdamW` computes it."""
    beta1, beta2 = betas
    step = float(state["step"]) + 1
    exp_avg, exp_avg_sq = state["exp_avg"].double(), state["exp_avg_sq"].double()
    step_size = lr / (1 - beta1**step)
    bias_correction2_sqrt = math.sqrt(1 - beta2**step)

    def move(grad: torch.Tensor) -> torch.Tensor:
        first = torch.lerp(exp_avg, grad, 1 - beta1)
        second = exp_avg_sq * beta2 + grad * grad * (1 - beta2)
        return -step_size * first / (second.sqrt() / bias_correction2_sqrt + eps)

    return move


def rms(update: Sequence[torch.Tensor]) -> float:
    """Root mean square over every entry of every parameter's update."""
    total = sum(float(d.double().square().sum()) for d in update)
    count = sum(d.numel() for d in update)
    return math.sqrt(total / max(count, 1))


def scale_to_rms(update: Sequence[torch.Tensor], target: float) -> list[torch.Tensor]:
    """`update` times target / rms(update). An all-zero update has no direction and stays zero."""
    current = rms(update)
    if current == 0:
        return [d.clone() for d in update]
    return [d * (target / current) for d in update]


@contextmanager
def applied(params: Sequence[torch.Tensor], update: Sequence[torch.Tensor]) -> Iterator[None]:
    """Weights + update for the duration of the block, then the exact original weights again (so
    evaluating several candidate updates needs one saved copy of the weights, not one model each)."""
    saved = [p.detach().clone() for p in params]
    try:
        with torch.no_grad():
            for p, original, delta in zip(params, saved, update, strict=True):
                p.copy_((original.double() + delta.to(original.device)).to(p.dtype))
        yield
    finally:
        with torch.no_grad():
            for p, original in zip(params, saved, strict=True):
                p.copy_(original)


def answer_scores(
    model, eval_set, pool_sizes: Mapping[str, int], serving_depths: Sequence[int], batch_size: int = 256
) -> tuple[np.ndarray, np.ndarray]:
    """Per serving depth (ascending): mean NLL of the answer tokens under teacher forcing, and recalled
    bits per person (a fact is recalled when >= 4 of its 5 prompts are answered exactly)."""
    depths = sorted(set(serving_depths))
    device = next(model.parameters()).device
    nll_sum = torch.zeros(len(depths), dtype=torch.float64, device=device)
    exact = np.zeros((len(depths), len(eval_set.answer_start)), dtype=bool)
    answer_tokens = 0
    with torch.inference_mode():
        for rows in plan_batches(eval_set, batch_size):
            batch = _make_batch(eval_set, rows, device)
            flags = []
            pass_ = model.forward_all_depths(batch.tokens, depths, positions=batch.positions)
            for i, (_, logits) in enumerate(pass_):
                nll_sum[i] += F.cross_entropy(logits.float(), batch.targets, reduction="sum").double()
                flags.append(_rows_exact(logits, batch))
            exact[:, rows] = torch.stack(flags).cpu().numpy()
            answer_tokens += len(batch.targets)
    bits = np.array([score_exact(flags, eval_set, pool_sizes).bits_per_person for flags in exact])
    return (nll_sum / answer_tokens).cpu().numpy(), bits
