"""What a sweep runs: named runs of one training command and the evaluations after each.

    config = TrainConfig(schedule="fixed:4", updates=300, seed=0)
    runs = [SweepRun("seed0/fixed_4", "train", config, {"data": "data/bios", "preset": "bios-tiny"})]
    evaluations = [Evaluation("recall-curve", {"max_depth": 64})]
    check_runs(runs, evaluations)             # names, configs, presets, data folders, evaluation options
    jobs = build_jobs("runs/sweep", runs, evaluations, threads=1, gpus=0)   # the same runs, placed

A `SweepRun` is the one description of a run, from the study or sweep spec that made it to the worker
that trains it: the caller gives its name, command, TrainConfig, task and labels, and `build_jobs`
places it (the sweep's folder, its evaluations' words, threads and GPUs), which is all a worker needs,
as plain data that travels to cluster nodes.

A run's folder is OUT/<name>; a name is one or more `/`-separated parts of letters, digits and
`._=,+-` (no part starting with a dot). Everything the sweep itself keeps lies under OUT/.sweep/: per
run its run spec (`.specs/<name>.json`, the file its `train --config` reads: `biosrecall.sweep.run_spec`), a
record (`<name>.json`: state, exit code, error line, times), the log of its processes (`<name>.log`)
and, for `recall-curve`, that command's output folder (`eval/<name>/`).
"""

from __future__ import annotations

import dataclasses
import fnmatch
import hashlib
import json
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from biosrecall.errors import BiosrecallError
from biosrecall.model import get_preset
from biosrecall.sweep import commands
from biosrecall.sweep.run_spec import SPECS, TASK_KEYS, run_spec_text
from biosrecall.train.config import TrainConfig

BOOKKEEPING = ".sweep"
PROGRAM = [sys.executable, "-m", "biosrecall"]
"""How a run's processes start biosrecall: this interpreter, as `python -m biosrecall`."""
_PART = re.compile(r"[A-Za-z0-9_=,+-][A-Za-z0-9._=,+-]*")
MAX_PART = 200  # file systems refuse names over 255 bytes; leave room for suffixes


@dataclasses.dataclass(frozen=True)
class SweepRun:
    """One run of a sweep: what the caller describes, then where and how the engine runs it."""

    name: str
    """Its folder under the sweep's output folder (see the module docstring for the allowed names)."""
    command: str = "train"
    """The training command: "train" (bioS) or "lm train"."""
    config: TrainConfig = dataclasses.field(default_factory=TrainConfig)
    """The run's trainer settings; its `threads` is the executor's."""
    task: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    """What the trainer is given beside the config: `data` (the dataset or prepared folder) and any of
    preset, model_overrides (a dict), from and at_update (a branch), tokenizer, quiet, no_verify
    (`biosrecall.sweep.run_spec.TASK_KEYS`); relative paths are relative to the current folder."""
    labels: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    """What tells this run apart (grid values, entry name; a study's name, label, role, budget):
    columns of `collect`'s table."""
    out: Path | None = None
    """The sweep's output folder, absolute; set by `build_jobs`, like what follows."""
    eval_args: tuple[tuple[str, ...], ...] = ()
    """`biosrecall` words of each evaluation."""
    threads: int = 1
    """Torch and OpenMP threads per process."""
    gpus: int = 0
    """More than one: the run is started under torchrun with one process per GPU."""

    @property
    def run_dir(self) -> Path:
        return self.out / self.name

    @property
    def bookkeeping(self) -> Path:
        return self.out / BOOKKEEPING

    @property
    def record(self) -> Path:
        return self.bookkeeping / f"{self.name}.json"

    @property
    def log(self) -> Path:
        return self.bookkeeping / f"{self.name}.log"

    @property
    def spec(self) -> Path:
        """The run's spec: under the sweep's bookkeeping, beside its record and log."""
        return self.bookkeeping / SPECS / f"{self.name}.json"

    @property
    def spec_text(self) -> str:
        """The run spec (its TrainConfig, task and --out as JSON), written to `spec` before the run is
        trained."""
        return run_spec_text(self.command, self.config, {**self.task, "out": self.run_dir})

    def train_command(self, resume: bool) -> list[str]:
        """The training process's words: `biosrecall <command> --config <spec>`, fresh or resumed, on the
        run's threads; with more than one GPU, under torchrun."""
        tail = [*self.command.split(), "--config", str(self.spec), *(["--resume"] if resume else [])]
        tail += ["--threads", str(self.threads)]
        if self.gpus > 1:
            launcher = ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(self.gpus)]
            return [sys.executable, *launcher, "-m", "biosrecall", *tail]
        return [*PROGRAM, *tail]

    @property
    def eval_key(self) -> str | None:
        """Fingerprint of the evaluations; a done run evaluated with other settings is evaluated again."""
        if not self.eval_args:
            return None
        return hashlib.sha256(json.dumps(self.eval_args).encode()).hexdigest()[:16]


@dataclasses.dataclass(frozen=True)
class Evaluation:
    """A command run on each run folder once the run has finished."""

    command: str
    """"recall-curve" (bioS runs), "lm eval" or "lm harness" (language-model runs)."""
    options: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    """That command's option values keyed by option name (the run folder is its argument)."""


def check_runs(runs: Sequence[SweepRun], evaluations: Sequence[Evaluation] = ()) -> None:
    """Refuse the sweep unless every run and evaluation would start: names valid and unique (also as
    folders: no run inside another), configs, presets and data folders (`_check_run`), evaluation
    options accepted by their command (see `commands`)."""
    check_names([run.name for run in runs])
    for run in runs:
        _check_run(run)
    for evaluation in evaluations:
        _check_evaluation(evaluation, {run.command for run in runs})


def check_names(names: Sequence[str]) -> None:
    """Refuse run names that are not folder names (module docstring), repeat, or nest one run's folder
    in another's; and a sweep without runs."""
    if not names:
        raise BiosrecallError("the sweep has no runs")
    seen: set[str] = set()
    for name in names:
        parts = name.split("/") if isinstance(name, str) else [""]
        if any(not _PART.fullmatch(part) or len(part) > MAX_PART for part in parts):
            raise BiosrecallError(
                f"run name {name!r} is not a folder name: use parts of letters, digits and ._=,+- "
                f"separated by /, none starting with a dot, each at most {MAX_PART} characters"
            )
        if name in seen:
            raise BiosrecallError(f"two runs are named {name}; give them different names")
        seen.add(name)
    for name in seen:
        parents = ["/".join(name.split("/")[:i]) for i in range(1, name.count("/") + 1)]
        if any(parent in seen for parent in parents):
            raise BiosrecallError(f"run {name} would lie inside the folder of another run")


def _check_run(run: SweepRun) -> None:
    """What `biosrecall <command> --config SPEC` checks before it opens anything: the config (run size
    given once, trackers installed), the model preset and the data folder."""
    what = f"run {run.name}"
    unknown = sorted(set(run.task) - {"data", *TASK_KEYS})
    if unknown:
        raise BiosrecallError(
            f"{what}: unknown task key(s) {', '.join(unknown)}; known: data, {', '.join(TASK_KEYS)}"
        )
    with commands.located(what):
        run.config.validate()
        if run.task.get("preset") is not None:
            get_preset(run.task["preset"])
    data = run.task.get("data")
    if data is None or not Path(data).is_dir():
        raise BiosrecallError(f"{what}: data folder {data} does not exist")


def _check_evaluation(evaluation: Evaluation, trainers: set[str]) -> None:
    """The evaluation reads the sweep's runs, and its command parses its options (a spec's option
    names were checked as the spec was read)."""
    reads = commands.EVALUATIONS[evaluation.command]
    if trainers != {reads}:
        raise BiosrecallError(f"{evaluation.command} evaluates runs of `{reads}` only")
    commands.check_evaluation(evaluation.command, evaluation.options, evaluation.command)


def build_jobs(
    out: str | Path,
    runs: Sequence[SweepRun],
    evaluations: Sequence[Evaluation] = (),
    threads: int = 1,
    gpus: int = 0,
) -> list[SweepRun]:
    """The runs placed for their workers (call `check_runs` first): the sweep's folder, absolute task
    paths (every worker reads the same files), the words of every evaluation, threads and GPUs."""
    out = Path(out).absolute()
    placed = [
        dataclasses.replace(
            run, task=commands.absolute_paths(run.command, run.task), out=out, threads=threads, gpus=gpus
        )
        for run in runs
    ]
    return [
        dataclasses.replace(run, eval_args=tuple(_eval_args(e, run) for e in evaluations)) for run in placed
    ]


def select_names(names: Sequence[str], patterns: Sequence[str]) -> list[str]:
    """The names that match any of the shell-style `patterns` (all of them when there are none)."""
    if not patterns:
        return list(names)
    for pattern in patterns:
        if not any(fnmatch.fnmatchcase(name, pattern) for name in names):
            raise BiosrecallError(f"--only {pattern!r} matches no run of the sweep")
    return [name for name in names if any(fnmatch.fnmatchcase(name, p) for p in patterns)]


def _eval_args(evaluation: Evaluation, run: SweepRun) -> tuple[str, ...]:
    options = commands.absolute_paths(evaluation.command, evaluation.options)
    words = [
        *evaluation.command.split(),
        str(run.run_dir),
        *commands.option_args(evaluation.command, options),
    ]
    if evaluation.command == "recall-curve":  # the sweep's own folder: a rerun replaces its results
        words += ["--out", str(run.bookkeeping / "eval" / run.name), "--overwrite"]
    return tuple(words)
