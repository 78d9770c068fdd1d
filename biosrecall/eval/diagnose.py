"""The update diagnostic (the paper's Figure 4): from one checkpoint, does a deep update help the serving
depths more than a shallow one of the same size? For bioS runs and for language-model runs.

    from biosrecall.eval.diagnose import diagnose_update
    result = diagnose_update("runs/ff", "switch", depths=(4, 16), after_uniform=(0, 16), batches=8)
    result.summary      # after_uniform, update, metric, serving_depth, mean, ci_low, ci_high, n_batches, ...
    result.batches      # the per-batch raw numbers
    result.figure()     # advantage against serving depth, one line per after_uniform value
    result.write("runs/ff/diagnose")
    # shell: biosrecall diagnose-update runs/ff --checkpoint switch --after-uniform 0,16
    # an LM run (`biosrecall lm train`) is diagnosed the same way, scored by validation NLL:
    diagnose_update("runs/lm-ff", "switch", after_uniform=(0, 16), val_sequences=64)

Method, for one model state (the checkpoint, or the checkpoint continued n updates):

1. State. Weights and AdamW state of a kept checkpoint (each holds `training_state.pt`). The optimizer is
   rebuilt as the trainer builds it (`build_optimizer`, then `load_state_dict`) and steps with the
   learning rate the run would use at its next update u: `learning_rate(u, planned updates, config)`.
2. Batch-caused update. For each candidate depth K (default 4 and 16) and one training batch: the
   gradient of the trainer's loss (mean cross-entropy over non-pad targets after K iterations, with the
   run's truncated backprop and gradient clipping), then AdamW's step from that gradient minus its step
   from the same state with a zero gradient. Momentum and weight decay act identically in both and
   cancel; what remains is caused by the batch. It is computed in float64 from the state tensors with
   torch's AdamW formula (the tests check it against `torch.optim.AdamW` itself).
3. Equal size. Both updates are rescaled to one RMS over all parameters: by default the RMS of the
   shallower update, i.e. the size of the step the run takes at its fixed-phase depth, so the question is
   "the same size of step, pointed by a deeper forward pass: is it better?". `rms="deep"` uses the
   deeper update's RMS; a number fixes the RMS (the learning rate then plays no role).
4. Effect. Each rescaled update is added to the weights (restored exactly afterwards) and the model is
   scored at every serving depth (`diagnose_tasks`). bioS run: the evaluation prompts of the first
   `people` people of the dataset, mean NLL of the answer tokens (teacher forcing) and recalled bits
   per person (as `recall-curve` counts them). LM run: validation NLL, the mean next-token cross-entropy
   over the first `val_sequences` windows of the run's own corpus validation split (as `lm eval`).
   Advantage of the deeper update at serving depth k, positive = the deeper update helps more at k:
       nll:  (NLL change from the shallow update) - (NLL change from the deep update)
       bits: (bits change from the deep update) - (bits change from the shallow update)
   The depth average is the mean over the serving depths.
5. Batches. Steps 2-4 run on `batches` batches: those the run itself would train on next, its own stream
   at updates u, u+1, ... (a pure function of the run seed and update: bioS's sampler, or the LM
   loader's windows as `biosrecall lm train` reads them), none of which the diagnosed model has trained
   on. The mean over batches and a percentile bootstrap interval (batches resampled with replacement,
   seeded by `seed`) are reported per serving depth and for the depth average.
6. After uniform. For each n in `after_uniform` (ascending), the run is first continued for n updates
   from the checkpoint exactly as the trainer would (its planned depths, LR schedule, batches, loss,
   clipping and AdamW state: the continuation reproduces the run's own later weights), then diagnosed.
   From a fixed-first run's `switch` checkpoint these updates are its uniform phase; a checkpoint before
   the switch is refused for n > 0. Nothing is written back to the run folder.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from biosrecall.errors import BiosrecallError
from biosrecall.eval.diagnose_report import plot_diagnosis, summarize, write_diagnosis
from biosrecall.eval.diagnose_run import RunState, check_continuation, continue_run, load_run_state
from biosrecall.eval.diagnose_step import (
    adamw_batch_update,
    applied,
    batch_gradient,
    optimizer_params,
    rms,
    scale_to_rms,
)
from biosrecall.eval.diagnose_tasks import HIGHER_IS_BETTER, DiagnosisTask
from biosrecall.train.run_dir import versions

__all__ = ["DiagnosisResult", "continue_run", "diagnose_update", "load_run_state", "parse_depth_list"]

RMS_MODES = ("shallow", "deep")


@dataclass
class DiagnosisResult:
    """`summary`: mean advantage and bootstrap interval per (after_uniform, metric, serving depth; <NA> =
    depth average). `batches`: one row per (after_uniform, batch, serving depth). `options`: the JSON."""

    summary: pd.DataFrame
    batches: pd.DataFrame
    options: dict[str, Any]

    def figure(self):
        return plot_diagnosis(self.summary, self.options)

    def write(self, out_dir: str | Path) -> list[Path]:
        return write_diagnosis(self.summary, self.batches, self.options, out_dir)


def candidate_updates(state: RunState, rows, depths: Sequence[int], rms_target) -> dict[int, tuple]:
    """Depth -> (update rescaled to the common RMS, its raw RMS), one gradient per distinct depth."""
    params, lr = optimizer_params(state.optimizer), state.lr()
    raw = {}
    for depth in sorted(set(depths)):
        config = state.config
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


def diagnose_state(state: RunState, task: DiagnosisTask, options: dict, after: int, log) -> pd.DataFrame:
    """Per batch and serving depth: the metric changes of both rescaled candidates and their advantage."""
    serving = sorted(options["serving_depths"])
    params = optimizer_params(state.optimizer)
    base = task.score(state.model, serving)
    frames = []
    for batch in range(options["batches"]):
        candidates = candidate_updates(
            state, state.source.batch(state.update + batch), options["depths"], options["rms"]
        )
        scores = {}
        for depth, (update, _) in candidates.items():
            with applied(params, update):
                scores[depth] = task.score(state.model, serving)
        frame = _batch_frame(options["depths"], base, scores, candidates)
        frame.insert(0, "serving_depth", serving)
        frame.insert(0, "batch_update", state.update + batch)
        frame.insert(0, "batch", batch)
        frame.insert(0, "lr", state.lr())
        frame.insert(0, "update", state.update)
        frame.insert(0, "after_uniform", after)
        frames.append(frame)
        log(f"after {after}: batch {batch + 1}/{options['batches']} done")
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


def parse_depth_list(text: str, option: str = "--serving-depths", minimum: int = 1) -> list[int]:
    """ "1..16", "4,16", "1..8,16" -> sorted distinct integers >= minimum (one-line error otherwise)."""
    values = []
    for part in str(text).replace(" ", "").split(","):
        low, dots, high = part.partition("..")
        try:
            values += range(int(low), int(high) + 1) if dots else [int(part)]
        except ValueError:
            raise BiosrecallError(
                f"{option} takes integers or ranges such as 1..16 or 4,16 (got {text!r})"
            ) from None
    if not values or min(values) < minimum:
        raise BiosrecallError(f"{option} needs values >= {minimum} (got {text!r})")
    return sorted(set(values))


def check_options(
    depths, after_uniform, batches, serving_depths, people, val_sequences, rms_target, bootstrap, level
) -> dict:
    """Validate and normalise the diagnostic's options before any model is loaded (`people` and
    `val_sequences` may be None: the kind of run decides, see `diagnose_tasks`)."""
    depths = sorted(int(d) for d in depths)
    if len(depths) != 2 or depths[0] < 1:
        raise BiosrecallError(f"--depths takes two depths SHALLOW,DEEP >= 1, e.g. 4,16 (got {depths})")
    after = sorted({int(n) for n in after_uniform})
    serving = sorted({int(k) for k in serving_depths})
    if not after or after[0] < 0:
        raise BiosrecallError(f"--after-uniform takes update counts >= 0, e.g. 0,16 (got {after})")
    if not serving or serving[0] < 1:
        raise BiosrecallError(f"--serving-depths needs depths >= 1 (got {serving})")
    counts = [n for n in (people, val_sequences) if n is not None]
    if batches < 1 or min(counts, default=0) < 0 or bootstrap < 1 or not 0 < level < 1:
        raise BiosrecallError(
            "need --batches >= 1, --people >= 0, --val-sequences >= 0, --bootstrap >= 1 and 0 < --level < 1"
        )
    if rms_target not in RMS_MODES:
        try:
            rms_target = float(rms_target)
        except ValueError:
            rms_target = math.nan
        if not (math.isfinite(rms_target) and rms_target > 0):
            raise BiosrecallError("--rms takes shallow, deep or a positive number")
    return {
        "depths": depths,
        "after_uniform": after,
        "batches": int(batches),
        "serving_depths": serving,
        "rms": rms_target,
        "bootstrap": int(bootstrap),
        "level": float(level),
    }


def diagnose_update(
    run_dir,
    checkpoint: str | float = "switch",
    depths: Sequence[int] = (4, 16),
    after_uniform: Sequence[int] = (0,),
    batches: int = 8,
    serving_depths: Sequence[int] = range(1, 17),
    people: int | None = None,
    val_sequences: int | None = None,
    rms: str | float = "shallow",
    seed: int = 0,
    bootstrap: int = 2000,
    level: float = 0.95,
    device: str = "auto",
    data_dir=None,
    progress: Callable[[str], None] | None = None,
) -> DiagnosisResult:
    """Run the diagnostic of the module docstring. bioS runs: `people` (default 100, 0 = everyone); LM
    runs: `val_sequences` (default 64, 0 = all); `progress` gets status lines."""
    options = check_options(
        depths, after_uniform, batches, serving_depths, people, val_sequences, rms, bootstrap, level
    )
    log = progress or (lambda message: None)
    state, task = load_run_state(run_dir, checkpoint, device, data_dir, people, val_sequences)
    check_continuation(state, options["after_uniform"], checkpoint)
    start, frames, states = state.update, [], []
    for after in options["after_uniform"]:
        continued = state.depths[state.update : start + after].tolist()
        continue_run(state, start + after - state.update)
        log(f"diagnosing at update {state.update} ({after} updates after the checkpoint)")
        frames.append(diagnose_state(state, task, options, after, log))
        states.append(
            {"after_uniform": after, "update": state.update, "lr": state.lr(), "continued_depths": continued}
        )
    options.update(_record(state, task, run_dir, checkpoint, start, seed), states=states)
    raw = pd.concat(frames, ignore_index=True)
    return DiagnosisResult(summarize(raw, options["bootstrap"], options["level"], seed), raw, options)


def _record(state: RunState, task: DiagnosisTask, run_dir, checkpoint, start: int, seed: int) -> dict:
    """What the options JSON records besides the validated options: the run, the data and the rules."""
    return {
        "run_dir": str(run_dir),
        "checkpoint": str(checkpoint),
        "checkpoint_update": start,
        "planned_updates": state.planned,
        "schedule": state.config.schedule,
        "switch_update": state.switch_update,
        "task": task.name,
        "metrics": task.units,
        **task.record,
        "seed": int(seed),
        "device": str(next(state.model.parameters()).device),
        "versions": versions(),
    }
