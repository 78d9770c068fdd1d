"""Recall curves of training runs: evaluate checkpoints over serving depths, cache, and tabulate.

    table = recall_curves(["runs/fixed4", "runs/uniform"], checkpoints="0.45,final", max_depth=64)
    write_table(table, "recall-curve/recall_curve")   # biosrecall.outputs: .csv and .parquet

Checkpoints are chosen with the selector syntax of `biosrecall.runs` (default "fractions": every
budget fraction; "switch" and "all" add a fixed-first run's switch checkpoint, whose `fraction` is the
share of the budget it had spent). Every problem with the input (not a run folder, no checkpoints, a
bad selector or a missing checkpoint, the dataset missing or not the one the run was trained on, a bad
depth or threshold) is found before any model runs and raised as one `BiosrecallError`.

The dataset is `biosrecall.runs.training_data_of` the checkpoint (recorded, or `data_dir` when passed);
its manifest hash must equal the checkpoint's.

Cache (`biosrecall.eval.table_cache`): each checkpoint's table (every depth 1..max_depth) is kept as
`checkpoints/<label>/recall.parquet` with its evaluation key: cache format, max_depth, threshold,
people (None = everyone), the dataset's manifest_hash and the sha256 of the checkpoint's meta.json. A
request is served from the cache when everything matches and the cached max depth is at least the one
asked for, so re-plotting never re-evaluates, and needs no weights.

A standard-transformer baseline (a bios-*-std preset: no recurrent block) has one serving depth. It is
scored there once, and its rows are repeated at every depth 1..max_depth (`served_exact`): its output
is the same whatever depth is asked for, so its curve is flat and compares with a looped run's at any K.

Table (one row per run, checkpoint, depth and attribute, "all" for the whole person): run, schedule,
checkpoint (its label: "0.45", "1.0", "switch"), fraction, update, flops, budget, depth, attribute,
recall, bits, exact, exact_template_0..4, ceiling_bits, chance_bits, threshold, manifest_hash.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from biosrecall import runs
from biosrecall.errors import BiosrecallError
from biosrecall.eval.recall import DEFAULT_THRESHOLD, check_threshold, recall_table
from biosrecall.eval.sweep import DEFAULT_BATCH_SIZE, exact_by_depth
from biosrecall.eval.table_cache import METADATA_KEY, checkpoint_key, read_cached, write_cached
from biosrecall.runs import load_checkpoint, read_meta
from biosrecall.train.distributed import resolve_device
from biosrecall.train.layout import RECALL_CACHE_FILE, recall_cache_file

CACHE_FILE = RECALL_CACHE_FILE  # still imported from here (`biosrecall.hf.card`, the tests)
CACHE_FORMAT = 1
CACHE_METADATA_KEY = METADATA_KEY  # still imported from here (`biosrecall.hf.card`)
TABLE_NAME = "recall_curve"
RUN_COLUMNS = ["run", "schedule", "checkpoint", "fraction", "update", "flops", "budget"]
DEFAULT_CHECKPOINTS = "fractions"


@dataclass(frozen=True)
class CheckpointJob:
    """One checkpoint to evaluate, with everything needed to label its rows."""

    run: str
    run_dir: Path
    label: str
    path: Path
    meta: dict
    dataset_path: Path


def run_labels(run_dirs) -> list[str]:
    """Folder names, or the paths as given where two runs share a name."""
    names = [Path(d).name or str(d) for d in run_dirs]
    return [name if names.count(name) == 1 else str(d) for name, d in zip(names, run_dirs, strict=True)]


def plan_jobs(
    run_dirs, checkpoints=DEFAULT_CHECKPOINTS, data_dir: str | Path | None = None
) -> list[CheckpointJob]:
    """Every checkpoint to evaluate, validated (folders, selector, dataset location)."""
    if not run_dirs:
        raise BiosrecallError("no run folder given")
    jobs = []
    for name, run_dir in zip(run_labels(run_dirs), run_dirs, strict=True):
        for label, path in runs.select_checkpoints(run_dir, checkpoints).items():
            meta = read_meta(path)
            dataset_path = runs.training_data_of(run_dir, meta, data_dir)
            jobs.append(CheckpointJob(name, Path(run_dir), label, path, meta, dataset_path))
    return jobs


def load_checked_datasets(jobs: list[CheckpointJob]) -> dict[Path, object]:
    """Load each dataset once and check it is the one every checkpoint using it was trained on."""
    from biosrecall.bios import load_dataset

    datasets = {}
    for job in jobs:
        if job.dataset_path not in datasets:
            datasets[job.dataset_path] = load_dataset(job.dataset_path)
        runs.check_training_data(
            job.run_dir, job.meta, job.dataset_path, datasets[job.dataset_path].manifest_hash
        )
    return datasets


def cache_key(
    checkpoint: Path, manifest_hash: str, max_depth: int, threshold: int, people: int | None = None
) -> dict:
    return checkpoint_key(
        checkpoint,
        format=CACHE_FORMAT,
        people=people,
        max_depth=int(max_depth),
        threshold=int(threshold),
        manifest_hash=manifest_hash,
    )


def read_cache(checkpoint: Path, key: dict) -> pd.DataFrame | None:
    """The cached table cut to `key["max_depth"]`, or None when absent, unreadable or stale."""
    table = read_cached(recall_cache_file(checkpoint), key, at_least=("max_depth",))
    if table is None:
        return None
    return table[table["depth"] <= key["max_depth"]].reset_index(drop=True)


def write_cache(checkpoint: Path, key: dict, table: pd.DataFrame) -> None:
    write_cached(recall_cache_file(checkpoint), key, table)


def evaluate_checkpoint(
    job: CheckpointJob,
    dataset,
    eval_set,
    max_depth: int,
    threshold: int = DEFAULT_THRESHOLD,
    *,
    batch_size: int = DEFAULT_BATCH_SIZE,
    device: str | torch.device = "auto",
    progress: bool | None = None,
    refresh: bool = False,
    people: int | None = None,
) -> pd.DataFrame:
    """The checkpoint's recall table over depths 1..max_depth, from the cache when it is current.

    `eval_set` is `dataset.eval_set()` (restricted to the first `people` people when given), built
    once by the caller and shared by its checkpoints.
    """
    key = cache_key(job.path, dataset.manifest_hash, max_depth, threshold, people)
    table = None if refresh else read_cache(job.path, key)
    if table is None:
        model, _ = load_checkpoint(job.path, device=resolve_device(str(device)))
        exact = served_exact(
            model,
            eval_set,
            max_depth,
            batch_size=batch_size,
            progress=progress,
            label=f"{job.run} @ {job.label}",
        )
        chance = dataset.manifest.get("chance_bits_per_attribute")
        table = recall_table(exact, eval_set, dataset.pool_sizes, threshold, chance_bits=chance)
        table["manifest_hash"] = dataset.manifest_hash
        write_cache(job.path, key, table)
    return _label(table, job)


def served_exact(model, eval_set, max_depth: int, **options) -> np.ndarray:
    """bool [max_depth, M], as `exact_by_depth`. A standard transformer (no recurrent block,
    `ModelConfig.recurrent` False) computes the same function at every depth, so it is scored once, at
    its one depth, and that row stands for each depth asked: a flat curve, at the cost of one. A model
    without a `config` (a stand-in in tests) is taken as recurrent."""
    if getattr(getattr(model, "config", None), "recurrent", True):
        return exact_by_depth(model, eval_set, max_depth, **options)
    once = exact_by_depth(model, eval_set, 1, **options)
    return np.repeat(once, max_depth, axis=0)


def _label(table: pd.DataFrame, job: CheckpointJob) -> pd.DataFrame:
    labels = {
        "run": job.run,
        "schedule": str(job.meta.get("schedule", "")),
        "checkpoint": job.label,
        "fraction": _fraction(job),
        "update": int(job.meta.get("update", -1)),
        "flops": float(job.meta.get("flops", math.nan)),
        "budget": float(job.meta.get("budget", math.nan)),
    }
    front = pd.DataFrame({name: [value] * len(table) for name, value in labels.items()})
    return pd.concat([front, table.reset_index(drop=True)], axis=1)


def _fraction(job: CheckpointJob) -> float:
    """The checkpoint's budget fraction; for the switch checkpoint, the share of the budget spent."""
    fraction = runs.fraction_of(job.label)
    if fraction is not None:
        return fraction
    return float(job.meta.get("flops", math.nan)) / float(job.meta.get("budget", math.nan))


def recall_curves(
    run_dirs,
    checkpoints=DEFAULT_CHECKPOINTS,
    max_depth: int = 64,
    threshold: int = DEFAULT_THRESHOLD,
    *,
    batch_size: int = DEFAULT_BATCH_SIZE,
    device: str = "auto",
    data_dir: str | Path | None = None,
    progress: bool | None = None,
    refresh: bool = False,
    people: int | None = None,
    workers: int = 1,
    threads: int = 1,
) -> pd.DataFrame:
    """Long-format recall of the checkpoints `checkpoints` selects in each run; see the module doc.

    `people` scores only the first N people (ids 0..N-1): bits per person is a mean over people, so
    a few hundred estimate it well at a fraction of the cost of a sweep to K = 64 over everyone.
    On the CPU, checkpoints without a current cache are scored `workers` at a time in processes of
    `threads` threads (`biosrecall.eval.parallel`), with the same numbers as one at a time here.
    """
    if max_depth < 1:
        raise BiosrecallError(f"--max-depth must be at least 1 (got {max_depth})")
    if threshold < 1:
        raise BiosrecallError(f"--threshold must be at least 1 (got {threshold})")
    if batch_size < 1:
        raise BiosrecallError(f"--batch-size must be at least 1 (got {batch_size})")
    device = resolve_device(str(device))
    jobs = plan_jobs([Path(d) for d in run_dirs], checkpoints, data_dir)
    datasets = load_checked_datasets(jobs)
    if people is not None and people < 1:
        raise BiosrecallError(f"--people must be at least 1 (got {people})")
    eval_sets = {path: _eval_set(dataset, people) for path, dataset in datasets.items()}
    for eval_set in eval_sets.values():
        check_threshold(eval_set, threshold)
    options = {"batch_size": batch_size, "device": device, "progress": progress, "refresh": refresh,
               "people": people}  # fmt: skip
    scored = {}
    if workers > 1 and device.type == "cpu":
        scored = _score_in_processes(jobs, datasets, (max_depth, threshold), options, workers, threads)
    tables = [
        scored[index] if index in scored else evaluate_checkpoint(
            job, datasets[job.dataset_path], eval_sets[job.dataset_path], max_depth, threshold, **options
        )
        for index, job in enumerate(jobs)
    ]  # fmt: skip
    return pd.concat(tables, ignore_index=True)


def _score_in_processes(jobs, datasets, depth_and_threshold, options, workers: int, threads: int):
    """{index of job: its table} for the jobs without a current cache, scored `workers` at a time in
    processes of their own (each loads its datasets; no progress bars, which would interleave)."""
    from biosrecall.eval.parallel import map_in_processes

    max_depth, threshold = depth_and_threshold
    pending = [
        index for index, job in enumerate(jobs)
        if options["refresh"] or read_cache(job.path, cache_key(
            job.path, datasets[job.dataset_path].manifest_hash, max_depth, threshold, options["people"]
        )) is None
    ]  # fmt: skip
    items = [(jobs[index], max_depth, threshold, {**options, "progress": False}) for index in pending]
    return dict(zip(pending, map_in_processes(_score_job, items, workers, threads), strict=True))


def _score_job(item) -> pd.DataFrame:
    """`evaluate_checkpoint` of one job in a scoring process."""
    job, max_depth, threshold, options = item
    dataset = cached_dataset(job.dataset_path)
    eval_set = _eval_set(dataset, options["people"])
    return evaluate_checkpoint(job, dataset, eval_set, max_depth, threshold, **options)


def cached_dataset(path: Path):
    """A dataset loaded once per process while its manifest is unchanged (a scoring process scores
    several checkpoints of one dataset)."""
    from biosrecall.bios.dataset import MANIFEST

    path = Path(path)
    return _load_dataset(path, (path / MANIFEST).stat().st_mtime_ns)


@functools.lru_cache(maxsize=4)
def _load_dataset(path: Path, manifest_stamp: int):
    from biosrecall.bios import load_dataset

    return load_dataset(path)


def _eval_set(dataset, people: int | None):
    """Evaluation rows of the first `people` people, or of everyone."""
    if people is None or people >= dataset.num_people:
        return dataset.eval_set()
    return dataset.eval_set(np.arange(people))


def summary_table(table: pd.DataFrame, depths=(1, 4, 16, 64), training_depth: int = 16) -> pd.DataFrame:
    """Recalled bits per person, one row per run and fraction: at a few depths, then the mean over the
    training range (K <= training_depth), the mean beyond it and the worst depth. The means and the
    minimum matter because fixed-depth training can leave a curve that cycles with K, and a few chosen
    depths may all land on its peaks."""
    whole = table[table["attribute"] == "all"]
    keys = ["run", "schedule", "fraction"]
    wide = whole[whole["depth"].isin(depths)].pivot_table(
        index=keys, columns="depth", values="bits", sort=False
    )
    wide.columns = [f"K={depth}" for depth in wide.columns]
    inside = whole["depth"] <= training_depth
    wide[f"mean K<={training_depth}"] = whole[inside].groupby(keys, sort=False)["bits"].mean()
    if not inside.all():
        wide[f"mean K>{training_depth}"] = whole[~inside].groupby(keys, sort=False)["bits"].mean()
    wide["min"] = whole.groupby(keys, sort=False)["bits"].min()
    return wide.reset_index()
