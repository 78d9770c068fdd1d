"""`biosrecall lm ...`: the language-model pipeline: `prepare` (text -> shards), `plan`, `train`, `eval`,
`compare`.

    biosrecall lm prepare books/ notes.jsonl --out data/lm-books --vocab-size 8192
    biosrecall lm prepare hf:openbmb/Ultra-FineWeb --hf-split en --text-column content \
        --max-documents 2000000 --out data/ultra-fineweb
    biosrecall lm prepare more.txt --out data/lm-more --tokenizer data/lm-books/tokenizer.json

    biosrecall lm plan --config scripts/lm/200m.toml --schedule uniform:1-16 --updates 4800 \
        --nproc-per-node 8                                     # tokens and FLOPs, nothing written
    torchrun --nproc_per_node 8 -m biosrecall lm train --config scripts/lm/200m.toml \
        --data data/ultradata-math-l3 --out runs/200m/uniform --schedule uniform:1-16 --updates 4800
    biosrecall lm eval runs/200m/uniform [--checkpoints all]   # NLL at serving depths 1..16
    biosrecall lm compare runs/200m/* --out figures/lm-200m    # Figure-2 table and plots

Inputs, document boundaries and the Hugging Face syntax are described in `biosrecall.lm.corpus`; the
output folder's format in `biosrecall.lm.shards`. `train` takes every trainer option of
`biosrecall train` (same names and meaning) plus the LM ones below; `--config FILE` reads defaults
for any of them from a TOML file whose keys are the option names (`batch_size = 256`), and options
given on the command line win.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

import click

from biosrecall.cli.train import train as bios_train
from biosrecall.errors import BiosrecallError

DEFAULT_VOCAB_SIZE = 8192


@click.group()
def lm() -> None:
    """Language-model pipeline: prepare text shards, then train and evaluate looped LMs on them."""


@lm.command("prepare", short_help="Tokenize text files or a Hugging Face dataset into token shards.")
@click.argument("inputs", nargs=-1, required=True)
@click.option("--out", "out_dir", required=True, type=click.Path(path_type=Path), help="Folder to create.")
@click.option(
    "--text-column", default="text", show_default=True, help="Text field of .jsonl/.parquet/hf inputs."
)
@click.option(
    "--tokenizer",
    "tokenizer_path",
    type=click.Path(path_type=Path),
    default=None,
    help="Use this tokenizer.json instead of training one.",
)
@click.option(
    "--vocab-size",
    type=click.IntRange(min=1),
    default=None,
    help=f"Size of the byte-level BPE to train [default: {DEFAULT_VOCAB_SIZE}].",
)
@click.option(
    "--val-fraction",
    type=click.FloatRange(0.0, 1.0, max_open=True),
    default=0.01,
    show_default=True,
    help="Share of documents held out for validation.",
)
@click.option(
    "--seed", type=click.IntRange(min=0), default=0, show_default=True, help="Seed of the validation choice."
)
@click.option(
    "--shard-tokens", type=click.IntRange(min=1), default=None, help="Tokens per shard file [default: 2^27]."
)
@click.option("--hf-split", default="train", show_default=True, help="Split of an hf:NAME input.")
@click.option(
    "--max-documents", type=click.IntRange(min=1), default=None, help="Use only the first N documents."
)
@click.option(
    "--tokenizer-documents",
    type=click.IntRange(min=1),
    default=None,
    help="Train the tokenizer on the first N training documents only [default: all].",
)
@click.option(
    "--overwrite", is_flag=True, help="Replace a non-empty output folder (once the new one is done)."
)
def prepare(
    inputs: tuple[str, ...],
    out_dir: Path,
    text_column: str,
    tokenizer_path: Path | None,
    vocab_size: int | None,
    val_fraction: float,
    seed: int,
    shard_tokens: int | None,
    hf_split: str,
    max_documents: int | None,
    tokenizer_documents: int | None,
    overwrite: bool,
) -> None:
    """Tokenize INPUT... (.txt, .jsonl, .parquet files, folders of them, or hf:NAME[:CONFIG]) into
    token shards with a validation split, a tokenizer and a manifest."""
    from biosrecall.atomic import check_output_dir
    from biosrecall.lm.corpus import Corpus
    from biosrecall.lm.shards import DEFAULT_SHARD_TOKENS, prepare_corpus
    from biosrecall.lm.tokenizer import load_tokenizer

    if tokenizer_path is not None and vocab_size is not None:
        raise BiosrecallError("give either --tokenizer or --vocab-size, not both")
    check_output_dir(out_dir, overwrite)
    corpus = Corpus(inputs, text_column=text_column, hf_split=hf_split, max_documents=max_documents)
    tokenizer = load_tokenizer(tokenizer_path) if tokenizer_path is not None else None
    result = prepare_corpus(
        corpus,
        out_dir,
        tokenizer=tokenizer,
        vocab_size=vocab_size or DEFAULT_VOCAB_SIZE,
        val_fraction=val_fraction,
        seed=seed,
        shard_tokens=shard_tokens or DEFAULT_SHARD_TOKENS,
        tokenizer_documents=tokenizer_documents,
        overwrite=overwrite,
    )
    _report(result)


def _report(result) -> None:
    splits, tok = result.manifest["splits"], result.manifest["tokenizer"]
    for name, split in splits.items():
        click.echo(
            f"{name:<10} {split['documents']:>10,} documents {split['tokens']:>14,} tokens "
            f"{len(split['shards'])} shard(s)"
        )
    click.echo(f"tokenizer  vocab {tok['vocab_size']:,}, eod {tok['eod_token']} = {tok['eod_id']}")
    click.echo(f"           sha256 {tok['sha256']}")
    rate = result.tokens / result.encode_seconds if result.encode_seconds > 0 else float("inf")
    click.echo(f"wrote {result.path} in {result.seconds:.1f} s (encode + write {rate:,.0f} tokens/s)")


# ---- train / plan: the shared trainer's options, plus the LM ones -----------------------------------

# Options defined here; any `biosrecall train` option of the same name is left out in their favour.
_LM_OWN = {"data_dir", "run_dir", "config", "preset", "updates", "grad_accum", "tokenizer", "vocab_size"}
# The trainer options of `biosrecall train` (schedule, budget, optimizer, parallelism, checkpoints,
# model overrides), reused as they are so both commands always take the same trainer settings.
TRAINER_OPTIONS = [p for p in bios_train.params if p.name not in _LM_OWN]
_RUN_ONLY = {"resume", "overwrite", "quiet"}
_MODEL_OVERRIDES = ("injection", "init_state", "norm", "backprop_depth", "vocab_size")


def _load_config_file(ctx: click.Context, param, value: Path | None):
    """Eager: turn a TOML file into defaults for the other options (the command line still wins)."""
    if value is None:
        return None
    try:
        data = tomllib.loads(value.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise click.BadParameter(f"cannot read {value}: {exc}") from None
    data = {key.replace("-", "_"): val for key, val in data.items()}
    known = {p.name for p in ctx.command.params} - {"config"}
    unknown = sorted(set(data) - known)
    if unknown:
        raise click.BadParameter(f"{value}: unknown key(s) {', '.join(unknown)}")
    if isinstance(data.get("checkpoint_fractions"), list):
        data["checkpoint_fractions"] = ",".join(map(str, data["checkpoint_fractions"]))
    ctx.default_map = {**(ctx.default_map or {}), **data}
    return value


def _lm_options(command: click.Command, run: bool) -> click.Command:
    """Add the LM options and the shared trainer options (`run`: also resume / overwrite / quiet)."""
    own = [
        click.Option(["--config"], type=click.Path(path_type=Path, dir_okay=False), is_eager=True,
                     expose_value=False, callback=_load_config_file,
                     help="TOML file of option defaults (keys are option names, e.g. batch_size)."),
        click.Option(["--preset"], default="lm-tiny", show_default=True,
                     help="Model preset: lm-tiny, lm-200m or lm-1b (see `biosrecall flops`)."),
        click.Option(["--updates"], type=click.IntRange(min=1), default=None,
                     help="Instead of a budget: exactly N updates (the budget is what they spend)."),
        click.Option(["--grad-accum"], type=click.IntRange(min=1), default=1, show_default=True,
                     help="Micro-batches per update on each process (same update, less memory)."),
        click.Option(["--tokenizer"], type=click.Path(path_type=Path, dir_okay=False), default=None,
                     help="tokenizer.json the model is meant for; shards made with another are refused."),
        click.Option(["--vocab-size"], type=click.IntRange(min=2), default=None,
                     help="Override the preset's vocabulary (must hold every id of the tokenizer)."),
    ]  # fmt: skip
    shared = [p for p in TRAINER_OPTIONS if run or p.name not in _RUN_ONLY]
    command.params.extend(own + shared)
    return command


def _train_config(options: dict):
    """Split the parsed options into (TrainConfig, model overrides, preset, tokenizer)."""
    from biosrecall.train.config import TrainConfig

    preset, tokenizer = options.pop("preset"), options.pop("tokenizer")
    overrides = {name: options.pop(name) for name in _MODEL_OVERRIDES}
    return TrainConfig(**options), overrides, preset, tokenizer


@click.option("--data", "data_dir", required=True, type=click.Path(path_type=Path), help="Prepared folder.")
@click.option("--out", "run_dir", required=True, type=click.Path(path_type=Path), help="Run folder.")
def _train(data_dir: Path, run_dir: Path, resume: bool, overwrite: bool, quiet: bool, **options) -> None:
    """Train a looped LM on prepared shards with a depth schedule (the same trainer as `biosrecall
    train`); run under torchrun for DDP or --parallel fsdp. Prints the plan first; keeps weights at
    each budget fraction and a resumable `latest` (sharded under FSDP) in OUT/checkpoints/."""
    from biosrecall.lm.task import train_lm
    from biosrecall.train.loop import Interrupted, TrainingDiverged
    from biosrecall.train.progress import make_reporter

    config, overrides, preset, tokenizer = _train_config(options)
    main_rank = int(os.environ.get("RANK", "0")) == 0  # under torchrun only rank 0 reports
    reporter = make_reporter(quiet or not main_rank, config.log_every)
    try:
        result = train_lm(
            data_dir, run_dir, config, preset, overrides, tokenizer, resume, overwrite, reporter
        )
    except (TrainingDiverged, Interrupted) as exc:
        click.echo(f"error: {exc}", err=True)
        raise SystemExit(130 if isinstance(exc, Interrupted) else 1) from None
    if main_rank and not quiet:
        click.echo(
            f"trained {result.updates} updates, {result.flops:.3e} FLOPs in {result.wall_seconds:.1f}s"
        )
        for fraction, path in result.checkpoints.items():
            click.echo(f"checkpoint {fraction:g}: {path}")


@click.option(
    "--data",
    "data_dir",
    type=click.Path(path_type=Path),
    default=None,
    help="Also check this prepared folder and report how many epochs the run reads.",
)
@click.option(
    "--nproc-per-node",
    "processes",
    type=click.IntRange(min=1),
    default=None,
    help="Processes the run will use [default: $WORLD_SIZE or 1].",
)
def _plan(data_dir: Path | None, processes: int | None, **options) -> None:
    """Print what a `train` with the same options will spend (updates, tokens, modeled FLOPs, the
    per-process batch split) using the trainer's own planner; nothing is written."""
    from biosrecall.lm.task import plan_lines

    config, overrides, preset, _ = _train_config(options)
    processes = processes or int(os.environ.get("WORLD_SIZE", "1"))
    click.echo("\n".join(plan_lines(config, preset, overrides, processes, data_dir)))


lm.add_command(_lm_options(click.command("train")(_train), run=True))
lm.add_command(_lm_options(click.command("plan")(_plan), run=False))


@lm.command("eval", short_help="Validation NLL at serving depths 1..16 of trained LM runs.")
@click.argument("runs", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option(
    "--checkpoints",
    default="final",
    show_default=True,
    help="final, all (every kept fraction and the switch), or fractions like 0.45,1.0.",
)
@click.option(
    "--data",
    "data_dir",
    type=click.Path(path_type=Path),
    default=None,
    help="Prepared folder whose validation split to use [default: the run's own].",
)
@click.option(
    "--max-depth",
    type=click.IntRange(min=1),
    default=16,
    show_default=True,
    help="Evaluate serving depths 1..N (one N-iteration pass per batch).",
)
@click.option("--batch-size", type=click.IntRange(min=1), default=8, show_default=True)
@click.option(
    "--max-sequences",
    type=click.IntRange(min=1),
    default=None,
    help="Use only the first N validation sequences [default: all].",
)
@click.option("--device", default="auto", show_default=True, help="auto, cpu or cuda.")
@click.option("--precision", default="auto", show_default=True, help="auto (bf16 on CUDA), fp32 or bf16.")
def evaluate(runs, checkpoints, data_dir, max_depth, batch_size, max_sequences, device, precision) -> None:
    """Write RUN/eval/nll.csv and .parquet (NLL per token at each serving depth) for each RUN and print
    the NLL by depth and the mean serving-depth NLL."""
    from biosrecall.lm.evaluate import evaluate_run, summarize

    for run in runs:
        table = evaluate_run(
            run,
            checkpoints=checkpoints,
            data_dir=data_dir,
            depths=range(1, max_depth + 1),
            batch_size=batch_size,
            max_sequences=max_sequences,
            device=device,
            precision=precision,
        )
        for summary in summarize(table).itertuples(index=False):
            rows = table[table["checkpoint"] == summary.checkpoint]
            by_depth = "  ".join(
                f"K={d}:{nll:.4f}" for d, nll in zip(rows["depth"], rows["nll"], strict=True)
            )
            click.echo(f"{run} [{summary.checkpoint}] mean NLL {summary.mean_nll:.5f}  {by_depth}")
        click.echo(f"wrote {Path(run) / 'eval' / 'nll.csv'} and nll.parquet")


@lm.command("compare", short_help="Figure-2 comparison of evaluated LM runs against uniform.")
@click.argument("runs", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option(
    "--out",
    "out_dir",
    required=True,
    type=click.Path(path_type=Path),
    help="Folder for lm_compare.csv and the figures (PNG and PDF).",
)
@click.option(
    "--reference",
    type=click.Path(path_type=Path),
    default=None,
    help="Run the others are compared with [default: the uniform:1-16 run with the most FLOPs].",
)
def compare(runs, out_dir, reference) -> None:
    """Print mean serving-depth NLL, NLL at K=1 and K=16, modeled compute and wall-clock of each RUN
    relative to the reference, and plot NLL against serving depth and against modeled compute."""
    from biosrecall.lm.compare import compare_runs, format_table, write_comparison

    table, curves, summaries = compare_runs(runs, reference)
    click.echo(format_table(table))
    for path in write_comparison(table, curves, summaries, out_dir):
        click.echo(f"wrote {path}")
