"""What a Figure-1 study writes from its recall table: per-run and seed-aggregated tables, figures, claims.

    curves = label_runs(table, runs)           # recall_curves' table, with name/label/seed/lr/role columns
    files = write_study_results(out_dir, curves)

Files (every table as CSV and parquet, every figure as PNG and PDF):

    recall_curve           every run, checkpoint, depth and attribute (one row per seed)
    recall_curve_seeds     whole-person bits per group (runs differing only in seed, `group` = their
                           label): mean, 95% t interval (`bits_low`, `bits_high`) and `n_seeds`
    summary.csv (.md)      per group and fraction: K=1, 4, 16, 64, the means over K<=16 and K>16 and
                           the worst depth, each the mean over seeds with its interval
    summary_runs.csv       the same numbers for every run (one seed each)
    figure1                the main schedules' means with shaded intervals; controls as thin lines
    fixed_sweep*, figure5  the same for the fixed-K runs (Figure 5), when there are any
    claims.csv/.md         `biosrecall.experiments.claims`
    lr_grid (by figure1)   every learning-rate grid point, its score and which one each schedule kept
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from biosrecall.atomic import atomic_write_text
from biosrecall.eval.plots import plot_recall_curves, schedule_label
from biosrecall.eval.seeds import aggregate_recall
from biosrecall.experiments.claims import judge_claims
from biosrecall.experiments.study import FIXED_K4, MAIN_SCHEDULES, UPDATE_MATCHED
from biosrecall.outputs import interval_cell, markdown_columns, save_figure, write_table
from biosrecall.sweep.jobs import SweepRun

SPEC_COLUMNS = ["name", "label", "seed", "lr", "role"]
BASELINE_LABELS = {"std_params": "standard, as many parameters", "std_flops": "standard, as many FLOPs"}
"""The capacity study's standard-transformer baselines (`<preset>-std-params`, `-std-flops`) in words."""


def study_label(name: str) -> str:
    """A study run's name in words for a legend ("fixed K=4", "uniform K=1-16 (update-matched)");
    a fixed-K sweep run (fixed_k8) reads as its schedule, any other name as it is."""
    if name in MAIN_SCHEDULES:
        return schedule_label(MAIN_SCHEDULES[name])
    if name == UPDATE_MATCHED:
        return f"{schedule_label(MAIN_SCHEDULES[name.removesuffix('_update_matched')])} (update-matched)"
    if name.startswith("fixed_k") and name[7:].isdigit():
        return f"fixed K={name[7:]}"
    return BASELINE_LABELS.get(name, name)


def label_runs(table: pd.DataFrame, runs: dict[str, SweepRun]) -> pd.DataFrame:
    """`recall_curves`' table with each run's study labels (name, label, role; seed and lr from its
    config); `runs` maps its `run` values to the runs. The `run` column becomes the run's name, its
    folder under runs/ (`seed0/fixed_k4`)."""
    columns = {
        column: table["run"].map({key: _spec_value(run, column) for key, run in runs.items()})
        for column in SPEC_COLUMNS
    }
    labelled = table.assign(**columns, run=table["run"].map({key: run.name for key, run in runs.items()}))
    return labelled[["run", *SPEC_COLUMNS, *(c for c in table.columns if c not in ("run", *SPEC_COLUMNS))]]


def _spec_value(run: SweepRun, column: str):
    return getattr(run.config, column) if column in ("seed", "lr") else run.labels[column]


def seed_results(curves: pd.DataFrame):
    """`biosrecall.eval.seeds.aggregate_recall` over the study's groups (its labels), with each group's
    name, role and lr: (curves over seeds, summary over seeds, summary per run)."""
    runs = curves.drop_duplicates("run")
    groups = {row.run: (row.label, int(row.seed)) for row in runs.itertuples()}
    aggregated, summary, per_run = aggregate_recall(curves, groups)
    about = runs.drop_duplicates("label").set_index("label")[["name", "role", "lr"]]
    return aggregated.join(about, on="group"), summary.join(about, on="group"), per_run


def _plot(curves: pd.DataFrame, out_dir: Path, figure: str, table: str, summary: str):
    """Write one result set (tables, summaries, figure); returns (its summary, the figure's files)."""
    aggregated, grouped, per_run = seed_results(curves)
    write_table(curves, out_dir / table)
    write_table(aggregated, out_dir / f"{table}_seeds")
    atomic_write_text(out_dir / f"{summary}.csv", grouped.to_csv(index=False))
    atomic_write_text(out_dir / f"{summary}.md", summary_markdown(grouped))
    atomic_write_text(out_dir / f"{summary}_runs.csv", per_run.to_csv(index=False))
    return grouped, save_figure(plot_recall_curves(aggregated), out_dir / figure)


def write_study_results(out_dir: Path, curves: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame, list[Path]]:
    """Write every table and figure and judge the recall claims; returns (the summary of the main
    schedules and controls per fraction over seeds, the judged claims, the figures' files). The caller
    writes the claims (`claims.write_claims`) once every row of its call is in."""
    main = curves[curves["role"].isin(["main", "control"])]
    summary, figures = _plot(main, out_dir, "figure1", "recall_curve", "summary")
    sweep = curves[(curves["role"] == "sweep") | ((curves["name"] == FIXED_K4) & (curves["role"] == "main"))]
    if (curves["role"] == "sweep").any():
        figures += _plot(sweep, out_dir, "figure5", "fixed_sweep", "fixed_sweep_summary")[1]
    claims = judge_claims(curves[(curves["attribute"] == "all") & (curves["role"] != "grid")])
    return summary, claims, figures


def summary_markdown(summary: pd.DataFrame) -> str:
    """The summary as a Markdown table: each number as "mean [low, high]" over seeds."""
    numbers = [
        c
        for c in summary.columns
        if c.startswith(("K=", "mean K", "min")) and not c.endswith(("_low", "_high"))
    ]
    columns = {"run": "{group}", "budget": "{fraction:.0%}", **{c: interval_cell(c) for c in numbers}}
    return markdown_columns(summary, {**columns, "seeds": "{n_seeds}"})


def grid_table(curves: pd.DataFrame, training_depth: int = 16) -> pd.DataFrame:
    """One row per grid point: its schedule, lr and score (mean bits over K=1..16 at 100%), and
    whether it is the one its schedule keeps (the highest score; the lower lr on a tie)."""
    final = curves[(curves["attribute"] == "all") & (curves["fraction"] == 1.0)]
    final = final[final["depth"] <= training_depth]
    scores = final.groupby(["name", "lr"], sort=False)["bits"].mean().rename("score").reset_index()
    scores = scores.sort_values(["name", "score", "lr"], ascending=[True, False, True])
    scores["chosen"] = ~scores.duplicated("name")
    return scores.sort_values(["name", "lr"]).reset_index(drop=True)


def chosen_lr(grid: pd.DataFrame) -> dict[str, float]:
    return {row.name: float(row.lr) for row in grid[grid["chosen"]].itertuples()}
