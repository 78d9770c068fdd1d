"""`biosrecall lm harness`: score a trained LM run on lm-eval-harness tasks at fixed serving depths.

    biosrecall lm harness runs/1b/uniform/seed0 --tasks hellaswag,arc_easy,piqa --depths 4,8,16
    biosrecall lm harness runs/lm/ff --tasks tiny_mc --include-path tests/data/lm_harness --limit 20

The command only parses options; `biosrecall.lm.harness.evaluate_harness` does the work (and is where
lm-eval, the optional `eval` extra, is imported).
"""

from __future__ import annotations

from pathlib import Path

import click

from biosrecall.cli.config_file import config_option
from biosrecall.cli.options import Integer, NumberList, Real, checkpoint_option
from biosrecall.errors import BiosrecallError
from biosrecall.numbers import DEPTH, counts, rates
from biosrecall.train.run_folder import RunFolder


def _comma_list(ctx, param, values: tuple[str, ...]) -> list[str]:
    """A repeatable option whose values may also be comma lists."""
    return [part.strip() for value in values for part in value.split(",") if part.strip()]


def _depth_list(ctx, param, values: tuple[tuple[int, ...], ...]) -> list[int]:
    """The depths of a repeatable option whose values are comma lists (each read by `NumberList`)."""
    return [depth for value in values for depth in value]


@click.command("harness", short_help="Score an LM run on lm-eval-harness tasks at fixed serving depths.")
@config_option()
@click.argument("run", type=click.Path(path_type=Path))
@click.option(
    "--tasks",
    multiple=True,
    required=True,
    callback=_comma_list,
    help="lm-eval tasks (repeatable or a comma list), e.g. hellaswag,arc_easy,piqa.",
)
@click.option(
    "--depths",
    type=NumberList(
        DEPTH, "serving depths", "4,8,16", below="serving depths must be at least 1", required=True
    ),
    multiple=True,
    default=("4,8,16",),
    show_default=True,
    callback=_depth_list,
    help="Serving depths (repeatable or a comma list); each one is a separate evaluation.",
)
@checkpoint_option("Checkpoints to score (repeatable)", ("final",), multiple=True, plural_flag=True)
@click.option(
    "--limit",
    type=Real(rates(0.0, low_open=True)),
    default=None,
    help="Score only the first N documents of each task (a number below 1: that fraction).",
)
@click.option(
    "--num-fewshot",
    type=Integer(counts(low=0)),
    default=None,
    help="Few-shot examples per prompt [default: each task's own].",
)
@click.option(
    "--include-path",
    type=click.Path(path_type=Path, exists=True, file_okay=False),
    default=None,
    help="Folder of lm-eval task YAML files to add to the known tasks.",
)
@click.option("--batch-size", type=Integer(counts()), default=16, show_default=True)
@click.option(
    "--data",
    "data_dir",
    type=click.Path(path_type=Path),
    default=None,
    help="Prepared folder whose tokenizer to use [default: the run's own].",
)
@click.option("--device", default="auto", show_default=True, help="auto, cpu or cuda.")
@click.option("--precision", default="auto", show_default=True, help="auto (bf16 on CUDA), fp32 or bf16.")
@click.option(
    "--out",
    type=click.Path(path_type=Path),
    default=None,
    help="Table path without suffix [default: RUN/eval/harness]; the record goes next to it.",
)
def harness(run, tasks, depths, checkpoints, limit, num_fewshot, include_path, batch_size, data_dir,
            device, precision, out) -> None:  # fmt: skip
    """Score RUN on lm-eval-harness tasks at each serving depth and write RUN/eval/harness.csv and
    .parquet (task, metric, depth, value, stderr per checkpoint) and harness.json (the lm-eval
    version and task configs). Needs the `eval` extra; standard tasks download their data."""
    from biosrecall.lm.harness import evaluate_harness

    if limit is not None and limit >= 1:
        if limit != int(limit):
            raise BiosrecallError(
                f"--limit takes a whole number of documents or a fraction below 1, got {limit}"
            )
        limit = int(limit)
    table = evaluate_harness(
        run, tasks, depths, checkpoint=checkpoints, include_path=include_path, limit=limit,
        num_fewshot=num_fewshot, batch_size=batch_size, data_dir=data_dir, device=device,
        precision=precision, out=out,
    )  # fmt: skip
    for row in table.itertuples(index=False):
        stderr = "" if row.stderr != row.stderr else f" ± {row.stderr:.4f}"  # NaN: lm-eval gave none
        click.echo(f"{run} [{row.checkpoint}] K={row.depth} {row.task} {row.metric} {row.value:.4f}{stderr}")
    base = Path(out) if out is not None else RunFolder(run).eval_dir / "harness"
    click.echo(f"wrote {base}.csv, .parquet and .json")
