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

from dataclasses import dataclass
from pathlib import Path

import click

from biosrecall.cli.config_file import config_option
from biosrecall.cli.options import Integer, field_docs, field_options
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


@dataclass
class FlopsOptions:
    """The options of `flops`, one per field (`field_options`; the help of each is the docstring under
    it, or `CHECKED`'s where it lists names)."""

    presets: tuple[str, ...] = ("lm-200m",)
    """Model presets (`biosrecall.model.presets.PRESETS`), one per --preset."""

    schedules: tuple[str, ...] = ()
    """Schedules to compare against uniform:1-16, one per --schedule (e.g. fixed:4,
    fixed_first:k0=4,switch=0.8,finish=uniform). Default: the paper's set, `PAPER_SCHEDULES`."""

    seq_len: int | None = None
    """Sequence length for attention FLOPs.  [default: preset's context length]"""

    updates: int = 4800
    """Run length at which schedules are compared (it only moves where switches and ramps fall; 4800 is
    the paper's 200M run)."""

    data_dir: Path | None = None
    """bioS dataset whose vocabulary sizes the embedding, as `train` does [default: the preset's
    stand-in vocabulary]."""

    backprop_depth: int | None = None
    """Backprop only through the last k iterations.  [default: the preset's, full backprop]"""

    recipe: str = DEFAULT_RECIPE
    """The looped recipe to count, as `train --recipe` builds it (its model defaults under the preset's
    shape; its extra parameters and training objective priced)."""


_REPEATED = {"type": str, "multiple": True}
CHECKED = {
    "presets": {
        **_REPEATED,
        "flag": "--preset",
        "help": f"Model preset; repeat for several. One of: {', '.join(PRESETS)}.",
    },
    "schedules": {
        **_REPEATED,
        "flag": "--schedule",
        "help": "Schedule to compare against uniform:1-16; repeat for several (e.g. fixed:4, "
        "fixed_first:k0=4,switch=0.8,finish=uniform). Default: the paper's set: fixed-first K0 in "
        "{1, 2, 4} x switch in {0.67, 0.8} x finish in {uniform, poisson_lognormal}, "
        f"{CURRICULUM}, fixed:4, uniform:1-16.",
    },
    "seq_len": {"type": Integer(LIMITS["seq_len"])},
    "updates": {"type": Integer(LIMITS["updates"], "total updates")},
    "backprop_depth": {"type": Integer(DEPTH, "backprop_depth")},
    "recipe": {
        "help": f"{field_docs(FlopsOptions)['recipe']} Built in: {', '.join(BUILT_IN)}, or an installed "
        "package's biosrecall.recipes entry point."
    },
}
"""What the options of `FlopsOptions` take beyond their fields' types (`field_options`)."""


@click.command("flops")
@config_option()
@field_options(FlopsOptions, CHECKED)
def flops(**fields) -> None:
    """Print, per preset, parameters by component, FLOPs per token at K = 1, 4, 8.5 (the mean of
    U{1..16}) and 16, and each schedule's modeled training compute relative to uniform:1-16 at the same
    number of updates (the saving is 1 minus that)."""
    options = FlopsOptions(**fields)
    parsed = [parse_schedule(text) for text in options.schedules or PAPER_SCHEDULES]
    overrides = {} if options.backprop_depth is None else {"backprop_depth": options.backprop_depth}
    if options.data_dir is not None:
        overrides["vocab_size"] = _dataset_vocabulary(options.data_dir)
    for index, name in enumerate(options.presets):
        cfg = get_preset(name, **recipe_overrides(options.recipe, overrides))
        check_config(cfg)
        if index:
            click.echo()
        click.echo(flops_report(name, cfg, parsed, options.seq_len, options.updates, options.data_dir))


def _dataset_vocabulary(data_dir: Path) -> int:
    """The vocabulary size a dataset's manifest records (what `train` sizes the embedding to)."""
    from biosrecall.bios.validation import DatasetManifest  # loads pandas: only with --data

    if not (data_dir / "manifest.json").is_file():
        raise BiosrecallError(f"--data {data_dir} holds no manifest.json: give a bioS dataset folder")
    return read_record(data_dir / "manifest.json", DatasetManifest, "dataset manifest").tokenizer.vocab_size
