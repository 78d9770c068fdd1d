"""Run a list of training runs (and the evaluations after each) through an executor.

    from biosrecall.sweep.engine import run_sweep
    from biosrecall.sweep.executors import LocalExecutor
    from biosrecall.sweep.jobs import Evaluation, SweepRun
    from biosrecall.train.config import TrainConfig

    runs = [SweepRun(f"seed{s}/{name}", "train", TrainConfig(schedule=spec, seed=s, budget_of="fixed:4:800"),
                     {"data": "data/bios"})
            for s in (0, 1) for name, spec in (("fixed_4", "fixed:4"), ("uniform", "uniform:1-16"))]
    result = run_sweep("runs/study", runs, [Evaluation("recall-curve", {"max_depth": 64})],
                       LocalExecutor(workers=2, threads_per_run=1), report=print)
    result.failed          # the Outcomes of runs that exited non-zero (each recorded, none raised)

`run_sweep` checks everything first (the executor's settings, names, every run's config, preset and
data folder, the evaluations' options by their command's own rules), so a mistake is one
`BiosrecallError` with nothing launched or written. Then, holding
the sweep's lock (OUT/..sweep.lock: a second `run_sweep` on the same folder fails at once), it hands
one job per run to the executor. Rerunning the same sweep is always safe: finished runs are skipped,
interrupted ones resumed, failed ones tried again (see `biosrecall.sweep.worker`).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from biosrecall.errors import BiosrecallError
from biosrecall.locking import output_lock
from biosrecall.sizing import format_seconds
from biosrecall.sweep.executors import LocalExecutor, SlurmExecutor
from biosrecall.sweep.jobs import BOOKKEEPING, Evaluation, SweepRun, build_jobs, check_runs
from biosrecall.sweep.records import run_state
from biosrecall.sweep.worker import Outcome
from biosrecall.train.run_folder import RunFolder

Executor = LocalExecutor | SlurmExecutor


@dataclass(frozen=True)
class SweepResult:
    outcomes: list[Outcome]

    @property
    def failed(self) -> list[Outcome]:
        return [outcome for outcome in self.outcomes if outcome.state == "failed"]

    def summary(self) -> str:
        """One line of counts per action, then one line per failed run (exit code, error, log)."""
        counts = Counter(
            "failed" if outcome.state == "failed" else outcome.action for outcome in self.outcomes
        )
        lines = [f"{len(self.outcomes)} runs: " + ", ".join(f"{n} {key}" for key, n in counts.items())]
        lines += [
            f"failed {outcome.name} (exit {outcome.exit_code}): {outcome.error}  [log {outcome.log}]"
            for outcome in self.failed
        ]
        return "\n".join(lines)


def prepare(
    out: str | Path, runs: Sequence[SweepRun], evaluations: Sequence[Evaluation], executor: Executor
) -> list[SweepRun]:
    """Every check (module docstring), then the jobs; nothing is written."""
    executor.check()
    check_runs(runs, evaluations)
    jobs = build_jobs(out, runs, evaluations, executor.threads, executor.gpus_per_run)
    check_out(out, jobs)
    return jobs


def check_out(out: str | Path, jobs: Sequence[SweepRun]) -> None:
    """Refuse a sweep whose folder is, or lies inside, what a run reads (its dataset, tokenizer, parent
    run): its bookkeeping and runs would be written into the input, as `train --out DATA` is refused.
    (An input inside the sweep's folder, a study's own dataset, is fine: no run is named after it.)"""
    resolved = Path(out).resolve()
    for job in jobs:
        for key, value in job.task.items():
            if not isinstance(value, Path):  # `build_jobs` made each path option a Path
                continue
            source = value.resolve()
            if resolved == source or source in resolved.parents:
                relation = "is" if resolved == source else "lies inside"
                raise BiosrecallError(
                    f"the sweep's out {out} {relation} the {key} of run {job.name}, {value}; "
                    "choose another out"
                )


def run_sweep(
    out: str | Path,
    runs: Sequence[SweepRun],
    evaluations: Sequence[Evaluation] = (),
    executor: Executor | None = None,
    report: Callable[[Outcome], None] | None = None,
) -> SweepResult:
    """Bring every run to done (module docstring); `report` is called with each outcome as it comes,
    its `progress` saying how many runs are done and how long the rest should take."""
    executor = executor or LocalExecutor()
    jobs = prepare(out, runs, evaluations, executor)
    with output_lock(Path(out) / BOOKKEEPING, clean=False):
        (Path(out) / BOOKKEEPING).mkdir(parents=True, exist_ok=True)
        return SweepResult(executor.execute(jobs, None if report is None else counted(report, len(jobs))))


def counted(report: Callable[[Outcome], None], total: int) -> Callable[[Outcome], None]:
    """`report` with each outcome's `progress` filled in: runs ended out of `total`, and the time the
    rest should take at the rate runs have ended so far (runs already finished cost nothing and are
    left out of the rate)."""
    start, ended, timed = time.monotonic(), 0, 0

    def each(outcome: Outcome) -> None:
        nonlocal ended, timed
        ended += 1
        timed += outcome.action != "skipped"
        left = total - ended
        rate = (time.monotonic() - start) / timed if timed else 0.0
        eta = f", about {format_seconds(rate * left)} left" if left and timed else ""
        report(replace(outcome, progress=f"[{ended}/{total} runs{eta}]"))

    return each


def planned_actions(jobs: Sequence[SweepRun]) -> list[tuple[str, str, list[str]]]:
    """(name, what a run would do now, its training command) for a dry run; nothing is launched."""
    plan = []
    for job in jobs:
        if RunFolder(job.run_dir).finished():
            evaluated = job.eval_key is None or run_state(job.record).evaluated == job.eval_key
            plan.append((job.name, "skip" if evaluated else "evaluate", []))
            continue
        resume = RunFolder(job.run_dir).latest_checkpoint() is not None
        plan.append((job.name, "resume" if resume else "train", job.train_command(resume)))
    return plan
