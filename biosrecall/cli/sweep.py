"""`biosrecall sweep run|status|collect SPEC`: a grid of training runs from one TOML spec.

    biosrecall sweep run sweeps/bios.toml --workers 2 --threads-per-run 1
    biosrecall sweep run scripts/lm/sweep-200m.toml --set data=data/ultradata-math-l3
    biosrecall sweep run sweeps/bios.toml --executor slurm --partition gpu --gpus-per-run 1 \
        --cpus-per-run 8 --time-min 600 --array-parallelism 16     # needs biosrecall[slurm]
    biosrecall sweep run sweeps/bios.toml --dry-run               # what each run would do; nothing runs
    biosrecall sweep status sweeps/bios.toml [--json]
    biosrecall sweep collect sweeps/bios.toml                      # tables into OUT/collect/

Each subcommand also takes `--config FILE`, a TOML file of its own options (`workers = 2`); the spec
format is `biosrecall.sweep.spec`; how runs are launched, resumed and recorded is
`biosrecall.sweep.worker` and `biosrecall.sweep.executors`. `run` exits 1 when any run failed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import click

from biosrecall.cli.config_file import config_option
from biosrecall.cli.options import Integer, field_docs, field_options
from biosrecall.errors import bounded
from biosrecall.interrupts import work_done
from biosrecall.numbers import counts
from biosrecall.sweep.engine import planned_actions, prepare, run_sweep
from biosrecall.sweep.executors import make_executor
from biosrecall.sweep.records import format_status, run_status
from biosrecall.sweep.spec import load_spec

_SPEC = click.argument("spec_path", metavar="SPEC", type=click.Path(path_type=Path, dir_okay=False))


@dataclass
class ExecutorOptions:
    """`--executor` and the options of both executors but workers and threads (`sweep run`'s, and every
    study's through `biosrecall study`; None: not given): `make_executor` reads them."""

    kind: str = "local"
    """Where runs go: processes on this machine, or a Slurm job array (submitit)."""

    gpus_per_run: int | None = None
    """GPUs of each run; over 1: torchrun."""

    partition: str | None = None
    """slurm: partition [default: the cluster's]."""

    cpus_per_run: int | None = None
    """slurm: CPUs of each run [default: 1]."""

    time_min: int | None = None
    """slurm: time limit per run, minutes [default: 1440]."""

    array_parallelism: int | None = None
    """slurm: tasks at once [default: 256]."""


def executor_options(gpus_default: str = "0"):
    """The options of `ExecutorOptions`, passed as its fields; `gpus_default` words the default of
    --gpus-per-run, which depends on the command."""
    gpus_help = f"{field_docs(ExecutorOptions)['gpus_per_run'].rstrip('.')} [default: {gpus_default}]."
    return field_options(
        ExecutorOptions,
        {
            "kind": {"flag": "--executor", "type": click.Choice(["local", "slurm"])},
            "gpus_per_run": {"type": Integer(counts(low=0)), "help": gpus_help},
            "cpus_per_run": {"type": Integer(counts())},
            "time_min": {"type": Integer(counts())},
            "array_parallelism": {"type": Integer(counts())},
        },
    )


@click.group()
def sweep() -> None:
    """Run, watch and tabulate a grid of training runs described by one TOML spec."""


@sweep.command("run")
@config_option()
@_SPEC
@executor_options()
@click.option(
    "--workers",
    type=Integer(counts()),
    default=None,
    help="local: runs at the same time [default: one per core; measured faster than threads per run].",
)
@click.option(
    "--threads-per-run", type=Integer(counts()), default=None, help="local: threads of each run [default: 1]."
)
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE", help="Set an option of every run.")
@click.option("--only", multiple=True, metavar="PATTERN", help="Only runs whose names match (repeatable).")
@click.option("--dry-run", is_flag=True, help="Print what each run would do; launch and write nothing.")
def run(spec_path, kind, overrides, only, dry_run, **given):
    """Bring every run of SPEC to done: finished runs are skipped, interrupted ones resumed, the
    others started; then each is evaluated as the spec's [eval] says. Options of the spec's
    [executor] section are defaults for the options here."""
    spec = load_spec(spec_path, overrides)
    executor = make_executor(kind, spec.executor, given)
    runs = spec.select(only)
    if dry_run:
        for name, action, command in planned_actions(prepare(spec.out, runs, spec.evaluations, executor)):
            click.echo(f"{action:<8} {name}" + (f"  {' '.join(command)}" if command else ""))
        return
    try:
        result = run_sweep(spec.out, runs, spec.evaluations, executor, report=_report)
    except KeyboardInterrupt as exc:
        if str(exc):  # what still runs elsewhere (a Slurm array)
            click.echo(str(exc), err=True)
        raise
    counts, *failures = result.summary().splitlines()
    click.echo(counts)
    for line in failures:  # which runs failed and where their logs are, where errors go
        click.echo(bounded(line), err=True)
    if result.failed:
        raise SystemExit(1)


def _report(outcome) -> None:
    detail = f"exit {outcome.exit_code}: {outcome.error}" if outcome.state == "failed" else outcome.action
    click.echo(f"{outcome.state:<6} {outcome.name}  {detail}  {outcome.progress}".rstrip())


@sweep.command("status")
@config_option()
@_SPEC
@click.option("--json", "as_json", is_flag=True, help="One JSON object per run instead of the table.")
def status(spec_path, as_json):
    """Print each run's state (done, running, failed, waiting), its updates and a detail, then counts."""
    rows = [run_status(job) for job in load_spec(spec_path).state_jobs()]
    click.echo(json.dumps(rows, indent=2) if as_json else format_status(rows))


@sweep.command("collect")
@config_option()
@_SPEC
def collect(spec_path):
    """Tabulate the finished runs of SPEC into OUT/collect/ (runs, recall curves or the LM comparison)."""
    from biosrecall.sweep.collect import collect_sweep

    written, notes = collect_sweep(load_spec(spec_path))
    work_done()  # the tables are written: a signal while they are listed changes nothing
    for note in notes:
        click.echo(note)
    for path in written:
        click.echo(f"wrote {path}")
