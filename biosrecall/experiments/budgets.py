"""The budget sweep's runs: every schedule at several multiples of the base budget, for compute-to-target.

    study = StudyOptions(seeds=(0, 1, 2), budgets=(0.25, 0.5, 1, 2, 4), update_matched=True)
    runs = budget_runs(study, base, tasks, best_lr, plan, warmup)   # per seed: each trunk, then its branches

Two modes (`StudyOptions.budget_mode`):

- branch (default): the paper's idea, that depth variation is a finish, turned into a cheap sweep.
  Every run uses the wsd rate schedule with one absolute warm-up. Per seed, fixed K=4 and fixed-first
  share one trunk, the longest fixed K=4 run, which keeps its state at every other run's branch point:
  fixed K=4 at a smaller budget branches where its own decay starts, fixed-first at its switch (where
  its decay starts too). Uniform and the update-matched control share a uniform trunk the same way.
  Each branch is bit-identical to the standalone run with its settings (`biosrecall.train.branch`), so
  the FLOPs a budget point reports are that standalone run's, trunk included. Runs share a trunk only
  at the same learning rate; when a learning-rate grid gives fixed-first another rate than fixed K=4,
  fixed-first gets a fixed-depth trunk of its own (role "trunk", trained but not reported).
- independent: every budget point is its own run with the preset's rate schedule.

Folders: runs/seed<S>/<label>_b<multiple> (independent) or <label>_wsd_b<multiple> (branch), so runs of
the two modes never share a folder; an independent run at 1x is the main run itself. A branch's task
names its trunk's run and the update it starts from (`from`, `at_update`), which
`biosrecall.experiments.engine` turns into the trunk's folder once the trunk has trained.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace

from biosrecall.errors import BiosrecallError
from biosrecall.experiments.study import (
    FIXED_FIRST,
    FIXED_K4,
    MAIN_SCHEDULES,
    UNIFORM,
    UPDATE_MATCHED,
    StudyOptions,
    Tasks,
    study_run,
)
from biosrecall.sweep.jobs import SweepRun
from biosrecall.train.config import TrainConfig
from biosrecall.train.optim import decay_start

FAMILY = {FIXED_K4: "fixed", FIXED_FIRST: "fixed", UNIFORM: "uniform", UPDATE_MATCHED: "uniform"}
TRUNK_NAMES = (FIXED_K4, UNIFORM, UPDATE_MATCHED)  # one depth rule from start to end: a trunk can be any
TRUNK_OF = {"fixed": FIXED_K4, "uniform": UNIFORM}  # the depth rule of a family's own trunk
Planner = Callable[[SweepRun], object]  # a run -> its Plan (`biosrecall.compute.planner`)


def budget_runs(
    study: StudyOptions,
    base: TrainConfig,
    tasks: Tasks,
    best_lr: Mapping[str, float],
    plan: Planner,
    warmup_updates: int,
) -> list[SweepRun]:
    """Every seed's budget-sweep runs, each trunk before its branches (`study_run` builds each from
    `base` and `tasks`). `plan` plans a run; in branch mode every run warms up over `warmup_updates`
    updates."""
    branch_mode = study.budget_mode == "branch"
    wsd = {"lr_schedule": "wsd", "warmup_updates": warmup_updates} if branch_mode else {}

    def point(name: str, schedule: str, seed: int, lr: float, multiple: float, **more) -> SweepRun:
        return study_run(
            base,
            tasks,
            name,
            schedule,
            seed,
            lr,
            "budget",
            budget=multiple,
            suffix=_suffix(study, multiple),
            **wsd,
            **more,
        )

    runs: list[SweepRun] = []
    for seed in study.seeds:
        points = [
            point(name, schedule, seed, best_lr[name], m)
            for m in study.budgets
            for name, schedule in MAIN_SCHEDULES.items()
        ]
        if study.update_matched:  # uniform for as many updates as fixed K=4 takes at each multiple
            fixed = {
                m: plan(point(FIXED_K4, MAIN_SCHEDULES[FIXED_K4], seed, best_lr[FIXED_K4], m))
                for m in study.budgets
            }
            points += [
                point(UPDATE_MATCHED, "uniform:1-16", seed, best_lr[UNIFORM], m, updates=fixed[m].updates)
                for m in study.budgets
            ]
        if branch_mode:
            points = _as_branches(points, plan, base, tasks, warmup_updates)
        runs += points
    return runs


def _suffix(study: StudyOptions, multiple: float) -> str:
    if study.budget_mode == "independent":
        return "" if multiple == 1 else f"_b{multiple:g}"
    return f"_wsd_b{multiple:g}"


def _as_branches(
    points: list[SweepRun], plan: Planner, base: TrainConfig, tasks: Tasks, warmup_updates: int
) -> list[SweepRun]:
    """Per schedule family and learning rate, the longest run with one depth rule becomes the trunk
    (or, when none is as long as the family's longest run, a trunk of its own is added) and every
    other run a branch of it, at the last update the two share: the switch, or its own decay start."""
    planned = {point.name: plan(point) for point in points}
    groups: dict[tuple[str, float], list[SweepRun]] = {}
    for point in points:
        groups.setdefault((FAMILY[point.labels["name"]], point.config.lr), []).append(point)
    ordered: list[SweepRun] = []
    for (family, lr), members in groups.items():
        longest = max(planned[p.name].updates for p in members)
        trunks = [
            p for p in members if p.labels["name"] in TRUNK_NAMES and planned[p.name].updates == longest
        ]
        if trunks:
            trunk = trunks[0]
        else:  # a family whose longest run switches depth: its constant depth rule as long, not reported
            name, member = TRUNK_OF[family], members[0]
            trunk = study_run(
                base,
                tasks,
                f"{name}_trunk",
                MAIN_SCHEDULES[name],
                member.config.seed,
                lr,
                "trunk",
                budget=member.labels["budget"],
                suffix="_wsd",
                updates=longest,
                lr_schedule="wsd",
                warmup_updates=warmup_updates,
            )
        branches = [_branch(p, planned[p.name], trunk, warmup_updates) for p in members if p is not trunk]
        kept = tuple(sorted({branch.task["at_update"] for branch in branches}))
        ordered.append(replace(trunk, config=replace(trunk.config, keep_updates=kept)) if kept else trunk)
        ordered += branches
    return ordered


def _branch(point: SweepRun, planned, trunk: SweepRun, warmup_updates: int) -> SweepRun:
    at = decay_start(planned.updates, point.config)
    if planned.switch_update is not None:
        at = min(at, planned.switch_update)
    if at <= warmup_updates:
        raise BiosrecallError(
            f"budget multiple {point.labels['budget']:g} is too small to branch {point.labels['name']}: its "
            f"branch point {at} is inside the {warmup_updates}-update warm-up"
        )
    return replace(point, task={**point.task, "from": trunk.name, "at_update": at})
