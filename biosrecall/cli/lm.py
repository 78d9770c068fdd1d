"""`biosrecall lm ...`: the language-model pipeline's commands, starting with `prepare` (text -> shards).

    biosrecall lm prepare books/ notes.jsonl --out data/lm-books --vocab-size 8192
    biosrecall lm prepare hf:openbmb/Ultra-FineWeb --hf-split en --text-column content \
        --max-documents 2000000 --out data/ultra-fineweb
    biosrecall lm prepare more.txt --out data/lm-more --tokenizer data/lm-books/tokenizer.json

Inputs, document boundaries and the Hugging Face syntax are described in `biosrecall.lm.corpus`; the
output folder's format in `biosrecall.lm.shards`.
"""

from __future__ import annotations

from pathlib import Path

import click

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
