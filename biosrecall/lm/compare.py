"""Figure-2 style comparison of evaluated LM runs against a uniform-depth reference run, aggregated
over seeds where a run was trained with several.

    comparison = compare_runs(["runs/uniform", "runs/ff-k2-0.67", "runs/curriculum"])
    comparison = compare_runs(["runs/1b/uniform", "runs/1b/ff-k4"], aggregate_seeds=True)  # RUN/seed*/
    write_comparison(comparison, "figures/lm-200m")
    # CLI: biosrecall lm compare RUN... --out figures/lm-200m [--reference RUN] [--aggregate-seeds]

Every run must have been evaluated (`biosrecall lm eval`). Per run, at its final evaluated checkpoint:
mean serving-depth NLL, NLL at the smallest and largest serving depth (K = 1 and K = 16 by default),
modeled training FLOPs (the trainer's running total from the one FLOP account) and wall-clock
seconds, each also relative to the reference: by default the `uniform:1-16` run that spent the most
FLOPs (the full uniform run rather than a compute-matched one).

Seeds (`aggregate_seeds`): a RUN argument may stand for a folder of runs that differ only in the seed.
Grouping is explicit (`expand_groups`): with `aggregate_seeds`, a RUN argument that is not a run folder
itself stands for the run folders directly inside it (one per seed, e.g. RUN/seed0, RUN/seed1); a run
folder given directly is a group of one. Without it, every argument must be a run folder and is its
own group. A group's runs must differ in nothing but the seed
(`biosrecall.train.seed_replicates.check_replicates`, the check `recall-curve --aggregate-seeds`
applies too). Every number is then the mean over those seeds with its 95% t interval
(`biosrecall.stats`; columns `<name>_low`, `<name>_high`) and `n_seeds`; a single run is a group of
one (no interval). A relative number is computed per seed against the reference's
mean over its seeds, so its interval is the run's seed spread; the reference's own spread is its row.
The members of a group must have the same final evaluated checkpoint.

Writes OUT/lm_compare.csv and .parquet, and two figures as PNG and PDF (`biosrecall.outputs`): NLL
against serving depth (one line per run) and mean serving-depth NLL against modeled training compute
(one line per run through its evaluated checkpoints); several seeds draw the mean with a shaded 95%
band. Runs also scored with per-token exit (`biosrecall lm eval --exit`) at that final checkpoint add
OUT/lm_exit.csv and .parquet and the figure nll_vs_exit_depth. Runs scored on lm-eval tasks
(`biosrecall lm harness`) at that checkpoint add OUT/lm_harness.csv and .parquet (one row per run,
task, metric and serving depth) and the figure harness_vs_depth: the NLL curve next to one panel per
task and metric.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd

from biosrecall.atomic import OutputRecord, replace_files
from biosrecall.errors import BiosrecallError
from biosrecall.lm import compare_plots as plots
from biosrecall.lm.evaluate import EXIT_TABLE, read_eval_table, read_table, summarize
from biosrecall.lm.harness import TABLE as HARNESS_TABLE
from biosrecall.outputs import save_figure, write_table
from biosrecall.stats import aggregate_seeds
from biosrecall.train.run_folder import CONFIG_FILE, fraction_of
from biosrecall.train.seed_replicates import check_replicates

RECORD = OutputRecord("lm compare", "lm_compare.parquet")
"""What marks a comparison's files in a folder as `lm compare`'s: its table, always written."""

UNIFORM = "uniform:1-16"
RELATIVE = ("mean_nll_vs_ref_pct", "compute_vs_ref", "compute_saving_pct", "wall_vs_ref", "wall_saving_pct")
_RUN_VALUES = ("update", "flops", "train_tokens", "wall_seconds", "mean_nll")


class Comparison(NamedTuple):
    """What `lm compare` reports; every number is a mean over seeds with `_low`, `_high`, `n_seeds`."""

    table: pd.DataFrame  # one row per run (group): final checkpoint, relative to the reference
    curves: pd.DataFrame  # run, schedule, depth: NLL of the final checkpoint
    summaries: pd.DataFrame  # run, schedule, checkpoint: every evaluated checkpoint
    exits: pd.DataFrame  # run, schedule, criterion, kind, parameter: NLL and depth with per-token exit
    harness: pd.DataFrame  # run, schedule, task, metric, depth: lm-eval scores (value, stderr)


def compare_runs(
    run_dirs: Sequence[str | Path], reference: str | Path | None = None, aggregate_seeds: bool = False
) -> Comparison:
    """Read, check and aggregate the evaluations of `run_dirs` (module doc), in the order given."""
    if not run_dirs:
        raise BiosrecallError("give at least one evaluated run")
    groups = expand_groups(run_dirs, aggregate_seeds)
    member_of = {str(m): label for label, members in groups.items() for m in members}
    tables = [read_table(member).assign(run=member) for member in member_of]
    for label, members in groups.items():
        check_replicates(label, members)
    everything = pd.concat(tables, ignore_index=True)
    summaries = summarize(everything)  # per member run and checkpoint
    final = _final_checkpoints(summaries).loc[list(member_of)].reset_index()
    final.insert(0, "group", final["run"].map(member_of))
    _check_same_final(final)
    curves = everything.merge(final[["run", "checkpoint"]], on=["run", "checkpoint"])
    _check_same_depths(curves)
    ref = _reference(final, None if reference is None else str(reference))
    return Comparison(
        table=_run_table(_relative(final, ref), ref),
        curves=_by_group(curves, member_of, ["depth"], ["nll"]),
        summaries=_checkpoint_table(summaries, member_of),
        exits=_exit_table(final, member_of),
        harness=_harness_table(final, member_of),
    )


def expand_groups(arguments: Sequence[str | Path], aggregate: bool) -> dict[str, list[Path]]:
    """Group label (the argument as given) -> its run folders (module doc); a run folder may be in one
    group only, once (an argument given twice is refused the same way)."""
    groups: dict[str, list[Path]] = {}
    owner: dict[Path, str] = {}
    for argument in arguments:
        label, folder = str(argument), Path(argument)
        members = [folder]
        if aggregate and not (folder / CONFIG_FILE).is_file():
            members = (
                sorted(p for p in folder.iterdir() if (p / CONFIG_FILE).is_file()) if folder.is_dir() else []
            )
            if not members:
                raise BiosrecallError(
                    f"{label} is neither a run folder nor a folder of seed runs (no */{CONFIG_FILE} inside)"
                )
        for member in members:
            if member.resolve() in owner:
                raise BiosrecallError(
                    f"{member} is compared twice (in {owner[member.resolve()]} and {label})"
                )
            owner[member.resolve()] = label
        groups[label] = members
    return groups


def _final_checkpoints(summaries: pd.DataFrame) -> pd.DataFrame:
    """Each run's last evaluated checkpoint, indexed by run: the largest update, and of checkpoints at
    the same update (a short run's 0.8 and 1.0) the largest fraction."""
    fraction = summaries["checkpoint"].map(lambda label: fraction_of(label) or 0.0)
    ordered = summaries.assign(_fraction=fraction).sort_values(["update", "_fraction"], kind="stable")
    return ordered.groupby("run", sort=False).tail(1).drop(columns="_fraction").set_index("run")


def _by_group(frame: pd.DataFrame, member_of: dict, keys: list[str], values: list[str]) -> pd.DataFrame:
    """`frame` (one row per member run) aggregated over the members of each group."""
    frame = frame.assign(run=frame["run"].map(member_of))
    return aggregate_seeds(frame, ["run", "schedule", *keys], values)


def _check_same_final(final: pd.DataFrame) -> None:
    """Seeds are only comparable at the same point of training."""
    for group, rows in final.groupby("group", sort=False):
        if rows["checkpoint"].nunique() > 1:
            found = ", ".join(f"{r.run}: {r.checkpoint}" for r in rows.itertuples(index=False))
            raise BiosrecallError(
                f"cannot aggregate {group} over seeds: their last evaluated checkpoints differ ({found}); "
                "evaluate every seed at the same checkpoints"
            )


def _check_same_depths(curves: pd.DataFrame) -> None:
    """Mean NLLs over different serving depths are not comparable: refuse the mix."""
    depths = curves.groupby("run", sort=False)["depth"].apply(lambda d: tuple(sorted(d)))
    if depths.nunique() > 1:
        spans = ", ".join(f"{run}: K={d[0]}..{d[-1]}" for run, d in depths.items())
        raise BiosrecallError(
            f"the runs were evaluated at different serving depths ({spans}); "
            "evaluate them with the same --max-depth"
        )


def _reference(final: pd.DataFrame, reference: str | None) -> str:
    """The reference group's label."""
    groups = final.groupby("group", sort=False)
    if reference is not None:
        if reference not in groups.groups:
            raise BiosrecallError(f"the reference {reference} is not among the compared runs")
        return reference
    uniform = final[final["schedule"] == UNIFORM]
    if uniform.empty:
        raise BiosrecallError(f"no {UNIFORM} run among the runs; pass --reference RUN")
    return str(uniform.groupby("group", sort=False)["flops"].mean().idxmax())


def _relative(final: pd.DataFrame, ref: str) -> pd.DataFrame:
    """Per member run, the columns relative to the reference's mean over its seeds (ratios, and
    savings / differences in %)."""
    base = final[final["group"] == ref][["mean_nll", "flops", "wall_seconds"]].mean()
    table = final.copy()
    table["mean_nll_vs_ref_pct"] = 100 * (table["mean_nll"] / base["mean_nll"] - 1)
    table["compute_vs_ref"] = table["flops"] / base["flops"]
    table["compute_saving_pct"] = 100 * (1 - table["compute_vs_ref"])
    table["wall_vs_ref"] = table["wall_seconds"] / base["wall_seconds"]
    table["wall_saving_pct"] = 100 * (1 - table["wall_vs_ref"])
    return table


def _nll_columns(frame: pd.DataFrame) -> list[str]:
    return [c for c in frame.columns if c.startswith("nll_k") and c[5:].isdigit()]


def _run_table(final: pd.DataFrame, ref: str) -> pd.DataFrame:
    """One row per group: each number's mean, interval and the seed count; `reference` marks ref."""
    values = [*_RUN_VALUES, *_nll_columns(final), *RELATIVE]
    frame = final.drop(columns=["run"]).rename(columns={"group": "run"})
    table = aggregate_seeds(frame, ["run", "schedule"], values)
    table.insert(2, "reference", table["run"] == ref)
    return table


def _checkpoint_table(summaries: pd.DataFrame, member_of: dict) -> pd.DataFrame:
    """Every evaluated checkpoint of every group (the compute figure's points)."""
    values = ["update", "flops", "train_tokens", "wall_seconds", "mean_nll", *_nll_columns(summaries)]
    members = summaries[summaries["run"].isin(member_of)]
    return _by_group(members, member_of, ["checkpoint"], values)


def _final_rows(name: str, final: pd.DataFrame) -> pd.DataFrame:
    """The rows of each member's eval table `name` (where it has one) at its final NLL checkpoint."""
    tables = []
    for run, schedule, checkpoint in final[["run", "schedule", "checkpoint"]].itertuples(index=False):
        table = read_eval_table(run, name)
        if table is not None and (table["checkpoint"] == checkpoint).any():
            rows = table[table["checkpoint"] == checkpoint]
            tables.append(rows.assign(run=run, schedule=schedule))
    return pd.concat(tables, ignore_index=True) if tables else pd.DataFrame()


def _exit_table(final: pd.DataFrame, member_of: dict) -> pd.DataFrame:
    """The per-token exit rows of each group's final checkpoint (empty when no run has them)."""
    rows = _final_rows(EXIT_TABLE, final)
    if rows.empty:
        return rows
    return _by_group(rows, member_of, ["criterion", "kind", "parameter"], ["nll", "mean_depth", "p95_depth"])


def _harness_table(final: pd.DataFrame, member_of: dict) -> pd.DataFrame:
    """The lm-eval rows of each group's final checkpoint (empty when no run has them); `stderr` is
    the mean over seeds of lm-eval's own standard error of each seed's score."""
    rows = _final_rows(HARNESS_TABLE, final)
    if rows.empty:
        return rows
    keys = ["task", "metric", "depth"]
    table = _by_group(rows, member_of, keys, ["value"])
    stderr = _by_group(rows, member_of, keys, ["stderr"])[["run", *keys, "stderr"]]
    table = table.merge(stderr, on=["run", *keys], how="left")
    place = {label: index for index, label in enumerate(dict.fromkeys(member_of.values()))}
    by_place = lambda column: column.map(place) if column.name == "run" else column  # noqa: E731
    return table.sort_values(["run", "task", "metric", "depth"], key=by_place, ignore_index=True)


def _plus_minus(table: pd.DataFrame, column: str, fmt: str) -> list[str]:
    """`mean ± half-width` of the 95% interval (`mean` alone without one)."""
    cells = []
    for mean, high in zip(table[column], table[f"{column}_high"], strict=True):
        text = format(mean, fmt)
        cells.append(text if np.isnan(high) else f"{text} ± {format(high - mean, fmt.lstrip('+'))}")
    return cells


def format_table(table: pd.DataFrame) -> str:
    """The comparison as aligned text (what `lm compare` prints)."""
    formats = {"mean_nll": ".5f", **dict.fromkeys(_nll_columns(table), ".5f"), "mean_nll_vs_ref_pct": "+.2f"}
    formats.update(flops=".3e", compute_saving_pct=".1f", wall_seconds=".0f", wall_saving_pct=".1f")
    marked = [f"{run} *" if ref else run for run, ref in zip(table["run"], table["reference"], strict=True)]
    shown = pd.DataFrame({"run": marked, "schedule": table["schedule"], "seeds": table["n_seeds"]})
    shown["update"] = [f"{u:.0f}" for u in table["update"]]
    for column, fmt in formats.items():
        shown[column] = _plus_minus(table, column, fmt)
    for column in ("mean_nll_vs_ref_pct", "compute_saving_pct", "wall_saving_pct"):
        shown[column] = [f"{cell}%" for cell in shown[column]]
    text = shown.to_string(index=False)
    note = "\n* reference; savings are 1 - run / reference, NLL difference is run / reference - 1"
    if (table["n_seeds"] > 1).any():
        note += "\n± half-width of the 95% t interval over seeds; relative numbers are per seed against the reference's mean"
    return text + note


def format_harness(harness: pd.DataFrame) -> str:
    """The lm-eval scores as aligned text, one row per run, task, metric and depth."""
    shown = harness[["run", "task", "metric", "depth", "n_seeds"]].copy()
    shown["value"] = _plus_minus(harness, "value", ".4f")
    shown["lm-eval stderr"] = ["" if np.isnan(s) else f"{s:.4f}" for s in harness["stderr"]]
    return shown.to_string(index=False)


def write_comparison(comparison: Comparison, out_dir) -> list[Path]:
    """The comparison tables (CSV + parquet) and figures under `out_dir`, renamed into place together
    once all are written (`replace_files`: a full disk leaves an earlier comparison whole, and files of
    the same names that no comparison wrote are refused); returns the files written."""

    out_dir = Path(out_dir)
    with replace_files(out_dir, RECORD) as stage:  # refuses an OUT that is a file
        written = write_table(comparison.table, stage / "lm_compare")
        order = comparison.table["run"].tolist()
        written += save_figure(plots.plot_nll_vs_depth(comparison.curves, order), stage / "nll_vs_depth")
        written += save_figure(
            plots.plot_nll_vs_compute(comparison.summaries, order), stage / "nll_vs_compute"
        )
        if not comparison.exits.empty:
            written += write_table(comparison.exits, stage / "lm_exit")
            figure = plots.plot_nll_vs_exit_depth(comparison.exits, order)
            written += save_figure(figure, stage / "nll_vs_exit_depth")
        if not comparison.harness.empty:
            written += write_table(comparison.harness, stage / "lm_harness")
            figure = plots.plot_harness_vs_depth(comparison.harness, comparison.curves, order)
            written += save_figure(figure, stage / "harness_vs_depth")
    return [out_dir / path.name for path in written]
