"""AdamW with decay only on weight matrices, and the learning-rate schedule (warm-up, then cosine or WSD).

optimizer = build_optimizer(model, config)
lr = learning_rate(update, total_updates, config)
"""

from __future__ import annotations

import math

import torch

from biosrecall.train.config import DEFAULT_DECAY, TrainConfig


def build_optimizer(model: torch.nn.Module, config: TrainConfig) -> torch.optim.AdamW:
    """Matrices of linear layers decay; norms, biases and embedding tables do not (standard practice),
    nor a matrix its recipe marks `no_weight_decay` (Parcae's B, as its authors train it)."""
    decay, no_decay = [], []
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        decays = param.ndim >= 2 and "embed" not in name and not getattr(param, "no_weight_decay", False)
        (decay if decays else no_decay).append(param)
    groups = [
        {"params": decay, "weight_decay": config.weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    # foreach=True keeps the step a handful of fused kernels instead of one per tensor.
    return torch.optim.AdamW(groups, lr=config.lr, betas=config.betas, eps=1e-8, foreach=True)


def warmup_updates(total: int, config: TrainConfig) -> int:
    """How many of `total` updates warm up: `warmup_updates`, or the `warmup` fraction (at least 1)."""
    if config.warmup_updates is not None:
        return config.warmup_updates
    return max(1, round(config.warmup * total)) if config.warmup > 0 else 0


def decay_start(total: int, config: TrainConfig) -> int:
    """The first update of wsd's linear decay: before it, the rate is the peak whatever `total` is, so
    runs of every length share that stretch (the trunk that finishing branches start from)."""
    stable = 1.0 - (DEFAULT_DECAY if config.decay is None else config.decay)
    return max(warmup_updates(total, config), round(stable * total))


def learning_rate(update: int, total: int, config: TrainConfig) -> float:
    """LR for 0-based `update` out of `total`: linear warm-up, then cosine or warmup-stable-decay."""
    warmup = warmup_updates(total, config)
    peak, floor = config.lr, config.lr * config.min_lr_ratio
    if update < warmup:
        return peak * (update + 1) / warmup
    if config.lr_schedule == "wsd":
        first = decay_start(total, config)
        if update < first:
            return peak
        progress = (update - first) / max(1, total - 1 - first)
        return peak + (floor - peak) * min(1.0, progress)
    progress = (update - warmup) / max(1, total - 1 - warmup)
    return floor + 0.5 * (peak - floor) * (1 + math.cos(math.pi * min(1.0, progress)))


def set_learning_rate(optimizer: torch.optim.Optimizer, lr: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr
