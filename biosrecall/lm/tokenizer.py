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
depends only on the texts (and their order), never on a random state.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from biosrecall.errors import BiosrecallError

EOD_TOKEN = "<|endoftext|>"
# Names a given tokenizer.json may use for its end-of-document token, tried in this order.
EOD_CANDIDATES = (EOD_TOKEN, "<|end_of_text|>", "</s>", "<eos>", "[EOS]")
# 256 byte symbols plus the EOD token, plus a little room so that at least a few merges are learned.
MIN_VOCAB_SIZE = 260
MAX_VOCAB_SIZE = 2**32 - 1


class LMTokenizer:
    """A `tokenizers.Tokenizer` with its end-of-document id and the hash of its serialized form.

    Build one with `train_tokenizer` or `load_tokenizer`; `json_text` is exactly what `save` writes,
    so `sha256` is the hash of the saved file.
    """

    def __init__(self, tokenizer: Tokenizer, json_text: str, eod_token: str) -> None:
        eod_id = tokenizer.token_to_id(eod_token)
        if eod_id is None:
            raise BiosrecallError(f"tokenizer has no token {eod_token!r}")
        self.tokenizer = tokenizer
        self.json_text = json_text
        self.eod_token = eod_token
        self.eod_id = int(eod_id)
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
        from biosrecall.atomic import atomic_write_text

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
    tokenizer.train_from_iterator(texts, trainer=trainer)
    return LMTokenizer(tokenizer, tokenizer.to_str(), EOD_TOKEN)


def load_tokenizer(path: str | Path) -> LMTokenizer:
    """Read a `tokenizer.json`; its end-of-document token is the first of `EOD_CANDIDATES` it holds."""
    path = Path(path)
    try:
        json_text = path.read_bytes().decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise BiosrecallError(f"cannot read tokenizer {path}: {exc}") from exc
    try:
        tokenizer = Tokenizer.from_str(json_text)
    except Exception as exc:  # the Rust side raises a plain Exception for any malformed file
        raise BiosrecallError(f"{path} is not a valid tokenizer.json: {exc}") from exc
    for candidate in EOD_CANDIDATES:
        if tokenizer.token_to_id(candidate) is not None:
            return LMTokenizer(tokenizer, json_text, candidate)
    raise BiosrecallError(
        f"tokenizer {path} has no end-of-document token (expected one of {', '.join(EOD_CANDIDATES)})"
    )


def token_dtype(vocab_size: int) -> str:
    """The smallest little-endian unsigned dtype that holds every id of the vocabulary."""
    return "<u2" if vocab_size <= 2**16 else "<u4"
