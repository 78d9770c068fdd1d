"""Recall curves of training runs: evaluate checkpoints over serving depths, cache, and tabulate.

    table = recall_curves(["runs/fixed4", "runs/uniform"], checkpoints="0.45,final", max_depth=64)
    write_table(table, "recall-curve/recall_curve")   # biosrecall.outputs: .csv and .parquet

Checkpoints are chosen with the selector syntax of `biosrecall.train.run_folder` (default "fractions": every
budget fraction; "switch" and "all" add a fixed-first run's switch checkpoint, whose `fraction` is the
share of the budget it had spent). Every problem with the input (not a run folder, no checkpoints, a
bad selector or a missing checkpoint, the dataset missing or not the one the run was trained on, a bad
depth or threshold) is found before any model runs and raised as one `BiosrecallError`.

The dataset is `RunFolder.training_data` the checkpoint (recorded, or `data_dir` when passed);
its manifest hash must equal the checkpoint's.

Scoring and its cache are `biosrecall.eval.scoring`'s: each checkpoint's table (every depth
1..max_depth) is kept as `checkpoints/<label>/recall.parquet` with its evaluation key (max_depth,
threshold, people, the dataset's manifest_hash, the sha256 of the checkpoint's meta.json); a request is
served from the cache when everything matches and the cached max depth is at least the one asked for,
so re-plotting never re-evaluates, and needs no weights. `score_runs` adds the serving frontier
(`biosrecall.eval.serving`) to the same pass (what `recall-curve --exit` and `figure1` call).

A standard-transformer baseline (a bios-*-std preset: no recurrent block) has one serving depth. It is
scored there once, and its rows are repeated at every depth 1..max_depth (`served_exact`): its output
is the same whatever depth is asked for, so its curve is flat and compares with a looped run's at any K.

Table (one row per run, checkpoint, depth and attribute, "all" for the whole person): run, schedule,
checkpoint (its label: "0.45", "1.0", "switch"), fraction, update, flops, budget, depth, attribute,
recall, bits, exact, exact_template_0..4, ceiling_bits, chance_bits, threshold, manifest_hash.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from biosrecall.errors import BiosrecallError
from biosrecall.eval.gate import bind_gates
from biosrecall.eval.recall import DEFAULT_THRESHOLD, check_threshold
from biosrecall.eval.scoring import (
    Scoring,
    job_columns,
    load_checked_datasets,
    plan_jobs,
    score_checkpoints,
    scored_eval_set,
)
from biosrecall.eval.sweep import DEFAULT_BATCH_SIZE
from biosrecall.numbers import check_count
from biosrecall.train.distributed import resolve_device

TABLE_NAME = "recall_curve"
RUN_COLUMNS = ["run", "schedule", "checkpoint", "fraction", "update", "flops", "budget"]
DEFAULT_CHECKPOINTS = "fractions"


def recall_curves(
    run_dirs,
    checkpoints=DEFAULT_CHECKPOINTS,
    max_depth: int = 64,
    threshold: int = DEFAULT_THRESHOLD,
    **options,
) -> pd.DataFrame:
    """Long-format recall of the checkpoints `checkpoints` selects in each run (module doc); `options`
    are `score_runs`' (batch_size, device, data_dir, progress, refresh, people, workers, threads)."""
    return score_runs(run_dirs, checkpoints, max_depth=max_depth, threshold=threshold, **options).recall


@dataclass(frozen=True)
class RunScores:
    """What `recall-curve` computes for trained runs (`score_runs`)."""

    recall: pd.DataFrame | None
    """The long recall table (module doc); None when it was not asked for."""
    frontier: pd.DataFrame | None
    """The frontier table (`biosrecall.eval.serving`) when criteria were given."""
    gap: pd.DataFrame | None
    """Per-token against whole-query exit (`biosrecall.eval.token_exit`) when asked for."""
    skipped: tuple[str, ...] = ()
    """With `applicable`: "<run> @ <checkpoint>: <criterion>: why its recipe cannot serve it", per
    criterion left out."""


def score_runs(
    run_dirs,
    checkpoints,
    criteria=(),
    *,
    recall: bool = True,
    per_token: bool = False,
    max_depth: int = 64,
    threshold: int = DEFAULT_THRESHOLD,
    batch_size: int = DEFAULT_BATCH_SIZE,
    device: str = "auto",
    data_dir=None,
    refresh: bool = False,
    people: int | None = None,
    progress: bool | None = None,
    served=None,
    workers: int = 1,
    threads: int = 1,
    applicable: bool = False,
) -> RunScores:
    """Recall (when `recall`), and with `criteria` the serving frontier (and with `per_token` the
    per-token gap), of the selected checkpoints of each run; `served` (run folders) limits the frontier
    to those runs' final checkpoints (what `figure1` serves). The checkpoints are planned, their gates
    bound and their datasets loaded once, all before the first model runs; each checkpoint gets one
    all-depth pass for both tables (`biosrecall.eval.scoring`; on the CPU `workers` at a time in
    processes of `threads` threads), and per-token decoding only when asked. With `applicable` each
    checkpoint is scored only on the criteria its recipe can serve (`eval.gate.servable_criteria`), the
    others named in `skipped`, instead of refusing the call.

    `people` scores only the first N people (ids 0..N-1): bits per person is a mean over people, so
    a few hundred estimate it well at a fraction of the cost of a sweep to K = 64 over everyone.
    `workers` and `threads` give the same numbers as one checkpoint at a time here; `progress` None
    shows a bar per checkpoint only when stderr is a terminal, and `refresh` scores again even where
    a cache is current."""
    check_at_least_one(max_depth=max_depth, threshold=threshold, batch_size=batch_size, people=people)
    device = resolve_device(str(device))
    scoring = Scoring(max_depth, threshold, people, batch_size, device, progress, refresh, recall, per_token)
    criteria = list(criteria)
    if per_token and not criteria:
        raise BiosrecallError("--per-token needs --exit: the criteria to decide per token")
    if applicable and not criteria:
        raise BiosrecallError("--applicable-exits needs --exit: the criteria to choose from")
    jobs = plan_jobs([Path(d) for d in run_dirs], checkpoints, data_dir)
    finals = None if served is None else _finals(served, data_dir)
    resolved, skipped = {}, []
    # Every gate bound (or refused) before the first model runs; each is read and hashed once here.
    for index, job in enumerate(jobs):
        if criteria and (finals is None or job.path.resolve() in finals):
            kept, left_out = bind_gates(criteria, job.run_dir, job.label, job.path, max_depth, applicable)
            skipped += [f"{job.run} @ {job.label}: {line}" for line in left_out]
            if kept:
                resolved[index] = kept
    datasets = load_checked_datasets(jobs)
    for dataset in datasets.values():  # a threshold above the templates every scored fact has
        check_threshold(scored_eval_set(dataset, scoring.people), scoring.threshold)
    scores = score_checkpoints(jobs, datasets, scoring, criteria=resolved, workers=workers, threads=threads)
    table = _labelled(jobs, [score.recall for score in scores], progress=True) if recall else None
    if not resolved:
        return RunScores(table, None, None, tuple(skipped))
    served = [jobs[index] for index in resolved]
    frontier = _labelled(served, [scores[index].exits for index in resolved])
    gap = _labelled(served, [scores[index].gap for index in resolved]) if per_token else None
    return RunScores(table, frontier, gap, tuple(skipped))


def _labelled(jobs, tables, progress: bool = False) -> pd.DataFrame:
    """The jobs' `tables` as one, each table's rows under its job's label columns (`job_columns`)."""
    parts = []
    for job, rows in zip(jobs, tables, strict=True):
        labels = pd.DataFrame([job_columns(job, progress)] * len(rows))
        parts.append(pd.concat([labels, rows.reset_index(drop=True)], axis=1))
    return pd.concat(parts, ignore_index=True)


def _finals(run_dirs, data_dir) -> set[Path]:
    """The final checkpoints of `run_dirs`, resolved (none for no runs)."""
    run_dirs = [Path(d) for d in run_dirs]
    return {job.path.resolve() for job in plan_jobs(run_dirs, "final", data_dir)} if run_dirs else set()


def check_at_least_one(**options: int | None) -> None:
    """Refuse an option (named as its flag) that is not a count of at least 1 (`numbers.check_count`, the
    rule of every count); None is an option left unset."""
    for name, value in options.items():
        if value is not None:
            check_count(value, f"--{name.replace('_', '-')}")


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
