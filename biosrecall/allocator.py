"""glibc malloc settings for the processes biosrecall starts: big tensors reuse heap memory instead of
fresh pages.

    from biosrecall import allocator
    allocator.tune_malloc()          # once, at process start-up; True where the thresholds were set

Why: by default glibc serves every allocation above its mmap threshold (128 KiB at first, raised
dynamically up to 32 MiB) with a fresh `mmap`, and gives freed memory at the top of the heap back to
the kernel once more than its trim threshold (twice the mmap threshold) is free. A process that
allocates and frees the same large tensors over and over then faults in fresh zero-filled pages
each time: a `bios-tiny` update that held its full [tokens, vocab] logits (the step before the fused
head, `biosrecall.model.layers.head_cross_entropy`) took 4,200 page faults and 8 ms of kernel time,
17% of its CPU time, and a `bios-tiny` recall sweep to K=16 over 250 people 30,000 faults. With
the mmap threshold fixed at its largest value and the trim threshold raised, that memory stays in
the heap and the next use reuses it: no faults in the update, 100 in the sweep
(`benchmarks/bench_allocator.py` measures training updates with and without). Today's fused step
holds no tensor large enough to fault in steady state, so there the thresholds change little.

Where it is called: `biosrecall.__main__` (the console script, `python -m biosrecall`, every torchrun
rank and every sweep run forked warm) and the sweep's warm fork server (`biosrecall.warm_server`),
whose forks, the sweep's runs and the scoring workers of `biosrecall.eval.parallel`, inherit the
settings: they live in the C library's data, which a fork copies (tests/test_allocator.py checks a
plain fork and a scoring worker). A library import changes nothing: only those entry points call it.

Only glibc is touched (found by its `gnu_get_libc_version`); on macOS, musl or Windows it does
nothing. `BIOSRECALL_MALLOC_TUNING=0` in the environment keeps glibc's defaults (to measure the
difference, or where freed memory must go back to the system at once).
"""

from __future__ import annotations

import ctypes
import os

# mallopt parameter numbers, from glibc's malloc.h.
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3

MMAP_THRESHOLD = 32 * 1024 * 1024
"""Allocations below this come from the heap: glibc's largest accepted value on 64-bit systems (its
DEFAULT_MMAP_THRESHOLD_MAX), above any activation of the bioS presets at their studies' batches."""
TRIM_THRESHOLD = 1024 * 1024 * 1024
"""Free memory kept at the top of the heap before any is returned: more than one training update of
the bioS presets frees at its end (a `bios-cpu` update at K=16 faulted 17,000 pages back in with
glibc's defaults), so steady training never returns memory only to fault it in again."""
SWITCH = "BIOSRECALL_MALLOC_TUNING"


def tune_malloc(environment=os.environ) -> bool:
    """Set glibc's mmap and trim thresholds (module docstring); True where both were set. Calling it
    again sets the same values, so every entry point may call it."""
    if environment.get(SWITCH, "1").strip() == "0":
        return False
    libc = _glibc()
    if libc is None:
        return False
    # Trim first: with a trim threshold below the mmap threshold, glibc would trim memory it just kept.
    trimmed = libc.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1
    mapped = libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1
    return trimmed and mapped


def tunable() -> bool:
    """Whether this process runs on glibc, whose thresholds `tune_malloc` sets."""
    return _glibc() is not None


def _glibc():
    """The C library this process runs on, when it is glibc (else None)."""
    try:
        libc = ctypes.CDLL(None)
        libc.gnu_get_libc_version  # noqa: B018  (AttributeError elsewhere: musl, macOS, Windows)
        libc.mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
        libc.mallopt.restype = ctypes.c_int
    except (OSError, AttributeError, TypeError):
        return None
    return libc
