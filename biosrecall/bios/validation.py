"""Checks that a dataset folder is whole and consistent before anything uses it.

Used by `load_dataset`: the manifest must be a regular file of bounded size, parse, and hold the
expected fields with sane types and ranges; every data file must be a regular file matching its
sha256 in the manifest, and the arrays must agree with the manifest and with
each other (shapes, offsets, pool indices, token ids). Each failure is one `BiosrecallError` line
that names the folder and the problem.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
from tokenizers import Tokenizer

from biosrecall.bios.encoding import EVAL_COLUMNS, TRAIN_COLUMNS, TokenArrays
from biosrecall.bios.pools import ATTRIBUTES, MIN_POOL_SIZE, NAME_PARTS
from biosrecall.bios.templates import EVAL_TEMPLATES
from biosrecall.bios.tokenizer import PAD_TOKEN, SEP_TOKEN, SPECIAL_TOKENS
from biosrecall.errors import BiosrecallError
from biosrecall.files import file_sha256, require_regular_file

MAX_MANIFEST_BYTES = 64 << 20  # far above any real manifest; keeps a hostile file from filling memory


def _fail(folder: Path, message: str) -> BiosrecallError:
    return BiosrecallError(f"dataset {folder}: {message}")


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_sizes(folder: Path, manifest: dict, key: str, names: Sequence[str]) -> None:
    sizes = manifest.get(key)
    if not isinstance(sizes, dict) or sorted(sizes) != sorted(names):
        raise _fail(folder, f"manifest.json field '{key}' must map {', '.join(names)} to sizes")
    if not all(_is_int(size) and size >= MIN_POOL_SIZE for size in sizes.values()):
        raise _fail(
            folder, f"manifest.json field '{key}' holds a size that is not an integer >= {MIN_POOL_SIZE}"
        )


def _is_amount(value) -> bool:
    """A finite, non-negative number (bits are never negative)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and 0 <= value < math.inf


def _check_bits(folder: Path, manifest: dict) -> None:
    for key in ("total_bits", "chance_bits"):
        if not _is_amount(manifest.get(key)):
            raise _fail(folder, f"manifest.json field '{key}' must be a finite non-negative number")
    for key in ("bits_per_attribute", "chance_bits_per_attribute"):
        values = manifest.get(key)
        if not isinstance(values, dict) or sorted(values) != sorted(ATTRIBUTES):
            raise _fail(folder, f"manifest.json field '{key}' must map {', '.join(ATTRIBUTES)} to bits")
        if not all(_is_amount(value) for value in values.values()):
            raise _fail(folder, f"manifest.json field '{key}' holds a value that is not a finite number >= 0")


def _check_tokenizer_info(folder: Path, manifest: dict) -> None:
    info = manifest.get("tokenizer")
    if not isinstance(info, dict) or not all(
        _is_int(info.get(key)) for key in ("vocab_size", "pad_id", "sep_id")
    ):
        raise _fail(folder, "manifest.json field 'tokenizer' must hold integer vocab_size, pad_id and sep_id")
    if info["vocab_size"] < len(SPECIAL_TOKENS):
        raise _fail(
            folder,
            f"manifest.json field 'tokenizer' has vocab_size {info['vocab_size']} < {len(SPECIAL_TOKENS)}",
        )
    for key in ("pad_id", "sep_id"):
        if not 0 <= info[key] < info["vocab_size"]:
            raise _fail(
                folder, f"manifest.json field 'tokenizer' has {key} {info[key]} outside the vocabulary"
            )


def _check_templates(folder: Path, manifest: dict) -> None:
    templates = manifest.get("templates")
    if not isinstance(templates, dict) or not all(
        isinstance(templates.get(role), dict)
        and sorted(templates[role]) == sorted(ATTRIBUTES)
        and all(
            isinstance(texts, list) and texts and all(isinstance(text, str) for text in texts)
            for texts in templates[role].values()
        )
        for role in ("train", "eval")
    ):
        raise _fail(
            folder, "manifest.json field 'templates' must list train and eval templates per attribute"
        )


def _read_json(path: Path) -> tuple[bytes, object]:
    """The bytes and parsed JSON of a manifest that must be a regular file of bounded size."""
    folder = path.parent
    if not os.path.lexists(path):
        raise _fail(folder, f"{path.name} is missing (not a dataset folder?)")
    require_regular_file(path, f"dataset {folder}:")
    size = path.stat().st_size
    if size > MAX_MANIFEST_BYTES:
        raise _fail(folder, f"{path.name} holds {size:,} bytes, above the {MAX_MANIFEST_BYTES:,} allowed")
    raw = path.read_bytes()
    try:
        return raw, json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise _fail(folder, f"{path.name} is not valid JSON ({exc})") from None
    except RecursionError:
        raise _fail(folder, f"{path.name} is not valid JSON (nested too deeply)") from None


def read_manifest(path: Path, expected_format: str) -> tuple[bytes, dict]:
    """The manifest's raw bytes and parsed content, with its fields' presence, types and ranges checked."""
    folder = path.parent
    raw, manifest = _read_json(path)
    if not isinstance(manifest, dict) or manifest.get("format") != expected_format:
        raise _fail(folder, f"{path.name} is not a '{expected_format}' manifest")
    if not _is_int(manifest.get("num_people")) or manifest["num_people"] < 1:
        raise _fail(folder, "manifest.json field 'num_people' must be a positive integer")
    if not _is_int(manifest.get("seed")) or manifest["seed"] < 0:
        raise _fail(folder, "manifest.json field 'seed' must be a non-negative integer")
    _check_sizes(folder, manifest, "pool_sizes", ATTRIBUTES)
    _check_sizes(folder, manifest, "name_pool_sizes", NAME_PARTS)
    _check_tokenizer_info(folder, manifest)
    _check_templates(folder, manifest)
    _check_bits(folder, manifest)
    return raw, manifest


def verify_files(folder: Path, manifest: dict, expected: Sequence[str]) -> None:
    """Every expected file is listed in the manifest, present, and matches its recorded sha256."""
    files = manifest.get("files")
    if not isinstance(files, dict) or sorted(files) != sorted(expected):
        raise _fail(folder, f"manifest.json field 'files' must list exactly {', '.join(sorted(expected))}")
    for name in expected:
        path = folder / name
        if not os.path.lexists(path):
            raise _fail(folder, f"{name} is missing")
        require_regular_file(path, f"dataset {folder}:")
        if file_sha256(path) != files[name]:
            raise _fail(folder, f"{name} does not match its sha256 in manifest.json (changed or corrupted)")


def _check_shape(folder: Path, name: str, array: np.ndarray, shape: tuple) -> None:
    if not np.issubdtype(array.dtype, np.integer):
        raise _fail(folder, f"{name}.npy holds {array.dtype}, expected integers")
    if len(array.shape) != len(shape) or any(
        want is not None and got != want for got, want in zip(array.shape, shape, strict=True)
    ):
        raise _fail(
            folder,
            f"{name}.npy has shape {array.shape}, expected {tuple('*' if s is None else s for s in shape)}",
        )


def _check_offsets(folder: Path, name: str, offsets: np.ndarray, tokens: np.ndarray) -> None:
    if offsets[0] != 0 or np.any(np.diff(offsets) < 0) or offsets[-1] != len(tokens):
        raise _fail(folder, f"{name}_offsets.npy does not index {name}_tokens.npy from start to end")


def _check_runs(folder: Path, name: str, layout: np.ndarray, first_run: int, tokens: np.ndarray) -> None:
    starts, lengths = layout[:, first_run::2], layout[:, first_run + 1 :: 2]
    if np.any(starts < 0) or np.any(lengths < 0) or np.any(starts + lengths > len(tokens)):
        raise _fail(folder, f"{name}.npy points outside template_tokens.npy")


def check_dataset_arrays(
    folder: Path, manifest: dict, tokenizer: Tokenizer, arrays: TokenArrays, people: pd.DataFrame
) -> None:
    """The tokenizer, arrays and people table agree with the manifest and with each other."""
    n = manifest["num_people"]
    sizes = [manifest["pool_sizes"][a] for a in ATTRIBUTES]
    info = manifest["tokenizer"]
    if (tokenizer.get_vocab_size(), tokenizer.token_to_id(PAD_TOKEN), tokenizer.token_to_id(SEP_TOKEN)) != (
        info["vocab_size"],
        info["pad_id"],
        info["sep_id"],
    ):
        raise _fail(
            folder, "tokenizer.json does not match the vocabulary size and special ids in manifest.json"
        )
    if len(people) != n or "name" not in people.columns or not set(ATTRIBUTES) <= set(people.columns):
        raise _fail(folder, f"people.parquet must hold {n} rows with name and attribute columns")
    train_count = sum(len(manifest["templates"]["train"][a]) for a in ATTRIBUTES)
    _check_shape(folder, "person_values", arrays.person_values, (n, len(ATTRIBUTES)))
    _check_shape(folder, "name_offsets", arrays.name_offsets, (n + 1,))
    _check_shape(folder, "value_offsets", arrays.value_offsets, (sum(sizes) + 1,))
    _check_shape(folder, "train_templates", arrays.train_templates, (train_count, len(TRAIN_COLUMNS)))
    _check_shape(
        folder, "eval_templates", arrays.eval_templates, (len(ATTRIBUTES) * EVAL_TEMPLATES, len(EVAL_COLUMNS))
    )
    for name in ("name_tokens", "value_tokens", "template_tokens"):
        _check_shape(folder, name, getattr(arrays, name), (None,))
    if np.any(arrays.person_values < 0) or np.any(arrays.person_values >= np.array(sizes)):
        raise _fail(folder, "person_values.npy holds a pool index outside its pool")
    _check_offsets(folder, "name", arrays.name_offsets, arrays.name_tokens)
    _check_offsets(folder, "value", arrays.value_offsets, arrays.value_tokens)
    expected_attribute = np.repeat(
        np.arange(len(ATTRIBUTES)), [len(manifest["templates"]["train"][a]) for a in ATTRIBUTES]
    )
    if not np.array_equal(arrays.train_templates[:, 0], expected_attribute):
        raise _fail(folder, "train_templates.npy is not grouped by attribute as the manifest lists them")
    _check_runs(folder, "train_templates", arrays.train_templates, 2, arrays.template_tokens)
    _check_runs(folder, "eval_templates", arrays.eval_templates, 2, arrays.template_tokens)
