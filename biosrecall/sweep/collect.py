"""The tables of a sweep: every finished run side by side, in OUT/collect/.

    written, notes = collect_sweep(load_spec("sweeps/bios.toml"))

Always `runs.csv` / `.parquet`: one row per run of the sweep with its labels (entry name, grid
values), state, updates done and planned, and its last metrics.jsonl row (loss, FLOPs, tokens, wall
seconds).

bioS runs (`train`): the recall curves of every finished run (`biosrecall.eval.curves.score_runs`
with the sweep's `recall_curve` evaluation settings, so each checkpoint comes from the cache its
evaluation left: `checkpoints/<label>/recall.parquet`) as `recall_curve.csv|parquet|png|pdf` and
`summary.csv|parquet`. Runs sharing a folder name (a grid over seed: `seed<S>/<name>`) are also
aggregated over seeds as `recall-curve --aggregate-seeds` does, by its writer
(`biosrecall.eval.recall_curve`): `recall_curve_seeds.*`, with `summary` over seeds and
`summary_runs` per run.

Language-model runs (`lm train`): once every finished run has been evaluated (`lm_eval` in the
spec), the Figure-2 comparison of `biosrecall lm compare` (`biosrecall.lm.compare`), with seeds
aggregated for a grid over seed (`<name>/seed<S>`); otherwise a note says why it was left out.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from biosrecall.atomic import OutputRecord, atomic_directory
from biosrecall.errors import BiosrecallError
from biosrecall.eval.curves import DEFAULT_CHECKPOINTS, score_runs
from biosrecall.eval.recall_curve import shown_depths, write_curves, write_seed_curves
from biosrecall.eval.seeds import seed_groups
from biosrecall.lm.compare import compare_runs, write_comparison
from biosrecall.lm.evaluate import TABLE
from biosrecall.outputs import write_table
from biosrecall.sweep import commands
from biosrecall.sweep.jobs import Evaluation, SweepRun
from biosrecall.sweep.records import run_status
from biosrecall.sweep.spec import SweepSpec
from biosrecall.train.run_folder import RunFolder

COLLECT = "collect"
RECORD = OutputRecord("sweep collect", "runs.csv")
"""What marks OUT/collect/ as collect's: the runs table it always writes."""
_LAST_METRICS = ("loss", "flops", "tokens", "wall_s")


def collect_sweep(spec: SweepSpec) -> tuple[list[Path], list[str]]:
    """Write the tables of the sweep `spec` describes into OUT/collect/ (module docstring); (paths
    written, notes)."""
    jobs = spec.state_jobs()
    done = [job for job in jobs if RunFolder(job.run_dir).finished()]
    if not done:
        raise BiosrecallError(
            f"no run of the sweep in {spec.out} has finished yet (see `biosrecall sweep status`)"
        )
    dest = Path(spec.out).absolute() / COLLECT
    # Built whole and swapped in (a full disk leaves the previous tables as they were), replacing only
    # an earlier collect (its runs table marks it).
    with atomic_directory(dest, overwrite=True, record=RECORD) as tmp:
        written = write_table(runs_table(jobs), tmp / "runs")
        if spec.command == "train":
            more, notes = _recall_tables(done, spec.evaluations, tmp), []
        else:
            more, notes = _lm_comparison(done, jobs, tmp)
        written += more
    return [dest / path.relative_to(tmp) for path in written], notes


def runs_table(jobs: Sequence[SweepRun]) -> pd.DataFrame:
    """One row per run: name, labels, state, updates, planned, and its last logged metrics."""
    rows = []
    for job in jobs:
        status = run_status(job)
        metrics = RunFolder(job.run_dir).read_metrics()  # empty before the first update is logged
        last = metrics[-1] if metrics else {}
        row = {"run": job.name, **{str(k): v for k, v in job.labels.items()}}
        row.update({key: status[key] for key in ("state", "updates", "planned")})
        row.update({key: last.get(key) for key in _LAST_METRICS})
        rows.append(row)
    return pd.DataFrame(rows)


def _recall_tables(done: list[SweepRun], evaluations: Sequence[Evaluation], dest: Path) -> list[Path]:
    # The recall-curve options of the sweep's evaluation (its defaults when it has none).
    options = next((e.options for e in evaluations if e.command == "recall-curve"), {})
    settings = commands.check_evaluation("recall-curve", options, "recall_curve")
    # The parameter --checkpoint fills, named by the command's own definition.
    selector = settings[commands.canonical_key("recall-curve", "checkpoint")]
    run_dirs = [job.run_dir for job in done]
    table = score_runs(
        run_dirs,
        selector or DEFAULT_CHECKPOINTS,
        max_depth=settings["max_depth"],
        threshold=settings["threshold"],
        device=settings["device"],
        data_dir=settings["data_dir"],
        people=settings["people"],
    ).recall
    names = [path.name for path in run_dirs]
    if len(set(names)) < len(names):  # runs sharing a folder name are seeds of one configuration
        return write_seed_curves(table, seed_groups(run_dirs), dest)[0]
    written, summary = write_curves(table, dest, "bits", shown_depths(settings["max_depth"]))
    return written + write_table(summary, dest / "summary")


def _lm_comparison(done: list[SweepRun], jobs: list[SweepRun], dest: Path) -> tuple[list[Path], list[str]]:

    missing = [
        job.name for job in done if not (RunFolder(job.run_dir).eval_dir / f"{TABLE}.parquet").is_file()
    ]
    if missing:
        return [], [f"lm compare left out: {len(missing)} finished run(s) not evaluated ({missing[0]}, ...)"]
    seeded = all(re.search(r"/seed\d+$", job.name) for job in jobs)
    if seeded:
        groups = list(dict.fromkeys(job.run_dir.parent for job in jobs))
        unfinished = [job.name for job in jobs if job not in done]
        if unfinished:
            return [], [
                f"lm compare left out: {len(unfinished)} seed run(s) not finished ({unfinished[0]}, ...)"
            ]
    else:
        groups = [job.run_dir for job in done]
    try:
        comparison = compare_runs(groups, aggregate_seeds=seeded)
    except BiosrecallError as exc:
        return [], [f"lm compare left out: {exc}"]
    return write_comparison(comparison, dest), []
