"""A study's runs through the sweep engine: each run a `biosrecall train` process, several at once.

    executor = study_executor(workers=2, threads=1, device="cpu")   # figure1 --workers 2 --threads 1
    paths = train_study_runs(out / "runs", specs, options_of, executor, report=print)

`figure1` decides what to train (`biosrecall.experiments.study`, `.budgets`) and builds each run's
`TrainConfig` once (`options_of(spec)`: the values of the run's spec, `biosrecall.sweep.run_spec`).
This module hands the runs to `biosrecall.sweep.run_sweep`, which starts each as `biosrecall train
--config runs/.sweep/<run>.toml`, as in any sweep, so a study gets what every sweep gets: worker slots
(2 workers x 1 thread trained 1.75x the updates per second of 1 x 2 on 2 cores), finished runs
skipped, interrupted ones resumed, a record and a log per run under runs/.sweep/. Runs that start
from nothing (trunks, independent runs) go first; a branch starts only once its trunk has finished,
from the state the trunk kept at the branch point, or from scratch when the trunk kept none there (a
budget added after the trunk finished), which trains the same run.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from biosrecall.errors import BiosrecallError
from biosrecall.experiments.study import RunSpec
from biosrecall.sweep import LocalExecutor, SweepRun, run_sweep
from biosrecall.sweep.jobs import BOOKKEEPING
from biosrecall.train.layout import finished, latest_checkpoint, saved_states
from biosrecall.train.loop import Interrupted

OptionsOf = Callable[[RunSpec], dict[str, Any]]


class StudyRunFailed(RuntimeError):
    """A run of the study exited with an error (its log says why); the others were brought to done."""


def train_study_runs(
    runs_dir: Path,
    specs: Sequence[RunSpec],
    options_of: OptionsOf,
    executor: LocalExecutor,
    report: Callable[[Any], None] | None = None,
) -> dict[RunSpec, Path]:
    """Bring every spec's run (folder runs_dir/<spec.folder>) to done; returns spec -> run folder.

    `report` gets a line (str) before each wave with runs left to train, then each run's `Outcome`.
    Raises `Interrupted` naming the runs that were stopped (Ctrl-C), and `StudyRunFailed` naming each
    failed run, its error line and its log, after every other run of its wave has finished."""
    waves = [[s for s in specs if s.branch is None], [s for s in specs if s.branch is not None]]
    for wave in waves:
        left = sum(not finished(runs_dir / s.folder) for s in wave)
        if not left:
            continue
        if report is not None:
            report(
                f"training {left} run(s), {executor.slots()} at a time on {executor.threads} thread(s) "
                f"each; progress in {runs_dir / BOOKKEEPING}/<run>.log"
            )
        runs = [SweepRun(str(s.folder), "train", _options(runs_dir, s, options_of)) for s in wave]
        try:
            result = run_sweep(runs_dir, runs, (), executor, report)
        except KeyboardInterrupt:
            raise Interrupted(_stopped(runs_dir, wave)) from None
        if result.failed:
            raise StudyRunFailed("; ".join(_failure(outcome) for outcome in result.failed))
        busy = [outcome.name for outcome in result.outcomes if outcome.state == "busy"]
        if busy:
            raise BiosrecallError(
                f"run {busy[0]} is being trained by another process; let it finish (or stop it), then "
                "rerun the same command"
            )
    return {spec: runs_dir / spec.folder for spec in specs}


def _options(runs_dir: Path, spec: RunSpec, options_of: OptionsOf) -> dict[str, Any]:
    """The run's spec values, with `from`/`at_update` for a branch whose trunk kept that state."""
    options = options_of(spec)
    if spec.branch is None or finished(runs_dir / spec.folder):
        return options
    trunk, at = runs_dir / spec.branch[0], spec.branch[1]
    if at in saved_states(trunk):
        return {**options, "from": str(trunk), "at_update": at}
    return options


def _stopped(runs_dir: Path, wave: Sequence[RunSpec]) -> str:
    """Which runs the interrupt caught mid-way: unfinished, with saved progress."""
    caught = [
        str(s.folder)
        for s in wave
        if not finished(runs_dir / s.folder) and latest_checkpoint(runs_dir / s.folder) is not None
    ]
    if not caught:
        return "interrupted"
    return f"interrupted while training {', '.join(caught)}; " + (
        "its progress is saved" if len(caught) == 1 else "their progress is saved"
    )


def _failure(outcome) -> str:
    return f"run {outcome.name} failed (exit {outcome.exit_code}): {outcome.error} [log {outcome.log}]"


def study_executor(workers: int | None, threads: int | None, device: str) -> LocalExecutor:
    """The local executor of a study: `workers` runs at once [default: one per GPU on CUDA, else one
    per core], each on `threads` threads [default: the cores shared among the workers]."""
    import torch

    from biosrecall.sweep.executors import usable_cores

    # The device name itself is checked with the rest of the settings, before anything runs.
    gpus = 1 if device.startswith("cuda") or (device == "auto" and torch.cuda.is_available()) else 0
    slots = LocalExecutor(workers=workers, gpus_per_run=gpus).slots()
    executor = LocalExecutor(workers, threads or max(1, usable_cores() // slots), gpus)
    executor.check()
    return executor
