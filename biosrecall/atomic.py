"""Crash-safe writes: every output goes to a temporary name in the same folder and is renamed at the end.

A rename within one file system is atomic, so a reader (or a resumed run) sees either the old file
or the complete new one, never a half-written file. Folders are built the same way.

    atomic_write_json(path, obj)
    with atomic_directory(out_dir, overwrite=False) as tmp:   # fill tmp; renamed to out_dir on success
        ...
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from biosrecall.errors import BiosrecallError


def _default_mode(directory: bool) -> int:
    """The permissions a plain open()/mkdir() would give under the current umask (mkstemp gives 0600)."""
    umask = os.umask(0)
    os.umask(umask)
    return (0o777 if directory else 0o666) & ~umask


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Write `data` to `path` through a temporary file in the same folder, fsync, then rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.chmod(tmp, _default_mode(directory=False))
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path: str | Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | Path, obj: object) -> None:
    """JSON with sorted keys and a trailing newline, so identical content gives identical bytes."""
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True) + "\n")


@contextmanager
def atomic_write_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path for a library that writes files itself (parquet, safetensors, savefig)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=f".tmp{path.suffix}", dir=path.parent)
    os.close(fd)
    os.chmod(tmp, _default_mode(directory=False))
    try:
        yield Path(tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def check_output_dir(path: str | Path, overwrite: bool) -> Path:
    """Refuse a non-empty existing folder unless `overwrite`; refuse a path that is a file."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise BiosrecallError(f"output path {path} exists and is not a folder")
    if path.is_dir() and any(path.iterdir()) and not overwrite:
        raise BiosrecallError(f"output folder {path} is not empty (pass --overwrite to replace it)")
    parent = path.parent if path.parent != Path("") else Path(".")
    probe = parent
    while not probe.exists():
        probe = probe.parent
    if not os.access(probe, os.W_OK):
        raise BiosrecallError(f"output folder {path} is not writable")
    return path


@contextmanager
def atomic_directory(path: str | Path, overwrite: bool = False) -> Iterator[Path]:
    """Build a folder under a temporary sibling name and swap it into place only when the block succeeds.

    With `overwrite`, an existing folder is replaced only after the new one is complete.
    """
    path = check_output_dir(path, overwrite)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    tmp.chmod(_default_mode(directory=True))  # mkdtemp makes 0700
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    old = None
    if path.exists():
        old = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".old", dir=path.parent))
        os.replace(path, old / "x")
    os.replace(tmp, path)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
