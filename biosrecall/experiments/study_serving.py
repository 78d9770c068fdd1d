"""Adaptive-depth serving of a study's final checkpoints on every seed, judged as two claims per schedule.

    headline, figures, rows = serve_study(out_dir, frontier, main_runs)  # frontier: eval.serving.score_runs
    rows = serving_claims(frontier, names)      # names: frontier run label -> (schedule name, seed)
    summary = serving_summary(frontier, names)  # per schedule over seeds; exit_summary.csv/.md

`biosrecall figure1` scores the exit criteria of `biosrecall.eval.serving` on the 100% checkpoint of
every main run (each schedule on each seed), writes the frontier and headline tables, the frontier
figure (one line per schedule and criterion kind, the mean over seeds with a 95% band) and the
per-schedule summary over seeds (`exit_summary.csv`/`.md`, what the README shows), and adds two
rows per schedule to claims.csv, judged over seeds like the others (`biosrecall.experiments.claims`):

- `serving_pays_<name>`: the best realisable criterion reaches 95% of the run's best fixed-depth
  recall with fewer FLOPs per query than the cheapest fixed depth that does. The metric is the ratio
  of the two costs (below 1: the criterion pays). A seed on which no criterion reaches the target is
  charged the deepest fixed depth, where every criterion stops at the latest: serving it costs that.
- `oracle_headroom_<name>`: the oracle (each query at its shallowest correct depth, not realisable)
  recalls more than the best fixed depth: the headroom a per-query depth could ever win.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from pathlib import Path

import pandas as pd

from biosrecall.atomic import atomic_write_text
from biosrecall.eval.serving import BASELINE, RECALL_SHARE, headline_table, write_serving_results
from biosrecall.experiments.claims import Claim, judge_claims
from biosrecall.experiments.study import FIXED_FIRST, FIXED_K4, UNIFORM
from biosrecall.outputs import interval_cell, markdown_columns, write_table
from biosrecall.stats import seed_interval

SUMMARY_NAME = "exit_summary"
"""Per schedule over seeds: the headline and both claims' metrics (`serving_summary`; .csv, .md)."""
PAYS_THRESHOLD = 1.0
"""The serving claim holds when the whole interval of adaptive / fixed FLOPs per query is below 1."""
HEADROOM_THRESHOLD = 0.0
"""The oracle claim holds when the whole interval of oracle minus best fixed-depth bits is above 0."""
SPOKEN = {FIXED_K4: "fixed K=4", FIXED_FIRST: "fixed-first", UNIFORM: "uniform"}
"""How the statements name the main runs, as the other claims do."""


def serve_study(out_dir: Path, frontier: pd.DataFrame, main_runs: Iterable):
    """Write the serving results of the study's `main_runs` (`biosrecall.sweep.jobs.SweepRun`s) from
    their final checkpoints' `frontier` (its `run` the run names, `seed<S>/<label>`, as in the recall
    tables) into `out_dir`; returns (headline, figure files, the claims rows)."""
    figures, headline = write_serving_results(out_dir, frontier)
    names = {run.name: (run.labels["name"], run.config.seed) for run in main_runs}
    summary = serving_summary(frontier, names)
    write_table(summary, Path(out_dir) / SUMMARY_NAME)
    atomic_write_text(Path(out_dir) / f"{SUMMARY_NAME}.md", markdown_columns(summary, SUMMARY_COLUMNS))
    return headline, figures, serving_claims(frontier, names)


def serving_summary(frontier: pd.DataFrame, names: Mapping[str, tuple[str, int]]) -> pd.DataFrame:
    """Per schedule name, over seeds (mean, and `_low`/`_high` of the 95% interval where it matters):
    the best fixed-depth bits; the cheapest fixed depth reaching 95% of them and its FLOPs per query;
    the best realisable criterion (the one chosen on most seeds, and on how many) with its mean depth
    and FLOPs; their cost ratio (the `serving_pays` claim's metric); the oracle's mean depth and its
    headroom over the best fixed depth (the `oracle_headroom` claim's metric)."""
    per_seed = _per_seed(frontier, names).set_index("run")
    rows = []
    for name in dict.fromkeys(name for name, _ in names.values()):
        seeds = per_seed.loc[[run for run, (n, _) in names.items() if n == name and run in per_seed.index]]
        chosen = seeds["adaptive_criterion"].replace("", "none").value_counts()
        row = {"name": name, "schedule": SPOKEN.get(name, name), "n_seeds": len(seeds)}
        for column in (
            "best_bits",
            "fixed_depth",
            "fixed_flops",
            "adaptive_mean_depth",
            "adaptive_flops",
            "oracle_mean_depth",
        ):
            row[column] = float(seeds[column].mean())
        row["criterion"], row["criterion_seeds"] = chosen.index[0], int(chosen.iloc[0])
        for column in ("best_bits", "ratio", "headroom"):
            interval = seed_interval(seeds[column])
            row |= {column: interval.mean, f"{column}_low": interval.low, f"{column}_high": interval.high}
        rows.append(row)
    return pd.DataFrame(rows)


def _per_seed(frontier: pd.DataFrame, names: Mapping[str, tuple[str, int]]) -> pd.DataFrame:
    """One row per run of `names` the frontier serves: its headline, schedule name and seed, and both
    claims' metrics (`ratio`, `headroom`)."""
    headline = headline_table(frontier).set_index("run")
    return pd.DataFrame(
        [
            {
                **headline.loc[run],
                "run": run,
                "name": names[run][0],
                "seed": names[run][1],
                "ratio": _cost_ratio(rows, headline.loc[run]),
                "headroom": _headroom(rows),
            }
            for run, rows in frontier.groupby("run", sort=False)
            if run in names
        ]
    )


SUMMARY_COLUMNS = {
    "schedule": "{schedule}",
    "seeds": "{n_seeds}",
    "best fixed-depth bits": interval_cell("best_bits"),
    f"cheapest fixed depth at {RECALL_SHARE:.0%}: depth, MFLOPs": lambda row: (
        f"{row['fixed_depth']:.2f}, {row['fixed_flops'] / 1e6:.3g}"
    ),
    "best realisable criterion (seeds chosen): depth, MFLOPs": lambda row: (
        f"{row['criterion']} ({row['criterion_seeds']}/{row['n_seeds']}): "
        f"{row['adaptive_mean_depth']:.2f}, {row['adaptive_flops'] / 1e6:.3g}"
    ),
    "criterion / fixed FLOPs": interval_cell("ratio", "{:.2f}"),
    "oracle: depth, bits over best fixed": lambda row: (
        f"{row['oracle_mean_depth']:.2f}, " + interval_cell("headroom")(row)
    ),
}
"""exit_summary.md: the serving summary, FLOPs in millions per query."""


def serving_claims(frontier: pd.DataFrame, names: Mapping[str, tuple[str, int]]) -> pd.DataFrame:
    """The two claims rows of every schedule name, in claims.csv's columns, from a frontier table."""
    per_seed = _per_seed(frontier, names)
    if per_seed.empty:
        return pd.DataFrame()
    share, claims = f"{RECALL_SHARE:.0%}", []
    for name in dict.fromkeys(name for name, _ in names.values()):
        spoken = SPOKEN.get(name, name)
        claims.append(
            Claim(
                f"serving_pays_{name}",
                f"At 100%, an exit criterion serves {spoken} with fewer FLOPs per query than a fixed depth",
                f"best realisable criterion / cheapest fixed depth, FLOPs per query to reach {share} of the "
                "run's best fixed-depth recall",
                False,
                PAYS_THRESHOLD,
                "a criterion pays only if it costs less than the fixed depth it replaces; the interval over "
                "seeds carries the uncertainty",
                _of(name, "ratio"),
            )
        )
        claims.append(
            Claim(
                f"oracle_headroom_{name}",
                f"At 100%, the oracle depth recalls more than the best fixed depth of {spoken}",
                "oracle minus best fixed-depth recall, bits per person",
                True,
                HEADROOM_THRESHOLD,
                "the headroom of per-query depth: the most any exit criterion could gain",
                _of(name, "headroom"),
            )
        )
    return judge_claims(per_seed, claims)


def _of(name: str, column: str):
    """One seed's value of `column` for schedule `name` (NaN where the seed has no such run)."""

    def measure(rows: pd.DataFrame) -> float:
        part = rows.loc[rows["name"] == name, column]
        return float(part.iloc[0]) if len(part) else math.nan

    return measure


def _cost_ratio(rows: pd.DataFrame, headline: pd.Series) -> float:
    """Adaptive / fixed FLOPs per query at the headline's target; the deepest fixed depth's cost when
    no realisable criterion reaches it; NaN when the run recalls nothing (no target to reach)."""
    fixed = float(headline["fixed_flops"])
    if not headline["best_bits"] > 0 or math.isnan(fixed):
        return math.nan
    adaptive = float(headline["adaptive_flops"])
    if math.isnan(adaptive):
        adaptive = float(rows.loc[rows["kind"] == BASELINE, "flops_per_query"].max())
    return adaptive / fixed


def _headroom(rows: pd.DataFrame) -> float:
    oracle = rows.loc[rows["kind"] == "oracle", "bits"]
    best = rows.loc[rows["kind"] == BASELINE, "bits"].max()
    return float(oracle.iloc[0]) - float(best) if len(oracle) else math.nan
