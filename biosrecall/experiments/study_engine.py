"""A study's runs through the sweep engine: each run a `biosrecall train` process, several at once.

    executor = study_executor(workers=2, threads=1, device="cpu")   # figure1 --workers 2 --threads 1
    train_study_runs(out / "runs", runs, executor, report=print)     # trunks first, then branches
    sweep_study_runs(out / "runs", runs, evaluations, executor, report=print)   # the lm study's

`figure1` and `capacity` decide what to train (`biosrecall.experiments.study`, `.budgets`) and describe
each run once, as a `SweepRun`: its name, `TrainConfig`, task and labels. This module hands the runs to
`biosrecall.sweep.run_sweep`, which writes each as a run spec (`biosrecall.sweep.run_spec`) and starts
it as `biosrecall train --config runs/.sweep/.specs/<run>.json`, as in any sweep, so a study gets
what every sweep gets: worker slots (2 workers x 1 thread trained 1.75x the updates per second of
1 x 2 on 2 cores), finished runs skipped, interrupted ones resumed, a record and a log per run under
runs/.sweep/. Runs that start
from nothing (trunks, independent runs) go first; a branch (a run whose task names its trunk's run as
`from`, and `at_update`) starts only once its trunk has finished, from the state the trunk kept at the
branch point, or from scratch when the trunk kept none there (a budget added after the trunk
finished), which trains the same run.

Where the runs go is `study_executor`'s: worker slots here, or a Slurm job array (`--executor slurm`
and `sweep run`'s Slurm options, `biosrecall.sweep.executors.make_executor`). A study whose runs
fail says so in one line of bounded length: the first failed run, its error and log, and how many
others failed with the folder of their logs.
"""

from __future__ import annotations

import dataclasses
import re
import signal
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from biosrecall.atomic import atomic_write_bytes, keep_outputs
from biosrecall.errors import MAX_MESSAGE, BiosrecallError, bounded
from biosrecall.sweep.engine import Executor, run_sweep
from biosrecall.sweep.executors import LocalExecutor, make_executor, usable_cores
from biosrecall.sweep.jobs import BOOKKEEPING, Evaluation, SweepRun
from biosrecall.sweep.records import lock_holder
from biosrecall.train.run_folder import RunFolder
from biosrecall.train.stops import Interrupted
from biosrecall.train.trainer import RESUME_ADVICE


class StudyRunFailed(RuntimeError):
    """A run of the study exited with an error (its log says why); the others were brought to done."""


class RunKilled(BiosrecallError):
    """A run's process was killed by a signal from outside the study (the out-of-memory killer, a
    `kill -9`): not the run's error, so one line naming the run and the signal, and a rerun resumes it."""


def train_study_runs(
    runs_dir: Path,
    runs: Sequence[SweepRun],
    executor: Executor,
    report: Callable[[Any], None] | None = None,
    evaluations: Sequence[Evaluation] = (),
    done: Callable[[Path], bool] | None = None,
) -> None:
    """Bring every run (folder runs_dir/<run.name>) and its `evaluations` to done: first the runs that
    start from nothing, then the branches, each from its trunk's kept state (module docstring). A run
    `done` accepts (default: a finished one) is left alone; a run listed twice trains once.

    `report` gets a line (str) before each wave with runs left to train, then each run's `Outcome`.
    Raises `Interrupted` naming the runs that were stopped (Ctrl-C), and `StudyRunFailed` naming each
    failed run, its error line and its log, after every other run of its wave has finished, or
    `RunKilled` (a `BiosrecallError`) when a signal from outside ended every failed run; a dead fork
    server is `biosrecall.warm.ForkServerDied`. Error lines are in the study's words
    (`study_words`)."""
    done = done or (lambda run_dir: RunFolder(run_dir).finished())
    runs = list({run.name: run for run in runs}.values())
    for branches in (False, True):
        left = [run for run in runs if ("from" in run.task) == branches and not done(runs_dir / run.name)]
        if not left:
            continue
        if report is not None:
            report(
                f"training {len(left)} run(s), {describe_executor(executor)}; progress in "
                f"{runs_dir / BOOKKEEPING}/<run>.log"
            )
        sweep_study_runs(runs_dir, [from_trunk(runs_dir, run) for run in left], evaluations, executor, report)


def sweep_study_runs(
    runs_dir: Path,
    runs: Sequence[SweepRun],
    evaluations: Sequence[Evaluation],
    executor: Executor,
    report: Callable[[Any], None] | None = None,
) -> None:
    """Bring `runs` (and their `evaluations`) to done through the sweep engine, with a study's errors
    (`train_study_runs`): the LM study's runs come here directly, as `lm train` and `lm eval`."""
    try:
        result = run_sweep(runs_dir, runs, evaluations, executor, _in_study_words(report))
    except KeyboardInterrupt:
        raise Interrupted(_stopped(runs_dir, [run.name for run in runs])) from None
    if result.failed:
        failed = [study_words(outcome) for outcome in result.failed]
        if all(_killed(outcome) for outcome in failed):
            killed = _kill(failed[0]) + _others(failed, "were killed", runs_dir) + f"; {RERUN}"
            raise RunKilled(bounded(killed, STUDY_MESSAGE))
        others = _others(failed, "failed", runs_dir)
        room = STUDY_MESSAGE - len(_failure(failed[0], "") + others)  # what the error's excerpt may take
        failure = _failure(failed[0], _cut(failed[0].error or "", room)) + others
        raise StudyRunFailed(bounded(failure, STUDY_MESSAGE))
    busy = [outcome.name for outcome in result.outcomes if outcome.state == "busy"]
    if busy:
        raise _busy(busy[0])


def _busy(name) -> BiosrecallError:
    return BiosrecallError(
        f"run {name} is being trained by another process; let it finish (or stop it), then rerun the "
        "same command"
    )


def write_study_record(path: Path, text: str) -> None:
    """Write a study's record (`path`: OUT/<record>.json) before its first run, unless it holds these
    very bytes already (a rerun refused later then leaves the output as it found it). From here on
    OUT is the study's output: no later failure or interrupt of this call takes back the record or
    what else it wrote into OUT (`atomic.keep_outputs`), so a first call stopped at any moment, the
    last step included, is continued by rerunning it."""
    data = text.encode("utf-8")
    try:
        unchanged = path.is_file() and not path.is_symlink() and path.read_bytes() == data
    except OSError:  # unreadable: the write below says why, or replaces it
        unchanged = False
    if not unchanged:
        atomic_write_bytes(path, data)
    keep_outputs(path.parent)


def refuse_busy_runs(runs_dir: Path) -> None:
    """Refuse, before a study writes anything, an output one of whose runs another live process holds
    (a `train --resume` started by hand, say): the refusal `train_study_runs` would give once the
    study had written its record and datasets, given first."""

    if not runs_dir.is_dir():
        return
    for lock in sorted(runs_dir.rglob(".*.lock")):
        run_dir = lock.with_name(lock.name[1 : -len(".lock")])
        if run_dir.name != BOOKKEEPING and lock_holder(run_dir) is not None:
            raise _busy(run_dir.relative_to(runs_dir))


# The trainer's advice and what follows it up to the end of its clause ("once the problem is fixed").
_ADVICE = re.compile(r"[;:,]?\s*" + re.escape(RESUME_ADVICE) + r"(?: once the problem is fixed)?")


def study_words(outcome):
    """A run's outcome as a study reports it: without the trainer's advice to pass --resume, which is
    wrong for a study (the study resumes its runs itself; its own line says to rerun its command)."""
    if not outcome.error or RESUME_ADVICE not in outcome.error:
        return outcome
    return dataclasses.replace(outcome, error=_ADVICE.sub("", outcome.error))


def _in_study_words(report):
    if report is None:
        return None
    return lambda outcome: report(outcome if isinstance(outcome, str) else study_words(outcome))


def from_trunk(runs_dir: Path, run: SweepRun) -> SweepRun:
    """A branch as its process starts it: from its trunk's folder when the trunk kept the state at
    `at_update`, else (or once the branch has finished) from scratch, which trains the same run."""
    if "from" not in run.task:
        return run
    task = {key: value for key, value in run.task.items() if key not in ("from", "at_update")}
    trunk = runs_dir / run.task["from"]
    if (
        not RunFolder(runs_dir / run.name).finished()
        and run.task["at_update"] in RunFolder(trunk).saved_states()
    ):
        task.update({"from": trunk, "at_update": run.task["at_update"]})
    return dataclasses.replace(run, task=task)


def _stopped(runs_dir: Path, names: Sequence[str]) -> str:
    """Which runs the interrupt caught mid-way: unfinished, with saved progress."""
    caught = [
        name
        for name in names
        if not RunFolder(runs_dir / name).finished()
        and RunFolder(runs_dir / name).latest_checkpoint() is not None
    ]
    if not caught:
        return "interrupted"
    return f"interrupted while training {', '.join(caught)}; " + (
        "its progress is saved" if len(caught) == 1 else "their progress is saved"
    )


RERUN = "the other runs and what the killed ones saved are kept: rerun the same command to continue"


def _killed(outcome) -> bool:
    """A run whose process a signal ended (exit status -N), not one that reported an error."""
    return isinstance(outcome.exit_code, int) and outcome.exit_code < 0


def _kill(outcome) -> str:

    try:
        name = signal.Signals(-outcome.exit_code).name
    except ValueError:
        name = f"signal {-outcome.exit_code}"
    return f"run {outcome.name} was killed by {name} [log {outcome.log}]"


def _failure(outcome, error: str) -> str:
    return f"run {outcome.name} failed (exit {outcome.exit_code}): {error} [log {outcome.log}]"


STUDY_MESSAGE = MAX_MESSAGE - 100
"""The longest message of a failed study: room for the command's "error: " and its advice to rerun."""


def _others(failed: Sequence, what: str, runs_dir: Path) -> str:
    """How many runs beside the first `what`, and the folder of their logs ("" for none): the message
    names one run, however many failed (a leaderboard may fail all of them at once)."""
    if len(failed) < 2:
        return ""
    return f"; {len(failed) - 1} other run(s) {what} too, their logs in {Path(runs_dir) / BOOKKEEPING}/"


def _cut(text: str, room: int) -> str:
    """`text`, or its first characters and a marker when longer than `room` (its log holds it all)."""
    return text if len(text) <= room else text[: max(room - 6, 40)] + " [...]"


def study_executor(
    workers: int | None = None, threads: int | None = None, device: str = "cpu", kind: str = "local", **given
) -> Executor:
    """The executor of a study. Local (`kind` "local"): `workers` runs at once [default: one per GPU on
    CUDA, else one per core], each on `threads` threads [default: the cores shared among the workers].
    "slurm": a job array through submitit, `given` holding `sweep run`'s Slurm options by name
    (`partition`, `cpus_per_run`, `time_min`, `array_parallelism`; None: its default), as
    `sweep.executors.make_executor` reads them. Either way each run gets `gpus_per_run` GPUs
    [default: 1 on CUDA, else 0]."""

    if kind == "slurm" and threads is not None:
        raise BiosrecallError("--threads applies to --executor local only (slurm: --cpus-per-run)")
    # The device name itself is checked with the rest of the settings, before anything runs.
    cuda = device.startswith("cuda") or (device == "auto" and torch.cuda.is_available())
    defaults = {"gpus_per_run": 1 if cuda else 0}
    executor = make_executor(kind, defaults, {"workers": workers, "threads_per_run": threads, **given})
    executor.check()
    if isinstance(executor, LocalExecutor) and threads is None:
        executor = dataclasses.replace(executor, threads_per_run=max(1, usable_cores() // executor.slots()))
    return executor


def executor_slots(executor: Executor) -> int:
    """Runs at once: a local executor's workers, a Slurm array's parallelism."""
    return executor.slots() if isinstance(executor, LocalExecutor) else executor.array_parallelism


def describe_executor(executor: Executor) -> str:
    """Where and how many runs go at once, for a study's plan and progress."""
    gpus = f", {executor.gpus_per_run} GPU(s)" if executor.gpus_per_run else ""
    if isinstance(executor, LocalExecutor):
        return f"{executor.slots()} at a time on {executor.threads} thread(s){gpus} each"
    partition = executor.partition or "the default partition"
    return (
        f"as a Slurm job array on {partition}, up to {executor.array_parallelism} at a time, "
        f"{executor.cpus_per_run} CPU(s){gpus} and {executor.time_min} min each"
    )


def seconds_per_flop_of(run: SweepRun, threads: int, measured: dict) -> float | None:
    """Seconds per modeled FLOP of `run`'s model on this machine's CPU at `threads` threads, timed as
    the trainer times its "est. time" (`trainer.seconds_per_flop`), from the data's manifest and
    nothing else of it; None for a run without a preset. `measured` (the caller's, one plan's) caches
    a model's value."""
    from biosrecall.files import read_json_object
    from biosrecall.lm.task import LM_VOCABULARY
    from biosrecall.model import LoopedTransformer
    from biosrecall.train.config import resolve_seq_len
    from biosrecall.train.trainer import BIOS_VOCABULARY, build_model_config, run_recipe, seconds_per_flop

    preset = run.task.get("preset")
    if preset is None:
        return None
    manifest = read_json_object(Path(run.task["data"]) / "manifest.json", "dataset manifest")
    rule = LM_VOCABULARY if run.command == "lm train" else BIOS_VOCABULARY
    model_config = build_model_config(
        preset, int(manifest["tokenizer"]["vocab_size"]), run.task.get("model_overrides"), rule,
        run_recipe(run.config),
    )  # fmt: skip
    seq_len = resolve_seq_len(run.config, model_config, preset)
    key = (repr(model_config), run.config.batch_size, seq_len, threads)
    if key not in measured:
        before = torch.get_num_threads()
        torch.set_num_threads(threads)
        try:
            model = LoopedTransformer(model_config)
            measured[key] = seconds_per_flop(model, run.config.batch_size, seq_len)
        finally:
            torch.set_num_threads(before)
    return measured[key]
