"""`biosrecall recall-curve`: recalled bits per person against serving depth for trained runs.

    biosrecall recall-curve runs/fixed4 runs/fixed-first runs/uniform --checkpoint 0.45 --checkpoint final

Evaluates the chosen checkpoints (the selector syntax of `biosrecall.runs`, the same in every command;
default: every budget fraction) of each run at serving depths 1..--max-depth with one
all-depth sweep per checkpoint, and writes into --out (default `./recall-curve`; the figure compares
runs, so it belongs to none of them):

    recall_curve.csv, recall_curve.parquet   long format: run, schedule, fraction, update, flops, budget,
                                             depth, attribute ("all" = whole person), recall, bits, ...
    recall_curve.png, recall_curve.pdf       one panel per budget fraction (or per attribute)

With --exit (exit criteria of `biosrecall.eval.exits`, e.g. `--exit kl:1e-3,stable:2,oracle`; a bare
name is a threshold sweep) each query also stops at the first depth where the criterion holds at all
its answer positions, and --out gets:

    exit_frontier.csv, .parquet, .png, .pdf  recalled bits, mean and p95 exit depth and modeled FLOPs per
                                             query for each criterion, next to the fixed-depth curve
    exit_headline.csv, .parquet              per run: mean depth to reach 95% of its best recall,
                                             adaptive vs fixed

Each checkpoint's result is cached as `checkpoints/<label>/recall.parquet`, so re-plotting (another
--metric, fewer runs, a smaller --max-depth) does not re-evaluate; --refresh forces it.
"""

from __future__ import annotations

from pathlib import Path

import click

from biosrecall.runs import SELECTOR_HELP

DEFAULT_OUT = Path("recall-curve")


@click.command("recall-curve")
@click.argument("run_dirs", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option(
    "--checkpoint",
    "checkpoints",
    multiple=True,
    help=f"Checkpoints to evaluate (repeatable): {SELECTOR_HELP}. [default: fractions]",
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
@click.option(
    "--exit",
    "exits",
    multiple=True,
    help="Exit criteria to score (repeatable or a comma list): fixed:K, kl:EPS, stable:M, entropy:H, "
    "oracle; a bare name sweeps its thresholds. Capped at --max-depth.",
)
def recall_curve(
    run_dirs,
    checkpoints,
    max_depth,
    threshold,
    batch_size,
    device,
    data_dir,
    out_dir,
    metric,
    refresh,
    people,
    exits,
):
    """Score factual recall of trained runs over serving depths and plot Figure-1 style curves."""
    from biosrecall.errors import BiosrecallError
    from biosrecall.eval.curves import DEFAULT_CHECKPOINTS, TABLE_NAME, recall_curves, summary_table
    from biosrecall.eval.plots import plot_recall_curves
    from biosrecall.outputs import save_figure, write_table

    if out_dir.exists() and not out_dir.is_dir():  # before hours of evaluation, not after
        raise BiosrecallError(f"output path {out_dir} exists and is not a folder")
    criteria = _parse_exits(exits, max_depth)
    table = recall_curves(
        run_dirs,
        checkpoints or DEFAULT_CHECKPOINTS,
        max_depth,
        threshold,
        batch_size=batch_size,
        device=device,
        data_dir=data_dir,
        refresh=refresh,
        people=people,
    )
    written = write_table(table, out_dir / TABLE_NAME)
    written += save_figure(plot_recall_curves(table, metric=metric), out_dir / TABLE_NAME)
    shown_depths = sorted({d for d in (1, 4, 16, 64) if d <= max_depth} | {max_depth})
    click.echo("recalled bits per person:")
    click.echo(summary_table(table, shown_depths).to_string(index=False, float_format=lambda x: f"{x:.2f}"))
    if criteria:
        options = {"max_depth": max_depth, "threshold": threshold, "batch_size": batch_size}
        options.update(device=device, data_dir=data_dir, people=people)
        written += _score_exits(run_dirs, criteria, checkpoints or DEFAULT_CHECKPOINTS, out_dir, options)
    for path in written:
        click.echo(f"wrote {path}")


def _parse_exits(exits, max_depth: int) -> list:
    """The criteria of --exit (none when absent), checked before any model runs."""
    if not exits:
        return []
    from biosrecall.eval.exits import check_max_depth, parse_exits

    check_max_depth(max_depth)
    return parse_exits(exits)


def _score_exits(run_dirs, criteria, checkpoints, out_dir: Path, options: dict) -> list[Path]:
    """Score the criteria from one all-depth pass per checkpoint; write and print the results."""
    from biosrecall.eval.serving import exit_frontier, write_frontier

    frontier = exit_frontier(
        run_dirs,
        criteria,
        checkpoints,
        options["max_depth"],
        options["threshold"],
        batch_size=options["batch_size"],
        device=options["device"],
        data_dir=options["data_dir"],
        people=options["people"],
    )
    written, headline = write_frontier(out_dir, frontier)
    shown = frontier[frontier["kind"] != "fixed-depth"]
    columns = ["run", "checkpoint", "criterion", "bits", "mean_depth", "p95_depth", "flops_per_query"]
    click.echo("adaptive exit:")
    click.echo(shown[columns].to_string(index=False, float_format=lambda x: f"{x:.3g}"))
    click.echo("mean depth to reach 95% of each run's best recall:")
    click.echo(headline.to_string(index=False, float_format=lambda x: f"{x:.3g}"))
    return written
