"""Warm starts: a sweep's `biosrecall` processes forked from one process that has imported torch already.

    process = start_warm(["train", "--config", "OUT/.sweep/a.toml"], log_path, environment)
    process.pid; process.send_signal(signal.SIGINT); code = process.wait()

Why: on a 2-core machine a `biosrecall train` process spends about 4 s before its first update, 1.9 s
importing torch and 2 s importing torch._dynamo (which `torch.optim` imports when an optimizer is
built), and an evaluation process pays most of that again. A study of tiny runs spends more time
starting processes than training. So the sweep starts one fork server per sweep process (the
standard library's multiprocessing "forkserver") that imports that stack once
(`biosrecall.sweep.warm_server`), and every run forks from it.

Each fork is made to look like `python -m biosrecall ARGS` started fresh, with stdin from /dev/null
and stdout and stderr appended to the run's log: a session of its own (a Ctrl-C meant for the sweep
reaches it once, from the executor), the working folder, the whole environment and the torch threads
(OMP_NUM_THREADS) given here, and the command line's own signal handling and exit status. Nothing the
server did is inherited but imports: it runs no torch operation, holds no thread pool (it imports
torch with OMP_NUM_THREADS=1) and draws no random number that a run uses (every run seeds its own).
Commands under torchrun are started as plain subprocesses (`biosrecall.sweep.worker`), and so is every
command when the environment sets BIOSRECALL_WARM_START=0 (to debug a run exactly as it would start
by hand, or to measure the difference: benchmarks/bench_cli.py).
"""

from __future__ import annotations

import contextlib
import multiprocessing
import multiprocessing.connection
import os
import signal
import sys
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path

SERVER_IMPORTS = ["biosrecall.sweep.warm_server"]
# The local executor starts and waits for runs from several threads, and multiprocessing's bookkeeping
# is not made for that: starting a process polls the others, and two threads reading one child's exit
# status would leave one of them 255. So every start and every read of a status happen under this lock
# (a wait blocks without it, until the status is there to read).
_BOOKKEEPING = threading.Lock()
SWITCH = "BIOSRECALL_WARM_START"


def warm_start_enabled(environment: Mapping[str, str]) -> bool:
    """Whether runs fork from the warm server (every value of SWITCH but 0 means yes)."""
    return environment.get(SWITCH, "1").strip() != "0"


class WarmProcess:
    """A started command: its pid, a signal to it, and its exit status (as `subprocess.Popen` gives)."""

    def __init__(self, process: multiprocessing.process.BaseProcess):
        self._process = process
        self.pid: int = process.pid
        self.returncode: int | None = None

    def send_signal(self, signum: int) -> None:
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):  # it ended meanwhile
                os.kill(self.pid, signum)

    def poll(self) -> int | None:
        """The exit status once it has ended, else None (without waiting)."""
        if self.returncode is None and not multiprocessing.connection.wait([self._process.sentinel], 0):
            return None
        return self.wait()

    def wait(self) -> int:
        if self.returncode is not None:
            return self.returncode
        multiprocessing.connection.wait([self._process.sentinel])  # ended; its status is not read yet
        with _BOOKKEEPING:
            self._process.join()
        self.returncode = self._process.exitcode
        return self.returncode


def start_warm(args: Sequence[str], log: Path, environment: Mapping[str, str]) -> WarmProcess:
    """Start `biosrecall ARGS` as a fork of the warm server (started on first use), in the current
    folder, with `environment` as its whole environment and its output appended to `log`."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(SERVER_IMPORTS)
    process = context.Process(
        target=_run_command, args=(list(args), str(log), dict(environment), os.getcwd()), name="biosrecall"
    )
    with _BOOKKEEPING:
        process.start()
    return WarmProcess(process)


def _run_command(args: list[str], log: str, environment: dict[str, str], folder: str) -> None:
    """In the fork: become a fresh `python -m biosrecall ARGS` (module docstring), then run it."""
    os.setsid()
    _redirect_output(log)
    os.chdir(folder)
    os.environ.clear()
    os.environ.update(environment)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the server ignores it; the command sets its own
    threads = environment.get("OMP_NUM_THREADS", "")
    if threads.isdigit() and int(threads) > 0:
        import torch

        torch.set_num_threads(int(threads))
    sys.argv = ["biosrecall", *args]
    from biosrecall.__main__ import main

    main()  # exits with the command's status; SystemExit becomes the process's exit code


def _redirect_output(log: str) -> None:
    """stdin from /dev/null; stdout and stderr appended to `log` (Python flushes them at exit)."""
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    target = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.dup2(target, 1)
    os.dup2(target, 2)
    os.close(target)
