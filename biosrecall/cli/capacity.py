"""`biosrecall capacity`: stored bits per parameter of looped models and standard baselines, at matched exposures.

biosrecall capacity --out runs/capacity --preset bios-tiny --people 20,40 --exposures 20   # minutes
biosrecall capacity --out runs/capacity --people 50,100,200 --seeds 0,1,2 --exposures 100  # the study
biosrecall capacity --out runs/capacity --people 1000,4000 --exposures 1000 --plan   # its cost; trains nothing
biosrecall capacity --out runs/capacity --archive docs/results/capacity   # without weights, to commit

Trains the three Figure-1 schedules and the `<preset>-std-params` / `<preset>-std-flops` baselines at
every people count and seed, each for `--exposures` views of every biography, scores their stored
bits (the study `biosrecall.experiments.capacity`, declared on the engine; its options are the fields
of `CapacityOptions`, each with its docstring as help) and writes
OUT/capacity.{csv,md,png} and OUT/capacity_claims.{csv,md}. Rerunning the same command skips
finished runs and resumes stopped ones (Ctrl-C: exit code 130); adding seeds or people counts trains
only what is new. OUT/capacity.json holds the options and the command that continues the output
(`biosrecall.experiments.engine`).
"""

from __future__ import annotations

from pathlib import Path

import click

from biosrecall.cli.config_file import config_option
from biosrecall.cli.options import Integer, NumberList, Real, field_options
from biosrecall.cli.study import (
    ARCHIVE_OVERWRITE,
    QUIET,
    SEEDS,
    THREADS,
    WORKERS,
    archive_option,
    archive_output,
    parse_seeds,
    report_outcome,
    study_errors,
)
from biosrecall.experiments.capacity import PLAN_PROBE_PEOPLE, CapacityOptions, plan_capacity, run_capacity
from biosrecall.interrupts import work_done
from biosrecall.numbers import DEPTH, EXPOSURES, counts
from biosrecall.train.config import LIMITS

CHECKED = {
    "people": {"type": NumberList(counts(), "people counts", "50,100,200", required=True)},
    "seeds": {"type": SEEDS, "callback": parse_seeds},
    "exposures": {"type": Real(EXPOSURES)},
    "batch_size": {"type": Integer(LIMITS["batch_size"])},
    "seq_len": {"type": Integer(LIMITS["seq_len"])},
    "lr": {"type": Real(LIMITS["lr"])},
    "depths": {"type": NumberList(DEPTH, "depths", "1,4,16,64", required=True)},
}
"""What the options of `CapacityOptions` take beyond their fields' types (`field_options`; their help
is the docstring under each field)."""


@click.command()
@config_option()
@click.option("--out", "out_dir", required=True, type=click.Path(path_type=Path), help="Output folder.")
@field_options(CapacityOptions, CHECKED)
@WORKERS
@THREADS
@QUIET
@click.option(
    "--plan",
    is_flag=True,
    help="Train nothing and write nothing: print every run's parameters, updates, tokens, modeled "
    "FLOPs and mean exposures (a dry run; the datasets are generated in a temporary folder).",
)
@archive_option("--seeds or --people")
@ARCHIVE_OVERWRITE
def capacity(out_dir, workers, threads, quiet, plan, archive, overwrite, **values):
    """Measure stored bits per parameter of the three schedules and two standard-transformer baselines
    over a people sweep at matched exposures, and judge the capacity claims.

    Writes capacity.csv/.md (every run and the mean over seeds, 95% t intervals), capacity.png and
    capacity_claims.csv/.md. Rerunning the same command skips finished runs and resumes stopped ones;
    --seeds and --people may grow, --depths and --device may change, and an output made with other
    settings is refused."""
    if archive is not None:
        archive_output(out_dir, archive, overwrite)
        return
    options = CapacityOptions(**values)
    report = None if quiet else report_outcome
    if plan:
        _print_plan(options, plan_capacity(options, report))
        return
    with study_errors():
        result = run_capacity(out_dir, options, threads=threads, workers=workers, report=report)
    work_done()  # the outputs are written: a Ctrl-C while printing them changes nothing
    _print(result)


def _print_plan(options, table) -> None:
    click.echo(table.to_string(index=False, float_format=lambda x: f"{x:.4g}"))
    if max(options.people) > PLAN_PROBE_PEOPLE:
        click.echo(
            f"runs of more than {PLAN_PROBE_PEOPLE:,} people are estimated from {PLAN_PROBE_PEOPLE:,} "
            "people's batches, scaled (about); no dataset of theirs was made"
        )
    click.echo(
        f"{len(table)} runs: {table['updates'].sum():,} updates, {table['tokens'].sum():,} tokens, "
        f"{table['train_flops'].sum():.3e} modeled training FLOPs in all, at {options.exposures:g} "
        "exposures; nothing was trained or written"
    )


def _print(result) -> None:
    from biosrecall.experiments.claims import claims_markdown, seed_count

    if seed_count(result.claims) < 2:  # say why before the reader sees a column of "inconclusive"
        click.echo("claims, from 1 seed: one seed has no interval, so no claim can be decided (add --seeds)")
    click.echo(claims_markdown(result.claims))
    for what, name in (
        ("tables", "capacity.md"),
        ("claims", "capacity_claims.md"),
        ("figure", "capacity.png"),
    ):
        click.echo(f"{what}: {result.out_dir / name}")
