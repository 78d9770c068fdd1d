"""The update diagnostic's report: bootstrap summary over batches, the result, its figure and its files.

`biosrecall.diagnose` documents the method; this module turns its per-batch numbers into

    summary = summarize(batches, bootstrap=2000, level=0.95, seed=0)   # mean and interval per depth
    result = DiagnosisResult(summary, batches, options, record)
    depth_average(result.summary)                                      # the rows averaged over depths
    result.figure()                                                    # matplotlib Figure (no pyplot)
    result.write("runs/ff/diagnose")                                   # the files below

Files (STEM = diagnose_<checkpoint label>, e.g. diagnose_switch or diagnose_1.0 for `--checkpoint final`,
so diagnoses of several checkpoints coexist; tables and figures through `biosrecall.outputs`):
    STEM.csv, STEM.parquet                   summary: after_uniform, update, metric (bioS runs: nll and
                                             bits; LM runs: nll, the validation NLL),
                                             serving_depth (empty = averaged over serving depths), mean,
                                             ci_low, ci_high, n_batches, change_shallow, change_deep
    STEM_batches.csv, STEM_batches.parquet   every batch's raw numbers (see `diagnose_state`)
    STEM.png, STEM.pdf                       advantage against serving depth, one line per after_uniform
                                             (one panel per metric)
    STEM.json                                every option (`DiagnoseOptions`), the seed included, and
                                             what was resolved: checkpoint, data, scored set, states
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from biosrecall.atomic import OutputRecord, atomic_write_json, replace_files
from biosrecall.diagnose.options import DiagnoseOptions
from biosrecall.eval.plots import curve_styles, draw_curve, figure_grid
from biosrecall.outputs import save_figure, write_table
from biosrecall.stats import interval_text


def bootstrap_intervals(values: np.ndarray, bootstrap: int, level: float, seed: int):
    """Mean over rows of `values` [batches, ...] and a percentile bootstrap interval at `level`.

    Rows (batches) are resampled with replacement `bootstrap` times from a generator seeded by `seed`.
    """
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, len(values), size=(bootstrap, len(values)))
    means = values[picks].mean(axis=1)
    low, high = np.quantile(means, [(1 - level) / 2, (1 + level) / 2], axis=0)
    return values.mean(axis=0), low, high


def summarize(batches: pd.DataFrame, bootstrap: int, level: float, seed: int) -> pd.DataFrame:
    """One row per (after_uniform, metric, serving depth), plus a depth-averaged row (serving_depth <NA>).

    Every row of one (after_uniform, metric) uses the same resampled batches, so the depth average's
    interval is the interval of the per-batch depth average.
    """
    # the per-batch frame has one METRIC_advantage column per metric, in the run kind's order
    metrics = [c.removesuffix("_advantage") for c in batches.columns if c.endswith("_advantage")]
    records = []
    for after, group in batches.groupby("after_uniform", sort=True):
        for metric in metrics:
            wide = {
                name: group.pivot(index="batch", columns="serving_depth", values=f"{metric}_{name}")
                for name in ("advantage", "change_shallow", "change_deep")
            }
            advantage = wide["advantage"].to_numpy()
            depths = list(wide["advantage"].columns) + [pd.NA]
            # the depth average as one more column: its interval comes from the same resampled batches
            stacked = np.column_stack([advantage, advantage.mean(axis=1)])
            mean, low, high = bootstrap_intervals(stacked, bootstrap, level, seed)
            shallow, deep = (
                np.append(wide[n].mean().to_numpy(), wide[n].to_numpy().mean())
                for n in ("change_shallow", "change_deep")
            )
            for i, depth in enumerate(depths):
                records.append(
                    {
                        "after_uniform": int(after),
                        "update": int(group["update"].iloc[0]),
                        "metric": metric,
                        "serving_depth": depth,
                        "mean": mean[i],
                        "ci_low": low[i],
                        "ci_high": high[i],
                        "n_batches": len(advantage),
                        "change_shallow": shallow[i],
                        "change_deep": deep[i],
                    }
                )
    summary = pd.DataFrame.from_records(records)
    summary["serving_depth"] = summary["serving_depth"].astype("Int64")
    return summary


def depth_average(summary: pd.DataFrame) -> pd.DataFrame:
    """The depth-averaged rows: after_uniform, update, metric, mean, ci_low, ci_high, n_batches."""
    rows = summary[summary["serving_depth"].isna()]
    return rows.drop(columns="serving_depth").reset_index(drop=True)


@dataclass
class DiagnosisResult:
    """`summary`: mean advantage and bootstrap interval per (after_uniform, metric, serving depth; <NA> =
    depth average). `batches`: one row per (after_uniform, batch, serving depth). `options`: what was
    asked; `record`: what was resolved (checkpoint label, data, scored set, the states diagnosed)."""

    summary: pd.DataFrame
    batches: pd.DataFrame
    options: DiagnoseOptions
    record: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        """STEM.json: the options, then the record. `people` and `val_sequences` come from the record,
        which holds the resolved counts (0 and None mean "everyone" and "the default" as options)."""
        asked = {k: v for k, v in asdict(self.options).items() if k not in ("people", "val_sequences")}
        return {**asked, **self.record}

    def figure(self) -> Figure:
        """Advantage of the deeper update against serving depth, one panel per metric of the run's kind
        (bioS runs NLL left and recalled bits right, LM runs validation NLL): a matplotlib Figure."""
        record, options = self.record, self.options
        metrics = [m for m in record["metrics"] if m in set(self.summary["metric"])]
        fig, axes = figure_grid(1, len(metrics), 1.0 + 5.0 * len(metrics), 4.4)
        for ax, metric in zip(axes[0], metrics, strict=True):
            _panel(ax, self, metric)
        shallow, deep = options.depths
        fig.suptitle(
            f"{Path(str(record['run_dir'])).name} @ {record['checkpoint']}: K={deep} vs K={shallow} "
            f"batch-caused update at equal RMS ({options.rms})\npositive = K={deep} helps more "
            f"({options.batches} batches)",
            fontsize="medium",
        )
        return fig

    def write(self, out_dir: str | Path) -> list[Path]:
        """Write the tables, the figure and the options JSON into `out_dir`, as one set (`replace_files`:
        a failure leaves an earlier diagnosis of the checkpoint whole, and a file of the same name that
        no diagnosis wrote is refused); returns the paths written."""
        stem = f"diagnose_{self.record['checkpoint']}"
        record = OutputRecord("diagnose-update", f"{stem}.json", "checkpoint", self.record["checkpoint"])
        with replace_files(out_dir, record) as stage:
            written = write_table(self.summary, stage / stem)
            written += write_table(self.batches, stage / f"{stem}_batches")
            written += save_figure(self.figure(), stage / stem)
            atomic_write_json(stage / record.name, self.to_json())
        return [Path(out_dir) / path.name for path in [*written, stage / record.name]]


def _panel(ax, result: DiagnosisResult, metric: str) -> None:
    summary, options = result.summary, result.options
    shallow, deep = options.depths
    ax.axhline(0.0, color="0.25", lw=1.0, zorder=1)
    for depth in sorted({shallow, deep}):
        ax.axvline(depth, color="0.6", linestyle=":", lw=1.0, zorder=1)
    averages = depth_average(summary).set_index(["metric", "after_uniform"])
    rows = summary[(summary["metric"] == metric) & summary["serving_depth"].notna()]
    styles = curve_styles(sorted(set(rows["after_uniform"])), linestyles=("-",))
    for after, curve in rows.groupby("after_uniform", sort=True):
        avg = averages.loc[(metric, after)]
        average = interval_text(avg["mean"], avg["ci_low"], avg["ci_high"], "{:+.3g}")
        label = f"after {after} updates: avg {average}"
        x = curve["serving_depth"].to_numpy(dtype=float)
        line = {"alpha": 0.18, "ms": 4, "lw": 1.6, "label": label, **styles[after]}
        draw_curve(ax, x, curve["mean"], curve["ci_low"], curve["ci_high"], **line)
    ax.set_xlabel("serving depth K")
    ax.set_ylabel(f"advantage of K={deep} update\n({result.record['metrics'][metric]})")
    ax.grid(True, color="0.9", lw=0.6)
    ax.legend(fontsize="x-small", frameon=False, title=f"{options.level:.0%} bootstrap interval")
