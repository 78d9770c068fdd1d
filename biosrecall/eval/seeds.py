"""Recall of runs that differ only in seed, aggregated: `biosrecall recall-curve --aggregate-seeds`.

    groups = seed_groups(["runs/s0/fixed_k4", "runs/s1/fixed_k4", "runs/s0/uniform"])
    curves, summary = aggregate_recall(table, groups)   # mean, 95% t interval, n_seeds per group

Runs sharing a folder name are replicates of one configuration (figure1 lays its runs out that way:
`OUT/runs/seed<S>/<label>`). Before anything is aggregated, each group is checked by
`biosrecall.train.seed_replicates.check_replicates`: a group whose runs differ in anything but the
seed (and settings that do not change what is trained) is refused with one line naming the field,
since its "interval" would mix two experiments; so is a group holding one seed twice.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from biosrecall.eval.curves import summary_table
from biosrecall.eval.scoring import run_labels
from biosrecall.stats import aggregate_seeds
from biosrecall.train.seed_replicates import check_replicates

GROUP_KEYS = ["group", "schedule", "checkpoint", "fraction"]


def seed_groups(run_dirs) -> dict[str, tuple[str, int]]:
    """Each run's table label -> (group = its folder name, its seed); checks every group's configs."""
    run_dirs = [Path(d) for d in run_dirs]
    members: dict[str, list[Path]] = {}
    for run_dir in run_dirs:
        members.setdefault(run_dir.name, []).append(run_dir)
    seeds = {
        path: seed for name, paths in members.items() for path, seed in check_replicates(name, paths).items()
    }
    return {
        label: (run_dir.name, seeds[run_dir])
        for label, run_dir in zip(run_labels(run_dirs), run_dirs, strict=True)
    }


def aggregate_recall(table: pd.DataFrame, groups: dict[str, tuple[str, int]]):
    """(whole-person curves per group with `bits_low`, `bits_high`, `n_seeds`; the summary per group
    and fraction with an interval for every number; the summary of every run). `table` is
    `recall_curves`' output, `groups` maps its runs to (group, seed)."""
    whole = table[table["attribute"] == "all"].assign(
        group=table["run"].map(lambda run: groups[run][0]), seed=table["run"].map(lambda run: groups[run][1])
    )
    curves = aggregate_seeds(whole, [*GROUP_KEYS, "depth"], ["bits"])
    constants = whole.groupby(GROUP_KEYS, sort=False)[["ceiling_bits", "chance_bits", "budget"]].first()
    curves = curves.merge(constants.reset_index(), on=GROUP_KEYS).assign(attribute="all")
    curves["run"] = curves["group"]
    per_run = summary_table(whole).merge(whole.drop_duplicates("run")[["run", "group"]], on="run")
    numbers = [c for c in per_run.columns if c.startswith(("K=", "mean K", "min"))]
    summary = aggregate_seeds(per_run, ["group", "schedule", "fraction"], numbers)
    return curves, summary, per_run
