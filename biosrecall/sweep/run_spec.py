"""A run spec: one run's TrainConfig and task as the JSON file that `biosrecall train --config FILE` reads.

    text = run_spec_text("train", config, {"data": "/data/bios", "preset": "bios-tiny", "out": "/runs/a"})
    config, overrides, values = read_run_file(Path("runs/.sweep/.specs/a.json"), "bios")

Every run a sweep or a study starts is `python -m biosrecall train --config OUT/.sweep/.specs/<name>.json`
(`lm train` alike): the sweep worker writes the spec just before starting the run and the command line
adds only --resume and --threads. The file has the sections of a run's own config.json, so one reader
(`read_run_file`) serves both, and `biosrecall train --config` on either trains that run again:

    {"task": {"name": "bios", "preset": "bios-tiny", "model_overrides": {"norm": "sandwich"},
              "from": "/runs/trunk", "at_update": 640},
     "train_config": {...TrainConfig.to_dict()...},
     "dataset": {"path": "/data/bios"},
     "out": "/runs/a"}

`train_config` is read back with `TrainConfig.from_dict`, which checks it: there is no trip through
the command's options, and the run is validated once, by the dataclass. The threads field is the
executor's (--threads), so a spec leaves it out. A run's config.json has no `out` (the command line
gives --out) and records the whole model config: of that, only the fields the command can override
are taken, the preset giving the rest.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from biosrecall.errors import BiosrecallError
from biosrecall.records import read_record
from biosrecall.train.config import TrainConfig

SPECS = ".specs"
"""The folder under a sweep's bookkeeping that holds its run specs (a run name never starts with a
dot, so no run's record or log lands there)."""
ENGINE_FIELDS = ("threads",)
"""TrainConfig fields a run spec leaves to the command line (the executor's --threads)."""
TASKS = {"train": "bios", "lm train": "lm"}
"""The task each training command trains: a run spec's and a config.json's `task.name`."""
TRAINED_BY = {task: f"biosrecall {command}" for command, task in TASKS.items()}
TASK_KEYS = ("preset", "model_overrides", "from", "at_update", "tokenizer", "quiet", "no_verify")
"""What a run spec's task section may hold beside its name (keys as the command's options name them)."""


def run_spec_text(command: str, config: TrainConfig, task: Mapping[str, Any]) -> str:
    """The run spec of a `command` run ("train", "lm train") trained with `config`; `task` holds data,
    out and any of `TASK_KEYS` (None: not given), as `biosrecall.sweep.jobs.check_runs` checked it."""
    train_config = {key: value for key, value in config.to_dict().items() if key not in ENGINE_FIELDS}
    section = {"name": TASKS[command], **{key: task[key] for key in TASK_KEYS if task.get(key) is not None}}
    record = {"task": section, "train_config": train_config, "dataset": {"path": task.get("data")}}
    if task.get("out") is not None:
        record["out"] = task["out"]
    return json.dumps(record, indent=1, allow_nan=False, default=str) + "\n"  # default: a Path as its text


def read_run_file(
    path: Path, task: str, overridable: tuple[str, ...] = ()
) -> tuple[TrainConfig, dict[str, Any], dict[str, Any]]:
    """(the TrainConfig, the model overrides, the other option values: data, out, preset, from,
    at_update, tokenizer) of the run spec or run config.json at `path`, for the command that trains
    `task`; a run config.json's model fields count only when in `overridable`. A problem is one
    BiosrecallError line naming the file."""
    spec = read_record(path, RunSpec, "run config")
    if spec.task.get("name") != task:
        made_by = TRAINED_BY.get(spec.task.get("name"), "another command")
        raise BiosrecallError(f"{path} records a run of `{made_by}`, not of `{TRAINED_BY.get(task)}`")
    try:
        config = TrainConfig.from_dict(spec.train_config)
    except (BiosrecallError, TypeError, ValueError) as exc:
        raise BiosrecallError(f"{path}: train_config: {exc}") from None
    overrides = spec.task.get("model_overrides")
    if overrides is None:  # a run's config.json: the whole model config, of which the command's own fields
        overrides = {
            key: spec.model_config[key] for key in overridable if spec.model_config.get(key) is not None
        }
    if not isinstance(overrides, dict):
        raise BiosrecallError(f"run config {path} is corrupt: field 'task.model_overrides' must be an object")
    values = {key: spec.task.get(key) for key in TASK_KEYS if key != "model_overrides"}
    values.update(data=spec.dataset.get("path"), out=spec.out)
    return config, overrides, {key: value for key, value in values.items() if value is not None}


@dataclass(kw_only=True)
class RunSpec:
    """A run spec, or the same sections of a run's config.json, as `read_run_file` reads them."""

    task: dict[str, Any]
    """The task's name (bios or lm) and any of `TASK_KEYS`."""
    train_config: dict[str, Any]
    """The TrainConfig (`TrainConfig.to_dict`)."""
    model_config: dict[str, Any] = field(default_factory=dict)
    """A run config.json's whole model config (a run spec gives task.model_overrides instead)."""
    dataset: dict[str, Any] = field(default_factory=dict)
    """The data to train on: {"path": ...}."""
    out: Any = None
    """The run folder (a run config.json has none: the command line gives --out)."""
