"""Where each stored-bits curve of a capacity study bends: the knee of every model at every depth.

    knees = knee_table(summary)        # summary: `capacity_results.summarize`; one row per model, depth
    text = knees_markdown(knees)       # the "Where each curve bends" section of capacity.md

Read from the means over seeds of the loss-bound bits, per model and serving depth (a baseline at
its one depth), over the people counts of the sweep:

    full_until         the largest count at which the model stores at least `FULL` of the facts' bits
                       (0 when it never does): below the knee, the data, not the model, sets its bits
    peak_people        the count at which it stores the most: its capacity in this sweep
    peak_bits          those bits, with their 95% interval over seeds (`_low`, `_high`)
    peak_bits_per_param            the same per parameter (every parameter counted)
    share_at_largest   stored / ceiling at the sweep's largest count

A knee lies between `full_until` and the next count; a peak below the largest count means the curve
falls after it (a model that stops learning), which is why the claims read capacity at the peak.
"""

from __future__ import annotations

import pandas as pd

from biosrecall.outputs import markdown_table
from biosrecall.stats import interval_text

FULL = 0.9
"""The share of the facts' bits above which a model counts as storing everything (`capacity_results`'
`SATURATION_TOLERANCE` read the other way)."""
MEASURE = "loss_bound_bits"


def knee_table(summary: pd.DataFrame) -> pd.DataFrame:
    """One row per model and serving depth: the columns of the module doc."""
    rows = []
    for (name, kind, depth), part in summary.groupby(["name", "kind", "depth"], sort=False):
        part = part.sort_values("people")
        share = part[MEASURE] / part["ceiling_bits"]
        full = part.loc[share >= FULL, "people"]
        peak = part.loc[part[MEASURE].idxmax()]
        rows.append({
            "name": name, "kind": kind, "depth": int(depth), "full_until": int(full.max()) if len(full) else 0,
            "peak_people": int(peak["people"]), "peak_bits": peak[MEASURE],
            "peak_bits_low": peak[f"{MEASURE}_low"], "peak_bits_high": peak[f"{MEASURE}_high"],
            "peak_bits_per_param": peak[MEASURE] / peak["parameters"],
            "share_at_largest": float(share.iloc[-1]),
        })  # fmt: skip
    return pd.DataFrame(rows)


def model_label(row) -> str:
    """A model as capacity.md names it: a baseline says so."""
    return f"{row['name']} (baseline)" if row["kind"] == "baseline" else row["name"]


def depth_label(row) -> str:
    """A serving depth as capacity.md shows it: a baseline has one."""
    return "1 (its one depth)" if row["kind"] == "baseline" else str(int(row["depth"]))


def knees_markdown(knees: pd.DataFrame) -> str:
    """The section of capacity.md that shows `knee_table`."""
    header = ["model", "depth", f"stores >= {FULL:.0%} of the facts up to (people)", "most stored at (people)",
              "most loss-bound bits", "bits/param there", "share stored at the largest count"]  # fmt: skip
    rows = [
        [model_label(row), depth_label(row), str(row["full_until"] or "-"), str(row["peak_people"]),
         interval_text(row["peak_bits"], row["peak_bits_low"], row["peak_bits_high"], "{:.0f}"),
         f"{row['peak_bits_per_param']:.3g}", f"{row['share_at_largest']:.0%}"]
        for _, row in knees.iterrows()
    ]  # fmt: skip
    return (
        "## Where each curve bends\n\n"
        f"Loss-bound bits, mean over seeds: the largest count still storing {FULL:.0%} of the facts and the "
        "count storing the most (the knee lies between).\n\n" + markdown_table(header, rows)
    )
