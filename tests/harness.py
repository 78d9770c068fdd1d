"""Helpers shared by the test suites: run the CLI in-process, snapshot a folder so a test can assert
that a refused command touched nothing, and find a free port for torchrun.

    before = snapshot(folder)
    code, stderr = run_cli(["train", ...], capsys)
    assert code == 2 and changes(before, snapshot(folder)) == []
"""

from __future__ import annotations

import hashlib
import os
import socket
import sys
import traceback
from pathlib import Path

from biosrecall.cli import main


def free_port() -> int:
    """A TCP port no process listens on now, for a torchrun rendezvous (tests run in parallel)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def snapshot(root: Path) -> dict[str, tuple]:
    """Every entry under root, hidden ones included: kind, and size, mtime and hash for files (a FIFO is
    recorded, never opened: reading it would block)."""
    state = {}
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        if path.is_symlink():
            state[rel] = ("link", os.readlink(path))
        elif path.is_fifo():
            state[rel] = ("fifo",)
        elif path.is_dir():
            state[rel] = ("dir",)
        else:
            stat = path.stat()
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
            state[rel] = ("file", stat.st_size, stat.st_mtime_ns, digest)
    return state


def changes(before: dict, after: dict) -> list[str]:
    """What differs between two snapshots, one line per path."""
    found = [f"new {p}" for p in after.keys() - before.keys()]
    found += [f"removed {p}" for p in before.keys() - after.keys()]
    found += [f"changed {p}" for p in before.keys() & after.keys() if before[p] != after[p]]
    return sorted(found)


def run_cli(argv: list[str], capsys) -> tuple[object, str]:
    """(exit code, stderr) of an in-process run; anything escaping `main` shows up as its traceback."""
    try:
        main(argv)
        code = 0
    except SystemExit as exc:
        code = exc.code
    except BaseException:  # noqa: BLE001 - the point is to show what escaped
        code = "exception"
        print(traceback.format_exc(), file=sys.stderr)
    return code, capsys.readouterr().err
