"""What the warm-start fork server imports before its first fork (`biosrecall.warm`).

Imported by that server only, never by a command: importing it sets process-wide state. Everything a
`train` or `recall-curve` process would import before its first update or evaluation is loaded here
once, and every run forked from the server starts with it loaded.
"""

import os
import signal

# No OpenMP thread pool in the server, so a fork copies none: each run sizes its own from its
# OMP_NUM_THREADS (set before torch loads, because the OpenMP runtime reads it then).
os.environ["OMP_NUM_THREADS"] = "1"
# A SIGTERM sent to the sweep's process group must not end the server while its runs still report
# to it; the sweep stops its runs itself, by SIGINT, and each run puts back its own handler.
signal.signal(signal.SIGTERM, signal.SIG_IGN)
# Every fork starts with Python's own Ctrl-C, as a fresh `python -m biosrecall` does, whatever the process
# that started this server had then: the forkserver hands its children the SIGINT handler it found
# after these imports, and a server started from a shell's background job, or by a test past a
# command's `work_done`, would otherwise pass SIGINT on as ignored to every scoring worker it forks.
signal.signal(signal.SIGINT, signal.default_int_handler)
from biosrecall import allocator  # noqa: E402

allocator.tune_malloc()  # every fork (a sweep's run, a scoring worker) inherits these malloc settings

import torch  # noqa: E402, F401
import torch._dynamo  # noqa: E402, F401  (torch.optim imports it when an optimizer is built)
import torch.optim  # noqa: E402, F401

import biosrecall.cli.recall  # noqa: E402, F401
import biosrecall.cli.train  # noqa: E402, F401
import biosrecall.eval.curves  # noqa: E402, F401
import biosrecall.train.trainer  # noqa: E402, F401
