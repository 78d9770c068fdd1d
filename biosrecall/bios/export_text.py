"""bioS as plain text for other trainers: training biographies, and evaluation prompts with answers.

    manifest = export_text("data/bios-1k", TextExport("data/bios-1k-text", "jsonl", exposures=100))
    # biosrecall generate --from-dataset data/bios-1k --export-text jsonl --text-out data/bios-1k-text

    datasets.load_dataset("json", data_files="data/bios-1k-text/train.jsonl", split="train")
    datasets.load_dataset("json", data_files="data/bios-1k-text/eval.jsonl", split="train")

Folder layout (`jsonl` or `parquet`; the same dataset, format, exposures and seed give byte-identical
files, and nothing holds a time stamp or a path):

    train.<format>   {"text", "person", "exposure"}: N x exposures biographies, exposure-major
    eval.<format>    {"prompt", "answer", "person", "attribute", "template"}: N x 6 x 5 rows, in the
                     evaluation set's order (person, attribute, template 0..4)
    manifest.json    the dataset's manifest hash, seed and size, the export's format, seed and
                     exposures, each file's records, bytes and sha256, and the library versions

Training text comes from the trainer's own sampler: exposure e is the one row of
`BatchSampler.everyone_once(dataset)` drawn from `batch_generator(seed, e)`: the batch that the
trainer's batch source (`BiosBatchSource`, run seed SEED) would draw at update e with batch size 1 and
a context holding everyone. So every exposure shows every person once, in a fresh random order, each sentence from a freshly
drawn template and the sentences freshly shuffled. The texts are those token rows decoded with the
dataset's tokenizer, so encoding a text gives back exactly the tokens `train` uses.

Evaluation rows are `dataset.eval_set()` decoded: a model is asked `prompt` and is right when it
continues with " " + `answer` (the attribute value, as in `people.parquet`). `attribute` is the
attribute's name and `template` the index of the prompt among that attribute's five.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import tokenizers

import biosrecall
from biosrecall.atomic import (
    OutputRecord,
    atomic_directory,
    check_output_dir,
    check_output_path,
    error_number,
    write_failed,
)
from biosrecall.bios.dataset import FORMAT as DATASET_FORMAT
from biosrecall.bios.dataset import MANIFEST, PARQUET_OPTIONS, BiosDataset, load_dataset, manifest_bytes
from biosrecall.bios.pools import ATTRIBUTES
from biosrecall.bios.sampler import BatchSampler, batch_generator
from biosrecall.bios.validation import read_manifest
from biosrecall.errors import BiosrecallError
from biosrecall.files import file_sha256
from biosrecall.locking import output_lock
from biosrecall.numbers import check_count, check_seed
from biosrecall.sizing import check_fits, export_cost

FORMAT = "biosrecall-bios-text-1"
# What marks a folder as a text export: the only kind its --overwrite replaces.
RECORD = OutputRecord("generate --export-text", MANIFEST, "format", FORMAT)
TEXT_FORMATS = ("jsonl", "parquet")
DEFAULT_EXPOSURES = 100
MAX_EXPOSURES = 10_000
TRAIN_COLUMNS = {"text": pa.string(), "person": pa.int64(), "exposure": pa.int64()}
EVAL_COLUMNS = {
    "prompt": pa.string(),
    "answer": pa.string(),
    "person": pa.int64(),
    "attribute": pa.string(),
    "template": pa.int64(),
}
ROWS_PER_CHUNK = 8192  # records decoded and written at a time: bounds the memory of Python lists
EVAL_PEOPLE_PER_CHUNK = ROWS_PER_CHUNK // 30  # each person has 6 x 5 evaluation rows
PARQUET_ROW_GROUP = 1 << 17  # parquet compresses far better in row groups of this size than per chunk


@dataclass(frozen=True)
class TextExport:
    """Where and how to export a dataset's text."""

    out_dir: Path
    """Folder to create for the text files and their manifest (must be new or empty)."""
    format: str = "jsonl"
    """`jsonl` (JSON Lines) or `parquet`; both load with `datasets.load_dataset`."""
    exposures: int = DEFAULT_EXPOSURES
    """How many times every person's biography is written, freshly phrased and ordered each time."""
    seed: int = 0
    """Seeds the phrasing and order: exposure e draws from `batch_generator(seed, e)`."""
    overwrite: bool = False
    """Replace an existing non-empty `out_dir`."""

    def check(self, inputs=()) -> None:
        """Refuse bad settings, and an output that is, holds or lies in one of `inputs`, before any work."""
        if self.format not in TEXT_FORMATS:
            raise BiosrecallError(
                f"text format must be one of {', '.join(TEXT_FORMATS)}, got {self.format!r}"
            )
        check_count(self.exposures, "exposures", high=MAX_EXPOSURES, why="the text export's limit")
        check_seed(self.seed)
        check_output_path(self.out_dir, inputs)
        check_output_dir(self.out_dir, self.overwrite, RECORD)


def check_export_size(people: int, export: TextExport) -> None:
    """Refuse an export of `people` people larger than the machine's memory or free disk."""

    cost = export_cost(people, export.exposures, export.format)
    what = f"the text of {people:,} people x {export.exposures:,} exposures"
    check_fits(what, cost, export.out_dir, "export fewer --exposures or a smaller dataset")


def export_text(dataset_dir: str | Path, export: TextExport) -> dict:
    """Write the text folder `export.out_dir` for the dataset in `dataset_dir`; returns its manifest.

    The folder is built under a temporary name and renamed at the end, under the output's lock; an
    export larger than the machine (`check_export_size`) is refused before the dataset is read."""
    out_dir = Path(export.out_dir)
    export.check(inputs=[dataset_dir])
    if Path(dataset_dir).is_dir():  # else load_dataset names the missing folder
        _, manifest = read_manifest(Path(dataset_dir) / MANIFEST, DATASET_FORMAT)
        check_export_size(manifest["num_people"], export)
    dataset = load_dataset(dataset_dir)
    with output_lock(out_dir):
        export.check(inputs=[dataset_dir])  # again, now that no other writer can change the answer
        with atomic_directory(out_dir, overwrite=export.overwrite, record=RECORD) as folder:
            files = {
                f"train.{export.format}": _write(
                    folder, "train", export.format, TRAIN_COLUMNS, _training_chunks(dataset, export)
                ),
                f"eval.{export.format}": _write(
                    folder, "eval", export.format, EVAL_COLUMNS, _evaluation_chunks(dataset)
                ),
            }
            manifest = _manifest(dataset, export, files)
            (folder / MANIFEST).write_bytes(manifest_bytes(manifest))
    return manifest


def _runs_as_lists(tokens: np.ndarray, start: np.ndarray, length: np.ndarray) -> list[list[int]]:
    """The token runs tokens[start:start + length] as Python lists: one `tolist` of the stretch that
    holds them, then list slices (much faster than a `tolist` per run)."""
    if len(start) == 0:
        return []
    base, end = int(start.min()), int((start + length).max())
    flat = tokens[base:end].tolist()
    return [flat[s:e] for s, e in zip((start - base).tolist(), (start + length - base).tolist(), strict=True)]


def _training_chunks(dataset: BiosDataset, export: TextExport) -> Iterator[dict[str, list]]:
    """Each exposure is one `everyone_once` row, decoded a few thousand biographies at a time."""
    sampler = BatchSampler.everyone_once(dataset)
    for exposure in range(export.exposures):
        layout = sampler.layout(batch_generator(export.seed, exposure))
        row = layout.tokens[0]
        for first in range(0, len(layout.person), ROWS_PER_CHUNK):
            part = slice(first, first + ROWS_PER_CHUNK)
            # each run starts with its separator, which the text leaves out
            ids = _runs_as_lists(row, layout.start[part] + 1, layout.length[part] - 1)
            yield {
                "text": dataset.tokenizer.decode_batch(ids),
                "person": layout.person[part].tolist(),
                "exposure": [exposure] * len(ids),
            }


def _evaluation_chunks(dataset: BiosDataset) -> Iterator[dict[str, list]]:
    """The evaluation set decoded, a few hundred people at a time: prompt (after the separator) and answer."""
    for first in range(0, dataset.num_people, EVAL_PEOPLE_PER_CHUNK):
        people = np.arange(first, min(first + EVAL_PEOPLE_PER_CHUNK, dataset.num_people))
        rows = dataset.eval_set(people)
        flat = rows.tokens.ravel()
        row_start = np.arange(len(rows)) * rows.tokens.shape[1]
        prompts = _runs_as_lists(flat, row_start + 1, rows.answer_start - 1)
        answers = _runs_as_lists(flat, row_start + rows.answer_start, rows.answer_len)
        yield {
            "prompt": dataset.tokenizer.decode_batch(prompts),
            "answer": dataset.tokenizer.decode_batch(answers),
            "person": rows.person.tolist(),
            "attribute": [ATTRIBUTES[a] for a in rows.attribute.tolist()],
            "template": rows.template.tolist(),
        }


def _write(folder: Path, stem: str, text_format: str, columns: dict, chunks: Iterator[dict]) -> dict:
    """Stream `chunks` into `<stem>.<format>`; returns the file's record count, bytes and sha256."""
    path = folder / f"{stem}.{text_format}"
    writer = _write_jsonl if text_format == "jsonl" else _write_parquet
    try:
        records = writer(path, columns, chunks)
    except (OSError, pa.ArrowException) as exc:  # a failed write() or pyarrow's error names no file
        if error_number(exc) is None:
            raise
        raise write_failed(path, exc) from exc
    return {
        "records": records,
        "bytes": path.stat().st_size,
        "sha256": file_sha256(path),
        "columns": list(columns),
    }


def _write_jsonl(path: Path, columns: dict, chunks: Iterator[dict]) -> int:
    records = 0
    with open(path, "w", encoding="utf-8", newline="\n") as handle:
        for chunk in chunks:
            # json.dumps of each record, assembled column by column: the same bytes, several times faster
            encoded = [
                [f'"{name}": {json.dumps(v, ensure_ascii=False)}' for v in chunk[name]] for name in columns
            ]
            handle.writelines("{" + ", ".join(fields) + "}\n" for fields in zip(*encoded, strict=True))
            records += len(chunk["person"])
    return records


def _write_parquet(path: Path, columns: dict, chunks: Iterator[dict]) -> int:
    """Fixed writer options and row groups of PARQUET_ROW_GROUP records: the bytes depend only on the records."""
    schema = pa.schema(list(columns.items()))
    records, pending = 0, []
    with pq.ParquetWriter(path, schema, **PARQUET_OPTIONS) as writer:
        for chunk in chunks:
            pending.append(pa.table({name: chunk[name] for name in columns}, schema=schema))
            records += len(chunk["person"])
            if sum(len(table) for table in pending) >= PARQUET_ROW_GROUP:
                writer.write_table(pa.concat_tables(pending), row_group_size=PARQUET_ROW_GROUP)
                pending = []
        if pending:
            writer.write_table(pa.concat_tables(pending), row_group_size=PARQUET_ROW_GROUP)
    return records


def _manifest(dataset: BiosDataset, export: TextExport, files: dict) -> dict:
    source = dataset.manifest
    return {
        "format": FORMAT,
        "text_format": export.format,
        "dataset": {
            "manifest_hash": dataset.manifest_hash,
            "num_people": dataset.num_people,
            "seed": source["seed"],
            "total_bits": dataset.total_bits,
            "pool_sizes": dataset.pool_sizes,
            "holdout_eval_templates": source["templates"]["holdout_eval_templates"],
        },
        "seed": export.seed,
        "exposures": export.exposures,
        "sampler": "BatchSampler.everyone_once(dataset).layout(batch_generator(seed, exposure))",
        "files": files,
        "versions": {
            "biosrecall": biosrecall.__version__,
            "numpy": np.__version__,
            "pyarrow": pa.__version__,
            "tokenizers": tokenizers.__version__,
        },
    }
