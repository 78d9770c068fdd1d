"""The runs a Figure-1 study trains: schedules x seeds, the controls, the learning-rate grid, Figure 5.

    study = StudyOptions(seeds=(0, 1, 2), update_matched=True, lr_grid=(3e-3, 1e-2, 3e-2))
    grid = grid_runs(study, base, tasks)                                # phase 1: each schedule at each lr, first seed
    runs = study_runs(study, base, tasks, best_lr, fixed4_updates)      # phase 2: every seed at each schedule's own lr

A study describes each run once, as the sweep engine takes it (`biosrecall.sweep.jobs.SweepRun`): its
folder name, its `TrainConfig` (the study's `base` config with the run's schedule, seed, learning rate
and budget), its task (`tasks[seed]`: dataset folder, model preset, architecture overrides) and its
labels (`name`, `label`, `role`, `budget`), the columns its rows carry in the study's tables.

Every run has a folder `runs/seed<seed>/<label>` under the study's output, where the label is the
run's name, plus `_lr<lr>` when it trains at another learning rate than the preset's (`base.lr`). A
grid point and the main run it selects are one folder, trained once, and runs that differ only in seed
share their label: that is the group the tables aggregate over (`biosrecall.stats`), and what
`biosrecall recall-curve OUT/runs/seed*/fixed_k4 --aggregate-seeds` groups by.

Roles: `main` (the paper's three schedules), `control` (update-matched uniform: uniform for as many
updates as fixed K=4, so it spends more FLOPs and separates "fewer optimizer steps" from "varied
depth"), `sweep` (fixed K, the paper's Figure 5) and `grid` (a learning rate that lost its grid); the
budget sweep adds `budget` and `trunk` (`biosrecall.experiments.budgets`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from biosrecall.errors import BiosrecallError
from biosrecall.numbers import DEPTH, MAX_COUNT, SEED
from biosrecall.records import Count, parse_record
from biosrecall.sweep.jobs import SweepRun
from biosrecall.train.config import RESUMABLE_DIFFERENCES, TrainConfig, split_budget_of

# The paper's three schedules, in legend order: run name -> schedule spec.
MAIN_SCHEDULES = {
    "fixed_k4": "fixed:4",
    "fixed_first_k4_80": "fixed_first:k0=4,switch=0.8,finish=uniform",
    "uniform_1_16": "uniform:1-16",
}
FIXED_K4, FIXED_FIRST, UNIFORM = MAIN_SCHEDULES
UPDATE_MATCHED = "uniform_1_16_update_matched"
BUDGET_MODES = ("branch", "independent")
MAX_SEEDS = 32
MAX_GRID = 8


@dataclass(frozen=True)
class StudyOptions:
    """What a Figure-1 study trains beyond one seed of the three schedules. Each field is an option of
    `biosrecall figure1`, its docstring the option's help (`biosrecall.cli.figure1`)."""

    seeds: tuple[int, ...] = (0,)
    """Training seeds, e.g. 0,1,2: every run is trained once per seed (weights, batches, depth draws)
    and tables, figures and claims report the mean with a 95% interval over seeds."""
    dataset_seed_per_run: bool = False
    """Give each seed its own people too [default: every seed uses the first seed's dataset]."""
    update_matched: bool = False
    """Control: also train uniform for as many updates as fixed K=4 (more FLOPs), separating fewer
    optimizer steps from varied depth."""
    lr_grid: tuple[float, ...] = ()
    """Control: train each schedule at each of these peak learning rates (first seed), keep each
    schedule's best by mean bits over K=1..16 at 100%, and run every seed at it (lr_grid.csv)."""
    model_overrides: dict = field(default_factory=dict)
    """Architecture variant for every run, FIELD=VALUE (repeatable or comma list), e.g.
    norm=sandwich,init_state=noise. Use another --out per variant."""
    fixed_sweep: tuple[int, ...] = ()
    """Also train fixed-depth runs at these depths (e.g. 1,2,4,8) and plot them (Figure 5)."""
    budgets: tuple[float, ...] = ()
    """Budget sweep: also train the schedules (and the update-matched control) at these multiples of
    the budget, e.g. 0.25,0.5,1,2,4, and write budget_curve.* and compute_to_target.csv (the FLOPs each
    needs to reach 50/75/90% of the ceiling, and fixed-first's saving)."""
    budget_mode: str = "branch"
    """branch: each budget is a decay branch of one constant-rate (wsd) trunk per schedule family,
    bit-identical to its standalone run; independent: one run per budget at the preset's rate
    schedule."""

    def __post_init__(self) -> None:
        check_seeds(self.seeds)
        check_list(
            self.lr_grid, "--lr-grid", _positive, "values must be positive learning rates", most=MAX_GRID
        )
        check_list(self.budgets, "--budgets", _positive, "multiples must be positive")
        check_list(
            self.fixed_sweep, "--fixed-sweep", _integers(1, DEPTH.high), "depths must be positive integers"
        )
        if self.budget_mode not in BUDGET_MODES:
            raise BiosrecallError(
                f"--budget-mode must be one of {', '.join(BUDGET_MODES)}, got {self.budget_mode!r}"
            )


@dataclass(frozen=True)
class Figure1Options:
    """One call of the study: at which size, and what `StudyOptions` adds. The fields but `study` and
    `log` are options of `biosrecall figure1`, their docstrings its help; they are its record's options."""

    preset: str = "default"
    """Experiment size: quick, middle (the budget sweep's) or default."""
    budget: float | None = None
    """Matched FLOP budget [default: the preset's, what fixed K=4 spends in its updates]."""
    device: str = "auto"
    """auto, cpu or cuda."""
    study: StudyOptions = field(default_factory=StudyOptions)
    """Seeds, controls, learning-rate grid, Figure-5 sweep, architecture overrides, budget sweep."""
    log: tuple[str, ...] = ()
    """Experiment trackers every run reports to (`biosrecall.train.tracking`)."""

    @property
    def seeds(self) -> tuple[int, ...]:
        return self.study.seeds


def figure1_command(
    preset: str, options: dict, out_dir: str | Path | None = None, budget: float | None = None
) -> str:
    """The `biosrecall figure1` command of a study: `options` are its `StudyOptions` as a dict (as
    figure1.json records them, or `dataclasses.asdict`), `budget` its `--budget` if one was given.
    Defaults are left out, so the command reads as a user would type it; `--out` comes first."""
    flags = [f"--out {out_dir}"] if out_dir is not None else []
    flags += [f"--preset {preset}", "--seeds " + ",".join(map(str, options.get("seeds", (0,))))]
    if budget is not None:
        flags.append(f"--budget {budget:g}")
    if options.get("update_matched"):
        flags.append("--update-matched")
    if options.get("lr_grid"):
        flags.append("--lr-grid " + ",".join(f"{lr:g}" for lr in options["lr_grid"]))
    if options.get("fixed_sweep"):
        flags.append("--fixed-sweep " + ",".join(map(str, options["fixed_sweep"])))
    if options.get("budgets"):
        flags.append("--budgets " + ",".join(f"{b:g}" for b in options["budgets"]))
        if options.get("budget_mode", "branch") != "branch":
            flags.append(f"--budget-mode {options['budget_mode']}")
    if options.get("dataset_seed_per_run"):
        flags.append("--dataset-seed-per-run")
    if options.get("model_overrides"):
        pairs = ",".join(f"{field}={value}" for field, value in options["model_overrides"].items())
        flags.append(f"--model-override {pairs}")
    return "biosrecall figure1 " + " ".join(flags)


RECORD = "figure1.json"
"""The engine's record of a Figure-1 output (`biosrecall.experiments.figure1.FIGURE1`)."""


def identity(record: dict[str, Any]) -> dict[str, Any]:
    """What a figure1 output's results depend on, from figure1.json as release 0.2.0 wrote it (or as
    `figure1.pins` resolves options into it): the preset and its settings, the trainer settings but
    the training seed, the budget, the dataset seeding; each named as a refusal names it."""
    skip = {*RESUMABLE_DIFFERENCES, "seed"}
    train = {k: v for k, v in record["train_config"].items() if k not in skip}
    budget, budget_of = train.pop("budget", None), train.pop("budget_of", None)
    return {
        "preset": record["preset"],
        **record.get("settings", {}),
        **train,
        "budget": budget_of if budget is None else budget,
        "dataset_seed": record.get("dataset_seed", record["train_config"].get("seed")),
        "schedules": record.get("schedules"),
        "fractions": record.get("fractions"),
    }


@dataclass(kw_only=True)
class StudySeeds:
    """The part of a figure1.json's `study` (the `StudyOptions`) that reading an output relies on."""

    seeds: list[Count]
    """The training seeds."""


@dataclass(kw_only=True)
class EarlierRecord:
    """The fields of a figure1.json that releases up to 0.2.0 wrote, before its record was the
    engine's: `upgrade` reads them (its other keys, versions and machine among them, are kept)."""

    preset: str
    """The preset the study ran (`biosrecall.experiments.figure1.FIGURE1_PRESETS`)."""
    train_config: dict[str, Any]
    """The trainer's settings (`TrainConfig.to_dict`), the first seed's."""
    settings: dict[str, Any] = field(default_factory=dict)
    """The preset's settings (a `Figure1Preset`), model overrides applied."""
    study: dict[str, Any] = field(default_factory=dict)
    """The `StudyOptions`; an older record has none (its one seed is train_config's)."""


def upgrade(record: dict[str, Any], where: str) -> dict[str, Any]:
    """`FIGURE1.upgrade`: a figure1.json of release 0.2.0 or before as the engine's record (its
    options as that release's command gave them, its pins its `identity`), so that its output, the
    committed archives docs/results/study-default and budget-sweep-* among them, continues."""
    if "options" in record:
        return record
    parse_record(record, EarlierRecord, where)
    train = record["train_config"]
    options = {
        "preset": record["preset"],
        "budget": train.get("budget"),
        "device": train.get("device", "auto"),
        "study": {"seeds": [train.get("seed")], **record.get("study", {})},
        "log": train.get("log", []),
    }
    return {**record, "study": "figure1", "options": options, "pins": identity(record)}


Tasks = Mapping[int, Mapping[str, Any]]
"""Training seed -> the task of its runs: `data` (its dataset folder), `preset`, `model_overrides`."""


def study_run(
    base: TrainConfig,
    tasks: Tasks,
    name: str,
    schedule: str,
    seed: int,
    lr: float,
    role: str,
    *,
    budget: float = 1.0,
    suffix: str = "",
    updates: int | None = None,
    **changes: Any,
) -> SweepRun:
    """One run of a study: `base` at `budget` times its budget with the run's schedule, seed, lr and
    `changes` (TrainConfig fields), or for `updates` updates whatever they cost (a control matched in
    updates, not FLOPs); labelled `name` (+ `_lr<lr>` off the preset's rate) + `suffix`."""
    label = (name if lr == base.lr else f"{name}_lr{format_lr(lr)}") + suffix
    config = replace(scaled_budget(base, budget), schedule=schedule, seed=seed, lr=lr, **changes)
    if updates is not None:
        config = replace(config, budget=None, budget_of=None, updates=updates)
    labels = {"name": name, "label": label, "role": role, "budget": budget}
    return SweepRun(f"seed{seed}/{label}", "train", config, tasks[seed], labels)


def scaled_budget(config: TrainConfig, multiple: float) -> TrainConfig:
    """`config` at `multiple` times its budget: FLOPs scaled, or SPEC:UPDATES with the updates scaled."""
    if multiple == 1:
        return config
    if config.budget is not None:
        return replace(config, budget=config.budget * multiple)
    spec, updates = split_budget_of(config.budget_of)
    scaled = round(updates * multiple)
    if scaled < 1:
        raise BiosrecallError(f"budget multiple {multiple:g} leaves less than one {spec} update")
    return replace(config, budget_of=f"{spec}:{scaled}")


def check_list(
    values, flag: str, valid: Callable[[Any], bool], rule: str, example: str = "", most: int | None = None
) -> None:
    """The rules every list option of a study obeys, in one place: each value `valid` (else "{flag}
    {rule}"), each given once, at most `most`, and at least one when `example` shows one."""
    values = list(values)
    if not values and example:
        raise BiosrecallError(f"{flag} is empty; give at least one, e.g. {flag} {example}")
    bad = [value for value in values if not valid(value)]
    if bad:
        raise BiosrecallError(f"{flag} {rule} (got {bad[0]})")
    repeated = sorted({value for value in values if values.count(value) > 1})
    if repeated:
        raise BiosrecallError(f"{flag} repeats {', '.join(map(str, repeated))}; give each value once")
    if most is not None and len(values) > most:
        raise BiosrecallError(f"{flag} lists {len(values)} values; at most {most}")


def _integers(low: int, high: int) -> Callable[[Any], bool]:
    return lambda value: isinstance(value, int) and low <= value <= high


def _positive(value) -> bool:
    return isinstance(value, int | float) and math.isfinite(value) and value > 0


def check_seeds(seeds) -> None:
    check_list(seeds, "--seeds", _integers(0, SEED.high), "must be non-negative integers", "0,1,2", MAX_SEEDS)


def check_people(people) -> None:
    check_list(people, "--people", _integers(1, MAX_COUNT), "must be positive integers", "50,100,200")


def check_depths(depths) -> None:
    check_list(
        depths, "--depths", _integers(1, DEPTH.high), f"must be integers 1 to {DEPTH.high}", "1,4,16,64"
    )


def format_lr(lr: float) -> str:
    """3e-3 -> "0.003": short, exact for the usual grids, and safe in a folder name."""
    return f"{lr:.6g}"


def grid_runs(study: StudyOptions, base: TrainConfig, tasks: Tasks) -> list[SweepRun]:
    """Phase 1: each main schedule at each grid learning rate, first seed. Empty without a grid."""
    seed = study.seeds[0]
    return [
        study_run(base, tasks, name, schedule, seed, lr, "grid")
        for name, schedule in MAIN_SCHEDULES.items()
        for lr in study.lr_grid
    ]


def study_runs(
    study: StudyOptions, base: TrainConfig, tasks: Tasks, best_lr: Mapping[str, float], fixed4_updates: int
) -> list[SweepRun]:
    """Phase 2: every seed of the main schedules at their own learning rate, then the controls.

    The control uses uniform's learning rate; the Figure-5 runs use fixed K=4's, the closest tuned
    schedule (tuning every K would multiply the grid)."""
    runs = []
    for seed in study.seeds:
        runs += [
            study_run(base, tasks, name, schedule, seed, best_lr[name], "main")
            for name, schedule in MAIN_SCHEDULES.items()
        ]
        if study.update_matched:
            runs.append(
                study_run(
                    base,
                    tasks,
                    UPDATE_MATCHED,
                    "uniform:1-16",
                    seed,
                    best_lr[UNIFORM],
                    "control",
                    updates=fixed4_updates,
                )
            )
        runs += [
            study_run(base, tasks, f"fixed_k{k}", f"fixed:{k}", seed, best_lr[FIXED_K4], "sweep")
            for k in study.fixed_sweep
            if k != 4
        ]
    return runs


def dataset_seed(study: StudyOptions, seed: int) -> int:
    """The people a run trains on: its own seed's with `dataset_seed_per_run`, else the first seed's."""
    return seed if study.dataset_seed_per_run else study.seeds[0]


def dataset_folders(study: StudyOptions, data_dir: Path) -> dict[int, Path]:
    """Dataset seed -> its folder: `data_dir` for the one dataset every seed shares, or
    `<data_dir>_seed<S>` for each seed's own with `dataset_seed_per_run`."""
    seeds = dict.fromkeys(dataset_seed(study, seed) for seed in study.seeds)
    if not study.dataset_seed_per_run:
        return {seed: data_dir for seed in seeds}
    return {seed: data_dir.with_name(f"{data_dir.name}_seed{seed}") for seed in seeds}
