"""`biosrecall study NAME`: any study declared on the engine, its options read from its declaration.

    biosrecall study depth --data data/lm-kjv --out runs/depth --seeds 0,1,2
    biosrecall study depth --data data/lm-kjv --out runs/depth --plan          # what would run; writes nothing
    biosrecall study depth --out runs/depth --archive docs/results/depth         # the results without weights
    biosrecall study depth --help                                                # every option, from the study
    biosrecall study depth ... --device cuda --executor slurm --partition gpu --time-min 600   # a Slurm array

Each study (`STUDIES`: name -> the module and attribute of its `biosrecall.experiments.engine.Study`)
becomes one subcommand. Its options are the fields of the study's options dataclass, each with the
docstring under the field as its help and its default as the option's: a tuple field takes a comma
list. `--config FILE` reads the same names from a TOML file. The executor options are `sweep run`'s
(`biosrecall.cli.sweep.executor_options`): runs go to processes here or to a Slurm job array. The
engine does the rest (`biosrecall.experiments.engine`: lock, record, training through the sweep
engine, tables, claims).
"""

from __future__ import annotations

import dataclasses
import importlib
import typing
from pathlib import Path
from typing import Any

import click

from biosrecall.cli.config_file import config_option
from biosrecall.cli.figure1 import archive_output, report_outcome, study_errors
from biosrecall.cli.options import field_docs
from biosrecall.cli.sweep import executor_options

EXECUTOR_OPTIONS = ("kind", "gpus_per_run", "partition", "cpus_per_run", "time_min", "array_parallelism")
"""The values `executor_options` adds, handed to the engine as the executor's settings."""

STUDIES = {
    "depth": ("biosrecall.experiments.depth_study", "DEPTH"),
    "leaderboard": ("biosrecall.experiments.leaderboard", "LEADERBOARD"),
}


class CommaList(click.ParamType):
    """A comma list ("0,1,2") of `item` values, as a tuple."""

    name = "list"

    def __init__(self, item: type):
        self.item = item

    def convert(self, value: Any, param, ctx) -> tuple:
        if isinstance(value, tuple | list):
            return tuple(value)
        try:
            items = tuple(self.item(part.strip()) for part in str(value).split(",") if part.strip())
        except ValueError:
            items = ()
        if not items:
            self.fail(
                f"expected a comma list of {self.item.__name__} values, got {str(value)[:80]!r}", param, ctx
            )
        return items


def _option(item: dataclasses.Field, kind: Any, help_text: str):
    flag = "--" + item.name.replace("_", "-")
    if typing.get_origin(kind) is tuple:
        kind = CommaList(typing.get_args(kind)[0])
    return click.option(flag, item.name, type=kind, default=item.default, show_default=True, help=help_text)


def study_command(name: str) -> click.Command:
    """The subcommand of the study `name`: its options, then the engine's (`--out`, `--plan`, ...)."""
    module, attribute = STUDIES[name]
    study = getattr(importlib.import_module(module), attribute)
    kinds, docs = typing.get_type_hints(study.options), field_docs(study.options)

    def command(out_dir, workers, threads, quiet, plan, archive, overwrite, **values):
        from biosrecall.experiments.engine import plan_study, run_study

        if archive is not None:
            archive_output(out_dir, archive, overwrite, f"{study.name}.json")
            return
        executor = {name: values.pop(name) for name in EXECUTOR_OPTIONS}
        options = study.options(**values)
        if plan:
            click.echo("\n".join(plan_study(study, out_dir, options, workers, threads, executor)))
            return
        report = None if quiet else report_outcome
        with study_errors():
            result = run_study(study, out_dir, options, workers, threads, report, executor)
        for table in result.tables:
            click.echo(f"wrote {out_dir / table}.csv, .parquet, .md")
        click.echo(f"wrote {out_dir / 'claims'}.csv, .md: " + ", ".join(result.claims["verdict"]))

    engine_options = [
        click.option("--out", "out_dir", type=click.Path(path_type=Path), required=True,
                     help="The study's output folder; rerunning the same command continues it."),
        executor_options(gpus_default="1 with --device cuda, else 0"),
        click.option("--workers", type=click.IntRange(min=1), default=None,
                     help="local: runs at once [default: one per core, or per GPU on CUDA]."),
        click.option("--threads", type=click.IntRange(min=1), default=None,
                     help="local: threads per run [default: the cores shared among the workers]."),
        click.option("--quiet", is_flag=True, help="No progress lines."),
        click.option("--plan", is_flag=True,
                     help="Print what each run would do, its size and estimated CPU time; write nothing."),
        click.option("--archive", type=click.Path(path_type=Path), default=None,
                     help="Copy the finished output into this folder without weights; train nothing."),
        click.option("--overwrite", is_flag=True, help="With --archive: replace an existing DEST."),
        config_option(),
    ]  # fmt: skip
    fields = [
        _option(item, kinds[item.name], docs.get(item.name, "")) for item in dataclasses.fields(study.options)
    ]
    for decorate in reversed([*fields, *engine_options]):
        command = decorate(command)
    return click.command(name, help=study.summary, short_help=study.summary)(command)


class _Studies(click.Group):
    """Imports a study's declaration only when its subcommand is used."""

    def list_commands(self, ctx) -> list[str]:
        return sorted(STUDIES)

    def get_command(self, ctx, name: str) -> click.Command | None:
        if name in STUDIES and name not in self.commands:
            self.add_command(study_command(name), name)
        return self.commands.get(name)


@click.group(cls=_Studies)
def study():
    """Run a study declared on the engine (biosrecall.experiments.engine): `study depth --help`."""
