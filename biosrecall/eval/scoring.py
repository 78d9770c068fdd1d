"""Scoring checkpoints at every serving depth: which checkpoints, their datasets, one pass, two caches.

    jobs = plan_jobs(["runs/fixed4", "runs/uniform"], "0.45,final")   # every problem found here
    datasets = load_checked_datasets(jobs)                             # each loaded once, hash-checked
    scores = score_checkpoints(jobs, datasets, Scoring(max_depth=64), criteria={job: [...]})
    scores[0].recall, scores[0].exits                                  # per job, in order

The recall curves (`biosrecall.eval.curves`) and the serving frontier (`biosrecall.eval.serving`)
are two tables of the same forward pass: an item's exact flag at every depth, and, for the frontier,
its per-query KL, entropy and argmax stability (and the recurrent state's latent and accel) at every
depth. So a checkpoint asked for both is run once to `max_depth` (`answer_stats_by_depth`, whose
exact flags are those of `exact_by_depth`), and both tables are written from that pass. A checkpoint
asked for recall only runs the cheaper flags-only pass (`exact_by_depth`). With `Scoring.per_token`
the same visit, on the model already loaded, decides each criterion per answer token as well
(`biosrecall.eval.token_exit.gap_rows`).

Each table is cached in its checkpoint folder (`biosrecall.eval.table_cache`): `recall.parquet` under
the depth, threshold, people and dataset it was scored with (a deeper table serves a shallower
request), `exits.parquet` under those and the criteria and FLOP account. A learned gate's rows are
never cached, since the gate may be refitted without the checkpoint changing.

Frontier rows (one per criterion of one checkpoint): criterion (its text, or "K=<k>" for the
fixed-depth baseline), kind ("fixed-depth", "fixed", "kl", "stable", "entropy", "latent", "accel",
"gate", "oracle"), parameter, bits (recalled bits per person, `threshold` of 5 templates), recall,
exact (share of exact queries), mean_depth, p95_depth, flops_per_query (mean modeled forward FLOPs per
query, `compute.flops.serving_flops`: the prelude and every iteration over the query's input tokens,
and a readout whose head runs only at the answer positions; a criterion that reads logits pays one
readout per iteration, a readout-free one its norms per iteration and one readout at the exit depth,
and the fixed-depth baseline, `fixed:K` and the oracle, which need no decision, one readout),
flops_account (`FLOPS_ACCOUNT`: which accounting priced the row; a folder priced by another is
recomputed, not kept).

On the CPU, checkpoints without current caches are scored `workers` at a time in processes of
`threads` threads (`biosrecall.eval.parallel`), with the same numbers as one at a time here.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from biosrecall.bios import load_dataset
from biosrecall.bios.dataset import MANIFEST
from biosrecall.compute.flops import serving_flops
from biosrecall.errors import BiosrecallError
from biosrecall.eval.exits import BASELINE, Oracle, StepStats, depth_cap, parameter_of
from biosrecall.eval.parallel import map_in_processes
from biosrecall.eval.recall import DEFAULT_THRESHOLD, recall_table, score_exact
from biosrecall.eval.sweep import DEFAULT_BATCH_SIZE, answer_stats_by_depth, exact_by_depth
from biosrecall.eval.table_cache import checkpoint_key, read_cached, write_cached
from biosrecall.eval.token_exit import gap_rows
from biosrecall.train.checkpoint_files import load_checkpoint, read_meta
from biosrecall.train.run_folder import RunFolder, exits_cache_file, fraction_of, recall_cache_file

RECALL_CACHE_FORMAT = 1
EXITS_CACHE_FORMAT = 1
FLOPS_ACCOUNT = "checked-positions"
"""The `flops_per_query` accounting (the head only at checked positions); before it, every position."""


@dataclass(frozen=True)
class CheckpointJob:
    """One checkpoint to score, with everything needed to label its rows."""

    run: str
    run_dir: Path
    label: str
    path: Path
    meta: dict
    dataset_path: Path


@dataclass(frozen=True)
class Scoring:
    """How every checkpoint of one command is scored: what it makes, what its cache keys hold, and how it
    runs."""

    max_depth: int = 64
    threshold: int = DEFAULT_THRESHOLD
    people: int | None = None
    """Score the first N people only (None: everyone)."""
    batch_size: int = DEFAULT_BATCH_SIZE
    device: torch.device = torch.device("cpu")
    progress: bool | None = None
    """None: a bar per checkpoint only when stderr is a terminal."""
    refresh: bool = False
    """Score again even where a cache is current."""
    recall: bool = True
    """Make the recall table (False: the frontier rows only)."""
    per_token: bool = False
    """With exit criteria, also decide each per answer token in the KV-cached decoder against whole-query
    exit (`biosrecall.eval.token_exit`; never cached)."""


@dataclass(frozen=True)
class CheckpointScores:
    """A checkpoint's tables: `recall` (`eval.recall.recall_table`, unlabelled), the frontier rows
    `exits` (the module doc) and the per-token `gap` (`eval.token_exit.gap_rows`), each None when it was
    not asked for."""

    recall: pd.DataFrame | None
    exits: pd.DataFrame | None
    gap: pd.DataFrame | None = None

    def lacks(self, scoring: Scoring, criteria) -> bool:
        """A table `scoring` asks for (the recall table, frontier rows for `criteria`, their per-token
        gap) is not here: the model is needed."""
        served = bool(criteria)
        missing = (scoring.recall and self.recall is None) or (served and self.exits is None)
        return missing or (served and scoring.per_token and self.gap is None)


def run_labels(run_dirs) -> list[str]:
    """Folder names, or the paths as given where two runs share a name."""
    names = [Path(d).name or str(d) for d in run_dirs]
    return [name if names.count(name) == 1 else str(d) for name, d in zip(names, run_dirs, strict=True)]


def plan_jobs(run_dirs, checkpoints, data_dir: str | Path | None = None) -> list[CheckpointJob]:
    """Every checkpoint to score, validated (folders, selector, dataset location)."""
    if not run_dirs:
        raise BiosrecallError("no run folder given")
    jobs = []
    for name, run_dir in zip(run_labels(run_dirs), run_dirs, strict=True):
        for label, path in RunFolder(run_dir).select_checkpoints(checkpoints).items():
            meta = read_meta(path)
            dataset_path = RunFolder(run_dir).training_data(meta, data_dir)
            jobs.append(CheckpointJob(name, Path(run_dir), label, path, meta, dataset_path))
    return jobs


def load_checked_datasets(jobs: Sequence[CheckpointJob]) -> dict[Path, object]:
    """Load each dataset once and check it is the one every checkpoint using it was trained on."""
    datasets = {}
    for job in jobs:
        if job.dataset_path not in datasets:
            datasets[job.dataset_path] = load_dataset(job.dataset_path)
        RunFolder(job.run_dir).check_training_data(
            job.meta, job.dataset_path, datasets[job.dataset_path].manifest_hash
        )
    return datasets


def cached_dataset(path: Path):
    """A dataset loaded once per process while its manifest is unchanged (a scoring process scores
    several checkpoints of one dataset)."""
    path = Path(path)
    return _load_dataset(path, (path / MANIFEST).stat().st_mtime_ns)


@functools.lru_cache(maxsize=4)
def _load_dataset(path: Path, manifest_stamp: int):
    return load_dataset(path)


def scored_eval_set(dataset, people: int | None):
    """The evaluation rows of the first `people` people (None: everyone)."""
    if people is None or people >= dataset.num_people:
        return dataset.eval_set()
    return dataset.eval_set(np.arange(people))


def job_columns(job: CheckpointJob, progress: bool = False) -> dict:
    """The label columns of a checkpoint's rows: run, schedule, checkpoint, fraction (for the switch
    checkpoint, the share of the budget spent), and with `progress` update, flops and budget (the recall
    table's `curves.RUN_COLUMNS`)."""
    meta = job.meta
    flops, budget = float(meta.get("flops", math.nan)), float(meta.get("budget", math.nan))
    fraction = fraction_of(job.label)
    columns = {
        "run": job.run,
        "schedule": str(meta.get("schedule", "")),
        "checkpoint": job.label,
        "fraction": flops / budget if fraction is None else fraction,
    }
    if progress:
        columns.update(update=int(meta.get("update", -1)), flops=flops, budget=budget)
    return columns


# --- the one pass ---------------------------------------------------------------------------------


def served_exact(model, eval_set, max_depth: int, **options) -> np.ndarray:
    """bool [max_depth, M], as `exact_by_depth`. A standard transformer (no recurrent block,
    `ModelConfig.recurrent` False) computes the same function at every depth, so it is scored once, at
    its one depth, and that row stands for each depth asked: a flat curve, at the cost of one. A model
    without a `config` (a stand-in in tests) is taken as recurrent."""
    if getattr(getattr(model, "config", None), "recurrent", True):
        return exact_by_depth(model, eval_set, max_depth, **options)
    once = exact_by_depth(model, eval_set, 1, **options)
    return np.repeat(once, max_depth, axis=0)


def query_stats_by_depth(model, eval_set, max_depth: int, criteria, **options) -> StepStats:
    """`answer_stats_by_depth` (`options` go to it), observing the recurrent state in the same pass
    when a criterion reads it (latent, accel), with the gate scores of a resolved `gate:delta` or
    `cdf:q` (its `scores`; every one in a list shares one checkpoint's gate)."""
    states = any(criterion.reads == "state" for criterion in criteria)
    stats = answer_stats_by_depth(model, eval_set, max_depth, states=states, **options)
    gate = next((criterion for criterion in criteria if criterion.reads == "gate"), None)
    if gate is not None:
        batch_size = options.get("batch_size", DEFAULT_BATCH_SIZE)
        scores = gate.scores(model, eval_set, max_depth, batch_size)
        stats = replace(stats, gate=scores)
    return stats


def score_checkpoint(
    job: CheckpointJob, dataset, eval_set, scoring: Scoring, criteria: Sequence = ()
) -> CheckpointScores:
    """The checkpoint's recall table (when `scoring.recall`) and frontier rows (when `criteria`), each
    from its cache when current, else from one all-depth pass that yields both, and with
    `scoring.per_token` their per-token gap on the same loaded model. `eval_set` is
    `scored_eval_set(dataset, scoring.people)`, built once by the caller and shared by its checkpoints."""
    criteria = list(criteria)
    cached = _cached(job, dataset, scoring, criteria)
    if not cached.lacks(scoring, criteria):
        return cached
    recall_table_, exits = cached.recall, cached.exits
    model, _ = load_checkpoint(job.path, device=scoring.device)
    label = f"{job.run} @ {job.label}"
    options = {"batch_size": scoring.batch_size, "progress": scoring.progress, "label": label}
    if criteria and exits is None:
        stats = query_stats_by_depth(model, eval_set, scoring.max_depth, criteria, **options)
        exact = stats.exact
        config = getattr(model, "config", None)
        exits = exit_rows(
            stats, eval_set, dataset.pool_sizes, criteria, scoring.max_depth, config, scoring.threshold
        )
        if _cacheable(criteria):
            write_cached(exits_cache_file(job.path), _cache_key(job, dataset, scoring, criteria), exits)
    elif scoring.recall and recall_table_ is None:
        exact = served_exact(model, eval_set, scoring.max_depth, **options)
    if scoring.recall and recall_table_ is None:
        chance = dataset.manifest.get("chance_bits_per_attribute")
        recall_table_ = recall_table(
            exact, eval_set, dataset.pool_sizes, scoring.threshold, chance_bits=chance
        )
        recall_table_["manifest_hash"] = dataset.manifest_hash
        write_cached(recall_cache_file(job.path), _cache_key(job, dataset, scoring), recall_table_)
    gap = None
    if scoring.per_token and criteria:
        gap = gap_rows(
            model, eval_set, dataset.pool_sizes, criteria, scoring.max_depth, exits, scoring.threshold
        )
    del model
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return CheckpointScores(recall_table_, exits, gap)


def score_checkpoints(
    jobs: Sequence[CheckpointJob],
    datasets: Mapping[Path, object],
    scoring: Scoring,
    *,
    criteria: Mapping[int, Sequence] | None = None,
    workers: int = 1,
    threads: int = 1,
) -> list[CheckpointScores]:
    """`score_checkpoint` of every job, in order; `criteria` maps a job's index to its (resolved) exit
    criteria (none: recall only). On the CPU, the jobs that need a pass run `workers` at a time in
    processes of `threads` threads, each process loading its datasets (no progress bars there)."""
    wanted = [list((criteria or {}).get(index, ())) for index in range(len(jobs))]
    scores = [
        _cached(job, datasets[job.dataset_path], scoring, wanted[index]) for index, job in enumerate(jobs)
    ]
    pending = [index for index, score in enumerate(scores) if score.lacks(scoring, wanted[index])]
    if workers > 1 and scoring.device.type == "cpu":
        quiet = replace(scoring, progress=False)
        items = [(jobs[index], quiet, wanted[index]) for index in pending]
        found = map_in_processes(_score_job, items, workers, threads)
    else:
        eval_sets = {path: scored_eval_set(dataset, scoring.people) for path, dataset in datasets.items()}
        found = [
            score_checkpoint(
                jobs[index],
                datasets[jobs[index].dataset_path],
                eval_sets[jobs[index].dataset_path],
                scoring,
                wanted[index],
            )
            for index in pending
        ]
    for index, score in zip(pending, found, strict=True):
        scores[index] = score
    return scores


def _cached(job: CheckpointJob, dataset, scoring: Scoring, criteria: list) -> CheckpointScores:
    """The tables asked for that the checkpoint's caches hold current (None for each that is not)."""
    if scoring.refresh:
        return CheckpointScores(None, None)
    table = None
    if scoring.recall:
        table = read_cached(recall_cache_file(job.path), _cache_key(job, dataset, scoring), by_depth=True)
    exits = None
    if criteria and _cacheable(criteria):
        exits = read_cached(exits_cache_file(job.path), _cache_key(job, dataset, scoring, criteria))
    return CheckpointScores(table, exits)


def _cacheable(criteria) -> bool:
    """A fitted gate (`gate:delta`, `gate train`) may be fitted again on the same checkpoint, so rows
    scored with one are never cached; a recipe's trained gate (`cdf:q`) is part of the checkpoint's own
    weights, which the key's meta.json digest ties the rows to."""
    return not any(criterion.reads == "gate" and criterion.name == "gate" for criterion in criteria)


def _score_job(item) -> CheckpointScores:
    """`score_checkpoint` of one job in a scoring process."""
    job, scoring, criteria = item
    dataset = cached_dataset(job.dataset_path)
    eval_set = scored_eval_set(dataset, scoring.people)
    return score_checkpoint(job, dataset, eval_set, scoring, criteria)


def _cache_key(job: CheckpointJob, dataset, scoring: Scoring, criteria=None) -> dict:
    """What a checkpoint's cached table was scored under: the depth, threshold and people scored and the
    dataset (with the digest of the checkpoint's meta.json, `checkpoint_key`); for its frontier rows
    (`criteria` given) also the criteria and the FLOP account."""
    if criteria is None:
        items = {"format": RECALL_CACHE_FORMAT}
    else:
        specs = [criterion.spec for criterion in criteria]
        items = {"format": EXITS_CACHE_FORMAT, "criteria": specs, "flops_account": FLOPS_ACCOUNT}
    return checkpoint_key(
        job.path,
        people=scoring.people,
        max_depth=int(scoring.max_depth),
        threshold=int(scoring.threshold),
        manifest_hash=dataset.manifest_hash,
        **items,
    )


# --- frontier rows from the pass's statistics -----------------------------------------------------


def exit_depths(criterion, stats: StepStats, max_depth: int) -> np.ndarray:
    """int [M]: the depth each query stops at under `criterion` (stats arrays are [D, M], D >= cap)."""
    cap = depth_cap(criterion, max_depth)
    depths = np.arange(1, cap + 1)[:, None]
    cut = StepStats(**{name: None if v is None else np.asarray(v)[:cap] for name, v in vars(stats).items()})
    holds = np.asarray(criterion.holds(depths, cut), dtype=bool)
    holds = np.broadcast_to(holds, cut.exact.shape).copy()
    if isinstance(criterion, Oracle):
        # A query no depth gets right costs the oracle nothing beyond the first iteration.
        holds[0] |= ~holds.any(axis=0)
    holds[-1] = True
    return holds.argmax(axis=0) + 1


def query_flops(
    config, lengths: np.ndarray, checked: np.ndarray, depths: np.ndarray, criterion=None
) -> np.ndarray:
    """Modeled forward FLOPs of each query (`compute.flops.serving_flops`): `lengths` input tokens,
    the last `checked` of them answer-predicting, served to `depths` under `criterion` (None: a fixed
    depth); what the criterion reads sets the readouts and the readout-free checks it pays for."""
    if config is None:
        return np.full(len(depths), math.nan)
    reads = None if criterion is None else criterion.reads
    flops = np.zeros(len(depths))
    triples = np.stack([lengths, checked, depths], axis=1)
    for length, count, depth in np.unique(triples, axis=0):
        readouts = int(depth) if reads == "logits" else 1
        checks = max(0, int(depth) - criterion.span + 1) if reads == "state" else 0
        gates = criterion.checks(int(depth)) if reads == "gate" else 0
        cost = serving_flops(config, int(length), int(depth), int(count), readouts, checks, gates)
        flops[(lengths == length) & (checked == count) & (depths == depth)] = cost
    return flops


def _row(name: str, kind: str, parameter, exact_at, depths, flops, scoring) -> dict:
    eval_set, pool_sizes, threshold = scoring
    score = score_exact(exact_at, eval_set, pool_sizes, threshold)
    return {
        "criterion": name,
        "kind": kind,
        "parameter": float(parameter),
        "bits": score.bits_per_person,
        "recall": score.recall,
        "exact": float(np.mean(exact_at)),
        "mean_depth": float(np.mean(depths)),
        "p95_depth": float(np.percentile(depths, 95)),
        "flops_per_query": float(np.mean(flops)),
        "flops_account": FLOPS_ACCOUNT,
    }


def exit_rows(
    stats: StepStats,
    eval_set,
    pool_sizes,
    criteria,
    max_depth: int,
    config=None,
    threshold: int = DEFAULT_THRESHOLD,
) -> pd.DataFrame:
    """One checkpoint's frontier: the fixed-depth baseline K = 1..max_depth, then each criterion."""
    exact = np.asarray(stats.exact, dtype=bool)
    checked = np.asarray(eval_set.answer_len)
    lengths = np.asarray(eval_set.answer_start) + checked - 1
    columns = np.arange(exact.shape[1])
    scoring = (eval_set, pool_sizes, threshold)
    records = []
    for k in range(1, max_depth + 1):
        depths = np.full(exact.shape[1], k)
        flops = query_flops(config, lengths, checked, depths)
        records.append(_row(f"K={k}", BASELINE, k, exact[k - 1], depths, flops, scoring))
    for criterion in criteria:
        depths = exit_depths(criterion, stats, max_depth)
        flops = query_flops(config, lengths, checked, depths, criterion)
        parameter = parameter_of(criterion)
        exact_at = exact[depths - 1, columns]
        records.append(_row(criterion.spec, criterion.name, parameter, exact_at, depths, flops, scoring))
    return pd.DataFrame.from_records(records)
