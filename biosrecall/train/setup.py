"""Everything a run needs before its first update: checks, plan, model, optimizer, run folder.

`prepare_run` validates the inputs (so a bad argument never touches an existing run), resolves the
device and the torchrun process group, plans the updates that fit the FLOP budget, builds the model
and optimizer, writes `config.json`, and prints the plan with an estimated wall time.

A new run is written to a temporary sibling folder until its first resumable state is saved; then
`RunSetup.publish` swaps it into the folder the user named (moving a replaced run aside and deleting
it only once the new one is in). A resume is checked against both `config.json` and the meta.json
of `latest`: anything but `RESUMABLE_DIFFERENCES` that differs is refused.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from contextlib import ExitStack, nullcontext
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import torch

from biosrecall.compute.flops import param_counts, update_flops
from biosrecall.compute.planner import budget_of, plan_run, plan_updates
from biosrecall.compute.schedules import parse_schedule
from biosrecall.errors import BiosrecallError
from biosrecall.model import LoopedTransformer
from biosrecall.train import checkpoint_files, distributed, layout
from biosrecall.train.branch import Branch, branch_record, check_branch, copy_parent_metrics, find_state
from biosrecall.train.checkpointers import Checkpointer, LocalCheckpointer
from biosrecall.train.config import RESUMABLE_DIFFERENCES, TrainConfig, resolve_seq_len, split_budget_of
from biosrecall.train.optim import build_optimizer
from biosrecall.train.progress import format_seconds
from biosrecall.train.run_dir import (
    first_difference,
    prepare_run_dir,
    read_config,
    start_run_folder,
    write_config,
)


@dataclass
class RunSetup:
    run_dir: Path
    """Where the run writes now: for a new run, a temporary folder until its first resumable state."""
    dist: distributed.DistInfo
    device: torch.device
    seq_len: int
    plan: Any
    model: torch.nn.Module
    raw_model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    autocast: Any
    meta_base: dict[str, Any]
    resume_from: Path | None
    checkpointer: Checkpointer
    """Saves and restores this run's checkpoints (`ShardedCheckpointer` under FSDP, collective)."""
    final_dir: Path
    """The run folder the user named."""
    publish: Callable[[], None] | None = None
    """Swaps the new run into `final_dir` (rank 0; a no-op elsewhere); None once done or when resuming."""
    branching: bool = False
    """`resume_from` is another run's state (`biosrecall.train.branch`), not this run's own."""


def prepare_run(
    model_config,
    config: TrainConfig,
    seq_len: int,
    run_dir,
    record,
    resume,
    overwrite,
    reporter,
    building: ExitStack,
    branch: Branch | None = None,
    exposures=None,
) -> RunSetup:
    """Check everything, plan, build the model, and (for a new run) start its folder under a temporary
    name in `building` (see `run_dir.start_run_folder`), which `RunSetup.publish` swaps into place.
    `seq_len` is the run's sequence length (`config.resolve_seq_len`, decided once by the task layer).
    A new `branch` starts from its parent's state (checked by `branch.check_branch`); `exposures`
    (E -> `Exposures`) sizes a run given `config.exposures` (see `make_plan`)."""
    config.validate()
    model_config.validate()
    final_dir = Path(run_dir)
    replace = prepare_run_dir(final_dir, resume, overwrite)
    dist, device, autocast = _join_devices(config)
    plan = make_plan(model_config, config, seq_len, exposures)
    shown = None if config.exposures is None else exposures(config.exposures)  # counted once: cached
    record = {**record, "model_config": model_config.to_dict(), "train_config": config.to_dict()}
    if branch is not None:
        record["branch"] = branch_record(branch)
    resume_from = _starting_state(final_dir, record, plan, config, seq_len, resume, branch, exposures)
    folder = final_dir if resume else _new_run_folder(final_dir, replace, dist, building)
    if dist.is_main and not resume:
        write_config(folder, {**record, "plan": plan_summary(plan, model_config, shown)})
        if branch is not None:
            copy_parent_metrics(branch, folder)
    distributed.barrier(dist)
    raw_model, model, optimizer = _build_model(model_config, config, dist, device)
    setup = RunSetup(
        run_dir=folder,
        dist=dist,
        device=device,
        seq_len=seq_len,
        plan=plan,
        model=model,
        raw_model=raw_model,
        optimizer=optimizer,
        autocast=autocast,
        meta_base=_meta_base(plan, config, record),
        resume_from=resume_from,
        checkpointer=_checkpointer(folder, dist, config, raw_model, optimizer),
        final_dir=final_dir,
        publish=None if folder == final_dir else (building.close if dist.is_main else lambda: None),
        branching=branch is not None and not resume,
    )
    if dist.is_main:
        reporter.message(describe_plan(plan, model_config, _seconds_per_flop(setup, config), shown))
    return setup


def _starting_state(
    final_dir: Path, record, plan, config: TrainConfig, seq_len: int, resume: bool, branch, exposures
) -> Path | None:
    """The state training continues from: this run's `latest` (resume), the parent's (a new branch),
    or None (a new run). A resumed branch continues from its own state, so its parent is not needed.
    The parent is planned again with this run's sequence length, which `check_branch` requires it
    shares."""
    if config.keep_updates and config.keep_updates[-1] > plan.updates:
        raise BiosrecallError(
            f"--keep-updates {config.keep_updates[-1]} is beyond this run's {plan.updates} updates"
        )
    if resume:
        return _check_resume(final_dir, record, plan, config)
    if branch is None:
        return None
    state = find_state(branch)
    replan = partial(make_plan, seq_len=seq_len, exposures=exposures)
    check_branch(branch, record, plan, config, replan, RESUMABLE_DIFFERENCES)
    return state


def _new_run_folder(run_dir: Path, replace: bool, dist, building: ExitStack) -> Path:
    """Rank 0 starts the temporary folder of a new run; every rank learns its name (sharded saves
    write from every rank)."""
    folder = [start_run_folder(run_dir, replace, building) if dist.is_main else None]
    if dist.enabled:
        torch.distributed.broadcast_object_list(folder, src=0)
    return Path(folder[0])


def _join_devices(config: TrainConfig):
    """The process group under torchrun, this rank's device (its own GPU) and the autocast to train in."""
    device = distributed.resolve_device(config.device)
    if config.threads:
        torch.set_num_threads(config.threads)
    autocast = autocast_for(device, config.precision)
    dist, device = distributed.init_distributed(device)
    distributed.check_parallel(config.parallel, dist)
    distributed.check_divisible(config.batch_size, dist, config.grad_accum)
    return dist, device, autocast


def _checkpointer(run_dir: Path, dist, config: TrainConfig, model, optimizer) -> Checkpointer:
    """FSDP: no rank holds the whole model, so every save and restore is collective and sharded."""
    if dist.enabled and config.parallel == "fsdp":
        # Imported here: torch.distributed.checkpoint costs about 0.5 s of every other run's start-up.
        from biosrecall.train.sharded import ShardedCheckpointer

        return ShardedCheckpointer(run_dir, dist, model, optimizer)
    return LocalCheckpointer(run_dir, dist, model, optimizer)


def _build_model(model_config, config: TrainConfig, dist: distributed.DistInfo, device: torch.device):
    """The seeded initial model (its layers compiled, its iterations checkpointed, as asked), its
    DDP/FSDP wrapper, and AdamW over its parameters."""

    torch.manual_seed(config.seed)
    raw_model = LoopedTransformer(model_config).to(device)
    raw_model.activation_checkpointing = config.activation_checkpointing
    if config.compile:
        # Layer by layer, before wrapping (FSDP2 shards per layer, around the compiled ones): compiling
        # the whole model would unroll the depth loop into one graph per K.
        raw_model.compile_layers()
    model = distributed.wrap_model(raw_model, dist, config.parallel, device)
    # After wrapping: FSDP replaces the parameters by sharded ones, which the optimizer must hold.
    optimizer = build_optimizer(raw_model, config)
    return raw_model, model, optimizer


def _meta_base(plan, config: TrainConfig, record: dict[str, Any]) -> dict[str, Any]:
    """What every checkpoint's sidecar of this run says about the run itself."""
    return {
        "model_config": record["model_config"],
        "schedule": plan.schedule,
        "budget": plan.budget,
        "planned_updates": plan.updates,
        "seed": config.seed,
        **{k: record[k] for k in ("dataset", "task") if k in record},
    }


def make_plan(model_config, config: TrainConfig, seq_len: int | None = None, exposures=None):
    """The number of updates and their depths that spend the budget (one planner for every run).
    A run passes the `seq_len` it resolved; without it, it is resolved here. A run sized by
    `config.exposures` takes the updates `exposures(E)` counts on its batches (the task's counter,
    `biosrecall.bios.exposures`) at the FLOPs they cost."""
    schedule = parse_schedule(config.schedule)
    _check_depths(model_config, schedule)
    if seq_len is None:
        seq_len = resolve_seq_len(config, model_config)
    tokens = config.batch_size * seq_len
    sized = {"seq_len": seq_len, "backprop_depth": model_config.backprop_depth}
    updates = config.updates
    if config.exposures is not None:
        if exposures is None:
            raise BiosrecallError(
                "--exposures counts the biographies of a bioS dataset's people; size this run with "
                "--budget, --budget-of or --updates"
            )
        updates = exposures(config.exposures).updates
    if updates is not None:
        return plan_updates(model_config, schedule, updates, tokens, config.seed, **sized)
    budget = config.budget
    if budget is None:
        spec, spec_updates = split_budget_of(config.budget_of)
        budget = budget_of(model_config, parse_schedule(spec), spec_updates, tokens, config.seed, **sized)
    return plan_run(model_config, schedule, tokens, budget, config.seed, **sized)


def _check_depths(model_config, schedule) -> None:
    """A model without a recurrent block (a standard transformer, `ModelConfig.recurrent`) has one
    depth: its runs train at fixed:1, so that no record names depths the model does not have."""
    if not model_config.recurrent and schedule.max_depth != 1:
        raise BiosrecallError(
            f"this model has no recurrent block (a standard transformer, one depth): train it with "
            f"--schedule fixed:1, not {schedule.spec}"
        )


def plan_summary(plan, model_config, exposures=None) -> dict[str, Any]:
    """config.json's plan; a run sized by exposures also records how often each person was shown."""
    summary = {
        **plan.summary(),
        "tokens": int(plan.tokens_per_update * plan.updates),
        "parameters": param_counts(model_config),
    }
    if exposures is not None:
        summary["exposures"] = exposures.summary()
    return summary


def describe_plan(plan, model_config, seconds_per_flop: float | None, exposures=None) -> str:
    total = param_counts(model_config)["total"]
    switch = "-" if plan.switch_update is None else str(plan.switch_update)
    eta = "?" if seconds_per_flop is None else format_seconds(plan.total_flops * seconds_per_flop)
    shown = "" if exposures is None else f"{exposures.describe()}  "
    return (
        f"plan: {plan.schedule}  updates {plan.updates}  {shown}switch at {switch}  "
        f"FLOPs {plan.total_flops:.3e} of budget {plan.budget:.3e}  "
        f"tokens {plan.tokens_per_update * plan.updates:,}  parameters {total:,}  est. time {eta}"
    )


def _seconds_per_flop(setup: RunSetup, config: TrainConfig) -> float | None:
    """Time two forward+backward passes at depth 4 (weights untouched) to estimate the wall time."""
    if setup.device.type != "cpu" or setup.dist.enabled:
        return None
    seq_len = setup.seq_len
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


def _check_resume(run_dir: Path, record: dict[str, Any], plan, config: TrainConfig) -> Path:
    """Resuming is allowed only from an intact `latest` with the same settings that change results, as
    both config.json and the checkpoint's own meta.json record them (editing one fools neither)."""
    stored = read_config(run_dir)
    # A resumed branch continues from its own `latest`: its parent matters only when named again.
    sections = ("model_config", "train_config", "dataset", "task") + (
        ("branch",) if "branch" in record else ()
    )
    for section in sections:
        _refuse_differences(section, stored.get(section), record.get(section), "")
    link = layout.latest_link(run_dir)
    if not os.path.lexists(link):
        raise BiosrecallError(f"cannot resume: {run_dir} has no saved checkpoint yet")
    latest = link.resolve()
    try:
        meta = checkpoint_files.read_meta(latest, checkpoint_files.RESUME_REQUIRED)
        checkpoint_files.model_config_of(latest, meta)
    except checkpoint_files.DamagedCheckpoint as exc:
        raise damaged_latest(run_dir, latest, exc) from None
    expected = {  # causes before consequences: the model and schedule fix the budget's updates
        "model_config": record["model_config"],
        "schedule": plan.schedule,
        "seed": config.seed,
        "budget": plan.budget,
        "planned_updates": plan.updates,
    }
    for key, value in expected.items():
        _refuse_differences(key, meta[key], value, f" (checkpoint {latest})")
    for section in ("dataset", "task"):
        if section in meta:
            _refuse_differences(section, meta[section], record.get(section), f" (checkpoint {latest})")
    return latest


def damaged_latest(run_dir: str | Path, latest: Path, problem: BiosrecallError) -> BiosrecallError:
    """The resume error for a damaged `latest`: what is wrong, and the newest checkpoint left intact."""
    found = layout.newest_intact_checkpoint(run_dir, besides=latest)
    if found is None:
        return BiosrecallError(
            f"cannot resume: {problem}; no intact checkpoint is left in {run_dir} (start over with --overwrite)"
        )
    path, update = found
    return BiosrecallError(
        f"cannot resume: {problem}; the newest intact checkpoint is {path} (update {update}): "
        f"point latest at it (ln -sfn {path.name} {layout.latest_link(run_dir)}) and resume again, or "
        "start over with --overwrite"
    )


def _refuse_differences(name: str, old: Any, new: Any, where: str) -> None:
    """Refuse `new` unless it equals `old` in every key but the documented resumable ones."""
    difference = first_difference(old, new, RESUMABLE_DIFFERENCES)
    if difference is not None:
        key, was, given = difference
        raise BiosrecallError(f"cannot resume: {name}{key} differs (run has {was!r}, given {given!r}){where}")


def autocast_for(device: torch.device, precision: str):
    """bf16 autocast when asked (on CUDA or CPU), or by default on CUDA; plain fp32 otherwise. Autocast
    casts per operation, so weights, gradients and AdamW's state stay fp32 (fp32 master weights)."""
    if precision == "bf16" or (precision == "auto" and device.type == "cuda"):
        return lambda: torch.autocast(device.type, dtype=torch.bfloat16)
    return nullcontext
