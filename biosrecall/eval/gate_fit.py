"""`biosrecall gate train`: fit, calibrate and store the learned exit gate of a run's checkpoints
(what the gate is and why: `biosrecall.eval.gate`; its data and bound: `biosrecall.eval.gate_data`).

    written = fit_gates("runs/ff", "final", max_depth=64, seed=0, confidence=0.95)
    # -> [Path("runs/ff/gates/1.0")], each holding gate.json and calibration.npz
    fit_gates("runs/lm-ff", tasks={**GATE_TASKS, "lm": lm_gate})  # biosrecall.lm.gate: an LM run's gate

What a query is differs by task: a bioS run's are the dataset's prompts (`bios_gate`, here); a
language-model run's are positions of its shards' windows (`biosrecall.lm.gate.lm_gate`, beside the LM
code it reads, so that `eval/` never imports `lm/`). The planning, the checks, the lock, the
fitting pipeline (`fit_from_traces`: head, reference depth, calibration) and the writing are shared.
The head is trained here (`train_head`, Adam on BCE for `FIT_STEPS` steps) on a `Trace` of the fitting
queries (`trace_queries`); what it is, its target and its cost are `biosrecall.eval.gate`'s.

Everything is checked (the selector, the dataset on disk and its hash, the numbers) before the first
model loads, and each gate folder is written atomically, so a refusal or a crash writes nothing.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import torch

from biosrecall.atomic import atomic_directory
from biosrecall.bios import load_dataset
from biosrecall.bios.dataset import MANIFEST
from biosrecall.errors import BiosrecallError
from biosrecall.eval.exits import DEFAULT_SWEEPS, check_max_depth
from biosrecall.eval.gate import GateHead, Trace, batch_states, model_hash
from biosrecall.eval.gate_data import (
    CALIBRATION_SHARE,
    MAX_FIT_QUERIES,
    calibrate,
    gate_queries,
    split_people,
)
from biosrecall.eval.scoring import CheckpointJob, plan_jobs
from biosrecall.eval.sweep import DEFAULT_BATCH_SIZE, answer_batches, exact_rows, reduce_rows
from biosrecall.files import file_sha256
from biosrecall.locking import output_lock
from biosrecall.numbers import check_number, check_seed, rates
from biosrecall.train.checkpoint_files import MODEL_FILE, load_checkpoint
from biosrecall.train.distributed import resolve_device
from biosrecall.train.run_folder import GATE_CALIBRATION_FILE, GATE_RECORD_FILE, RunFolder, versions

FORMAT = "biosrecall-exit-gate-1"
TARGET = "the answer at depth k equals the answer at the reference depth (the best fixed depth)"
BOUND = "Learn-then-Test fixed-sequence testing with binomial p-values, one query per fact"
DEFAULT_CONFIDENCE = 0.95
FIT_STEPS, LEARNING_RATE = 300, 0.05

GateFit = Callable[[Any, dict, int], tuple[dict, dict]]
"""(model, settings, batch size) -> (record without the checkpoint's hashes, calibration arrays)."""
GateTask = Callable[[Path, dict, Path], GateFit]
"""How one kind of run (its `task` name in meta.json) is fitted: (run folder, checkpoint meta, data
folder) -> the `GateFit` of its checkpoints, once the data is checked against the run."""


def trace_queries(model, queries, depth: int, batch_size: int = DEFAULT_BATCH_SIZE) -> Trace:
    """The `Trace` of `queries` (an `EvalSet`) at depths 1..depth, one all-depth pass per batch."""
    states, argmax, query_of = [], [], []
    exact = np.zeros((depth, len(queries)), dtype=bool)
    for batch in answer_batches(model, queries, batch_size):
        seen, logits = batch_states(model, batch, depth, readouts=True)
        states.append(torch.stack(seen).cpu())
        argmax.append(torch.stack([out.argmax(-1) for out in logits]).cpu())
        exact[:, batch.rows] = torch.stack([exact_rows(out, batch) for out in logits]).cpu().numpy()
        query_of.append(torch.as_tensor(batch.rows)[batch.row_of_target.cpu()])
    return Trace(torch.cat(states, 1), torch.cat(argmax, 1), exact, torch.cat(query_of))


def query_logits(head: GateHead, states: torch.Tensor, query_of: torch.Tensor, queries: int) -> np.ndarray:
    """[D, M]: per depth, the smallest gate logit over each query's positions (states [D, P, d])."""
    depths = torch.arange(1, len(states) + 1)[:, None]
    with torch.inference_mode():
        return reduce_rows(head(states, depths).double(), query_of, queries, "amin").cpu().numpy()


def reference_depth(exact: np.ndarray) -> int:
    """The best fixed depth of `exact` [D, M] (row k - 1 is depth k): the shallowest with most exact."""
    return int(np.argmax(np.asarray(exact).mean(axis=1))) + 1


def train_head(trace: Trace, reference: int, seed: int) -> tuple[GateHead, dict]:
    """Fit the head on depths 1 .. reference - 1 to `TARGET` (why that target: `biosrecall.eval.gate`);
    returns it and a summary."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        head = GateHead(trace.states.shape[-1], reference - 1)
    if reference == 1:
        return head.eval(), {"positions": 0, "target_rate": float("nan"), "loss": float("nan")}
    depths = reference - 1
    inputs = trace.states[:depths].reshape(-1, trace.states.shape[-1])
    depth_of = torch.arange(1, depths + 1).repeat_interleave(trace.states.shape[1])
    target = (trace.argmax[:depths] == trace.argmax[reference - 1]).reshape(-1).float()
    optimizer = torch.optim.Adam(head.parameters(), lr=LEARNING_RATE)
    for _ in range(FIT_STEPS):
        optimizer.zero_grad()
        loss = torch.nn.functional.binary_cross_entropy_with_logits(head(inputs, depth_of), target)
        loss.backward()
        optimizer.step()
    summary = {
        "positions": int(inputs.shape[0]),
        "target_rate": float(target.mean()),
        "loss": float(loss.detach()),
    }
    return head.eval(), summary


def task_name(meta: dict) -> str:
    """The task a checkpoint was trained on: "bios" unless its meta.json names another."""
    return (meta.get("task") or {}).get("name") or "bios"


def _plan(run_dir: Path, checkpoints, data_dir) -> list[CheckpointJob]:
    """Every selected checkpoint (`eval.scoring.plan_jobs`), refused when it has no recurrent block."""
    jobs = plan_jobs([run_dir], checkpoints, data_dir)
    if any(job.meta["model_config"].get("n_block", 1) == 0 for job in jobs):
        raise BiosrecallError(
            f"{run_dir} is a standard transformer (no recurrent block): it has one depth, so there "
            "is no exit for a gate to learn"
        )
    return jobs


def fit_gates(
    run_dir,
    checkpoints="final",
    *,
    max_depth: int = 64,
    seed: int = 0,
    confidence: float = DEFAULT_CONFIDENCE,
    batch_size: int = DEFAULT_BATCH_SIZE,
    device: str = "auto",
    data_dir=None,
    tasks: Mapping[str, GateTask] | None = None,
) -> list[Path]:
    """Fit and store the gate of each selected checkpoint of `run_dir`; returns the gate folders.
    `tasks` maps a run's task name to how it is fitted (default `GATE_TASKS`: bioS runs only)."""
    tasks = GATE_TASKS if tasks is None else tasks
    run_dir, max_depth, seed = Path(run_dir), check_max_depth(max_depth), check_seed(seed)
    check_number("--confidence", confidence, rates(0, 1, low_open=True, high_open=True))
    planned = _plan(run_dir, checkpoints, data_dir)
    fits = _check_data(run_dir, planned, tasks)
    # A bioS dataset and an LM shard folder alike are identified by their manifest's sha256.
    data_hashes = {data_path: file_sha256(data_path / MANIFEST) for data_path in fits}
    settings = {"seed": seed, "confidence": float(confidence), "max_depth": max_depth}
    device, written = resolve_device(str(device)), []
    with output_lock(run_dir, clean=False):
        for job in planned:
            model, _ = load_checkpoint(job.path, device=device)
            record, arrays = fits[job.dataset_path](model, settings, batch_size)
            record.update(
                checkpoint=job.label,
                checkpoint_hash=file_sha256(job.path / MODEL_FILE),
                model_hash=model_hash(job.meta),
                data_hash=data_hashes[job.dataset_path],
            )
            written.append(write_gate(RunFolder(run_dir).gate_dir(job.label), record, arrays))
    return written


def _check_data(run_dir: Path, planned, tasks: Mapping[str, GateTask]) -> dict[Path, GateFit]:
    """Per data folder, how its checkpoints are fitted, once its task checked it against the run."""
    found = {}
    for job in planned:
        name, data_path = task_name(job.meta), job.dataset_path
        if name not in tasks:
            raise BiosrecallError(
                f"{run_dir} is a {name} run: this command fits gates of {' and '.join(tasks)} runs only"
            )
        if data_path not in found:
            found[data_path] = tasks[name](run_dir, job.meta, data_path)
    return found


def bios_gate(run_dir: Path, meta: dict, data_path: Path) -> GateFit:
    """The bioS task (`GateTask`): the dataset, checked to be the one the run trained on, fitted by
    `fit_gate`."""
    dataset = load_dataset(data_path)
    RunFolder(run_dir).check_training_data(meta, data_path, dataset.manifest_hash)
    return lambda model, settings, batch_size: fit_gate(model, dataset, settings, batch_size)


def fit_gate(model, dataset, settings: dict, batch_size: int = DEFAULT_BATCH_SIZE) -> tuple[dict, dict]:
    """(record without the checkpoint's hashes, calibration arrays) of a gate fitted on `model`;
    `settings`: seed, confidence, max_depth and optionally reference (else the best fixed depth)."""
    seed, max_depth = settings["seed"], settings["max_depth"]
    fit_people, held_people = split_people(dataset.num_people, seed)
    fit = gate_queries(dataset, fit_people, seed=seed, limit=MAX_FIT_QUERIES)
    held = gate_queries(dataset, held_people, one_per_fact=True, seed=seed)
    record, arrays = fit_from_traces(
        lambda: trace_queries(model, fit, max_depth, batch_size),
        lambda reference: trace_queries(model, held, reference, batch_size),
        settings,
    )
    record["fit"].update(people=len(fit_people), queries=len(fit))
    record["calibration"].update(people=len(held_people))
    return record, arrays


def fit_from_traces(
    trace_fit: Callable[[], Trace], trace_held: Callable[[int], Trace], settings: dict
) -> tuple[dict, dict]:
    """The one fitting pipeline of every task: train the head on `trace_fit()`, the fitting queries
    traced to max_depth, then calibrate it on `trace_held(reference)`, the held-out queries traced to
    the reference depth. Returns (the gate.json record without the checkpoint's hashes and the task's
    own counts, calibration arrays); `settings` as `fit_gate`'s."""
    trace = trace_fit()
    # A given reference (settings["reference"], for experiments and tests) replaces the best fixed depth.
    reference = min(settings.get("reference") or reference_depth(trace.exact), settings["max_depth"])
    head, summary = train_head(trace, reference, settings["seed"])
    del trace  # the fitting states are the largest thing held; the calibration pass needs room
    held = trace_held(reference)
    queries = held.exact.shape[1]
    scores = query_logits(head, held.states[: reference - 1], held.query_of, queries)
    alpha = round(1 - settings["confidence"], 12)
    # Every record calibrates the grid a bare `gate` sweeps; any other delta is calibrated at use.
    calibrations = [
        calibrate(scores, held.exact, reference, delta, alpha) for delta in DEFAULT_SWEEPS["gate"]
    ]
    clean = lambda value: None if isinstance(value, float) and math.isnan(value) else value  # noqa: E731
    record = {
        "format": FORMAT,
        "seed": settings["seed"],
        "confidence": settings["confidence"],
        "max_depth": settings["max_depth"],
        "reference_depth": reference,
        "target": TARGET,
        "bound": BOUND,
        "fit": {
            "steps": FIT_STEPS,
            "learning_rate": LEARNING_RATE,
            **{k: clean(v) for k, v in summary.items()},
        },
        "calibration": {
            "share": CALIBRATION_SHARE,
            "deltas": [asdict(c) for c in calibrations],
            "queries": queries,
            "reference_exact": float(held.exact[reference - 1].mean()),
        },
        "weights": head.weights(),
        "versions": versions(),
    }
    return record, {"scores": scores, "exact": held.exact}


def write_gate(folder: Path, record: dict, arrays: dict) -> Path:
    """Write one gate folder (record and calibration arrays) atomically, replacing an older one."""
    with atomic_directory(folder, overwrite=True) as tmp:
        (tmp / GATE_RECORD_FILE).write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
        np.savez(tmp / GATE_CALIBRATION_FILE, **arrays)
    return folder


GATE_TASKS: Mapping[str, GateTask] = {"bios": bios_gate}
"""The tasks `fit_gates` fits by default; `biosrecall gate train` adds `biosrecall.lm.gate.lm_gate`."""
