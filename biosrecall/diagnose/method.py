"""The update diagnostic put together: the steps of the method (documented in `biosrecall.diagnose`) run
on every state and batch, into one per-batch table and its bootstrap summary.

    result = diagnose_update("runs/ff", "switch", DiagnoseOptions(depths=(4, 16), batches=8))
    candidate_updates(state, rows, (4, 16), "shallow")   # {depth: (update at the common RMS, raw RMS)}
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import pandas as pd
import torch

from biosrecall.diagnose.batch_update import (
    adamw_batch_update,
    applied,
    batch_gradient,
    optimizer_params,
    rms,
    scale_to_rms,
)
from biosrecall.diagnose.options import DiagnoseOptions
from biosrecall.diagnose.report import DiagnosisResult, summarize
from biosrecall.diagnose.run_state import (
    HIGHER_IS_BETTER,
    DiagnosisTask,
    RunState,
    check_continuation,
    continue_run,
    load_run_state,
)
from biosrecall.train.run_folder import SWITCH, versions


def candidate_updates(state: RunState, rows, depths: Sequence[int], rms_target) -> dict[int, tuple]:
    """Depth -> (update rescaled to the common RMS, its raw RMS), one gradient per distinct depth."""
    params, lr, config = optimizer_params(state.optimizer), state.lr(), state.config
    raw = {}
    for depth in sorted(set(depths)):
        grads = batch_gradient(
            state.model,
            params,
            rows,
            state.source.pad_id,
            depth,
            config.grad_clip,
            state.autocast,
            config.grad_accum,
        )
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
        frame = _batch_frame(options.depths, base, scores, candidates)
        frame.insert(0, "serving_depth", serving)
        frame.insert(0, "batch_update", state.update + batch)
        frame.insert(0, "batch", batch)
        frame.insert(0, "lr", state.lr())
        frame.insert(0, "update", state.update)
        frame.insert(0, "after_uniform", after)
        frames.append(frame)
        log(f"after {after}: batch {batch + 1}/{options.batches} done")
    return pd.concat(frames, ignore_index=True)


def _batch_frame(depths, base: dict, scores: dict, candidates: dict) -> pd.DataFrame:
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
    return pd.DataFrame(columns)


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
