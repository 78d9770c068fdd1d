"""`biosrecall lm eval`: validation NLL of trained LM runs at each serving depth, and with per-token
exit; also the `--no-verify` option that `lm train` shares. Registered under `lm` by `biosrecall.cli.lm`.

    biosrecall lm eval runs/200m/uniform [--checkpoints all]        # NLL at serving depths 1..16
    biosrecall lm eval runs/200m/uniform --exit kl:5e-4,stable:2     # and with per-token exit
    biosrecall lm eval runs/200m/uniform --state-norms               # and the state's RMS by depth
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import click

from biosrecall.cli.config_file import config_option
from biosrecall.cli.options import CHECKPOINT_LIST, Integer, checkpoint_option, field_options
from biosrecall.errors import BiosrecallError
from biosrecall.lm.loader import set_verification
from biosrecall.numbers import DEPTH, counts
from biosrecall.train.run_folder import RunFolder

no_verify_option = click.option(
    "--no-verify",
    is_flag=True,
    help="Skip checking each shard's bytes against the sha256 `lm prepare` recorded (one read of the "
    "data when a shard is first opened).",
)
"""--no-verify: trust the shards' bytes (each is otherwise checked against its sha256 when first read)."""


@dataclass
class EvalOptions:
    """The options of `lm eval`, one per field (`field_options`; the help of each is the docstring
    under it)."""

    data_dir: Path | None = None
    """Prepared folder whose validation split to use [default: the run's own]."""

    max_depth: int = 16
    """Evaluate serving depths 1..N (one N-iteration pass per batch)."""

    batch_size: int = 8
    """Validation sequences per forward pass."""

    max_sequences: int | None = None
    """Use only the first N validation sequences [default: all]."""

    device: str = "auto"
    """auto, cpu or cuda."""

    precision: str = "auto"
    """auto (bf16 on CUDA), fp32 or bf16."""

    exits: tuple[str, ...] = ()
    """Also score NLL with per-token exit (repeatable or a comma list): fixed:K, kl:EPS, stable:M,
    entropy:H, latent:EPS, accel:EPS, gate:DELTA (the run's fitted gate: `biosrecall gate train RUN`),
    cdf:Q (the exit gate an ouro-gate run trained: stop where the exit CDF reaches Q); a bare name sweeps
    its thresholds. Capped at --max-depth."""

    val_sequences: int | None = None
    """Validation windows scored with --exit (one token at a time, so slow) [default: 64]."""

    applicable_exits: bool = False
    """With --exit: score each checkpoint on the criteria its recipe can serve (cdf:Q needs a trained exit
    gate; latent, accel and gate:DELTA one trajectory over depths, not loopformer's pass per depth) and
    name each one left out, instead of refusing the call."""

    state_norms: bool = False
    """Also measure the recurrent state's RMS after each depth 1..--max-depth on the first 8 validation
    windows, cached as checkpoints/<label>/state_norm.parquet (`biosrecall.eval.state_norms`)."""


CHECKED = {
    "max_depth": {"type": Integer(DEPTH)},
    "batch_size": {"type": Integer(counts())},
    "max_sequences": {"type": Integer(counts())},
    "exits": {"flag": "--exit", "type": str, "multiple": True},
    "val_sequences": {"type": Integer(counts())},
}
"""What the options of `EvalOptions` take beyond their fields' types (`field_options`)."""


@click.command("eval", short_help="Validation NLL at serving depths 1..16 of trained LM runs.")
@config_option()
@click.argument("runs", nargs=-1, required=True, type=click.Path(path_type=Path))
@checkpoint_option("Checkpoints to evaluate (repeatable)", ("final",), multiple=True, plural_flag=True)
@field_options(EvalOptions, CHECKED)
@no_verify_option
def evaluate(runs, checkpoints, no_verify, **fields) -> None:
    """Write RUN/eval/nll.csv and .parquet (NLL per token at each serving depth) for each RUN and print
    the NLL by depth and the mean serving-depth NLL. With --exit, also write RUN/eval/nll_exit.csv and
    .parquet: NLL and mean exit depth per criterion, next to the fixed-depth NLL on the same windows."""
    from biosrecall.lm import evaluate as evaluation

    set_verification(not no_verify)
    options = EvalOptions(**fields)
    exits, max_depth, data_dir = options.exits, options.max_depth, options.data_dir
    applicable = options.applicable_exits
    if options.val_sequences is not None and not exits:
        raise BiosrecallError("--val-sequences sets the windows of --exit: give --exit too")
    if applicable and not exits:
        raise BiosrecallError("--applicable-exits needs --exit: the criteria to choose from")
    criteria = evaluation.exit_criteria(exits, runs, checkpoints, max_depth, applicable)
    common = {CHECKPOINT_LIST: checkpoints, "data_dir": data_dir, "batch_size": options.batch_size}
    common.update(device=options.device, precision=options.precision)
    for run in runs:
        table = evaluation.evaluate_run(
            run, depths=range(1, max_depth + 1), max_sequences=options.max_sequences, **common
        )
        _print_nll(run, table, evaluation.summarize(table))
        _wrote(run, evaluation.TABLE)
        if criteria:  # NLL with per-token exit, next to the fixed-depth NLL on the same windows
            sequences = options.val_sequences or evaluation.DEFAULT_EXIT_SEQUENCES
            exit_table, skipped = evaluation.evaluate_exits(
                run, criteria, max_depth=max_depth, sequences=sequences, applicable=applicable, **common
            )
            for line in skipped:
                click.echo(f"{run} left out (--applicable-exits): {line}")
            if exit_table is not None:
                baseline = exit_table["kind"] == evaluation.BASELINE
                _print_exits(run, exit_table[baseline], exit_table[~baseline])
                _wrote(run, evaluation.EXIT_TABLE)
        if options.state_norms:
            from biosrecall.eval.state_norms import summary_line

            found = evaluation.evaluate_state_norms(
                run, checkpoints=checkpoints, data_dir=data_dir, max_depth=max_depth, device=options.device
            )
            for label, table in found.items():
                click.echo(f"{run} [{label}] {summary_line(table)}")


def _wrote(run: Path, table: str) -> None:
    click.echo(f"wrote {RunFolder(run).eval_dir / table}.csv and {table}.parquet")


def _print_nll(run: Path, table, summary) -> None:
    """Per checkpoint: the mean serving-depth NLL and the NLL at each depth."""
    for row in summary.itertuples(index=False):
        rows = table[table["checkpoint"] == row.checkpoint]
        by_depth = "  ".join(f"K={d}:{nll:.4f}" for d, nll in zip(rows["depth"], rows["nll"], strict=True))
        click.echo(f"{run} [{row.checkpoint}] mean NLL {row.mean_nll:.5f}  {by_depth}")


def _print_exits(run: Path, fixed, criteria) -> None:
    """Per checkpoint the fixed-depth NLL on the exit windows, then each criterion's NLL and depths."""
    for checkpoint, rows in fixed.groupby("checkpoint", sort=False):
        by_depth = "  ".join(f"{c}:{nll:.4f}" for c, nll in zip(rows["criterion"], rows["nll"], strict=True))
        click.echo(f"{run} [{checkpoint}] same windows, fixed depth  {by_depth}")
    for row in criteria.itertuples(index=False):
        click.echo(
            f"{run} [{row.checkpoint}] exit {row.criterion}: NLL {row.nll:.5f}  mean depth "
            f"{row.mean_depth:.2f}  p95 depth {row.p95_depth:g}  ({row.eval_tokens} tokens)"
        )
