"""The capacity study's figure: stored bits against people, per serving depth and measure.

    fig = plot_capacity(summary)      # summary: `capacity_results.summarize`; saved as capacity.png/.pdf

One panel per serving depth (columns) and measure (rows: exact-match, loss bound), one line per
model with its 95% band over seeds (a baseline, which has one depth, dashed in every panel), the
ceiling (every fact stored) and the lines of 1 and 2 bits per parameter of the looped model.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import NullLocator

from biosrecall.eval.plots import legend_below
from biosrecall.experiments.figure1_results import study_label
from biosrecall.outputs import COLORS, MARKERS


def plot_capacity(summary: pd.DataFrame):
    """Stored bits against people: a row per measure, a column per serving depth (module doc)."""

    depths = sorted(summary.loc[summary["kind"] == "looped", "depth"].unique()) or [1]
    fig = Figure(figsize=(0.8 + 3.4 * len(depths), 6.6), layout="constrained")
    axes = fig.subplots(2, len(depths), sharex=True, sharey="row", squeeze=False)  # depths compare
    names = list(dict.fromkeys(summary["name"]))
    people = sorted(int(n) for n in summary["people"].unique())
    styles = {name: (COLORS[i % len(COLORS)], MARKERS[i % len(MARKERS)]) for i, name in enumerate(names)}
    for row, (measure, title) in enumerate(
        (("exact_bits", "exact-match"), ("loss_bound_bits", "loss bound"))
    ):
        for col, depth in enumerate(depths):
            ax = axes[row][col]
            for name in names:
                _draw_model(ax, summary, name, measure, depth, styles[name])
            _draw_references(ax, summary)
            ax.set_title(f"K = {depth}, {title}", fontsize=9)
            ax.set_xscale("log", base=2)
            ax.set_xticks(people, [str(n) for n in people], minor=False)
            ax.xaxis.set_minor_locator(NullLocator())  # the counts themselves are the only ticks
            ax.set_yscale("symlog", linthresh=10)
            ax.margins(y=0.08)  # keeps the 2-bits line off the frame
            if row == 1:
                ax.set_xlabel("people")
            if col == 0:
                ax.set_ylabel("stored bits")
    handles, labels = axes[0][0].get_legend_handles_labels()
    legend_below(fig, handles, 4, labels=labels)
    seeds = int(summary["n_seeds"].max()) if "n_seeds" in summary else 1
    bands = f", mean over {seeds} seeds with 95% bands" if seeds > 1 else ""
    fig.suptitle(f"Stored bits against people{bands}")
    return fig


def _draw_model(ax, summary: pd.DataFrame, name: str, measure: str, depth: int, style) -> None:
    """One model's mean over seeds with its interval shaded; a baseline at its one depth."""
    part = summary[summary["name"] == name]
    baseline = (part["kind"] == "baseline").all()
    part = part.sort_values("people") if baseline else part[part["depth"] == depth].sort_values("people")
    color, marker = style
    label = f"{study_label(name)} (one depth)" if baseline else study_label(name)
    ax.plot(part["people"], part[measure], color=color, marker=marker, ms=4, lw=1.4, label=label,
            ls="--" if baseline else "-")  # fmt: skip
    low, high = part[f"{measure}_low"].to_numpy(float), part[f"{measure}_high"].to_numpy(float)
    if measure == "exact_bits":
        # A t interval is unbounded; a count of recalled facts is not (the loss bound can go below 0).
        low = np.clip(low, 0, None)
    if not np.isnan(low).all():
        ax.fill_between(part["people"], low, high, color=color, alpha=0.15, lw=0)


def _draw_references(ax, summary: pd.DataFrame) -> None:
    """The ceiling (everything stored) and 1 and 2 bits per parameter of the looped model."""
    ceiling = summary.drop_duplicates("people").sort_values("people")
    ax.plot(ceiling["people"], ceiling["ceiling_bits"], color="0.25", ls=(0, (1, 1)), lw=1, label="ceiling")
    looped = summary.loc[summary["kind"] == "looped", "parameters"]
    parameters = int(looped.iloc[0]) if len(looped) else int(summary["parameters"].iloc[0])
    for bits, style, words in ((1, (0, (6, 3)), "1 bit"), (2, (0, (2, 2, 6, 2)), "2 bits")):
        label = f"{words} per parameter (looped model, {parameters:,} parameters)"
        ax.axhline(bits * parameters, color="0.45", ls=style, lw=1, label=label)
