"""One worker's whole job: bring one run to done (train, resume or skip it, then evaluate it).

    outcome = run_one(job)     # Outcome(name, state="done" | "failed" | "busy", action, exit_code, error)

Both executors call this, the local one in a thread per worker slot, the Slurm one inside each array
task, so a run is handled the same way everywhere:

- a run whose folder is in use (its record or the folder's lock names a live process) is left alone
  ("busy");
- a finished run (final 1.0 checkpoint) is not trained again; an interrupted one (a `latest`
  checkpoint) is resumed with --resume; anything else starts fresh (a run killed before its first
  save left only a hidden temporary, which the trainer clears);
- training is `python -m biosrecall <command> --config OUT/.sweep/.specs/<name>.json --threads M` with
  OMP_NUM_THREADS=M (the run spec, `biosrecall.sweep.run_spec`, written just before), forked from a
  server that has imported torch already (`biosrecall.warm`), or, with more than one GPU, the
  same under `python -m torch.distributed.run --standalone --nproc_per_node G` in a subprocess;
- then each evaluation (`biosrecall recall-curve RUN ...`, `lm eval RUN ...`) unless the record says
  the same evaluations already finished.

Every process runs in its own session (a Ctrl-C meant for the sweep reaches it once, from the
executor) with stdout and stderr appended to OUT/.sweep/<name>.log after a header line naming the
command. A non-zero exit is recorded (exit code, the last `error:` line of that attempt's log, or its
last line) and returned, never raised: one failed run does not stop the others.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import socket
import subprocess
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass
from pathlib import Path

from biosrecall.atomic import atomic_write_text
from biosrecall.sweep.jobs import PROGRAM, SweepRun
from biosrecall.sweep.records import lock_holder, now, record_running, run_state, update_record
from biosrecall.train.run_folder import RunFolder
from biosrecall.warm import WarmProcess, start_warm, warm_start_enabled

MAX_ERROR = 300


@dataclass(frozen=True)
class Outcome:
    """What became of one run in this sweep."""

    name: str
    state: str
    """done, failed, or busy (another process is running it)."""
    action: str
    """trained, resumed, skipped (already finished), evaluated (finished earlier, evaluated now), busy."""
    exit_code: int | None = None
    error: str = ""
    log: str = ""
    progress: str = ""
    """Where the sweep stands once this run ended: "[3/12 runs, about 4m10s left]" (`engine.run_sweep`)."""


def run_one(
    job: SweepRun,
    env: Mapping[str, str] | None = None,
    processes: MutableMapping[str, subprocess.Popen | WarmProcess] | None = None,
) -> Outcome:
    """Bring `job`'s run to done (module docstring). `env`: extra environment (a GPU slot's
    CUDA_VISIBLE_DEVICES); `processes`: where the running child is registered, for the executor to
    interrupt it."""
    if record_running(run_state(job.record)) or lock_holder(job.run_dir) is not None:
        return Outcome(job.name, "busy", "busy", log=str(job.log))
    job.record.parent.mkdir(parents=True, exist_ok=True)
    action = "skipped"
    if not RunFolder(job.run_dir).finished():
        resume = RunFolder(job.run_dir).latest_checkpoint() is not None
        action = "resumed" if resume else "trained"
        atomic_write_text(job.spec, job.spec_text)
        code, error = _launch(job, "train", action, job.train_command(resume), env, processes)
        if code != 0:
            return failed(job, code, error, action)
    record = run_state(job.record)
    if job.eval_key is not None and record.evaluated != job.eval_key:
        action = "evaluated" if action == "skipped" else action
        for args in job.eval_args:
            code, error = _launch(job, "eval", action, [*PROGRAM, *args], env, processes)
            if code != 0:
                return failed(job, code, error, action)
        update_record(job, evaluated=job.eval_key)
    if action != "skipped" or record.state != "done":  # skipped: no attempt since `record` was read
        update_record(job, state="done", action=action, exit_code=0, error="", finished=now())
    return Outcome(job.name, "done", action, 0, log=str(job.log))


def _launch(
    job: SweepRun,
    phase: str,
    action: str,
    argv: list[str],
    env: Mapping[str, str] | None,
    processes: MutableMapping[str, subprocess.Popen | WarmProcess] | None,
) -> tuple[int, str]:
    """Run one process of the job with its output appended to the log; (exit code, error line). A
    plain `biosrecall` command is forked warm; anything else (torchrun) starts as a subprocess."""
    environment = {**os.environ, "OMP_NUM_THREADS": str(job.threads), **(env or {})}
    with open(job.log, "ab") as log:
        log.write(f"== {now()} {phase}: {shlex.join(argv)}\n".encode())
        log.flush()
        start = log.tell()
        if argv[: len(PROGRAM)] == PROGRAM and warm_start_enabled(environment):
            process = start_warm(argv[len(PROGRAM) :], job.log, environment)
        else:
            process = subprocess.Popen(
                argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=environment,
                start_new_session=True,
            )
    update_record(
        job,
        state="running",
        phase=phase,
        action=action,
        host=socket.gethostname(),
        pid=process.pid,
        command=argv,
        started=now(),
        exit_code=None,
        error="",
    )
    if processes is not None:
        processes[job.name] = process
    try:
        code = process.wait()
    finally:
        if processes is not None:
            processes.pop(job.name, None)
    return code, "" if code == 0 else error_line(job.log, start, code)


def error_line(log: Path, start: int, code: int) -> str:
    """Why an attempt failed: its last `error:` line, else its last line, else the signal that killed it."""
    try:
        with open(log, "rb") as handle:
            handle.seek(start)
            lines = [line.strip() for line in handle.read().decode("utf-8", "replace").splitlines()]
    except OSError:
        lines = []
    lines = [line for line in lines if line]
    chosen = next((line for line in reversed(lines) if line.startswith("error:")), None)
    if code < 0:
        killed = f"killed by {signal.Signals(-code).name}" if -code in signal.valid_signals() else "killed"
        chosen = killed if chosen is None else f"{killed}; {chosen}"
    chosen = chosen or (lines[-1] if lines else "no output")
    return chosen[:MAX_ERROR]


def failed(job: SweepRun, code: int | None, error: str, action: str = "trained") -> Outcome:
    """Record the run as failed (exit `code`; None: the sweep itself failed to run it) and say so. A
    record that cannot be written (it may be what failed) is left: the outcome still says it."""
    with contextlib.suppress(OSError):
        update_record(job, state="failed", exit_code=code, error=error, finished=now(), action=action)
    return Outcome(job.name, "failed", action, code, error, str(job.log))
