"""The batch-caused update of the update diagnostic: a batch's gradient (by the trainer's own step), the
part of AdamW's next step that the gradient causes, RMS matching, and adding an update to the weights.

`biosrecall.diagnose` documents the method; each piece here is tested on its own
(`pytest -q tests/test_diagnose.py`).

    params = optimizer_params(optimizer)
    grads = batch_gradient(model, params, rows, pad_id, depth=16, grad_clip=1.0)
    delta = adamw_batch_update(optimizer, grads, lr)          # float64, one tensor per parameter
    delta = scale_to_rms(delta, rms(other_delta))
    with applied(params, delta):
        scores = task.score(model, serving_depths)            # the weights are restored afterwards
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext

import torch

from biosrecall.errors import BiosrecallError
from biosrecall.train.trainer import backward_and_clip


def optimizer_params(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    """Every parameter the optimizer updates, in its group order (the order of all update lists here)."""
    return [p for group in optimizer.param_groups for p in group["params"]]


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
    """The clipped training gradient of one batch at `depth`, one tensor per entry of `params`: the
    trainer's own step (`biosrecall.train.trainer.backward_and_clip`), so it is the gradient the trainer would apply."""
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
    corrected moment ratio) for plain AdamW, as `biosrecall.train.optim.build_optimizer` makes it (no
    amsgrad, no maximize). Weight decay and the momentum-only part are the same in both and cancel;
    for an all-zero gradient the two computations are identical, so the result is exactly zero.
    """
    deltas, position = [], 0  # `grads` holds one gradient per parameter, in `optimizer_params` order
    for group in optimizer.param_groups:
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
