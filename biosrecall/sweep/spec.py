"""The sweep spec: one TOML file that names a grid of runs and the evaluation after each.

    spec = load_spec("sweeps/bios.toml", overrides=["data=data/bios-1k"])
    spec.runs, spec.evaluations, spec.out          # what `run_sweep` takes (each run read into its config)
    spec.state_jobs()                              # `sweep status` and `collect`: no option is read

    [sweep]
    out = "../runs/bios-sweep"     # runs go to OUT/<run name>/ (required)
    command = "train"              # "train" (bioS, the default) or "lm train"
    [executor]                     # optional defaults of `sweep run`'s executor options
    workers = 2                    # also threads_per_run, gpus_per_run, partition, cpus_per_run,
                                   # time_min, array_parallelism
    [base]                         # options of every run, keyed by the command's option names
    data = "../data/bios"
    preset = "bios-cpu"
    budget_of = "fixed:4:800"
    [grid]                         # every combination of these lists (each a non-empty array)
    schedule = ["fixed:4", "uniform:1-16"]
    seed = [0, 1, 2]
    [[runs]]                       # optional named configurations: name plus option values
    name = "ff"
    schedule = "fixed_first:k0=4,switch=0.8,finish=uniform"
    [eval]                         # optional: after each finished run (the command's option names)
    recall_curve = { checkpoints = "fractions", max_depth = 64 }   # or lm_eval / lm_harness = {...}

Runs: with [[runs]], each entry crossed with every combination of [grid] (one run per entry when
there is no grid); without, one run per combination of [grid] over [base]. An entry's values and the
grid's replace [base]'s (budget, budget_of, updates and exposures are one setting, the run's size, as on the
command line over a --config file); a setting both an entry and the grid give is refused (the entry's
value would be lost), as is an unknown section, key or option name, an empty grid or a grid value that
is not a non-empty list.

Names: an entry's name, then `key=value` for each grid key but seed (a value's characters outside
letters, digits and `._=+-` become `_`), joined by commas: `ff,lr=0.001`, `schedule=fixed_4`. A grid
over `seed` adds a folder level where the seed-aggregating readers look: `seed<S>/<name>` for `train`
(as `figure1` and `recall-curve --aggregate-seeds` lay runs out), `<name>/seed<S>` for `lm train`
(as `lm compare --aggregate-seeds` reads them). A grid of seeds alone names its runs `run`.

Paths: `out` and every option that takes a file or folder (data, config, tokenizer) are relative to
the folder of the spec file, so a spec means the same from any working folder. `--set KEY=VALUE`
(`biosrecall sweep run`) replaces KEY in every run, a path relative to the current folder; it may not
set a grid key.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec
from msgspec import UNSET, Meta, Struct, UnsetType

from biosrecall.errors import BiosrecallError
from biosrecall.files import read_toml_file
from biosrecall.records import parse_record
from biosrecall.sweep import commands
from biosrecall.sweep.commands import replace_settings, setting_of
from biosrecall.sweep.jobs import Evaluation, SweepRun, build_jobs, check_names, select_names

EVAL_KEYS = {"recall_curve": "recall-curve", "lm_eval": "lm eval", "lm_harness": "lm harness"}
TRAINER_NAMES = commands.TRAINERS
WrittenRun = tuple[str, dict[str, Any], dict[str, Any]]
"""A run as a spec writes it: (its name, its option values by option name, its labels)."""
_UNSAFE = re.compile(r"[^A-Za-z0-9._=+-]")


class SweepSection(Struct, forbid_unknown_fields=True):
    out: Annotated[str, Meta(min_length=1)]
    """Where the runs go: OUT/<run name>/."""
    command: Literal[TRAINER_NAMES] = "train"
    """The command that trains each run."""


class ExecutorSection(Struct, forbid_unknown_fields=True):
    """Defaults of `sweep run`'s executor options (see them for what each does)."""

    workers: int | UnsetType = UNSET
    """local: runs at the same time."""
    threads_per_run: int | UnsetType = UNSET
    """local: threads of each run."""
    gpus_per_run: int | UnsetType = UNSET
    """GPUs of each run (over 1: torchrun)."""
    partition: str | UnsetType = UNSET
    """slurm: the partition."""
    cpus_per_run: int | UnsetType = UNSET
    """slurm: CPUs of each run."""
    time_min: int | UnsetType = UNSET
    """slurm: time limit per run, minutes."""
    array_parallelism: int | UnsetType = UNSET
    """slurm: tasks at once."""


class EvalSection(Struct, forbid_unknown_fields=True):
    """The options of each evaluation after a finished run ({} for its defaults)."""

    recall_curve: dict[str, Any] | UnsetType = UNSET
    """`recall-curve` after each bioS run."""
    lm_eval: dict[str, Any] | UnsetType = UNSET
    """`lm eval` after each LM run."""
    lm_harness: dict[str, Any] | UnsetType = UNSET
    """`lm harness` after each LM run."""


class RunEntry(Struct):
    name: str
    """The entry's name; its other keys are option values."""


class SpecFile(Struct, forbid_unknown_fields=True):
    """The structure of a sweep spec (module docstring); option values are checked by the commands."""

    sweep: SweepSection
    """Where the runs go and what trains them."""
    executor: ExecutorSection = msgspec.field(default_factory=ExecutorSection)
    """Defaults of the executor options."""
    base: dict[str, Any] = msgspec.field(default_factory=dict)
    """Options of every run."""
    grid: Annotated[dict[str, Any], Meta(min_length=1)] | UnsetType = UNSET
    """Lists of option values, every combination a run."""
    runs: Annotated[list[RunEntry], Meta(min_length=1)] | UnsetType = UNSET
    """Named configurations."""
    eval: EvalSection = msgspec.field(default_factory=EvalSection)
    """The evaluations after each finished run."""


@dataclass(frozen=True)
class SweepSpec:
    path: Path
    out: Path
    command: str
    written: list[WrittenRun]
    """Each run as the spec writes it: (name, option values, labels); `runs` reads them."""
    evaluations: list[Evaluation]
    executor: dict[str, Any]
    """[executor] values (defaults of the command line's executor options)."""

    @property
    def names(self) -> list[str]:
        return [name for name, _, _ in self.written]

    @cached_property
    def runs(self) -> list[SweepRun]:
        return self.select()

    def select(self, patterns: Sequence[str] = ()) -> list[SweepRun]:
        """The runs whose names match any of the shell-style `patterns` (all without any), each read
        into its TrainConfig and task by its command's own parser (`commands.run_description`)."""
        chosen = set(select_names(self.names, patterns))
        return [
            SweepRun(
                name, self.command, *commands.run_description(self.command, options, f"run {name}"), labels
            )
            for name, options, labels in self.written
            if name in chosen
        ]

    def state_jobs(self) -> list[SweepRun]:
        """The jobs of every run, with its labels, to read where each stands (`sweep status`,
        `collect`): reading them needs no option of the runs, so a spec whose data comes with
        `sweep run --set` still reads."""
        runs = [SweepRun(name, labels=labels) for name, _, labels in self.written]
        return build_jobs(self.out, runs, self.evaluations)


def load_spec(path: str | Path, overrides: Sequence[str] = ()) -> SweepSpec:
    """Read and check the structure of a spec (module docstring). Each run's options are read into its
    TrainConfig by its command's own parser when `runs` is first asked for; data folders and trackers
    are checked when the sweep runs (`biosrecall.sweep.jobs.check_runs`). A problem is one line that
    starts with the spec's path."""
    path = Path(path)
    data = read_toml_file(path, "sweep spec")
    parse_record(data, SpecFile, str(path))
    command, here = data["sweep"].get("command", "train"), path.parent
    with commands.located(str(path)):
        base = _options(command, data.get("base", {}), "[base]", here)
        grid = _grid(command, data.get("grid", {}))
        entries = [
            (entry["name"], _options(command, _without_name(entry), f"[[runs]] {entry['name']}", here))
            for entry in data.get("runs", [])
        ]
        fixed = _overrides(command, overrides, grid)
        written = expand_runs(command, base, grid, entries, fixed, here)
        check_names([name for name, _, _ in written])
        evaluations = _evaluations(data.get("eval", {}), here)
    return SweepSpec(
        path=path,
        out=Path(resolve(data["sweep"]["out"], here)),
        command=command,
        written=written,
        evaluations=evaluations,
        executor=dict(data.get("executor", {})),
    )


def _without_name(entry: Mapping[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in entry.items() if key != "name"}


def _options(
    command: str, table: Mapping[str, Any], where: str, here: Path | None, engine_keys=commands.ENGINE_KEYS
) -> dict[str, Any]:
    """A table of option values, each key an option of `command` (not one of `engine_keys`, which the
    sweep sets); path values resolved against `here` (None: as written). An option set twice is
    refused by the command's own `--config` reader, as each run is read."""
    options: dict[str, Any] = {}
    for key, value in table.items():
        with commands.located(where):
            name = commands.canonical_key(command, key, engine_keys)
        options[key] = option_value(command, name, value, here)
    return options


def _grid(command: str, grid: Mapping[str, list[Any]]) -> list[tuple[str, list[Any]]]:
    for key, values in grid.items():
        if not isinstance(values, list) or not values:
            raise BiosrecallError(f"[grid] {key} must be a non-empty list of values, got {values!r}")
    # As written: names are made of the values; paths are resolved in `expand_runs`.
    return list(_options(command, grid, "[grid]", None).items())


def _overrides(command: str, overrides: Sequence[str], grid) -> dict[str, Any]:
    """--set KEY=VALUE pairs as options (a flag's true/false read as a bool; paths relative to the
    current folder)."""
    fixed: dict[str, Any] = {}
    grid_names = {commands.canonical_key(command, key) for key, _ in grid}
    for item in overrides:
        key, equals, value = item.partition("=")
        if not equals or not key:
            raise BiosrecallError(f"--set takes KEY=VALUE, got {item!r}")
        with commands.located("--set"):
            name = commands.canonical_key(command, key.strip(), commands.ENGINE_KEYS)
        if name in grid_names:
            raise BiosrecallError(f"--set {key}: {key} is a grid key")
        if commands.is_flag_option(command, name) and value.lower() in ("true", "false"):
            value = value.lower() == "true"  # other text is refused as each run is read, as a flag's
        fixed[key.strip()] = option_value(command, name, value, Path.cwd())
    return fixed


def _evaluations(table: Mapping[str, Any], here: Path) -> list[Evaluation]:
    evaluations = []
    for key, options in table.items():
        words = EVAL_KEYS[key]
        engine_keys = commands.EVAL_ENGINE_KEYS.get(words, ())
        evaluations.append(Evaluation(words, _options(words, options, f"[eval] {key}", here, engine_keys)))
    return evaluations


# ---- from the tables to the runs: the grid crossed with the entries, each run's options and name ----


def resolve(value: Any, here: Path) -> str:
    """`value` as an absolute path, a relative one taken from `here`."""
    path = Path(value).expanduser()
    return str(path if path.is_absolute() else here.absolute() / path)


def option_value(command: str, name: str, value: Any, here: Path | None) -> Any:
    """`value`, a path option's resolved against `here` (None: as written). What the value may be is
    the command's own `--config` reader's to say, as each run is read."""
    if here is not None and isinstance(value, str) and commands.is_path_option(command, name):
        return resolve(value, here)
    return value


def expand_runs(command, base, grid, entries, fixed, here: Path) -> list[WrittenRun]:
    """Every entry (or [base] alone) crossed with every combination of the grid (module docstring):
    (name, options, labels) of each run."""
    keys = [key for key, _ in grid]
    combos = list(itertools.product(*(values for _, values in grid))) if grid else [()]
    runs = []
    for entry_name, entry in entries or [(None, {})]:
        _no_overlap(command, [(f"[[runs]] {entry_name}", entry), ("[grid]", dict.fromkeys(keys))])
        for combo in combos:
            chosen = dict(zip(keys, combo, strict=True))
            values = {key: option_value(command, key, value, here) for key, value in chosen.items()}
            options = dict(base)
            for layer in (entry, values, fixed):
                options = replace_settings(command, options, layer)
            labels = {**({"entry": entry_name} if entry_name else {}), **chosen}
            runs.append((run_name(command, entry_name, chosen), options, labels))
    return runs


def _no_overlap(command: str, tables) -> None:
    owner: dict[str, str] = {}
    for where, table in tables:
        for key in table:
            name = setting_of(command, key)
            if name in owner:
                raise BiosrecallError(f"{key} is set in both {owner[name]} and {where}")
            owner[name] = where


def run_name(command: str, entry_name: str | None, chosen: Mapping[str, Any]) -> str:
    """The run's folder name (module docstring), checked with the others by `check_names`."""
    parts = [entry_name] if entry_name else []
    parts += [f"{key}={_slug(value)}" for key, value in chosen.items() if key != "seed"]
    stem = ",".join(parts) or "run"
    if "seed" not in chosen:
        return stem
    seed = f"seed{_slug(chosen['seed'])}"
    return f"{seed}/{stem}" if command == "train" else f"{stem}/{seed}"


def _slug(value: Any) -> str:
    """A grid value as a part of a run name."""
    text = ("true" if value else "false") if isinstance(value, bool) else str(value)
    return _UNSAFE.sub("_", text)
