"""Ctrl-C and SIGTERM on the command line: exit 130 and one line, from the first instruction on.

Both entry points (`biosrecall` and `python -m biosrecall`) call `stop_on_signals()` before anything
heavy is imported, so a signal that arrives while torch is still loading stops the command like one
that arrives later: `KeyboardInterrupt` unwinds it (temporary names and locks are cleaned by the code
they guard), `biosrecall.cli.main` prints `interrupted` and exits 130.

    previous = stop_on_signals()   # SIGINT, SIGTERM -> KeyboardInterrupt, once
    ...                            # the command; the trainer swaps in its own handler while it trains
    work_done()                    # outputs complete: from here on a signal changes nothing (exit 0)
    restore(previous)              # only for a call from Python (tests, notebooks)

Only the first signal raises: while the stop unwinds, later ones are ignored, so a second Ctrl-C cannot
cut short the clean-up that keeps nothing half-written. Ignoring (SIG_IGN) is also what `work_done`
uses, because Python resets its own handlers to the default at exit, and a signal then would kill the
process (exit -2) after its work was done. This module imports nothing but the standard library, so
that installing the handlers costs nothing.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import NoReturn

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
INTERRUPTED = 130
"""The exit status of a command stopped by a signal (128 + SIGINT, as shells report it)."""

Handlers = dict[int, object]


def _stop(signum, frame) -> None:
    _set_all(signal.SIG_IGN)  # the stop below is already under way; see the module docstring
    raise KeyboardInterrupt


def _set_all(handler) -> Handlers:
    """Give every stop signal `handler`; returns the previous ones (nothing outside the main thread,
    where Python cannot set handlers and the main thread's own stay in charge)."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    return {sig: signal.signal(sig, handler) for sig in STOP_SIGNALS}


def stop_on_signals() -> Handlers:
    """SIGINT and SIGTERM raise `KeyboardInterrupt` (once) from now on; returns the previous handlers."""
    return _set_all(_stop)


def work_done() -> None:
    """The command's outputs are complete (or its exit status is decided): a signal from now on is
    ignored, so the status stands."""
    _set_all(signal.SIG_IGN)
    _forget_caught_interrupt()


def _forget_caught_interrupt() -> None:
    # CPython remembers a KeyboardInterrupt that ended a string `exec`/`eval` (dataclasses and
    # namedtuples build their methods that way, so a Ctrl-C during an import can end there) even when
    # it was caught, and under `python -m` kills the process with SIGINT at exit (status -2 instead of
    # ours). Every string `exec` starts by clearing that memory, so an empty one is enough.
    exec("", {})


@contextmanager
def held() -> Iterator[None]:
    """Hold SIGINT and SIGTERM for a few instructions that must not be cut apart (creating a temporary
    name and recording it for clean-up): a signal that arrives meanwhile is noted, and handled as
    usual when the block ends, where the caller's clean-up already knows the name.

    A Python-level handler, not a blocked signal mask: the kernel hands a process's signal to any of
    its threads (numpy's and torch's pools included), and Python runs the handler in the main thread
    whichever thread received it."""
    noted: list[int] = []
    previous = _set_all(lambda signum, frame: noted.append(signum))  # none outside the main thread
    try:
        yield
    finally:
        restore(previous)
        if noted:
            _deliver(noted[0], previous[noted[0]])


def _deliver(signum: int, handler: object) -> None:
    """Handle a signal that `held` noted, as `handler` (the one in place before) would have."""
    if callable(handler):
        handler(signum, None)
    elif handler == signal.SIG_DFL:
        signal.raise_signal(signum)


def interrupted() -> NoReturn:
    """End a stopped command: the one line, and exit status 130."""
    print("interrupted", file=sys.stderr, flush=True)
    _forget_caught_interrupt()
    sys.exit(INTERRUPTED)


def restore(previous: Handlers) -> None:
    """Put back the handlers `stop_on_signals` replaced."""
    for sig, handler in previous.items():
        signal.signal(sig, handler)
