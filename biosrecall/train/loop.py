"""The one training loop, shared by bioS and the language-model pipeline.

    result = run_training(model_config, train_config, source, run_dir, seq_len=..., record=..., reporter=...)

A run spends a modeled-FLOP budget: the planner fixes the number of updates and every update's depth
up front (depths come from (seed, update)), the loop adds each update's FLOPs from the one FLOP
account, and weights are kept when the running total crosses each checkpoint fraction of the budget.
Batches come from a `BatchSource` whose `batch(update)` is a pure function of the update index (or
which carries a resumable state), so an interrupted run resumed from `latest` ends bit-identical to
an uninterrupted one on CPU. The loop saves and restores through the run's `Checkpointer`
(`checkpointers.py`), at the paths `layout.py` names, without knowing how the run is parallel, and takes each update with the one
training step of `step.py` (which the update diagnostic shares).

`run_training` holds the run folder's lock (`biosrecall.locking.output_lock`) for its whole call, so a
second writer or resumer of the same run fails at once naming this process. A write that fails (disk
full, no permission) ends the run with one line naming the file and the errno, and `latest` still
holds the last complete state, from which `--resume` continues bit-identically.
"""

from __future__ import annotations

import signal
import time
from contextlib import ExitStack, contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from biosrecall.atomic import check_output_path
from biosrecall.locking import output_lock
from biosrecall.train import checkpoint_files, distributed, layout
from biosrecall.train.checkpointers import fractions_crossed
from biosrecall.train.config import TrainConfig
from biosrecall.train.optim import learning_rate, set_learning_rate
from biosrecall.train.progress import SilentReporter
from biosrecall.train.run_dir import MetricsLog
from biosrecall.train.setup import RunSetup, damaged_latest, prepare_run
from biosrecall.train.step import NonFiniteLoss, backward_and_clip
from biosrecall.train.tracking import with_trackers


class BatchSource(Protocol):
    pad_id: int | None

    def batch(self, update: int) -> np.ndarray:
        """The global batch of `update`: int64 [batch_size, seq_len + 1]."""

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


RESUME_ADVICE = "resume with --resume"
"""The trainer's advice after a stop; a study, which resumes its runs itself, words its own
(`biosrecall.experiments.study_engine`)."""


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
    saved_update: int | None = None  # the update of the newest complete `latest`


def run_training(
    model_config,
    config: TrainConfig,
    source: BatchSource,
    run_dir: str | Path,
    *,
    seq_len: int,
    record: dict[str, Any] | None = None,
    resume: bool = False,
    overwrite: bool = False,
    reporter=None,
    branch=None,
    exposures=None,
) -> TrainResult:
    """Plan, build, (resume,) and train; returns where the checkpoints are. `seq_len` is the length of
    `source`'s sequences, resolved once by the caller (`config.resolve_seq_len`); `exposures` counts
    the updates of a run sized by `config.exposures` (`setup.make_plan`).

    The run folder is locked for the whole call (a second writer or resumer fails at once naming this
    process); it may not be, contain or lie inside the data it trains on. A `branch`
    (`biosrecall.train.branch.Branch`) starts a new run from another run's saved state."""
    reporter = reporter or SilentReporter()
    record = record or {}
    check_output_path(run_dir, [(record.get("dataset") or {}).get("path")])
    with _run_lock(run_dir), ExitStack() as building:
        setup = prepare_run(
            model_config,
            config,
            seq_len,
            run_dir,
            record,
            resume,
            overwrite,
            reporter,
            building,
            branch,
            exposures=exposures,
        )
        reporter = with_trackers(reporter, config, setup)  # config.log's trackers get every record too
        try:
            result = _train(setup, config, source, reporter)
            distributed.finish(setup.dist)  # all ranks together, or one can hang at exit
            return result
        finally:
            reporter.close()
            distributed.shutdown(setup.dist)


def _run_lock(run_dir: str | Path):
    """The run folder's lock; under torchrun only rank 0 takes it (every other rank would find it held)."""
    return output_lock(run_dir) if distributed.is_main_process() else nullcontext()


def _train(setup: RunSetup, config: TrainConfig, source: BatchSource, reporter) -> TrainResult:
    state = _restore(setup, source, config) if setup.resume_from else _LoopState()
    metrics = MetricsLog(setup.run_dir, state.update) if setup.dist.is_main else None
    if setup.resume_from and setup.dist.is_main:
        layout.remove_leftovers(setup.run_dir)
    reporter.start(setup.plan.updates, state.update)
    if setup.branching:  # what the branch point itself earns: the switch checkpoint, a kept update
        _maybe_checkpoint(setup, config, source, state, metrics)
    started = time.perf_counter() - state.wall_seconds
    try:
        with _stop_requests() as stop_requested, _explaining_failed_saves(setup, state):
            while state.update < setup.plan.updates:
                row = _one_update(setup, config, source, state)
                state.wall_seconds = time.perf_counter() - started
                row["wall_s"] = round(state.wall_seconds, 4)
                if metrics:
                    metrics.append(row)
                reporter.update(row)
                _maybe_checkpoint(setup, config, source, state, metrics)
                # Every rank must stop at the same update: the save below is collective.
                if distributed.any_rank(stop_requested(), setup.dist) and state.update < setup.plan.updates:
                    _save_latest(setup, source, state, metrics)
                    raise Interrupted(f"interrupted at update {state.update}; {RESUME_ADVICE}")
    except BaseException:
        # The updates since the newest saved state are trained again by a resume: their rows go.
        if metrics:
            metrics.cut_to_saved()
        raise
    if metrics:
        metrics.close()
    checkpoints = layout.list_checkpoints(setup.run_dir)
    return TrainResult(
        setup.run_dir, state.update, state.flops, checkpoints, state.last_loss, state.wall_seconds
    )


@contextmanager
def _explaining_failed_saves(setup: RunSetup, state: _LoopState):
    """A failed write (disk full, no permission) ends the run with one line saying what is left."""
    try:
        yield
    except checkpoint_files.SaveFailed as exc:
        if state.saved_update is None:
            before = "is as it was before" if setup.final_dir.exists() else "was not created"
            left = f"nothing of this run was kept, and {setup.final_dir} {before}"
        else:
            left = (
                f"{layout.latest_link(setup.final_dir)} still holds the complete state of "
                f"update {state.saved_update}: {RESUME_ADVICE} once the problem is fixed"
            )
        raise checkpoint_files.SaveFailed(f"{exc}; {left}") from None


def _one_update(setup: RunSetup, config: TrainConfig, source: BatchSource, state: _LoopState) -> dict:
    """Forward/backward at the planned depth, clip, step; returns the metrics row."""
    update, plan = state.update, setup.plan
    depth = int(plan.depths[update])
    lr = learning_rate(update, plan.updates, config)
    set_learning_rate(setup.optimizer, lr)
    tick = time.perf_counter()
    loss = _backward(setup, config, source, update, depth)
    setup.optimizer.step()
    setup.optimizer.zero_grad(set_to_none=True)
    seconds = time.perf_counter() - tick
    state.update += 1
    state.flops += float(plan.flops_per_update[update])
    state.tokens += plan.tokens_per_update
    state.real_tokens += loss.real_tokens
    state.last_loss = loss.mean
    return {
        "update": update,
        "depth": depth,
        "loss": loss.mean,
        "lr": lr,
        "flops": state.flops,
        "tokens": state.tokens,
        "tokens_per_s": plan.tokens_per_update / seconds,
        "flops_per_s": float(plan.flops_per_update[update]) / seconds,
    }


def _backward(setup: RunSetup, config: TrainConfig, source: BatchSource, update: int, depth: int):
    """The update's clipped gradient (the one training step of `step.py`); returns its loss."""
    try:
        return backward_and_clip(
            setup.model,
            source.batch(update),
            source.pad_id,
            depth,
            config.grad_clip,
            setup.autocast,
            config.grad_accum,
            dist=setup.dist,
            parallel=config.parallel,
        )
    except NonFiniteLoss:
        raise TrainingDiverged(
            f"non-finite loss at update {update} (depth {depth}); the last good checkpoint is kept"
        ) from None


def _maybe_checkpoint(setup, config, source, state: _LoopState, metrics) -> None:
    """Keep weights at each budget fraction crossed (the largest at the final update) and at a
    schedule's switch; refresh `latest`. Each kept checkpoint also holds the optimizer state, which
    the update diagnostic needs."""
    finished = state.update == setup.plan.updates
    crossed = fractions_crossed(
        config.checkpoint_fractions, state.fractions_done, state.flops, setup.plan.budget, finished
    )
    kept_dirs = [(fraction, layout.checkpoint_dir(setup.run_dir, fraction)) for fraction in crossed]
    if state.update == setup.plan.switch_update:
        kept_dirs.append((None, layout.checkpoint_dir(setup.run_dir, layout.SWITCH)))
    if state.update in (config.keep_updates or ()):
        kept_dirs.append((None, layout.checkpoint_dir(setup.run_dir, layout.update_dirname(state.update))))
    state.fractions_done.extend(crossed)
    if kept_dirs:
        kept = [(path, _meta(setup, state, fraction)) for fraction, path in kept_dirs]
        setup.checkpointer.save_kept(kept, source.state_dict())
    if kept_dirs or finished or state.update % config.save_every == 0:
        _save_latest(setup, source, state, metrics)


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
    """Save the resumable state; the first one of a new run also swaps the run folder into place."""
    if metrics:
        metrics.flush()
    setup.checkpointer.save_latest(_meta(setup, state, None), source.state_dict())
    if setup.publish is not None:
        _swap_run_into_place(setup, metrics)
    state.saved_update = state.update
    if metrics:
        metrics.saved(state.update)


def _swap_run_into_place(setup: RunSetup, metrics) -> None:
    """Swap the new run (built under a temporary name so far) into the folder the user named; a
    replaced run is moved aside first and deleted only once the new one is in place."""
    with checkpoint_files.writing(setup.final_dir):
        setup.publish()
    setup.publish = None
    setup.run_dir = setup.checkpointer.run_dir = setup.final_dir
    if metrics:
        metrics.moved_to(setup.final_dir)


def _restore(setup: RunSetup, source: BatchSource, config: TrainConfig) -> _LoopState:
    """Load weights, optimizer, batch source and loop counters from `latest` (or a branch's parent)."""
    try:
        meta, source_state = setup.checkpointer.restore(setup.resume_from)
    except checkpoint_files.DamagedCheckpoint as exc:
        if setup.branching:
            raise
        raise damaged_latest(setup.run_dir, setup.resume_from, exc) from None
    source.load_state_dict(source_state)
    done = meta["fractions_done"]
    if setup.branching:  # the parent's fractions are of its own budget; those of ours passed are skipped
        done = fractions_crossed(config.checkpoint_fractions, [], meta["flops"], setup.plan.budget, False)
    return _LoopState(
        update=meta["update"],
        flops=meta["flops"],
        tokens=meta["tokens"],
        real_tokens=meta["real_tokens"],
        fractions_done=list(done),
        last_loss=meta["loss"],
        wall_seconds=meta["wall_seconds"],
        saved_update=None if setup.branching else meta["update"],  # a branch has saved nothing yet
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
