"""malloc's thresholds (`biosrecall.allocator`): set by the program's entry point and by the sweep's
warm fork server, inherited by a fork and by the scoring workers forked from that server, and left
alone when the environment asks. Whether an allocation came from the heap is read from glibc's own
count of mmapped chunks (`mallinfo2`), so nothing here is a timing.

    pytest -q tests/test_allocator.py
"""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys

import pytest

from biosrecall import allocator
from biosrecall.eval.parallel import map_in_processes

# Between what a fresh interpreter may have freed (which raises glibc's default threshold as far as
# that) and allocator.MMAP_THRESHOLD: mmapped by default in a fresh process, from the heap once tuned.
PROBE_BYTES = 24 * 1024 * 1024

pytestmark = pytest.mark.skipif(
    not allocator.tunable() or not hasattr(ctypes.CDLL(None), "mallinfo2"),
    reason="glibc 2.33 or later only (mallopt's thresholds, mallinfo2)",
)


def mmapped(nbytes: int = PROBE_BYTES) -> bool:
    """Whether glibc serves a `nbytes` allocation with its own mmap in this process."""
    fields = ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks")

    class MallInfo2(ctypes.Structure):
        _fields_ = [(name, ctypes.c_size_t) for name in (*fields, "keepcost")]

    libc = ctypes.CDLL(None)
    libc.mallinfo2.restype = MallInfo2
    libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, (ctypes.c_size_t,)
    libc.free.argtypes = (ctypes.c_void_p,)
    before = libc.mallinfo2().hblks
    pointer = libc.malloc(nbytes)
    mapped = libc.mallinfo2().hblks > before
    libc.free(pointer)
    return mapped


def probe_item(item: int) -> tuple[int, int, bool]:
    return item, os.getpid(), mmapped()


CHILD = """
import json, os, sys
sys.path.insert(0, {tests!r})
from test_allocator import mmapped
setup = sys.argv[1]
if setup == "tune":
    from biosrecall.allocator import tune_malloc
    assert tune_malloc()
elif setup == "program":  # the console script's entry point, as `biosrecall --help` runs it
    from biosrecall.__main__ import main
    sys.argv = ["biosrecall", "--help"]
    try:
        main()
    except SystemExit:
        pass
read, write = os.pipe()
pid = os.fork()
if pid == 0:
    os.write(write, b"1" if mmapped() else b"0")
    os._exit(0)
os.waitpid(pid, 0)
print(json.dumps({{"here": mmapped(), "fork": os.read(read, 1) == b"1"}}))
"""


def in_fresh_process(setup: str, **environment: str) -> dict:
    """Whether the probe allocation is mmapped in a fresh interpreter after `setup`, and in its fork."""
    code = CHILD.format(tests=os.path.dirname(os.path.abspath(__file__)))
    done = subprocess.run(
        [sys.executable, "-c", code, setup],
        capture_output=True,
        text=True,
        env={**os.environ, **environment},
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_by_default_glibc_maps_a_large_allocation_and_so_does_a_fork():
    assert in_fresh_process("nothing") == {"here": True, "fork": True}


def test_once_tuned_it_comes_from_the_heap_here_and_in_a_fork():
    assert in_fresh_process("tune") == {"here": False, "fork": False}


def test_the_program_entry_point_tunes_and_the_switch_turns_it_off():
    assert in_fresh_process("program") == {"here": False, "fork": False}
    assert in_fresh_process("program", BIOSRECALL_MALLOC_TUNING="0") == {"here": True, "fork": True}
    assert allocator.tune_malloc({allocator.SWITCH: "0"}) is False


def test_scoring_workers_forked_from_the_warm_server_inherit_the_thresholds():
    """The server (`biosrecall.warm_server`) sets them before its first fork; a worker sets
    nothing itself (`biosrecall.eval.parallel._start_worker`)."""
    results = map_in_processes(probe_item, [0, 1, 2], workers=2)
    assert [item for item, _, _ in results] == [0, 1, 2]
    assert {pid for _, pid, _ in results}.isdisjoint({os.getpid()})
    assert not any(mapped for _, _, mapped in results)


def test_with_the_switch_off_the_same_workers_map_it_as_glibc_does():
    """The control of the test above: in a process whose warm server keeps glibc's defaults."""
    code = (
        "from test_allocator import probe_item\n"
        "from biosrecall.eval.parallel import map_in_processes\n"
        "print(all(mapped for _, _, mapped in map_in_processes(probe_item, [0, 1], workers=2)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=os.path.dirname(os.path.abspath(__file__)),
        capture_output=True,
        text=True,
        env={**os.environ, allocator.SWITCH: "0"},
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "True"
