"""The budget sweep's runs: every schedule at several multiples of the base budget, for compute-to-target.

    study = StudyOptions(seeds=(0, 1, 2), budgets=(0.25, 0.5, 1, 2, 4), update_matched=True)
    specs = budget_runs(study, best_lr, preset_lr, plan)   # per seed: each trunk, then its branches
    config = scaled_budget(base_config, 0.25)               # the TrainConfig budget of a multiple

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
the two modes never share a folder; an independent run at 1x is the main run itself.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from biosrecall.errors import BiosrecallError
from biosrecall.experiments.study import (
    FIXED_FIRST,
    FIXED_K4,
    MAIN_SCHEDULES,
    UNIFORM,
    UPDATE_MATCHED,
    RunSpec,
    StudyOptions,
    make_run,
)
from biosrecall.train.config import TrainConfig, split_budget_of
from biosrecall.train.optim import decay_start

FAMILY = {FIXED_K4: "fixed", FIXED_FIRST: "fixed", UNIFORM: "uniform", UPDATE_MATCHED: "uniform"}
TRUNK_NAMES = (FIXED_K4, UNIFORM, UPDATE_MATCHED)  # one depth rule from start to end: a trunk can be any
TRUNK_OF = {"fixed": FIXED_K4, "uniform": UNIFORM}  # the depth rule of a family's own trunk
Planner = Callable[[RunSpec], tuple]  # spec -> (its Plan, its TrainConfig)


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


def budget_runs(
    study: StudyOptions, best_lr: dict[str, float], preset_lr: float, plan: Planner, warmup_updates: int
) -> list[RunSpec]:
    """Every seed's budget-sweep runs, each trunk before its branches. `plan` plans a spec; in branch
    mode every run warms up over `warmup_updates` updates."""
    runs: list[RunSpec] = []
    for seed in study.seeds:
        points = [
            _point(study, name, seed, best_lr, preset_lr, m) for m in study.budgets for name in MAIN_SCHEDULES
        ]
        if study.update_matched:
            points += [_update_matched(study, seed, best_lr, preset_lr, m, plan) for m in study.budgets]
        if study.budget_mode == "branch":
            points = _as_branches(points, plan, warmup_updates, preset_lr)
        runs += points
    return runs


def _suffix(study: StudyOptions, multiple: float) -> str:
    if study.budget_mode == "independent":
        return "" if multiple == 1 else f"_b{multiple:g}"
    return f"_wsd_b{multiple:g}"


def _point(study, name, seed, best_lr, preset_lr, multiple, updates=None, schedule=None) -> RunSpec:
    run = make_run(name, schedule or MAIN_SCHEDULES[name], seed, best_lr[name], "budget", preset_lr, updates)
    lr_schedule = "wsd" if study.budget_mode == "branch" else None
    return replace(run, label=run.label + _suffix(study, multiple), budget=multiple, lr_schedule=lr_schedule)


def _update_matched(study, seed, best_lr, preset_lr, multiple, plan: Planner) -> RunSpec:
    """Uniform for as many updates as fixed K=4 takes at this multiple (at uniform's learning rate)."""
    fixed, _ = plan(_point(study, FIXED_K4, seed, best_lr, preset_lr, multiple))
    lr = {UPDATE_MATCHED: best_lr[UNIFORM]}
    return _point(study, UPDATE_MATCHED, seed, lr, preset_lr, multiple, fixed.updates, "uniform:1-16")


def _as_branches(
    points: list[RunSpec], plan: Planner, warmup_updates: int, preset_lr: float
) -> list[RunSpec]:
    """Per schedule family and learning rate, the longest run with one depth rule becomes the trunk
    (or, when none is as long as the family's longest run, a trunk of its own is added) and every
    other run a branch of it, at the last update the two share: the switch, or its own decay start."""
    points = [replace(p, warmup_updates=warmup_updates) for p in points]
    planned = {p: plan(p) for p in points}
    groups: dict[tuple[str, float], list[RunSpec]] = {}
    for point in points:
        groups.setdefault((FAMILY[point.name], point.lr), []).append(point)
    ordered: list[RunSpec] = []
    for (family, lr), members in groups.items():
        longest = max(planned[p][0].updates for p in members)
        trunks = [p for p in members if p.name in TRUNK_NAMES and planned[p][0].updates == longest]
        trunk = (
            trunks[0] if trunks else _own_trunk(family, members[0], lr, longest, preset_lr, warmup_updates)
        )
        branches = [_branch(p, planned[p], trunk, warmup_updates) for p in members if p is not trunk]
        ordered.append(replace(trunk, keep_updates=tuple(sorted({b.branch[1] for b in branches}))))
        ordered += branches
    return ordered


def _own_trunk(
    family: str, member: RunSpec, lr: float, updates: int, preset_lr: float, warmup: int
) -> RunSpec:
    """A trunk for a family whose longest run switches depth (fixed-first at another learning rate
    than fixed K=4's): the family's constant depth rule for as many updates. Trained, not reported."""
    name = TRUNK_OF[family]
    run = make_run(f"{name}_trunk", MAIN_SCHEDULES[name], member.seed, lr, "trunk", preset_lr, updates)
    return replace(
        run, label=f"{run.label}_wsd", lr_schedule="wsd", warmup_updates=warmup, budget=member.budget
    )


def _branch(point: RunSpec, planned: tuple, trunk: RunSpec, warmup_updates: int) -> RunSpec:
    run_plan, config = planned
    at = decay_start(run_plan.updates, config)
    if run_plan.switch_update is not None:
        at = min(at, run_plan.switch_update)
    if at <= warmup_updates:
        raise BiosrecallError(
            f"budget multiple {point.budget:g} is too small to branch {point.name}: its branch point {at} "
            f"is inside the {warmup_updates}-update warm-up"
        )
    return replace(point, branch=(trunk.folder, at))
