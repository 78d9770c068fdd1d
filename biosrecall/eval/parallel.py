"""Score checkpoints in several processes at once: how a study evaluates what it trained.

    results = map_in_processes(score, items, workers=2, threads=1)   # [score(item) for item in items]

Why: a study trains `workers` runs at a time on `threads` threads each, because a small model gains
little from a second thread (on 2 cores, 2 workers x 1 thread trained 1.75x the updates per second of
1 worker x 2 threads), and scoring a checkpoint is the same kind of forward pass. How much it pays
depends on the model: `benchmarks/bench_scoring.py` measures it against scoring one checkpoint after
another in one process on every core (the default study's bios-cpu gained little in one rerun).

Each process is forked from the warm server the sweep's runs fork from (`biosrecall.warm`:
torch and the evaluator imported once) and sets its torch threads before its first operation. A
checkpoint's numbers do not depend on the thread count (tests/test_parallel_scoring.py compares them),
so a study scored this way writes the same tables as one scored in a single process.

`score` must be a module-level function and every item picklable. Results come back in the order of
`items`. With one worker or fewer than two items, everything runs here, in this process. The first
exception a worker raises (a `BiosrecallError` included) is raised here once the items already
started have ended; items not yet started are dropped.

A worker that dies without its result (the kernel's out-of-memory killer, a `kill -9`, the fork
server itself gone) is a `WorkerDied`: one line naming the item (the run and checkpoint) and the
signal, raised once the other items under way have ended, so what they scored is cached and a
rerun continues from there. Each item runs in a process of its own that sends its result back over
a pipe of its own, so a death takes nothing else with it and leaves no semaphore behind (a process
pool's shared queues would break for every item and leak their locks). A worker's own locks are
unlinked as soon as they are made (`_work`), so a worker killed holding one leaves nothing for the
resource tracker to warn about after the error line.
"""

from __future__ import annotations

import contextlib
import multiprocessing.connection
import os
import signal
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import torch

from biosrecall.errors import BiosrecallError
from biosrecall.warm import DEATH_WAIT, SERVER_IMPORTS, fork_server_death

Item = TypeVar("Item")
_STOP_WAIT = 10.0  # seconds a worker stopped by SIGTERM gets before SIGKILL


class WorkerDied(BiosrecallError):
    """A scoring process ended without sending its result back."""


def map_in_processes(
    score: Callable[[Item], Any],
    items: Sequence[Item],
    workers: int,
    threads: int = 1,
    name: Callable[[Item], str] | None = None,
) -> list:
    """`[score(item) for item in items]`, `workers` items at a time in processes of `threads` threads.
    `name(item)` words an item in an error [default: the run folder and checkpoint it holds]."""
    if workers < 2 or len(items) < 2:
        return [score(item) for item in items]
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(SERVER_IMPORTS)  # kept if the sweep started the server already
    results: list = [None] * len(items)
    pending, running = deque(range(len(items))), {}
    failure: BaseException | None = None
    try:
        while running or (pending and failure is None):
            while pending and failure is None and len(running) < workers:
                index = pending.popleft()
                receive, send = context.Pipe(duplex=False)
                process = context.Process(
                    target=_work, args=(score, items[index], threads, send), name="biosrecall-scoring"
                )
                process.start()
                send.close()  # the worker's end: once it exits, reading ours ends
                running[index] = (process, receive)
            handles = [
                handle for process, receive in running.values() for handle in (receive, process.sentinel)
            ]
            ready = set(multiprocessing.connection.wait(handles))
            for index, (process, receive) in list(running.items()):
                if receive not in ready and process.sentinel not in ready:
                    continue
                del running[index]
                done, value = _collect(process, receive, (name or describe_item)(items[index]))
                if done:
                    results[index] = value
                elif failure is None:
                    failure = value
    finally:
        for process, receive in running.values():
            _stop(process)
            receive.close()
    if failure is not None:
        raise failure
    return results


def describe_item(item: Any) -> str:
    """An item as an error names it: the run folder and checkpoint of the first part that has them
    (a checkpoint job), else the first path, else its text."""
    parts = item if isinstance(item, tuple) else (item,)
    for part in parts:
        run_dir = getattr(part, "run_dir", None)
        if run_dir is not None:
            label = getattr(part, "label", None)
            return f"{run_dir} @ {label}" if label is not None else str(run_dir)
        if isinstance(part, str | os.PathLike):
            return str(part)
    return repr(item)[:120]


def _collect(process, receive, name: str) -> tuple[bool, Any]:
    """(True, the result) or (False, the exception to raise) of a worker that sent or ended."""
    message = None
    try:
        if receive.poll():
            message = receive.recv()
    except (EOFError, OSError):  # it ended without a (whole) message
        message = None
    finally:
        receive.close()
    process.join()
    if message is not None:
        return message
    death = _death(process.exitcode)
    if death.startswith(_SERVER):  # the worker may still run, orphaned: its result can no longer come
        with contextlib.suppress(ProcessLookupError):
            os.kill(process.pid, signal.SIGKILL)
    return False, WorkerDied(f"scoring {name} failed: {death}; {_KEPT}")


_KEPT = "what was scored before it is kept, so rerunning the same command continues from there"
_SERVER = "the warm-start fork server"


def _death(code: int | None) -> str:
    """How a worker that sent nothing ended, in words."""

    server = fork_server_death(wait=DEATH_WAIT if code == 255 else 0.0)
    if server is not None:
        return f"{_SERVER} its process came from {server}"
    if code is not None and code < 0:
        try:
            return f"its process was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"its process was killed by signal {-code}"
    return f"its process ended (exit status {code}) without a result"


def _stop(process) -> None:
    """End a worker still running (this process is stopping): SIGTERM, then SIGKILL."""
    process.terminate()
    process.join(_STOP_WAIT)
    if process.exitcode is None:
        process.kill()
        process.join()


def _work(score, item, threads: int, send) -> None:
    """In the worker: score one item and send back (True, result) or (False, the exception)."""

    # The warm server ignores SIGTERM (the sweep stops runs by SIGINT); a worker takes it back, so
    # the parent can end it.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    # A lock the scoring makes (tqdm's, any multiprocessing one) is then unlinked as soon as it is
    # made, as under fork, instead of named and registered with the shared resource tracker, which a
    # SIGKILLed worker never unregisters: the tracker would print "leaked semaphore" after the error.
    multiprocessing.set_start_method("fork", force=True)
    torch.set_num_threads(threads)
    try:
        message = (True, score(item))
    except BaseException as exc:  # noqa: BLE001 - raised again in the parent, which decides
        message = (False, exc)
    try:
        send.send(message)
    except Exception as exc:  # noqa: BLE001 - a result or an exception that does not pickle
        send.send((False, RuntimeError(f"{type(exc).__name__}: {exc}")))
    send.close()
