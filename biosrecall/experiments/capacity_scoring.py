"""Scoring a capacity study: each run's final checkpoint as stored bits per serving depth, labelled.

    from biosrecall.experiments.capacity_scoring import score_runs
    per_run = score_runs(Path("runs/capacity/runs"), runs, options, executor)

The capacity study's `evaluate` (`biosrecall.experiments.capacity`): the engine calls it once the
runs are trained, and its table is the study's per-run table. Scoring runs the executor's worker
count of checkpoints at a time on the CPU (`biosrecall.eval.parallel`), and each checkpoint's
stored-bits table is cached next to it (`biosrecall.eval.table_cache`), so a rerun, or an archive
without weights, is re-tabulated without loading a model.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pandas as pd

from biosrecall.eval.parallel import map_in_processes
from biosrecall.eval.scoring import cached_dataset
from biosrecall.eval.stored_bits import stored_bits_table
from biosrecall.eval.table_cache import checkpoint_key, read_cached, write_cached
from biosrecall.files import read_json_object
from biosrecall.train.checkpoint_files import load_checkpoint, read_meta
from biosrecall.train.distributed import resolve_device
from biosrecall.train.run_folder import RunFolder, stored_bits_cache_file

STORED_BITS_CACHE_FORMAT = 1  # bumped when the cached stored-bits table changes what it holds


def score_runs(runs_dir: Path, runs: list, options, executor) -> pd.DataFrame:
    """One row per run (`capacity.capacity_runs`, folders under `runs_dir`) and serving depth: its
    final checkpoint's stored bits, labelled, `executor`'s workers at a time on the CPU
    (`eval.parallel`) on `options.device`, cached so an archive without weights is re-tabulated."""
    from biosrecall.experiments.study_engine import executor_slots

    device = resolve_device(str(options.device))
    items = [
        (runs_dir / run.name, run, run.task["data"], options, device) for run in runs
    ]  # folder first: errors name it
    workers = executor_slots(executor) if device.type == "cpu" else 1
    return pd.concat(map_in_processes(_score, items, workers, executor.threads), ignore_index=True)


def _score(item) -> Any:
    """The final checkpoint's stored bits (a baseline at its one depth), with the run's labels and
    what it cost: mean exposures, updates and training FLOPs."""
    run_dir, run, data_dir, options, device = item
    dataset = cached_dataset(data_dir)
    folder = RunFolder(run_dir)
    checkpoint = folder.fraction_checkpoints()[1.0]
    meta = read_meta(checkpoint)
    folder.check_training_data(meta, dataset.path, dataset.manifest_hash)
    table = _stored_bits(checkpoint, dataset, options.depths, device)
    plan = read_json_object(folder.config_file, "run config", required=("plan",))["plan"]
    labels = {
        "people": run.labels["people"], "name": run.labels["name"], "kind": run.labels["kind"],
        "schedule": run.config.schedule, "model_preset": run.task["preset"], "seed": run.config.seed,
    }  # fmt: skip
    costs = {
        "exposures": float(options.exposures),
        "exposures_mean": float(plan.get("exposures", {}).get("mean", math.nan)),
        "updates": int(meta["update"]),
        "train_flops": float(meta.get("flops", math.nan)),
        "run": run.name,
    }
    front = pd.DataFrame({key: [value] * len(table) for key, value in labels.items()})
    return pd.concat([front, table.drop(columns=["people"]).assign(**costs)], axis=1)


def _stored_bits(checkpoint: Path, dataset, depths, device):
    """`stored_bits_table` at `depths` (a baseline's at 1), from its cache (`eval.table_cache`)."""
    key = checkpoint_key(
        checkpoint, format=STORED_BITS_CACHE_FORMAT, depths=list(depths), manifest_hash=dataset.manifest_hash
    )
    table = read_cached(stored_bits_cache_file(checkpoint), key)
    if table is None:
        model, _ = load_checkpoint(checkpoint, device=device)
        depths = depths if model.config.recurrent else (1,)
        table = stored_bits_table(model, dataset.eval_set(), dataset.pool_sizes, depths=depths, device=device)
        write_cached(stored_bits_cache_file(checkpoint), key, table)
    return table
