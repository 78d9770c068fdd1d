"""The update diagnostic put together: a run (bioS or LM) at one of its kept checkpoints, and the steps of
the method (documented in `biosrecall.diagnose`) run on every state and batch, into one per-batch table
and its bootstrap summary.

    result = diagnose_update("runs/ff", "switch", DiagnoseOptions(depths=(4, 16), batches=8))
    candidate_updates(state, rows, (4, 16), "shallow")   # {depth: (update at the common RMS, raw RMS)}

The run: weights, the AdamW state rebuilt as the trainer builds it, the run's batch stream and planned
depths, the run's next updates, and what the diagnostic scores on it.

    state, task = load_run_state("runs/ff", "switch")        # any one-checkpoint selector: 0.8, final
    state.lr()                                               # the LR of the run's next update
    continue_run(state, 16)                                  # the run's own next 16 updates, in place
    task.source.batch(u)            # update u's batch, from the trainer's own batch source for this run
    task.score(model, [1, 2, 4])    # {"nll": array over the serving depths (ascending), ...}
    task.units                      # metric -> what it measures (the plot's axis label), in report order
    task.record                     # what the options JSON records about the data and the scored set

`continue_run` is the trainer's step (planned depth, scheduled LR, the run's batch, loss, clipping,
AdamW) without its bookkeeping; continuing a fixed-first run from its switch to its last update
reproduces the run's final weights bit for bit on a CPU (tests/test_diagnose.py, test_diagnose_lm.py).
The checkpoint is chosen with the selector syntax of every command (`biosrecall.train.run_folder`), naming exactly
one checkpoint.

What is scored, and the batch source, depend on the kind of run:

- bioS runs (`biosrecall train`): answer NLL under teacher forcing and recalled bits per person, over
  the evaluation prompts of the first `people` people (DEFAULT_PEOPLE; 0 = all), as `recall-curve`
  counts them.
- LM runs (`biosrecall lm train`): validation NLL, the mean next-token cross-entropy over every target
  token of the first `val_sequences` windows (DEFAULT_VAL_SEQUENCES; 0 = all) of the run's corpus
  validation split in stream order: the windows `biosrecall lm eval --max-sequences N` reads, scored
  by its `depth_nll`.

Each task builder finds the data through `biosrecall.train.run_folder` and checks that it is the one the
checkpoint records (by hash), so `source` draws the batches the trainer drew. Another kind of run is one
more entry in `TASKS`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from biosrecall.bios import load_dataset
from biosrecall.compute.schedules import parse_schedule
from biosrecall.diagnose.batch_update import (
    adamw_batch_update,
    applied,
    batch_gradient,
    optimizer_params,
    rms,
    scale_to_rms,
)
from biosrecall.diagnose.options import DEFAULT_PEOPLE, DEFAULT_VAL_SEQUENCES, DiagnoseOptions
from biosrecall.diagnose.report import DiagnosisResult, summarize
from biosrecall.errors import BiosrecallError
from biosrecall.eval.recall import score_exact

# The recall sweep's answer scores: the diagnostic's "recalled" means exactly what `recall-curve` means.
from biosrecall.eval.stored_bits import answer_scores_by_depth
from biosrecall.lm.evaluate import depth_nll
from biosrecall.lm.loader import validation_batches
from biosrecall.lm.shard_manifest import load_manifest
from biosrecall.lm.task import LMBatchSource
from biosrecall.train.checkpoint_files import load_checkpoint, load_training_state, read_meta
from biosrecall.train.config import TrainConfig
from biosrecall.train.distributed import autocast_for, resolve_device
from biosrecall.train.optim import build_optimizer, learning_rate, set_learning_rate
from biosrecall.train.run_folder import SWITCH, RunFolder, seq_len_of, versions
from biosrecall.train.trainer import BatchSource, BiosBatchSource, backward_and_clip

EVAL_BATCH = 16  # validation windows per forward pass; the mean NLL does not depend on it
HIGHER_IS_BETTER = frozenset({"bits"})  # every other metric is a loss


@dataclass(frozen=True)
class RunInfo:
    """What a builder needs to know of the run: config.json (`record`), the checkpoint's meta.json, the
    training config, the training sequence length and the autocast context the model runs under."""

    run_dir: Path
    record: dict
    meta: dict
    config: TrainConfig
    seq_len: int
    autocast: Callable


@dataclass(frozen=True)
class DiagnosisTask:
    """A run's batch source and `score(model, serving_depths) -> {metric: per-depth array}`."""

    name: str
    source: Any  # a trainer `BatchSource`: batch(update) -> int64 [B, T + 1], and pad_id
    score: Callable[[torch.nn.Module, Sequence[int]], dict[str, np.ndarray]]
    units: dict[str, str]
    record: dict[str, Any]


def load_task(run: RunInfo, data_dir=None, people=None, val_sequences=None) -> DiagnosisTask:
    """The task of the run's kind; `people` is for bioS runs and `val_sequences` for LM runs only
    (None = the default), so an option the run cannot use is refused instead of ignored."""
    name = (run.record.get("task") or {}).get("name")
    if name not in TASKS:
        raise BiosrecallError(
            f"{run.run_dir} records task {name!r}: the update diagnostic knows bioS and LM runs only"
        )
    return TASKS[name](run, data_dir, people, val_sequences)


def bios_diagnosis_task(run: RunInfo, data_dir, people, val_sequences) -> DiagnosisTask:
    """Answer NLL and recalled bits on the prompts of the first `people` people of the run's dataset."""

    _refuse(val_sequences, "--val-sequences", "LM", run.run_dir, "bioS", "--people")
    path = RunFolder(run.run_dir).training_data(run.meta, data_dir)
    dataset = load_dataset(path)
    RunFolder(run.run_dir).check_training_data(run.meta, path, dataset.manifest_hash)
    people = DEFAULT_PEOPLE if people is None else people
    chosen = dataset.num_people if people == 0 else min(people, dataset.num_people)
    eval_set = dataset.eval_set(np.arange(chosen))

    def score(model, depths: Sequence[int]) -> dict[str, np.ndarray]:
        """Per serving depth: the mean NLL of the answer tokens under teacher forcing, and recalled bits
        per person (a fact is recalled when >= 4 of its 5 prompts are answered exactly)."""
        scores = answer_scores_by_depth(model, eval_set, depths, batch_size=256)
        bits = [score_exact(flags, eval_set, dataset.pool_sizes).bits_per_person for flags in scores.exact]
        return {"nll": scores.nats.sum(axis=1) / int(np.sum(eval_set.answer_len)), "bits": np.array(bits)}

    return DiagnosisTask(
        name="bios",
        source=BiosBatchSource(dataset, run.config.batch_size, run.seq_len, run.config.seed),
        score=score,
        units={"nll": "answer NLL (nats/token)", "bits": "recalled bits per person"},
        record={
            "people": chosen,
            "people_rule": "person ids 0..people-1 of the dataset",
            "batch_stream": "the run's own batches at updates update..update+batches-1 (run seed)",
            "manifest_hash": dataset.manifest_hash,
        },
    )


def lm_diagnosis_task(run: RunInfo, data_dir, people, val_sequences) -> DiagnosisTask:
    """Validation NLL over the first `val_sequences` validation windows of the run's own corpus."""

    _refuse(people, "--people", "bioS", run.run_dir, "LM", "--val-sequences")
    path = RunFolder(run.run_dir).training_data(run.meta, data_dir)
    source = LMBatchSource(path, run.config.batch_size, run.seq_len, run.config.seed)
    RunFolder(run.run_dir).check_training_data(run.meta, path, source.loader.data_sha256)
    if not (load_manifest(path)["splits"].get("validation") or {}).get("tokens", 0):
        raise BiosrecallError(
            f"{path} has no validation split (prepared with --val-fraction 0): the update diagnostic "
            "of an LM run scores validation NLL; prepare the corpus with a validation fraction > 0"
        )
    sequences = DEFAULT_VAL_SEQUENCES if val_sequences is None else val_sequences
    # Read once and kept (0 = all): every score of a diagnosis sees the same tokens.
    windows = list(validation_batches(path, run.seq_len, EVAL_BATCH, max_windows=sequences or None))

    def score(model, depths: Sequence[int]) -> dict[str, np.ndarray]:
        device = next(model.parameters()).device
        with torch.inference_mode():
            table = depth_nll(model, windows, depths, device, run.autocast)
        return {"nll": table["nll"].to_numpy()}

    sequences = sum(len(rows) for rows in windows)
    return DiagnosisTask(
        name="lm",
        source=source,
        score=score,
        units={"nll": "validation NLL (nats/token)"},
        record={
            "val_sequences": sequences,
            "val_tokens": sequences * run.seq_len,
            "val_rule": "the first val_sequences windows of the validation split in stream order (lm eval's)",
            "batch_stream": "the run's LM loader stream at updates update..update+batches-1 (run seed)",
            "manifest_hash": source.loader.data_sha256,
        },
    )


def _refuse(value, option: str, applies_to: str, run_dir, kind: str, instead: str) -> None:
    if value is not None:
        raise BiosrecallError(
            f"{option} applies to {applies_to} runs only: {run_dir} is a {kind} run (use {instead})"
        )


TASKS: dict[str, Callable[..., DiagnosisTask]] = {"bios": bios_diagnosis_task, "lm": lm_diagnosis_task}


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
    model, optimizer, config, pad = state.model, state.optimizer, state.config, state.source.pad_id
    for _ in range(updates):
        set_learning_rate(optimizer, state.lr())
        rows, depth = state.source.batch(state.update), int(state.depths[state.update])
        backward_and_clip(model, rows, pad, depth, config.grad_clip, state.autocast, config.grad_accum)
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


def candidate_updates(state: RunState, rows, depths: Sequence[int], rms_target) -> dict[int, tuple]:
    """Depth -> (update rescaled to the common RMS, its raw RMS), one gradient per distinct depth."""
    params, lr, config = optimizer_params(state.optimizer), state.lr(), state.config
    model, pad, clip = state.model, state.source.pad_id, config.grad_clip
    raw = {}
    for depth in sorted(set(depths)):
        grads = batch_gradient(model, params, rows, pad, depth, clip, state.autocast, config.grad_accum)
        raw[depth] = adamw_batch_update(state.optimizer, grads, lr)
    sizes = {depth: rms(update) for depth, update in raw.items()}
    shallow, deep = min(depths), max(depths)
    target = {"shallow": sizes[shallow], "deep": sizes[deep]}.get(rms_target, rms_target)
    return {depth: (scale_to_rms(update, target), sizes[depth]) for depth, update in raw.items()}


def diagnose_state(
    state: RunState, task: DiagnosisTask, options: DiagnoseOptions, after: int, log
) -> pd.DataFrame:
    """Per batch and serving depth: the metric changes of both rescaled candidates and their advantage."""
    serving = list(options.serving_depths)
    params = optimizer_params(state.optimizer)
    base = task.score(state.model, serving)
    frames = []
    for batch in range(options.batches):
        rows = state.source.batch(state.update + batch)
        candidates = candidate_updates(state, rows, options.depths, options.rms)
        scores = {}
        for depth, (update, _) in candidates.items():
            with applied(params, update):
                scores[depth] = task.score(state.model, serving)
        where = {
            "after_uniform": after,
            "update": state.update,
            "lr": state.lr(),
            "batch": batch,
            "batch_update": state.update + batch,
            "serving_depth": serving,
        }
        frames.append(pd.DataFrame(where | _batch_columns(options.depths, base, scores, candidates)))
        log(f"after {after}: batch {batch + 1}/{options.batches} done")
    return pd.concat(frames, ignore_index=True)


def _batch_columns(depths, base: dict, scores: dict, candidates: dict) -> dict:
    """One batch's columns: sizes, then per metric the baseline, the change from each candidate and the
    deeper one's advantage (positive = it helps more: lowers a loss more, or raises a score more)."""
    shallow, deep = depths
    columns = {
        "shallow_depth": shallow,
        "deep_depth": deep,
        "rms_shallow": candidates[shallow][1],
        "rms_deep": candidates[deep][1],
        "rms_target": rms(candidates[shallow][0]),
    }
    for metric, values in base.items():
        change = {d: scores[d][metric] - values for d in (shallow, deep)}
        sign = 1.0 if metric in HIGHER_IS_BETTER else -1.0  # a loss helps by going down
        columns.update(
            {
                f"{metric}_base": values,
                f"{metric}_change_shallow": change[shallow],
                f"{metric}_change_deep": change[deep],
                f"{metric}_advantage": sign * (change[deep] - change[shallow]),
            }
        )
    return columns


def diagnose_update(
    run_dir: str | Path,
    checkpoint: str | float = SWITCH,
    options: DiagnoseOptions | None = None,
    *,
    device: str = "auto",
    threads: int | None = None,
    data_dir: str | Path | None = None,
    progress: Callable[[str], None] | None = None,
    **option_values,
) -> DiagnosisResult:
    """Run the diagnostic of `biosrecall.diagnose` on the one checkpoint `checkpoint` selects (the selector
    syntax of `biosrecall.train.run_folder`). The method's settings are `options`, or `DiagnoseOptions` fields given as
    keywords; `device`, `threads` (torch's CPU threads, set for this process as a run's `threads` sets
    them; None leaves torch's), `data_dir` (instead of the recorded data) and `progress` (gets status
    lines) say where and on what it runs."""
    if options is None:
        options = DiagnoseOptions(**option_values)
    elif option_values:
        raise TypeError(f"pass DiagnoseOptions or its fields as keywords, not both ({sorted(option_values)})")
    if threads is not None:
        torch.set_num_threads(threads)
    log = progress or (lambda message: None)
    state, task = load_run_state(run_dir, checkpoint, device, data_dir, options.people, options.val_sequences)
    check_continuation(state, options.after_uniform)
    start, frames, states = state.update, [], []
    for after in options.after_uniform:
        continued = state.depths[state.update : start + after].tolist()
        continue_run(state, start + after - state.update)
        log(f"diagnosing at update {state.update} ({after} updates after the checkpoint)")
        frames.append(diagnose_state(state, task, options, after, log))
        states.append(
            {"after_uniform": after, "update": state.update, "lr": state.lr(), "continued_depths": continued}
        )
    record = _record(state, task, run_dir, checkpoint, start) | {"states": states}
    raw = pd.concat(frames, ignore_index=True)
    summary = summarize(raw, options.bootstrap, options.level, options.seed)
    return DiagnosisResult(summary, raw, options, record)


def _record(state: RunState, task: DiagnosisTask, run_dir, checkpoint, start: int) -> dict:
    """What the JSON records besides the options: the run, the checkpoint, the data and the rules."""
    return {
        "run_dir": str(run_dir),
        "checkpoint": state.checkpoint,
        "checkpoint_selector": str(checkpoint),
        "checkpoint_update": start,
        "planned_updates": state.planned,
        "schedule": state.config.schedule,
        "switch_update": state.switch_update,
        "task": task.name,
        "metrics": task.units,
        **task.record,
        "device": str(next(state.model.parameters()).device),
        "versions": versions(),
    }
