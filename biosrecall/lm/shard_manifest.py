"""The manifest of a prepared LM shard folder: `load_manifest` reads it and checks every field a reader
uses (types, required keys, ranges, shard names that stay inside the folder, checksums), naming the
first bad one: the rules are the fields of `ShardManifest` (read through `biosrecall.records`). The
folder's layout and the shard format are described in `biosrecall.lm.shards`, which writes both. `reprepare_command` rebuilds the `lm prepare`
command that made a folder from what its manifest records, for messages about a damaged shard.

    manifest = load_manifest("data/lm-books")      # BiosrecallError naming the field, or the dict
    reprepare_command("data/lm-books", manifest)   # "biosrecall lm prepare books/ --out data/lm-books ..."
"""

from __future__ import annotations

import contextlib
import os
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, ClassVar, Literal

import numpy as np
from msgspec import Meta

from biosrecall.errors import BiosrecallError
from biosrecall.files import read_json_object
from biosrecall.lm.tokenizer import MAX_VOCAB_SIZE, token_dtype
from biosrecall.records import Count, Sha256, Vocabulary, parse_record

MANIFEST_FORMAT = "biosrecall-lm-shards"
FORMAT_VERSION = 1
SPLITS = ("train", "validation")
DTYPES = ("<u2", "<u4")
_SHARD_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]*\.bin$"  # a plain name: never leaves the folder


@dataclass(kw_only=True)
class Shard:
    """One shard file of a split."""

    file: Annotated[str, Meta(pattern=_SHARD_NAME)]
    """Its name inside the folder: a plain name such as train-00000.bin, never a path."""
    tokens: Count
    """Tokens it holds."""
    max_token: Count | None = None
    """Its largest token id (absent in folders of early releases); the loader checks it against the
    vocabulary when it opens the shard (`biosrecall.lm.loader`)."""
    sha256: Sha256 | None = None
    """Its checksum (absent in folders prepared before checksums were recorded)."""


@dataclass(kw_only=True)
class Split:
    """One split: its documents, tokens and shards."""

    documents: Count
    """Documents in the split."""
    tokens: Count
    """Tokens in the split: the sum of its shards'."""
    shards: list[Shard]
    """Its shard files, in order."""

    def __post_init__(self) -> None:
        counted = sum(shard.tokens for shard in self.shards)
        if counted != self.tokens:
            raise ValueError(f"tokens is {self.tokens} but its shards hold {counted}")


@dataclass(kw_only=True)
class Splits:
    train: Split
    """The documents trained on."""
    validation: Split
    """The held-out documents."""


@dataclass(kw_only=True)
class TokenizerEntry(Vocabulary):
    """The folder's tokenizer."""

    vocab_size: Annotated[int, Meta(ge=1, le=MAX_VOCAB_SIZE)]
    """Its vocabulary size."""
    eod_id: Count
    """The end-of-document token id."""
    sha256: Sha256
    """The checksum of its tokenizer.json."""
    special_ids: ClassVar[tuple[str, ...]] = ("eod_id",)


@dataclass(kw_only=True)
class ShardManifest:
    """What readers use of a shard folder's manifest.json (`biosrecall.lm.shards` writes it all)."""

    dtype: Literal[DTYPES]
    """How token ids are stored: <u2 or <u4, whichever the vocabulary needs."""
    tokenizer: TokenizerEntry
    """The tokenizer the shards were encoded with."""
    splits: Splits
    """The train and validation splits."""

    def __post_init__(self) -> None:
        vocab = self.tokenizer.vocab_size
        if np.dtype(self.dtype) != np.dtype(token_dtype(vocab)):
            raise ValueError(
                f"field 'dtype' is {self.dtype}, but a vocabulary of {vocab} is stored as {token_dtype(vocab)}"
            )


def load_manifest(data_dir: str | Path) -> dict:
    """`manifest.json` of a prepared folder as JSON read it, checked as a `ShardManifest`."""
    path = Path(data_dir) / "manifest.json"
    if not os.path.lexists(path):
        raise BiosrecallError(f"{data_dir} is not a prepared folder (no manifest.json; run `lm prepare`)")
    manifest = read_json_object(path, "LM shard manifest")  # bounded: `biosrecall.files.MAX_JSON_BYTES`
    found = (manifest.get("format"), manifest.get("format_version"))
    if found != (MANIFEST_FORMAT, FORMAT_VERSION):
        raise BiosrecallError(
            f"{path} is not a biosrecall LM shard manifest of format version {FORMAT_VERSION} "
            f"(it records format {found[0]!r}, format version {found[1]!r})"
        )
    parse_record(manifest, ShardManifest, f"LM shard manifest {path} is corrupt")
    return manifest


def reprepare_command(data_dir: str | Path, manifest: dict) -> str:
    """The `biosrecall lm prepare` command that makes `data_dir` again from what its manifest records
    (more than four input files are given as the folder that holds them)."""
    source = manifest.get("source") if isinstance(manifest.get("source"), dict) else {}
    entries = [entry for entry in source.get("inputs") or [] if isinstance(entry, dict)]
    inputs = [_input_argument(entry) for entry in entries]
    if len(inputs) > 4 and not any(item.startswith("hf:") for item in inputs):
        with contextlib.suppress(ValueError):  # absolute and relative paths mixed: keep the list
            inputs = [os.path.commonpath(inputs) or "."]
    words = ["biosrecall", "lm", "prepare", *(inputs or ["INPUT..."]), "--out", str(data_dir), "--overwrite"]
    if source.get("text_column", "text") != "text":
        words += ["--text-column", str(source["text_column"])]
    split = next((entry["split"] for entry in entries if "split" in entry), None)
    if split not in (None, "train"):
        words += ["--hf-split", str(split)]
    if source.get("max_documents"):
        words += ["--max-documents", str(source["max_documents"])]
    words += _tokenizer_options(manifest["tokenizer"])  # checked by `load_manifest`
    chosen = manifest.get("split") if isinstance(manifest.get("split"), dict) else {}
    for option, value in (
        ("--val-fraction", chosen.get("val_fraction")),
        ("--seed", chosen.get("seed")),
        ("--shard-tokens", manifest.get("shard_tokens")),
    ):
        if value is not None:
            words += [option, str(value)]
    return shlex.join(words)


def _input_argument(entry: dict) -> str:
    if entry.get("kind") == "huggingface":
        return f"hf:{entry.get('location')}" + (f":{entry['config']}" if entry.get("config") else "")
    return str(entry.get("location"))


def _tokenizer_options(tokenizer: dict) -> list[str]:
    """--tokenizer for a folder made with a given tokenizer (a copy of it: the folder's own is replaced),
    else the vocabulary size and the documents the tokenizer was trained on."""
    if tokenizer.get("trained_on") == "given":
        return ["--tokenizer", "COPY_OF_ITS_TOKENIZER.json"]
    options = ["--vocab-size", str(tokenizer.get("vocab_size"))]
    if isinstance(tokenizer.get("trained_on"), int):
        options += ["--tokenizer-documents", str(tokenizer["trained_on"])]
    return options
