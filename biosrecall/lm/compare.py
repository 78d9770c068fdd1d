"""Figure-2 style comparison of evaluated LM runs against a uniform-depth reference run.

    table, curves = compare_runs(["runs/uniform", "runs/ff-k2-0.67", "runs/curriculum"])
    write_comparison(table, curves, "figures/lm-200m")
    # CLI: biosrecall lm compare RUN... --out figures/lm-200m [--reference runs/uniform]

Every run must have been evaluated (`biosrecall lm eval`). Per run, at its final evaluated checkpoint:
mean serving-depth NLL, NLL at the smallest and largest serving depth (K = 1 and K = 16 by default),
modeled training FLOPs (the trainer's running total from the one FLOP account) and wall-clock
seconds, each also relative to the reference: by default the `uniform:1-16` run that spent the most
FLOPs (the full uniform run rather than a compute-matched one).

Writes OUT/lm_compare.csv and .parquet, and two figures as PNG and PDF (`biosrecall.outputs`): NLL
against serving depth (one line per run) and mean serving-depth NLL against modeled training compute
(one line per run through its evaluated checkpoints; a single point when only the final one was
evaluated). Runs also scored with per-token exit (`biosrecall lm eval --exit`) at that final
checkpoint add OUT/lm_exit.csv and .parquet (their `nll_exit` rows) and a third figure,
nll_vs_exit_depth: NLL against mean depth, each run's fixed-depth curve as a line and its exit
criteria as points.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure

from biosrecall.errors import BiosrecallError
from biosrecall.lm.evaluate import BASELINE, read_exit_table, read_table, summarize
from biosrecall.outputs import COLORS, MARKERS, save_figure, write_table

UNIFORM = "uniform:1-16"


def compare_runs(run_dirs: Sequence[str | Path], reference: str | Path | None = None):
    """(comparison table in the order given, per-depth rows of each run's final checkpoint, and the
    summary of every evaluated checkpoint)."""
    if not run_dirs:
        raise BiosrecallError("give at least one evaluated run")
    tables = [read_table(run) for run in run_dirs]
    names = [str(run) for run in run_dirs]
    for name, table in zip(names, tables, strict=True):
        table["run"] = name  # the path as given: folder names alone may repeat across sweeps
    everything = pd.concat(tables, ignore_index=True)
    summaries = summarize(everything)
    final = summaries.loc[summaries.groupby("run", sort=False)["update"].idxmax()].set_index("run")
    final = final.loc[names]
    ref = _reference(final, None if reference is None else str(reference))
    table = _relative(final, ref)
    curves = everything.merge(final.reset_index()[["run", "checkpoint"]], on=["run", "checkpoint"])
    _check_same_depths(curves)
    return table, curves, summaries


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
    if reference is not None:
        if reference not in final.index:
            raise BiosrecallError(f"the reference {reference} is not among the compared runs")
        return reference
    uniform = final[final["schedule"] == UNIFORM]
    if uniform.empty:
        raise BiosrecallError(f"no {UNIFORM} run among the runs; pass --reference RUN")
    return str(uniform["flops"].idxmax())


def _relative(final: pd.DataFrame, ref: str) -> pd.DataFrame:
    """Add the columns relative to the reference run (ratios, and savings / differences in %)."""
    base = final.loc[ref]
    table = final.reset_index()
    table["reference"] = table["run"] == ref
    table["mean_nll_vs_ref_pct"] = 100 * (table["mean_nll"] / base["mean_nll"] - 1)
    table["compute_vs_ref"] = table["flops"] / base["flops"]
    table["compute_saving_pct"] = 100 * (1 - table["compute_vs_ref"])
    table["wall_vs_ref"] = table["wall_seconds"] / base["wall_seconds"]
    table["wall_saving_pct"] = 100 * (1 - table["wall_vs_ref"])
    return table.drop(columns=["checkpoint"])


def format_table(table: pd.DataFrame) -> str:
    """The comparison as aligned text (what `lm compare` prints)."""
    nll_columns = [c for c in table.columns if c.startswith("nll_k")]
    shown = table[
        ["run", "schedule", "update", "mean_nll", *nll_columns, "mean_nll_vs_ref_pct", "flops"]
        + ["compute_saving_pct", "wall_seconds", "wall_saving_pct"]
    ].copy()
    shown["run"] = [
        f"{run} *" if ref else run for run, ref in zip(table["run"], table["reference"], strict=True)
    ]
    formats = {c: "{:.5f}".format for c in ["mean_nll", *nll_columns]}
    formats.update(
        mean_nll_vs_ref_pct="{:+.2f}%".format,
        flops="{:.3e}".format,
        compute_saving_pct="{:.1f}%".format,
        wall_seconds="{:.0f}".format,
        wall_saving_pct="{:.1f}%".format,
    )
    text = shown.to_string(index=False, formatters=formats)
    return text + "\n* reference; savings are 1 - run / reference, NLL difference is run / reference - 1"


def _labels(frame: pd.DataFrame, order: Sequence[str]) -> dict[str, str]:
    """Legend label per run in `order` (so a run keeps its colour and marker in both figures)."""
    runs = frame.drop_duplicates("run").set_index("run").loc[list(order)].reset_index()[["run", "schedule"]]
    shared = runs["schedule"].duplicated(keep=False)
    return {
        run: f"{schedule} ({Path(run).name})" if repeat else schedule
        for run, schedule, repeat in zip(runs["run"], runs["schedule"], shared, strict=True)
    }


def plot_nll_vs_depth(curves: pd.DataFrame, order: Sequence[str]) -> Figure:
    """Validation NLL against serving depth, one line per run (its final checkpoint)."""
    fig = Figure(figsize=(7.5, 4.5), layout="constrained")
    ax = fig.add_subplot()
    for index, (run, label) in enumerate(_labels(curves, order).items()):
        rows = curves[curves["run"] == run].sort_values("depth")
        style = {"color": COLORS[index % len(COLORS)], "marker": MARKERS[index % len(MARKERS)]}
        ax.plot(rows["depth"], rows["nll"], label=label, markersize=4, linewidth=1.2, **style)
    ax.set_xticks(sorted(curves["depth"].unique()))
    ax.set_xlabel("serving depth K")
    ax.set_ylabel("validation NLL (nats / token)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return fig


def plot_nll_vs_compute(summaries: pd.DataFrame, order: Sequence[str]) -> Figure:
    """Mean serving-depth NLL against modeled training FLOPs, one line per run through its checkpoints."""
    fig = Figure(figsize=(7.5, 4.5), layout="constrained")
    ax = fig.add_subplot()
    for index, (run, label) in enumerate(_labels(summaries, order).items()):
        # The switch checkpoint can coincide with a budget fraction: one point per update.
        rows = summaries[summaries["run"] == run].drop_duplicates("update").sort_values("flops")
        style = {"color": COLORS[index % len(COLORS)], "marker": MARKERS[index % len(MARKERS)]}
        ax.plot(rows["flops"], rows["mean_nll"], label=label, markersize=5, linewidth=1.2, **style)
    ax.set_xlabel("modeled training compute (FLOPs)")
    ax.set_ylabel("mean serving-depth NLL")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return fig


def exit_rows(curves: pd.DataFrame) -> pd.DataFrame:
    """The per-token exit rows of each compared run's final checkpoint (empty when none has them)."""
    tables = []
    for run, checkpoint in curves[["run", "checkpoint"]].drop_duplicates().itertuples(index=False):
        table = read_exit_table(run)
        if table is not None and (table["checkpoint"] == checkpoint).any():
            tables.append(table[table["checkpoint"] == checkpoint].assign(run=run))
    return pd.concat(tables, ignore_index=True) if tables else pd.DataFrame()


def plot_nll_vs_exit_depth(exits: pd.DataFrame, order: Sequence[str]) -> Figure:
    """Validation NLL against mean depth per token: each run's fixed-depth curve as a line (its colour)
    and each exit criterion kind as points joined by a dashed line."""
    fig = Figure(figsize=(7.5, 4.5), layout="constrained")
    ax = fig.add_subplot()
    shown = [run for run in order if run in set(exits["run"])]
    for index, (run, label) in enumerate(_labels(exits, shown).items()):
        color = COLORS[index % len(COLORS)]
        for kind_index, (kind, rows) in enumerate(exits[exits["run"] == run].groupby("kind", sort=False)):
            rows = rows.sort_values("mean_depth")
            style = {"linestyle": "-", "marker": None} if kind == BASELINE else {
                "linestyle": "--", "marker": MARKERS[kind_index % len(MARKERS)]}  # fmt: skip
            name = f"{label}: {'fixed depth' if kind == BASELINE else kind}"
            ax.plot(rows["mean_depth"], rows["nll"], color=color, label=name, markersize=5, **style)
    ax.set_xlabel("mean block iterations per token")
    ax.set_ylabel("validation NLL (nats / token)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return fig


def write_comparison(
    table: pd.DataFrame, curves: pd.DataFrame, summaries: pd.DataFrame, out_dir
) -> list[Path]:
    """The comparison table (CSV + parquet) and both figures under `out_dir`; returns the files written."""
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise BiosrecallError(f"output path {out_dir} exists and is not a folder")
    written = write_table(table, out_dir / "lm_compare")
    order = table["run"].tolist()
    written += save_figure(plot_nll_vs_depth(curves, order), out_dir / "nll_vs_depth")
    written += save_figure(plot_nll_vs_compute(summaries, order), out_dir / "nll_vs_compute")
    exits = exit_rows(curves)
    if not exits.empty:
        written += write_table(exits, out_dir / "lm_exit")
        written += save_figure(plot_nll_vs_exit_depth(exits, order), out_dir / "nll_vs_exit_depth")
    return written
