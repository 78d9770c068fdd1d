"""What `biosrecall capacity` writes from its stored-bits table: per-run and seed tables, claims, figure.

    files = write_capacity_results("runs/capacity", table)   # table: `capacity_scoring.score_runs`
    claims = judge_capacity_claims(table)

Files (tables as CSV and parquet, the figure as PNG and PDF):

    capacity              one row per people count, model, seed and serving depth: exact_bits,
                          loss_bound_bits, ceiling_bits, parameters, non_embedding_parameters, both
                          measures per parameter and per non-embedding parameter, exposures (asked
                          and mean), updates, train_flops (`biosrecall.eval.stored_bits`)
    capacity_summary      the same per people count, model and depth over seeds: mean, 95% t
                          interval (`<column>_low`, `<column>_high`) and n_seeds (`biosrecall.stats`)
    capacity.md           both tables in Markdown (intervals as "mean [low, high]")
    capacity_claims(.md)  the three claims below, each judged from its 95% interval over seeds
    capacity.png/.pdf     stored bits against people: one panel per serving depth and measure, one
                          line per model (a baseline's one depth in every panel), the ceiling and the
                          lines of 1 and 2 bits per parameter of the looped model

A baseline has one serving depth: its rows say depth 1, and every claim reads it there.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from biosrecall.atomic import atomic_write_text
from biosrecall.experiments.claims import FAILS, HOLDS, INCONCLUSIVE, NOT_MEASURED, decide_text, verdict
from biosrecall.experiments.study import FIXED_FIRST, UNIFORM
from biosrecall.outputs import COLORS, MARKERS, save_figure, write_table
from biosrecall.stats import interval_text, seed_interval

STD_PARAMS = "std_params"
MEASURE = "loss_bound_bits_per_param"
"""The capacity ratio claims 1 and 2 judge: the 3.3 paper's bits (its Definition 4.3, value term, as
`biosrecall.eval.stored_bits` computes it) per parameter, every parameter counted (a tied head once)."""
ONE_BIT_BAND = (0.7, 1.3)
"""Claim 1 holds when the whole interval of the params-matched baseline's bits per parameter lies in
this band and fails when it lies wholly outside: the 3.3 paper's about 1 bit per parameter at 100
exposures, within +-30%, about the spread the paper shows across model sizes."""
LOOPED_MARGIN = 0.0
"""Claim 2: uniform's bits per parameter at its best depth minus the baseline's, paired by seed, are
below this: sharing the weights across depth adds computation, not parameters to store facts in."""
SATURATION_TOLERANCE = 0.1
"""Uniform saturates at the largest people count whose mean (over seeds) best-depth exact bits are
within this share of the sweep's maximum: where more people stop adding stored bits."""
FIXED_FIRST_RATIO = 0.9
"""Claim 3: fixed-first's exact bits over uniform's at the worst serving depth exceed this ("within
10% of uniform at every K")."""
MIN_BITS = 0.1
"""Below a tenth of a bit a model has stored nothing, and a ratio to it means nothing (NaN)."""
GROUP = ["people", "name", "kind", "depth", "parameters", "non_embedding_parameters", "ceiling_bits"]
VALUES = [
    "exact_bits", "loss_bound_bits", "exact_bits_per_param", "exact_bits_per_nonembedding_param",
    "loss_bound_bits_per_param", "loss_bound_bits_per_nonembedding_param", "exposures_mean", "train_flops",
]  # fmt: skip


@dataclass(frozen=True)
class CapacityClaim:
    key: str
    statement: str
    metric: str
    threshold: str
    why: str
    measure: Callable[[pd.DataFrame], float]  # one seed's rows -> the metric (NaN: cannot be computed)
    judge: Callable[[float, float], str]  # (low, high) of the interval -> the verdict
    edge: Callable[[float], float]  # the mean -> the threshold value its seeds to decide are counted at
    note: str = ""  # why the claim cannot be judged on this sweep ("" when it can): not measured


@dataclass
class CapacityTables:
    summary: pd.DataFrame
    claims: pd.DataFrame
    files: list[Path]


def summarize(table: pd.DataFrame) -> pd.DataFrame:
    """Mean and 95% t interval over seeds per people count, model and depth (`biosrecall.stats`)."""
    from biosrecall.stats import aggregate_seeds

    return aggregate_seeds(table, GROUP, VALUES)


def _at(rows: pd.DataFrame, people: int, name: str) -> pd.DataFrame:
    """One seed's rows of model `name` at `people`, indexed by serving depth."""
    return rows[(rows["people"] == people) & (rows["name"] == name)].set_index("depth").sort_index()


def _baseline(rows: pd.DataFrame, people: int) -> float:
    part = _at(rows, people, STD_PARAMS)[MEASURE]
    return float(part.iloc[0]) if len(part) else math.nan


def _looped_excess(rows: pd.DataFrame, people: int) -> float:
    # The best of the depths is picked after the fact, which can only favour the looped model: the
    # claim that it stores no more is the harder to pass for it.
    looped = _at(rows, people, UNIFORM)[MEASURE]
    return float(looped.max()) - _baseline(rows, people) if len(looped) else math.nan


def _worst_ratio(rows: pd.DataFrame, people: int) -> float:
    """min over depths of fixed-first / uniform exact bits; a depth where uniform stores nothing is
    left out (no ratio), and NaN when every depth is."""
    first = _at(rows, people, FIXED_FIRST)["exact_bits"]
    uniform = _at(rows, people, UNIFORM)["exact_bits"]
    ratios = [first[k] / uniform[k] for k in uniform.index if k in first.index and uniform[k] > MIN_BITS]
    return float(min(ratios)) if ratios else math.nan


def saturation_people(table: pd.DataFrame) -> int:
    """The people count where uniform saturates (`SATURATION_TOLERANCE`); the largest count when
    uniform was not trained or stored nothing anywhere."""
    uniform = table[table["name"] == UNIFORM]
    if uniform.empty:
        return int(table["people"].max())
    best = uniform.groupby(["people", "seed"])["exact_bits"].max().groupby("people").mean()
    near = best[best >= (1 - SATURATION_TOLERANCE) * best.max()]
    return int(near.index.max())


def band_unreachable(table: pd.DataFrame, people: int) -> str:
    """Why claim 1 cannot be judged at `people` ("" when it can): the dataset holds fewer bits than
    the band's floor asks of the baseline, so even storing everything it would be below the band, and
    a low ratio would measure the data, not the capacity."""
    rows = table[(table["people"] == people) & (table["name"] == STD_PARAMS)]
    if rows.empty:
        return ""
    ceiling, parameters = float(rows["ceiling_bits"].iloc[0]), int(rows["parameters"].iloc[0])
    floor = ONE_BIT_BAND[0] * parameters
    if ceiling >= floor:
        return ""
    needed = math.ceil(floor / (ceiling / people))
    return (
        f"{people} people hold {ceiling:,.0f} bits, under {ONE_BIT_BAND[0]:g} bits per parameter of "
        f"std_params ({parameters:,} parameters): sweep up to at least {needed:,} people"
    )


def band_verdict(low: float, high: float, band: tuple[float, float] = ONE_BIT_BAND) -> str:
    """holds inside the band, does not hold wholly outside it, else (or with no interval) inconclusive."""
    if math.isnan(low) or math.isnan(high):
        return INCONCLUSIVE
    if band[0] <= low and high <= band[1]:
        return HOLDS
    return FAILS if high < band[0] or low > band[1] else INCONCLUSIVE


def capacity_claims(largest: int, saturated: int, unreachable: str = "") -> list[CapacityClaim]:
    """The three claims, judged at the largest people count (1, 2) and where uniform saturates (3);
    `unreachable` says why claim 1 cannot be judged (`band_unreachable`)."""
    lo, hi = ONE_BIT_BAND
    return [
        CapacityClaim(
            "baseline_one_bit_per_param",
            "The params-matched standard transformer stores about 1 bit per parameter (within 30%)",
            f"std_params loss-bound bits per parameter at {largest} people",
            f"in [{lo:g}, {hi:g}]",
            "the 3.3 paper's ~1 bit per parameter at 100 exposures, +-30%",
            lambda r: _baseline(r, largest),
            band_verdict,
            lambda mean: lo if abs(mean - lo) < abs(mean - hi) else hi,
            unreachable,
        ),
        CapacityClaim(
            "looped_no_more_per_param",
            "A looped model (uniform, best depth) stores no more bits per parameter than the "
            "params-matched standard transformer",
            f"uniform at its best depth minus std_params, loss-bound bits per parameter, at {largest} "
            "people (paired by seed)",
            f"< {LOOPED_MARGIN:g}",
            "a direction: reusing weights over depth adds computation, not storage",
            lambda r: _looped_excess(r, largest),
            lambda low, high: verdict(low, high, LOOPED_MARGIN, above=False),
            lambda mean: LOOPED_MARGIN,
        ),
        CapacityClaim(
            "fixed_first_near_uniform_at_saturation",
            "Fixed-first stores within 10% of uniform at every serving depth where uniform saturates",
            f"fixed-first / uniform exact bits at the worst serving depth, at {saturated} people "
            "(where uniform saturates)",
            f"> {FIXED_FIRST_RATIO:g}",
            "'within 10%' applied to the worst depth; saturation: the largest count within "
            f"{SATURATION_TOLERANCE:.0%} of uniform's most stored bits",
            lambda r: _worst_ratio(r, saturated),
            lambda low, high: verdict(low, high, FIXED_FIRST_RATIO, above=True),
            lambda mean: FIXED_FIRST_RATIO,
        ),
    ]


def judge_capacity_claims(table: pd.DataFrame) -> pd.DataFrame:
    """One row per claim: the metric per seed, its 95% t interval over seeds and the verdict."""
    largest = int(table["people"].max())
    rows = []
    for claim in capacity_claims(largest, saturation_people(table), band_unreachable(table, largest)):
        values = [claim.measure(part) for _, part in table.groupby("seed", sort=True)]
        measured = [v for v in values if not math.isnan(v)] if not claim.note else []
        interval = seed_interval(measured)
        decide = decide_text(
            interval.mean, interval.low, interval.high, interval.n, claim.edge(interval.mean)
        )
        rows.append(
            {
                "claim": claim.key, "statement": claim.statement, "metric": claim.metric,
                "threshold": claim.threshold, "mean": interval.mean, "low": interval.low,
                "high": interval.high, "n_seeds": interval.n,
                "per_seed": ";".join(f"{v:.4g}" for v in values),
                "verdict": claim.judge(interval.low, interval.high) if measured else NOT_MEASURED,
                "seeds_to_decide": decide, "note": claim.note, "why_threshold": claim.why,
            }
        )  # fmt: skip
    return pd.DataFrame(rows)


def _markdown(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(map(str, row)) + " |" for row in rows]) + "\n"


def _model(row) -> str:
    return f"{row['name']} (baseline)" if row["kind"] == "baseline" else row["name"]


def _depth(row) -> str:
    return "1 (its one depth)" if row["kind"] == "baseline" else str(int(row["depth"]))


def capacity_markdown(summary: pd.DataFrame, table: pd.DataFrame) -> str:
    """capacity.md: the seed means with their intervals, then every run."""

    def cell(row, column, fmt):
        return interval_text(row[column], row[f"{column}_low"], row[f"{column}_high"], fmt)

    means = [
        [row["people"], _model(row), _depth(row), cell(row, "exact_bits", "{:.1f}"),
         cell(row, "loss_bound_bits", "{:.1f}"), cell(row, "exact_bits_per_param", "{:.3g}"),
         cell(row, "loss_bound_bits_per_param", "{:.3g}"),
         cell(row, "loss_bound_bits_per_nonembedding_param", "{:.3g}"), f"{row['parameters']:,}",
         f"{row['train_flops']:.3g}", row["n_seeds"]]
        for _, row in summary.iterrows()
    ]  # fmt: skip
    runs = [
        [row["people"], _model(row), row["seed"], _depth(row), f"{row['exact_bits']:.1f}",
         f"{row['loss_bound_bits']:.1f}", f"{row['ceiling_bits']:.1f}", f"{row['parameters']:,}",
         f"{row['non_embedding_parameters']:,}", f"{row['exact_bits_per_param']:.3g}",
         f"{row['exact_bits_per_nonembedding_param']:.3g}", f"{row['loss_bound_bits_per_param']:.3g}",
         f"{row['loss_bound_bits_per_nonembedding_param']:.3g}", f"{row['exposures_mean']:.4g}",
         row["updates"], f"{row['train_flops']:.3g}"]
        for _, row in table.iterrows()
    ]  # fmt: skip
    exposures = ", ".join(f"{e:g}" for e in sorted(table["exposures"].unique()))
    return (
        f"# Stored bits at {exposures} exposures per person\n\n"
        "Baselines have one serving depth and are scored there. Intervals: 95% t over seeds.\n\n"
        "## Mean over seeds\n\n"
        + _markdown(["people", "model", "depth", "exact bits", "loss-bound bits", "exact bits/param",
                     "loss-bound bits/param", "loss-bound bits/non-emb. param", "parameters",
                     "train FLOPs", "seeds"], means)
        + "\n## Every run\n\n"
        + _markdown(["people", "model", "seed", "depth", "exact bits", "loss-bound bits", "ceiling",
                     "parameters", "non-emb. parameters", "exact bits/param", "exact bits/non-emb.",
                     "loss-bound bits/param", "loss-bound bits/non-emb.", "exposures (mean)",
                     "updates", "train FLOPs"], runs)
    )  # fmt: skip


def claims_markdown(claims: pd.DataFrame) -> str:
    rows = []
    for row in claims.itertuples():
        if row.n_seeds == 0:
            measured = f"- ({row.note})" if isinstance(row.note, str) and row.note else "-"
        else:
            measured = interval_text(row.mean, row.low, row.high, "{:.3g}")
            measured += " (one seed, no interval)" if math.isnan(row.low) else f", n={row.n_seeds}"
        rows.append([row.statement, row.metric, row.threshold, measured, f"**{row.verdict}**",
                     row.seeds_to_decide or "-"])  # fmt: skip
    header = ["claim", "metric", "threshold", "measured (95% interval, seeds)", "verdict", "seeds to decide"]
    return _markdown(header, rows)


def plot_capacity(summary: pd.DataFrame):
    """Stored bits against people: a row per measure, a column per serving depth (module doc)."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import NullLocator

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
    fig.legend(handles, labels, loc="outside lower center", ncols=min(4, len(labels)), fontsize=8)
    return fig


def _draw_model(ax, summary: pd.DataFrame, name: str, measure: str, depth: int, style) -> None:
    """One model's mean over seeds with its interval shaded; a baseline at its one depth."""
    part = summary[summary["name"] == name]
    baseline = (part["kind"] == "baseline").all()
    part = part.sort_values("people") if baseline else part[part["depth"] == depth].sort_values("people")
    color, marker = style
    label = f"{name} (baseline, one depth)" if baseline else name
    ax.plot(part["people"], part[measure], color=color, marker=marker, ms=4, lw=1.4, label=label,
            ls="--" if baseline else "-")  # fmt: skip
    low, high = part[f"{measure}_low"].to_numpy(float), part[f"{measure}_high"].to_numpy(float)
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


def write_capacity_results(out_dir: str | Path, table: pd.DataFrame) -> CapacityTables:
    """Every file of the module doc, each written atomically; returns the summary, claims and paths."""
    out_dir = Path(out_dir)
    summary, claims = summarize(table), judge_capacity_claims(table)
    files = [*write_table(table, out_dir / "capacity"), *write_table(summary, out_dir / "capacity_summary")]
    atomic_write_text(out_dir / "capacity.md", capacity_markdown(summary, table))
    files += [out_dir / "capacity.md", *write_table(claims, out_dir / "capacity_claims")]
    atomic_write_text(out_dir / "capacity_claims.md", claims_markdown(claims))
    files += [out_dir / "capacity_claims.md", *save_figure(plot_capacity(summary), out_dir / "capacity")]
    return CapacityTables(summary, claims, files)
