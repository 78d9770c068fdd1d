"""`biosrecall flops`: parameters, FLOPs per token and schedule savings of model presets.

    biosrecall flops --preset lm-200m
    biosrecall flops --preset bios-cpu --schedule fixed:4 --schedule uniform:1-16 --seq-len 128
    biosrecall flops --preset bios-cpu --preset bios-cpu-std-params --preset bios-cpu-std-flops
    biosrecall flops --preset bios-tiny --recipe loopformer      # a recipe's own parameters and FLOPs

A standard-transformer baseline (no recurrent block) has one depth: it is shown at K = 1 with how it
matches its looped preset, and without schedules (every depth would cost the same).

A bioS preset's vocabulary (256 for bios-tiny) is a stand-in: `train` sizes the embedding to the
dataset's tokenizer, so `--data DATASET` counts what a run on that dataset has:

    biosrecall flops --preset bios-tiny --data runs/tour/data     # the tour's run: vocab 2,137

The report is `biosrecall.compute.report.flops_report`; this module only reads the options.
"""

from __future__ import annotations

from pathlib import Path

import click

from biosrecall.cli.config_file import config_option
from biosrecall.cli.options import Integer
from biosrecall.compute.report import flops_report
from biosrecall.compute.schedules import parse_schedule
from biosrecall.errors import BiosrecallError
from biosrecall.model.config import DEFAULT_RECIPE
from biosrecall.model.presets import PRESETS, get_preset
from biosrecall.model.recipes import BUILT_IN, check_config, recipe_overrides
from biosrecall.numbers import DEPTH
from biosrecall.records import read_record
from biosrecall.train.config import LIMITS

CURRICULUM = "curriculum:mean=8,warmup=0.75,shape=1-sqrt"
PAPER_SCHEDULES = (
    *(
        f"fixed_first:k0={k0},switch={switch},finish={finish}"
        for finish in ("uniform", "poisson_lognormal")
        for k0 in (1, 2, 4)
        for switch in (0.67, 0.8)
    ),
    CURRICULUM,
    "fixed:4",
    "uniform:1-16",
)


@click.command("flops")
@config_option()
@click.option(
    "--preset",
    "presets",
    multiple=True,
    default=("lm-200m",),
    help=f"Model preset; repeat for several. One of: {', '.join(PRESETS)}.",
)
@click.option(
    "--schedule",
    "schedules",
    multiple=True,
    help="Schedule to compare against uniform:1-16; repeat for several (e.g. fixed:4, "
    "fixed_first:k0=4,switch=0.8,finish=uniform). Default: the paper's set: fixed-first K0 in {1, 2, 4} x "
    f"switch in {{0.67, 0.8}} x finish in {{uniform, poisson_lognormal}}, {CURRICULUM}, fixed:4, uniform:1-16.",
)
@click.option(
    "--seq-len",
    type=Integer(LIMITS["seq_len"]),
    default=None,
    help="Sequence length for attention FLOPs.  [default: preset's context length]",
)
@click.option(
    "--updates",
    type=Integer(
        LIMITS["updates"],
        "total updates",
        below="total updates must be a positive integer, got {value}",
        bare=True,
    ),
    default=4800,
    help="Run length at which schedules are compared (it only moves where switches and ramps fall; "
    "4800 is the paper's 200M run).",
)
@click.option(
    "--data",
    "data_dir",
    type=click.Path(path_type=Path),
    default=None,
    help="bioS dataset whose vocabulary sizes the embedding, as `train` does [default: the preset's "
    "stand-in vocabulary].",
)
@click.option(
    "--backprop-depth",
    type=Integer(DEPTH, "backprop_depth"),
    default=None,
    help="Backprop only through the last k iterations.  [default: the preset's, full backprop]",
)
@click.option(
    "--recipe",
    default=DEFAULT_RECIPE,
    show_default=True,
    help="The looped recipe to count, as `train --recipe` builds it (its model defaults under the "
    f"preset's shape; its extra parameters and training objective priced). Built in: {', '.join(BUILT_IN)}, "
    "or an installed package's biosrecall.recipes entry point.",
)
def flops(
    presets: tuple[str, ...],
    schedules: tuple[str, ...],
    seq_len: int | None,
    updates: int,
    data_dir: Path | None,
    backprop_depth: int | None,
    recipe: str,
) -> None:
    """Print, per preset, parameters by component, FLOPs per token at K = 1, 4, 8.5 (the mean of
    U{1..16}) and 16, and each schedule's modeled training compute relative to uniform:1-16 at the same
    number of updates (the saving is 1 minus that)."""
    parsed = [parse_schedule(text) for text in schedules or PAPER_SCHEDULES]
    overrides = {} if backprop_depth is None else {"backprop_depth": backprop_depth}
    if data_dir is not None:
        overrides["vocab_size"] = _dataset_vocabulary(data_dir)
    for index, name in enumerate(presets):
        cfg = get_preset(name, **recipe_overrides(recipe, overrides))
        check_config(cfg)
        if index:
            click.echo()
        click.echo(flops_report(name, cfg, parsed, seq_len, updates, data_dir))


def _dataset_vocabulary(data_dir: Path) -> int:
    """The vocabulary size a dataset's manifest records (what `train` sizes the embedding to)."""
    from biosrecall.bios.validation import DatasetManifest  # loads pandas: only with --data

    if not (data_dir / "manifest.json").is_file():
        raise BiosrecallError(f"--data {data_dir} holds no manifest.json: give a bioS dataset folder")
    return read_record(data_dir / "manifest.json", DatasetManifest, "dataset manifest").tokenizer.vocab_size
