"""Token shards: the on-disk form of a tokenized corpus, and `prepare_corpus`, which writes them.

A prepared folder holds
    tokenizer.json                the tokenizer, byte for byte (its sha256 identifies it)
    train-00000.bin ...           the training token stream, cut into shards of at most shard_tokens
    validation-00000.bin ...      the held-out documents' stream (absent when val_fraction is 0)
    manifest.json                 shards, counts, tokenizer hash, split, source, package version

Each split is one stream `doc <eod> doc <eod> ...` in corpus order; shards are consecutive pieces of
it (a document may continue into the next shard). A shard is a 64-byte little-endian header followed
by the tokens, so `numpy.memmap` reads it without copying:

    offset  size  field
    0       8     magic b"BRLMSHRD"
    8       4     format version (uint32, 1)
    12      4     bytes per token (uint32: 2 for uint16, 4 for uint32)
    16      8     token count (uint64)
    24      32    sha256 of tokenizer.json (raw digest)
    56      8     zero

Validation documents are chosen by text, not by token: exactly max(1, round(n * val_fraction)) of
the n distinct document texts (in order of first appearance), drawn without replacement from
`numpy.random.default_rng(seed)`, and every copy of a text follows it, so no text is both held out
and trained on (a repeated paragraph, a file that quotes another): `choose_validation`. A corpus
without repeats gets exactly the documents a draw over its n documents gives.

Each shard's manifest entry records its largest token id (`max_token`), so a reader checks every id
against the vocabulary when it opens the corpus, without reading the tokens, and the sha256 of its
token bytes (everything after the header; `sha256`), which the loader verifies the first time a
process opens the shard (`biosrecall.lm.loader`), so a shard damaged after prepare is found before
training rather than in the windows a run happens to read. `load_manifest`
(`biosrecall.lm.shard_manifest`) checks every field a reader uses and names the first bad one.

    result = prepare_corpus(Corpus(["books/"]), "data/lm-books", vocab_size=8192, seed=0)
    header, tokens = read_shard("data/lm-books/train-00000.bin")
"""

from __future__ import annotations

import hashlib
import struct
import time
from dataclasses import dataclass
from itertools import islice, zip_longest
from pathlib import Path

import numpy as np

from biosrecall import __version__
from biosrecall.atomic import (
    OutputRecord,
    atomic_directory,
    atomic_write_json,
    check_output_dir,
    check_output_path,
)
from biosrecall.errors import BiosrecallError
from biosrecall.files import require_regular_file
from biosrecall.lm.corpus import Corpus
from biosrecall.lm.shard_manifest import FORMAT_VERSION, MANIFEST_FORMAT, SPLITS
from biosrecall.lm.tokenizer import (
    LMTokenizer,
    check_vocab_size,
    load_tokenizer,
    token_dtype,
    train_tokenizer,
)
from biosrecall.locking import output_lock
from biosrecall.numbers import check_count, check_number, rates
from biosrecall.sizing import check_fits, shards_cost

MAGIC = b"BRLMSHRD"
HEADER = struct.Struct("<8sIIQ32s8x")
HEADER_BYTES = HEADER.size  # 64, so the tokens start aligned
DEFAULT_SHARD_TOKENS = 2**27  # 256 MiB of uint16 per shard
DEFAULT_VOCAB_SIZE = 8192
VAL_FRACTION = rates(0.0, 1.0, high_open=True)  # the share of documents held out: [0, 1)
# What marks a folder as prepared shards: the only kind `lm prepare --overwrite` replaces.
RECORD = OutputRecord("lm prepare", "manifest.json", "format", MANIFEST_FORMAT)
_ENCODE_BATCH = 512  # documents per encode call: large enough to use every core, small in memory
_ENCODE_BATCH_CHARS = 1 << 26  # ... and at most this many characters, however long the documents


@dataclass(frozen=True)
class ShardHeader:
    version: int
    dtype: str  # "<u2" or "<u4"
    tokens: int
    tokenizer_sha256: str  # hex


def _pack_header(dtype: str, tokens: int, tokenizer_sha256: str) -> bytes:
    return HEADER.pack(
        MAGIC, FORMAT_VERSION, np.dtype(dtype).itemsize, tokens, bytes.fromhex(tokenizer_sha256)
    )


def read_shard_header(path: str | Path) -> ShardHeader:
    """Parse and check a shard's header, including that the file size matches the token count."""
    path = require_regular_file(path, "shard")  # opening a FIFO would block
    try:
        with open(path, "rb") as handle:
            raw = handle.read(HEADER_BYTES)
        size = path.stat().st_size
    except OSError as exc:
        raise BiosrecallError(f"cannot read shard {path}: {exc.strerror}") from exc
    # A short file is unpacked zero-padded only to be refused by the first check.
    _, version, itemsize, tokens, digest = HEADER.unpack(raw.ljust(HEADER_BYTES, b"\0"))
    if len(raw) < HEADER_BYTES or raw[:8] != MAGIC:
        problem = "is not a biosrecall token shard (bad header)"
    elif version != FORMAT_VERSION:
        problem = f"has format version {version}; this package reads {FORMAT_VERSION}"
    elif itemsize not in (2, 4):
        problem = f"declares {itemsize} bytes per token (expected 2 or 4)"
    elif size != HEADER_BYTES + tokens * itemsize:
        problem = f"is truncated or padded: {size} bytes for {tokens} tokens"
    else:
        return ShardHeader(version, f"<u{itemsize}", tokens, digest.hex())
    raise BiosrecallError(f"shard {path} {problem}")


def read_shard(path: str | Path) -> tuple[ShardHeader, np.ndarray]:
    """The header and a read-only memmap of the tokens (an empty array for an empty shard)."""
    header = read_shard_header(path)
    if header.tokens == 0:
        return header, np.zeros(0, dtype=header.dtype)
    tokens = np.memmap(path, dtype=header.dtype, mode="r", offset=HEADER_BYTES, shape=(header.tokens,))
    return header, tokens


class ShardWriter:
    """Append token arrays to `<prefix>-00000.bin`, `-00001.bin`, ... of at most `shard_tokens` each.

    Each shard's header is written first with a zero count and rewritten when the shard is closed.
    """

    def __init__(
        self, folder: Path, prefix: str, dtype: str, tokenizer_sha256: str, shard_tokens: int
    ) -> None:
        self.folder, self.prefix, self.dtype = folder, prefix, dtype
        self.tokenizer_sha256, self.shard_tokens = tokenizer_sha256, shard_tokens
        self.shards: list[dict] = []
        self._handle = None
        self._count = 0
        self._digest = hashlib.sha256()

    def add(self, tokens: np.ndarray) -> None:
        tokens = tokens.astype(self.dtype, copy=False)
        while tokens.size:
            if self._handle is None:
                name = f"{self.prefix}-{len(self.shards):05d}.bin"
                self._handle = open(self.folder / name, "wb")  # noqa: SIM115 (closed in _finish_shard)
                self._handle.write(_pack_header(self.dtype, 0, self.tokenizer_sha256))
                self.shards.append({"file": name, "tokens": 0})
            take = min(tokens.size, self.shard_tokens - self._count)
            data = tokens[:take].tobytes()
            self._handle.write(data)
            self._digest.update(data)
            entry = self.shards[-1]
            entry["max_token"] = max(entry.get("max_token", 0), int(tokens[:take].max()))
            self._count += take
            tokens = tokens[take:]
            if self._count == self.shard_tokens:
                self._finish_shard()

    def _finish_shard(self) -> None:
        self._handle.seek(0)
        self._handle.write(_pack_header(self.dtype, self._count, self.tokenizer_sha256))
        self._handle.close()
        self.shards[-1].update(tokens=self._count, sha256=self._digest.hexdigest())
        self._handle, self._count, self._digest = None, 0, hashlib.sha256()

    def close(self) -> list[dict]:
        """Finish the open shard; returns `[{"file", "tokens", "max_token", "sha256"}, ...]` for the
        manifest."""
        if self._handle is not None:
            self._finish_shard()
        return self.shards


def choose_validation(fingerprints: np.ndarray, val_fraction: float, seed: int) -> np.ndarray:
    """A bool mask over documents, True for the held-out ones: a draw over the distinct texts (by
    fingerprint, `Corpus.fingerprints`, in order of first appearance), each copy following its text
    (see the module docstring)."""
    _, first, text_of = np.unique(fingerprints, return_index=True, return_inverse=True)
    rank = np.argsort(np.argsort(first))  # each text's number in order of first appearance
    texts = len(first)
    held = np.zeros(texts, dtype=bool)
    if val_fraction > 0.0:
        held_out = max(1, round(texts * val_fraction))
        if held_out >= texts:
            raise BiosrecallError(
                f"the corpus has {texts} distinct document(s): too few to hold out a validation split "
                f"(fraction {val_fraction}) and keep training documents"
            )
        held[np.random.default_rng(seed).choice(texts, size=held_out, replace=False)] = True
    return held[rank[text_of.reshape(-1)]]


@dataclass(frozen=True)
class PrepareResult:
    path: Path
    manifest: dict
    tokens: int  # train + validation tokens written
    seconds: float  # wall time of the whole prepare (reading, tokenizer training, encoding, writing)
    encode_seconds: float  # wall time of the encode-and-write pass alone


def prepare_corpus(
    corpus: Corpus,
    out_dir: str | Path,
    *,
    tokenizer: LMTokenizer | str | Path | None = None,
    vocab_size: int | None = None,
    val_fraction: float = 0.01,
    seed: int = 0,
    shard_tokens: int = DEFAULT_SHARD_TOKENS,
    tokenizer_documents: int | None = None,
    overwrite: bool = False,
) -> PrepareResult:
    """Tokenize `corpus` into a shard folder at `out_dir`, built atomically (all or nothing).

    `tokenizer` is an `LMTokenizer` or the path of a tokenizer.json; without one, a byte-level BPE of
    `vocab_size` (default `DEFAULT_VOCAB_SIZE`) is trained on the training documents (the first
    `tokenizer_documents` of them, when given). Same inputs and arguments give byte-identical output.
    The output may not be, hold or lie inside an input (the tokenizer file included), and is locked
    for the whole call.
    """
    if tokenizer is not None and vocab_size is not None:
        raise BiosrecallError("give either --tokenizer or --vocab-size, not both")
    check_count(shard_tokens, "shard_tokens")
    check_number("validation fraction", val_fraction, VAL_FRACTION)  # before the counting pass
    if tokenizer is None:
        vocab_size = DEFAULT_VOCAB_SIZE if vocab_size is None else vocab_size
        check_vocab_size(vocab_size)  # before the (possibly long) counting pass
    tokenizer_file = tokenizer if isinstance(tokenizer, str | Path) else None
    out_dir = check_output_path(out_dir, [*corpus.local_inputs, tokenizer_file])
    if tokenizer_file is not None:
        tokenizer = load_tokenizer(tokenizer_file)
    _check_size(corpus, out_dir, tokenizer.vocab_size if tokenizer is not None else vocab_size)
    with output_lock(out_dir):
        check_output_dir(out_dir, overwrite, RECORD)
        start = time.perf_counter()
        fingerprints = corpus.fingerprints()  # the counting pass, hashing each document on the way
        if len(fingerprints) == 0:
            raise BiosrecallError("the corpus is empty: no non-empty documents in the inputs")
        is_val = choose_validation(fingerprints, val_fraction, seed)
        given = tokenizer is not None
        with atomic_directory(out_dir, overwrite=overwrite, record=RECORD) as tmp:
            if tokenizer is None:  # validation documents stay unseen by it, so validation NLL is held out
                training = (doc for doc, held in zip(corpus, is_val, strict=False) if not held)
                tokenizer = train_tokenizer(islice(training, tokenizer_documents), vocab_size)
            tokenizer.save(tmp / "tokenizer.json")
            encode_start = time.perf_counter()
            splits = _encode_splits(corpus, is_val, tokenizer, tmp, shard_tokens)
            encode_seconds = time.perf_counter() - encode_start
            trained_on = "given" if given else (tokenizer_documents or "all training documents")
            manifest = _manifest(corpus, tokenizer, splits, val_fraction, seed, shard_tokens, trained_on)
            atomic_write_json(tmp / "manifest.json", manifest)
    total = sum(split["tokens"] for split in splits.values())
    return PrepareResult(out_dir, manifest, total, time.perf_counter() - start, encode_seconds)


def _check_size(corpus: Corpus, out_dir: Path, vocab_size: int) -> None:
    """Refuse, before anything is read or written, shards of the local inputs that would not fit the
    disk (`biosrecall.sizing.shards_cost`: the typical size; a Hub dataset's size is not known, nor
    how much of a file the first `max_documents` documents take)."""

    if corpus.max_documents is not None:
        return
    input_bytes = sum(source.file.stat().st_size for source in corpus.sources if source.file is not None)
    typical, _ = shards_cost(input_bytes, np.dtype(token_dtype(vocab_size)).itemsize)
    check_fits(
        f"the shards of {input_bytes / 1e6:,.0f} MB of text", typical, out_dir, "prepare fewer documents"
    )


def _encode_splits(
    corpus: Corpus, is_val: np.ndarray, tokenizer: LMTokenizer, folder: Path, shard_tokens: int
):
    dtype = token_dtype(tokenizer.vocab_size)
    writers = {name: ShardWriter(folder, name, dtype, tokenizer.sha256, shard_tokens) for name in SPLITS}
    documents = dict.fromkeys(SPLITS, 0)
    batch: list[tuple[str, bool]] = []
    chars = 0
    for doc, held in zip_longest(corpus, is_val):
        if doc is None or held is None:  # more or fewer documents than the counting pass saw
            raise BiosrecallError("the corpus changed while it was being read (document count differs)")
        batch.append((doc, held))
        chars += len(doc)
        if len(batch) == _ENCODE_BATCH or chars >= _ENCODE_BATCH_CHARS:
            _write_batch(batch, tokenizer, writers, documents)
            batch, chars = [], 0
    _write_batch(batch, tokenizer, writers, documents)
    splits = {}
    for name in SPLITS:
        shards = writers[name].close()
        splits[name] = {
            "documents": documents[name],
            "shards": shards,
            "tokens": sum(s["tokens"] for s in shards),
        }
    return splits


def _write_batch(batch: list[tuple[str, bool]], tokenizer: LMTokenizer, writers, documents) -> None:
    """Encode a batch of (document, held out) and append each document plus EOD to its split, keeping
    corpus order per split."""
    if not batch:
        return
    encoded = tokenizer.encode_batch([doc for doc, _ in batch])
    for name, wanted in (("train", False), ("validation", True)):
        ids: list[int] = []
        for doc_ids, (_, held) in zip(encoded, batch, strict=True):
            if held == wanted:
                ids.extend(doc_ids)
                ids.append(tokenizer.eod_id)
                documents[name] += 1
        if ids:
            writers[name].add(np.asarray(ids, dtype=np.int64))


def _manifest(corpus, tokenizer, splits, val_fraction, seed, shard_tokens, trained_on) -> dict:
    return {
        "format": MANIFEST_FORMAT,
        "format_version": FORMAT_VERSION,
        "package_version": __version__,
        "dtype": token_dtype(tokenizer.vocab_size),
        "shard_tokens": shard_tokens,
        "tokenizer": {
            "file": "tokenizer.json",
            "sha256": tokenizer.sha256,
            "vocab_size": tokenizer.vocab_size,
            "eod_token": tokenizer.eod_token,
            "eod_id": tokenizer.eod_id,
            "trained_on": trained_on,  # "given" (loaded from a file), a document count, or all
        },
        "split": {"val_fraction": val_fraction, "seed": seed, "unit": "document"},
        "splits": splits,
        "source": corpus.describe(),
    }
