"""Warm starts: a sweep's `biosrecall` processes forked from one process that has imported torch already.

    process = start_warm(["train", "--config", "OUT/.sweep/.specs/a.json"], log_path, environment)
    process.pid; process.send_signal(signal.SIGINT); code = process.wait()

Why: on a 2-core machine a `biosrecall train` process spends about 4 s before its first update, 1.9 s
importing torch and 2 s importing torch._dynamo (which `torch.optim` imports when an optimizer is
built), and an evaluation process pays most of that again. A study of tiny runs spends more time
starting processes than training. So the sweep starts one fork server per sweep process (the
standard library's multiprocessing "forkserver") that imports that stack once
(`biosrecall.warm_server`), and every run forks from it.

Each fork is made to look like `python -m biosrecall ARGS` started fresh, with stdin from /dev/null
and stdout and stderr appended to the run's log: a session of its own (a Ctrl-C meant for the sweep
reaches it once, from the executor), the working folder, the whole environment and the torch threads
(OMP_NUM_THREADS) given here, and the command line's own signal handling and exit status. Nothing the
server did is inherited but imports: it runs no torch operation, holds no thread pool (it imports
torch with OMP_NUM_THREADS=1) and draws no random number that a run uses (every run seeds its own).
Commands under torchrun are started as plain subprocesses (`biosrecall.sweep.worker`), and so is every
command when the environment sets BIOSRECALL_WARM_START=0 (to debug a run exactly as it would start
by hand, or to measure the difference: benchmarks/bench_cli.py).

The server relays each fork's exit status. Should it die (the out-of-memory killer, a `kill -9`), its
forks go on running, orphaned, with no status to read: `WarmProcess.wait` then stops its command by
SIGINT (a trainer saves `latest` and exits), waits for it to end, and raises `ForkServerDied`, one
line saying so, rather than report an exit status nobody gave.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import multiprocessing.connection
import os
import signal
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from multiprocessing import forkserver
from pathlib import Path

from biosrecall.__main__ import main
from biosrecall.errors import BiosrecallError
from biosrecall.locking import pid_alive

SERVER_IMPORTS = ["biosrecall.warm_server"]
# The local executor starts and waits for runs from several threads, and multiprocessing's bookkeeping
# is not made for that: starting a process polls the others, and two threads reading one child's exit
# status would leave one of them 255. So every start and every read of a status happen under this lock
# (a wait blocks without it, until the status is there to read).
_BOOKKEEPING = threading.Lock()
SWITCH = "BIOSRECALL_WARM_START"


# The status multiprocessing reports for a fork whose server died before relaying the real one.
_NO_STATUS = 255
_ORPHAN_WAIT = 120.0  # seconds an orphaned command gets to save and exit after SIGINT, before SIGKILL
DEATH_WAIT = 2.0
"""Seconds to wait for a server whose forks' status pipes closed to be reported dead."""


class ForkServerDied(BiosrecallError):
    """The warm-start fork server died while a command forked from it ran (its status is lost)."""


def fork_server_death(wait: float = 0.0) -> str | None:
    """How the warm-start fork server of this process ended ("(pid 12) was killed by SIGKILL"), or
    None while it runs (asked again for up to `wait` seconds) or when none was started. Its status is
    read without reaping it, so multiprocessing still finds it dead and starts a new one."""

    pid = getattr(getattr(forkserver, "_forkserver", None), "_forkserver_pid", None)
    if not pid:
        return None
    # A dying process closes its pipes (which ends its forks' status reads) a moment before the
    # kernel reports it exited: a reader woken by the first asks again for a while.
    deadline = time.monotonic() + wait
    while True:
        try:
            info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:  # reaped meanwhile: multiprocessing found it dead
            return f"(pid {pid}) ended"
        if info is not None or time.monotonic() >= deadline:
            break
        time.sleep(0.02)
    if info is None:
        return None
    if info.si_code in (os.CLD_KILLED, os.CLD_DUMPED):
        try:
            how = f"was killed by {signal.Signals(info.si_status).name}"
        except ValueError:
            how = f"was killed by signal {info.si_status}"
    else:
        how = f"exited with status {info.si_status}"
    return f"(pid {pid}) {how}"


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
        if self._process.exitcode == _NO_STATUS:
            death = fork_server_death(wait=DEATH_WAIT)
            if death is not None:
                self._stop_orphan()
                self.returncode = _NO_STATUS
                raise ForkServerDied(f"the warm-start fork server {death}")
        self.returncode = self._process.exitcode
        return self.returncode

    def _stop_orphan(self) -> None:
        """Stop the command the dead server forked (SIGINT: a trainer saves `latest`) and wait for it."""
        self.send_signal(signal.SIGINT)
        deadline = time.monotonic() + _ORPHAN_WAIT
        while pid_alive(self.pid):  # not a child of ours: a zombie nobody reaps counts as ended
            if time.monotonic() > deadline:
                self.send_signal(signal.SIGKILL)
                deadline = float("inf")
            time.sleep(0.05)


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
