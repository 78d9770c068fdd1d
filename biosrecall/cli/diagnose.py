"""`biosrecall diagnose-update`: the paper's update diagnostic (Figure 4) on a checkpoint of a bioS run
(`biosrecall train`) or a language-model run (`biosrecall lm train`).

    biosrecall diagnose-update runs/ff --checkpoint switch --depths 4,16 --after-uniform 0,16
    biosrecall diagnose-update runs/lm-ff --checkpoint final --after-uniform 0 --val-sequences 64

From the checkpoint's weights and AdamW state, the batch-caused update at each candidate depth is
rescaled to a common RMS, applied, and scored at every serving depth (bioS: answer NLL and recalled
bits of the first --people people; LM: validation NLL over the first --val-sequences validation
windows of the run's corpus); the advantage of the deeper update is reported with a bootstrap interval
over batches. The method is documented in `biosrecall.diagnose`.

--checkpoint takes the selector syntax of every command (`biosrecall.train.run_folder`) and must name one
checkpoint. --depths takes two distinct depths, the shallower first: anything else is refused, never
reordered. Writes into --out (default RUN_DIR/diagnose/), with STEM = diagnose_<checkpoint label>
(diagnose_switch, or diagnose_1.0 for `--checkpoint final`): STEM.{csv,parquet} (summary),
STEM_batches.{csv,parquet} (raw numbers per batch), STEM.{png,pdf} (the figure) and STEM.json (every
option, the seed included, and what was resolved).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from pathlib import Path

import click

from biosrecall.cli.config_file import config_option
from biosrecall.cli.options import Integer, ParsedBy, Real, checkpoint_option, field_options
from biosrecall.compute.schedules import MAX_UPDATES
from biosrecall.diagnose import DiagnoseOptions
from biosrecall.diagnose.options import parse_candidate_depths, parse_depth_list
from biosrecall.numbers import DEPTH, SEED, counts, rates
from biosrecall.train.config import LIMITS
from biosrecall.train.run_folder import SWITCH

CHECKED = {
    "depths": {"type": ParsedBy(parse_candidate_depths, DEPTH), "default": "4,16"},
    "after_uniform": {
        "type": ParsedBy(
            partial(parse_depth_list, option="--after-uniform", minimum=0, maximum=MAX_UPDATES), counts(low=0)
        ),
        "default": "0",
    },
    "batches": {"type": Integer(counts())},
    "serving_depths": {
        "type": ParsedBy(partial(parse_depth_list, option="--serving-depths"), DEPTH),
        "default": "1..16",
    },
    "people": {"type": Integer(counts(low=0), label="--people")},
    "val_sequences": {"type": Integer(counts(low=0))},
    "rms": {"type": str},
    "seed": {"type": Integer(SEED)},
    "bootstrap": {"type": Integer(counts())},
    "level": {"type": Real(rates(0.0, 1.0, low_open=True, high_open=True))},
}
"""What the options of `DiagnoseOptions` take beyond their fields' types (`field_options`; their help
is the docstring under each field). The depth lists are read as text by the command's parsers, which
take ranges such as 1..16."""
DEPTH_LISTS = ("depths", "after_uniform", "serving_depths")
"""The options whose text `ParsedBy` checks and the command then reads with the same parser."""


@dataclass
class WhereOptions:
    """Where and on what one `diagnose-update` call runs, and where it writes: the keywords of
    `diagnose_update` beside its `DiagnoseOptions`, then the command's own."""

    device: str = "auto"
    """"auto" (CUDA when present), "cpu" or "cuda"."""

    threads: int | None = None
    """CPU threads for torch (default: torch's choice)."""

    data_dir: Path | None = None
    """bioS dataset or prepared LM corpus to use instead of the one recorded in the run (its hash is
    still checked)."""

    out_dir: Path | None = None
    """Output folder [RUN_DIR/diagnose]."""

    quiet: bool = False
    """No progress lines on stderr."""


WHERE = {
    "threads": {"type": Integer(LIMITS["threads"])},
}
"""What the options of `WhereOptions` take beyond their fields' types (`field_options`)."""


@click.command("diagnose-update")
@config_option()
@click.argument("run_dir", type=click.Path(path_type=Path))
@checkpoint_option("The one checkpoint to diagnose", SWITCH)
@field_options(DiagnoseOptions, CHECKED)
@field_options(WhereOptions, WHERE)
def diagnose_update(run_dir, checkpoint, device, threads, data_dir, out_dir, quiet, **fields):
    """Compare equal-size updates at two depths from one checkpoint across serving depths."""
    from biosrecall.diagnose import diagnose_update as run_diagnosis  # loads the model code
    from biosrecall.diagnose.report import depth_average

    # The depth lists arrive as the text the command line holds, read here by the parser that checked it.
    for name in DEPTH_LISTS:
        fields[name] = CHECKED[name]["type"].parser(fields[name])
    options = DiagnoseOptions(**fields)
    progress = None if quiet else lambda message: click.echo(message, err=True)
    result = run_diagnosis(
        run_dir, checkpoint, options, device=device, threads=threads, data_dir=data_dir, progress=progress
    )
    written = result.write(out_dir if out_dir is not None else Path(run_dir) / "diagnose")
    shallow, deep = options.depths
    click.echo(f"advantage of the K={deep} update over K={shallow}, averaged over serving depths:")
    shown = depth_average(result.summary)[["after_uniform", "update", "metric", "mean", "ci_low", "ci_high"]]
    click.echo(shown.to_string(index=False, float_format=lambda x: f"{x:+.4g}"))
    for path in written:
        click.echo(f"wrote {path}")
