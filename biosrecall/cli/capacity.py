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

import click

from biosrecall.cli.config_file import config_option
from biosrecall.cli.options import Integer, NumberList, Real, field_options, stacked
from biosrecall.cli.study import OUTPUT, SEEDS, engine_options, run_engine_command
from biosrecall.experiments.capacity import PLAN_PROBE_PEOPLE, CapacityOptions, plan_capacity, run_capacity
from biosrecall.experiments.claims import claims_markdown, seed_count
from biosrecall.numbers import DEPTH, EXPOSURES, counts
from biosrecall.train.config import LIMITS

CHECKED = {
    "people": {"type": NumberList(counts(), "people counts", "50,100,200", required=True)},
    "seeds": SEEDS,
    "exposures": {"type": Real(EXPOSURES)},
    "batch_size": {"type": Integer(LIMITS["batch_size"])},
    "seq_len": {"type": Integer(LIMITS["seq_len"])},
    "lr": {"type": Real(LIMITS["lr"])},
    "depths": {"type": NumberList(DEPTH, "depths", "1,4,16,64", required=True)},
}
"""What the options of `CapacityOptions` take beyond their fields' types (`field_options`; their help
is the docstring under each field)."""
PLAN_HELP = (
    "Train nothing and write nothing: print every run's parameters, updates, tokens, modeled FLOPs and "
    "mean exposures (a dry run; the datasets are generated in a temporary folder)."
)


@click.command()
@config_option()
@OUTPUT
@field_options(CapacityOptions, CHECKED)
@stacked(engine_options("--seeds or --people", executor=False, plan_help=PLAN_HELP))
def capacity(out_dir, workers, threads, **given):
    """Measure stored bits per parameter of the three schedules and two standard-transformer baselines
    over a people sweep at matched exposures, and judge the capacity claims.

    Writes capacity.csv/.md (every run and the mean over seeds, 95% t intervals), capacity.png and
    capacity_claims.csv/.md. Rerunning the same command skips finished runs and resumes stopped ones;
    --seeds and --people may grow, --depths and --device may change, and an output made with other
    settings is refused."""
    run_engine_command(
        ("biosrecall.experiments.capacity", "CAPACITY"),
        lambda values: CapacityOptions(**values),
        _print,
        out_dir=out_dir,
        workers=workers,
        threads=threads,
        plan_lines=_plan_lines,
        # the engine's run, after refusing a study larger than the machine
        run=lambda options, report: run_capacity(
            out_dir, options, threads=threads, workers=workers, report=report
        ),
        **given,
    )


def _plan_lines(options, report) -> list[str]:
    """`plan_capacity`'s table of every run, then its totals."""
    table = plan_capacity(options, report)
    lines = [table.to_string(index=False, float_format=lambda x: f"{x:.4g}")]
    if max(options.people) > PLAN_PROBE_PEOPLE:
        lines.append(
            f"runs of more than {PLAN_PROBE_PEOPLE:,} people are estimated from {PLAN_PROBE_PEOPLE:,} "
            "people's batches, scaled (about); no dataset of theirs was made"
        )
    lines.append(
        f"{len(table)} runs: {table['updates'].sum():,} updates, {table['tokens'].sum():,} tokens, "
        f"{table['train_flops'].sum():.3e} modeled training FLOPs in all, at {options.exposures:g} "
        "exposures; nothing was trained or written"
    )
    return lines


def _print(result, options) -> None:

    if seed_count(result.claims) < 2:  # say why before the reader sees a column of "inconclusive"
        click.echo("claims, from 1 seed: one seed has no interval, so no claim can be decided (add --seeds)")
    click.echo(claims_markdown(result.claims))
    for what, name in (
        ("tables", "capacity.md"),
        ("claims", "capacity_claims.md"),
        ("figure", "capacity.png"),
    ):
        click.echo(f"{what}: {result.out_dir / name}")
