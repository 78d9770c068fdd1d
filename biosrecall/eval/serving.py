"""Adaptive-depth serving scored from the all-depth pass: recall against compute per exit criterion.

A bioS query runs one iteration, checks its answer-predicting positions (a readout there, or for
`latent`/`accel` the recurrent state there), and stops at the first depth where its exit criterion
(`biosrecall.eval.exits`) holds at every one of them, or at the max depth. That is realisable and
exact, so the whole frontier comes from `answer_stats_by_depth`'s one pass per checkpoint (which also
observes the recurrent state when a readout-free criterion is scored).

    table = exit_frontier(["runs/fixed4", "runs/uniform"], parse_exits("kl,stable:2,oracle"))
    headline = headline_table(table)       # per run: depth needed for 95% of its best recall
    write_table(table, "recall-curve/exit_frontier")
    figures, headline = write_serving_results("runs/figure1", run_dirs, "1.0", max_depth=64)  # figure1's

Frontier table (one row per run, checkpoint and criterion): run, schedule, checkpoint, fraction,
criterion (its text, or "K=<k>" for the fixed-depth baseline), kind ("fixed-depth", "fixed", "kl",
"stable", "entropy", "latent", "accel", "gate", "oracle"), parameter, bits (recalled bits per person,
`threshold` of 5 templates), recall, exact (share of exact queries), mean_depth, p95_depth,
flops_per_query (mean modeled forward FLOPs per query, `compute.flops.serving_flops`: the prelude and
every iteration over the query's input tokens, and a readout whose head runs only at the answer
positions; a criterion that reads logits pays one readout per iteration, a readout-free one its norms
per iteration and one readout at the exit depth, and the fixed-depth baseline, `fixed:K` and the
oracle, which need no decision, one readout), flops_account (`FLOPS_ACCOUNT`: which accounting priced
the row; a folder priced by another is recomputed, not kept).

Each checkpoint's rows are cached in its folder (`exits.parquet`, `biosrecall.eval.table_cache`) under
the criteria, depth, threshold, people, dataset and accounting they were scored with, so a study rerun
or extended by seeds scores only new checkpoints (learned gates apart: they are always rescored).

`write_serving_results` writes the frontier table and figure and the headline table into one folder
(what `biosrecall figure1` adds for its 100% checkpoints, with the `SERVING_CRITERIA` list), and keeps
them when they are already there for the same runs, criteria and max depth.
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from biosrecall import runs
from biosrecall.compute.flops import serving_flops
from biosrecall.errors import BiosrecallError
from biosrecall.eval.exits import (
    Fixed,
    Oracle,
    StepStats,
    check_max_depth,
    depth_cap,
    parameter_of,
)
from biosrecall.eval.recall import DEFAULT_THRESHOLD, check_threshold, score_exact
from biosrecall.eval.sweep import DEFAULT_BATCH_SIZE, answer_stats_by_depth
from biosrecall.eval.table_cache import checkpoint_key, read_cached, write_cached
from biosrecall.train.layout import exits_cache_file

BASELINE = "fixed-depth"
TABLE_NAME = "exit_frontier"
HEADLINE_NAME = "exit_headline"
RECALL_SHARE = 0.95
EXITS_CACHE_FORMAT = 1
FLOPS_ACCOUNT = "checked-positions"
"""The `flops_per_query` accounting (the head only at checked positions); before it, every position."""
# figure1's default: KL at a few thresholds, argmax stability, entropy, the readout-free latent
# (Huginn's 0.03) and accel, and the oracle's upper bound.
SERVING_CRITERIA = (
    "kl:1e-2,kl:1e-3,kl:1e-4,stable:2,stable:4,entropy:0.5,entropy:0.1,"
    "latent:0.03,latent:0.01,accel:0.03,accel:0.01,oracle"
)


def exit_depths(criterion, stats: StepStats, max_depth: int) -> np.ndarray:
    """int [M]: the depth each query stops at under `criterion` (stats arrays are [D, M], D >= cap)."""
    cap = depth_cap(criterion, max_depth)
    if cap > len(stats.exact):
        raise BiosrecallError(f"statistics cover {len(stats.exact)} depths, {cap} needed")
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


def exit_rows(stats: StepStats, eval_set, pool_sizes, criteria, max_depth: int, config=None,
              threshold: int = DEFAULT_THRESHOLD) -> pd.DataFrame:  # fmt: skip
    """One checkpoint's frontier: the fixed-depth baseline K = 1..max_depth, then each criterion."""
    max_depth = check_max_depth(max_depth)
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


def scored_eval_set(dataset, people: int | None):
    """The evaluation rows of the first `people` people (None: everyone)."""
    if people is None or people >= dataset.num_people:
        return dataset.eval_set()
    return dataset.eval_set(np.arange(people))


def job_columns(job) -> dict:
    """The label columns of a checkpoint's rows: run, schedule, checkpoint, fraction."""
    fraction = runs.fraction_of(job.label)
    if fraction is None:
        fraction = float(job.meta.get("flops", math.nan)) / float(job.meta.get("budget", math.nan))
    schedule = str(job.meta.get("schedule", ""))
    return {"run": job.run, "schedule": schedule, "checkpoint": job.label, "fraction": fraction}


def exit_frontier(run_dirs, criteria, checkpoints="final", max_depth: int = 64,
                  threshold: int = DEFAULT_THRESHOLD, *, batch_size: int = DEFAULT_BATCH_SIZE,
                  device: str = "auto", data_dir=None, progress: bool | None = None,
                  people: int | None = None, workers: int = 1, threads: int = 1) -> pd.DataFrame:  # fmt: skip
    """The frontier table (module doc) of the selected checkpoints of each run; on the CPU, `workers`
    checkpoints at a time in processes of `threads` threads (`biosrecall.eval.parallel`)."""
    from biosrecall.eval.curves import load_checked_datasets, plan_jobs
    from biosrecall.eval.gate import resolve_gates
    from biosrecall.train.distributed import resolve_device

    max_depth = check_max_depth(max_depth)
    if people is not None and people < 1:
        raise BiosrecallError(f"--people must be at least 1 (got {people})")
    jobs = plan_jobs([Path(d) for d in run_dirs], checkpoints, data_dir)
    # Every gate bound (or refused) before the first model runs; each is read and hashed once here.
    resolved_by_job = [resolve_gates(criteria, j.run_dir, j.label, j.path, max_depth) for j in jobs]
    datasets = load_checked_datasets(jobs)
    eval_sets = {path: scored_eval_set(dataset, people) for path, dataset in datasets.items()}
    for eval_set in eval_sets.values():
        check_threshold(eval_set, threshold)
    device = resolve_device(str(device))
    scoring = {"threshold": threshold, "people": people, "batch_size": batch_size, "progress": progress}
    if workers > 1 and device.type == "cpu" and len(jobs) > 1:
        from biosrecall.eval.parallel import map_in_processes

        items = [(job, resolved, max_depth, device, {**scoring, "progress": False})
                 for job, resolved in zip(jobs, resolved_by_job, strict=True)]  # fmt: skip
        scored = map_in_processes(_exits_job, items, workers, threads)
    else:
        scored = [checkpoint_exits(job, datasets[job.dataset_path], eval_sets[job.dataset_path], resolved,
                                   max_depth, device, **scoring)
                  for job, resolved in zip(jobs, resolved_by_job, strict=True)]  # fmt: skip
    tables = [pd.concat([pd.DataFrame([job_columns(job)] * len(table)), table], axis=1)
              for job, table in zip(jobs, scored, strict=True)]  # fmt: skip
    return pd.concat(tables, ignore_index=True)


def _exits_job(item) -> pd.DataFrame:
    """`checkpoint_exits` of one checkpoint in a scoring process (a cached one is only read)."""
    from biosrecall.eval.curves import cached_dataset

    job, criteria, max_depth, device, scoring = item
    dataset = cached_dataset(job.dataset_path)
    eval_set = scored_eval_set(dataset, scoring["people"])
    return checkpoint_exits(job, dataset, eval_set, criteria, max_depth, device, **scoring)


def checkpoint_exits(job, dataset, eval_set, criteria, max_depth: int, device, *, threshold: int,
                     people: int | None, batch_size: int, progress: bool | None) -> pd.DataFrame:  # fmt: skip
    """`exit_rows` of one checkpoint, from its cache when current (`exits.parquet`, kept like the
    recall cache by `biosrecall.eval.table_cache`); a learned gate's rows are never cached, since
    the gate may be refitted without the checkpoint changing."""
    cached = not any(criterion.reads == "gate" for criterion in criteria)
    key = checkpoint_key(
        job.path,
        format=EXITS_CACHE_FORMAT,
        criteria=[criterion.spec for criterion in criteria],
        max_depth=int(max_depth),
        threshold=int(threshold),
        people=people,
        manifest_hash=dataset.manifest_hash,
        flops_account=FLOPS_ACCOUNT,
    )
    table = read_cached(exits_cache_file(job.path), key) if cached else None
    if table is None:
        model, _ = runs.load_checkpoint(job.path, device=device)
        stats = query_stats_by_depth(model, eval_set, max_depth, criteria, batch_size=batch_size,
                                     progress=progress, label=f"{job.run} @ {job.label} exits")  # fmt: skip
        config = getattr(model, "config", None)
        table = exit_rows(stats, eval_set, dataset.pool_sizes, criteria, max_depth, config, threshold)
        del model
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        if cached:
            write_cached(exits_cache_file(job.path), key, table)
    return table


def query_stats_by_depth(model, eval_set, max_depth: int, criteria, **options) -> StepStats:
    """`answer_stats_by_depth` (`options` go to it), observing the recurrent state in the same pass
    when a criterion reads it (latent, accel), with the gate logits of a resolved `gate:delta`
    (`eval.gate.gate_scores_by_depth`; every one in a list shares one checkpoint's gate)."""
    states = any(criterion.reads == "state" for criterion in criteria)
    stats = answer_stats_by_depth(model, eval_set, max_depth, states=states, **options)
    gate = next((criterion for criterion in criteria if criterion.reads == "gate"), None)
    if gate is not None:
        from biosrecall.eval.gate import gate_scores_by_depth

        batch_size = options.get("batch_size", DEFAULT_BATCH_SIZE)
        scores = gate_scores_by_depth(model, gate.head, eval_set, max_depth, gate.cap, batch_size)
        stats = replace(stats, gate=scores)
    return stats


def _shallowest(rows: pd.DataFrame, target: float) -> pd.Series | None:
    reaching = rows[rows["bits"] >= target - 1e-12]
    return None if reaching.empty else reaching.loc[reaching["mean_depth"].idxmin()]


def headline_table(frontier: pd.DataFrame, share: float = RECALL_SHARE) -> pd.DataFrame:
    """Per run and checkpoint: the mean depth (and FLOPs) needed to reach `share` of the run's own best
    fixed-depth recall, at a fixed depth against the best realisable criterion (the oracle apart)."""
    records = []
    for keys, rows in frontier.groupby(["run", "schedule", "checkpoint", "fraction"], sort=False):
        baseline = rows[rows["kind"] == BASELINE]
        best = float(baseline["bits"].max())
        target = share * best
        fixed = _shallowest(baseline, target)
        adaptive = _shallowest(rows[~rows["kind"].isin([BASELINE, "oracle"])], target)
        oracle = rows[rows["kind"] == "oracle"]
        records.append({
            **dict(zip(["run", "schedule", "checkpoint", "fraction"], keys, strict=True)),
            "best_bits": best,
            "target_bits": target,
            "fixed_depth": math.nan if fixed is None else fixed["mean_depth"],
            "fixed_flops": math.nan if fixed is None else fixed["flops_per_query"],
            "adaptive_mean_depth": math.nan if adaptive is None else adaptive["mean_depth"],
            "adaptive_flops": math.nan if adaptive is None else adaptive["flops_per_query"],
            "adaptive_criterion": "" if adaptive is None else adaptive["criterion"],
            "oracle_mean_depth": float(oracle["mean_depth"].iloc[0]) if len(oracle) else math.nan,
        })  # fmt: skip
    return pd.DataFrame.from_records(records)


def serving_names() -> list[str]:
    """The files `write_serving_results` makes in its folder."""
    from biosrecall.outputs import FIGURE_FORMATS, TABLE_FORMATS

    frontier = [f"{TABLE_NAME}.{fmt}" for fmt in (*TABLE_FORMATS, *FIGURE_FORMATS)]
    return frontier + [f"{HEADLINE_NAME}.{fmt}" for fmt in TABLE_FORMATS]


def _current_headline(out_dir: Path, labels: list[str], criteria, max_depth: int) -> pd.DataFrame | None:
    """The headline already in `out_dir` when every serving file is there and the frontier holds
    these runs (by label), criteria and depths; None otherwise (also when a file is unreadable)."""
    if not all((out_dir / name).is_file() for name in serving_names()):
        return None
    try:
        frontier = pd.read_parquet(out_dir / f"{TABLE_NAME}.parquet")
        headline = pd.read_parquet(out_dir / f"{HEADLINE_NAME}.parquet")
        scored = set(frontier.loc[frontier["kind"] != BASELINE, "criterion"])
        deepest = int(frontier.loc[frontier["kind"] == BASELINE, "parameter"].max())
        same_runs = set(frontier["run"]) == set(labels)
        priced = bool((frontier["flops_account"] == FLOPS_ACCOUNT).all())
    except (OSError, ValueError, KeyError):
        return None
    current = same_runs and priced and scored == {c.spec for c in criteria} and deepest == max_depth
    return headline if current else None


def write_serving_results(out_dir, run_dirs, checkpoints="final", max_depth: int = 64, criteria=None,
                          labels=None, **options) -> tuple[list[Path], pd.DataFrame]:  # fmt: skip
    """Frontier table and figure and headline table of `run_dirs` in `out_dir` (`SERVING_CRITERIA` by
    default; `options` go to `exit_frontier`), kept when they already cover these runs and criteria;
    returns the figure's files and the headline. `labels` name the runs in the tables (default: their
    folder names, `eval.curves.run_labels`)."""
    from biosrecall.eval.curves import run_labels
    from biosrecall.eval.exits import parse_exits

    out_dir = Path(out_dir)
    criteria = parse_exits(SERVING_CRITERIA) if criteria is None else list(criteria)
    figure = out_dir / TABLE_NAME
    labels = run_labels(run_dirs) if labels is None else list(labels)
    headline = _current_headline(out_dir, labels, criteria, max_depth)
    if headline is not None:
        return [figure.with_suffix(".png"), figure.with_suffix(".pdf")], headline
    frontier = exit_frontier(run_dirs, criteria, checkpoints, max_depth, **options)
    frontier["run"] = frontier["run"].map(dict(zip(run_labels(run_dirs), labels, strict=True)))
    written, headline = write_frontier(out_dir, frontier)
    return [path for path in written if path.suffix in (".png", ".pdf")], headline


def write_frontier(out_dir, frontier: pd.DataFrame) -> tuple[list[Path], pd.DataFrame]:
    """Write a frontier (table and figure) and its headline table into `out_dir`; returns every file
    written and the headline."""
    from biosrecall.eval.plots import plot_exit_frontier
    from biosrecall.outputs import save_figure, write_table

    out_dir = Path(out_dir)
    headline = headline_table(frontier)
    written = write_table(frontier, out_dir / TABLE_NAME)
    written += save_figure(plot_exit_frontier(frontier), out_dir / TABLE_NAME)
    written += write_table(headline, out_dir / HEADLINE_NAME)
    return written, headline


def answer_prompt(run_dir, prompt: str, criterion, max_depth: int = 64, *, checkpoint: str = "final",
                  max_new_tokens: int = 8, device: str = "auto", data_dir=None) -> list[tuple[str, int]]:  # fmt: skip
    """Greedy continuation of `prompt` by a run's checkpoint with the KV-cached decoder and a per-token
    exit: (word, depth) per generated token, up to a full stop or a separator."""
    from biosrecall.bios import load_dataset
    from biosrecall.bios.tokenizer import SEP_TOKEN, SPACE_MARK, split_words
    from biosrecall.eval.exits import exit_judge
    from biosrecall.eval.gate import resolve_gates
    from biosrecall.model.decode import greedy_decode
    from biosrecall.train.distributed import resolve_device

    label, path = runs.select_checkpoint(run_dir, checkpoint)
    criterion = resolve_gates([criterion], run_dir, label, path, max_depth)[0]
    cap = depth_cap(criterion, max_depth)
    judge = None if isinstance(criterion, Fixed) else (lambda: exit_judge(criterion))
    meta = runs.read_meta(path)
    dataset_path = runs.training_data_of(run_dir, meta, data_dir)
    tokenizer = load_dataset(dataset_path).tokenizer
    words = split_words(prompt)
    ids = [tokenizer.token_to_id(word) for word in words]
    if not words:
        raise BiosrecallError("the prompt is empty")
    if None in ids:
        unknown = words[ids.index(None)].lstrip(SPACE_MARK)
        raise BiosrecallError(f"the word {unknown!r} is not in the vocabulary of {dataset_path}")
    model, _ = runs.load_checkpoint(path, device=resolve_device(str(device)))
    sep = tokenizer.token_to_id(SEP_TOKEN)
    stops = {token for token in (sep, tokenizer.token_to_id(".")) if token is not None}
    result = greedy_decode(model, [sep, *ids], max_new_tokens, cap, judge, stop_ids=stops)
    return [
        (tokenizer.id_to_token(t).lstrip(SPACE_MARK), d)
        for t, d in zip(result.tokens, result.depths, strict=True)
    ]
