"""Data-path benchmark: how long `generate` takes for 100,000 people and how fast batches assemble,
and what verifying an LM shard's checksum adds to opening it.

Training must never wait for data, so batch assembly (64 rows x 256 tokens, whole biographies,
fresh templates and order) should reach at least 1,000,000 tokens/s on one CPU core.

The LM loader reads every shard once per process to check its sha256 (`--no-verify` skips it):
`shard_verify_ratio` is the first open of a split with verification over the same open without, for
one shard of 2^27 tokens (256 MiB, the default shard size; 2^24 with --quick), and
`shard_verify_gb_per_s` the verification speed.

    python benchmarks/bench_data.py            # full run (100,000 people)
    python benchmarks/bench_data.py --quick    # 10,000 people, fewer batches

`run(quick=False) -> dict` returns the measurements for the `make bench` aggregator.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from biosrecall.bios import BatchSampler, generate_dataset, load_dataset
from biosrecall.lm import loader
from biosrecall.lm.shards import DEFAULT_SHARD_TOKENS, ShardWriter

BATCH_SIZE = 64
SEQ_LEN = 256
TARGET_TOKENS_PER_S = 1_000_000


def _timed(function, *args, **kwargs):
    start = time.perf_counter()
    result = function(*args, **kwargs)
    return result, time.perf_counter() - start


def _batch_seconds(sampler: BatchSampler, batches: int, repeats: int) -> float:
    """Best-of-`repeats` time for `batches` batches (the machine is shared; the best run is the cost)."""
    rng = np.random.default_rng(0)
    for _ in range(5):
        sampler.batch(rng)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(batches):
            sampler.batch(rng)
        best = min(best, time.perf_counter() - start)
    return best / batches


def _shard_folder(folder: Path, tokens: int) -> None:
    """A prepared folder holding one training shard of `tokens` random ids (vocabulary 8192)."""
    folder.mkdir()
    digest = "0" * 64
    writer = ShardWriter(folder, "train", "<u2", digest, tokens)
    ids = np.random.default_rng(0).integers(0, 8192, size=tokens, dtype=np.uint16)
    writer.add(ids)
    shards = writer.close()
    split = {"documents": 1, "shards": shards, "tokens": tokens}
    manifest = {
        "format": "biosrecall-lm-shards", "format_version": 1, "dtype": "<u2", "shard_tokens": tokens,
        "tokenizer": {"vocab_size": 8192, "eod_id": 0, "sha256": digest},
        "splits": {"train": split, "validation": {"documents": 0, "shards": [], "tokens": 0}},
    }  # fmt: skip
    (folder / "manifest.json").write_text(json.dumps(manifest))


def _shard_verification(tokens: int, repeats: int) -> dict:
    """Best-of-`repeats` first open of a shard folder with and without the checksum (page cache warm:
    the bytes were just written, so this is the hashing cost, not the disk's)."""
    opened, verified = float("inf"), float("inf")
    with tempfile.TemporaryDirectory() as tmp:
        _shard_folder(Path(tmp) / "shards", tokens)
        for attempt in range(repeats):
            copy = Path(tmp) / f"copy{attempt}"  # a path this process has not verified yet
            shutil.copytree(Path(tmp) / "shards", copy)
            loader.set_verification(False)
            opened = min(opened, _timed(loader.ShardLoader, copy, 1024)[1])
            loader.set_verification(True)
            verified = min(verified, _timed(loader.ShardLoader, copy, 1024)[1])
            shutil.rmtree(copy)
    return {
        "shard_tokens": tokens,
        "shard_open_s": round(opened, 4),
        "shard_verified_open_s": round(verified, 4),
        "shard_verify_ratio": round(verified / opened, 1),
        "shard_verify_gb_per_s": round(tokens * 2 / 1e9 / max(verified - opened, 1e-9), 2),
    }


def run(quick: bool = False) -> dict:
    """Measure generate, load, batch assembly and eval-set building; returns a flat dict of numbers."""
    people = 10_000 if quick else 100_000
    batches, repeats = (50, 2) if quick else (300, 3)
    with tempfile.TemporaryDirectory() as tmp:
        path, generate_s = _timed(generate_dataset, Path(tmp) / "bios", people=people, seed=0)
        dataset, load_s = _timed(load_dataset, path)
        sampler = BatchSampler(dataset, BATCH_SIZE, SEQ_LEN)
        per_batch_s = _batch_seconds(sampler, batches, repeats)
        rows = sampler.batch(np.random.default_rng(1))
        evalset, eval_set_s = _timed(dataset.eval_set)
    tokens_per_s = BATCH_SIZE * SEQ_LEN / per_batch_s
    return {
        "people": people,
        "generate_s": round(generate_s, 3),
        "load_s": round(load_s, 3),
        "batch_shape": f"{BATCH_SIZE}x{SEQ_LEN + 1}",
        "batch_ms": round(per_batch_s * 1000, 3),
        "tokens_per_s": round(tokens_per_s),
        "target_tokens_per_s": TARGET_TOKENS_PER_S,
        "meets_target": tokens_per_s >= TARGET_TOKENS_PER_S,
        "non_pad_fraction": round(float((rows != dataset.pad_id).mean()), 3),
        "eval_rows": len(evalset),
        "eval_set_s": round(eval_set_s, 3),
        **_shard_verification(DEFAULT_SHARD_TOKENS >> (3 if quick else 0), repeats),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="10,000 people and fewer batches")
    results = run(quick=parser.parse_args().quick)
    width = max(len(key) for key in results)
    for key, value in results.items():
        print(f"{key:<{width}}  {value}")


if __name__ == "__main__":
    main()
