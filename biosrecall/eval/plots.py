"""Figure-1 style recall curves: recalled bits per person (or per-attribute recall) against serving depth.

Input is the long-format table of `biosrecall.eval.curves` (columns run, schedule, fraction, budget,
depth, attribute, recall, bits, ceiling_bits, chance_bits). One panel per budget fraction, x = serving
depth on a log2 axis, one line per run labelled by its schedule; every schedule keeps one colour, marker
and line style across panels, so the figure also reads in black-and-white print. The task ceiling is
dashed, the chance level dotted, and the training range (K <= 16) shaded.

    fig = plot_recall_curves(table)                            # ceiling and chance taken from the table
    fig = plot_recall_curves(table, metric="attribute")        # recall per attribute: fractions x attributes
    save_figure(fig, "recall-curve/recall_curve")              # biosrecall.outputs: .png and .pdf

Figures are built without pyplot (no global state, any backend); in a notebook, display the returned
`Figure` directly.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import FixedLocator, NullLocator

from biosrecall.errors import BiosrecallError
from biosrecall.outputs import COLORS, MARKERS, save_figure
from biosrecall.stats import seed_interval
from biosrecall.train.layout import SWITCH

METRICS = ("bits", "attribute")
TRAINING_DEPTH = 16
# Dashed and dotted are taken by the ceiling and chance lines, so schedules use other patterns.
LINESTYLES = ("-", "-.", (0, (8, 2)), (0, (4, 1, 1, 1, 1, 1)), (0, (12, 3, 2, 3)))
REFERENCE_COLOR = "0.25"
TRAINING_SHADE = "0.92"


def format_flops(flops: float) -> str:
    """1.234e15 -> "1.23e15"."""
    return f"{flops:.3g}".replace("e+", "e")


def line_labels(table: pd.DataFrame) -> dict[str, str]:
    """Legend label per run: its schedule, plus the run name where several runs share a schedule."""
    runs = table.drop_duplicates("run")[["run", "schedule"]]
    shared = runs["schedule"].duplicated(keep=False)
    return {
        run: f"{schedule} ({run})" if is_shared else schedule
        for run, schedule, is_shared in zip(runs["run"], runs["schedule"], shared, strict=True)
    }


def curve_styles(labels) -> dict[str, dict]:
    """One (colour, marker, line style) per label, in order, consistent across every panel."""
    return {
        label: {
            "color": COLORS[i % len(COLORS)],
            "marker": MARKERS[i % len(MARKERS)],
            "linestyle": LINESTYLES[i % len(LINESTYLES)],
        }
        for i, label in enumerate(dict.fromkeys(labels))
    }


def budget_title(table: pd.DataFrame) -> str:
    """ "matched budget 1.2e15 FLOPs", or the list of budgets when the runs do not share one."""
    budgets = sorted(b for b in table["budget"].dropna().unique())
    if not budgets:
        return "budget unknown"
    if np.allclose(budgets, budgets[0], rtol=1e-6):
        return f"matched budget {format_flops(budgets[0])} FLOPs"
    return "budgets differ: " + ", ".join(format_flops(b) for b in budgets) + " FLOPs"


def fraction_title(table: pd.DataFrame, fraction: float) -> str:
    """ "45% of budget", or "switch (62% of budget)" for a panel of switch checkpoints only."""
    text = f"{fraction:.0%} of budget"
    if "checkpoint" in table and (table.loc[table["fraction"] == fraction, "checkpoint"] == SWITCH).all():
        return f"switch ({text})"
    return text


def _depth_axis(ax, max_depth: int, training_depth: int) -> None:
    """log2 serving-depth axis from 1 to max_depth, ticks at powers of two, training range shaded."""
    ax.set_xscale("log", base=2)
    ax.set_xlim(1, max(max_depth, 2))
    ticks = [2**i for i in range(int(np.log2(max(max_depth, 2))) + 1)]
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xticklabels([str(t) for t in ticks])
    ax.axvspan(1, min(training_depth, max(max_depth, 2)), color=TRAINING_SHADE, zorder=0, lw=0)
    ax.grid(True, which="major", color="0.9", lw=0.6)
    ax.set_xlabel("serving depth K")


def _power_of_two_marks(depths: np.ndarray) -> list[int]:
    """Markers only at K = 1, 2, 4, ...: 64 markers on a log axis would pile up at large K."""
    return [i for i, d in enumerate(depths) if d >= 1 and (int(d) & (int(d) - 1)) == 0]


def _draw_runs(ax, rows: pd.DataFrame, value: str, labels: dict, styles: dict) -> None:
    """One line per run; a band where the table has `<value>_low` / `_high` (an interval over seeds);
    a thin line for a control run (`role` == "control"), which is a reference, not a contender."""
    for run, curve in rows.groupby("run", sort=False):
        curve = curve.sort_values("depth")
        depths = curve["depth"].to_numpy()
        label = labels[run]
        control = "role" in curve and (curve["role"] == "control").all()
        # Unclipped, so the markers at K = 1 and K = max sit whole on the panel's edges.
        ax.plot(
            depths,
            curve[value].to_numpy(),
            label=label,
            lw=0.9 if control else 1.6,
            ms=3 if control else 5,
            clip_on=False,
            zorder=3,
            markevery=_power_of_two_marks(depths),
            **styles[label],
        )
        low, high = f"{value}_low", f"{value}_high"
        if low in curve and curve[low].notna().any():
            # A t interval is unbounded; recall is not, so the band stops at 0 and the line's ceiling.
            top = curve["ceiling_bits"].to_numpy() if value == "bits" else 1.0
            band = np.clip(curve[low], 0, top), np.clip(curve[high], 0, top)
            ax.fill_between(depths, *band, color=styles[label]["color"], alpha=0.12, lw=0, zorder=2)


def _draw_references(ax, ceilings, chances) -> None:
    for ceiling in ceilings:
        ax.axhline(ceiling, color=REFERENCE_COLOR, linestyle="--", lw=1.0, zorder=1)
    for chance in chances:
        ax.axhline(chance, color=REFERENCE_COLOR, linestyle=":", lw=1.3, zorder=1)


def _legend_handles(
    styles: dict, ceiling_text: str, chance_text: str, training_depth: int, seeds=None
) -> list:
    handles = [Line2D([], [], lw=1.6, ms=5, label=label, **style) for label, style in styles.items()]
    if seeds:
        handles.append(Line2D([], [], color="0.6", alpha=0.4, lw=8, label=f"95% interval over {seeds} seeds"))
    handles += [
        Line2D([], [], color=REFERENCE_COLOR, linestyle="--", lw=1.0, label=ceiling_text),
        Line2D([], [], color=REFERENCE_COLOR, linestyle=":", lw=1.3, label=chance_text),
        Line2D([], [], color=TRAINING_SHADE, lw=8, label=f"training depths (K \u2264 {training_depth})"),
    ]
    return handles


def _seed_count(table: pd.DataFrame) -> str | None:
    """ "3" (or "2-3") when the table aggregates seeds with intervals, else None."""
    if "n_seeds" not in table or not table["bits_low"].notna().any():
        return None
    low, high = int(table["n_seeds"].min()), int(table["n_seeds"].max())
    return str(low) if low == high else f"{low}-{high}"


def _unique(values) -> list[float]:
    return sorted({round(float(v), 9) for v in values})


def _plot_bits(fig: Figure, table, ceiling, chance, training_depth: int) -> None:
    whole = table[table["attribute"] == "all"]
    fractions = sorted(whole["fraction"].unique())
    ceilings = [ceiling] if ceiling is not None else _unique(whole["ceiling_bits"])
    chances = [chance] if chance is not None else _unique(whole["chance_bits"])
    labels = line_labels(table)
    styles = curve_styles(labels.values())
    max_depth = int(whole["depth"].max())
    axes = fig.subplots(1, len(fractions), sharey=True, squeeze=False)[0]
    for ax, fraction in zip(axes, fractions, strict=True):
        _depth_axis(ax, max_depth, training_depth)
        _draw_references(ax, ceilings, chances)
        _draw_runs(ax, whole[whole["fraction"] == fraction], "bits", labels, styles)
        ax.set_title(fraction_title(whole, fraction))
        ax.set_ylim(0, max(ceilings) * 1.06)
    axes[0].set_ylabel("recalled bits per person")
    ceiling_text = "task ceiling (" + " / ".join(f"{c:.2f}" for c in ceilings) + " bits)"
    chance_text = "chance (" + " / ".join(f"{c:.2f}" for c in chances) + " bits)"
    fig.legend(
        handles=_legend_handles(styles, ceiling_text, chance_text, training_depth, _seed_count(whole)),
        loc="outside lower center",
        ncol=3,
        frameon=False,
        fontsize="small",
    )
    contenders = whole[whole["role"] != "control"] if "role" in whole else whole
    fig.suptitle(f"Recalled bits per person vs serving depth, {budget_title(contenders)}")


def _attribute_panel(ax, parts: pd.DataFrame, fraction: float, attribute: str, context: dict) -> None:
    """One attribute at one fraction: share of facts recalled against depth."""
    _depth_axis(ax, context["max_depth"], context["training_depth"])
    rows = parts[parts["attribute"] == attribute]
    # In recall units the chance level is chance_bits / ceiling_bits (about 1/|pool|).
    _draw_references(ax, [1.0], _unique(rows["chance_bits"] / rows["ceiling_bits"]))
    _draw_runs(ax, rows[rows["fraction"] == fraction], "recall", context["labels"], context["styles"])
    ax.set_ylim(0, 1.06)


def _plot_attributes(fig: Figure, table, training_depth: int) -> None:
    parts = table[table["attribute"] != "all"]
    fractions = sorted(parts["fraction"].unique())
    attributes = list(dict.fromkeys(parts["attribute"]))
    labels = line_labels(table)
    context = {
        "labels": labels,
        "styles": curve_styles(labels.values()),
        "max_depth": int(parts["depth"].max()),
        "training_depth": training_depth,
    }
    axes = fig.subplots(len(fractions), len(attributes), sharex=True, sharey=True, squeeze=False)
    for row, fraction in enumerate(fractions):
        for col, attribute in enumerate(attributes):
            _attribute_panel(axes[row, col], parts, fraction, attribute, context)
            if row == 0:
                axes[row, col].set_title(attribute.replace("_", " "), fontsize="medium")
            if row < len(fractions) - 1:
                axes[row, col].set_xlabel("")
        axes[row, 0].set_ylabel(f"{fraction_title(parts, fraction)}\nshare of facts recalled")
    fig.legend(
        handles=_legend_handles(context["styles"], "all facts recalled", "chance level", training_depth),
        loc="outside lower center",
        ncol=3,
        frameon=False,
        fontsize="small",
    )
    fig.suptitle(f"Recall per attribute vs serving depth, {budget_title(table)}")


def plot_recall_curves(
    table: pd.DataFrame,
    ceiling: float | None = None,
    chance: float | None = None,
    out_path: str | Path | None = None,
    metric: str = "bits",
    training_depth: int = TRAINING_DEPTH,
) -> Figure:
    """Draw the recall curves; `ceiling` / `chance` (bits) default to the table's values.

    `metric="bits"`: one panel per budget fraction. `metric="attribute"`: a grid of fractions (rows)
    by attributes (columns) showing the share of facts recalled. With `out_path`, also saves PNG + PDF.
    """
    if metric not in METRICS:
        raise BiosrecallError(f"unknown metric {metric!r} (use {' or '.join(METRICS)})")
    if table.empty:
        raise BiosrecallError("nothing to plot: the recall table is empty")
    fractions = table["fraction"].nunique()
    if metric == "bits":
        fig = Figure(figsize=(0.6 + 4.2 * fractions, 4.4), layout="constrained")
        _plot_bits(fig, table, ceiling, chance, training_depth)
    else:
        attributes = table.loc[table["attribute"] != "all", "attribute"].nunique()
        fig = Figure(figsize=(0.6 + 2.5 * attributes, 0.9 + 2.5 * fractions), layout="constrained")
        _plot_attributes(fig, table, training_depth)
    if out_path is not None:
        save_figure(fig, out_path)
    return fig


EXIT_KINDS = ("fixed-depth", "fixed", "kl", "stable", "entropy", "latent", "accel", "gate", "oracle")


def _seed_groups(rows: pd.DataFrame) -> pd.Series:
    """The line each frontier row belongs to: its run label without a leading `seed<S>/`, so the
    seeds of one study run (`biosrecall figure1`) share a line."""
    return rows["run"].str.replace(r"^seed\d+/", "", regex=True)


def _draw_frontier(ax, rows: pd.DataFrame, run_styles: dict) -> None:
    """One line per run (the mean over its seeds) and criterion kind, its thresholds sorted by cost,
    with a 95% band over seeds where there are several; the run keeps its colour, the kind its line
    style and marker; the oracle is a lone star."""
    rows = rows.assign(line=_seed_groups(rows))
    for (run, kind), line in rows.groupby(["line", "kind"], sort=False):
        points = line.groupby("criterion", sort=False).agg(
            flops=("flops_per_query", "mean"), bits=("bits", "mean"),
            bits_list=("bits", list),
        ).sort_values("flops")  # fmt: skip
        kind_index = EXIT_KINDS.index(kind) if kind in EXIT_KINDS else len(EXIT_KINDS)
        style = {
            "color": run_styles[run]["color"],
            "marker": "*" if kind == "oracle" else MARKERS[kind_index % len(MARKERS)],
            "linestyle": "none" if kind == "oracle" else LINESTYLES[kind_index % len(LINESTYLES)],
            "lw": 2.0 if kind == "fixed-depth" else 1.3,
        }
        ax.plot(points["flops"], points["bits"], ms=5, label=f"{run}: {kind}", **style)
        bands = [seed_interval(values) for values in points["bits_list"]]
        if kind != "oracle" and all(band.n > 1 for band in bands):
            low, high = [band.low for band in bands], [band.high for band in bands]
            ax.fill_between(points["flops"], low, high, color=style["color"], alpha=0.12, lw=0)


def plot_exit_frontier(frontier: pd.DataFrame) -> Figure:
    """Recalled bits per person against modeled FLOPs per query, one panel per budget fraction: the
    fixed-depth curve of each run as the baseline and one line per exit criterion kind, the seeds of
    a study run averaged with a 95% band (the table of `biosrecall.eval.serving.exit_frontier`)."""
    if frontier.empty:
        raise BiosrecallError("nothing to plot: the exit frontier table is empty")
    fractions = sorted(frontier["fraction"].unique())
    run_styles = curve_styles(_seed_groups(frontier).unique())
    fig = Figure(figsize=(1.0 + 4.6 * len(fractions), 4.8), layout="constrained")
    axes = fig.subplots(1, len(fractions), sharey=True, squeeze=False)[0]
    for ax, fraction in zip(axes, fractions, strict=True):
        _draw_frontier(ax, frontier[frontier["fraction"] == fraction], run_styles)
        ax.set_xscale("log")
        ax.set_xlabel("modeled forward FLOPs per query")
        ax.set_title(f"{fraction:.0%} of budget")
        ax.grid(True, which="major", color="0.9", lw=0.6)
    axes[0].set_ylabel("recalled bits per person")
    handles, labels = axes[0].get_legend_handles_labels()
    # Labels read "run: criterion" and are long; two columns per panel keep them inside the figure,
    # and the figure grows by the legend's rows so the panels keep their size.
    columns = 2 * len(fractions)
    fig.set_size_inches(fig.get_figwidth(), 4.8 + 0.2 * -(-len(labels) // columns))
    fig.legend(handles, labels, loc="outside lower center", ncol=columns, frameon=False, fontsize="small")
    fig.suptitle("Recall vs compute when the model chooses its depth")
    return fig
