"""Everything a run needs before its first update: checks, plan, model, optimizer, run folder.

`prepare_run` validates the inputs (so a bad argument never touches an existing run), resolves the
device and the torchrun process group, plans the updates that fit the FLOP budget, builds the model
and optimizer, writes `config.json`, and prints the plan with an estimated wall time.
"""

from __future__ import annotations

import time
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from biosrecall.compute.flops import param_counts, update_flops
from biosrecall.compute.planner import budget_of, plan_run, plan_updates
from biosrecall.compute.schedules import parse_schedule
from biosrecall.errors import BiosrecallError
from biosrecall.train import checkpoint as ckpt
from biosrecall.train import distributed as distributed_
from biosrecall.train import run_dir as run_dir_
from biosrecall.train.config import RESUMABLE_DIFFERENCES, TrainConfig
from biosrecall.train.optim import build_optimizer
from biosrecall.train.progress import format_seconds


@dataclass
class RunSetup:
    run_dir: Path
    dist: distributed_.DistInfo
    device: torch.device
    plan: Any
    model: torch.nn.Module
    raw_model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    autocast: Any
    meta_base: dict[str, Any]
    resume_from: Path | None
    sharded: bool = False
    """FSDP under torchrun: checkpoints go through `biosrecall.train.sharded` (collective saves)."""


def prepare_run(model_config, config: TrainConfig, run_dir, record, resume, overwrite, reporter) -> RunSetup:
    config.validate()
    model_config.validate()
    run_dir = run_dir_.prepare_run_dir(run_dir, resume, overwrite)
    device = distributed_.resolve_device(config.device)
    if config.threads:
        torch.set_num_threads(config.threads)
    autocast = autocast_for(device, config.precision)
    dist, device = distributed_.init_distributed(device)
    distributed_.check_parallel(config.parallel, dist)
    distributed_.check_divisible(config.batch_size, dist, config.grad_accum)
    plan = make_plan(model_config, config)
    record = {**record, "model_config": model_config.to_dict(), "train_config": config.to_dict()}
    resume_from = _check_resume(run_dir, record) if resume else None
    if dist.is_main and not resume:
        if overwrite:
            run_dir_.clear_run_dir(run_dir)
        run_dir.mkdir(parents=True, exist_ok=True)
        run_dir_.write_config(run_dir, {**record, "plan": plan_summary(plan, model_config)})
    distributed_.barrier(dist)

    from biosrecall.model import LoopedTransformer

    torch.manual_seed(config.seed)
    raw_model = LoopedTransformer(model_config).to(device)
    model = distributed_.wrap_model(raw_model, dist, config.parallel, device)
    # After wrapping: FSDP replaces the parameters by sharded ones, which the optimizer must hold.
    optimizer = build_optimizer(raw_model, config)
    if config.compile:
        model = torch.compile(model)
    meta_base = {
        "model_config": model_config.to_dict(),
        "schedule": plan.schedule,
        "budget": plan.budget,
        "planned_updates": plan.updates,
        "seed": config.seed,
        **{k: record[k] for k in ("dataset", "task") if k in record},
    }
    sharded = dist.enabled and config.parallel == "fsdp"
    setup = RunSetup(
        run_dir, dist, device, plan, model, raw_model, optimizer, autocast, meta_base, resume_from, sharded
    )
    if dist.is_main:
        reporter.message(describe_plan(plan, model_config, _seconds_per_flop(setup, config)))
    return setup


def make_plan(model_config, config: TrainConfig):
    """The number of updates and their depths that spend the budget (one planner for every run)."""
    schedule = parse_schedule(config.schedule)
    seq_len = config.seq_len or model_config.context_length
    if seq_len > model_config.context_length:
        raise BiosrecallError(
            f"sequence length {seq_len} exceeds the model's context {model_config.context_length}"
        )
    tokens = config.batch_size * seq_len
    backprop = model_config.backprop_depth
    if config.updates is not None:
        return plan_updates(
            model_config,
            schedule,
            config.updates,
            tokens,
            config.seed,
            seq_len=seq_len,
            backprop_depth=backprop,
        )
    budget = config.budget
    if budget is None:
        spec, _, updates = config.budget_of.rpartition(":")
        if not spec or not updates.isdigit() or int(updates) < 1:
            raise BiosrecallError(
                f"--budget-of takes SPEC:UPDATES (e.g. fixed:4:2000), got {config.budget_of!r}"
            )
        reference = parse_schedule(spec)
        budget = budget_of(
            model_config,
            reference,
            int(updates),
            tokens,
            config.seed,
            seq_len=seq_len,
            backprop_depth=backprop,
        )
    return plan_run(
        model_config, schedule, tokens, budget, config.seed, seq_len=seq_len, backprop_depth=backprop
    )


def plan_summary(plan, model_config) -> dict[str, Any]:
    return {
        **plan.summary(),
        "tokens": int(plan.tokens_per_update * plan.updates),
        "parameters": param_counts(model_config),
    }


def describe_plan(plan, model_config, seconds_per_flop: float | None) -> str:
    total = param_counts(model_config)["total"]
    switch = "-" if plan.switch_update is None else str(plan.switch_update)
    eta = "?" if seconds_per_flop is None else format_seconds(plan.total_flops * seconds_per_flop)
    return (
        f"plan: {plan.schedule}  updates {plan.updates}  switch at {switch}  "
        f"FLOPs {plan.total_flops:.3e} of budget {plan.budget:.3e}  "
        f"tokens {plan.tokens_per_update * plan.updates:,}  parameters {total:,}  est. time {eta}"
    )


def _seconds_per_flop(setup: RunSetup, config: TrainConfig) -> float | None:
    """Time two forward+backward passes at depth 4 (weights untouched) to estimate the wall time."""
    if setup.device.type != "cpu" or setup.dist.enabled:
        return None
    seq_len = config.seq_len or setup.raw_model.config.context_length
    tokens = torch.zeros(config.batch_size, seq_len, dtype=torch.long, device=setup.device)
    elapsed = 0.0
    for _ in range(2):  # the first call pays one-off allocation costs
        tick = time.perf_counter()
        with setup.autocast():
            setup.raw_model(tokens, 4).float().sum().backward()
        elapsed = time.perf_counter() - tick
    setup.raw_model.zero_grad(set_to_none=True)
    model_config = setup.raw_model.config
    flops = update_flops(model_config, 4, config.batch_size * seq_len, seq_len, model_config.backprop_depth)
    return elapsed / flops


def _check_resume(run_dir: Path, record: dict[str, Any]) -> Path:
    """Resuming is allowed only from a saved `latest` with the same settings that change results."""
    stored = run_dir_.read_config(run_dir)
    for section in ("model_config", "train_config", "dataset", "task"):
        old, new = stored.get(section), record.get(section)
        if isinstance(old, dict) and isinstance(new, dict):
            for key in sorted(set(old) | set(new)):
                if key in RESUMABLE_DIFFERENCES or _same(old.get(key), new.get(key)):
                    continue
                raise BiosrecallError(
                    f"cannot resume: {section}.{key} differs (run has {old.get(key)!r}, given {new.get(key)!r})"
                )
        elif old != new:
            raise BiosrecallError(f"cannot resume: {section} differs from the stored run")
    latest = ckpt.latest_checkpoint(run_dir)
    if latest is None:
        raise BiosrecallError(f"cannot resume: {run_dir} has no saved checkpoint yet")
    return latest


def _same(a, b) -> bool:
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return list(a) == list(b)
    return a == b


def autocast_for(device: torch.device, precision: str):
    """bf16 autocast on CUDA when asked (or by default there); plain fp32 otherwise."""
    use_bf16 = precision == "bf16" or (precision == "auto" and device.type == "cuda")
    if use_bf16 and device.type != "cuda":
        raise BiosrecallError("--precision bf16 needs a CUDA device (CPU runs train in fp32)")
    if use_bf16:
        return lambda: torch.autocast("cuda", dtype=torch.bfloat16)
    return nullcontext
