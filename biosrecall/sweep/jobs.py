"""What a sweep runs: named runs of one training command, the evaluations after each, and their jobs.

    runs = [SweepRun("seed0/fixed_4", "train", {"data": "data/bios", "schedule": "fixed:4", "seed": 0})]
    evaluations = [Evaluation("recall-curve", {"max_depth": 64})]
    check_runs(runs, evaluations)             # every option checked by the command's own rules
    jobs = build_jobs("runs/sweep", runs, evaluations, threads=1, gpus=0)

A run's folder is OUT/<name>; a name is one or more `/`-separated parts of letters, digits and
`._=,+-` (no part starting with a dot). Everything the sweep itself keeps lies under OUT/.sweep/: per
run its run spec (`<name>.toml`, the file its `train --config` reads: `biosrecall.sweep.run_spec`), a
record (`<name>.json`: state, exit code, error line, times), the log of its processes (`<name>.log`)
and, for `recall-curve`, that command's output folder (`eval/<name>/`).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from biosrecall.errors import BiosrecallError
from biosrecall.sweep import commands
from biosrecall.sweep.run_spec import run_spec_text, spec_path

BOOKKEEPING = ".sweep"
_PART = re.compile(r"[A-Za-z0-9_=,+-][A-Za-z0-9._=,+-]*")
MAX_PART = 200  # file systems refuse names over 255 bytes; leave room for suffixes


@dataclass(frozen=True)
class SweepRun:
    """One run of a sweep."""

    name: str
    """Its folder under the sweep's output folder (see the module docstring for the allowed names)."""
    command: str = "train"
    """The training command: "train" (bioS) or "lm train"."""
    options: Mapping[str, Any] = field(default_factory=dict)
    """The command's option values keyed by option name, as in a `--config` file (None: not given, so
    `run_spec.config_options(config, data=..., preset=...)` of a TrainConfig works); relative paths
    are relative to the current folder. --out, --resume, --overwrite and --threads are the sweep's."""
    labels: Mapping[str, Any] = field(default_factory=dict)
    """What tells this run apart in the sweep (grid values, entry name): columns of `collect`'s table."""


@dataclass(frozen=True)
class Evaluation:
    """A command run on each run folder once the run has finished."""

    command: str
    """"recall-curve" (bioS runs), "lm eval" or "lm harness" (language-model runs)."""
    options: Mapping[str, Any] = field(default_factory=dict)
    """That command's option values keyed by option name (the run folder is its argument)."""


@dataclass(frozen=True)
class Job:
    """Everything one worker needs to bring a run to done, as plain data (it travels to cluster nodes)."""

    name: str
    run_dir: Path
    bookkeeping: Path
    spec_text: str
    """The run spec (its options and --out as TOML), written to `spec` before the run is trained."""
    train_args: tuple[str, ...]
    """`biosrecall` words of a fresh start, without --resume and --threads: `train --config <spec>`."""
    eval_args: tuple[tuple[str, ...], ...]
    """`biosrecall` words of each evaluation."""
    threads: int
    """Torch and OpenMP threads per process."""
    gpus: int = 0
    """More than one: the run is started under torchrun with one process per GPU."""

    @property
    def record(self) -> Path:
        return self.bookkeeping / f"{self.name}.json"

    @property
    def log(self) -> Path:
        return self.bookkeeping / f"{self.name}.log"

    @property
    def spec(self) -> Path:
        return spec_path(self.bookkeeping, self.name)

    @property
    def eval_key(self) -> str | None:
        """Fingerprint of the evaluations; a done run evaluated with other settings is evaluated again."""
        if not self.eval_args:
            return None
        return hashlib.sha256(json.dumps(self.eval_args).encode()).hexdigest()[:16]


def check_name(name: str) -> str:
    """`name` if it is a valid run folder name (module docstring), else one BiosrecallError line."""
    parts = name.split("/") if isinstance(name, str) else [""]
    for part in parts:
        if not _PART.fullmatch(part) or len(part) > MAX_PART:
            raise BiosrecallError(
                f"run name {name!r} is not a folder name: use parts of letters, digits and ._=,+- "
                f"separated by /, none starting with a dot, each at most {MAX_PART} characters"
            )
    return name


def check_runs(runs: Sequence[SweepRun], evaluations: Sequence[Evaluation] = ()) -> None:
    """Refuse the sweep unless every run and evaluation would start: names valid and unique (also as
    folders: no run inside another), options accepted by their command (see `commands`)."""
    if not runs:
        raise BiosrecallError("the sweep has no runs")
    seen: set[str] = set()
    for run in runs:
        check_name(run.name)
        if run.command not in commands.TRAINERS:
            raise BiosrecallError(f"run {run.name}: command must be one of {', '.join(commands.TRAINERS)}")
        if run.name in seen:
            raise BiosrecallError(f"two runs are named {run.name}; give them different names")
        seen.add(run.name)
    for name in seen:
        parents = ["/".join(name.split("/")[:i]) for i in range(1, name.count("/") + 1)]
        if any(parent in seen for parent in parents):
            raise BiosrecallError(f"run {name} would lie inside the folder of another run")
    for run in runs:
        for key, value in run.options.items():  # None: unset, as TrainConfig.to_dict() gives it
            commands.canonical_key(run.command, key, commands.ENGINE_KEYS if value is not None else ())
        commands.check_training(run.command, _spec_options(run), f"run {run.name}")
    for evaluation in evaluations:
        _check_evaluation(evaluation, {run.command for run in runs})


def _check_evaluation(evaluation: Evaluation, trainers: set[str]) -> None:
    reads = commands.EVALUATIONS.get(evaluation.command)
    if reads is None:
        raise BiosrecallError(
            f"unknown evaluation {evaluation.command!r}; choose {', '.join(commands.EVALUATIONS)}"
        )
    if trainers != {reads}:
        raise BiosrecallError(f"{evaluation.command} evaluates runs of `{reads}` only")
    for key in evaluation.options:
        commands.canonical_key(evaluation.command, key, commands.EVAL_ENGINE_KEYS.get(evaluation.command, ()))
    commands.check_evaluation(evaluation.command, evaluation.options, evaluation.command)


def build_jobs(
    out: str | Path,
    runs: Sequence[SweepRun],
    evaluations: Sequence[Evaluation] = (),
    threads: int = 1,
    gpus: int = 0,
) -> list[Job]:
    """One job per run (call `check_runs` first): absolute folders, each run's spec and the words of
    every process."""
    out = Path(out).absolute()
    bookkeeping = out / BOOKKEEPING
    jobs = []
    for run in runs:
        run_dir = out / run.name
        spec = run_spec_text({**_absolute_paths(run.command, _spec_options(run)), "out": run_dir})
        train = (*run.command.split(), "--config", str(spec_path(bookkeeping, run.name)))
        evals = tuple(_eval_args(evaluation, run, run_dir, bookkeeping) for evaluation in evaluations)
        jobs.append(Job(run.name, run_dir, bookkeeping, spec, train, evals, threads, gpus))
    return jobs


def _spec_options(run: SweepRun) -> dict[str, Any]:
    """The run's options with those of the `config` file they name merged in (`with_config_file`)."""
    return with_config_file(run.command, run.options)


def _absolute_paths(words: str, options: Mapping[str, Any]) -> dict[str, Any]:
    """Path options made absolute (from the current folder), so every worker reads the same files."""
    return {
        key: Path(value).expanduser().absolute()
        if isinstance(value, str | Path) and commands.is_path_option(words, key.replace("-", "_"))
        else value
        for key, value in options.items()
    }


def _eval_args(evaluation: Evaluation, run: SweepRun, run_dir: Path, bookkeeping: Path) -> tuple[str, ...]:
    options = _absolute_paths(evaluation.command, evaluation.options)
    words = [*evaluation.command.split(), str(run_dir), *commands.option_args(evaluation.command, options)]
    if evaluation.command == "recall-curve":  # the sweep's own folder: a rerun replaces its results
        words += ["--out", str(bookkeeping / "eval" / run.name), "--overwrite"]
    return tuple(words)


def with_config_file(command: str, options: Mapping[str, Any]) -> dict[str, Any]:
    """What a run's spec holds: `options` over the values of the `config` file they name, if any (the
    file's run size replaced by theirs), as `--config FILE` under the options on a command line meant."""
    if options.get("config") is None:
        return dict(options)
    base = commands.config_file_values(command, options["config"])
    return replace_settings(command, base, {key: value for key, value in options.items() if key != "config"})


def setting_of(command: str, key: str) -> str:
    """The option `key` names; budget, budget_of, updates and exposures are one setting (the run's size)."""
    name = commands.canonical_key(command, key)
    return "run size" if name in commands.run_size_options() else name


def replace_settings(command: str, options: dict[str, Any], layer: dict[str, Any]) -> dict[str, Any]:
    """`options` with each setting of `layer` replacing whichever spelling of it was there (a run size
    replaces all three spellings, as a command line's does a --config file's)."""
    replaced = {setting_of(command, key) for key in layer}
    kept = {k: v for k, v in options.items() if setting_of(command, k) not in replaced}
    return {**kept, **layer}
