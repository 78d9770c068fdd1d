"""Byte-level BPE tokenizers for the language-model pipeline: train one, or load a given `tokenizer.json`.

Every document is encoded without special tokens and followed by one end-of-document token (EOD),
so a token stream is `doc_1 <eod> doc_2 <eod> ...`. A tokenizer is identified by the sha256 of its
`tokenizer.json` bytes; shards record that hash, and the loader refuses shards made with another
tokenizer.

    tok = train_tokenizer(texts, vocab_size=8192)     # same texts -> byte-identical tokenizer.json
    tok.save("out/tokenizer.json")
    tok = load_tokenizer("out/tokenizer.json")         # tok.sha256 == sha256 of the file bytes
    ids = tok.encode("Hello world")                    # list[int], no EOD appended
    assert tok.decode(ids) == "Hello world"

Training takes no seed: BPE merges are chosen by pair counts with a fixed tie-break, so the result
depends only on the texts (and their order), never on a random state. BPE training time grows with
the square of a pre-token's length, so for training only, runs of more than `MAX_TRAINING_RUN`
characters without a break (a megabyte of "xxxx...") are fed to the trainer in pieces of that length;
encoding always sees the text as it is.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from biosrecall.atomic import atomic_write_text
from biosrecall.bios.tokenizer import read_tokenizer_text
from biosrecall.errors import BiosrecallError

EOD_TOKEN = "<|endoftext|>"
# Names a given tokenizer.json may use for its end-of-document token, tried in this order.
EOD_CANDIDATES = (EOD_TOKEN, "<|end_of_text|>", "</s>", "<eos>", "[EOS]")
# 256 byte symbols plus the EOD token, plus a little room so that at least a few merges are learned.
MIN_VOCAB_SIZE = 260
# The trainer reserves memory per requested entry up front (about 70 bytes each: 10^9 aborts the
# process), so the bound is set far above real vocabularies (at most a few 10^5) but well below that.
MAX_VOCAB_SIZE = 2**22
MAX_TOKENIZER_BYTES = 1 << 30  # real tokenizer.json files are tens of MiB
MAX_TRAINING_RUN = 256  # characters without whitespace (or of whitespace) the trainer sees at once
# One such run, captured so that splitting at it keeps it as a piece of its own.
_LONG_RUN = re.compile(rf"(\S{{{MAX_TRAINING_RUN}}}|\s{{{MAX_TRAINING_RUN}}})")


class LMTokenizer:
    """A `tokenizers.Tokenizer` with its end-of-document id and the hash of its serialized form.

    Build one with `train_tokenizer` or `load_tokenizer`; `json_text` is exactly what `save` writes,
    so `sha256` is the hash of the saved file.
    """

    def __init__(self, tokenizer: Tokenizer, json_text: str, eod_token: str) -> None:
        self.tokenizer = tokenizer
        self.json_text = json_text
        self.eod_token = eod_token
        self.eod_id = int(tokenizer.token_to_id(eod_token))  # both builders pick a token it holds
        self.sha256 = hashlib.sha256(json_text.encode("utf-8")).hexdigest()

    @property
    def vocab_size(self) -> int:
        return int(self.tokenizer.get_vocab_size(with_added_tokens=True))

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False).ids)

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """Encode many documents at once (the tokenizers library parallelises across them)."""
        encodings = self.tokenizer.encode_batch_fast(list(texts), add_special_tokens=False)
        return [encoding.ids for encoding in encodings]

    def decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=False)

    def save(self, path: str | Path) -> None:
        """Write `json_text` verbatim (through a temporary file), so the file hash equals `sha256`."""

        atomic_write_text(path, self.json_text)


def check_vocab_size(vocab_size: int) -> None:
    if not MIN_VOCAB_SIZE <= vocab_size <= MAX_VOCAB_SIZE:
        raise BiosrecallError(
            f"vocabulary size {vocab_size} is out of range (a byte-level BPE needs {MIN_VOCAB_SIZE}.."
            f"{MAX_VOCAB_SIZE})"
        )


def train_tokenizer(texts: Iterable[str], vocab_size: int) -> LMTokenizer:
    """Train a byte-level BPE with `vocab_size` entries (EOD included) on `texts`.

    The vocabulary can come out smaller than asked when the texts hold too few distinct pairs;
    `LMTokenizer.vocab_size` is the real size. No normalizer is used, so decoding returns the exact
    input text.
    """
    check_vocab_size(vocab_size)
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOD_TOKEN],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(_bounded_runs(texts), trainer=trainer)
    return LMTokenizer(tokenizer, tokenizer.to_str(), EOD_TOKEN)


def _bounded_runs(texts: Iterable[str]) -> Iterator[str]:
    """Each text, or its pieces when it holds an over-long run (see the module docstring)."""
    for text in texts:
        yield from (piece for piece in _LONG_RUN.split(text) if piece)


def load_tokenizer(path: str | Path) -> LMTokenizer:
    """Read a `tokenizer.json`; its end-of-document token is the first of `EOD_CANDIDATES` it holds.

    The file must be a regular file of at most `MAX_TOKENIZER_BYTES`, its ids exactly 0..N-1 (so
    every id fits the vocabulary the model is built with), and N within the vocabulary bounds.
    """
    tokenizer, json_text = read_tokenizer_text(path, MAX_TOKENIZER_BYTES)
    size = tokenizer.get_vocab_size(with_added_tokens=True)
    if size > MAX_VOCAB_SIZE:
        raise BiosrecallError(f"tokenizer {path} has {size} tokens, more than the {MAX_VOCAB_SIZE} allowed")
    eod = next((c for c in EOD_CANDIDATES if tokenizer.token_to_id(c) is not None), None)
    if eod is None:
        raise BiosrecallError(
            f"tokenizer {path} has no end-of-document token (expected one of {', '.join(EOD_CANDIDATES)})"
        )
    return LMTokenizer(tokenizer, json_text, eod)


def token_dtype(vocab_size: int) -> str:
    """The smallest little-endian unsigned dtype that holds every id of the vocabulary."""
    return "<u2" if vocab_size <= 2**16 else "<u4"
