"""The one training loop, shared by bioS and the language-model pipeline.

    result = run_training(model_config, train_config, source, run_dir, record=..., reporter=...)

A run spends a modeled-FLOP budget: the planner fixes the number of updates and every update's depth
up front (depths come from (seed, update)), the loop adds each update's FLOPs from the one FLOP
account, and weights are kept when the running total crosses each checkpoint fraction of the budget.
Batches come from a `BatchSource` whose `batch(update)` is a pure function of the update index (or
which carries a resumable state), so an interrupted run resumed from `latest` ends bit-identical to
an uninterrupted one on CPU. Under FSDP the resumable state is a sharded `torch.distributed.checkpoint`
(`sharded.py`); kept checkpoints keep the one single-file format either way.
"""

from __future__ import annotations

import math
import signal
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch
import torch.nn.functional as F

from biosrecall.errors import BiosrecallError
from biosrecall.train import checkpoint as ckpt
from biosrecall.train import distributed as distributed_
from biosrecall.train import sharded
from biosrecall.train.config import TrainConfig
from biosrecall.train.optim import learning_rate, set_learning_rate
from biosrecall.train.progress import SilentReporter
from biosrecall.train.run_dir import MetricsLog
from biosrecall.train.setup import RunSetup, prepare_run


class BatchSource(Protocol):
    pad_id: int | None

    def batch(self, update: int) -> np.ndarray:
        """The global batch of `update`: int64 [batch_size, seq_len + 1]."""

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


class TrainingDiverged(RuntimeError):
    """The loss became NaN or infinite; the last good checkpoint is kept."""


class Interrupted(RuntimeError):
    """Ctrl-C (or SIGTERM) stopped the run after `latest` was saved."""


@dataclass
class TrainResult:
    run_dir: Path
    updates: int
    flops: float
    checkpoints: dict[float, Path] = field(default_factory=dict)
    final_loss: float = float("nan")
    wall_seconds: float = 0.0


@dataclass
class _LoopState:
    update: int = 0
    flops: float = 0.0
    tokens: int = 0
    real_tokens: int = 0
    fractions_done: list[float] = field(default_factory=list)
    last_loss: float = float("nan")
    wall_seconds: float = 0.0


def run_training(
    model_config,
    config: TrainConfig,
    source: BatchSource,
    run_dir: str | Path,
    *,
    record: dict[str, Any] | None = None,
    resume: bool = False,
    overwrite: bool = False,
    reporter=None,
) -> TrainResult:
    """Plan, build, (resume,) and train; returns where the checkpoints are."""
    reporter = reporter or SilentReporter()
    setup = prepare_run(model_config, config, run_dir, record or {}, resume, overwrite, reporter)
    try:
        result = _train(setup, config, source, reporter)
        # Tear the process group down together: a rank that leaves early can leave its peer blocked
        # in destroy_process_group forever (seen with gloo).
        distributed_.barrier(setup.dist)
        return result
    finally:
        reporter.close()
        distributed_.shutdown(setup.dist)


def _train(setup: RunSetup, config: TrainConfig, source: BatchSource, reporter) -> TrainResult:
    state = _restore(setup, source) if setup.resume_from else _LoopState()
    metrics = MetricsLog(setup.run_dir, state.update) if setup.dist.is_main else None
    reporter.start(setup.plan.updates, state.update)
    started = time.perf_counter() - state.wall_seconds
    with _stop_requests() as stop_requested:
        while state.update < setup.plan.updates:
            row = _one_update(setup, config, source, state)
            state.wall_seconds = time.perf_counter() - started
            row["wall_s"] = round(state.wall_seconds, 4)
            if metrics:
                metrics.append(row)
            reporter.update(row)
            _maybe_checkpoint(setup, config, source, state, metrics)
            # Every rank must stop at the same update: the save below is collective.
            if distributed_.any_rank(stop_requested(), setup.dist) and state.update < setup.plan.updates:
                _save_latest(setup, source, state, metrics)
                raise Interrupted(f"interrupted at update {state.update}; resume with --resume")
    if metrics:
        metrics.close()
    checkpoints = ckpt.list_checkpoints(setup.run_dir)
    return TrainResult(
        setup.run_dir, state.update, state.flops, checkpoints, state.last_loss, state.wall_seconds
    )


def _one_update(setup: RunSetup, config: TrainConfig, source: BatchSource, state: _LoopState) -> dict:
    """Forward/backward at the planned depth, clip, step; returns the metrics row."""
    update, plan, model = state.update, setup.plan, setup.model
    depth = int(plan.depths[update])
    lr = learning_rate(update, plan.updates, config)
    set_learning_rate(setup.optimizer, lr)
    tick = time.perf_counter()
    rows = source.batch(update)
    inputs, targets, real = _to_tensors(rows, source.pad_id, setup)
    loss_sum = _forward_backward(setup, config, inputs, targets, depth, real)
    mean_loss = distributed_.all_reduce_sum(loss_sum, setup.dist).item() / real
    if not math.isfinite(mean_loss):
        raise TrainingDiverged(
            f"non-finite loss at update {update} (depth {depth}); the last good checkpoint is kept"
        )
    if config.grad_clip > 0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
    setup.optimizer.step()
    setup.optimizer.zero_grad(set_to_none=True)
    seconds = time.perf_counter() - tick
    state.update += 1
    state.flops += float(plan.flops_per_update[update])
    state.tokens += plan.tokens_per_update
    state.real_tokens += int(real)
    state.last_loss = mean_loss
    return {
        "update": update,
        "depth": depth,
        "loss": mean_loss,
        "lr": lr,
        "flops": state.flops,
        "tokens": state.tokens,
        "tokens_per_s": plan.tokens_per_update / seconds,
        "flops_per_s": float(plan.flops_per_update[update]) / seconds,
    }


def _forward_backward(setup: RunSetup, config: TrainConfig, inputs, targets, depth: int, real: int):
    """Accumulate gradients over `grad_accum` micro-batches of this rank's rows (syncing gradients
    across ranks only on the last); returns this rank's summed loss (detached)."""
    total = torch.zeros((), device=inputs.device)
    micro = config.grad_accum
    for index, (micro_inputs, micro_targets) in enumerate(
        zip(inputs.chunk(micro), targets.chunk(micro), strict=True)
    ):
        sync = index == micro - 1
        with distributed_.gradient_sync(setup.model, setup.dist, config.parallel, sync):
            with setup.autocast():
                logits = setup.model(micro_inputs, depth)
            loss_sum = F.cross_entropy(
                logits.float().flatten(0, 1), micro_targets.flatten(), ignore_index=-100, reduction="sum"
            )
            # Normalise by the real tokens of the *global* batch so the data-parallel gradient mean
            # (DDP or FSDP) over ranks and micro-batches equals one big batch.
            (loss_sum * (setup.dist.world_size / real)).backward()
        total += loss_sum.detach()
    return total


def _to_tensors(rows: np.ndarray, pad_id: int | None, setup: RunSetup):
    """Split a global batch into this rank's inputs and targets; padding targets carry no loss."""
    global_targets = torch.from_numpy(np.ascontiguousarray(rows[:, 1:]))
    if pad_id is not None:
        global_targets = global_targets.masked_fill(global_targets == pad_id, -100)
    real = int((global_targets != -100).sum())
    if real == 0:
        raise BiosrecallError("a training batch holds no real tokens (check the dataset)")
    local = distributed_.local_rows(torch.from_numpy(rows), setup.dist)
    targets = distributed_.local_rows(global_targets, setup.dist)
    device = setup.device
    return local[:, :-1].to(device, non_blocking=True), targets.to(device, non_blocking=True), real


def _maybe_checkpoint(setup, config, source, state: _LoopState, metrics) -> None:
    """Keep weights at each budget fraction crossed (the largest at the final update) and at a
    schedule's switch; refresh `latest`. Each kept checkpoint also holds the optimizer state, which
    the update diagnostic needs."""
    finished = state.update == setup.plan.updates
    crossed = [
        f
        for f in config.checkpoint_fractions
        if f not in state.fractions_done
        and (state.flops >= f * setup.plan.budget or (finished and f == max(config.checkpoint_fractions)))
    ]
    keep = [(fraction, ckpt.checkpoint_dir(setup.run_dir, fraction)) for fraction in crossed]
    if state.update == setup.plan.switch_update:
        keep.append((None, ckpt.checkpoint_dir(setup.run_dir, ckpt.SWITCH)))
    state.fractions_done.extend(crossed)
    if keep and setup.sharded:  # collective: every rank holds a shard of the weights
        paths = [(path, _meta(setup, state, fraction)) for fraction, path in keep]
        sharded.save_kept(setup, paths, source.state_dict())
    elif keep and setup.dist.is_main:
        training_state = _training_state(setup, source)
        for fraction, path in keep:
            ckpt.save_checkpoint(path, setup.raw_model, _meta(setup, state, fraction), training_state)
    if keep or finished or state.update % config.save_every == 0:
        _save_latest(setup, source, state, metrics)


def _training_state(setup: RunSetup, source: BatchSource) -> dict[str, Any]:
    return {"optimizer": setup.optimizer.state_dict(), "source": source.state_dict()}


def _meta(setup: RunSetup, state: _LoopState, fraction: float | None) -> dict[str, Any]:
    return {
        **setup.meta_base,
        "fraction": fraction,
        "update": state.update,
        "flops": state.flops,
        "tokens": state.tokens,
        "real_tokens": state.real_tokens,
        "fractions_done": sorted(state.fractions_done),
        "loss": state.last_loss,
        "wall_seconds": state.wall_seconds,
        # Batches and depths are functions of (seed, update): this is the whole generator state.
        "generator_state": {"seed": setup.meta_base["seed"], "next_update": state.update},
    }


def _save_latest(setup: RunSetup, source: BatchSource, state: _LoopState, metrics) -> None:
    if metrics:
        metrics.flush()
    if setup.sharded:
        sharded.save_latest(setup, _meta(setup, state, None), source.state_dict())
        return
    training_state = _training_state(setup, source)
    if setup.dist.is_main:
        ckpt.save_latest(setup.run_dir, setup.raw_model, _meta(setup, state, None), training_state)
    distributed_.barrier(setup.dist)


def _restore(setup: RunSetup, source: BatchSource) -> _LoopState:
    """Load weights, optimizer and loop counters from `latest`."""
    path = setup.resume_from
    if setup.sharded:
        meta, training_state = sharded.restore(setup, path)
    else:
        model, meta = ckpt.load_checkpoint(path, device=setup.device)
        setup.raw_model.load_state_dict(model.state_dict())
        training_state = ckpt.load_training_state(path)
        setup.optimizer.load_state_dict(training_state["optimizer"])
    source.load_state_dict(training_state["source"])
    return _LoopState(
        update=meta["update"],
        flops=meta["flops"],
        tokens=meta["tokens"],
        real_tokens=meta["real_tokens"],
        fractions_done=list(meta["fractions_done"]),
        last_loss=meta["loss"],
        wall_seconds=meta["wall_seconds"],
    )


@contextmanager
def _stop_requests():
    """Turn Ctrl-C / SIGTERM into a flag checked between updates, so `latest` is saved consistently."""
    requested = []

    def handler(signum, frame):
        requested.append(signum)

    previous = {}
    try:
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, handler)
    except ValueError:  # not the main thread (e.g. a notebook worker): no graceful stop
        previous = {}
    try:
        yield lambda: bool(requested)
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
