"""A signal the instant a temporary name exists leaves nothing behind: every atomic writer holds
SIGINT/SIGTERM (`biosrecall.interrupts.held`) until its clean-up knows the name it made, and an
`--overwrite` swap puts the old output back. The moment tests/test_signals.py's `writing` cases hit
only by chance, made certain: every `mkdtemp`/`mkstemp` sends the process SIGINT as it returns.

    pytest -q tests/test_atomic_signals.py
"""

from __future__ import annotations

import os
import signal
import tempfile
from pathlib import Path

import pytest

from biosrecall import interrupts
from biosrecall.atomic import atomic_directory, atomic_write_bytes, atomic_write_path


@pytest.fixture
def signal_on_creation(monkeypatch):
    """Install the command's handlers; `arm(n)` makes the n-th temporary name from now on send this
    process SIGINT the instant it exists: the moment the `writing` cases above hit only by chance."""
    previous = interrupts.stop_on_signals()
    made = [0]

    def arm(nth: int = 1) -> None:
        for name in ("mkdtemp", "mkstemp"):
            monkeypatch.setattr(tempfile, name, signalling(getattr(tempfile, name), nth))

    def signalling(real, nth):
        def make(*args, **kwargs):
            name = real(*args, **kwargs)
            made[0] += 1
            if made[0] == nth:
                os.kill(os.getpid(), signal.SIGINT)
            return name

        return make

    yield arm
    interrupts.restore(previous)


def write_folder(out: Path) -> None:
    with atomic_directory(out, overwrite=True) as tmp:
        (tmp / "part").write_text("new")


def write_through_path(out: Path) -> None:
    with atomic_write_path(out) as tmp:
        tmp.write_text("new")


@pytest.mark.parametrize(
    "write",
    [write_folder, write_through_path, lambda out: atomic_write_bytes(out, b"new")],
    ids=["folder", "file-path", "file-bytes"],
)
def test_a_signal_as_the_temporary_is_made_leaves_nothing(signal_on_creation, tmp_path, write):
    signal_on_creation(1)
    with pytest.raises(KeyboardInterrupt):
        write(tmp_path / "out")
    assert list(tmp_path.iterdir()) == []


def test_a_signal_as_an_old_folder_is_set_aside_leaves_it_in_place(signal_on_creation, tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "part").write_text("old")
    signal_on_creation(2)  # the first name is the new folder, the second the old one's set-aside place
    with pytest.raises(KeyboardInterrupt):
        write_folder(tmp_path / "out")
    assert [p.name for p in tmp_path.iterdir()] == ["out"]
    assert (tmp_path / "out" / "part").read_text() == "old"
