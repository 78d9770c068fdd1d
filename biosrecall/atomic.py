"""Crash-safe writes: every output goes to a temporary name in the same folder and is renamed at the end.

A rename within one file system is atomic, so a reader (or a resumed run) sees either the old file
or the complete new one, never a half-written file. Folders are built the same way, and replacing a
folder (`overwrite`) is a swap: the old one is moved aside only once the new one is complete, put back
if the swap fails, and deleted last.

`check_output_path` guards the other way round: an output may not be the working folder or one of its
ancestors, nor an input, nor contain an input, nor lie inside one (compared after resolving symlinks
and `..`), so `--overwrite` can never swap away what the command reads.

    atomic_write_json(path, obj)
    check_output_path(out_dir, inputs=[corpus_dir, tokenizer_file])
    with output_lock(out_dir):                                  # biosrecall.locking: one writer per output
        with atomic_directory(out_dir, overwrite=False) as tmp:  # fill tmp; renamed to out_dir on success
            ...
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from biosrecall.errors import BiosrecallError
from biosrecall.locking import ASIDE_ENTRY, ASIDE_SUFFIX, TEMPORARY_SUFFIX, temporary_prefix


def _default_mode(directory: bool) -> int:
    """The permissions a plain open()/mkdir() would give under the current umask (mkstemp gives 0600)."""
    umask = os.umask(0)
    os.umask(umask)
    return (0o777 if directory else 0o666) & ~umask


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Write `data` to `path` through a temporary file in the same folder, fsync, then rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=temporary_prefix(path), suffix=TEMPORARY_SUFFIX, dir=path.parent)
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


def _refuse_working_folder(path: Path) -> Path:
    """`path` resolved (symlinks and `..`); refused when it is the working folder or an ancestor of it."""
    resolved = path.resolve()
    try:
        cwd = Path.cwd().resolve()
    except OSError:  # the working folder was deleted: nothing can be replaced by it
        return resolved
    if _is_within(cwd, resolved):
        raise BiosrecallError(
            f"output {path} is the working folder or one of its parents; name a new folder instead"
        )
    return resolved


def _is_within(inner: Path, outer: Path) -> bool:
    return inner == outer or outer in inner.parents


def check_output_path(out: str | Path, inputs: Iterable[str | Path | None] = ()) -> Path:
    """Refuse an output that would replace the working folder, an input, or a folder holding one.

    The output may not resolve to the working folder or an ancestor of it, nor be an input, contain
    one, or lie inside one (symlinks and `..` resolved first), and it may not sit below a file.
    `None` inputs are skipped. Returns `out` as a Path.
    """
    out = Path(out)
    resolved = _refuse_working_folder(out)
    ancestor = resolved.parent
    while not ancestor.exists():
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise BiosrecallError(f"cannot create output folder {out}: {ancestor} is a file")
    for item in inputs:
        if item is None:
            continue
        source = Path(item).resolve()
        if _is_within(source, resolved):
            relation = "is" if source == resolved else "contains"
            raise BiosrecallError(f"output {out} {relation} the input {item}; choose another output path")
        if _is_within(resolved, source):
            raise BiosrecallError(f"output {out} lies inside the input {item}; choose another output path")
    return out


def _swap_target(path: Path) -> Path:
    """Where the finished folder goes: `path` with `.`/`..` resolved, so temporaries get a real name."""
    _refuse_working_folder(path)
    if path.name in ("", ".", ".."):
        return path.resolve()
    return path


@contextmanager
def atomic_directory(path: str | Path, overwrite: bool = False) -> Iterator[Path]:
    """Build a folder under a temporary sibling name and swap it into place only when the block succeeds.

    With `overwrite`, an existing folder is replaced only after the new one is complete, and restored
    if the swap fails. Without it, an output that appeared meanwhile is never replaced.
    """
    path = _swap_target(check_output_dir(path, overwrite))
    path.parent.mkdir(parents=True, exist_ok=True)
    prefix = temporary_prefix(path)
    tmp = Path(tempfile.mkdtemp(prefix=prefix, suffix=TEMPORARY_SUFFIX, dir=path.parent))
    tmp.chmod(_default_mode(directory=True))  # mkdtemp makes 0700
    try:
        yield tmp
        _swap_in(tmp, path, overwrite)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _swap_in(tmp: Path, path: Path, overwrite: bool) -> None:
    """Rename `tmp` to `path`; an existing `path` (with `overwrite`) is moved aside first, put back on
    failure, and deleted once the new folder is in place."""
    aside = None
    try:
        if overwrite and os.path.lexists(path):
            prefix = temporary_prefix(path)
            aside = Path(tempfile.mkdtemp(prefix=prefix, suffix=ASIDE_SUFFIX, dir=path.parent))
            os.replace(path, aside / ASIDE_ENTRY)
        os.replace(tmp, path)
    except BaseException as exc:
        if aside is not None and os.path.lexists(aside / ASIDE_ENTRY) and not os.path.lexists(path):
            os.replace(aside / ASIDE_ENTRY, path)
        if aside is not None:
            shutil.rmtree(aside, ignore_errors=True)
        if isinstance(exc, OSError) and not overwrite and os.path.lexists(path):
            raise BiosrecallError(
                f"output {path} appeared while it was being written; it was left as it is"
            ) from None
        raise
    if aside is not None:
        shutil.rmtree(aside, ignore_errors=True)
