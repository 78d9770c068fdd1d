"""Where a sweep's jobs run: worker slots on this machine, or a Slurm job array through submitit.

    LocalExecutor(workers=2, threads_per_run=1).execute(jobs, report=print)
    SlurmExecutor(partition="gpu", gpus_per_run=8, cpus_per_run=64, time_min=2880).execute(jobs)
    SlurmExecutor(cluster="local").execute(jobs)    # the same array on this machine (the tests do this)

Both run `biosrecall.sweep.worker.run_one` per job and return one `Outcome` per job, in order.

Local (needs nothing installed): `workers` slots, each taking the next job when its run ends. With
`gpus_per_run` G, slot i sees GPUs i*G .. i*G+G-1 (CUDA_VISIBLE_DEVICES) and a run with G > 1 starts
under torchrun. A Ctrl-C (or SIGTERM) stops handing out jobs and passes one SIGINT to every running
child, which saves its `latest` checkpoint and exits; rerunning the sweep resumes those runs. Should
the warm-start fork server die (`biosrecall.warm`), every run forked from it is stopped the same
way and the sweep raises `ForkServerDied`, one line naming the server, the run and how to continue:
not a Ctrl-C, and not a failure of the runs.

Slurm (the optional extra `pip install 'biosrecall[slurm]'`, submitit >= 1.5): one array task per
run on one node each, with `gpus_per_run` GPUs and `cpus_per_run` CPUs (threads per process: the CPUs
shared among the GPUs' processes), `time_min` minutes, at most `array_parallelism` tasks at once, on
`partition`. The sweep command waits for the array (run it in tmux or screen, or as a small job of its
own) and reports each run as its task ends; submitit keeps its scripts and logs in
OUT/.sweep/submitit/. A task the cluster killed (time limit, node failure) is recorded as failed;
rerunning resumes it from its `latest` checkpoint. `cluster` is submitit's executor kind: "slurm",
or "local" to run the same array as local processes (for tests; it ignores partition and time).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import signal
import threading
from collections.abc import Callable, Sequence
from typing import Literal

from biosrecall.errors import BiosrecallError, first_line
from biosrecall.interrupts import restore, stop_on_signals
from biosrecall.numbers import check_count
from biosrecall.sweep.jobs import SweepRun
from biosrecall.sweep.worker import Outcome, failed, run_one
from biosrecall.warm import ForkServerDied

Report = Callable[[Outcome], None]
RERUN = "rerun the same command to continue"


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity), which a container may limit."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


@dataclasses.dataclass(frozen=True)
class LocalExecutor:
    """Runs jobs on this machine, `workers` at a time."""

    workers: int | None = None
    """Runs at the same time [default: with GPUs, as many as the GPUs hold; else one per core, each on
    one thread: on 2 cores, 2 workers x 1 thread trained 1.75x the updates per second of 1 worker x 2
    threads (benchmarks/bench_workers.py)]."""
    threads_per_run: int = 1
    """Torch / OpenMP threads of each run (--threads, OMP_NUM_THREADS)."""
    gpus_per_run: int = 0
    """GPUs of each run (0: leave CUDA_VISIBLE_DEVICES alone; more than 1: torchrun)."""

    def check(self) -> None:
        if self.workers is not None:
            check_count(self.workers, "workers")
        check_count(self.threads_per_run, "threads per run")
        check_count(self.gpus_per_run, "GPUs per run", low=0)

    @property
    def threads(self) -> int:
        return self.threads_per_run

    def slots(self) -> int:
        """`workers`, or its default (the field's doc)."""
        if self.workers is not None:
            return self.workers
        if self.gpus_per_run:
            import torch

            return max(1, torch.cuda.device_count() // self.gpus_per_run)
        return usable_cores()

    def execute(self, jobs: Sequence[SweepRun], report: Report | None = None) -> list[Outcome]:
        pending = list(enumerate(jobs))
        outcomes: list[Outcome | None] = [None] * len(jobs)
        running: dict = {}
        stop = threading.Event()
        guard = threading.Lock()
        fatal: list[ForkServerDied] = []

        def stop_all() -> None:
            stop.set()
            for process in list(running.values()):
                process.send_signal(signal.SIGINT)  # the trainer saves `latest` and exits 130

        def slot(index: int) -> None:
            env = {}
            if self.gpus_per_run:
                first = index * self.gpus_per_run
                env["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, range(first, first + self.gpus_per_run)))
            try:
                while not stop.is_set():
                    with guard:
                        if not pending:
                            return
                        position, job = pending.pop(0)
                    try:
                        outcomes[position] = _run_guarded(job, env, running)
                    except ForkServerDied as exc:  # every run forked from it is orphaned: stop them all
                        fatal.append(exc)
                        stop_all()
                        return
                    if report is not None:
                        report(outcomes[position])
            finally:
                ended[index].set()

        # Slots signal their end with events, not Thread.join: on Python 3.11 a join that a Ctrl-C
        # interrupts can leave the thread marked as ended, and the next join returns while it runs.
        ended = [threading.Event() for _ in range(self.slots())]
        for index in range(len(ended)):
            threading.Thread(target=slot, args=(index,), daemon=True).start()
        # SIGINT and SIGTERM (Ctrl-C, a scheduler's stop, `kill`) stop the sweep, whatever the handlers
        # it inherited: without this, SIGTERM would kill the sweep at once and leave its runs, each in a
        # session of its own, training unwatched, and a sweep started from a script in the background
        # (which starts with SIGINT ignored) would not stop on SIGINT at all.
        previous = stop_on_signals()
        try:
            for event in ended:
                while not event.wait(0.2):
                    pass
        except KeyboardInterrupt:
            restore(previous)
            stop_all()
            for event in ended:  # each slot records its run's exit before it ends
                event.wait()
            raise
        restore(previous)
        if fatal:
            raise fatal[0]
        return [outcome for outcome in outcomes if outcome is not None]


def _run_guarded(job: SweepRun, env: dict, running: dict) -> Outcome:
    """`run_one`, with a failure of the engine itself (an unwritable record or log, a process that
    cannot start) recorded as this run's failure instead of ending the worker and its queue."""
    try:
        return run_one(job, env, running)
    except ForkServerDied as exc:
        # Not this run's failure: the process that started it is gone. A rerun resumes the run.
        message = f"{exc} while run {job.name} was running; it was stopped at its last save: {RERUN}"
        failed(job, None, message)
        raise ForkServerDied(message) from None
    except Exception as exc:
        return failed(job, None, f"the sweep could not run it: {first_line(exc)}")


@dataclasses.dataclass(frozen=True)
class SlurmExecutor:
    """Runs jobs as one Slurm job array through submitit (module docstring)."""

    partition: str | None = None
    """Slurm partition [default: the cluster's]."""
    gpus_per_run: int = 0
    """GPUs of each run's node (more than 1: torchrun, one process per GPU)."""
    cpus_per_run: int = 1
    """CPUs of each run's task."""
    time_min: int = 1440
    """Time limit of each run's task, in minutes."""
    array_parallelism: int = 256
    """Array tasks running at the same time."""
    cluster: Literal["slurm", "local"] = "slurm"
    """submitit's executor kind: "slurm", or "local" (the same array as processes here; for tests)."""

    def check(self) -> None:
        import_submitit()
        check_count(self.gpus_per_run, "GPUs per run", low=0)
        for name in ("cpus_per_run", "time_min", "array_parallelism"):
            check_count(getattr(self, name), name.replace("_", " "))
        if self.cluster == "slurm" and shutil.which("sbatch") is None:
            raise BiosrecallError("--executor slurm needs Slurm, and this machine has no sbatch command")

    @property
    def threads(self) -> int:
        return max(1, self.cpus_per_run // max(1, self.gpus_per_run))

    def execute(self, jobs: Sequence[SweepRun], report: Report | None = None) -> list[Outcome]:
        submitit = import_submitit()
        executor = submitit.AutoExecutor(folder=jobs[0].bookkeeping / "submitit", cluster=self.cluster)
        executor.update_parameters(
            name="biosrecall-sweep",
            timeout_min=self.time_min,
            nodes=1,
            tasks_per_node=1,
            gpus_per_node=self.gpus_per_run,
            cpus_per_task=self.cpus_per_run,
            slurm_partition=self.partition,
            slurm_array_parallelism=self.array_parallelism,
        )
        submitted = executor.map_array(run_one, list(jobs))
        outcomes = []
        try:
            for job, task in zip(jobs, submitted, strict=True):
                outcomes.append(_result(job, task))
                if report is not None:
                    report(outcomes[-1])
        except KeyboardInterrupt:
            ids = ", ".join(task.job_id for task in submitted)
            raise KeyboardInterrupt(f"the array keeps running (jobs {ids}); see `sweep status`") from None
        return outcomes


def _result(job: SweepRun, task) -> Outcome:
    """The task's outcome; a task that died without one (time limit, node failure) is recorded failed."""
    try:
        return task.result()
    except Exception as exc:  # submitit raises its own job errors with the task's stderr appended
        return failed(job, None, f"job {task.job_id}: {first_line(exc)}")


def import_submitit():
    """submitit, or the one-line error naming the extra that installs it."""
    try:
        import submitit
    except ImportError:
        raise BiosrecallError("the slurm executor needs submitit: pip install 'biosrecall[slurm]'") from None
    return submitit


def make_executor(kind: str, defaults: dict, given: dict) -> LocalExecutor | SlurmExecutor:
    """The executor of `kind` ("local", "slurm") from a spec's [executor] `defaults` and the command
    line's `given` values (None: not given); a command-line option of the other kind is refused."""
    chosen, other = (LocalExecutor, "slurm") if kind == "local" else (SlurmExecutor, "local")
    own = {item.name for item in dataclasses.fields(chosen)}
    wrong = [name for name, value in given.items() if value is not None and name not in own]
    if wrong:
        raise BiosrecallError(f"--{wrong[0].replace('_', '-')} applies to --executor {other} only")
    values = {**defaults, **{k: v for k, v in given.items() if v is not None}}
    return chosen(**{k: v for k, v in values.items() if k in own})
