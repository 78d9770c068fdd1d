"""Helpers shared by the test suites: run the CLI in-process, snapshot a folder so a test can assert
that a refused command touched nothing, find a free port for torchrun, launch torchrun so that a
hang fails with every rank's Python stack, and wait until a launched run is mid-way.

    before = snapshot(folder)
    code, stderr = run_cli(["train", ...], capsys)
    assert code == 2 and changes(before, snapshot(folder)) == []
"""

from __future__ import annotations

import hashlib
import os
import signal
import socket
import subprocess
import sys
import time
import traceback
from pathlib import Path

from biosrecall.cli import main


def free_port() -> int:
    """A TCP port no process listens on now, for a torchrun rendezvous (tests run in parallel)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run_launched(command: list[str], env: dict, timeout: float = 300) -> None:
    """Run a torchrun command like `subprocess.run(check=True)`. Past `timeout` seconds every process
    it started gets SIGABRT, which (with PYTHONFAULTHANDLER) prints each rank's Python stack into the
    test's output before the test fails: a hang says where it hangs."""
    env = {**env, "PYTHONFAULTHANDLER": "1"}
    process = subprocess.Popen(command, env=env, start_new_session=True)
    try:
        code = process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGABRT)
        process.wait(timeout=30)
        raise AssertionError(
            f"{command[:6]}... hung for {timeout:.0f}s; the ranks' stacks are above"
        ) from None
    if code:
        raise subprocess.CalledProcessError(code, command)


def wait_for_updates(run_dir: Path, count: int, process: subprocess.Popen, timeout: float = 180) -> None:
    """Until the run has logged `count` updates in its metrics.jsonl (it is then training, mid-way; the
    folder itself appears at the run's first save)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and process.poll() is None:
        path = run_dir / "metrics.jsonl"
        if path.exists() and len(path.read_text().splitlines()) >= count:
            return
        time.sleep(0.05)
    raise AssertionError(f"{run_dir} did not reach {count} updates")


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
