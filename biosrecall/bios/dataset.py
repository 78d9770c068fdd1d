"""Dataset folders: `generate_dataset` writes one atomically, `load_dataset` validates and reads it back.

    generate_dataset("data/bios-1k", people=1000, seed=0)
    dataset = load_dataset("data/bios-1k")
    dataset.total_bits, dataset.chance_bits, dataset.vocab_size
    BatchSampler(dataset, 64, 256).batch(rng); dataset.eval_set()

Folder layout (same arguments give byte-identical files; nothing holds a time stamp or a path):

    manifest.json      format, package_version, num_people, seed, pool_sizes and name_pool_sizes,
                       bits_per_attribute, total_bits (sum of log2 pool sizes), chance_bits and
                       chance_bits_per_attribute (expected recalled bits of a model that always
                       answers each attribute's most common value: sum over attributes of
                       log2(pool size) * count of the most common value / N), templates
                       (holdout_eval_templates, the training templates and eval prompts per
                       attribute), values (each attribute's pool values in use), tokenizer (vocab_size,
                       pad_id, sep_id), source_hashes (sha256 of the pool and template files used),
                       files (sha256 of every other file in the folder)
    people.parquet     one row per person: id, name, first_name, middle_name, last_name, and per
                       attribute `<attribute>` (the value) and `<attribute>_index` (its pool index)
    tokenizer.json     the word-level tokenizer (Hugging Face `tokenizers` format)
    *.npy              pre-tokenized arrays for the sampler and the evaluation set; see
                       `biosrecall.bios.encoding` for their layout

`BiosDataset.manifest_hash` (sha256 of manifest.json's bytes) identifies the whole dataset, since the
manifest holds the hash of every other file.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
from tokenizers import Tokenizer

import biosrecall
from biosrecall.atomic import OutputRecord, atomic_directory, check_output_dir, check_output_path
from biosrecall.bios.encoding import TokenArrays, TokenStore, encode_arrays
from biosrecall.bios.evalset import EvalSet, build_eval_set
from biosrecall.bios.people import chance_bits, check_people_count, draw_people, people_table
from biosrecall.bios.pools import ATTRIBUTES, NAME_PARTS, attribute_bits, load_pools, pool_file_hashes
from biosrecall.bios.templates import load_templates
from biosrecall.bios.tokenizer import (
    MAX_TOKENIZER_BYTES,
    PAD_TOKEN,
    SEP_TOKEN,
    build_tokenizer,
    read_tokenizer_text,
    split_template,
    split_words,
)
from biosrecall.bios.validation import (
    DATA_FILES,
    PEOPLE,
    TOKENIZER,
    check_dataset_arrays,
    read_manifest,
    verify_files,
)
from biosrecall.errors import BiosrecallError
from biosrecall.files import file_sha256
from biosrecall.locking import output_lock
from biosrecall.numbers import check_seed
from biosrecall.paths import POOLS_DIR, TEMPLATES_DIR
from biosrecall.sizing import check_fits, dataset_cost, describe, shows_progress

FORMAT = "biosrecall-bios-1"
MANIFEST = "manifest.json"
# What marks a folder as a dataset `generate` made: the only kind its --overwrite replaces.
RECORD = OutputRecord("generate", MANIFEST, "format", FORMAT)
# Fixed writer options (and no pandas metadata) keep the bytes of a dataset's and a text export's
# parquet files reproducible.
PARQUET_OPTIONS = {"compression": "zstd", "compression_level": 3, "write_statistics": False}


def manifest_bytes(manifest: dict) -> bytes:
    return (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode("utf-8")


def _vocabulary_words(pools, training, prompts) -> set[str]:
    words = {w for values in pools.values() for value in values for w in split_words(value)}
    for templates in (*training.values(), *prompts.values()):
        for template in templates:
            words.update(w for piece in split_template(template)[0] for w in piece)
    return words


def _write_folder(folder: Path, table, tokenizer: Tokenizer, arrays: TokenArrays, manifest: dict) -> None:
    pq.write_table(table, folder / PEOPLE, use_dictionary=True, row_group_size=1 << 20, **PARQUET_OPTIONS)
    tokenizer.save(str(folder / TOKENIZER), pretty=True)
    arrays.save(folder)
    manifest["files"] = {name: file_sha256(folder / name) for name in DATA_FILES}
    (folder / MANIFEST).write_bytes(manifest_bytes(manifest))


def _manifest(seed, pools, population, templates, training, holdout_eval_templates, tokenizer, pool_hashes):
    """Everything about a dataset except its file hashes, which are added once the files exist.

    Nothing names the pools folder: the same pool files give the same manifest wherever they live."""
    sizes = {name: len(values) for name, values in pools.items()}
    bits, chance = attribute_bits(sizes), chance_bits(population.values, sizes)
    return {
        "format": FORMAT,
        "package_version": biosrecall.__version__,
        "num_people": len(population),
        "seed": seed,
        "attributes": list(ATTRIBUTES),
        "pool_sizes": {a: sizes[a] for a in ATTRIBUTES},
        "name_pool_sizes": {part: sizes[part] for part in NAME_PARTS},
        "bits_per_attribute": bits,
        "total_bits": sum(bits.values()),
        "chance_bits_per_attribute": chance,
        "chance_bits": sum(chance.values()),
        "templates": {
            "holdout_eval_templates": holdout_eval_templates,
            "train": {a: list(training[a]) for a in ATTRIBUTES},
            "eval": {a: list(templates.eval[a]) for a in ATTRIBUTES},
        },
        "values": {a: list(pools[a]) for a in ATTRIBUTES},
        "tokenizer": {
            "vocab_size": tokenizer.get_vocab_size(),
            "pad_id": tokenizer.token_to_id(PAD_TOKEN),
            "sep_id": tokenizer.token_to_id(SEP_TOKEN),
        },
        "source_hashes": {
            **{f"pools/{name}": digest for name, digest in pool_hashes.items()},
            **{f"templates/{name}": digest for name, digest in templates.file_hashes.items()},
        },
    }


def generate_dataset(
    out_dir: str | Path,
    people: int,
    seed: int,
    pool_sizes: dict[str, int] | None = None,
    holdout_eval_templates: bool = False,
    overwrite: bool = False,
    templates_dir: str | Path | None = None,
    pools_dir: str | Path | None = None,
    report: Callable[[str], None] | None = None,
) -> Path:
    """Generate a bioS dataset folder at `out_dir` (see the module docstring); returns its path.

    `pool_sizes` overrides the default size of any pool (attributes or name parts), taking the first
    n values of the pool file; `pools_dir` reads the pool files from another folder (format: see
    `biosrecall.bios.pools`). Everything is validated and built in memory before the folder is
    written under a temporary name and renamed, so a failure leaves nothing behind. The output may not
    be or hold the pools or templates it reads, and is locked for the whole call (`output_lock`).
    A dataset larger than the machine's memory or free disk (`biosrecall.sizing`) is refused before
    any work; `report`, when given, is told the estimate, then each stage as it starts, if the work
    is long enough to be worth reporting (`biosrecall.sizing.shows_progress`).
    """
    out_dir = Path(out_dir)
    seed = check_seed(seed)
    pools_dir = pools_dir if pools_dir is not None else POOLS_DIR
    templates_dir = templates_dir if templates_dir is not None else TEMPLATES_DIR
    check_output_path(out_dir, [pools_dir, templates_dir])
    with output_lock(out_dir):
        check_output_dir(out_dir, overwrite, RECORD)  # fail before the work, not after it
        pools = load_pools(pool_sizes, pools_dir)
        sizes = {name: len(values) for name, values in pools.items()}
        check_people_count(people, sizes)
        cost = dataset_cost(people)
        check_fits(f"--people {people:,}", cost, out_dir, "use fewer people")
        # the stages of short work are not worth a line each
        report = report if report is not None and shows_progress(cost) else (lambda stage: None)
        pool_hashes = pool_file_hashes(pools_dir)
        templates = load_templates(templates_dir)
        report(f"generating {people:,} people: {describe(cost)}")
        report(f"  drawing {people:,} people")
        population = draw_people(people, seed, sizes)
        training = templates.training(holdout_eval_templates)
        tokenizer = build_tokenizer(_vocabulary_words(pools, training, templates.eval))
        report("  encoding their names and attributes as tokens")
        arrays = encode_arrays(tokenizer, pools, population, training, templates.eval)
        manifest = _manifest(
            seed, pools, population, templates, training, holdout_eval_templates, tokenizer, pool_hashes
        )
        report(f"  writing {out_dir}")
        with atomic_directory(out_dir, overwrite=overwrite, record=RECORD) as folder:
            _write_folder(folder, people_table(population, pools), tokenizer, arrays, manifest)
    return out_dir


@dataclass
class BiosDataset:
    """A loaded, validated dataset folder; see the module docstring for what each part holds."""

    path: Path
    manifest: dict
    manifest_hash: str
    tokenizer: Tokenizer
    people: pd.DataFrame
    arrays: TokenArrays

    @property
    def vocab_size(self) -> int:
        return self.manifest["tokenizer"]["vocab_size"]

    @property
    def pad_id(self) -> int:
        return self.manifest["tokenizer"]["pad_id"]

    @property
    def sep_id(self) -> int:
        return self.manifest["tokenizer"]["sep_id"]

    @property
    def num_people(self) -> int:
        return self.manifest["num_people"]

    @property
    def pool_sizes(self) -> dict[str, int]:
        return dict(self.manifest["pool_sizes"])

    @property
    def bits_per_attribute(self) -> dict[str, float]:
        return dict(self.manifest["bits_per_attribute"])

    @property
    def total_bits(self) -> float:
        return self.manifest["total_bits"]

    @property
    def chance_bits(self) -> float:
        return self.manifest["chance_bits"]

    @cached_property
    def token_store(self) -> TokenStore:
        sizes = [self.manifest["pool_sizes"][a] for a in ATTRIBUTES]
        return TokenStore(self.arrays, sizes, self.sep_id)

    def eval_set(self, people: np.ndarray | None = None) -> EvalSet:
        """Evaluation rows (N x 6 x 5, person-major); `people` restricts them to those person ids."""
        return build_eval_set(self.token_store, self.pad_id, people)


def load_dataset(path: str | Path) -> BiosDataset:
    """Read a dataset folder, checking its manifest, file hashes, tokenizer and array shapes."""
    folder = Path(path)
    if not folder.is_dir():
        raise BiosrecallError(f"dataset folder {folder} not found")
    raw, manifest = read_manifest(folder / MANIFEST, FORMAT)
    verify_files(folder, manifest)
    tokenizer = read_tokenizer_text(folder / TOKENIZER, MAX_TOKENIZER_BYTES)[0]
    try:
        arrays = TokenArrays.load(folder)
        people = pq.read_table(folder / PEOPLE).to_pandas()
    except Exception as exc:  # any reader failure means a damaged file; report it as one line
        raise BiosrecallError(
            f"dataset {folder}: cannot read its files ({type(exc).__name__}: {exc})"
        ) from None
    check_dataset_arrays(folder, manifest, tokenizer, arrays, people)
    return BiosDataset(folder, manifest, hashlib.sha256(raw).hexdigest(), tokenizer, people, arrays)
