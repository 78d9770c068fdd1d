"""Experiment tracking: every metrics.jsonl record and the run's config, also sent to TensorBoard, W&B or
Trackio.

    TrainConfig(..., log=("tensorboard", "wandb"))   # the CLI: biosrecall train ... --log tensorboard,wandb
    tensorboard --logdir runs/ff/tensorboard

The trainer wraps its progress reporter in a `TrackingReporter` (`with_trackers`; on rank 0 only under
torchrun). Each tracker starts when training starts and is sent the resolved config (config.json, with
this call's train config) and then every update's record with the update as its step. metrics.jsonl
stays the record of a run: a tracker that fails to start, or fails later, is one warning line on stderr
and is dropped, and training goes on. A tracker that is not installed is a mistake refused before
anything trains (`require_installed`, which `TrainConfig.validate` calls).

A resumed run continues its tracker runs:
- tensorboard: RUN/tensorboard/ gets a new event file that starts with a purge at the resumed update,
  so TensorBoard hides what a killed process logged after its last save (as metrics.jsonl drops it);
- wandb: the run id is kept in RUN/trackers.json and the run is resumed by it (W&B takes no step twice,
  so the updates it already has are not sent again); offline runs keep the id for `wandb sync`;
- trackio: the run name is kept in RUN/trackers.json and the run is continued by name (resume="allow").
Tracker runs are named after the run folder (Trackio's with a random suffix, since a name identifies
a Trackio run); W&B runs go to the project $WANDB_PROJECT (default "biosrecall"), Trackio runs to
"biosrecall".
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from msgspec import UnsetType
from tqdm.std import tqdm

from biosrecall.atomic import atomic_write_json
from biosrecall.errors import first_line
from biosrecall.records import exact_keys, optional, read_checked_json
from biosrecall.train.run_folder import RunFolder

PROJECT = "biosrecall"
TENSORBOARD_DIR = "tensorboard"
IDS_FILE = "trackers.json"
"""In the run folder: the W&B run id and Trackio run name a resumed run continues."""


@dataclass(frozen=True)
class TrackedRun:
    """What a tracker is told when training starts."""

    folder: RunFolder
    """Where the run writes. A new run's `path` is a temporary folder until its first save publishes it
    (`RunFolder.publish`), so a tracker that writes into the folder reads `path` each time."""
    name: str
    """The run folder as the user named it (e.g. runs/ff): W&B's run name, the start of Trackio's."""
    config: dict[str, Any]
    """The resolved config: config.json with this call's train config."""
    first_update: int
    """0 for a new run; the update a resumed run continues from."""


class Tracker:
    """What every tracker adapter does."""

    name: str

    def start(self, run: TrackedRun) -> None: ...

    def log(self, record: dict[str, float], step: int) -> None: ...

    def finish(self) -> None: ...


class TensorBoardTracker(Tracker):
    """Event files in RUN/tensorboard/ (through torch.utils.tensorboard)."""

    name = "tensorboard"

    def start(self, run: TrackedRun) -> None:
        self.run_folder = run.folder
        self.writer = self._open(purge_step=run.first_update or None)
        self.writer.add_text("config", f"```\n{json.dumps(run.config, indent=2)}\n```", run.first_update)
        self.writer.flush()

    def _open(self, purge_step: int | None = None):
        """A writer into the run folder where it is now, which `folder` remembers."""
        from torch.utils.tensorboard import SummaryWriter  # the optional extra `track`

        self.folder = self.run_folder.path
        return SummaryWriter(str(self.folder / TENSORBOARD_DIR), purge_step=purge_step)

    def log(self, record: dict[str, float], step: int) -> None:
        if self.folder != self.run_folder.path:  # a new run was swapped into place after its first save
            self.finish()
            self.writer = self._open()  # a second event file, which TensorBoard joins
        for key, value in record.items():
            self.writer.add_scalar(key, value, step)
        # The writer reopens its file by path: everything must be on disk before the folder is renamed.
        self.writer.flush()

    def finish(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None


class WandbTracker(Tracker):
    """A W&B run resumed by the id kept in RUN/trackers.json ($WANDB_MODE=offline works without a login)."""

    name = "wandb"

    def start(self, run: TrackedRun) -> None:
        import wandb

        fresh = {
            "id": secrets.token_hex(4),  # as W&B makes them: 8 characters of [0-9a-z]
            "project": os.environ.get("WANDB_PROJECT") or PROJECT,
        }
        ids = run_ids(run.folder.path, self.name, fresh)
        self.run = wandb.init(
            project=ids["project"],
            id=ids["id"],
            name=run.name,
            config=run.config,
            resume="allow",
            settings=wandb.Settings(console="off"),  # leave the process's stdout and stderr alone
        )

    def log(self, record: dict[str, float], step: int) -> None:
        if step >= self.run.step:  # a resumed run already holds the earlier steps
            self.run.log(record, step=step)

    def finish(self) -> None:
        self.run.finish()


class TrackioTracker(Tracker):
    """A Trackio run (a local SQLite database, or a Space with $TRACKIO_SPACE_ID) continued by the name
    kept in RUN/trackers.json."""

    name = "trackio"

    def start(self, run: TrackedRun) -> None:
        import trackio

        fresh = {
            "project": PROJECT,
            "name": f"{run.name}-{secrets.token_hex(3)}",  # run names identify a run within its project
        }
        ids = run_ids(run.folder.path, self.name, fresh)
        with contextlib.redirect_stdout(sys.stderr):  # stdout is the command's own output
            self.run = trackio.init(
                project=ids["project"], name=ids["name"], config=run.config, resume="allow"
            )

    def log(self, record: dict[str, float], step: int) -> None:
        self.run.log(record, step=step)

    def finish(self) -> None:
        import trackio

        with contextlib.redirect_stdout(sys.stderr):
            trackio.finish()  # the current run, this one; unlike Run.finish it is not finished again at exit


ADAPTERS: dict[str, Callable[[], Tracker]] = {
    adapter.name: adapter for adapter in (TensorBoardTracker, WandbTracker, TrackioTracker)
}


WandbIds = exact_keys("WandbIds", ("id", "project"), str)
"""The W&B run id and project."""
TrackioIds = exact_keys("TrackioIds", ("project", "name"), str)
"""The Trackio project and run name."""


@dataclass(kw_only=True)
class TrackerIds:
    """RUN/trackers.json: what each tracker a run logged to needs to continue the same run."""

    wandb: WandbIds | UnsetType = optional()
    """The W&B run a resume continues (`WandbTracker`)."""
    trackio: TrackioIds | UnsetType = optional()
    """The Trackio run a resume continues (`TrackioTracker`)."""


def run_ids(folder: Path, tracker: str, fresh: dict[str, str]) -> dict[str, str]:
    """The ids of `tracker`'s run kept in the run folder's trackers.json (checked as a `TrackerIds`; a
    hand-edited file is one line naming the field); a run that has none keeps `fresh` there first."""
    path = folder / IDS_FILE
    stored = read_checked_json(path, TrackerIds, "tracker ids") if os.path.lexists(path) else {}
    if tracker not in stored:
        atomic_write_json(path, {**stored, tracker: fresh})
    return stored.get(tracker, fresh)


def with_trackers(reporter, config, trainer):
    """`reporter`, also sending each record to the trackers `config.log` names (on the main process of
    a run only; `trainer` is the `Trainer`, whose `folder` moves when a new run is swapped in)."""
    if not config.log or not trainer.dist.is_main:
        return reporter
    return TrackingReporter(reporter, [ADAPTERS[name]() for name in config.log], trainer)


class TrackingReporter:
    """A progress reporter that also drives trackers; see the module docstring."""

    def __init__(self, inner, trackers: list[Tracker], trainer):
        self.inner, self.trackers, self.trainer = inner, trackers, trainer

    def start(self, total: int, done: int) -> None:
        self.inner.start(total, done)
        folder, train_config = self.trainer.folder, self.trainer.config.to_dict()
        config = json.loads(json.dumps({**folder.read_config(), "train_config": train_config}))
        run = TrackedRun(folder, str(self.trainer.final.path), config, done)
        self._each("start", lambda tracker: tracker.start(run))

    def update(self, record: dict[str, Any]) -> None:
        self.inner.update(record)
        # Every value of the trainer's row is a number; the update is the step.
        scalars = {key: value for key, value in record.items() if key != "update"}
        self._each("log", lambda tracker: tracker.log(scalars, record["update"]))

    def message(self, text: str) -> None:
        self.inner.message(text)

    def close(self) -> None:
        try:
            self._each("finish", lambda tracker: tracker.finish())
        finally:
            self.trackers = []
            self.inner.close()

    def _each(self, action: str, call: Callable[[Tracker], None]) -> None:
        """`call` on every tracker; one that raises is dropped with one warning line."""
        for tracker in list(self.trackers):
            try:
                call(tracker)
            except Exception as exc:  # noqa: BLE001 - any tracker failure must leave training running
                self.trackers.remove(tracker)
                tqdm.write(  # keeps a progress bar intact
                    f"warning: {tracker.name} failed to {action} ({type(exc).__name__}: {first_line(exc)}); "
                    "training goes on without it (metrics.jsonl holds every record)",
                    file=sys.stderr,
                )
                if action == "log":
                    with contextlib.suppress(Exception):  # it has already been reported as failed
                        tracker.finish()
