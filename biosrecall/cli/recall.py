"""`biosrecall recall-curve`: recalled bits per person against serving depth for trained runs.

    biosrecall recall-curve runs/fixed4 runs/fixed-first runs/uniform --checkpoint 0.45 --checkpoint 1.0

Evaluates the chosen checkpoints (default: all) of each run at serving depths 1..--max-depth with one
all-depth sweep per checkpoint, and writes into --out (default `./recall-curve`; the figure compares
runs, so it belongs to none of them):

    recall_curve.csv, recall_curve.parquet   long format: run, schedule, fraction, update, flops, budget,
                                             depth, attribute ("all" = whole person), recall, bits, ...
    recall_curve.png, recall_curve.pdf       one panel per budget fraction (or per attribute)

Each checkpoint's result is cached as `checkpoints/<fraction>/recall.parquet`, so re-plotting (another
--metric, fewer runs, a smaller --max-depth) does not re-evaluate; --refresh forces it.
"""

from __future__ import annotations

from pathlib import Path

import click

DEFAULT_OUT = Path("recall-curve")


@click.command("recall-curve")
@click.argument("run_dirs", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option(
    "--checkpoint",
    "fractions",
    multiple=True,
    type=float,
    help="Budget fraction to evaluate (repeatable), e.g. --checkpoint 0.45 --checkpoint 1.0. Default: all.",
)
@click.option("--max-depth", default=64, type=int, help="Evaluate serving depths 1..max-depth.")
@click.option(
    "--threshold", default=4, type=int, help="A fact is recalled when this many of its templates are exact."
)
@click.option("--batch-size", default=256, type=int, help="Evaluation rows per forward pass.")
@click.option("--device", default="auto", help='"auto" (CUDA when present), "cpu" or "cuda".')
@click.option(
    "--data",
    "data_dir",
    type=click.Path(path_type=Path),
    default=None,
    help="Dataset folder to use instead of the one recorded in the checkpoints (hash still checked).",
)
@click.option(
    "--out",
    "out_dir",
    type=click.Path(path_type=Path),
    default=DEFAULT_OUT,
    help="Folder for the tables and the figure.",
)
@click.option(
    "--metric",
    type=click.Choice(["bits", "attribute"]),
    default="bits",
    help="bits: recalled bits per person; attribute: share of facts recalled per attribute.",
)
@click.option("--refresh", is_flag=True, help="Re-evaluate even when a cached result is current.")
@click.option(
    "--people", type=int, default=None, help="Score only the first N people (faster) [default: everyone]."
)
def recall_curve(
    run_dirs, fractions, max_depth, threshold, batch_size, device, data_dir, out_dir, metric, refresh, people
):
    """Score factual recall of trained runs over serving depths and plot Figure-1 style curves."""
    from biosrecall.errors import BiosrecallError
    from biosrecall.eval.curves import TABLE_NAME, recall_curves, summary_table, write_tables
    from biosrecall.eval.plots import plot_recall_curves

    if out_dir.exists() and not out_dir.is_dir():  # before hours of evaluation, not after
        raise BiosrecallError(f"output path {out_dir} exists and is not a folder")
    table = recall_curves(
        run_dirs,
        fractions or None,
        max_depth,
        threshold,
        batch_size=batch_size,
        device=device,
        data_dir=data_dir,
        refresh=refresh,
        people=people,
    )
    written = write_tables(table, out_dir)
    plot_recall_curves(table, out_path=out_dir / TABLE_NAME, metric=metric)
    shown_depths = sorted({d for d in (1, 4, 16, 64) if d <= max_depth} | {max_depth})
    click.echo("recalled bits per person:")
    click.echo(summary_table(table, shown_depths).to_string(index=False, float_format=lambda x: f"{x:.2f}"))
    for path in [*written, out_dir / f"{TABLE_NAME}.png", out_dir / f"{TABLE_NAME}.pdf"]:
        click.echo(f"wrote {path}")
