"""Training sequences from a prepared shard folder: shuffled per epoch, exactly resumable.

A split's shards form one token stream of N tokens. With context length T the stream is cut into
W = (N - 1) // T windows; window w is tokens [w*T, w*T + T + 1), so neighbouring windows share one
token and every token after the first is a target exactly once (inputs `row[:, :-1]`, targets
`row[:, 1:]`). Windows may span shard boundaries.

Each epoch, a generator seeded by (seed, epoch) permutes the W windows. The state is (epoch, position
in that order). Under data parallelism every rank reads the same stream and keeps its own rows of
each batch (`biosrecall.lm.task`), so the batches do not depend on the world size.

Opening a split checks every token id against the vocabulary before any training starts, from the
largest id each shard's manifest entry records. The first time a process opens a shard it also
verifies the shard's bytes against the sha256 `lm prepare` recorded (one sequential read; see
benchmarks/bench_data.py for its cost), so a shard damaged after prepare is one line naming it and
the command that prepares the folder again, before any update; `set_verification(False)` (the
`--no-verify` of `lm train` and `lm eval`) skips it. Folders prepared before checksums were recorded
still load: their ids are scanned instead (the same one read), which finds the damage that would
break a model, an id outside the vocabulary; re-preparing a large corpus can take hours, so they stay
usable. Every window read is checked again, so a shard changed while a run reads it is still one
clear error rather than an IndexError in the model.

    loader = ShardLoader("data/lm", context_length=1024, seed=0, tokenizer="data/lm/tokenizer.json")
    rows = loader.batch(8)                        # int64 [8, 1025]
    state = loader.state_dict()                   # save with the checkpoint ...
    loader.load_state_dict(state)                 # ... and the next batch is the one that would follow
    for rows in validation_batches("data/lm", 1024, batch_size=8): ...
    set_verification(False)                       # trust the shards' bytes (this process, from now on)
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from biosrecall.errors import BiosrecallError
from biosrecall.lm.shard_manifest import load_manifest, reprepare_command
from biosrecall.lm.shards import read_shard
from biosrecall.lm.tokenizer import LMTokenizer, load_tokenizer
from biosrecall.numbers import check_count, check_seed

STATE_VERSION = 1
# State fields that must match for a resume to continue the same sequence of batches.
_IDENTITY = ("split", "context_length", "seed", "num_windows", "data_sha256")
# Whether shards are verified when first opened, and the (file, recorded sha256) pairs this process has
# verified: a loader per evaluation pass, or per rank in one process, reads each shard once only.
_VERIFY = {"enabled": True}
_VERIFIED: set[tuple[str, str | None]] = set()


def set_verification(enabled: bool) -> None:
    """Verify (the default) or trust the bytes of the shards this process opens from now on."""
    _VERIFY["enabled"] = bool(enabled)


class ShardLoader:
    """Sequences of `context_length + 1` tokens from one split (train or validation) of a prepared folder.

    `tokenizer` (a path to tokenizer.json or an `LMTokenizer`) is the tokenizer the model will use;
    every shard header must carry its hash. Without it, shards are checked against the manifest.
    """

    def __init__(
        self,
        data_dir: str | Path,
        context_length: int,
        *,
        split: str = "train",
        seed: int = 0,
        tokenizer: str | Path | LMTokenizer | None = None,
    ) -> None:
        self.split, self.context_length = split, check_count(context_length, "context length")
        self.seed = check_seed(seed)
        self.data_dir = Path(data_dir)
        self.manifest = load_manifest(self.data_dir)
        self.vocab_size = self.manifest["tokenizer"]["vocab_size"]  # an int: `load_manifest` checked it
        self.data_sha256 = hashlib.sha256((self.data_dir / "manifest.json").read_bytes()).hexdigest()
        self._shards = _open_split(
            self.data_dir, self.manifest, split, _tokenizer_hash(tokenizer, self.manifest)
        )
        lengths = np.array([len(s) for s in self._shards], dtype=np.int64)
        self._ends = np.cumsum(lengths)
        self._starts = self._ends - lengths
        self.tokens = int(self._ends[-1]) if len(lengths) else 0
        self.num_windows = max(0, (self.tokens - 1) // context_length)
        if self.num_windows == 0:
            raise BiosrecallError(
                f"context length {context_length} needs {context_length + 1} tokens per sequence, but the "
                f"{split} split of {self.data_dir} holds only {self.tokens}"
            )
        self.epoch, self.position = 0, 0
        self._order_epoch, self._order = -1, np.zeros(0, dtype=np.int64)

    def epoch_windows(self, epoch: int) -> np.ndarray:
        """The window indices of `epoch`, in the order they are read."""
        if epoch != self._order_epoch:
            permutation = np.random.default_rng((self.seed, epoch)).permutation(self.num_windows)
            self._order_epoch, self._order = epoch, permutation
        return self._order

    def read_window(self, window: int) -> np.ndarray:
        """Tokens [window*T, window*T + T + 1) of the stream, as int64 (`window` in 0..num_windows-1)."""
        out = np.empty(self.context_length + 1, dtype=np.int64)
        start, filled = window * self.context_length, 0
        shard = int(np.searchsorted(self._ends, start, side="right"))
        while filled < out.size:
            offset = start + filled - int(self._starts[shard])
            piece = self._shards[shard][offset : offset + out.size - filled]
            out[filled : filled + piece.size] = piece
            filled += piece.size
            shard += 1
        if out.max() >= self.vocab_size:
            raise BiosrecallError(
                f"the {self.split} split of {self.data_dir} holds token id {int(out.max())} (window "
                f"{window}), outside the vocabulary of {self.vocab_size}: a shard was changed after prepare"
            )
        return out

    def batch(self, batch_size: int) -> np.ndarray:
        """The next `batch_size` sequences, int64 [batch_size, context_length + 1]; moves to the
        next epoch (a fresh permutation) whenever the current one is used up."""
        rows = np.empty((batch_size, self.context_length + 1), dtype=np.int64)
        for row in range(batch_size):
            if self.position == self.num_windows:
                self.epoch, self.position = self.epoch + 1, 0
            rows[row] = self.read_window(int(self.epoch_windows(self.epoch)[self.position]))
            self.position += 1
        return rows

    def ordered_batches(self, batch_size: int, max_windows: int | None = None) -> Iterator[np.ndarray]:
        """Every window (or the first `max_windows`) in stream order, in batches (the last may be
        shorter). Does not touch the training state."""
        total = self.num_windows if max_windows is None else min(max_windows, self.num_windows)
        for first in range(0, total, batch_size):
            yield np.stack([self.read_window(w) for w in range(first, min(first + batch_size, total))])

    def state_dict(self) -> dict:
        identity = {key: getattr(self, key) for key in _IDENTITY}
        return {"version": STATE_VERSION, **identity, "epoch": self.epoch, "position": self.position}

    def load_state_dict(self, state: dict) -> None:
        """Resume at `state`; refuses a state of another format version, or from other data, context or
        seed (the state of an earlier release, which also recorded a rank and world size, resumes too)."""
        ours = self.state_dict()
        for key in ("version", *_IDENTITY):
            found = state.get(key) if isinstance(state, dict) else None
            if found != ours[key]:
                raise BiosrecallError(
                    f"cannot resume the data loader: its state has {key}={found!r}, this run has {ours[key]!r}"
                )
        self.epoch, self.position = int(state["epoch"]), int(state["position"])


def validation_batches(
    data_dir: str | Path, context_length: int, batch_size: int, *, max_windows: int | None = None
) -> Iterator[np.ndarray]:
    """The validation split in a fixed order (see `ShardLoader.ordered_batches`)."""
    loader = ShardLoader(data_dir, context_length, split="validation")
    return loader.ordered_batches(batch_size, max_windows)


def _tokenizer_hash(tokenizer: str | Path | LMTokenizer | None, manifest: dict) -> str:
    """The hash every shard must carry: the given tokenizer's, or else the manifest's."""
    if tokenizer is None:
        return manifest["tokenizer"]["sha256"]
    given = tokenizer if isinstance(tokenizer, LMTokenizer) else load_tokenizer(tokenizer)
    return given.sha256


def _open_split(data_dir: Path, manifest: dict, split: str, expected_sha256: str) -> list[np.ndarray]:
    """Memmap every shard of `split`, checking headers against the manifest and the tokenizer hash
    (each shard's header names the tokenizer it was written with)."""
    shards = []
    for entry in manifest["splits"][split]["shards"]:
        header, tokens = read_shard(data_dir / entry["file"])
        if header.tokenizer_sha256 != expected_sha256:
            raise BiosrecallError(
                f"shard {data_dir / entry['file']} was written with tokenizer {header.tokenizer_sha256[:12]}..., "
                f"not {expected_sha256[:12]}...: tokenizer and shards do not match"
            )
        _check_shard(data_dir, manifest, entry, tokens)
        shards.append(tokens)
    return shards


def _check_shard(data_dir: Path, manifest: dict, entry: dict, tokens: np.ndarray) -> None:
    """The shard (as its header reads it) agrees with its manifest entry, its bytes match its recorded
    sha256 (first open in this process, unless verification is off), and every id lies in the
    vocabulary: from its recorded largest id, or a scan when there is no checksum to vouch for that id
    or no id recorded (see the module docstring)."""
    path, expected = data_dir / entry["file"], entry.get("sha256")
    key = (str(path.resolve()), expected)
    verify = _VERIFY["enabled"] and key not in _VERIFIED
    largest, vocab_size = entry.get("max_token"), manifest["tokenizer"]["vocab_size"]
    if largest is None or (verify and expected is None):
        largest = int(tokens.max()) if tokens.size else 0
    problem = None
    if tokens.size != entry["tokens"] or tokens.dtype != manifest["dtype"]:
        problem = f"does not match {data_dir / 'manifest.json'} (token count or dtype)"
    elif verify and expected is not None and hashlib.sha256(tokens).hexdigest() != expected:
        problem = f"is damaged: its bytes do not match the sha256 in {data_dir / 'manifest.json'}"
    elif largest >= vocab_size:
        problem = (
            f"holds token id {largest}, outside the vocabulary of {vocab_size} (damaged or prepared with "
            "another tokenizer)"
        )
    if problem is not None:  # whatever the damage, the folder is made again the way it was made
        raise BiosrecallError(
            f"shard {path} {problem}; prepare the folder again: {reprepare_command(data_dir, manifest)}"
        )
    if verify:
        _VERIFIED.add(key)
