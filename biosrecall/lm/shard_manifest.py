"""The manifest of a prepared LM shard folder: `load_manifest` reads it and checks every field a reader
uses (types, required keys, ranges, shard names that stay inside the folder, token ids inside the
vocabulary), naming the first bad one. The folder's layout and the shard format are described in
`biosrecall.lm.shards`, which writes both.

    manifest = load_manifest("data/lm-books")      # BiosrecallError naming the field, or the dict
"""

from __future__ import annotations

import json
import os
import re
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
    if counted != total:
        raise BiosrecallError(f"{path}: field '{prefix}tokens' is {total} but its shards hold {counted}")
