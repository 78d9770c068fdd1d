"""Score checkpoints in several processes at once: how a study evaluates what it trained.

    results = map_in_processes(score, items, workers=2, threads=1)   # [score(item) for item in items]

Why: a study trains `workers` runs at a time on `threads` threads each, because a small model gains
little from a second thread (on 2 cores, 2 workers x 1 thread trained 1.75x the updates per second of
1 worker x 2 threads), and scoring a checkpoint is the same kind of forward pass. How much it pays
depends on the model: `benchmarks/bench_scoring.py` measures it against scoring one checkpoint after
another in one process on every core (the default study's bios-cpu gained little in one rerun).

Each process is forked from the warm server the sweep's runs fork from (`biosrecall.sweep.warm`:
torch and the evaluator imported once) and sets its torch threads before its first operation. A
checkpoint's numbers do not depend on the thread count (tests/test_parallel_scoring.py compares them),
so a study scored this way writes the same tables as one scored in a single process.

`score` must be a module-level function and every item picklable. Results come back in the order of
`items`. With one worker or fewer than two items, everything runs here, in this process. The first
exception a worker raises (a `BiosrecallError` included) is raised here once the items already
started have ended; items not yet started are dropped.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

Item = TypeVar("Item")


def map_in_processes(
    score: Callable[[Item], Any], items: Sequence[Item], workers: int, threads: int = 1
) -> list:
    """`[score(item) for item in items]`, `workers` items at a time in processes of `threads` threads."""
    if workers < 2 or len(items) < 2:
        return [score(item) for item in items]
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    from biosrecall.sweep.warm import SERVER_IMPORTS

    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(SERVER_IMPORTS)  # kept if the sweep started the server already
    pool = ProcessPoolExecutor(
        min(workers, len(items)), mp_context=context, initializer=_start_worker, initargs=(threads,)
    )
    try:
        return list(pool.map(score, items))
    finally:
        pool.shutdown(cancel_futures=True)


def _start_worker(threads: int) -> None:
    import signal

    import torch

    # The warm server ignores SIGTERM (the sweep stops runs by SIGINT); the pool ends a broken
    # worker by SIGTERM, so a worker takes it back.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    torch.set_num_threads(threads)
