"""The one trainer: what a kind of run supplies, the set-up, the step, the loop, checkpoints and resume.

    task = bios_training_task("data/bios-1k", preset="bios-cpu")    # or biosrecall.lm.task.lm_training_task
    result = Trainer(task, "runs/ff", TrainConfig(schedule="fixed_first:k0=4,switch=0.8",
                                                  budget_of="fixed:4:2000")).train()
    result = train_bios("data/bios-1k", "runs/ff", TrainConfig(...))   # the same, in one call

Read top to bottom, this file is a training run:

1. **The task.** bioS and the language models differ only in where their batches come from, the
   vocabulary their model needs, and what the run records about its data (`TrainingTask`). The LM's
   batch source lives in `biosrecall.lm.task`; bioS's is here.
2. **The step.** A global batch becomes its mean cross-entropy over the real (non-padding) targets
   and its clipped gradient (`backward_and_clip`). The update diagnostic calls this same function,
   so its "batch-caused update" is the trainer's update, bit for bit on a CPU.
3. **The plan.** A run spends a modeled-FLOP budget: the one planner (`make_plan`) fixes the number
   of updates and every update's depth up front, from (seed, update).
4. **The `Trainer`.** Every check runs before the run folder is touched (a bad argument never harms
   an existing run). A new run is built under a temporary sibling name and swapped into the folder
   the user named at its first resumable state; a replaced run is moved aside and deleted only once
   the new one is in. A resume is checked against both `config.json` and the meta.json of `latest`:
   anything but `RESUMABLE_DIFFERENCES` that differs is refused. The loop adds each update's FLOPs
   from the one FLOP account and keeps weights when the running total crosses each checkpoint
   fraction of the budget, at a schedule's switch and at `--keep-updates`.

Batches are a pure function of the update index (or carry a resumable state), so a run interrupted
and resumed from `latest` ends bit-identical to an uninterrupted one on CPU. The run folder is locked
for the whole call (`biosrecall.locking.output_lock`): a second writer or resumer fails at once,
naming this process. A write that fails (disk full, no permission) ends the run with one line naming
the file and the errno, and `latest` still holds the last complete state. Under torchrun each rank
takes its slice of the same global batch, so N processes train exactly like one.
"""

from __future__ import annotations

import functools
import math
import os
import signal
import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack, contextmanager, nullcontext, suppress
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, NamedTuple, Protocol

import numpy as np
import torch

from biosrecall.atomic import check_output_path
from biosrecall.bios import BatchSampler, batch_generator, load_dataset
from biosrecall.bios.exposures import plan_exposures
from biosrecall.compute.flops import param_counts, update_flops
from biosrecall.compute.planner import budget_of, plan_run, plan_updates
from biosrecall.compute.schedules import parse_schedule
from biosrecall.errors import BiosrecallError, first_line
from biosrecall.locking import output_lock
from biosrecall.model import LoopedTransformer, get_preset
from biosrecall.model.config import DEFAULT_RECIPE
from biosrecall.model.layers import IGNORE_INDEX
from biosrecall.model.presets import DEFAULT_BIOS_PRESET
from biosrecall.model.recipes import check_config, load_recipe_module, recipe_overrides
from biosrecall.sizing import format_seconds
from biosrecall.train import checkpoint_files, distributed
from biosrecall.train.branch import Branch, branch_record, check_branch, find_state
from biosrecall.train.config import RESUMABLE_DIFFERENCES, TrainConfig, resolve_seq_len, split_budget_of
from biosrecall.train.distributed import DistInfo
from biosrecall.train.memory import memory_checked
from biosrecall.train.optim import build_optimizer, learning_rate, set_learning_rate
from biosrecall.train.progress import SilentReporter
from biosrecall.train.run_folder import SWITCH, MetricsLog, RunFolder, refuse_differences, update_dirname
from biosrecall.train.stops import Interrupted, TrainingDiverged
from biosrecall.train.tracking import with_trackers

RESUME_ADVICE = "resume with --resume"
"""The trainer's advice after a stop; a study, which resumes its runs itself, words its own
(`biosrecall.experiments.engine`)."""


class NonFiniteLoss(BiosrecallError):
    """The batch's loss is NaN or infinite, so its gradient is meaningless (raised before clipping)."""


@dataclass
class TrainResult:
    run_dir: Path
    updates: int
    flops: float
    checkpoints: dict[float, Path] = field(default_factory=dict)
    final_loss: float = float("nan")
    wall_seconds: float = 0.0


# --------------------------------------------------------------------------------------------------
# 1. The task: what a kind of run supplies.

# Presets named so are shaped for bioS and take their vocabulary from the dataset they train on.
DATA_SIZED_PREFIX = "bios-"


class BatchSource(Protocol):
    pad_id: int | None

    def batch(self, update: int) -> np.ndarray:
        """The global batch of `update`: int64 [batch_size, seq_len + 1]."""

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


@dataclass(frozen=True)
class VocabularyRule:
    """How a task's data vocabulary must fit a preset whose vocabulary is fixed."""

    spare_ids: bool
    """True: the model may have more ids than the data uses (unused rows, like a vocabulary padded for
    fast matmuls, so a preset keeps its size whatever tokenizer is used); False: exactly as many."""
    needed_by: str
    """What needs the ids, for the error message ("the dataset", "the tokenizer")."""
    hint: str = ""
    """How to fix a mismatch, appended to the error message."""


def build_model_config(
    preset: str,
    vocab_size: int,
    overrides: dict[str, Any] | None,
    rule: VocabularyRule,
    recipe: str = DEFAULT_RECIPE,
):
    """The preset's shape with the recipe's model defaults, then `overrides` (None values ignored), and
    a vocabulary for `vocab_size` ids; refused if the recipe is not installed.

    A data-sized preset (bios-*) takes `vocab_size` unless the overrides set one; any other preset keeps
    its vocabulary, which must fit the data as `rule` says."""
    overrides = recipe_overrides(recipe, {k: v for k, v in (overrides or {}).items() if v is not None})
    config = get_preset(preset, **overrides)
    check_config(config)
    if preset.startswith(DATA_SIZED_PREFIX) and "vocab_size" not in overrides:
        return config.replace(vocab_size=vocab_size)
    if rule.spare_ids and config.vocab_size < vocab_size:
        problem = f"{rule.needed_by} has {vocab_size} ids but preset {preset} only {config.vocab_size}"
    elif not rule.spare_ids and config.vocab_size != vocab_size:
        problem = (
            f"preset {preset} has vocabulary {config.vocab_size} but {rule.needed_by} needs {vocab_size}"
        )
    else:
        return config
    raise BiosrecallError(f"{problem} ({rule.hint})" if rule.hint else problem)


def run_recipe(config: TrainConfig) -> str:
    """The run's recipe name, its `recipe_module` registered first (checked against the contract, and
    against the name the run asks for)."""
    if config.recipe_module is not None:
        loaded = load_recipe_module(config.recipe_module).name
        if loaded != config.recipe:
            raise BiosrecallError(
                f"recipe module {config.recipe_module} defines recipe {loaded!r} but the run asks for "
                f"{config.recipe!r}: pass --recipe {loaded}"
            )
    return config.recipe


@dataclass(frozen=True)
class TrainingTask:
    """What one kind of run supplies to the trainer; see the module docstring."""

    name: str
    """Recorded as config.json's task name ("bios", "lm"); later stages tell runs apart by it."""
    preset: str
    """Model preset (see `biosrecall flops`)."""
    vocab_size: int
    """Token ids the data uses."""
    vocab_rule: VocabularyRule
    batch_source: Callable[[TrainConfig, int], BatchSource]
    """(train config, sequence length) -> the run's batch source."""
    data_record: Callable[[BatchSource], dict[str, Any]]
    """batch source -> what config.json and every checkpoint record about the data (path, hash...)."""
    model_overrides: dict[str, Any] | None = None
    exposures: Callable[[BatchSource, float], Any] | None = None
    """(batch source, E) -> the run length that shows every person's biography E times on average
    (`biosrecall.bios.exposures.Exposures`); None: the task has no people to count, and a run sized
    by `exposures` is refused."""

    def model_config(self, recipe: str = DEFAULT_RECIPE):
        return build_model_config(self.preset, self.vocab_size, self.model_overrides, self.vocab_rule, recipe)


BIOS_VOCABULARY = VocabularyRule(
    spare_ids=False, needed_by="the dataset", hint="use a bios-* preset, sized by the dataset"
)


class BiosBatchSource:
    """Update u's batch is drawn from a generator seeded by (seed, u): no state to save or restore."""

    def __init__(self, dataset, batch_size: int, seq_len: int, seed: int):
        self.sampler = BatchSampler(dataset, batch_size, seq_len)
        self.pad_id = dataset.pad_id
        self.seed = seed

    def batch(self, update: int) -> np.ndarray:
        return self.sampler.batch(batch_generator(self.seed, update))

    def state_dict(self) -> dict[str, Any]:
        return {"seed": self.seed}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Nothing to restore: the seed was checked against the run's records (`_check_resume`, or the
        parent's config for a branch) before any state was loaded."""


def bios_training_task(
    data_dir: str | Path, preset: str = DEFAULT_BIOS_PRESET, model_overrides: dict[str, Any] | None = None
) -> TrainingTask:
    """The bioS task on the dataset folder `data_dir` (read and validated here)."""
    dataset = load_dataset(data_dir)
    record = {"path": str(Path(data_dir).resolve()), "manifest_hash": dataset.manifest_hash}
    return TrainingTask(
        name="bios",
        preset=preset,
        vocab_size=dataset.vocab_size,
        vocab_rule=BIOS_VOCABULARY,
        batch_source=lambda config, seq_len: BiosBatchSource(
            dataset, config.batch_size, seq_len, config.seed
        ),
        data_record=lambda source: record,
        model_overrides=model_overrides,
        exposures=lambda source, asked: plan_exposures(source.sampler, source.seed, asked),
    )


def train_bios(
    data_dir: str | Path,
    run_dir: str | Path,
    config: TrainConfig,
    preset: str = DEFAULT_BIOS_PRESET,
    model_overrides: dict[str, Any] | None = None,
    resume: bool = False,
    overwrite: bool = False,
    reporter=None,
    branch=None,
) -> TrainResult:
    """Train on the bioS dataset in `data_dir`; a `branch` (`biosrecall.train.branch.Branch`) starts
    from another run's saved state."""
    task = bios_training_task(data_dir, preset, model_overrides)
    return Trainer(
        task, run_dir, config, resume=resume, overwrite=overwrite, reporter=reporter, branch=branch
    ).train()


# --------------------------------------------------------------------------------------------------
# 2. The step: a global batch to its loss and its clipped gradient, left in `.grad`.
#
# The loss is taken by the model's fused head and loss (`model(inputs, depth, targets=targets)`,
# `biosrecall.model.layers.head_cross_entropy`): only the real targets' rows reach the head, and the
# [tokens, vocab] logits are never held in full. It equals `F.cross_entropy` on the full logits to
# within rounding (tests/test_fused_loss.py).

ONE_PROCESS = DistInfo()


class StepLoss(NamedTuple):
    mean: float  # mean loss per real target token of the global batch
    real_tokens: int  # real (non-padding) target tokens of the global batch


@dataclass(frozen=True)
class Batch:
    inputs: torch.Tensor  # this rank's input rows, int64 [rows, T], on the model's device
    targets: torch.Tensor  # the matching targets, IGNORE_INDEX where the target is padding (no loss)
    real_tokens: int  # real target tokens of the *global* batch (the loss is normalised by it)


def split_batch(rows: np.ndarray, pad_id: int | None, dist: DistInfo = ONE_PROCESS, device="cpu") -> Batch:
    """A global batch (int64 [B, T + 1]) as this rank trains on it: inputs are `row[:-1]`, targets
    `row[1:]` with padding ignored. A batch without a single real target is a broken dataset."""
    global_targets = torch.from_numpy(np.ascontiguousarray(rows[:, 1:]))
    if pad_id is not None:
        global_targets = global_targets.masked_fill(global_targets == pad_id, IGNORE_INDEX)
    real = int((global_targets != IGNORE_INDEX).sum())
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
    total = torch.zeros((), device=batch.inputs.device)  # this rank's summed loss
    micro_batches = zip(batch.inputs.chunk(grad_accum), batch.targets.chunk(grad_accum), strict=True)
    for index, (inputs, targets) in enumerate(micro_batches):
        # Gradients are synced across ranks only on the last micro-batch.
        with distributed.gradient_sync(model, dist, parallel, sync=index == grad_accum - 1):
            with autocast():
                loss_sum = model(inputs, depth, targets=targets)
            # Normalise by the real tokens of the *global* batch so the data-parallel gradient mean
            # (DDP or FSDP) over ranks and micro-batches equals one big batch.
            (loss_sum * (dist.world_size / batch.real_tokens)).backward()
        total += loss_sum.detach()
    mean = distributed.all_reduce_sum(total, dist).item() / batch.real_tokens
    if not math.isfinite(mean):
        raise NonFiniteLoss(f"the training loss is not finite at depth {depth}")
    if grad_clip > 0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    return StepLoss(mean, batch.real_tokens)


# --------------------------------------------------------------------------------------------------
# 3. The plan: the updates, and each one's depth, that spend the budget.


def make_plan(model_config, config: TrainConfig, seq_len: int | None = None, exposures=None):
    """The number of updates and their depths that spend the budget (one planner for every run).
    A run passes the `seq_len` it resolved; without it, it is resolved here. A run sized by
    `config.exposures` takes the updates `exposures(E)` counts on its batches (the task's counter,
    `biosrecall.bios.exposures`) at the FLOPs they cost."""
    schedule = parse_schedule(config.schedule)
    if not model_config.recurrent and schedule.max_depth != 1:
        # A model without a recurrent block (`ModelConfig.recurrent`) has one depth: no record may name
        # depths it does not have.
        raise BiosrecallError(
            f"this model has no recurrent block (a standard transformer, one depth): train it with "
            f"--schedule fixed:1, not {schedule.spec}"
        )
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


def plan_summary(plan, model_config, exposures=None) -> dict[str, Any]:
    """config.json's plan; a run sized by exposures also records how often each person was shown."""
    summary = {**plan.summary(), "parameters": param_counts(model_config)}
    if exposures is not None:
        summary["exposures"] = exposures.summary()
    return summary


def seconds_per_flop(model, batch_size: int, seq_len: int, autocast=nullcontext) -> float:
    """Seconds per modeled FLOP of `model` on its device, from the second of two forward+backward
    passes at depth 4 (weights untouched, gradients cleared): the wall-time estimate of a run's plan
    line ("est. time") and of a study's `--plan`."""
    device = next(model.parameters()).device
    tokens = torch.zeros(batch_size, seq_len, dtype=torch.long, device=device)
    elapsed = 0.0
    for _ in range(2):  # the first call pays one-off allocation costs
        tick = time.perf_counter()
        with autocast():
            model(tokens, 4).float().sum().backward()
        elapsed = time.perf_counter() - tick
    model.zero_grad(set_to_none=True)
    config = model.config
    return elapsed / update_flops(config, 4, batch_size * seq_len, seq_len, config.backprop_depth)


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


# --------------------------------------------------------------------------------------------------
# 4. The Trainer.


@dataclass
class _Progress:
    """Where the run stands; saved under these names in every checkpoint's meta.json and restored by a
    resume."""

    update: int = 0
    flops: float = 0.0
    tokens: int = 0
    real_tokens: int = 0
    fractions_done: list[float] = field(default_factory=list)
    loss: float = float("nan")
    """The last update's training loss."""
    wall_seconds: float = 0.0


class Trainer:
    """One training run of `task` into `run_dir` under `config`; `train()` runs it (see the module
    docstring). `resume` continues the run's `latest`; `overwrite` replaces what the folder holds; a
    `branch` (`biosrecall.train.branch.Branch`) starts a new run from another run's saved state."""

    def __init__(
        self,
        task: TrainingTask,
        run_dir: str | Path,
        config: TrainConfig,
        *,
        resume: bool = False,
        overwrite: bool = False,
        reporter=None,
        branch: Branch | None = None,
    ):
        self.task, self.config, self.branch = task, config, branch
        self.final = RunFolder(run_dir)
        """The run folder the user named."""
        self.folder = self.final
        """Where the run writes: a new run's is built under a temporary name until its first resumable
        state publishes it into place (`RunFolder.publish`: only this object's path changes)."""
        self.resume, self.overwrite = resume, overwrite
        self.reporter = reporter or SilentReporter()
        self.progress = _Progress()
        self.saved_update: int | None = None
        """The update of the newest complete `latest`."""
        self.metrics: MetricsLog | None = None
        """Every update's row, written by rank 0 (None on the other ranks)."""

    # ---- the whole run ------------------------------------------------------------------------

    def train(self) -> TrainResult:
        """Set up, (resume,) and train; returns where the checkpoints are. The run folder may not be,
        contain or lie inside the data it trains on."""
        self.config.validate()  # its fields again (they may have been reassigned), the run size, the trackers
        model_config = self.task.model_config(run_recipe(self.config))
        self.seq_len = resolve_seq_len(self.config, model_config, self.task.preset)
        self.source = self.task.batch_source(self.config, self.seq_len)
        record = {
            "task": {"name": self.task.name, "preset": self.task.preset},
            "dataset": self.task.data_record(self.source),
        }
        check_output_path(self.final.path, [record["dataset"].get("path")])
        # Under torchrun only rank 0 takes the run folder's lock (every other rank would find it held).
        lock = output_lock(self.final.path) if distributed.is_main_process() else nullcontext()
        with lock, ExitStack() as building:
            self._set_up(model_config, record, building)
            # config.log's trackers get every record too
            self.reporter = with_trackers(self.reporter, self.config, self)
            try:
                result = self._loop()
                distributed.finish(self.dist)  # all ranks together, or one can hang at exit
                return result
            finally:
                self.reporter.close()
                distributed.shutdown(self.dist)

    # ---- set-up: everything before the first update --------------------------------------------

    def _set_up(self, model_config, record: dict[str, Any], building: ExitStack) -> None:
        """Check everything, plan, build the model, and (for a new run) start its folder under a
        temporary name in `building`, which `_save_latest` swaps into place."""
        config, task = self.config, self.task
        replace = self.final.check_new_or_resumable(self.resume, self.overwrite)
        self.dist, self.device, self.autocast = _join_devices(config)
        exposures = None
        if task.exposures is not None:
            exposures = functools.cache(functools.partial(task.exposures, self.source))
        self.plan = make_plan(model_config, config, self.seq_len, exposures)
        shown = None if config.exposures is None else exposures(config.exposures)  # counted once: cached
        record = {**record, "model_config": model_config.to_dict(), "train_config": config.to_dict()}
        if self.branch is not None:
            record["branch"] = branch_record(self.branch)
        self.branching = self.branch is not None and not self.resume
        """`resume_from` is another run's state (`biosrecall.train.branch`), not this run's own."""
        # What every checkpoint's sidecar of this run says about the run itself, causes before
        # consequences (a resume names the first that differs): the model and schedule fix the updates.
        self.meta_base = {
            "model_config": record["model_config"],
            "schedule": self.plan.schedule,
            "seed": config.seed,
            "budget": self.plan.budget,
            "planned_updates": self.plan.updates,
            **{k: record[k] for k in ("dataset", "task") if k in record},
        }
        self.resume_from = self._starting_state(record, exposures)
        if not self.resume:
            self.folder = self._new_run_folder(replace, building)
        if self.dist.is_main and not self.resume:
            self.folder.write_config({**record, "plan": plan_summary(self.plan, model_config, shown)})
        distributed.barrier(self.dist)
        self.raw_model, self.model, self.optimizer = _build_model(
            model_config, config, self.dist, self.device
        )
        checkpointer_class = Checkpointer
        if self.dist.enabled and config.parallel == "fsdp":
            # FSDP: no rank holds the whole model, so every save and restore is collective and sharded.
            # Imported here: torch.distributed.checkpoint costs about 0.5 s of every other run's start-up.
            from biosrecall.train.sharded import ShardedCheckpointer

            checkpointer_class = ShardedCheckpointer
        self.checkpointer = checkpointer_class(self.folder, self.dist, self.raw_model, self.optimizer)
        if self.dist.is_main:
            speed = None  # the estimate is timed on one CPU process only
            if self.device.type == "cpu" and not self.dist.enabled:
                speed = seconds_per_flop(self.raw_model, config.batch_size, self.seq_len, self.autocast)
            self.reporter.message(describe_plan(self.plan, model_config, speed, shown))

    def _starting_state(self, record, exposures) -> Path | None:
        """The state training continues from: this run's `latest` (resume), the parent's (a new branch),
        or None (a new run). A resumed branch continues from its own state, so its parent is not needed.
        The parent is planned again with this run's sequence length, which `check_branch` requires it
        shares."""
        config, plan = self.config, self.plan
        if config.keep_updates and config.keep_updates[-1] > plan.updates:
            raise BiosrecallError(
                f"--keep-updates {config.keep_updates[-1]} is beyond this run's {plan.updates} updates"
            )
        if self.resume:
            return _check_resume(self.final, record, self.meta_base)
        if self.branch is None:
            return None
        state = find_state(self.branch)
        replan = functools.partial(make_plan, seq_len=self.seq_len, exposures=exposures)
        check_branch(self.branch, record, plan, config, replan, RESUMABLE_DIFFERENCES)
        return state

    def _new_run_folder(self, replace: bool, building: ExitStack) -> RunFolder:
        """Rank 0 starts the temporary folder of a new run; every rank learns its name (sharded saves
        write from every rank)."""
        if not self.dist.enabled:
            return self.final.start(replace, building)
        started = self.final.start(replace, building) if self.dist.is_main else None
        path = [started.path if started else None]
        torch.distributed.broadcast_object_list(path, src=0)
        return started or self.final.started_elsewhere(path[0])

    # ---- the loop ----------------------------------------------------------------------------

    def _loop(self) -> TrainResult:
        if self.resume_from:
            self._restore()
        if self.dist.is_main:
            if self.resume_from:
                self.folder.remove_leftovers()
            parent = RunFolder(self.branch.parent) if self.branching else None
            self.metrics = MetricsLog(self.folder, self.progress.update, rows_from=parent)
        progress, metrics = self.progress, self.metrics
        self.reporter.start(self.plan.updates, progress.update)
        if self.branching:  # what the branch point itself earns: the switch checkpoint, a kept update
            self._maybe_checkpoint()
        started = time.perf_counter() - progress.wall_seconds
        try:
            with _stop_requests() as stop_requested, self._explaining_failed_saves(), memory_checked(self):
                while progress.update < self.plan.updates:
                    row = self._one_update()
                    progress.wall_seconds = time.perf_counter() - started
                    row["wall_s"] = round(progress.wall_seconds, 4)
                    if metrics:
                        metrics.append(row)
                    self.reporter.update(row)
                    self._maybe_checkpoint()
                    # Every rank must stop at the same update: the save below is collective.
                    stop = distributed.any_rank(stop_requested(), self.dist)
                    if stop and progress.update < self.plan.updates:
                        self._save_latest()
                        raise Interrupted(f"interrupted at update {progress.update}; {RESUME_ADVICE}")
        except BaseException:
            # The updates since the newest saved state are trained again by a resume: their rows go.
            if metrics:
                metrics.cut_to_saved()
            raise
        if metrics:
            metrics.close()
        checkpoints = self.folder.fraction_checkpoints()
        return TrainResult(
            self.folder.path,
            progress.update,
            progress.flops,
            checkpoints,
            progress.loss,
            progress.wall_seconds,
        )

    def _one_update(self) -> dict:
        """Forward/backward at the planned depth, clip, step; returns the metrics row."""
        progress, plan, config = self.progress, self.plan, self.config
        update = progress.update
        depth = int(plan.depths[update])
        lr = learning_rate(update, plan.updates, config)
        set_learning_rate(self.optimizer, lr)
        tick = time.perf_counter()
        try:
            loss = backward_and_clip(
                self.model,
                self.source.batch(update),
                self.source.pad_id,
                depth,
                config.grad_clip,
                self.autocast,
                config.grad_accum,
                dist=self.dist,
                parallel=config.parallel,
            )
        except NonFiniteLoss:
            raise TrainingDiverged(
                f"non-finite loss at update {update} (depth {depth}); the last good checkpoint is kept"
            ) from None
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        seconds = time.perf_counter() - tick
        progress.update += 1
        progress.flops += float(plan.flops_per_update[update])
        progress.tokens += plan.tokens_per_update
        progress.real_tokens += loss.real_tokens
        progress.loss = loss.mean
        return {
            "update": update,
            "depth": depth,
            "loss": loss.mean,
            "lr": lr,
            "flops": progress.flops,
            "tokens": progress.tokens,
            "tokens_per_s": plan.tokens_per_update / seconds,
            "flops_per_s": float(plan.flops_per_update[update]) / seconds,
        }

    # ---- checkpoints and resume --------------------------------------------------------------

    def _maybe_checkpoint(self) -> None:
        """Keep weights at each budget fraction crossed (the largest at the final update) and at a
        schedule's switch; refresh `latest`. Each kept checkpoint also holds the optimizer state, which
        the update diagnostic needs."""
        progress, config, plan = self.progress, self.config, self.plan
        finished = progress.update == plan.updates
        crossed = fractions_crossed(
            config.checkpoint_fractions, progress.fractions_done, progress.flops, plan.budget, finished
        )
        progress.fractions_done.extend(crossed)
        kept = [(self.folder.checkpoint_dir(fraction), self._meta(fraction)) for fraction in crossed]
        if progress.update == plan.switch_update:
            kept.append((self.folder.checkpoint_dir(SWITCH), self._meta(None)))
        if progress.update in (config.keep_updates or ()):
            kept.append((self.folder.checkpoint_dir(update_dirname(progress.update)), self._meta(None)))
        if kept:
            self.checkpointer.save_kept(kept, self.source.state_dict())
        if kept or finished or progress.update % config.save_every == 0:
            self._save_latest()

    def _meta(self, fraction: float | None) -> dict[str, Any]:
        progress = self.progress
        return {
            **self.meta_base,
            **asdict(progress),
            "fraction": fraction,
            "fractions_done": sorted(progress.fractions_done),
            # Batches and depths are functions of (seed, update): this is the whole generator state.
            "generator_state": {"seed": self.meta_base["seed"], "next_update": progress.update},
        }

    def _save_latest(self) -> None:
        """Save the resumable state; the first one of a new run also swaps the run folder into place
        (a replaced run is moved aside first and deleted only once the new one is in place)."""
        self.checkpointer.save_latest(self._meta(None), self.source.state_dict())
        if self.folder.building:
            self.folder.publish()
        self.saved_update = self.progress.update
        if self.metrics:
            self.metrics.saved(self.progress.update)

    def _restore(self) -> None:
        """Load weights, optimizer, batch source and progress from `latest` (or a branch's parent)."""
        try:
            meta, source_state = self.checkpointer.restore(self.resume_from)
        except checkpoint_files.DamagedCheckpoint as exc:
            if self.branching:
                raise
            raise damaged_latest(self.folder, self.resume_from, exc) from None
        self.source.load_state_dict(source_state)
        self.progress = _Progress(**{f.name: meta[f.name] for f in fields(_Progress)})
        if self.branching:  # the parent's fractions are of its own budget; those of ours passed are skipped
            self.progress.fractions_done = fractions_crossed(
                self.config.checkpoint_fractions, [], meta["flops"], self.plan.budget, False
            )
        else:  # a branch has saved nothing yet
            self.saved_update = meta["update"]

    @contextmanager
    def _explaining_failed_saves(self):
        """A failed write (disk full, no permission) ends the run with one line saying what is left."""
        try:
            yield
        except checkpoint_files.SaveFailed as exc:
            if self.saved_update is None:
                before = "is as it was before" if self.final.path.exists() else "was not created"
                left = f"nothing of this run was kept, and {self.final.path} {before}"
            else:
                left = (
                    f"{self.final.latest_link} still holds the complete state of "
                    f"update {self.saved_update}: {RESUME_ADVICE} once the problem is fixed"
                )
            raise checkpoint_files.SaveFailed(f"{exc}; {left}") from None


# --------------------------------------------------------------------------------------------------
# 5. How a run saves and restores its checkpoints, behind one interface the loop calls without knowing
# how the run is parallel (`Trainer._set_up` picks):
#
#     checkpointer.save_kept([(path, meta), ...], source.state_dict())   # budget fractions, the switch
#     checkpointer.save_latest(meta, source.state_dict())                # the resumable `latest`
#     meta, source_state = checkpointer.restore(path)                    # weights and optimizer loaded
#
# `Checkpointer` (one process, or DDP where every rank holds the whole model): rank 0 writes the
# single-file format of `checkpoint_files.py`. `ShardedCheckpointer` (FSDP, `biosrecall.train.sharded`)
# overrides every method with a collective one: `latest` is a sharded `torch.distributed.checkpoint`,
# kept checkpoints are gathered into the single-file format. Both publish `latest` through
# `RunFolder.swap_latest`, so a kill at any moment leaves a complete state behind. Which kept
# checkpoints an update earns is the pure function `fractions_crossed`.

KeptCheckpoint = tuple[Path, dict[str, Any]]  # (folder, meta) of a checkpoint to keep


@dataclass
class Checkpointer:
    """Saves and restores one run's model (unwrapped) and optimizer; every rank calls every method.
    Here every rank holds the whole model: rank 0 writes, and the others wait so none runs ahead of a
    `latest` that does not exist yet."""

    folder: RunFolder
    dist: DistInfo
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer

    def save_kept(self, kept: Sequence[KeptCheckpoint], source_state: dict[str, Any]) -> None:
        """Write each (folder, meta) as a single-file checkpoint with the optimizer state."""
        if self.dist.is_main:
            training_state = {"optimizer": self.optimizer.state_dict(), "source": source_state}
            for path, meta in kept:
                checkpoint_files.save_checkpoint(path, self.model, meta, training_state)

    def save_latest(self, meta: dict[str, Any], source_state: dict[str, Any]) -> None:
        """Save the resumable state of update `meta["update"]` and point `latest` at it."""
        if self.dist.is_main:
            training_state = {"optimizer": self.optimizer.state_dict(), "source": source_state}
            self.folder.save_latest(self.model, meta, training_state)
        distributed.barrier(self.dist)

    def restore(self, path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
        """Load the weights and optimizer saved at `path`; returns (meta, batch source state)."""
        saved, meta = checkpoint_files.load_checkpoint(path)
        training_state = checkpoint_files.load_training_state(path)
        self.model.load_state_dict(saved.state_dict())
        try:
            self.optimizer.load_state_dict(training_state["optimizer"])
        except (KeyError, ValueError, TypeError, RuntimeError, IndexError) as exc:
            raise checkpoint_files.DamagedCheckpoint(
                f"the optimizer state in {path / checkpoint_files.STATE_FILE} does not fit the model: "
                f"{first_line(exc)}"
            ) from None
        return meta, training_state["source"]


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


# --------------------------------------------------------------------------------------------------
# Helpers of the set-up and the loop.


def _join_devices(config: TrainConfig):
    """The process group under torchrun, this rank's device (its own GPU) and the autocast to train in."""
    device = distributed.resolve_device(config.device)
    if config.threads:
        torch.set_num_threads(config.threads)
    autocast = distributed.autocast_for(device, config.precision)
    dist, device = distributed.init_distributed(device)
    distributed.check_parallel(config.parallel, dist)
    distributed.check_divisible(config.batch_size, dist, config.grad_accum)
    return dist, device, autocast


def _build_model(model_config, config: TrainConfig, dist: DistInfo, device: torch.device):
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


def _check_resume(run: RunFolder, record: dict[str, Any], meta_base: dict[str, Any]) -> Path:
    """Resuming is allowed only from an intact `latest` with the same settings that change results, as
    both config.json and the checkpoint's own meta.json (`meta_base`: what this run would write in it)
    record them (editing one fools neither)."""
    stored = run.read_config()
    # A resumed branch continues from its own `latest`: its parent matters only when named again.
    sections = ("model_config", "train_config", "dataset", "task") + (
        ("branch",) if "branch" in record else ()
    )
    for section in sections:
        refuse_differences("resume", section, stored.get(section), record.get(section), RESUMABLE_DIFFERENCES)
    link = run.latest_link
    if not os.path.lexists(link):
        raise BiosrecallError(f"cannot resume: {run.path} has no saved checkpoint yet")
    latest = link.resolve()
    try:
        meta = checkpoint_files.read_meta(latest, resumable=True)
        checkpoint_files.model_config_of(latest, meta)
    except checkpoint_files.DamagedCheckpoint as exc:
        raise damaged_latest(run, latest, exc) from None
    for key, value in meta_base.items():
        if key in meta:  # a run of an earlier release recorded no dataset or task in its meta.json
            refuse_differences(
                "resume", key, meta[key], value, RESUMABLE_DIFFERENCES, where=f" (checkpoint {latest})"
            )
    return latest


def damaged_latest(run: RunFolder, latest: Path, problem: BiosrecallError) -> BiosrecallError:
    """The resume error for a damaged `latest`: what is wrong, and the newest checkpoint left intact."""
    found = run.newest_intact_checkpoint(besides=latest)
    if found is None:
        return BiosrecallError(
            f"cannot resume: {problem}; no intact checkpoint is left in {run.path} (start over with --overwrite)"
        )
    path, update = found
    return BiosrecallError(
        f"cannot resume: {problem}; the newest intact checkpoint is {path} (update {update}): "
        f"point latest at it (ln -sfn {path.name} {run.latest_link}) and resume again, or "
        "start over with --overwrite"
    )


@contextmanager
def _stop_requests():
    """Turn Ctrl-C / SIGTERM into a flag checked between updates, so `latest` is saved consistently."""
    requested = []
    previous = {}
    with suppress(ValueError):  # not the main thread (e.g. a notebook worker): no graceful stop
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, lambda signum, frame: requested.append(signum))
    try:
        yield lambda: bool(requested)
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
