"""Checks that a dataset folder is whole and consistent before anything uses it.

Used by `load_dataset`: the manifest must be a regular file of bounded size, parse, and hold the
fields of `DatasetManifest` with sane types and ranges (read through `biosrecall.records`); every data file must be a regular file matching its
sha256 in the manifest, and the arrays must agree with the manifest and with
each other (shapes, offsets, pool indices, token ids). Each failure is one `BiosrecallError` line
that names the folder and the problem.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, ClassVar

import numpy as np
import pandas as pd
from msgspec import Meta
from tokenizers import Tokenizer

from biosrecall.bios.encoding import EVAL_COLUMNS, TRAIN_COLUMNS, TokenArrays
from biosrecall.bios.pools import ATTRIBUTES, NAME_PARTS, PoolSize
from biosrecall.bios.templates import EVAL_TEMPLATES
from biosrecall.bios.tokenizer import PAD_TOKEN, SEP_TOKEN, SPECIAL_TOKENS
from biosrecall.errors import BiosrecallError
from biosrecall.files import file_sha256, parse_json_text, read_user_text, require_regular_file
from biosrecall.records import Amount, Count, Sha256, Vocabulary, exact_keys, parse_record

MAX_MANIFEST_BYTES = 64 << 20  # far above any real manifest; keeps a hostile file from filling memory
PEOPLE = "people.parquet"
TOKENIZER = "tokenizer.json"
DATA_FILES = (PEOPLE, TOKENIZER, *TokenArrays.file_names())
"""Every file of a dataset folder besides its manifest, which lists each one's sha256."""


def _fail(folder: Path, message: str) -> BiosrecallError:
    return BiosrecallError(f"dataset {folder}: {message}")


PoolSizes = exact_keys("PoolSizes", ATTRIBUTES, PoolSize)
NamePoolSizes = exact_keys("NamePoolSizes", NAME_PARTS, PoolSize)
AttributeBits = exact_keys("AttributeBits", ATTRIBUTES, Amount)
AttributeTemplates = exact_keys("AttributeTemplates", ATTRIBUTES, Annotated[list[str], Meta(min_length=1)])


@dataclass(kw_only=True)
class TemplateLists:
    train: AttributeTemplates
    """The training templates of each attribute."""
    eval: AttributeTemplates
    """The evaluation prompts of each attribute."""


@dataclass(kw_only=True)
class DatasetTokenizer(Vocabulary):
    vocab_size: Annotated[int, Meta(ge=len(SPECIAL_TOKENS))]
    """The word-level vocabulary's size, special tokens included."""
    pad_id: Count
    """The padding token's id."""
    sep_id: Count
    """The separator token's id."""
    special_ids: ClassVar[tuple[str, ...]] = ("pad_id", "sep_id")


@dataclass(kw_only=True)
class DatasetManifest:
    """What readers use of a dataset's manifest.json (`biosrecall.bios.dataset` describes it all)."""

    num_people: Annotated[int, Meta(ge=1)]
    """People in the dataset."""
    seed: Count
    """The seed they were drawn with."""
    pool_sizes: PoolSizes
    """Each attribute's pool size."""
    name_pool_sizes: NamePoolSizes
    """Each name part's pool size."""
    tokenizer: DatasetTokenizer
    """The vocabulary size and special ids."""
    templates: TemplateLists
    """The templates in use."""
    total_bits: Amount
    """Bits of all attributes of one person."""
    chance_bits: Amount
    """Bits a model recalls by always answering each attribute's most common value."""
    bits_per_attribute: AttributeBits
    """Each attribute's bits."""
    chance_bits_per_attribute: AttributeBits
    """Each attribute's chance bits."""
    files: dict[str, Sha256]
    """sha256 of every data file (`verify_files` checks the names and the bytes)."""


def read_manifest(path: Path, expected_format: str) -> tuple[bytes, dict]:
    """The manifest's raw bytes and its content as JSON read it, checked as a `DatasetManifest`; the
    file must be a regular file of bounded size."""
    text = read_user_text(path, f"dataset {path.parent}:", MAX_MANIFEST_BYTES)
    manifest = parse_json_text(text, f"dataset manifest {path}")
    if not isinstance(manifest, dict) or manifest.get("format") != expected_format:
        raise _fail(path.parent, f"{path.name} is not a '{expected_format}' manifest")
    parse_record(manifest, DatasetManifest, f"dataset manifest {path} is corrupt")
    return text.encode("utf-8"), manifest  # strict UTF-8: the same bytes as the file's


def verify_files(folder: Path, manifest: dict) -> None:
    """Every data file is listed in the manifest, present, and matches its recorded sha256."""
    if sorted(manifest["files"]) != sorted(DATA_FILES):
        raise _fail(folder, f"manifest.json field 'files' must list exactly {', '.join(sorted(DATA_FILES))}")
    for name in DATA_FILES:
        path = require_regular_file(folder / name, f"dataset {folder}:")
        if file_sha256(path) != manifest["files"][name]:
            raise _fail(folder, f"{name} does not match its sha256 in manifest.json (changed or corrupted)")


def check_dataset_arrays(
    folder: Path, manifest: dict, tokenizer: Tokenizer, arrays: TokenArrays, people: pd.DataFrame
) -> None:
    """The tokenizer, arrays and people table agree with the manifest and with each other."""
    n, info = manifest["num_people"], manifest["tokenizer"]
    sizes = [manifest["pool_sizes"][a] for a in ATTRIBUTES]
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
    templates = [len(manifest["templates"]["train"][a]) for a in ATTRIBUTES]
    shapes = {  # None: any length along that axis
        "person_values": (n, len(ATTRIBUTES)),
        "name_offsets": (n + 1,),
        "value_offsets": (sum(sizes) + 1,),
        "train_templates": (sum(templates), len(TRAIN_COLUMNS)),
        "eval_templates": (len(ATTRIBUTES) * EVAL_TEMPLATES, len(EVAL_COLUMNS)),
        **dict.fromkeys(("name_tokens", "value_tokens", "template_tokens"), (None,)),
    }
    for name, shape in shapes.items():
        array = getattr(arrays, name)
        if (
            not np.issubdtype(array.dtype, np.integer)
            or len(array.shape) != len(shape)
            or any(want is not None and got != want for got, want in zip(array.shape, shape, strict=True))
        ):
            expected = tuple("*" if s is None else s for s in shape)
            raise _fail(
                folder,
                f"{name}.npy holds {array.dtype} of shape {array.shape}, expected integers of shape {expected}",
            )
    for name in ("name_tokens", "value_tokens", "template_tokens"):
        tokens = getattr(arrays, name)
        if len(tokens) and (tokens.min() < 0 or tokens.max() >= info["vocab_size"]):
            raise _fail(folder, f"{name}.npy holds token ids outside the vocabulary of {info['vocab_size']}")
    if np.any(arrays.person_values < 0) or np.any(arrays.person_values >= np.array(sizes)):
        raise _fail(folder, "person_values.npy holds a pool index outside its pool")
    for name, tokens in (("name", arrays.name_tokens), ("value", arrays.value_tokens)):
        offsets = getattr(arrays, f"{name}_offsets")
        if offsets[0] != 0 or np.any(np.diff(offsets) < 0) or offsets[-1] != len(tokens):
            raise _fail(folder, f"{name}_offsets.npy does not index {name}_tokens.npy from start to end")
    if not np.array_equal(arrays.train_templates[:, 0], np.repeat(np.arange(len(ATTRIBUTES)), templates)):
        raise _fail(folder, "train_templates.npy is not grouped by attribute as the manifest lists them")
    for name in ("train_templates", "eval_templates"):
        layout = getattr(arrays, name)
        starts, lengths = layout[:, 2::2], layout[:, 3::2]
        if (
            np.any(starts < 0)
            or np.any(lengths < 0)
            or np.any(starts + lengths > len(arrays.template_tokens))
        ):
            raise _fail(folder, f"{name}.npy points outside template_tokens.npy")
