"""The paper's Figure 1 as an experiment: seeds, controls and claims judged from the data.

    from biosrecall.experiments.figure1 import run_figure1
    from biosrecall.experiments.study import StudyOptions
    result = run_figure1("runs/figure1", preset="quick", study=StudyOptions(seeds=(0, 1)))

One call generates the dataset, trains the three schedules at one matched FLOP budget for every seed
(plus what `StudyOptions` adds: the update-matched uniform control, a per-schedule learning-rate grid,
the Figure-5 fixed-K sweep), evaluates the 45% and 100% checkpoints at serving depths 1..64, and
writes the tables, figures and claims of `biosrecall.experiments.figure1_results`. Layout:

    OUT/figure1.json               the engine's record: options, what they resolve to (`pins`), command
    OUT/data/ (data_seed<S>/)      the bioS dataset (one per seed with `dataset_seed_per_run`)
    OUT/runs/seed<S>/<label>/      one run folder per run (see `biosrecall.experiments.study`)
    OUT/recall_curve*, summary*.csv, figure1.*, claims.*, lr_grid.*, figure5.*, fixed_sweep*
    OUT/exit_frontier.*, exit_headline.*, exit_summary.*   adaptive-depth serving of every seed's 100%
                                   checkpoints (`biosrecall.experiments.study_serving`)
    OUT/budget_curve.*, compute_to_target.*, budget_modes.*  with budgets: the budget sweep
                                   (`biosrecall.experiments.budgets`, `.budget_results`)
    OUT/runs/.sweep/               each run's spec (.specs/<run>.json), record and log (`biosrecall.sweep`)
    OUT/timings.jsonl, timings.md  wall time per phase of every call (`biosrecall.experiments.engine.StudyTimer`)

The study is a declaration on the engine (`biosrecall.experiments.engine`, `FIGURE1`), which holds
the output's lock for the whole call, trains every run as a `biosrecall train` process of the sweep
engine `workers` at a time (each described once, as a `SweepRun` holding its `TrainConfig`:
`biosrecall.experiments.study`), trunks before their branches, and times each phase. What is
figure1's own: its datasets, made under the lock with every run planned before one trains
(`inputs`), the learning-rate grid whose winners choose the other runs (`runs`, then `then`), one
in-process scoring pass of recall and serving (`evaluate`), and its files (`write`). Calling again
continues: finished runs are kept, an interrupted one resumes from its last save, recall results are
cached per checkpoint, and added seeds or controls only train what is new.

Guarding the output: figure1.json is the engine's record, its `pins` what an output's results depend
on (the preset's settings, the trainer settings but the training seed, the dataset seeding:
`study.identity`). Seeds, controls, the learning-rate grid and the Figure-5 sweep are not part of it
(`StudyOptions` is free): each run has its own folder, so a rerun that adds seeds or controls
continues the output, which is how a study is run in parts; the tables cover the call's seeds.
Anything else that differs is refused in one line naming the first difference, before anything is
touched; `overwrite` replaces the output instead (the engine moves it aside and puts it back if the
new settings fail their checks). A figure1.json of release 0.2.0 or before is read as the engine's
(`study.upgrade`), so its outputs, the committed archives among them, continue.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import pandas as pd

from biosrecall.bios import generate_dataset
from biosrecall.errors import BiosrecallError
from biosrecall.eval.exits import parse_exits
from biosrecall.eval.scoring import run_labels
from biosrecall.eval.serving import SERVING_CRITERIA, score_runs, serving_names
from biosrecall.experiments.budget_results import (
    BUDGET_NAMES,
    budget_curve,
    compute_to_target,
    mode_agreement,
    saving_claim,
    write_budget_results,
)
from biosrecall.experiments.budgets import budget_runs
from biosrecall.experiments.claims import earlier_look_file, write_claims
from biosrecall.experiments.engine import Study, run_study
from biosrecall.experiments.figure1_results import chosen_lr, grid_table, label_runs, write_study_results
from biosrecall.experiments.study import (
    FIXED_K4,
    MAIN_SCHEDULES,
    RECORD,  # noqa: F401 (figure1.RECORD: the name the archive and the tests know it by)
    Figure1Options,
    StudyOptions,
    dataset_folders,
    dataset_seed,
    figure1_command,
    grid_runs,
    identity,
    study_runs,
    upgrade,
)
from biosrecall.experiments.study_serving import SUMMARY_NAME, serve_study
from biosrecall.outputs import write_table
from biosrecall.sizing import Cost, check_fits, dataset_cost, scoring_cost
from biosrecall.train.config import TrainConfig, resolve_seq_len
from biosrecall.train.optim import warmup_updates
from biosrecall.train.trainer import bios_training_task, make_plan

FIGURE1_SCHEDULES = MAIN_SCHEDULES
FRACTIONS = (0.45, 1.0)
DATA, RUNS = "data", "runs"
# Every entry figure1 makes in its output folder besides its record, runs and datasets: what
# `--overwrite` replaces (anything else there stays).
RESULT_STEMS = (
    "figure1",
    "figure5",
    "recall_curve",
    "recall_curve_seeds",
    "fixed_sweep",
    "fixed_sweep_seeds",
    "summary",
    "summary_runs",
    "fixed_sweep_summary",
    "fixed_sweep_summary_runs",
    "claims",
    "lr_grid",
    SUMMARY_NAME,
    "timings",
    *BUDGET_NAMES,
)
RESULT_SUFFIXES = (".png", ".pdf", ".csv", ".parquet", ".md", ".jsonl")


@dataclass(frozen=True)
class Figure1Preset:
    """One size of the experiment. The budget is what `fixed:4` spends in `budget_updates` updates."""

    people: int
    """People in the dataset (more people = more facts to store = a harder task)."""
    model_preset: str
    """Model preset (see `biosrecall flops`)."""
    batch_size: int
    """Sequences per update."""
    seq_len: int
    """Tokens per sequence (several whole biographies)."""
    budget_updates: int
    """The matched budget, as a number of fixed K=4 updates."""
    lr: float
    """Peak learning rate (every schedule's, unless a learning-rate grid picks each its own)."""
    max_depth: int = 64
    """Serving depths evaluated: 1..max_depth."""
    eval_people: int | None = None
    """Score recall on the first N people only (None: everyone); the sweep to K=64 dominates eval time."""
    model_overrides: tuple[tuple[str, Any], ...] = ()
    """Architecture changes from the model preset, e.g. (("injection", "add"),)."""


FIGURE1_PRESETS = {
    # Smoke test, demo and CI: well under a minute per run on a 2-core CPU; a 40-person task that a
    # 41k-parameter model partly learns, so the curves already differ by schedule.
    "quick": Figure1Preset(
        people=40, model_preset="bios-tiny", batch_size=8, seq_len=128, budget_updates=300, lr=1e-2
    ),
    # The budget sweep's (docs/results/sizing-middle.md): quick's tokens per person, 2.5x the people.
    "middle": Figure1Preset(
        people=100, model_preset="bios-tiny", batch_size=8, seq_len=128, budget_updates=750, lr=1e-2
    ),
    # The laptop-class reproduction, sized by measurement (README, "Sizing the default"): fixed K=4
    # recalls 20.8 of 33.4 bits at K=4 at 45% (62% of the ceiling) and 33.4 at 100%, and a small batch
    # gives every schedule more optimizer steps per FLOP, so uniform has room to learn by 100%.
    "default": Figure1Preset(
        people=250,
        model_preset="bios-cpu",
        batch_size=8,
        seq_len=256,
        budget_updates=800,
        lr=1e-2,
    ),
}


@dataclass
class Figure1Result:
    out_dir: Path
    runs: dict[str, Path]  # run name (its folder under runs/) -> its path
    table: pd.DataFrame  # every run's recall (`figure1_results.label_runs`)
    summary: pd.DataFrame  # per group and fraction, mean over seeds with intervals
    claims: pd.DataFrame
    figures: list[Path]
    headline: Any = None  # adaptive against fixed serving depth (`biosrecall.eval.serving`)


@dataclass
class Scores:
    """What one scoring pass gives the tables: recall curves by role, and the serving frontier."""

    out_dir: Path  # the study's output
    runs: list  # every run of the call, grid points included
    grid: pd.DataFrame | None = None  # the learning-rate grid's runs at 100%
    curves: pd.DataFrame | None = None  # main runs, controls and the Figure-5 sweep at every fraction
    frontier: pd.DataFrame | None = None  # the main runs' final checkpoints served
    budget: pd.DataFrame | None = None  # the budget sweep's runs (not its trunks) at 100%


def run_figure1(
    out_dir: str | Path,
    preset: str = "quick",
    *,
    study: StudyOptions | None = None,
    budget: float | None = None,
    device: str = "auto",
    threads: int | None = None,
    workers: int | None = None,
    log: tuple[str, ...] = (),
    overwrite: bool = False,
    report=None,
) -> Figure1Result:
    """Generate (if needed), train every run of the study, evaluate, and write tables, figures, claims.

    Continues an output made with the same settings; refuses one made with other settings unless
    `overwrite`. Runs train `workers` at a time on `threads` threads each (`study_executor`); `report`
    is called with each run's `biosrecall.sweep.worker.Outcome`. `log` names experiment trackers every
    run reports to (`biosrecall.train.tracking`). Raises `Interrupted` (naming the runs) when Ctrl-C
    stops training, and `StudyRunFailed` when a run fails.
    """
    options = Figure1Options(preset, budget, device, study or StudyOptions(), tuple(log))
    result = run_study(FIGURE1, out_dir, options, workers, threads, report, overwrite=overwrite)
    scores = result.per_run
    runs = {run.name: Path(out_dir) / RUNS / run.name for run in scores.runs if run.labels["role"] != "grid"}
    return Figure1Result(
        result.out_dir,
        runs,
        scores.curves,
        result.tables["summary"],
        result.claims,
        result.figures,
        result.tables.get("exit_headline"),
    )


def _settings(options: Figure1Options) -> Figure1Preset:
    """The preset, with the study's architecture overrides applied (checked when the plans are made)."""
    if options.preset not in FIGURE1_PRESETS:
        raise BiosrecallError(
            f"unknown figure1 preset {options.preset!r}; choose one of: {', '.join(FIGURE1_PRESETS)}"
        )
    settings, overrides = FIGURE1_PRESETS[options.preset], options.study.model_overrides
    merged = tuple(sorted({**dict(settings.model_overrides), **overrides}.items()))
    return replace(settings, model_overrides=merged) if overrides else settings


def _train_config(options: Figure1Options) -> TrainConfig:
    """Every run's trainer settings before its schedule, seed and lr; the budget is the preset's
    unless `budget` is given."""
    settings, budget = _settings(options), options.budget
    return TrainConfig(
        batch_size=settings.batch_size,
        seq_len=settings.seq_len,
        lr=settings.lr,
        seed=options.seeds[0],
        device=options.device,
        checkpoint_fractions=FRACTIONS,
        budget=budget,
        budget_of=None if budget is not None else f"fixed:4:{settings.budget_updates}",
        log=options.log,
    )


def pins(options: Figure1Options) -> dict[str, Any]:
    """`FIGURE1.pins`: what an output's results depend on beyond its options (`identity`): the preset's
    settings (a preset redefined by a later release is refused), the trainer settings but the
    training seed, and the dataset seeding."""
    study = options.study
    resolved = {
        "preset": options.preset,
        "settings": asdict(_settings(options)),
        "train_config": _train_config(options).to_dict(),
        "schedules": MAIN_SCHEDULES,
        "fractions": list(FRACTIONS),
        "dataset_seed": "per run" if study.dataset_seed_per_run else study.seeds[0],
    }
    return identity(json.loads(json.dumps(resolved)))


def _tasks(options: Figure1Options, out_dir: Path) -> dict[int, dict]:
    """Training seed -> the task of its runs: its dataset, the model preset and its overrides."""
    settings, datasets = _settings(options), dataset_folders(options.study, out_dir / DATA)
    overrides = dict(settings.model_overrides) or None
    return {
        seed: {
            "data": datasets[dataset_seed(options.study, seed)].resolve(),
            "preset": settings.model_preset,
            "model_overrides": overrides,
        }
        for seed in options.seeds
    }


def _task(options: Figure1Options, out_dir: Path):
    """The bioS task on the first dataset, read and checked (every dataset has the same vocabulary,
    so one plans every run); asked for once the datasets exist."""
    settings = _settings(options)
    data_dir = next(iter(dataset_folders(options.study, out_dir / DATA).values()))
    return bios_training_task(data_dir, settings.model_preset, dict(settings.model_overrides))


def runs(options: Figure1Options, out_dir: Path) -> list:
    """The learning-rate grid's runs (first seed): their winners choose the other runs (`then`)."""
    return grid_runs(options.study, _train_config(options), _tasks(options, out_dir))


def then(scores: Scores, options: Figure1Options, task=None) -> list:
    """Every seed of the main schedules at their own learning rate (the grid's winners, written as
    OUT/lr_grid.*, or the preset's), the controls, the Figure-5 sweep and the budget sweep (trunks before branches)."""
    study, config, tasks = options.study, _train_config(options), _tasks(options, scores.out_dir)
    best = dict.fromkeys(MAIN_SCHEDULES, config.lr)
    if study.lr_grid:  # OUT/lr_grid.* as soon as the grid is done, before the other runs train
        grid = grid_table(scores.grid)
        write_table(grid, scores.out_dir / "lr_grid")
        best = chosen_lr(grid)
    task = task or _task(options, scores.out_dir)
    fixed4 = make_plan(task.model_config(), replace(config, schedule=MAIN_SCHEDULES[FIXED_K4])).updates
    chosen = study_runs(study, config, tasks, best, fixed4)
    if study.budgets:
        plan = lambda run: make_plan(task.model_config(), run.config)  # noqa: E731
        chosen += budget_runs(study, config, tasks, best, plan, warmup_updates(fixed4, config))
    return chosen


def make_inputs(out_dir: Path, options: Figure1Options, report=None) -> None:
    """`FIGURE1.inputs`: refuse datasets and an evaluation set larger than the machine
    (`biosrecall.sizing`), make the missing datasets (saying so to `report`), and plan every kind of
    run and build a batch source, so that a budget too small for one update, an unknown architecture
    override or a sequence too short for a biography fails before training."""
    people = _settings(options).people
    datasets = dataset_folders(options.study, out_dir / DATA)
    cost = Cost()
    for data_dir in datasets.values():
        if not os.path.lexists(data_dir):
            cost = cost.then(dataset_cost(people))
    check_fits(
        f"a study of {people:,} people", cost.then(scoring_cost(people)), out_dir, "choose a smaller --preset"
    )
    for seed, data_dir in datasets.items():  # one present was made under the same pins
        if not os.path.lexists(data_dir):
            if report is not None:
                report(f"generating the dataset {data_dir.name}/ ({people:,} people, seed {seed})")
            generate_dataset(data_dir, people=people, seed=seed)
    config = _train_config(options)
    config.validate()
    task = _task(options, out_dir)
    model_config = task.model_config()
    task.batch_source(config, resolve_seq_len(config, model_config, task.preset))
    grid = Scores(out_dir, [], grid=None)
    without_grid = replace(options, study=replace(options.study, lr_grid=()))
    for run in runs(options, out_dir) + then(grid, without_grid, task):
        make_plan(model_config, run.config)


def evaluate(runs_dir: Path, runs: list, options: Figure1Options, executor) -> Scores:
    """The recall of every run at depths 1..max_depth (the grid's and the budget sweep's at 100%, the
    others at 45% and 100%), and the serving frontier of the main runs' final checkpoints from the
    same pass; `run` is each run's name, `seed<S>/<label>`."""
    settings = _settings(options)

    def score(group: list, fractions, served=()):
        if not group:
            return None, None
        paths = [runs_dir / run.name for run in group]
        scores = score_runs(
            paths,
            fractions,
            parse_exits(SERVING_CRITERIA) if served else (),
            max_depth=settings.max_depth,
            device=options.device,
            people=settings.eval_people,
            served=[runs_dir / run.name for run in served],
            workers=executor.slots(),
            threads=executor.threads,
        )
        by_label = dict(zip(run_labels(paths), group, strict=True))
        frontier = scores.frontier
        if frontier is not None:
            frontier = frontier.assign(run=frontier["run"].map(lambda run: by_label[run].name))
        return label_runs(scores.recall, by_label), frontier

    def role(*names):
        return [run for run in runs if run.labels["role"] in names]

    main = role("main")
    curves, frontier = score(role("main", "control", "sweep"), FRACTIONS, served=main)
    budget = score(role("budget"), (1.0,))[0]
    if budget is not None:
        multiples = {run.name: run.labels["budget"] for run in role("budget")}
        budget = budget.assign(budget_multiple=budget["run"].map(multiples))
    return Scores(runs_dir.parent, runs, score(role("grid"), (1.0,))[0], curves, frontier, budget)


def write(out_dir: Path, scores: Scores, options: Figure1Options):
    """The recall tables, summaries, figures and claims (`figure1_results`), the serving
    results and their claims rows (`study_serving`), and the budget sweep's (`budget_results`), whose
    compute claim is last ("not measured" without a sweep); returns (tables, claims, figure files)."""
    summary, claims, figures = write_study_results(out_dir, scores.curves)
    main_runs = [run for run in scores.runs if run.labels["role"] == "main"]
    headline, served, serving_rows = serve_study(out_dir, scores.frontier, main_runs)
    figures += served
    targets = None
    if scores.budget is not None:
        curve = budget_curve(scores.budget)
        targets = compute_to_target(curve)
        modes = None
        if options.study.budget_mode == "branch":  # the 1x branches against the study's own runs
            curves = scores.curves
            alone = curves[curves["role"].isin(["main", "control"]) & (curves["fraction"] == 1.0)]
            modes = mode_agreement(curve, budget_curve(alone.assign(budget_multiple=1.0)))
        figures += write_budget_results(curve, targets, out_dir, modes)
    compute = pd.DataFrame([saving_claim(targets)])
    claims = pd.concat([claims, serving_rows, compute], ignore_index=True)
    write_claims(claims, out_dir)
    return {"summary": summary, "exit_headline": headline}, claims, figures


def made_names(out_dir: Path) -> list[str]:
    """Every entry figure1 made in `out_dir`: what `--overwrite` replaces."""
    names = [f"{FIGURE1.name}.json", RUNS, *serving_names()]
    names += [p.name for p in out_dir.glob(f"{DATA}*")]
    names += [p.name for p in out_dir.glob(earlier_look_file("*"))]  # the claims of earlier looks
    return names + [stem + suffix for stem in RESULT_STEMS for suffix in RESULT_SUFFIXES]


FIGURE1 = Study(
    name="figure1",
    summary="The paper's Figure 1: three schedules at one matched FLOP budget, over seeds, with claims.",
    options=Figure1Options,
    runs=runs,  # given OUT, as it names OUT's datasets (the study has `inputs`)
    command="figure1",
    command_line=lambda options: figure1_command(
        options.preset, asdict(options.study), budget=options.budget
    ),
    replaces=made_names,
    growing=(),  # the seeds and controls are `study`'s, free: the record keeps the latest call's
    free=("budget", "device", "study", "log"),  # the budget and the seeds are pinned by what they resolve to
    pins=pins,
    upgrade=upgrade,
    inputs=make_inputs,
    then=then,
    evaluate=evaluate,
    write=write,
)
