"""`biosrecall lm ...`: the language-model pipeline: `prepare` (text -> shards), `plan`, `train`, `eval`,
`harness` (lm-eval-harness tasks), `compare`, `study` (the Figure-2 study and its claims).

    biosrecall lm prepare books/ notes.jsonl --out data/lm-books --vocab-size 8192
    biosrecall lm prepare hf:openbmb/Ultra-FineWeb --hf-split en --text-column content \
        --max-documents 2000000 --out data/ultra-fineweb
    biosrecall lm prepare more.txt --out data/lm-more --tokenizer data/lm-books/tokenizer.json

    biosrecall lm plan --config scripts/lm/200m.toml --schedule uniform:1-16 --updates 4800 \
        --nproc-per-node 8                                     # tokens and FLOPs, nothing written
    torchrun --nproc_per_node 8 -m biosrecall lm train --config scripts/lm/200m.toml \
        --data data/ultradata-math-l3 --out runs/200m/uniform --schedule uniform:1-16 --updates 4800
    biosrecall lm eval runs/200m/uniform [--checkpoints all]   # NLL at serving depths 1..16
    biosrecall lm eval runs/200m/uniform --exit kl:5e-4,stable:2   # and with per-token exit
    biosrecall lm harness runs/1b/uniform/seed0 --tasks hellaswag,arc_easy,piqa --depths 4,8,16
    biosrecall lm compare runs/200m/* --out figures/lm-200m    # Figure-2 table and plots
    biosrecall lm compare runs/1b/* --aggregate-seeds --out figures/lm-1b   # RUN/seed*/ -> mean, 95% CI
    biosrecall lm study --data data/lm-kjv --out runs/lm-study --seeds 0,1,2   # Figure 2 + claims
    biosrecall lm study --out runs/lm-study --archive docs/results/lm-study   # without weights, to commit

Inputs, document boundaries and the Hugging Face syntax are described in `biosrecall.lm.corpus`; the
output folder's format in `biosrecall.lm.shards`. `train` takes every trainer option of
`biosrecall train` (same names and meaning) plus the LM ones below. Every subcommand takes `--config
FILE`, a TOML file whose keys are its option names (`batch_size = 256`; see `biosrecall.cli.config_file`),
and options given on the command line win; `train` and `plan` also read a run's config.json.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import click

from biosrecall.cli.config_file import config_option
from biosrecall.cli.lm_eval import evaluate, no_verify_option
from biosrecall.cli.lm_harness import harness
from biosrecall.cli.options import Integer, Real, field_options, split_options, stacked, trainer_options
from biosrecall.cli.study import OUTPUT, SEEDS, engine_options, run_engine_command
from biosrecall.cli.train import MODEL_OVERRIDES as BIOS_MODEL_OVERRIDES
from biosrecall.cli.train import train_and_report
from biosrecall.errors import BiosrecallError
from biosrecall.experiments.lm_grid import LMStudyOptions, parse_grid
from biosrecall.lm.corpus import Corpus
from biosrecall.lm.loader import set_verification
from biosrecall.lm.shards import DEFAULT_SHARD_TOKENS, DEFAULT_VOCAB_SIZE, prepare_corpus
from biosrecall.numbers import SEED, counts, rates
from biosrecall.train.progress import make_reporter


@click.group()
def lm() -> None:
    """Language-model pipeline: prepare text shards, then train and evaluate looped LMs on them."""


@dataclass
class PrepareOptions:
    """The options of `lm prepare` beyond its inputs and --out, one per field (`field_options`; the help
    of each is the docstring under it). `Corpus` and `prepare_corpus` take them by these names (the
    latter's `tokenizer` is `tokenizer_path`)."""

    text_column: str = "text"
    """Text field of .jsonl/.parquet/hf inputs."""

    tokenizer_path: Path | None = None
    """Use this tokenizer.json instead of training one."""

    vocab_size: int | None = None
    """Size of the byte-level BPE to train (`biosrecall.lm.shards.DEFAULT_VOCAB_SIZE` when unset)."""

    val_fraction: float = 0.01
    """Share of documents held out for validation."""

    seed: int = 0
    """Seed of the validation choice."""

    shard_tokens: int = DEFAULT_SHARD_TOKENS
    """Tokens per shard file (2^27)."""

    hf_split: str = "train"
    """Split of an hf:NAME input."""

    max_documents: int | None = None
    """Use only the first N documents [default: all]."""

    tokenizer_documents: int | None = None
    """Train the tokenizer on the first N training documents only [default: all]."""

    overwrite: bool = False
    """Replace a non-empty output folder (once the new one is done)."""


PREPARE_CHECKED = {
    "tokenizer_path": {"flag": "--tokenizer"},
    # the tokenizer library's range of --vocab-size is checked where it is trained
    "vocab_size": {
        "type": Integer(counts()),
        "help": f"Size of the byte-level BPE to train [default: {DEFAULT_VOCAB_SIZE}].",
    },
    "val_fraction": {"type": Real(rates(0.0, 1.0, high_open=True))},
    "seed": {"type": Integer(SEED)},
    "shard_tokens": {"type": Integer(counts())},
    "max_documents": {"type": Integer(counts())},
    "tokenizer_documents": {"type": Integer(counts())},
}
"""What the options of `PrepareOptions` take beyond their fields' types (`field_options`)."""


@lm.command("prepare", short_help="Tokenize text files or a Hugging Face dataset into token shards.")
@config_option()
@click.argument("inputs", nargs=-1, required=True)
@click.option("--out", "out_dir", required=True, type=click.Path(path_type=Path), help="Folder to create.")
@field_options(PrepareOptions, PREPARE_CHECKED)
def prepare(
    inputs, out_dir, text_column, tokenizer_path, vocab_size, hf_split, max_documents, **options
) -> None:
    """Tokenize INPUT... (.txt, .jsonl, .parquet files, folders of them, or hf:NAME[:CONFIG]) into
    token shards with a validation split, a tokenizer and a manifest."""

    corpus = Corpus(inputs, text_column=text_column, hf_split=hf_split, max_documents=max_documents)
    # val_fraction, seed, shard_tokens, tokenizer_documents, overwrite: as given
    _report(prepare_corpus(corpus, out_dir, tokenizer=tokenizer_path, vocab_size=vocab_size, **options))


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


# ---- train / plan: the trainer options of `biosrecall train` (from TrainConfig), plus the LM ones ---

# The model fields either command may override; the LM also takes its vocabulary from the command line.
MODEL_OVERRIDES = (*BIOS_MODEL_OVERRIDES, "vocab_size")


def _lm_options(run: bool):
    """Decorator: --config, --preset and --tokenizer, then the trainer options every training command
    shares (with `run`: also --resume, --overwrite and --quiet)."""
    own = [
        config_option(task="lm"),
        click.option(
            "--preset",
            default="lm-tiny",
            help="Model preset: lm-tiny, lm-200m or lm-1b (see `biosrecall flops`).",
        ),
        click.option(
            "--tokenizer",
            type=click.Path(path_type=Path, dir_okay=False),
            default=None,
            help="tokenizer.json the model is meant for; shards made with another are refused.",
        ),
    ]
    return stacked([*own, trainer_options(overrides=MODEL_OVERRIDES, run=run, bios=False)])


def _train_config(options: dict):
    """Split the parsed options into (TrainConfig, model overrides, preset, tokenizer)."""
    preset, tokenizer = options.pop("preset"), options.pop("tokenizer")
    config, overrides = split_options(options)
    return config, overrides, preset, tokenizer


@lm.command("train")
@click.option("--data", "data_dir", required=True, type=click.Path(path_type=Path), help="Prepared folder.")
@click.option("--out", "run_dir", required=True, type=click.Path(path_type=Path), help="Run folder.")
@no_verify_option
@_lm_options(run=True)
def _train(
    data_dir: Path, run_dir: Path, no_verify: bool, resume: bool, overwrite: bool, quiet: bool, **options
) -> None:
    """Train a looped LM on prepared shards with a depth schedule (the same trainer as `biosrecall
    train`); run under torchrun for DDP or --parallel fsdp. Prints the plan first; keeps weights at
    each budget fraction and a resumable `latest` (sharded under FSDP) in OUT/checkpoints/."""
    from biosrecall.lm.task import train_lm
    from biosrecall.train.distributed import is_main_process

    set_verification(not no_verify)
    config, overrides, preset, tokenizer = _train_config(options)
    main_rank = is_main_process()  # under torchrun only rank 0 reports
    reporter = make_reporter(quiet or not main_rank, config.log_every)
    train_and_report(
        lambda: train_lm(
            data_dir, run_dir, config, preset, overrides, tokenizer, resume, overwrite, reporter
        ),
        quiet or not main_rank,
    )


@dataclass
class PlanOptions:
    """The options of `lm plan` beyond the training ones, one per field (`field_options`)."""

    data_dir: Path | None = None
    """Also check this prepared folder and report how many epochs the run reads."""

    processes: int | None = None
    """Processes the run will use [default: $WORLD_SIZE or 1]."""


PLAN_CHECKED = {
    "processes": {"flag": "--nproc-per-node", "type": Integer(counts())},
}
"""What the options of `PlanOptions` take beyond their fields' types (`field_options`)."""


@lm.command("plan")
@field_options(PlanOptions, PLAN_CHECKED)
@_lm_options(run=False)
def _plan(data_dir: Path | None, processes: int | None, **options) -> None:
    """Print what a `train` with the same options will spend (updates, tokens, modeled FLOPs, the
    per-process batch split) using the trainer's own planner; nothing is written."""
    from biosrecall.lm.task import plan_lines

    config, overrides, preset, _ = _train_config(options)
    processes = processes or int(os.environ.get("WORLD_SIZE", "1"))
    click.echo("\n".join(plan_lines(config, preset, overrides, processes, data_dir)))


@dataclass
class CompareOptions:
    """The options of `lm compare` beyond its runs, one per field (`field_options`)."""

    out_dir: Path | None = None
    """Folder for lm_compare.csv / .parquet and the figures (PNG and PDF)."""

    reference: Path | None = None
    """Run the others are compared with [default: the uniform:1-16 run with the most FLOPs]."""

    aggregate_seeds: bool = False
    """A RUN may be a folder of runs that differ only in the seed (RUN/seed0, RUN/seed1, ...): report
    each number as its mean over them with a 95% t interval."""


COMPARE_CHECKED = {
    "out_dir": {"required": True},
}
"""What the options of `CompareOptions` take beyond their fields' types (`field_options`)."""


@lm.command("compare", short_help="Figure-2 comparison of evaluated LM runs against uniform.")
@config_option()
@click.argument("runs", nargs=-1, required=True, type=click.Path(path_type=Path))
@field_options(CompareOptions, COMPARE_CHECKED)
def compare(runs, out_dir, reference, aggregate_seeds) -> None:
    """Print mean serving-depth NLL, NLL at K=1 and K=16, modeled compute and wall-clock of each RUN
    relative to the reference, and plot NLL against serving depth and against modeled compute (and,
    for runs evaluated with --exit, against the mean depth per token; for runs scored with `lm
    harness`, their lm-eval scores against serving depth)."""
    from biosrecall.lm.compare import compare_runs, format_harness, format_table, write_comparison

    comparison = compare_runs(runs, reference, aggregate_seeds=aggregate_seeds)
    click.echo(format_table(comparison.table))
    if not comparison.harness.empty:
        click.echo(format_harness(comparison.harness))
    for path in write_comparison(comparison, out_dir):
        click.echo(f"wrote {path}")


# `lm eval` and `lm harness` live in modules of their own (their many options); registered here.
lm.add_command(evaluate, "eval")
lm.add_command(harness)


# What `lm study`'s options (`LMStudyOptions`' fields, each one's docstring its help) take beyond their
# fields' types: the grid is checked where it is parsed, so that a wrong item is one line naming the choices.
STUDY_OPTIONS = {
    "data": {"name": "data_dir", "type": click.Path(path_type=Path), "default": None},
    "seeds": SEEDS,
    "grid": {"type": str, "default": None},
    "tokens": {"type": Integer(counts())},
}


@lm.command("study", short_help="The paper's Figure-2 LM study over seeds, with its claims judged.")
@config_option()
@OUTPUT
@field_options(LMStudyOptions, STUDY_OPTIONS)
@stacked(engine_options("--seeds"))
def study(data_dir, grid, overwrite, **given) -> None:
    """Train the paper's 200M grid at a small size over seeds (fixed-first K0 x switch x finish,
    uniform, the curriculum, compute-matched uniform, fixed K=4), evaluate NLL at serving depths
    1..64, and write lm_nll, lm_summary, the Figure-2 plots, lm_claims and timings under OUT.
    Resumable: Ctrl-C stops it (exit 130) and the same command continues."""

    def options(values) -> LMStudyOptions:
        if overwrite:
            raise BiosrecallError(
                "--overwrite applies to --archive only (a study's output is continued, not replaced)"
            )
        if data_dir is None:
            raise BiosrecallError("missing option --data: the `lm prepare` output to train on")
        return LMStudyOptions(data=str(data_dir), grid=parse_grid(grid), **values)

    declaration = ("biosrecall.experiments.lm_study", "LM_STUDY")  # imported to plan or run, not to archive
    run_engine_command(declaration, options, _show_claims, overwrite=overwrite, failed_hint="", **given)


def _show_claims(result, options) -> None:
    """The judged claims, then where the tables and figures are."""
    shown = result.claims[["claim", "paper", "mean", "low", "high", "n_seeds", "verdict"]]
    click.echo(shown.to_string(index=False))
    click.echo(f"wrote {result.out_dir}/lm_claims.md, lm_summary.md, lm_nll.csv, the figures and timings.md")
