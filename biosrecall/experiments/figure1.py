"""The paper's Figure 1 as an experiment: seeds, controls and claims judged from the data.

    from biosrecall.experiments.figure1 import run_figure1
    from biosrecall.experiments.study import StudyOptions
    result = run_figure1("runs/figure1", preset="quick", study=StudyOptions(seeds=(0, 1)))

One call generates the dataset, trains the three schedules at one matched FLOP budget for every seed
(plus what `StudyOptions` adds: the update-matched uniform control, a per-schedule learning-rate grid,
the Figure-5 fixed-K sweep), evaluates the 45% and 100% checkpoints at serving depths 1..64, and
writes the tables, figures and claims of `biosrecall.experiments.figure1_results`. Layout:

    OUT/figure1.json               resolved preset, budget, study options, versions, what was run
    OUT/data/ (data_seed<S>/)      the bioS dataset (one per seed with `dataset_seed_per_run`)
    OUT/runs/seed<S>/<label>/      one run folder per run (see `biosrecall.experiments.study`)
    OUT/recall_curve*, summary*.csv, figure1.*, claims.*, lr_grid.*, figure5.*, fixed_sweep*
    OUT/exit_frontier.*, exit_headline.*, exit_summary.*   adaptive-depth serving of every seed's 100%
                                   checkpoints (`biosrecall.experiments.study_serving`)
    OUT/budget_curve.*, compute_to_target.*, budget_modes.*  with budgets: the budget sweep
                                   (`biosrecall.experiments.budgets`, `.budget_results`)
    OUT/runs/.sweep/               each run's spec (.specs/<run>.json), record and log (`biosrecall.sweep`)
    OUT/timings.jsonl, timings.md  wall time per phase of every call (`biosrecall.experiments.study_timings`)

Every run is a `biosrecall train --config OUT/runs/.sweep/.specs/<run>.json` process launched by the
sweep engine's local executor (`biosrecall.experiments.study_engine`), `workers` at a time; the study
describes each run once, as a `SweepRun` holding its `TrainConfig` (`biosrecall.experiments.study`),
and that file holds the config's `to_dict()` (`biosrecall.sweep.run_spec`).

The whole call holds the output's lock (`biosrecall.locking.output_lock`). Calling again continues:
finished runs are kept, an interrupted one resumes from its last save, recall results are cached per
checkpoint, and added seeds or controls only train what is new (`figure1_output` says what is refused).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace
from functools import cached_property
from pathlib import Path
from typing import Any

import pandas as pd

from biosrecall.errors import BiosrecallError
from biosrecall.eval.exits import parse_exits
from biosrecall.eval.scoring import run_labels
from biosrecall.eval.serving import SERVING_CRITERIA, score_runs
from biosrecall.experiments import figure1_output as output
from biosrecall.experiments.budget_results import (
    budget_curve,
    compute_to_target,
    mode_agreement,
    saving_claim,
    write_budget_results,
)
from biosrecall.experiments.budgets import budget_runs
from biosrecall.experiments.claims import write_claims
from biosrecall.experiments.figure1_results import chosen_lr, grid_table, label_runs, write_study_results
from biosrecall.experiments.study import (
    FIXED_K4,
    MAIN_SCHEDULES,
    StudyOptions,
    Tasks,
    dataset_folders,
    dataset_seed,
    grid_runs,
    study_runs,
)
from biosrecall.experiments.study_engine import study_executor, train_study_runs
from biosrecall.experiments.study_serving import serve_study
from biosrecall.experiments.study_timings import StudyTimer
from biosrecall.locking import output_lock
from biosrecall.outputs import write_table
from biosrecall.sweep.jobs import SweepRun
from biosrecall.train.config import TrainConfig, resolve_seq_len
from biosrecall.train.optim import warmup_updates
from biosrecall.train.run_folder import machine, versions
from biosrecall.train.trainer import bios_training_task, make_plan

FIGURE1_SCHEDULES = MAIN_SCHEDULES
FRACTIONS = (0.45, 1.0)
RECORD, DATA, RUNS = output.RECORD, output.DATA, output.RUNS


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
    study = study or StudyOptions()
    settings = _resolve(preset, study.model_overrides)
    out_dir = Path(out_dir)
    config = replace(_train_config(settings, budget, study.seeds[0], device), log=tuple(log))
    record = _record(preset, settings, config, study)
    executor = study_executor(workers, threads, device)
    timer = StudyTimer(
        report, seeds=list(study.seeds), workers=executor.slots(), threads=executor.threads_per_run
    )
    trainer = _Trainer(out_dir, config, settings, study, (executor, report), timer)
    with output_lock(out_dir):
        output.prepare_output(
            out_dir, record, trainer.datasets, settings.people, overwrite, trainer.check_plans, report
        )
        output.write_record(out_dir, record)
        best_lr = _tune_learning_rates(out_dir, trainer)
        trained = study_runs(study, config, trainer.tasks, best_lr, trainer.fixed4_updates())
        trainer.train_all(trained)
        # The main runs' 100% checkpoints are served too: their frontier comes from the same pass.
        main_runs = [run for run in trained if run.labels["role"] == "main"]
        curves, frontier = trainer.evaluate(trained, FRACTIONS, served=main_runs)
        with timer.phase("tables"):
            written = write_study_results(out_dir, curves, [saving_claim()])
        with timer.phase("serving", "writing the exit frontier and its claims"):
            headline, served, claims = _serving(out_dir, frontier, main_runs, written.claims)
        swept = []
        if study.budgets:
            trained_budgets, claims, swept = _budget_sweep(out_dir, trainer, best_lr, claims, curves)
            trained = list({run.name: run for run in trained + trained_budgets}.values())
        write_claims(claims, out_dir)
        timer.save(out_dir)
    runs = {run.name: trainer.runs_dir / run.name for run in trained}
    figures = written.figures + served + swept
    return Figure1Result(out_dir, runs, curves, written.summary, claims, figures, headline)


def _budget_sweep(
    out_dir: Path, trainer: _Trainer, best_lr, claims: pd.DataFrame, study_curves: pd.DataFrame
):
    """Train and score the budget sweep's final checkpoints; write its tables and figure, judge the
    compute claim (its row replaces the "not measured" one), and, in branch mode, compare the 1x
    branches with the study's own runs (the independent runs at 1x)."""
    runs = trainer.budget_runs(best_lr)
    trainer.train_all(runs)
    curves, _ = trainer.evaluate([run for run in runs if run.labels["role"] != "trunk"], (1.0,))
    curves = curves.assign(
        budget_multiple=curves["run"].map({run.name: run.labels["budget"] for run in runs})
    )
    curve = budget_curve(curves)
    targets = compute_to_target(curve)
    modes = None
    if trainer.study.budget_mode == "branch":
        alone = study_curves[
            study_curves["role"].isin(["main", "control"]) & (study_curves["fraction"] == 1.0)
        ]
        modes = mode_agreement(curve, budget_curve(alone.assign(budget_multiple=1.0)))
    written = write_budget_results(curve, targets, out_dir, modes)
    row = saving_claim(targets)
    claims = pd.concat([claims[claims["claim"] != row["claim"]], pd.DataFrame([row])], ignore_index=True)
    return runs, claims, [p for p in written if p.suffix in (".png", ".pdf")]


def _resolve(preset: str, overrides: dict) -> Figure1Preset:
    """The preset, with the study's architecture overrides applied (checked when the plans are made)."""
    if preset not in FIGURE1_PRESETS:
        raise BiosrecallError(
            f"unknown figure1 preset {preset!r}; choose one of: {', '.join(FIGURE1_PRESETS)}"
        )
    settings = FIGURE1_PRESETS[preset]
    if not overrides:
        return settings
    merged = {**dict(settings.model_overrides), **overrides}
    return replace(settings, model_overrides=tuple(sorted(merged.items())))


def _train_config(settings: Figure1Preset, budget, seed: int, device: str) -> TrainConfig:
    """Every run's trainer settings before its schedule, seed and lr; the budget is the preset's
    unless `budget` is given."""
    return TrainConfig(
        batch_size=settings.batch_size,
        seq_len=settings.seq_len,
        lr=settings.lr,
        seed=seed,
        device=device,
        checkpoint_fractions=FRACTIONS,
        budget=budget,
        budget_of=None if budget is not None else f"fixed:4:{settings.budget_updates}",
    )


def _record(preset: str, settings: Figure1Preset, config: TrainConfig, study: StudyOptions) -> dict[str, Any]:
    """What figure1.json holds, as it reads back from JSON (lists, not tuples), so it compares equal."""
    record = {
        "preset": preset,
        "settings": asdict(settings),
        "train_config": config.to_dict(),
        "schedules": MAIN_SCHEDULES,
        "fractions": list(FRACTIONS),
        "dataset_seed": "per run" if study.dataset_seed_per_run else study.seeds[0],
        "study": asdict(study),
        "versions": versions(),
        "machine": machine(),
    }
    return json.loads(json.dumps(record))


class _Trainer:
    """Trains the study's runs, each in its folder, skipping finished ones and resuming stopped ones.

    Each run is described once (`biosrecall.experiments.study.study_run`: its TrainConfig from the
    study's `config`, its task from `tasks`) and handed to its `biosrecall train` process as its run
    spec (`biosrecall.sweep.run_spec`); the dataset is read and checked once per study (`task`)."""

    def __init__(self, out_dir: Path, config, settings, study, engine, timer: StudyTimer):
        self.runs_dir, self.datasets = out_dir / RUNS, dataset_folders(study, out_dir / DATA)
        self.config, self.settings, self.study = config, settings, study
        self.engine, self.timer = engine, timer  # engine: (executor, report)
        overrides = dict(settings.model_overrides) or None
        self.tasks: Tasks = {
            seed: {"data": self.datasets[dataset_seed(study, seed)].resolve(),
                   "preset": settings.model_preset, "model_overrides": overrides}
            for seed in study.seeds
        }  # fmt: skip

    def plan(self, run: SweepRun):
        """The plan of one run (`biosrecall.compute.planner.Plan`)."""
        return make_plan(self.task.model_config(), run.config)

    def budget_runs(self, best_lr) -> list[SweepRun]:
        """The budget sweep's runs, trunks first; in branch mode all warm up as the base fixed K=4 run."""
        warmup = warmup_updates(self.fixed4_updates(), self.config)
        return budget_runs(self.study, self.config, self.tasks, best_lr, self.plan, warmup)

    @cached_property
    def task(self):
        """The bioS task on the first dataset, read and checked once (every dataset has the same
        vocabulary, so one plans every run); first asked for once the datasets exist."""

        data_dir = next(iter(self.datasets.values()))
        return bios_training_task(data_dir, self.settings.model_preset, dict(self.settings.model_overrides))

    def fixed4_updates(self) -> int:

        model_config = self.task.model_config()
        return make_plan(model_config, replace(self.config, schedule=MAIN_SCHEDULES[FIXED_K4])).updates

    def check_plans(self) -> None:
        """Plan every kind of run and build a batch source, so a budget too small for one update, an
        unknown architecture override or a sequence too short for a biography fails before training."""

        self.config.validate()
        task = self.task
        model_config = task.model_config()
        task.batch_source(self.config, resolve_seq_len(self.config, model_config, task.preset))
        best = {name: self.settings.lr for name in MAIN_SCHEDULES}
        runs = grid_runs(self.study, self.config, self.tasks)
        runs += study_runs(self.study, self.config, self.tasks, best, 1)
        if self.study.budgets:
            runs += self.budget_runs(best)
        for run in runs:
            make_plan(model_config, run.config)

    def train_all(self, runs: list[SweepRun]) -> None:
        """Bring every run to done through the sweep engine (finished ones are skipped)."""
        executor, report = self.engine
        with self.timer.phase("training"):
            train_study_runs(self.runs_dir, runs, executor, report)

    def evaluate(self, runs: list[SweepRun], fractions, served=()) -> tuple[pd.DataFrame, Any]:
        """The long recall table of `runs` at `fractions` and depths 1..max_depth, labelled by run,
        and the serving frontier (`SERVING_CRITERIA`) of the `served` runs' final checkpoints, from the
        same pass (None when nothing is served); both with `run` the run's name, `seed<S>/<label>`."""
        settings, executor = self.settings, self.engine[0]
        paths = [self.runs_dir / run.name for run in runs]
        served_paths = [self.runs_dir / run.name for run in served]
        doing = f"scoring {len(paths)} run(s) at depths 1..{settings.max_depth}"
        doing += f", serving {len(served)} of them" if served else ""
        with self.timer.phase("evaluation", f"{doing}, {executor.slots()} at a time"):
            scores = score_runs(paths, fractions, parse_exits(SERVING_CRITERIA) if served else (),
                                max_depth=settings.max_depth, device=self.config.device,
                                people=settings.eval_people, served=served_paths, workers=executor.slots(),
                                threads=executor.threads)  # fmt: skip
        by_label = dict(zip(run_labels(paths), runs, strict=True))
        frontier = scores.frontier
        if frontier is not None:
            frontier = frontier.assign(run=frontier["run"].map(lambda run: by_label[run].name))
        return label_runs(scores.recall, by_label), frontier


def _tune_learning_rates(out_dir: Path, trainer: _Trainer):
    """Each main schedule's learning rate: the grid's winners (OUT/lr_grid.*, written as soon as the
    grid is done, before the other seeds train), or the preset's."""
    study = trainer.study
    if not study.lr_grid:
        return {name: trainer.config.lr for name in MAIN_SCHEDULES}
    runs = grid_runs(study, trainer.config, trainer.tasks)
    trainer.train_all(runs)
    grid = grid_table(trainer.evaluate(runs, (1.0,))[0])
    write_table(grid, out_dir / "lr_grid")
    return chosen_lr(grid)


def _serving(out_dir: Path, frontier: pd.DataFrame, main_runs, claims: pd.DataFrame):
    """The serving results of every main run's 100% checkpoint (scored with its recall,
    `_Trainer.evaluate`) and its claims rows, added before the compute claim (which stays last, where
    the budget sweep replaces it); returns the headline, the frontier figure's files and the claims."""
    headline, figures, rows = serve_study(out_dir, frontier, main_runs)
    compute = claims["claim"] == saving_claim()["claim"]
    claims = pd.concat([claims[~compute], rows, claims[compute]], ignore_index=True)
    return headline, figures, claims
