"""One writer per output: an exclusive lock beside each output, and the clean-up of killed runs' leftovers.

Every command that writes or resumes an output folder holds `output_lock(out)` for its whole run. The
lock is an exclusive, non-blocking `fcntl.flock` on `.<name>.lock` in the output's parent folder
(created on demand, holding the owner's pid, removed again on exit). A second writer or resumer of
the same output fails at once with one `BiosrecallError` line naming the process that holds it. The
kernel drops a flock when its process dies, even by SIGKILL, so a lock that can be taken proves that
no live process is writing that output.

That is what makes the clean-up safe: once the lock is held, every hidden temporary sibling an
atomic write of that output leaves (`.<name>.XXXXXXXX.tmp`, the new folder being built, and
`.<name>.XXXXXXXX.old`, the previous output moved aside during an `--overwrite` swap) belongs to a
dead process. `output_lock` removes them on entry; an `.old` whose swap was cut short, so that the
output itself is missing, is put back first rather than deleted, and so are the entries a study's
`--overwrite` set aside (an `.old` folder of entries, not a `previous` output) when it was killed
before the new output was prepared.

    with output_lock("data/bios-1k"):       # BiosrecallError if another process holds it
        ...                                   # check the output, build it, swap it in

Run folders use the same lock (`with output_lock(run_dir):` around training, resume included); under
torchrun only one process per output (rank 0) takes it, since every other rank would find it held.
The lock is re-entrant within one process, so a command may hold it and call a library function that
takes it again.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import shutil
import stat
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from biosrecall.errors import BiosrecallError

TEMPORARY_SUFFIX = ".tmp"  # a folder or file being built under a temporary name
ASIDE_SUFFIX = ".old"  # the previous output, moved aside while the new one is swapped in
ASIDE_ENTRY = "previous"  # the name the previous output has inside its `.old` folder
# Held locks of this process: lock path -> (file descriptor, depth), for re-entry.
_HELD: dict[Path, list[int]] = {}


def temporary_prefix(output: Path) -> str:
    """The prefix of every hidden temporary name an atomic write of `output` uses (mkstemp/mkdtemp)."""
    return f".{output.name}."


def lock_path(output: str | Path) -> Path:
    """The lock file of `output`: `.<name>.lock` in its (resolved) parent folder."""
    output = _named(output)
    return output.parent / f".{output.name}.lock"


def _named(output: str | Path) -> Path:
    """`output` with its parent resolved, or wholly resolved when its name is `.` or `..`."""
    output = Path(output)
    if output.name in ("", ".", ".."):
        return output.resolve()
    return output.parent.resolve() / output.name


def _owner(fd: int) -> str:
    """The pid recorded in a lock file, for the message (empty while its owner is still writing it)."""
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        text = ""
    return f"pid {text}" if text.isdigit() else "pid unknown"


def _open_locked(path: Path, output: Path) -> int:
    """Open and lock `path`; retry when its previous owner removed it between our open and our lock."""
    while True:
        fd = None
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                problem = f"is in use by another biosrecall process ({_owner(fd)}); wait for it to finish or stop it"
            else:
                problem = f"cannot be locked: {exc.strerror}"
            if fd is not None:
                os.close(fd)
            raise BiosrecallError(f"output {output} {problem} (lock {path})") from None
        with contextlib.suppress(FileNotFoundError):
            if os.path.samestat(os.fstat(fd), os.stat(path)):
                return fd
        os.close(fd)  # we locked a file its owner had just removed; lock the current one


def _make_parents(folder: Path) -> list[Path]:
    """Create `folder` and missing ancestors; returns those created, deepest first, to undo later
    (only while still empty, so one another process filled meanwhile stays)."""
    created = [path for path in (folder, *folder.parents) if not os.path.lexists(path)]
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # a file where a folder goes, no permission
        raise BiosrecallError(f"cannot create output folder {folder}: {exc.strerror}") from None
    return created


@contextmanager
def output_lock(output: str | Path, clean: bool = True) -> Iterator[Path]:
    """Hold the exclusive lock of `output` for the block; yields the lock file's path.

    Missing parent folders are created for the lock file and removed again on exit if still empty.
    With `clean`, leftovers of killed writers are removed once the lock is held (see the module
    docstring). Raises `BiosrecallError` naming the owner's pid when another process holds the lock.
    """
    output = Path(output)
    path = lock_path(output)
    if path in _HELD:
        _HELD[path][1] += 1
        try:
            yield path
        finally:
            _HELD[path][1] -= 1
        return
    created = _make_parents(path.parent)
    try:
        fd = _open_locked(path, output)
    except BaseException:
        _remove_empty(created)
        raise
    _HELD[path] = [fd, 1]
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
        if clean:
            remove_stale_temporaries(_named(output))
        yield path
    finally:
        del _HELD[path]
        path.unlink(missing_ok=True)  # before unlocking: a waiter then sees the file is gone and retries
        os.close(fd)
        _remove_empty(created)


def _remove_empty(folders: list[Path]) -> None:
    for folder in folders:
        try:
            folder.rmdir()
        except OSError:  # no longer empty (another writer's lock or output): keep it
            return


def temporary_names(output: Path, suffixes: tuple[str, ...] = (TEMPORARY_SUFFIX,)) -> re.Pattern:
    """The hidden names atomic writes of `output` give its temporaries: `.<name>.XXXXXXXX<suffix>`
    (mkstemp's and mkdtemp's eight random characters)."""
    alternatives = "|".join(map(re.escape, suffixes))
    return re.compile(re.escape(temporary_prefix(output)) + rf"[a-z0-9_]{{8}}(?:{alternatives})")


def pid_alive(pid: object) -> bool:
    """Whether `pid` (as a lock file or a record gives it) names a running process, another user's
    included; a zombie nobody has reaped has ended, and so has a value no process can have."""
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return False
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):  # no /proc (or no such process): whether the pid names a process
        try:
            os.kill(pid, 0)
        except PermissionError:  # alive, another user's
            return True
        except (OSError, OverflowError):  # none, or beyond any pid (a damaged record)
            return False
        return True
    return state not in ("Z", "X")


def free_lock(path: str | Path) -> int | None:
    """A descriptor of `path` holding its lock when no live process holds it (the caller closes it);
    None when one does, or the file cannot be opened (a symlink is not followed)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:  # held by a live process
        os.close(fd)
        return None
    return fd


SCRATCH_PREFIX = "biosrecall-"
_SCRATCH_LOCK = ".lock"
_SCRATCH_GRACE = 60.0  # seconds a scratch folder may go without its lock: the instant its maker takes it


@contextmanager
def scratch_folder(kind: str) -> Iterator[Path]:
    """A private temporary folder `biosrecall-<kind>-XXXXXXXX` in the system's temporary folder for
    the block, removed at its end.

    Its maker holds a lock on a file inside it for the whole block, so a scratch folder of the same
    kind whose lock can be taken belongs to a command that was killed: those are removed first, so a
    killed `capacity --plan` leaves nothing behind once it is run again."""
    root = Path(tempfile.gettempdir())
    prefix = f"{SCRATCH_PREFIX}{kind}-"
    for entry in sorted(root.glob(f"{prefix}*")):
        _remove_abandoned(entry)
    folder = Path(tempfile.mkdtemp(prefix=prefix, dir=root))
    fd = os.open(folder / _SCRATCH_LOCK, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        os.close(fd)


def _remove_abandoned(folder: Path) -> None:
    """Remove a scratch folder of this user whose lock no live process holds."""
    try:
        info = folder.lstat()
    except OSError:
        return
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
        return
    if not os.path.lexists(folder / _SCRATCH_LOCK):  # its maker has not taken the lock yet, or died first
        if time.time() - info.st_mtime > _SCRATCH_GRACE:
            shutil.rmtree(folder, ignore_errors=True)
        return
    fd = free_lock(folder / _SCRATCH_LOCK)
    if fd is not None:
        shutil.rmtree(folder, ignore_errors=True)
        os.close(fd)


_STALE_AFTER = 1.0  # seconds: a temporary file younger than this may belong to a writer about to lock it


def remove_stale_temporaries(output: str | Path, locked: bool = True) -> None:
    """Remove `output`'s leftover temporaries (`.<name>.XXXXXXXX.tmp|.old`, and a file's
    `.<stem>.XXXXXXXX.tmp<suffix>`, which keeps the suffix libraries tell the format from).

    With `locked` (the caller holds `output`'s lock) every one is a dead writer's, and an `.old` folder
    whose output is missing holds the previous output of a swap that was killed half-way: it is moved
    back to `output` instead of being deleted. Without (a file written outside any output lock), only
    the temporary files no live writer holds are removed: a writer locks its temporary until it is
    renamed (`biosrecall.atomic`).
    """
    output = Path(output)
    patterns = (
        temporary_names(output, (TEMPORARY_SUFFIX, ASIDE_SUFFIX)),
        re.compile(re.escape(f".{output.stem}.") + r"[a-z0-9_]{8}\.tmp" + re.escape(output.suffix)),
    )
    try:
        entries = sorted(
            Path(e.path) for e in os.scandir(output.parent) if any(p.fullmatch(e.name) for p in patterns)
        )
    except OSError:
        return
    for entry in entries:
        if not locked:
            _remove_unheld(entry)
            continue
        previous = entry / ASIDE_ENTRY
        if entry.name.endswith(ASIDE_SUFFIX) and not os.path.lexists(output) and os.path.lexists(previous):
            os.replace(previous, output)
        elif entry.name.endswith(ASIDE_SUFFIX) and not os.path.lexists(previous) and output.is_dir():
            put_back(entry, output)  # a study's entries, set aside by an --overwrite cut short
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)


def put_back(aside: Path, output: Path) -> None:
    """Move the entries a study's `--overwrite` set aside (`biosrecall.experiments.engine`) back into
    `output`, each in place of what was made under its name meanwhile, and remove `aside`."""
    for entry in aside.iterdir():
        made = output / entry.name
        if made.is_dir() and not made.is_symlink():
            shutil.rmtree(made)
        elif os.path.lexists(made):
            made.unlink()
        os.replace(entry, made)
    aside.rmdir()


def _remove_unheld(tmp: Path) -> None:
    """Remove the temporary file `tmp` unless a live writer holds its lock (or may be about to take it)."""
    with contextlib.suppress(OSError):  # gone meanwhile
        info = os.lstat(tmp)
        if not stat.S_ISREG(info.st_mode) or time.time() - info.st_mtime < _STALE_AFTER:
            return
        fd = free_lock(tmp)
        if fd is None:
            return
        try:
            if os.path.samestat(os.fstat(fd), os.lstat(tmp)):
                tmp.unlink()
        finally:
            os.close(fd)
