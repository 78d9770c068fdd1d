"""Finishing branches: a run that starts from another run's saved state instead of from scratch.

    biosrecall train --data D --out runs/trunk --schedule fixed:4 --lr-schedule wsd --warmup-updates 40 \
        --updates 4000 --keep-updates 640,1280          # a constant-rate trunk that keeps two states
    biosrecall train --data D --out runs/ff-800 --from runs/trunk --at-update 640 --lr-schedule wsd \
        --warmup-updates 40 --schedule fixed_first:k0=4,switch=0.8,finish=uniform --updates 800

A branch is an ordinary run with its own schedule, budget and learning-rate schedule whose first N
updates the parent already trained. It is allowed only when they are exactly the updates it would have
trained itself: the same model, dataset, task, seed, batch and optimizer settings, and for every update
before N the same depth and learning rate (under wsd, the rate is the peak until the decay starts
whatever the run's length, so a fixed-depth trunk serves every budget). The branch then ends
bit-identical on CPU to the standalone run with its settings (tests/test_branch.py), and a budget sweep
trains the shared trunk once. The branch's folder starts with the parent's first N metrics rows, and
its config.json records `branch: {path, at_update}`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from biosrecall.errors import BiosrecallError
from biosrecall.model.config import ModelConfig
from biosrecall.train.config import TrainConfig
from biosrecall.train.optim import learning_rate
from biosrecall.train.run_folder import RunFolder, refuse_differences

# What must match between parent and branch beyond the per-update depths and rates, which
# `check_branch` compares update by update.
SHARED_SETTINGS = ("batch_size", "grad_accum", "seq_len", "seed", "betas", "weight_decay", "grad_clip")
SHARED_SETTINGS += ("precision", "parallel")


@dataclass(frozen=True)
class Branch:
    """Start the run from `parent`'s saved state after `at_update` (at least 1) updates."""

    parent: Path
    at_update: int


def branch_of(parent: str | Path | None, at_update: int | None) -> Branch | None:
    """The branch `--from PARENT --at-update N` asks for; None when neither is given."""
    if parent is None and at_update is None:
        return None
    if parent is None or at_update is None:
        raise BiosrecallError("--from and --at-update go together: give both or neither")
    return Branch(Path(parent), at_update)


def find_state(branch: Branch) -> Path:
    """The parent's saved training state after `branch.at_update` updates (a kept update-N folder, a
    budget-fraction or switch checkpoint, or `latest`: `RunFolder.saved_states`)."""
    parent = RunFolder(branch.parent)
    parent.require_run()
    saved = parent.saved_states()
    if branch.at_update in saved:
        return saved[branch.at_update]
    last = max(saved, default=0)
    if branch.at_update > last:
        raise BiosrecallError(
            f"cannot branch at update {branch.at_update}: {branch.parent} saved states only up to update "
            f"{last}"
        )
    listed = ", ".join(map(str, sorted(saved)))
    raise BiosrecallError(
        f"cannot branch at update {branch.at_update}: {branch.parent} kept states after updates {listed} "
        f"only (train it with --keep-updates {branch.at_update})"
    )


def check_branch(branch: Branch, record: dict[str, Any], plan, config: TrainConfig, replan, ignored) -> None:
    """Refuse a branch whose first `at_update` updates are not the parent's: model, dataset, task and
    the shared settings must be equal (keys in `ignored` aside, such as the dataset's path), and so
    must every earlier update's depth and learning rate. `replan(model_config, train_config)` plans
    the parent again (`trainer.make_plan`)."""
    stored = RunFolder(branch.parent).read_config()
    for section in ("model_config", "dataset", "task"):
        parent, mine = stored.get(section), record.get(section)
        refuse_differences("branch", f"the parent's {section}", parent, mine, ignored, owner="the parent")
    parent_config = TrainConfig.from_dict(stored["train_config"])
    shared = [{name: getattr(each, name) for name in SHARED_SETTINGS} for each in (parent_config, config)]
    refuse_differences("branch", "the parent's train_config", *shared, owner="the parent")
    at = branch.at_update
    if at >= plan.updates:
        raise BiosrecallError(f"cannot branch at update {at}: this run has only {plan.updates} updates")
    parent_plan = replan(ModelConfig.from_dict(record["model_config"]), parent_config)
    _check_same_updates(at, parent_plan, plan, parent_config, config)


def _check_same_updates(at: int, parent_plan, plan, parent_config: TrainConfig, config: TrainConfig) -> None:
    # The parent plans at least `at` updates: it saved a state after them (`find_state`).
    depths, parent_depths = np.asarray(plan.depths[:at]), np.asarray(parent_plan.depths[:at])
    differ = np.flatnonzero(depths != parent_depths)
    if len(differ):
        u = int(differ[0])
        raise BiosrecallError(
            f"cannot branch at update {at}: update {u} trains at depth {depths[u]} here but "
            f"{parent_depths[u]} in the parent (the schedules differ before the branch point)"
        )
    for u in range(at):
        mine = learning_rate(u, plan.updates, config)
        theirs = learning_rate(u, parent_plan.updates, parent_config)
        if mine != theirs:
            raise BiosrecallError(
                f"cannot branch at update {at}: update {u} has learning rate {mine:.6g} here but "
                f"{theirs:.6g} in the parent (use wsd with the same --lr and --warmup-updates, branching "
                f"no later than either run's decay)"
            )


def branch_record(branch: Branch) -> dict[str, Any]:
    """What config.json says of the branch. The parent is under "path", which a resume may change
    (`RESUMABLE_DIFFERENCES`): a moved output still resumes its branches."""
    return {"path": str(branch.parent.resolve()), "at_update": branch.at_update}
