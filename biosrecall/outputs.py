"""Where every result table and figure is written, and the one palette every figure draws with.

    write_table(table, "results/recall_curve")   # results/recall_curve.csv and .parquet
    save_figure(fig, "results/recall_curve")     # results/recall_curve.png (200 dpi) and .pdf
    COLORS[i % len(COLORS)], MARKERS[i % len(MARKERS)]
    markdown_columns(table, {"people": "{people}", "bits": interval_cell("bits")})  # a study's .md table

Each file goes to a temporary name and is renamed into place (`biosrecall.atomic`), so a reader never
sees half a table or half a figure; the two files of a table (or of a figure) are renamed only once both
are complete, so a failure (a full disk) never leaves a new csv beside an old parquet. A suffix of one
of the written formats on `base` is dropped.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import pandas as pd

from biosrecall.atomic import atomic_write_path, refuse_file
from biosrecall.stats import interval_text

# Okabe-Ito: distinguishable with the common colour-vision deficiencies.
COLORS = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#F0E442")
# Markers keep lines apart in black-and-white print.
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "<", ">", "h", "p")
TABLE_FORMATS = ("csv", "parquet")
FIGURE_FORMATS = ("png", "pdf")
FIGURE_DPI = 200


def _paths(base: str | Path, formats: tuple[str, ...]) -> list[Path]:
    """`<base>.<format>` for each format, refusing a folder that exists as a file."""
    base = Path(base)
    if base.suffix.lstrip(".") in formats:
        base = base.with_suffix("")
    refuse_file(base.parent)
    return [base.with_name(f"{base.name}.{fmt}") for fmt in formats]


def write_table(table: pd.DataFrame, base: str | Path) -> list[Path]:
    """`<base>.csv` and `<base>.parquet` (no index), both written before either is renamed into place;
    returns both paths."""
    csv_path, parquet_path = _paths(base, TABLE_FORMATS)
    with atomic_write_path(csv_path) as csv_tmp:  # each write inside its own file's block: a failure
        table.to_csv(csv_tmp, index=False)  # names the file it was writing
        with atomic_write_path(parquet_path) as parquet_tmp:
            table.to_parquet(parquet_tmp, index=False)
    return [csv_path, parquet_path]


def save_figure(fig, base: str | Path) -> list[Path]:
    """`<base>.png` (200 dpi) and `<base>.pdf` of a matplotlib Figure, both written before either is
    renamed into place."""
    png_path, pdf_path = written = _paths(base, FIGURE_FORMATS)
    with atomic_write_path(png_path) as png_tmp:
        fig.savefig(png_tmp, format="png", dpi=FIGURE_DPI)
        with atomic_write_path(pdf_path) as pdf_tmp:
            # No creation date: the same figure is the same bytes, so reruns can be compared with cmp.
            fig.savefig(pdf_tmp, format="pdf", dpi=FIGURE_DPI, metadata={"CreationDate": None})
    return written


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    """A Markdown table of `rows` under `header` (`markdown_columns` builds the rows of a study's tables)."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(map(str, row)) + " |" for row in rows]) + "\n"


def markdown_columns(table: pd.DataFrame, columns: dict[str, str | Callable[[dict], str]]) -> str:
    """`table` as a Markdown table, the one writer of every study's tables: one column per entry of
    `columns`, its header -> its cell, a template filled from the row's fields ("{people}",
    "{train_flops:.3g}") or a function of the row (`interval_cell`)."""
    cells = [
        [cell(row) if callable(cell) else cell.format_map(row) for cell in columns.values()]
        for row in table.to_dict("records")
    ]
    return markdown_table(list(columns), cells)


def interval_cell(column: str, fmt: str = "{:.1f}", missing: str | None = None) -> Callable[[dict], str]:
    """A cell "mean [low, high]" of `column` and its `<column>_low`, `<column>_high` over seeds
    (`stats.interval_text`: the mean alone with one seed); `missing` in place of a NaN mean."""

    def cell(row: dict) -> str:
        mean = row[column]
        if missing is not None and math.isnan(mean):
            return missing
        return interval_text(mean, row[f"{column}_low"], row[f"{column}_high"], fmt)

    return cell
