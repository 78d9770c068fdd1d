"""The manifest of a prepared LM shard folder: `load_manifest` reads it and checks every field a reader
uses (types, required keys, ranges, shard names that stay inside the folder, token ids inside the
vocabulary, checksums), naming the first bad one. The folder's layout and the shard format are
described in `biosrecall.lm.shards`, which writes both. `reprepare_command` rebuilds the `lm prepare`
command that made a folder from what its manifest records, for messages about a damaged shard.

    manifest = load_manifest("data/lm-books")      # BiosrecallError naming the field, or the dict
    reprepare_command("data/lm-books", manifest)   # "biosrecall lm prepare books/ --out data/lm-books ..."
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
from pathlib import Path

import numpy as np

from biosrecall.errors import BiosrecallError
from biosrecall.files import require_regular_file
from biosrecall.lm.tokenizer import MAX_VOCAB_SIZE, token_dtype

MANIFEST_FORMAT = "biosrecall-lm-shards"
FORMAT_VERSION = 1
SPLITS = ("train", "validation")
DTYPES = ("<u2", "<u4")
MAX_MANIFEST_BYTES = 64 << 20
_SHARD_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*\.bin")  # a plain name: never leaves the folder


def load_manifest(data_dir: str | Path) -> dict:
    """Read `manifest.json` of a prepared folder, checking every field a reader uses (types, ranges)."""
    path = Path(data_dir) / "manifest.json"
    if not os.path.lexists(path):
        raise BiosrecallError(f"{data_dir} is not a prepared folder (no manifest.json; run `lm prepare`)")
    require_regular_file(path, "LM shard manifest")
    size = path.stat().st_size
    if size > MAX_MANIFEST_BYTES:
        raise BiosrecallError(f"{path} holds {size:,} bytes, above the {MAX_MANIFEST_BYTES:,} allowed")
    try:
        manifest = json.loads(path.read_bytes().decode("utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BiosrecallError(f"cannot read {path}: {exc}") from None
    except RecursionError:
        raise BiosrecallError(f"cannot read {path}: JSON nested too deeply") from None
    if not isinstance(manifest, dict) or manifest.get("format") != MANIFEST_FORMAT:
        raise BiosrecallError(f"{path} is not a biosrecall LM shard manifest")
    if manifest.get("format_version") != FORMAT_VERSION:
        raise BiosrecallError(
            f"{path} has format version {manifest.get('format_version')}; expected {FORMAT_VERSION}"
        )
    vocab = _check_tokenizer_entry(path, manifest)
    splits = _field(path, manifest, "splits", dict, "an object")
    for name in SPLITS:
        _check_split(path, name, _field(path, splits, name, dict, "an object", "splits."), vocab)
    return manifest


def _field(path: Path, data: dict, key: str, kind: type, kind_text: str, prefix: str = ""):
    value = data.get(key)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise BiosrecallError(f"{path}: field '{prefix}{key}' is missing or not {kind_text}")
    return value


def _count(path: Path, data: dict, key: str, prefix: str, high: int | None = None) -> int:
    """A non-negative integer field, at most `high`."""
    value = _field(path, data, key, int, "an integer", prefix)
    if value < 0 or (high is not None and value > high):
        limit = "" if high is None else f" and at most {high:,}"
        raise BiosrecallError(f"{path}: field '{prefix}{key}' is {value}; it must be >= 0{limit}")
    return value


def _check_tokenizer_entry(path: Path, manifest: dict) -> int:
    """The tokenizer entry and dtype agree with each other; returns the vocabulary size."""
    dtype = manifest.get("dtype")
    if dtype not in DTYPES:
        raise BiosrecallError(f"{path}: field 'dtype' is {dtype!r}; expected one of {', '.join(DTYPES)}")
    info = _field(path, manifest, "tokenizer", dict, "an object")
    vocab = _count(path, info, "vocab_size", "tokenizer.", MAX_VOCAB_SIZE)
    if vocab == 0 or np.dtype(dtype) != np.dtype(token_dtype(vocab)):
        raise BiosrecallError(
            f"{path}: field 'dtype' is {dtype}, but a vocabulary of {vocab} is stored as {token_dtype(vocab)}"
        )
    _count(path, info, "eod_id", "tokenizer.", vocab - 1)
    sha = info.get("sha256")
    if not isinstance(sha, str) or not re.fullmatch(r"[0-9a-f]{64}", sha):
        raise BiosrecallError(f"{path}: field 'tokenizer.sha256' is not a sha256 hex digest")
    return vocab


def _check_split(path: Path, name: str, split: dict, vocab: int) -> None:
    """Counts are non-negative, shard names stay inside the folder, token ids fit the vocabulary."""
    prefix = f"splits.{name}."
    _count(path, split, "documents", prefix)
    total = _count(path, split, "tokens", prefix)
    counted = 0
    for index, entry in enumerate(_field(path, split, "shards", list, "a list", prefix)):
        where = f"{prefix}shards[{index}]"
        if not isinstance(entry, dict) or not _SHARD_NAME.fullmatch(str(entry.get("file"))):
            raise BiosrecallError(f"{path}: {where} needs a 'file' named like train-00000.bin")
        counted += _count(path, entry, "tokens", f"{where}.")
        largest = entry.get("max_token")
        if largest is not None and _count(path, entry, "max_token", f"{where}.") >= vocab:
            raise BiosrecallError(
                f"{path}: shard {entry['file']} holds token id {largest}, outside the vocabulary of {vocab}"
            )
        sha = entry.get("sha256")  # absent in folders prepared before checksums were recorded
        if sha is not None and not (isinstance(sha, str) and re.fullmatch(r"[0-9a-f]{64}", sha)):
            raise BiosrecallError(f"{path}: field '{where}.sha256' is not a sha256 hex digest")
    if counted != total:
        raise BiosrecallError(f"{path}: field '{prefix}tokens' is {total} but its shards hold {counted}")


def reprepare_command(data_dir: str | Path, manifest: dict) -> str:
    """The `biosrecall lm prepare` command that makes `data_dir` again from what its manifest records
    (more than four input files are given as the folder that holds them)."""
    source = manifest.get("source") if isinstance(manifest.get("source"), dict) else {}
    inputs = [_input_argument(entry) for entry in source.get("inputs") or [] if isinstance(entry, dict)]
    if len(inputs) > 4 and not any(item.startswith("hf:") for item in inputs):
        with contextlib.suppress(ValueError):  # absolute and relative paths mixed: keep the list
            inputs = [os.path.commonpath(inputs) or "."]
    words = ["biosrecall", "lm", "prepare", *(inputs or ["INPUT..."]), "--out", str(data_dir), "--overwrite"]
    if source.get("text_column", "text") != "text":
        words += ["--text-column", str(source["text_column"])]
    split = next(
        (e.get("split") for e in source.get("inputs") or [] if isinstance(e, dict) and "split" in e), None
    )
    if split not in (None, "train"):
        words += ["--hf-split", str(split)]
    if source.get("max_documents"):
        words += ["--max-documents", str(source["max_documents"])]
    words += _tokenizer_options(manifest.get("tokenizer") or {})
    chosen = manifest.get("split") if isinstance(manifest.get("split"), dict) else {}
    for option, value in (("--val-fraction", chosen.get("val_fraction")), ("--seed", chosen.get("seed")),
                          ("--shard-tokens", manifest.get("shard_tokens"))):  # fmt: skip
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
