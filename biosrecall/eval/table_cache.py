"""Tables cached inside a checkpoint folder, each stored with the key it was computed under.

    key = checkpoint_key(checkpoint, manifest_hash=..., max_depth=64, threshold=4, people=None)
    table = read_cached(recall_cache_file(checkpoint), key, by_depth=True)
    if table is None:
        table = ...                                # the expensive evaluation
        write_cached(recall_cache_file(checkpoint), key, table)

The key (JSON in the parquet metadata under "biosrecall") always holds the sha256 of the checkpoint's
meta.json, so a table never outlives the checkpoint it was computed from. A cached table is served
only when every key item is equal, except that with `by_depth` a table cached to a larger max_depth
serves a smaller one, cut to its depths (a recall table cached to depth 64 serves depth 16).

The cache needs only meta.json and the table, not the weights: a study copied without its weights
(`biosrecall figure1 --archive`) is re-tabulated, and extended by new seeds, from these files alone.
Both the recall curves (`biosrecall.eval.curves`) and the serving frontier
(`biosrecall.eval.serving`) keep theirs here.
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from biosrecall.atomic import DISK_FULL, WriteFailed, atomic_write_path
from biosrecall.train.checkpoint_files import META_FILE

METADATA_KEY = b"biosrecall"

log = logging.getLogger(__name__)


def checkpoint_key(checkpoint: Path, **items) -> dict:
    """`items` plus the sha256 of the checkpoint's meta.json (`meta_sha256`)."""
    return {**items, "meta_sha256": meta_digest(checkpoint)}


def meta_digest(checkpoint: Path) -> str:
    """The sha256 of the checkpoint's meta.json: what ties a cached table to its checkpoint."""
    return hashlib.sha256((Path(checkpoint) / META_FILE).read_bytes()).hexdigest()


def rekey_cached(path: Path, old_meta_sha256: str, new_meta_sha256: str) -> bool:
    """Tie the table cached at `path` to a rewritten meta.json of the same checkpoint (a study archive
    writes its recorded paths relative to the run): a key on `old_meta_sha256` is moved to
    `new_meta_sha256`, the table unchanged. False, and nothing written, for any other file."""
    key = read_key(path)
    if key is None or key.get("meta_sha256") != old_meta_sha256:
        return False
    with atomic_write_path(Path(path)) as tmp:
        pq.write_table(_with_key(pq.read_table(path), {**key, "meta_sha256": new_meta_sha256}), tmp)
    return True


def read_key(path: Path) -> dict | None:
    """The key a cached table was stored with, or None when absent or unreadable."""
    try:
        return json.loads(pq.read_schema(path).metadata[METADATA_KEY])
    except (OSError, KeyError, TypeError, ValueError, pa.ArrowException):
        return None


def read_cached(path: Path, key: dict, by_depth: bool = False) -> pd.DataFrame | None:
    """The table cached at `path` when its key matches `key`, else None (absent, unreadable, stale).
    With `by_depth`, a table (with a `depth` column) cached to a larger `max_depth` than the key's
    serves it, cut to the key's depths."""
    path = Path(path)
    stored = read_key(path) if path.is_file() else None
    if stored is None:
        return None
    deepest = stored.get("max_depth")
    if by_depth and not (isinstance(deepest, int | float) and deepest >= key["max_depth"]):
        return None
    if any(stored.get(k) != v for k, v in key.items() if not (by_depth and k == "max_depth")):
        return None
    try:
        table = pd.read_parquet(path)
    except (OSError, ValueError, pa.ArrowException):
        return None
    return table[table["depth"] <= key["max_depth"]].reset_index(drop=True) if by_depth else table


def write_cached(path: Path, key: dict, table: pd.DataFrame) -> None:
    """Keep the table with its key; a read-only run folder only costs a re-evaluation later.

    A full disk is an error naming the cache file, though: the results could not be written either,
    and finding out only after every other checkpoint was evaluated would waste that time."""
    arrow = _with_key(pa.Table.from_pandas(table, preserve_index=False), key)
    try:
        with atomic_write_path(Path(path)) as tmp:
            pq.write_table(arrow, tmp)
    except WriteFailed as exc:
        if exc.errno in DISK_FULL:
            raise
        log.warning("could not cache a table at %s: %s", path, exc)


def _with_key(arrow: pa.Table, key: dict) -> pa.Table:
    """The table with `key` stored in its schema metadata, beside what pandas keeps there."""
    metadata = {**(arrow.schema.metadata or {}), METADATA_KEY: json.dumps(key, sort_keys=True).encode()}
    return arrow.replace_schema_metadata(metadata)
