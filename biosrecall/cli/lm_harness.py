"""`biosrecall lm harness`: score a trained LM run on lm-eval-harness tasks at fixed serving depths.

    biosrecall lm harness runs/1b/uniform/seed0 --tasks hellaswag,arc_easy,piqa --depths 4,8,16
    biosrecall lm harness runs/lm/ff --tasks tiny_mc --include-path tests/data/lm_harness --limit 20

The command only parses options; `biosrecall.lm.harness.evaluate_harness` does the work (and is where
lm-eval, the optional `eval` extra, is imported).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import click

from biosrecall.cli.config_file import config_option
from biosrecall.cli.options import Integer, NumberList, Real, checkpoint_option, field_options
from biosrecall.errors import BiosrecallError
from biosrecall.numbers import DEPTH, counts, rates


def _comma_list(ctx, param, values: tuple[str, ...]) -> list[str]:
    """A repeatable option whose values may also be comma lists."""
    return [part.strip() for value in values for part in value.split(",") if part.strip()]


def _depth_list(ctx, param, values: tuple[tuple[int, ...], ...]) -> list[int]:
    """The depths of a repeatable option whose values are comma lists (each read by `NumberList`)."""
    return [depth for value in values for depth in value]


@dataclass
class HarnessOptions:
    """The options of `lm harness` beyond its run and --checkpoints, one per field (`field_options`; the
    help of each is the docstring under it). `evaluate_harness` takes them by these names."""

    tasks: tuple[str, ...] = ()
    """lm-eval tasks (repeatable or a comma list), e.g. hellaswag,arc_easy,piqa."""

    depths: tuple[int, ...] = (4, 8, 16)
    """Serving depths (repeatable or a comma list); each one is a separate evaluation."""

    limit: float | None = None
    """Score only the first N documents of each task (a number below 1: that fraction)."""

    num_fewshot: int | None = None
    """Few-shot examples per prompt [default: each task's own]."""

    include_path: Path | None = None
    """Folder of lm-eval task YAML files to add to the known tasks."""

    batch_size: int = 16
    """lm-eval requests scored per forward pass, longest first."""

    data_dir: Path | None = None
    """Prepared folder whose tokenizer to use [default: the run's own]."""

    device: str = "auto"
    """auto, cpu or cuda."""

    precision: str = "auto"
    """auto (bf16 on CUDA), fp32 or bf16."""

    out: Path | None = None
    """Table path without suffix [default: RUN/eval/harness]; the record goes next to it."""


CHECKED = {
    "tasks": {"type": str, "multiple": True, "required": True, "callback": _comma_list},
    "depths": {
        "type": NumberList(DEPTH, "serving depths", "4,8,16", required=True),
        "multiple": True,
        "default": ("4,8,16",),
        "callback": _depth_list,
    },
    "limit": {"type": Real(rates(0.0, low_open=True))},
    "num_fewshot": {"type": Integer(counts(low=0))},
    "include_path": {"type": click.Path(path_type=Path, exists=True, file_okay=False)},
    "batch_size": {"type": Integer(counts())},
}
"""What the options of `HarnessOptions` take beyond their fields' types (`field_options`)."""


@click.command("harness", short_help="Score an LM run on lm-eval-harness tasks at fixed serving depths.")
@config_option()
@click.argument("run", type=click.Path(path_type=Path))
@checkpoint_option("Checkpoints to score (repeatable)", ("final",), multiple=True, plural_flag=True)
@field_options(HarnessOptions, CHECKED)
def harness(run, checkpoints, limit, out, **fields) -> None:
    """Score RUN on lm-eval-harness tasks at each serving depth and write RUN/eval/harness.csv and
    .parquet (task, metric, depth, value, stderr per checkpoint) and harness.json (the lm-eval
    version and task configs). Needs the `eval` extra; standard tasks download their data."""
    from biosrecall.lm.harness import evaluate_harness, table_base

    if limit is not None and limit >= 1:
        if limit != int(limit):
            raise BiosrecallError(
                f"--limit takes a whole number of documents or a fraction below 1, got {limit}"
            )
        limit = int(limit)
    table = evaluate_harness(run, checkpoint=checkpoints, limit=limit, out=out, **fields)
    for row in table.itertuples(index=False):
        stderr = "" if row.stderr != row.stderr else f" ± {row.stderr:.4f}"  # NaN: lm-eval gave none
        click.echo(f"{run} [{row.checkpoint}] K={row.depth} {row.task} {row.metric} {row.value:.4f}{stderr}")
    click.echo(f"wrote {table_base(run, out)}.csv, .parquet and .json")
