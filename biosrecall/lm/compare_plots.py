"""The figures of `lm compare` (`biosrecall.lm.compare`), drawn from its seed-aggregated tables.

    fig = plot_nll_vs_depth(comparison.curves, order)        # then biosrecall.outputs.save_figure
    plot_nll_vs_compute(comparison.summaries, order)
    plot_nll_vs_exit_depth(comparison.exits, order)
    plot_harness_vs_depth(comparison.harness, comparison.curves, order)

Each run keeps one colour and marker (its place in `order`) in every figure. A value with a 95%
interval over seeds (`<value>_low`, `<value>_high`) is drawn as its mean with a shaded band, and the
legend gives the seed count; a single seed has no interval and draws the line alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import NullLocator

from biosrecall.eval.plots import curve_styles, draw_curve, figure_grid, legend_below, schedule_label
from biosrecall.lm.evaluate import BASELINE
from biosrecall.outputs import MARKERS

BAND_ALPHA = 0.2


def _labels(frame: pd.DataFrame, order: Sequence[str]) -> dict[str, str]:
    """Legend label per run in `order` (so a run keeps its colour and marker in every figure): its
    schedule in words, its folder's name where runs share a schedule, and its seed count."""
    schedules = frame.drop_duplicates("run").set_index("run")["schedule"]
    schedules = schedules[[run for run in order if run in schedules.index]]
    shared = schedules.duplicated(keep=False)
    seeds = frame.groupby("run")["n_seeds"].max() if "n_seeds" in frame else pd.Series()
    labels = {}
    for run, schedule in schedules.items():
        label = f"{schedule_label(schedule)} ({Path(run).name})" if shared[run] else schedule_label(schedule)
        labels[run] = f"{label}, {seeds[run]} seeds" if seeds.get(run, 1) > 1 else label
    return labels


def _line(ax, rows: pd.DataFrame, x: str, y: str, **style) -> None:
    """`y` against `x` through `rows`, with its seed band where it has one."""
    low, high = rows.get(f"{y}_low"), rows.get(f"{y}_high")
    draw_curve(ax, rows[x], rows[y], low, high, alpha=BAND_ALPHA, markersize=4, linewidth=1.2, **style)


def _draw_lines(ax, frame: pd.DataFrame, order: Sequence[str], x: str, y: str) -> None:
    """One line per run of `frame`, in the colour and marker of its place in `order`."""
    styles = curve_styles(order, linestyles=("-",))
    for run, label in _labels(frame, order).items():
        _line(ax, frame[frame["run"] == run].sort_values(x), x, y, label=label, **styles[run])


def _depth_axis(ax, depths) -> None:
    """A log2 axis ticked at the depths evaluated: on a linear one K = 1, 2, 4 crowd into one label."""
    ticks = sorted({int(d) for d in depths})
    if len(ticks) > 1 and ticks[0] >= 1:
        ax.set_xscale("log", base=2)
        ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xticks(ticks, [str(t) for t in ticks])


def _finish(ax, xlabel: str, ylabel: str, legend: bool = True) -> None:
    """Axis labels and grid; the legend goes under the panels, where it covers no curve."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    if legend:
        legend_below(ax.figure)


def _draw_nll_vs_depth(ax, curves: pd.DataFrame, order: Sequence[str]) -> None:
    _draw_lines(ax, curves, order, "depth", "nll")
    _depth_axis(ax, curves["depth"])
    _finish(ax, "serving depth K", "validation NLL (nats / token)")


def plot_nll_vs_depth(curves: pd.DataFrame, order: Sequence[str]) -> Figure:
    """Validation NLL against serving depth, one line per run (its final checkpoint)."""
    fig, axes = figure_grid(1, 1, 7.5, 4.5)
    _draw_nll_vs_depth(axes[0, 0], curves, order)
    return fig


def plot_nll_vs_compute(summaries: pd.DataFrame, order: Sequence[str]) -> Figure:
    """Mean serving-depth NLL against modeled training FLOPs, one line per run through its checkpoints."""
    fig, axes = figure_grid(1, 1, 7.5, 4.5)
    # The switch checkpoint can coincide with a budget fraction: one point per update.
    _draw_lines(axes[0, 0], summaries.drop_duplicates(["run", "update"]), order, "flops", "mean_nll")
    _finish(axes[0, 0], "modeled training compute (FLOPs)", "mean serving-depth NLL")
    return fig


def plot_nll_vs_exit_depth(exits: pd.DataFrame, order: Sequence[str]) -> Figure:
    """Validation NLL against mean depth per token: each run's fixed-depth curve as a line (its colour)
    and each exit criterion kind as points joined by a dashed line."""
    fig, axes = figure_grid(1, 1, 7.5, 4.5)
    ax = axes[0, 0]
    kinds = list(dict.fromkeys(exits["kind"]))
    styles = {
        kind: {"linestyle": "-", "marker": None}
        if kind == BASELINE
        else {"linestyle": "--", "marker": MARKERS[i % len(MARKERS)]}
        for i, kind in enumerate(kinds)
    }
    labels = _labels(exits, order)
    colors = {run: style["color"] for run, style in curve_styles(order).items()}
    for run in labels:
        for kind, rows in exits[exits["run"] == run].groupby("kind", sort=False):
            _line(ax, rows.sort_values("mean_depth"), "mean_depth", "nll", color=colors[run], **styles[kind])
    _finish(ax, "mean block iterations per token", "validation NLL (nats / token)", legend=False)
    # Colour names the run and marker the criterion: runs + kinds entries, not runs x kinds.
    handles = [Line2D([], [], color=colors[run], lw=1.2, label=label) for run, label in labels.items()]
    for kind in kinds:
        name = "fixed depth" if kind == BASELINE else f"criterion: {kind}"
        handles.append(Line2D([], [], color="0.4", lw=1.2, markersize=4, label=name, **styles[kind]))
    legend_below(fig, handles)
    return fig


def plot_harness_vs_depth(harness: pd.DataFrame, curves: pd.DataFrame, order: Sequence[str]) -> Figure:
    """Validation NLL against serving depth, next to one panel per lm-eval task and metric."""
    panels = list(harness[["task", "metric"]].drop_duplicates().itertuples(index=False))
    columns = min(3, len(panels) + 1)
    rows_count = -(-(len(panels) + 1) // columns)
    fig, grid = figure_grid(rows_count, columns, 4.2 * columns, 3.4 * rows_count)
    axes = grid.flatten()
    _draw_nll_vs_depth(axes[0], curves, order)
    for ax, (task, metric) in zip(axes[1:], panels, strict=False):
        shown = harness[(harness["task"] == task) & (harness["metric"] == metric)]
        _draw_lines(ax, shown, order, "depth", "value")
        _depth_axis(ax, shown["depth"])
        ax.set_title(task, fontsize=9)
        _finish(ax, "serving depth K", metric, legend=False)  # the NLL panel's legend names every run
    for ax in axes[len(panels) + 1 :]:
        ax.set_visible(False)
    return fig
