"""`biosrecall train`: train one looped transformer on a bioS dataset with a depth schedule and a FLOP budget.

    biosrecall train --data data/bios --out runs/ff --schedule fixed_first:k0=4,switch=0.8,finish=uniform \
        --budget-of fixed:4:2000
    torchrun --nproc_per_node 2 -m biosrecall train ...   # data-parallel (DDP, or --parallel fsdp)
    biosrecall train ... --log tensorboard --log wandb     # also to trackers (biosrecall.train.tracking)
    biosrecall train ... --from runs/trunk --at-update 640 # a finishing branch (biosrecall.train.branch)

The trainer options come from `TrainConfig` (see `biosrecall.cli.options`), shared with `lm train`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import click

from biosrecall.cli.config_file import config_option
from biosrecall.cli.options import (
    Integer,
    field_options,
    merge_overrides,
    parse_overrides,
    split_options,
    trainer_options,
)
from biosrecall.interrupts import work_done
from biosrecall.model.presets import DEFAULT_BIOS_PRESET
from biosrecall.numbers import counts
from biosrecall.train.progress import make_reporter
from biosrecall.train.stops import Interrupted, TrainingDiverged

MODEL_OVERRIDES = ("injection", "init_state", "norm", "backprop_depth")


@dataclass
class TrainOptions:
    """The options of `biosrecall train` between --out and the trainer's, one per field
    (`field_options`; the help of each is the docstring under it)."""

    preset: str = DEFAULT_BIOS_PRESET
    """Model preset (see `biosrecall flops`)."""

    parent: str | None = None
    """Branch: start from this run's saved state after --at-update updates instead of from scratch (the
    updates before it must be the ones this run would train: same model, data, seed and batch, and the
    same depth and learning rate at every update)."""

    at_update: int | None = None
    """Branch point: the parent's update count to start from."""

    model_override: tuple[str, ...] = ()
    """Any other model config field, FIELD=VALUE (repeatable or comma list), e.g. n_block=2."""


CHECKED = {
    "parent": {"flag": "--from", "type": click.Path()},
    "at_update": {"type": Integer(counts())},
    "model_override": {"type": str, "multiple": True, "callback": parse_overrides},
}
"""What the options of `TrainOptions` take beyond their fields' types (`field_options`)."""


@click.command()
@config_option(task="bios")
@click.option(
    "--data", "data_dir", required=True, type=click.Path(), help="Dataset folder from `biosrecall generate`."
)
@click.option("--out", "run_dir", required=True, type=click.Path(), help="Run folder to create (or resume).")
@field_options(TrainOptions, CHECKED)
@trainer_options(overrides=MODEL_OVERRIDES, run=True)
def train(data_dir, run_dir, preset, parent, at_update, model_override, resume, overwrite, quiet, **options):
    """Train a looped transformer on a bioS dataset at a modeled-FLOP budget.

    Prints the plan (updates, switch update, FLOPs, tokens, parameters, estimated time), trains,
    keeps weights at each budget fraction under OUT/checkpoints/<fraction>/ and a resumable
    OUT/checkpoints/latest, and logs every update to OUT/metrics.jsonl."""
    from biosrecall.train.branch import branch_of
    from biosrecall.train.trainer import train_bios

    config, overrides = split_options(options)
    overrides = merge_overrides(overrides, model_override)
    branch = branch_of(parent, at_update)
    reporter = make_reporter(quiet, config.log_every)
    train_and_report(
        lambda: train_bios(data_dir, run_dir, config, preset, overrides, resume, overwrite, reporter, branch),
        quiet,
    )


def train_and_report(train_run: Callable[[], Any], quiet: bool) -> None:
    """Run `train_run` (a trainer call) as a command does: a diverged or interrupted run is one error
    line and exit 1 or 130; a finished one prints what it trained and kept, unless `quiet`."""
    try:
        result = train_run()
    except (TrainingDiverged, Interrupted) as exc:
        click.echo(f"error: {exc}", err=True)
        raise SystemExit(130 if isinstance(exc, Interrupted) else 1) from None
    work_done()  # the run is trained and saved: a Ctrl-C from here on changes nothing
    if quiet:  # errors only: the run folder holds everything these lines would say
        return
    click.echo(f"trained {result.updates} updates, {result.flops:.3e} FLOPs in {result.wall_seconds:.1f}s")
    for fraction, path in result.checkpoints.items():
        click.echo(f"checkpoint {fraction:g}: {path}")
