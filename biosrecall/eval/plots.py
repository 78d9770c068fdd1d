"""Figure-1 style recall curves: recalled bits per person (or per-attribute recall) against serving depth.

Input is the long-format table of `biosrecall.eval.curves` (columns run, schedule, fraction, budget,
depth, attribute, recall, bits, ceiling_bits, chance_bits). One panel per budget fraction, x = serving
depth on a log2 axis, one line per run labelled by its schedule in words (`schedule_label`: "fixed-first
(K0=4, 80%)"); every schedule keeps one colour, marker and line style across panels, so the figure also
reads in black-and-white print. The task ceiling is dashed, the chance level dotted, and the training
range (K <= 16) shaded; a model scored at one depth gets an axis of that depth alone. Every figure
fits its canvas: a legend takes as many columns as fit the width (`legend_below`) and a title too
long for one line takes two (`fit_suptitle`); tests/test_figures_fit.py checks each figure.
`plot_exit_frontier` draws the serving frontier, a panel per schedule.

Every figure of the package (the LM comparison's, the budget sweep's, the capacity study's) is set up
by the helpers here: `figure_grid` (the panels), `curve_styles` (a colour, marker and line style per
line from the palette of `biosrecall.outputs`), `draw_curve` (a line with its band over seeds),
`log2_axis`, `legend_below`, and the ceiling and chance lines' styles (`CEILING_LINE`, `CHANCE_LINE`).

    fig = plot_recall_curves(table)                            # ceiling and chance taken from the table
    fig = plot_recall_curves(table, metric="attribute")        # recall per attribute: fractions x attributes
    save_figure(fig, "recall-curve/recall_curve")              # biosrecall.outputs: .png and .pdf

Figures are built without pyplot (no global state, any backend). In a notebook, run `%matplotlib
inline` once (it registers the image display of a `Figure`; without pyplot nothing else does), then
display the returned `Figure`.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.legend_handler import HandlerTuple
from matplotlib.lines import Line2D
from matplotlib.patches import Patch, Rectangle
from matplotlib.ticker import FixedLocator, NullLocator

from biosrecall.compute import schedules as kinds
from biosrecall.errors import BiosrecallError
from biosrecall.eval.recall import RECALL_SHARE
from biosrecall.outputs import COLORS, MARKERS, save_figure
from biosrecall.recall_options import METRICS
from biosrecall.train.run_folder import SWITCH

if TYPE_CHECKING:
    from matplotlib.legend import Legend

TRAINING_DEPTH = 16
# Dashed and dotted are taken by the ceiling and chance lines, so schedules use other patterns.
LINESTYLES = ("-", "-.", (0, (8, 2)), (0, (4, 1, 1, 1, 1, 1)), (0, (12, 3, 2, 3)))
REFERENCE_COLOR = "0.25"
CEILING_LINE = {"color": REFERENCE_COLOR, "linestyle": "--", "lw": 1.0}
CHANCE_LINE = {"color": REFERENCE_COLOR, "linestyle": ":", "lw": 1.3}
GRID = {"color": "0.9", "lw": 0.6}
TRAINING_SHADE = "0.92"


def format_flops(flops: float) -> str:
    """1.234e15 -> "1.23e15"."""
    return f"{flops:.3g}".replace("e+", "e")


def schedule_label(spec) -> str:
    """A schedule's spec in words: "fixed K=4", "uniform K=1-16", "fixed-first (K0=4, 80%)" (the finish
    named only when it is not uniform over K=1-16). Text that is not a schedule, such as a Hugging Face
    model type, is returned as it is."""

    try:
        schedule = kinds.parse_schedule(str(spec))
    except BiosrecallError:
        return str(spec)
    if isinstance(schedule, kinds.Fixed):
        return f"fixed K={schedule.k}"
    if isinstance(schedule, kinds.Uniform):
        return f"uniform K={schedule.lo}-{schedule.hi}"
    if isinstance(schedule, kinds.PoissonLognormal):
        return f"Poisson-lognormal (mean {schedule.mean:g})"
    if isinstance(schedule, kinds.Curriculum):
        return f"curriculum (mean {schedule.mean:g}, warm-up {schedule.warmup:.0%})"
    parts = [f"K0={schedule.k0}", f"{schedule.switch:.0%}"]
    finish = schedule.finish
    if isinstance(finish, kinds.Uniform) and (finish.lo, finish.hi) != (1, TRAINING_DEPTH):
        parts.append(f"then K={finish.lo}-{finish.hi}")
    elif isinstance(finish, kinds.PoissonLognormal):
        parts.append(f"then Poisson-lognormal mean {finish.mean:g}")
    return f"fixed-first ({', '.join(parts)})"


def line_labels(table: pd.DataFrame) -> dict[str, str]:
    """Legend label per run: its schedule in words, plus what tells it apart where several runs share
    a schedule: "update-matched" for that control (the run it controls keeps the plain label), the run
    name for any other."""
    runs = table.drop_duplicates("run")[["run", "schedule"]]
    labels = {}
    for schedule, part in runs.groupby("schedule", sort=False):
        controls = {run for run in part["run"] if "update_matched" in run}
        for run in part["run"]:
            label = schedule_label(schedule)
            if run in controls:
                label += " (update-matched)"
            elif len(part) - len(controls) > 1:
                label += f" ({run})"
            labels[run] = label
    return {run: labels[run] for run in runs["run"]}


def figure_renderer(fig: Figure):
    """A renderer that measures the figure's text as it will be drawn (pyplot-free figures have none)."""
    if not hasattr(fig.canvas, "get_renderer"):
        FigureCanvasAgg(fig)
    return fig.canvas.get_renderer()


def legend_below(fig: Figure, handles: list | None = None, max_columns: int = 3, **options) -> Legend:
    """The figure's legend under its panels, in as many columns (up to `max_columns`) as fit its width;
    a figure too narrow for even one column is widened to hold it, and the figure grows by the
    legend's height, so that a long legend (a 16-run study) does not squash the panels above it.
    Without `handles`, the labelled lines of the first panel."""
    if handles is None:
        handles, options["labels"] = fig.axes[0].get_legend_handles_labels()
    renderer = figure_renderer(fig)
    room = fig.get_figwidth() - 0.2  # inches: constrained layout's own margins
    options = {"loc": "outside lower center", "frameon": False, "fontsize": "small", **options}
    for columns in range(max(1, min(max_columns, len(handles))), 0, -1):
        legend = fig.legend(handles=handles, ncol=columns, **options)
        width = legend.get_window_extent(renderer).width / fig.dpi
        if width <= room or columns == 1:
            break
        legend.remove()
    if width > room:
        fig.set_figwidth(width + 0.3)
    fig.set_figheight(fig.get_figheight() + legend.get_window_extent(renderer).height / fig.dpi)
    return legend


def fit_suptitle(fig: Figure, head: str, detail: str = "") -> None:
    """`head, detail` as the figure's title, on two lines where one would not fit the figure's width."""
    title = fig.suptitle(f"{head}, {detail}" if detail else head)
    width = title.get_window_extent(figure_renderer(fig)).width / fig.dpi
    if detail and width > fig.get_figwidth() - 0.2:
        title.set_text(f"{head}\n{detail}")


def curve_styles(labels, linestyles=LINESTYLES) -> dict[str, dict]:
    """One (colour, marker, line style) per label, in order, consistent across every panel and every
    figure of a study (`linestyles=("-",)`: solid lines, told apart by colour and marker alone)."""
    return {
        label: {
            "color": COLORS[i % len(COLORS)],
            "marker": MARKERS[i % len(MARKERS)],
            "linestyle": linestyles[i % len(linestyles)],
        }
        for i, label in enumerate(dict.fromkeys(labels))
    }


def figure_grid(rows: int, columns: int, width: float, height: float, **options) -> tuple[Figure, np.ndarray]:
    """A figure of `rows` x `columns` panels (always a 2-d array of axes) laid out to fit its canvas."""
    fig = Figure(figsize=(width, height), layout="constrained")
    return fig, fig.subplots(rows, columns, squeeze=False, **options)


def log2_axis(ax, ticks) -> None:
    """A log2 x axis ticked and labelled at `ticks` alone (depths, people counts): matplotlib's own
    ticks on a base-2 axis would write 2^n, and its minor ticks would crowd the labels."""
    ax.set_xscale("log", base=2)
    ax.set_xticks(ticks, [str(t) for t in ticks])
    ax.xaxis.set_minor_locator(NullLocator())


def draw_curve(ax, x, y, low=None, high=None, *, alpha: float = 0.15, **line) -> None:
    """A line through (`x`, `y`) and, under it in its colour, the 95% interval over seeds from `low` to
    `high`: none where they hold no value (one seed has no interval)."""
    drawn = ax.plot(x, y, **line)[0]
    if low is not None and np.isfinite(np.asarray(low, dtype=float)).any():
        color, zorder = drawn.get_color(), drawn.get_zorder() - 1
        ax.fill_between(x, low, high, color=color, alpha=alpha, lw=0, zorder=zorder)


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


def _depth_axis(ax, depths, training_depth: int | None) -> None:
    """log2 serving-depth axis from 1 to the deepest depth, ticks at powers of two, training range
    shaded (`training_depth` None: not a looped model's, nothing shaded). A model scored at one depth
    gets an axis of that depth alone."""
    depths = sorted({int(d) for d in depths})
    ax.grid(True, which="major", **GRID)
    if len(depths) == 1:
        ax.set_xlim(depths[0] - 1, depths[0] + 1)
        ax.xaxis.set_major_locator(FixedLocator(depths))
        ax.set_xlabel("serving depth K (one depth)")
        return
    max_depth = depths[-1]
    log2_axis(ax, [2**i for i in range(int(np.log2(max_depth)) + 1)])
    ax.set_xlim(1, max_depth)
    if training_depth is not None:
        ax.axvspan(1, min(training_depth, max_depth), color=TRAINING_SHADE, zorder=0, lw=0)
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
        control = "role" in curve and (curve["role"] == "control").all()
        band = [None, None]
        if f"{value}_low" in curve:
            # A t interval is unbounded; recall is not, so the band stops at 0 and the line's ceiling.
            top = curve["ceiling_bits"].to_numpy() if value == "bits" else 1.0
            band = [np.clip(curve[f"{value}_{end}"], 0, top) for end in ("low", "high")]
        line = {"label": labels[run], "markevery": _power_of_two_marks(depths), **styles[labels[run]]}
        line.update({"lw": 0.9, "ms": 3} if control else {"lw": 1.6, "ms": 5})
        # Unclipped, so the markers at K = 1 and K = max sit whole on the panel's edges.
        draw_curve(ax, depths, curve[value], *band, alpha=0.12, clip_on=False, zorder=3, **line)


def _draw_references(ax, ceilings, chances) -> None:
    for ceiling in ceilings:
        ax.axhline(ceiling, zorder=1, **CEILING_LINE)
    for chance in chances:
        ax.axhline(chance, zorder=1, **CHANCE_LINE)


class _Bands(tuple):
    """The interval swatch: one patch per schedule colour side by side, as the bands are drawn, so it
    cannot be read as the grey training-depth shading."""

    def get_label(self) -> str:
        return self.label


def _recall_legend(
    fig: Figure,
    styles: dict,
    ceiling_text: str,
    chance_text: str,
    training_depth: int | None,
    seeds=None,
    max_columns: int = 3,
) -> None:
    """The legend under a recall figure: a line per schedule, the seed bands' swatch (with `seeds`),
    the ceiling and chance lines and the training-depth shading."""
    handles = [Line2D([], [], lw=1.6, ms=5, label=label, **style) for label, style in styles.items()]
    if seeds:
        bands = [Patch(color=style["color"], alpha=0.25, lw=0) for style in styles.values()]
        handles.append(_Bands(bands))
        handles[-1].label = f"95% interval over {seeds} seeds"
    handles += [
        Line2D([], [], label=ceiling_text, **CEILING_LINE),
        Line2D([], [], label=chance_text, **CHANCE_LINE),
    ]
    if training_depth is not None:
        shade = Patch(color=TRAINING_SHADE, lw=0, label=f"training depths (K \u2264 {training_depth})")
        handles.append(shade)
    legend_below(fig, handles, max_columns, handler_map={_Bands: HandlerTuple(ndivide=None, pad=0)})


def _seed_count(table: pd.DataFrame) -> str | None:
    """ "3" (or "2-3") when the table aggregates seeds with intervals, else None."""
    if "n_seeds" not in table or not table["bits_low"].notna().any():
        return None
    low, high = int(table["n_seeds"].min()), int(table["n_seeds"].max())
    return str(low) if low == high else f"{low}-{high}"


def _unique(values) -> list[float]:
    return sorted({round(float(v), 9) for v in values})


def _plot_bits(table, ceiling, chance, training_depth: int | None) -> Figure:
    whole = table[table["attribute"] == "all"]
    fractions = sorted(whole["fraction"].unique())
    # One panel alone gets more width: its legend and title need it more than a pair of panels do.
    width = 0.6 + 4.2 * len(fractions) if len(fractions) > 1 else 5.6
    fig, axes = figure_grid(1, len(fractions), width, 4.4, sharey=True)
    ceilings = [ceiling] if ceiling is not None else _unique(whole["ceiling_bits"])
    chances = [chance] if chance is not None else _unique(whole["chance_bits"])
    labels = line_labels(table)
    styles = curve_styles(labels.values())
    for ax, fraction in zip(axes[0], fractions, strict=True):
        _depth_axis(ax, whole["depth"], training_depth)
        _draw_references(ax, ceilings, chances)
        _draw_runs(ax, whole[whole["fraction"] == fraction], "bits", labels, styles)
        ax.set_title(fraction_title(whole, fraction))
        ax.set_ylim(0, max(ceilings) * 1.06)
    axes[0, 0].set_ylabel("recalled bits per person")
    ceiling_text = "task ceiling (" + " / ".join(f"{c:.2f}" for c in ceilings) + " bits)"
    chance_text = "chance (" + " / ".join(f"{c:.2f}" for c in chances) + " bits)"
    _recall_legend(fig, styles, ceiling_text, chance_text, training_depth, _seed_count(whole))
    contenders = whole[whole["role"] != "control"] if "role" in whole else whole
    fit_suptitle(fig, "Recalled bits per person vs serving depth", budget_title(contenders))
    return fig


def _plot_attributes(table, training_depth: int | None) -> Figure:
    parts = table[table["attribute"] != "all"]
    fractions = sorted(parts["fraction"].unique())
    attributes = list(dict.fromkeys(parts["attribute"]))
    labels = line_labels(table)
    styles = curve_styles(labels.values())
    width, height = 0.6 + 2.5 * len(attributes), 0.9 + 2.5 * len(fractions)
    fig, axes = figure_grid(len(fractions), len(attributes), width, height, sharex=True, sharey=True)
    for row, fraction in enumerate(fractions):
        for col, attribute in enumerate(attributes):
            # One attribute at one fraction: the share of facts recalled against depth.
            ax, rows = axes[row, col], parts[parts["attribute"] == attribute]
            _depth_axis(ax, parts["depth"], training_depth)
            # In recall units the chance level is chance_bits / ceiling_bits (about 1/|pool|).
            _draw_references(ax, [1.0], _unique(rows["chance_bits"] / rows["ceiling_bits"]))
            _draw_runs(ax, rows[rows["fraction"] == fraction], "recall", labels, styles)
            ax.set_ylim(0, 1.06)
            if row == 0:
                ax.set_title(attribute.replace("_", " "), fontsize="medium")
            if row < len(fractions) - 1:
                ax.set_xlabel("")
        axes[row, 0].set_ylabel(f"{fraction_title(parts, fraction)}\nshare of facts recalled")
    _recall_legend(fig, styles, "all facts recalled", "chance level", training_depth, max_columns=4)
    fit_suptitle(fig, "Recall per attribute vs serving depth", budget_title(table))
    return fig


def plot_recall_curves(
    table: pd.DataFrame,
    ceiling: float | None = None,
    chance: float | None = None,
    out_path: str | Path | None = None,
    metric: str = "bits",
    training_depth: int | None = TRAINING_DEPTH,
) -> Figure:
    """Draw the recall curves; `ceiling` / `chance` (bits) default to the table's values.

    `metric="bits"`: one panel per budget fraction. `metric="attribute"`: a grid of fractions (rows)
    by attributes (columns) showing the share of facts recalled. `training_depth=None` shades no
    training range (a model that is not looped). With `out_path`, also saves PNG + PDF.
    """
    if metric not in METRICS:
        raise BiosrecallError(f"unknown metric {metric!r} (use {' or '.join(METRICS)})")
    if table.empty:
        raise BiosrecallError("nothing to plot: the recall table is empty")
    if metric == "bits":
        fig = _plot_bits(table, ceiling, chance, training_depth)
    else:
        fig = _plot_attributes(table, training_depth)
    if out_path is not None:
        save_figure(fig, out_path)
    return fig


EXIT_KINDS = ("fixed-depth", "fixed", "kl", "stable", "entropy", "latent", "accel", "gate", "oracle")
FIXED_DEPTH = "fixed-depth"
FIXED_DEPTH_LINE = {"color": "0.15", "lw": 1.0, "marker": "o", "ms": 2.5}
# Okabe-Ito by criterion kind; black stays the fixed-depth curve's and the oracle's, yellow the region's.
KIND_COLORS = {
    "fixed": "0.55",
    "kl": "#0072B2",
    "stable": "#D55E00",
    "entropy": "#CC79A7",
    "latent": "#E69F00",
    "accel": "#56B4E9",
    "gate": "#009E73",
}
PAYS_AREA = {"color": "#F0E442", "alpha": 0.3, "lw": 0}
TARGET_LINE = {"color": "0.35", "linestyle": "--", "lw": 1.0}


def _kind_style(kind: str) -> dict:
    """One colour and marker per criterion kind, the same in every panel; the oracle is a star."""
    index = EXIT_KINDS.index(kind) if kind in EXIT_KINDS else len(EXIT_KINDS)
    if kind == "oracle":
        return {"color": "#000000", "marker": "*", "ms": 9, "linestyle": "none"}
    return {"color": KIND_COLORS.get(kind, "0.55"), "marker": MARKERS[index % len(MARKERS)], "ms": 5}


def _mean_points(rows: pd.DataFrame) -> pd.DataFrame:
    """Per criterion: mean FLOPs and bits over the seeds, in order of cost."""
    means = rows.groupby("criterion", sort=False).agg(
        flops=("flops_per_query", "mean"), bits=("bits", "mean")
    )
    return means.sort_values("flops")


def _pays_region(ax, fixed: pd.DataFrame, share: float) -> None:
    """The target line (`share` of the best fixed-depth recall) and, shaded, where a criterion would
    pay: at or above the target with fewer FLOPs than the cheapest fixed depth that reaches it."""
    target = share * float(fixed["bits"].max())
    cheapest = float(fixed.loc[fixed["bits"] >= target - 1e-12, "flops"].min())
    ax.axhline(target, zorder=1, **TARGET_LINE)
    ax.autoscale_view()
    (left, right), (bottom, top) = ax.get_xlim(), ax.get_ylim()
    ax.add_patch(Rectangle((left, target), cheapest - left, top - target, zorder=0, **PAYS_AREA))
    ax.set_xlim(left, right)
    ax.set_ylim(bottom, top)


def _draw_frontier(ax, rows: pd.DataFrame, share: float) -> list[str]:
    """One schedule's panel: its fixed-depth curve, each criterion kind's thresholds as points joined
    in order of cost, the oracle (each the mean over seeds), and the region where a criterion would
    pay. Returns the criterion kinds drawn."""
    fixed = _mean_points(rows[rows["kind"] == FIXED_DEPTH])
    # No seed band: a curve that alternates between odd and even K turns one into vertical stripes,
    # and the intervals that decide the claim are in the serving tables.
    ax.plot(fixed["flops"], fixed["bits"], zorder=3, **FIXED_DEPTH_LINE)
    kinds = [k for k in dict.fromkeys(rows["kind"]) if k != FIXED_DEPTH]
    for kind in kinds:
        points = _mean_points(rows[rows["kind"] == kind])
        ax.plot(points["flops"], points["bits"], lw=0.9, zorder=4, **_kind_style(kind))
    _pays_region(ax, fixed, share)
    return kinds


def _frontier_legend(fig: Figure, kinds: list[str], share: float) -> None:
    names = {kind: f"criterion: {kind}" for kind in kinds} | {"oracle": "oracle (each query's best depth)"}
    handles = [
        Line2D([], [], label="fixed depth K = 1, 2, 3, ...", **FIXED_DEPTH_LINE),
        *(Line2D([], [], lw=0.9, label=names[kind], **_kind_style(kind)) for kind in kinds),
        Line2D([], [], label=f"{share:.0%} of the best fixed-depth recall", **TARGET_LINE),
        Patch(label="a criterion pays here: that recall for fewer FLOPs than any fixed depth", **PAYS_AREA),
    ]
    legend_below(fig, handles)


def plot_exit_frontier(frontier: pd.DataFrame, share: float | None = None) -> Figure:
    """Recalled bits per person against modeled FLOPs per query when the model chooses its depth: a
    panel per schedule (and budget fraction) with its fixed-depth curve as the baseline, each exit
    criterion kind's thresholds and the oracle as points (the mean over a study run's seeds), and
    shaded, the region where a criterion would pay: at
    least `share` of the run's best fixed-depth recall (default: the serving headline's 95%) for fewer
    FLOPs than the cheapest fixed depth that reaches it. Every threshold's numbers are in the table
    of `biosrecall.eval.serving.exit_frontier`; this figure answers only whether a criterion pays."""
    if frontier.empty:
        raise BiosrecallError("nothing to plot: the exit frontier table is empty")
    share = RECALL_SHARE if share is None else share
    # The seeds of one study run (`biosrecall figure1`, runs `seed<S>/<name>`) share a line.
    frontier = frontier.assign(line=frontier["run"].str.replace(r"^seed\d+/", "", regex=True))
    fractions = sorted(frontier["fraction"].unique())
    runs = frontier.drop_duplicates("line")[["line", "schedule"]].rename(columns={"line": "run"})
    labels = line_labels(runs)
    fig, axes = figure_grid(len(fractions), len(labels), 0.6 + 3.6 * len(labels), 0.9 + 3.2 * len(fractions))
    kinds: list[str] = []
    for row, fraction in enumerate(fractions):
        for col, (run, label) in enumerate(labels.items()):
            ax = axes[row, col]
            rows = frontier[(frontier["line"] == run) & np.isclose(frontier["fraction"], fraction)]
            if rows.empty:
                ax.set_visible(False)
                continue
            ax.set_xscale("log")  # before drawing: the shaded region is placed from the log limits
            kinds += _draw_frontier(ax, rows, share)
            ax.grid(True, which="major", **GRID)
            ax.set_title(label if len(fractions) == 1 else f"{label}, {fraction:.0%}", fontsize="medium")
            ax.set_xlabel("modeled FLOPs per query" if row == len(fractions) - 1 else "")
        axes[row, 0].set_ylabel("recalled bits per person")
    seeds = int(frontier.groupby(["line", "criterion", "fraction"])["run"].nunique().min())
    order = sorted(set(kinds), key=lambda k: EXIT_KINDS.index(k) if k in EXIT_KINDS else len(EXIT_KINDS))
    _frontier_legend(fig, order, share)
    detail = [f"{fractions[0]:.0%} of budget"] if len(fractions) == 1 else []
    detail += [f"mean over {seeds} seeds"] if seeds > 1 else []
    fit_suptitle(fig, "Does an exit criterion pay? Recall vs compute per query", ", ".join(detail))
    return fig
