"""What a budget sweep writes: the budget curve, compute-to-target with seed intervals, its figure, and
the claim that fixed-first reaches a target with less compute than uniform.

    curve = budget_curve(curves)                 # curves: the sweep's final checkpoints (label_runs)
    targets = compute_to_target(curve)           # FLOPs to reach 50/75/90% of the ceiling, and savings
    modes = mode_agreement(curve, budget_curve(main_runs_at_100))   # branch vs independent at 1x
    figures = write_budget_results(curve, targets, "runs/figure1", modes)   # the tables; the figure's files

Compute-to-target: for each seed, the budget points of a schedule, in order of FLOPs, are joined by
straight lines in (log FLOPs, bits); the FLOPs it needs is where that line first reaches the target.
A seed whose first point already reaches it is recorded at that point (an upper bound, noted); a seed
that never reaches it is "not reached within the sweep". The interval is the t interval over seeds
of log10 FLOPs (`biosrecall.stats`), reported back in FLOPs. A saving is 1 - FLOPs(fixed-first) /
FLOPs(other), paired by seed, over the seeds where both reached the target.

Mode agreement: a branch (wsd rate schedule, its first updates trained by a shared trunk) and an
independent run (the preset's cosine schedule, trained alone) at the same budget are two ways to
measure one budget point. At a budget both were trained at, `mode_agreement` pairs them by seed and
judges the 95% interval of the difference against a margin of AGREEMENT_MARGIN of the ceiling, as
every "no difference" claim is (`biosrecall.experiments.claims`): the modes agree when the whole
interval lies inside the margin, differ when it lies wholly outside, and the comparison is
inconclusive otherwise. Whether the interval holds 0 decides nothing: a wide one shows too few seeds,
a narrow one a difference too small to matter.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from biosrecall.atomic import atomic_write_text
from biosrecall.eval.plots import CEILING_LINE, curve_styles, draw_curve, format_flops, legend_below
from biosrecall.experiments.claims import FAILS, HOLDS, verdict
from biosrecall.experiments.figure1_results import study_label
from biosrecall.experiments.study import FIXED_FIRST, MAIN_SCHEDULES, UNIFORM, UPDATE_MATCHED
from biosrecall.outputs import interval_cell, markdown_columns, save_figure, write_table
from biosrecall.stats import interval_text, seed_interval

TARGETS = (0.5, 0.75, 0.9)  # shares of the ceiling
DEPTH_RANGES = {"K=1..16": (1, 16), "K=1..64": (1, 64)}
BEYOND = (17, 64)
COMPARED = (UNIFORM, UPDATE_MATCHED)  # fixed-first's saving is reported against each
# The claim: the paper's 30-50% saving, tested as a direction at 90% of the ceiling over the depths
# both schedules train on (beyond K=16 uniform declines by design, so K=1..64 would favour fixed-first).
CLAIM_TARGET, CLAIM_RANGE = 0.9, "K=1..16"
BUDGET_NAMES = "budget_curve", "compute_to_target", "budget_modes"
AGREEMENT_MARGIN = 0.1  # of the ceiling: the tolerance of the claims table's "within 10% of the ceiling"
UPPER_BOUND = "reached at the smallest budget (an upper bound)"


def budget_curve(curves: pd.DataFrame) -> pd.DataFrame:
    """One row per run of the sweep: name, seed, budget multiple, FLOPs, updates, bits over K=1..16,
    over K=17..64, over K=1..64 and at the worst depth, and the ceiling."""
    whole = curves[curves["attribute"] == "all"]
    rows = []
    for (name, seed, multiple), part in whole.groupby(["name", "seed", "budget_multiple"], sort=True):
        bits = part.set_index("depth")["bits"].sort_index()
        rows.append(
            {
                "name": name,
                "seed": int(seed),
                "budget_multiple": float(multiple),
                "flops": float(part["flops"].iloc[0]),
                "updates": int(part["update"].iloc[0]),
                "bits_1_16": float(bits.loc[1:16].mean()),
                "bits_17_64": float(bits.loc[BEYOND[0] : BEYOND[1]].mean()),
                "bits_1_64": float(bits.loc[1:64].mean()),
                "worst_bits": float(bits.min()),
                "ceiling_bits": float(part["ceiling_bits"].iloc[0]),
            }
        )
    return pd.DataFrame(rows)


def flops_to_target(points: pd.DataFrame, column: str, target: float) -> tuple[float, str]:
    """(FLOPs, note) where one seed's curve (rows sorted by FLOPs) first reaches `target` bits."""
    flops, bits = points["flops"].to_numpy(float), points[column].to_numpy(float)
    for i, value in enumerate(bits):
        if value >= target:
            if i == 0:
                return flops[0], UPPER_BOUND
            share = (target - bits[i - 1]) / (value - bits[i - 1])
            log_flops = math.log10(flops[i - 1]) + share * (math.log10(flops[i]) - math.log10(flops[i - 1]))
            return 10**log_flops, ""
    return math.nan, "not reached within the sweep"


def compute_to_target(curve: pd.DataFrame) -> pd.DataFrame:
    """FLOPs per schedule to reach each target (kind "flops") and fixed-first's savings (kind "saving")."""
    needed = _needed_per_seed(curve)
    rows = []
    for (name, target, depths), part in needed.groupby(["name", "target", "depths"], sort=False):
        interval = seed_interval(np.log10(part["flops"].dropna()))
        notes = sorted(set(part["note"]) - {""})
        rows.append(_row("flops", name, target, depths, interval, len(part), notes, back=lambda x: 10**x))
    rows += _savings(needed)
    return pd.DataFrame(rows)


def _row(
    kind: str, subject: str, target: float, depths: str, interval, of_seeds: int, notes, back=float
) -> dict:
    """One row of compute_to_target: the interval over seeds of `of_seeds` (its numbers mapped `back`
    from log10 FLOPs for kind "flops"; NaN stays NaN) and its notes."""
    value, low, high = (back(x) for x in (interval.mean, interval.low, interval.high))
    return {
        "kind": kind,
        "subject": subject,
        "target": target,
        "depths": depths,
        "value": value,
        "low": low,
        "high": high,
        "n_seeds": interval.n,
        "of_seeds": of_seeds,
        "note": "; ".join(notes),
    }


def _needed_per_seed(curve: pd.DataFrame) -> pd.DataFrame:
    """The FLOPs each schedule's seed needs to reach each target share of its ceiling, with a note."""
    rows = []
    for (name, seed), points in curve.sort_values("flops").groupby(["name", "seed"], sort=False):
        ceiling = float(points["ceiling_bits"].iloc[0])
        for depths, (low, high) in DEPTH_RANGES.items():
            for target in TARGETS:
                needed = flops_to_target(points, f"bits_{low}_{high}", target * ceiling)
                rows.append((name, seed, target, depths, *needed))
    return pd.DataFrame(rows, columns=["name", "seed", "target", "depths", "flops", "note"])


def _savings(needed: pd.DataFrame) -> list[dict]:
    """1 - FLOPs(fixed-first) / FLOPs(other) per seed, for each compared schedule, target and range."""
    rows = []
    keys = ["target", "depths", "seed"]
    table = needed.pivot_table(index=keys, columns="name", values="flops", dropna=False)
    bounded = needed[needed["note"] == UPPER_BOUND]
    for other in COMPARED:
        if FIXED_FIRST not in table or other not in table:
            continue
        saving = 1 - table[FIXED_FIRST] / table[other]
        for (target, depths), values in saving.groupby(level=["target", "depths"], sort=False):
            interval = seed_interval(values.dropna())
            notes = [] if interval.n == len(values) else ["seeds where either did not reach it are left out"]
            pair = bounded[
                np.isclose(bounded["target"], target)
                & (bounded["depths"] == depths)
                & bounded["name"].isin([FIXED_FIRST, other])
            ]
            if len(pair):
                notes.append("a schedule reached it at the smallest budget: its FLOPs are an upper bound")
            rows.append(
                _row("saving", f"{FIXED_FIRST} vs {other}", target, depths, interval, len(values), notes)
            )
    return rows


def saving_claim(targets: pd.DataFrame | None = None) -> dict:
    """The claims-table row: fixed-first reaches the target with less compute than uniform ("not
    measured" without a sweep's `compute_to_target` table)."""
    mean, low, high, n = math.nan, math.nan, math.nan, 0
    if targets is not None and len(targets):
        row = targets[
            (targets["kind"] == "saving")
            & (targets["subject"] == f"{FIXED_FIRST} vs {UNIFORM}")
            & np.isclose(targets["target"], CLAIM_TARGET)
            & (targets["depths"] == CLAIM_RANGE)
        ]
        if len(row):
            mean, low, high, n = (row.iloc[0][k] for k in ("value", "low", "high", "n_seeds"))
    return {
        "claim": "fixed_first_reaches_target_with_less_compute",
        "statement": "Fixed-first reaches the target with less compute than uniform (needs --budgets)",
        "metric": f"1 - FLOPs(fixed-first) / FLOPs(uniform) to reach {CLAIM_TARGET:.0%} of the ceiling, mean bits over {CLAIM_RANGE}",
        "threshold": "> 0",
        "mean": mean,
        "low": low,
        "high": high,
        "n_seeds": int(n),
        "per_seed": "",
        # With a sweep but no seed where both reached the target, the question is open, not unasked.
        "verdict": "not measured" if targets is None else verdict(low, high, 0.0, True),
        "why_threshold": "the paper claims a 30-50% saving; the direction is tested, the interval gives the size",
    }


# The compute-to-target levels, fainter than the ceiling line they share a panel with.
TARGET_LEVEL = {"color": "0.6", "linewidth": 0.6, "linestyle": ":"}


def budget_figure(curve: pd.DataFrame):
    """Bits against training FLOPs (log axis), one line per schedule with a seed band, for the mean
    over K=1..16 and over K=17..64 (a panel only where the evaluation reached those depths), with the
    compute-to-target levels (`TARGETS` of the ceiling) marked."""
    panels = [
        (c, t) for c, t in (("bits_1_16", "K=1..16"), ("bits_17_64", "K=17..64")) if curve[c].notna().any()
    ]
    figure = Figure(figsize=(0.6 + 4.4 * len(panels), 4.4), layout="constrained")
    axes = figure.subplots(1, len(panels), sharey=True, squeeze=False)[0]
    # Figure 1's order, so each schedule keeps its colour and marker across the study's figures.
    order = [*MAIN_SCHEDULES, UPDATE_MATCHED]
    names = sorted(dict.fromkeys(curve["name"]), key=lambda n: order.index(n) if n in order else len(order))
    styles = curve_styles([study_label(name) for name in names])
    ceiling = float(curve["ceiling_bits"].iloc[0])
    for axis, (column, title) in zip(axes, panels, strict=True):
        for name in names:
            label = study_label(name)
            _band(axis, curve[curve["name"] == name], column, label, styles[label])
        axis.axhline(ceiling, **CEILING_LINE)
        for target in TARGETS:
            axis.axhline(target * ceiling, **TARGET_LEVEL)
        _flops_axis(axis)
        axis.set(xlabel="training FLOPs", title=f"mean over serving depths {title}")
        axis.grid(True, which="major", color="0.9", lw=0.6)
    axes[0].set_ylabel("recalled bits per person")
    handles, labels = axes[0].get_legend_handles_labels()
    handles += [Line2D([], [], **CEILING_LINE), Line2D([], [], **TARGET_LEVEL)]
    labels += [f"task ceiling ({ceiling:.2f} bits)", "targets: " + ", ".join(f"{t:.0%}" for t in TARGETS)]
    legend_below(figure, handles, 3, labels=labels)
    figure.suptitle("Recall against training compute, mean over seeds with 95% bands")
    return figure


def _flops_axis(axis) -> None:
    """Log FLOPs with ticks at 1, 2 and 5 per decade, written compactly ("2e11"): the budgets span
    about one decade, where matplotlib's default labels every minor tick in overlapping x10^n text."""
    axis.set_xscale("log")
    axis.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    axis.xaxis.set_major_formatter(FuncFormatter(lambda value, _: format_flops(value)))
    axis.xaxis.set_minor_formatter(NullFormatter())


def _band(axis, part: pd.DataFrame, column: str, label: str, style: dict) -> None:
    """One schedule's mean over seeds at each budget point, with its 95% interval shaded."""
    stats = part.groupby("budget_multiple").agg(flops=("flops", "mean"), bits=(column, list))
    means = [seed_interval(values) for values in stats["bits"]]
    low = [m.mean if math.isnan(m.low) else m.low for m in means]
    high = [m.mean if math.isnan(m.high) else m.high for m in means]
    draw_curve(axis, stats["flops"], [m.mean for m in means], low, high, ms=4, lw=1.5, label=label, **style)


def mode_agreement(branches: pd.DataFrame, independent: pd.DataFrame) -> pd.DataFrame:
    """Per schedule, depth range and budget multiple that both tables hold (`budget_curve` rows), each
    mode's mean bits over seeds with its interval, the difference branch - independent paired by seed,
    and the verdict on it (module docstring; one seed is inconclusive)."""
    keys = ["name", "budget_multiple", "seed"]
    paired = branches.merge(independent, on=keys, suffixes=("_branch", "_independent"))
    rows = []
    for (name, multiple), part in paired.groupby(["name", "budget_multiple"], sort=False):
        for depths, column in (("K=1..16", "bits_1_16"), ("K=17..64", "bits_17_64")):
            branch, alone = part[f"{column}_branch"], part[f"{column}_independent"]
            row = {"name": name, "budget_multiple": multiple, "depths": depths}
            for mode, values in (("branch", branch), ("independent", alone), ("difference", branch - alone)):
                interval = seed_interval(values)
                row.update({mode: interval.mean, f"{mode}_low": interval.low, f"{mode}_high": interval.high})
            row["n_seeds"] = seed_interval(branch - alone).n
            row["margin"] = AGREEMENT_MARGIN * float(part["ceiling_bits_branch"].iloc[0])
            row["modes"] = _agreement(row["difference_low"], row["difference_high"], row["margin"])
            rows.append(row)
    return pd.DataFrame(rows)


def _agreement(low: float, high: float, margin: float) -> str:
    judged = verdict(low, high, (-margin, margin))
    return {HOLDS: "agree", FAILS: "differ"}.get(judged, "inconclusive")


def _flops_or_saving(row: dict) -> str:
    if math.isnan(row["value"]):
        return "not reached"
    fmt = "{:.0%}" if row["kind"] == "saving" else "{:.3g}"
    return interval_text(row["value"], row["low"], row["high"], fmt)


TARGETS_COLUMNS = {
    "schedule": lambda row: f"saving: {row['subject']}" if row["kind"] == "saving" else row["subject"],
    "target": "{target:.0%}",
    "depths": "{depths}",
    "FLOPs or saving [95% interval]": _flops_or_saving,
    "seeds reached": "{n_seeds}/{of_seeds}",
    "note": "{note}",
}
"""compute_to_target.md: FLOPs (or the saving) as "mean [low, high]" over seeds."""
MODES_COLUMNS = {
    "schedule": "{name}",
    "budget": "{budget_multiple:g}x",
    "depths": "{depths}",
    **{
        title: interval_cell(mode, missing="not reached")
        for mode, title in (
            ("branch", "branch (wsd)"),
            ("independent", "independent (cosine)"),
            ("difference", "difference"),
        )
    },
    "margin": "±{margin:.1f}",
    "seeds": "{n_seeds}",
    "modes": "{modes}",
}
"""budget_modes.md: `mode_agreement` with its intervals over seeds."""


def write_budget_results(
    curve: pd.DataFrame, targets: pd.DataFrame, out_dir: str | Path, modes: pd.DataFrame | None = None
) -> list[Path]:
    """OUT/budget_curve.{csv,parquet,png,pdf}, OUT/compute_to_target.{csv,parquet,md} and, when given,
    OUT/budget_modes.{csv,parquet,md}; returns the figure's files."""
    out_dir = Path(out_dir)
    write_table(curve, out_dir / "budget_curve")
    write_table(targets, out_dir / "compute_to_target")
    atomic_write_text(out_dir / "compute_to_target.md", markdown_columns(targets, TARGETS_COLUMNS))
    if modes is not None and len(modes):
        write_table(modes, out_dir / "budget_modes")
        atomic_write_text(out_dir / "budget_modes.md", markdown_columns(modes, MODES_COLUMNS))
    return save_figure(budget_figure(curve), out_dir / "budget_curve")
