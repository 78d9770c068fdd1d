"""Crash-safe writes: every output goes to a temporary name in the same folder and is renamed at the end.

A rename within one file system is atomic, so a reader (or a resumed run) sees either the old file
or the complete new one, never a half-written file. Folders are built the same way, and replacing a
folder (`overwrite`) is a swap: the old one is moved aside only once the new one is complete, put back
if the swap fails, and deleted last.

**Only what is ours.** `--overwrite` replaces a non-empty folder only when the command's own record
marks it as that command's output (`OutputRecord`: a record file, optionally a JSON key it holds and
the only names the folder may hold); a folder of the user's own files is refused in one line and left
as it is. Every command and the study engines call the same function (`atomic_directory`), so one
rule holds for every command:

    with atomic_directory("recall-curve", overwrite=True, record=RECALL_CURVE_RECORD) as tmp:
        ...  # fill tmp, the record included; swapped in whole once complete

Outputs that are a set of files in a shared folder (a diagnosis's `STEM.*`) use `replace_files`: every
file is written complete under a staging folder first and only then renamed into place, so a full
disk leaves the previous set as it was.

`check_output_path` guards the other way round: an output may not be the working folder or one of its
ancestors, nor an input, nor contain an input, nor lie inside one (compared after resolving symlinks
and `..`), so `--overwrite` can never swap away what the command reads.

    atomic_write_json(path, obj)
    check_output_path(out_dir, inputs=[corpus_dir, tokenizer_file])
    with output_lock(out_dir):                                  # biosrecall.locking: one writer per output
        with atomic_directory(out_dir, overwrite=False) as tmp:  # fill tmp; renamed to out_dir on success
            ...

A file's temporary is locked (`fcntl.flock`) by its writer until it is renamed, so the temporaries a
killed writer left beside a file (`.<name>.XXXXXXXX.tmp`, `.<stem>.XXXXXXXX.tmp.<suffix>`) are the
ones nobody holds: the next write of the same file removes them (a SIGKILL while a figure is saved
leaves an empty `.figure1.XXXXXXXX.tmp.pdf`, and the next run that saves the figure takes it away).

A write that fails (disk full, file too large, no permission) raises `WriteFailed`: one line naming
the file that could not be written, with the reason and its errno, whichever library did the writing.
It also takes back the folders this process created for that output: the files it wrote into them
are deleted and the folders removed (a folder built by `atomic_directory` is never deleted this way),
so a failed command leaves no new folder behind, only what was there before.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
import shutil
import tempfile
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from fnmatch import fnmatch
from pathlib import Path
from typing import NoReturn

from biosrecall.errors import BiosrecallError, excerpt, first_line
from biosrecall.files import read_json_object
from biosrecall.interrupts import held
from biosrecall.locking import (
    ASIDE_ENTRY,
    ASIDE_SUFFIX,
    TEMPORARY_SUFFIX,
    remove_stale_temporaries,
    temporary_prefix,
)


def _default_mode(directory: bool) -> int:
    """The permissions a plain open()/mkdir() would give under the current umask (mkstemp gives 0600)."""
    umask = os.umask(0)
    os.umask(umask)
    return (0o777 if directory else 0o666) & ~umask


# Reasons a write fails because of the disk rather than the data: reported as `WriteFailed` wherever
# they surface, even from a library that names no file.
DISK_FULL = (errno.ENOSPC, errno.EFBIG, errno.EDQUOT)


class WriteFailed(BiosrecallError, OSError):
    """An output could not be written; the message names the file, the reason and its errno.

    Also an `OSError` whose `errno` is the cause's, so code that handles a failed write as an OSError
    (the trainer's checkpoint saves) still does. `path` is the file (or folder) that was not written.
    """

    path: Path


def write_failed(path: str | Path, exc: BaseException, left: str = "") -> WriteFailed:
    """`WriteFailed` for `path` from the exception a write raised (`left`: what was cleaned up)."""
    code = error_number(exc)
    if code:
        reason = f"{os.strerror(code)} (errno {code}, {errno.errorcode.get(code, '?')})"
    else:
        reason = first_line(exc)
    failed = WriteFailed(f"cannot write {path}: {reason}" + (f"; {left}" if left else ""))
    failed.errno, failed.path = code, Path(path)
    return failed


def error_number(exc: BaseException) -> int | None:
    """The errno of a failed write: the attribute, or the number a library put in its message
    (pyarrow: "[Errno 27]", safetensors and Rust: "os error 27")."""
    code = getattr(exc, "errno", None)
    if isinstance(code, int) and code > 0:
        return code
    found = re.search(r"(?:\[Errno |os error |errno |code: )(\d+)", str(exc), re.IGNORECASE)
    return int(found.group(1)) if found else None


# Folders the running command created for its outputs, each with the files it wrote into it: what a
# failed write takes back (see the module docstring). Absolute paths; shared by threads, hence the
# lock. Kept only inside `command_outputs` (the command line wraps every command in it): a notebook's
# later failed write must not take back what an earlier call finished in the same folder.
_CREATED: dict[Path, set[Path]] = {}
_CREATED_LOCK = threading.Lock()
_COMMANDS_RUNNING = [0]
# Folder -> the inode of the complete folder this process is swapping in (`atomic_directory`): a
# command stopped by a signal after its output was committed has finished its work (`committed`).
# Recorded before the rename, because the signal can land between the rename and the next bytecode.
_SWAPPED_IN: dict[Path, int] = {}


@contextmanager
def command_outputs() -> Iterator[None]:
    """One command's outputs: if one of its writes fails, the folders it created and what it wrote
    into them are taken back. Outside it (a call from Python) a failed write removes only its own
    temporary."""
    with _CREATED_LOCK:
        _CREATED.clear()
        _COMMANDS_RUNNING[0] += 1
    try:
        yield
    finally:
        with _CREATED_LOCK:
            _COMMANDS_RUNNING[0] -= 1
            _CREATED.clear()


def _make_folder(folder: Path) -> None:
    """`mkdir -p folder`, remembering (inside a command) which of its folders did not exist before."""
    folder = folder.absolute()
    missing = [path for path in (folder, *folder.parents) if not os.path.lexists(path)]
    folder.mkdir(parents=True, exist_ok=True)
    with _CREATED_LOCK:
        for created in missing if _COMMANDS_RUNNING[0] else ():
            _CREATED.setdefault(created, set())


def _wrote(path: Path) -> None:
    """Remember a file completed in a folder this process created."""
    path = path.absolute()
    with _CREATED_LOCK:
        if path.parent in _CREATED:
            _CREATED[path.parent].add(path)


def _take_back(path: Path) -> str:
    """After a failed write of `path`: delete what this process wrote into the folders it created
    for it and remove those folders, deepest first; says which folder is gone ("" when none)."""
    removed, folder = None, path.absolute().parent
    with _CREATED_LOCK:
        while folder in _CREATED:
            for written in _CREATED[folder]:
                written.unlink(missing_ok=True)
            try:
                folder.rmdir()
            except OSError:  # something else lives there too (for now: an enclosing write's temporary,
                break  # whose own clean-up takes the folder back): it stays, and so do its parents
            del _CREATED[folder]
            removed, folder = folder, folder.parent
    if removed is None:
        return ""
    shown = next((p for p in Path(path).parents if p.absolute() == removed), removed)
    return f"{shown} was not created"


def keep_outputs(folder: str | Path) -> None:
    """From now on what the running command has written in `folder` (and the folders above it) is its
    result: a later failed or interrupted write no longer takes it back. A study calls it once its
    record is written, so a first call stopped at any later moment leaves an output a rerun continues."""
    folder = Path(folder).absolute()
    with _CREATED_LOCK:
        for kept in (folder, *folder.parents):
            _CREATED.pop(kept, None)


def _raise_failed(exc: BaseException, written: Path | None, left: str = "") -> NoReturn:
    """The one clean-up rule's last step, once the temporary is removed (and, by the caller, the folders
    made for the output taken back: `left` says which): `exc` as `WriteFailed` naming the file
    `written`, or, when `written` is None (not a failed write), as it was."""
    if written is None:
        raise exc
    cause = (exc.__cause__ or exc) if isinstance(exc, WriteFailed) else exc
    raise write_failed(written, cause, left) from exc


def _is_write_failure(exc: BaseException) -> bool:
    """An exception a write raised that is about the disk or the file, not a bug or a user mistake."""
    if isinstance(exc, WriteFailed):
        return True
    if isinstance(exc, BiosrecallError) or not isinstance(exc, Exception):
        return False
    return error_number(exc) is not None


@contextmanager
def _replacing(path: Path, prefix: str, suffix: str) -> Iterator[Path]:
    """A temporary file beside `path`, named `prefix`XXXXXXXX`suffix` and locked by this process, that
    the block fills and that is then renamed to `path`; on failure it is removed (and a failed write
    taken back: module docstring)."""
    tmp, fd = None, None
    try:
        _make_folder(path.parent)
        remove_stale_temporaries(path, locked=False)
        with held():  # a signal waits until `tmp` names the file the clean-up below removes
            fd, tmp = tempfile.mkstemp(prefix=prefix, suffix=suffix, dir=path.parent)
            fcntl.flock(fd, fcntl.LOCK_EX)  # ours until renamed: see the module docstring
        os.chmod(tmp, _default_mode(directory=False))
        yield Path(tmp)
        os.replace(tmp, path)  # still open, so still locked, until it has its name
    except BaseException as exc:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
        written = exc.path if isinstance(exc, WriteFailed) else path  # a write nested in the block
        _raise_failed(exc, written if _is_write_failure(exc) else None, _take_back(path))
    finally:
        if fd is not None:
            os.close(fd)
    _wrote(path)


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Write `data` to `path` through a temporary file in the same folder, fsync, then rename."""
    path = Path(path)
    with _replacing(path, temporary_prefix(path), TEMPORARY_SUFFIX) as tmp, open(tmp, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())


def atomic_write_text(path: str | Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | Path, obj: object) -> None:
    """JSON with sorted keys and a trailing newline, so identical content gives identical bytes."""
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True) + "\n")


def atomic_write_path(path: str | Path) -> contextlib.AbstractContextManager[Path]:
    """Yield a temporary path for a library that writes files itself (parquet, safetensors, savefig);
    it keeps the file's suffix, from which libraries tell the format."""
    path = Path(path)
    return _replacing(path, f".{path.stem}.", f".tmp{path.suffix}")


@dataclass(frozen=True)
class OutputRecord:
    """What marks a folder as one command's output: the only kind of folder its `--overwrite` replaces."""

    command: str
    """The command that writes the folder, named in the refusal (e.g. "recall-curve")."""
    name: str
    """The record file the command writes into every folder it makes (e.g. "recall_curve.json")."""
    key: str | None = None
    """A key the record (a JSON object) must hold, or None when the file's presence is the mark."""
    value: object = None
    """The value `key` must have (e.g. the manifest's format), or None when any value marks it."""
    only: tuple[str, ...] = ()
    """Glob patterns of every name the folder may hold (empty: any): a folder that also holds the
    user's own files is not replaced whole."""

    def marks(self, folder: Path) -> bool:
        """Whether `folder` holds this record (and nothing but the names `only` allows)."""
        path = folder / self.name
        try:
            if not path.is_file() or path.is_symlink():
                return False
            if self.key is not None:  # a file too large, not JSON or not an object is no record of ours
                found = read_json_object(path, self.name)
                if self.key not in found or (self.value is not None and found[self.key] != self.value):
                    return False
            return not self._strangers(folder)
        except (OSError, BiosrecallError):
            return False

    def _strangers(self, folder: Path) -> list[str]:
        """The names in `folder` that `only` does not allow, sorted (none when `only` is empty)."""
        if not self.only:
            return []
        allowed = (self.name, *self.only)
        return sorted(e.name for e in os.scandir(folder) if not any(fnmatch(e.name, p) for p in allowed))

    def stranger(self, folder: Path) -> str:
        """Why `folder` is not this command's output, for the one-line refusal."""
        strangers = self._strangers(folder)
        if strangers and (folder / self.name).is_file():
            return f"it also holds {excerpt(strangers[0])}, which {self.command} did not write"
        return f"it holds no {self.command} record {self.name}"


def refuse_file(path: str | Path) -> Path:
    """`path`, refused in one line when it exists and is not a folder (an output folder's name taken
    by a file, or a link to nothing, which `mkdir` would refuse only later): the one check of it for
    every command that writes a folder."""
    path = Path(path)
    if os.path.lexists(path) and not path.is_dir():
        raise BiosrecallError(f"output path {path} exists and is not a folder")
    return path


def check_output_dir(path: str | Path, overwrite: bool, record: OutputRecord | None = None) -> Path:
    """Refuse a non-empty existing folder unless `overwrite`, and with it unless `record` marks it as
    the command's own output; refuse a path that is a file. `record=None` is for a folder the package
    itself names (a checkpoint, a gate): nothing else may be in it."""
    path = refuse_file(path)
    if path.is_dir() and any(path.iterdir()):
        if not overwrite:
            raise BiosrecallError(f"output folder {path} is not empty (pass --overwrite to replace it)")
        _check_ours(path, record)
    probe = path.parent
    while not probe.exists():
        probe = probe.parent
    if not os.access(probe, os.W_OK):
        raise BiosrecallError(f"output folder {path} is not writable")
    return path


def _check_ours(path: Path, record: OutputRecord | None) -> None:
    """Refuse to replace `path` unless `record` marks it (see `OutputRecord`)."""
    if record is not None and not record.marks(path):
        raise BiosrecallError(
            f"--overwrite replaces only a folder that {record.command} wrote, and {path} is not one "
            f"({record.stranger(path)}); it was left as it is: choose another folder"
        )


def _refuse_working_folder(path: Path) -> Path:
    """`path` resolved (symlinks and `..`); refused when it is the working folder or an ancestor of it."""
    resolved = path.resolve()
    try:
        cwd = Path.cwd().resolve()
    except OSError:  # the working folder was deleted: nothing can be replaced by it
        return resolved
    if cwd.is_relative_to(resolved):
        raise BiosrecallError(
            f"output {path} is the working folder or one of its parents; name a new folder instead"
        )
    return resolved


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
        if source.is_relative_to(resolved):
            relation = "is" if source == resolved else "contains"
        elif resolved.is_relative_to(source):
            relation = "lies inside"
        else:
            continue
        raise BiosrecallError(f"output {out} {relation} the input {item}; choose another output path")
    return out


def _swap_target(path: Path) -> Path:
    """Where the finished folder goes: `path` with `.`/`..` resolved, so temporaries get a real name."""
    _refuse_working_folder(path)
    if path.name in ("", ".", ".."):
        return path.resolve()
    return path


@contextmanager
def atomic_directory(
    path: str | Path, overwrite: bool = False, record: OutputRecord | None = None
) -> Iterator[Path]:
    """Build a folder under a temporary sibling name and swap it into place only when the block succeeds.

    With `overwrite`, an existing folder is replaced only after the new one is complete, and restored
    if the swap fails; with `record`, only a folder it marks is replaced (checked on entry and again at
    the swap), and the block writes the record into the new folder (as every command's tests see, so
    that its next `--overwrite` finds it). Without `overwrite`, an output that appeared meanwhile is
    never replaced.
    """
    path, tmp = _swap_target(check_output_dir(path, overwrite, record)), None
    try:
        with held():  # a signal waits until `tmp` names the folder the clean-up below removes
            tmp = _temporary_folder(path)
        yield tmp
        _swap_in(tmp, path, overwrite, record)
    except BaseException as exc:
        if tmp is None:  # nothing was made (a failure to make it is already named)
            raise
        shutil.rmtree(tmp, ignore_errors=True)
        _raise_failed(exc, _written_in(exc, tmp, path), _take_back(path))


@contextmanager
def replace_files(folder: str | Path, record: OutputRecord) -> Iterator[Path]:
    """Write a set of files into a shared `folder` as one: the block fills the yielded staging folder
    (hidden, inside `folder`, so the renames stay on one file system), and only once every file is
    complete are they renamed into place, together and with signals held; a failure before (a full
    disk) leaves the previous set as it was. `record` names the set's record, which the block writes
    and which is renamed into place last: files of the same names are replaced only when their record
    marks them (a folder of the user's own files that happen to share a name is refused, and nothing
    is written)."""
    folder, stage = refuse_file(folder), None
    try:
        with held():  # a signal waits until `stage` names the folder the clean-up below removes
            stage = _temporary_folder(folder / record.name)
        yield stage
        names = sorted(entry.name for entry in os.scandir(stage))
        check_files_replaceable(folder, names, record)
        with held():  # renames need no space: once begun, the whole set goes in
            for name in sorted(names, key=lambda name: name == record.name):  # the record last
                os.replace(stage / name, folder / name)
    except BaseException as exc:  # the folder is shared: nothing in it is taken back
        _raise_failed(exc, None if stage is None else _written_in(exc, stage, folder))
    finally:
        if stage is not None:
            shutil.rmtree(stage, ignore_errors=True)


def check_files_replaceable(folder: str | Path, names: Iterable[str], record: OutputRecord) -> None:
    """Refuse to write `names` into `folder` when one exists that `record` does not mark as this
    command's earlier output."""
    folder = Path(folder)
    existing = [name for name in names if os.path.lexists(folder / name)]
    if existing and not record.marks(folder):
        raise BiosrecallError(
            f"{folder / existing[0]} exists and {record.command} did not write it (no record "
            f"{record.name} beside it); it was left as it is: move it or choose another folder"
        )


def _temporary_folder(path: Path) -> Path:
    """A new empty sibling of `path` under a temporary name; nothing is left when making it fails."""
    tmp = None
    try:
        _make_folder(path.parent)
        tmp = Path(tempfile.mkdtemp(prefix=temporary_prefix(path), suffix=TEMPORARY_SUFFIX, dir=path.parent))
        tmp.chmod(_default_mode(directory=True))  # mkdtemp makes 0700
        return tmp
    except OSError as exc:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        _raise_failed(exc, path, _take_back(path))


def _written_in(exc: BaseException, tmp: Path, path: Path) -> Path | None:
    """The file of the finished folder a write inside `tmp` failed on (the folder itself when the
    error names no file), or None when `exc` is not a failed write: a full disk whatever raised it,
    or an error about a file inside `tmp`. A writer that knows its file raises `write_failed(file)`."""
    if not _is_write_failure(exc):
        return None
    named = exc.path if isinstance(exc, WriteFailed) else getattr(exc, "filename", None)
    if isinstance(named, str | os.PathLike):
        relative = os.path.relpath(os.path.abspath(named), os.path.abspath(tmp))
        if not relative.startswith(os.pardir):
            return path / relative
    return path if error_number(exc) in DISK_FULL else None


def committed(path: str | Path) -> bool:
    """Whether this process swapped a complete folder into place at `path` (`atomic_directory`): the
    folder there is the one it built (a rename keeps the inode)."""
    inode = _SWAPPED_IN.get(Path(path).absolute())
    try:
        return inode is not None and os.stat(path).st_ino == inode
    except OSError:
        return False


def _swap_in(tmp: Path, path: Path, overwrite: bool, record: OutputRecord | None = None) -> None:
    """Rename `tmp` to `path`; an existing `path` (with `overwrite`, and marked by `record`) is moved
    aside first, put back on failure, and deleted once the new folder is in place."""
    aside = None
    try:
        if overwrite and os.path.lexists(path):
            if path.is_dir() and any(path.iterdir()):  # filled meanwhile: still only ours is replaced
                _check_ours(path, record)
            prefix = temporary_prefix(path)
            with held():  # a signal waits until `aside` names the folder the clean-up below removes
                aside = Path(tempfile.mkdtemp(prefix=prefix, suffix=ASIDE_SUFFIX, dir=path.parent))
            os.replace(path, aside / ASIDE_ENTRY)
        _SWAPPED_IN[Path(path).absolute()] = os.stat(tmp).st_ino
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
