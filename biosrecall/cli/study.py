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

Every study command (`study NAME`, `leaderboard`, `lm study`, `capacity`, `figure1`) is its options
and one call of `run_engine_command`, the one flow from --archive or --plan to the printed result:
archiving, the engine's plan and run, progress lines, the one-line errors of a failed or stopped
study. The options it shares live here (`engine_options`: where runs go, --quiet, --plan, --archive;
--seeds and --out); a command adds hooks only for what is really its own: a result printer, a plan of
its own (`capacity`), a library call that runs it (`capacity`'s size check first).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import fields
from pathlib import Path
from typing import Any

import click

from biosrecall.cli.config_file import config_option
from biosrecall.cli.options import Integer, NumberList, field_options, stacked
from biosrecall.cli.sweep import ExecutorOptions, executor_options
from biosrecall.experiments.engine import StudyRunFailed, plan_study, run_study
from biosrecall.experiments.study import check_seeds
from biosrecall.interrupts import work_done
from biosrecall.numbers import SEED, counts
from biosrecall.train.config import LIMITS
from biosrecall.train.stops import Interrupted

RERUN_HINT = "rerun the same command to continue"
FAILED_HINT = f"; {RERUN_HINT} once it is fixed"


def parse_seeds(ctx, param, seeds: tuple[int, ...]) -> tuple[int, ...]:
    check_seeds(seeds)
    return seeds


SEEDS = {"type": NumberList(SEED, "seeds", "0,1,2"), "callback": parse_seeds}
"""The --seeds of figure1, capacity and lm study (`field_options` settings): a comma list of seeds,
each read and checked, then the rules of the list (`parse_seeds`: no repeats, not too many)."""
OUTPUT = click.option(
    "--out", "out_dir", required=True, type=click.Path(path_type=Path), help="Output folder."
)
"""The --out of figure1, capacity and lm study."""
# How a study's runs go on this machine: every study command's.
WORKERS = click.option(
    "--workers",
    type=Integer(counts()),
    default=None,
    help="Runs trained at the same time, each a process of its own [default: one per core, or one per "
    "GPU]; on the CPU, also checkpoints scored at the same time. Logs: OUT/runs/.sweep/<run>.log.",
)
THREADS = click.option(
    "--threads",
    type=Integer(LIMITS["threads"]),
    default=None,
    help="CPU threads of each run [default: the cores shared among the workers].",
)
QUIET = click.option("--quiet", is_flag=True, help="No progress output.")
PLAN_HELP = "Print what each run would do, its size and estimated CPU time; write nothing."

EXECUTOR_OPTIONS = tuple(field.name for field in fields(ExecutorOptions))
"""The values `executor_options` adds, handed to the engine as the executor's settings."""

STUDIES = {
    "depth": ("biosrecall.experiments.depth_study", "DEPTH"),
    "leaderboard": ("biosrecall.experiments.leaderboard", "LEADERBOARD"),
}


def archive_option(grows: str) -> Callable:
    """--archive DEST of a study command (`run_engine_command`); `grows`: what a copy's rerun may add."""
    return click.option(
        "--archive",
        type=click.Path(path_type=Path),
        default=None,
        metavar="DEST",
        help="Train nothing: copy the finished output --out into DEST without its weights and training "
        "states (small enough to commit). A copy of DEST continues the study: the same command with more "
        f"{grows} trains only what is new. --overwrite replaces an existing DEST.",
    )


def report_outcome(outcome) -> None:
    """A study's progress on stderr: a line before each batch of runs, then one per run as it ends (its
    progress is in its log)."""
    if isinstance(outcome, str):
        click.echo(outcome, err=True)
    elif outcome.state == "failed":
        click.echo(f"failed  {outcome.name}: {outcome.error}  [log {outcome.log}]", err=True)
    elif outcome.action != "skipped":
        click.echo(f"{outcome.action:<8} {outcome.name}  {outcome.progress}".rstrip(), err=True)


def engine_options(grows: str, executor: bool = True, plan_help: str = PLAN_HELP) -> list[Callable]:
    """The options of a study command after the study's own: where its runs go (`executor_options`
    unless not `executor`, --workers, --threads), --quiet, --plan (`plan_help`: what a plan of the
    command's own prints) and --archive (`grows`: what a copy's rerun may add) with its --overwrite.
    figure1, whose --overwrite replaces an output, picks its own among them."""
    return [
        *([executor_options(gpus_default="1 with --device cuda, else 0")] if executor else []),
        WORKERS,
        THREADS,
        QUIET,
        click.option("--plan", is_flag=True, help=plan_help),
        archive_option(grows),
        click.option("--overwrite", is_flag=True, help="With --archive: replace an existing DEST."),
    ]


def run_engine_command(
    study: tuple[str, str],
    options: Callable[[dict[str, Any]], Any],
    show: Callable[[Any, Any], None],
    *,
    out_dir: Path,
    workers: int | None,
    threads: int | None,
    quiet: bool,
    archive: Path | None,
    overwrite: bool,
    plan: bool = False,
    plan_lines: Callable[[Any, Any], list[str]] | None = None,
    run: Callable[[Any, Any], Any] | None = None,
    record: str | None = None,
    failed_hint: str = FAILED_HINT,
    **values: Any,
) -> None:
    """The flow of every study command, from its parsed options (`engine_options`, or the command's
    picks of them, and `values`: the study's own and the executor's). `study`: the module and
    attribute of its declaration (a `biosrecall.experiments.engine.Study`), imported only to plan or
    run it.

    With --archive: copy the finished output without its weights (`biosrecall.experiments.study_archive`;
    `record` names the record file of a study whose archive packs its runs) and read no other option.
    Else `options(values)` (the study's, where bad input is refused): with --plan print `plan_study`'s
    lines (or the command's own, `plan_lines(options, report)`) and write nothing; else run the study
    (`run_study`, given --overwrite when its command replaces outputs; or the command's own library
    call, `run(options, report)`) and `show(result, options)`.

    A failed run ends the command with one line on stderr and exit 1 (`failed_hint` follows the
    error), Ctrl-C with one line and exit 130. Finished runs and caches are kept and a stopped run
    saved its progress, so no option is needed to carry on: the same command resumes."""
    if archive is not None:
        from biosrecall.experiments.study_archive import archive_study

        files, size = archive_study(out_dir, archive, overwrite=overwrite, record=record)
        click.echo(
            f"archived {files} files ({size / 1e6:.1f} MB) of {out_dir} into {archive}, without weights"
        )
        return

    executor = {name: values.pop(name) for name in EXECUTOR_OPTIONS if name in values}
    chosen = options(values)
    declared = getattr(importlib.import_module(study[0]), study[1])
    report = None if quiet else report_outcome
    if plan:
        if plan_lines is None:
            lines = plan_study(declared, out_dir, chosen, workers, threads, executor)
        else:
            lines = plan_lines(chosen, report)
        click.echo("\n".join(lines))
        return
    try:
        if run is None:
            replacing = overwrite and declared.replaces is not None
            result = run_study(declared, out_dir, chosen, workers, threads, report, executor, replacing)
        else:
            result = run(chosen, report)
    except StudyRunFailed as exc:  # not a usage error: the run's log says what went wrong
        click.echo(f"error: {exc}{failed_hint}", err=True)
        raise SystemExit(1) from None
    except (Interrupted, KeyboardInterrupt) as exc:
        stopped = str(exc) if isinstance(exc, Interrupted) else "interrupted"
        click.echo(f"{stopped}; {RERUN_HINT}", err=True)
        raise SystemExit(130) from None
    work_done()  # the study's outputs are written: a Ctrl-C while printing them changes nothing
    show(result, chosen)


def study_command(name: str) -> click.Command:
    """The subcommand of the study `name`: its options, then the engine's (`--out`, `--plan`, ...)."""
    module, attribute = STUDIES[name]
    study = getattr(importlib.import_module(module), attribute)

    def show(result, options) -> None:
        for table in result.tables:
            click.echo(f"wrote {result.out_dir / table}.csv, .parquet, .md")
        click.echo(f"wrote {result.out_dir / 'claims'}.csv, .md: " + ", ".join(result.claims["verdict"]))

    def command(**given):
        run_engine_command(
            STUDIES[name], lambda values: study.options(**values), show, record=f"{study.name}.json", **given
        )

    options = [
        field_options(study.options),
        click.option(
            "--out",
            "out_dir",
            type=click.Path(path_type=Path),
            required=True,
            help="The study's output folder; rerunning the same command continues it.",
        ),
        *engine_options(" or ".join("--" + key.replace("_", "-") for key in study.growing)),
        config_option(),
    ]
    return click.command(name, help=study.summary, short_help=study.summary)(stacked(options)(command))


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
