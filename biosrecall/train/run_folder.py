"""The run folder: the one class that names a run's files, reads them and writes them.

    RUN/config.json                  task, dataset, resolved model and train configs, plan, versions, machine
    RUN/metrics.jsonl                one JSON line per update
    RUN/checkpoints/0.45/            kept at a budget fraction; its label is the folder name
    RUN/checkpoints/switch/          kept at a schedule's switch update (fixed-first)
    RUN/checkpoints/update-00000640/ the whole training state after update 640 (`--keep-updates`)
    RUN/checkpoints/state-00000800/  the resumable state after update 800 ...
    RUN/checkpoints/latest           ... a symbolic link to the newest one
    RUN/checkpoints/.<name>.tmp|.old temporaries of interrupted saves (hidden: names start with ".")
    RUN/eval/                        `lm eval` and `lm harness` tables (`biosrecall.lm.evaluate`;
                                     `lm_eval_tables` names the cached NLL and exit tables)
    RUN/gates/<label>/               the learned exit gate of checkpoint <label> (`gate train`,
                                     `biosrecall.eval.gate`): gate.json and calibration.npz
    .RUN.lock                        beside the folder: held by the one process writing the run

Every checkpoint folder holds the files of `biosrecall.train.checkpoint_files` (`model.safetensors`,
`meta.json`, `training_state.pt`); a kept one also holds the tables evaluation caches there
(`recall.parquet`, `exits.parquet`, `stored_bits.parquet`, `state_norm.parquet`). Every command reads
runs through this module and spells no name of its own:

    run = RunFolder("runs/ff")
    run.read_config()                         # config.json, checked
    run.kept_checkpoints()                    # {"0.25": ..., "1.0": ..., "switch": ...}
    run.select_checkpoints("0.45,final")      # the selector syntax every command takes (below)
    run.training_data(meta)                   # the dataset or corpus it was trained on
    run.finished()                            # the final 1.0 checkpoint is there
    run.saved_states()                        # {640: Path, ...}: the states a branch may start from

**Creation.** A run folder is refused when it already holds a run, unless the user resumes or
overwrites it (a run killed before its first resumable state holds nothing to lose and is simply
replaced: `check_new_or_resumable`). A new run is built under a temporary sibling name (`start`) and
swapped into place once it has saved a resumable state (`publish`), so a run that fails or is killed
before (a bad option, a full disk, a `kill -9`) leaves the old folder as it was, readable at once. The
swap changes one object: the `RunFolder` that `start` returned, which the trainer, its checkpointer
and the metrics log all hold.

**Crash safety.** `save_latest` writes `state-<update>/` whole under a temporary name, then points
`latest` at it by one rename of a fresh link, so a kill at any moment leaves a complete state behind.
`read_config` and `read_metrics` are the only readers of those two files; each checks what it reads
and reports damage in one line naming the file.

**Selectors** (`--checkpoint` of every command that takes one), a comma list or the option repeated:

    final      the largest kept budget fraction (normally 1.0)
    fractions  every kept budget-fraction checkpoint
    all        every kept checkpoint: the fractions and, where the run kept one, switch
    switch     the checkpoint at a schedule's switch update (fixed_first schedules keep one)
    0.45       one budget fraction in (0, 1]

Labels are the checkpoint folder names, ordered fractions first (ascending), then "switch".

Importing this module does not import torch (`--help` of every command reads it).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import platform
import re
import shutil
import sys
from collections.abc import Callable, Iterable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import numpy as np
from msgspec import Meta, UnsetType

from biosrecall import __version__
from biosrecall.atomic import (
    OutputRecord,
    atomic_directory,
    atomic_write_json,
    atomic_write_text,
    refuse_file,
)
from biosrecall.errors import BiosrecallError, first_line
from biosrecall.files import require_regular_file
from biosrecall.locking import ASIDE_SUFFIX, TEMPORARY_SUFFIX, lock_path, remove_stale_temporaries
from biosrecall.model.config import ModelConfig
from biosrecall.numbers import FLOAT_MAX, check_number, parse_float
from biosrecall.records import Count, optional, read_checked_json
from biosrecall.train.checkpoint_files import (
    META_FILE,
    STATE_FILE,
    DamagedCheckpoint,
    load_checkpoint,
    load_training_state,
    read_meta,
    register_recorded_recipe,
    save_checkpoint,
    writing,
)
from biosrecall.train.config import ITEM_LIMITS, TrainConfig, resolve_seq_len

if TYPE_CHECKING:
    import torch

CONFIG_FILE = "config.json"
METRICS_FILE = "metrics.jsonl"
CHECKPOINTS = "checkpoints"
# What marks a folder as a run: the only kind `--overwrite` replaces.
RUN_RECORD = OutputRecord("train", CONFIG_FILE, "train_config")
LATEST = "latest"
SWITCH = "switch"
EVAL_DIR = "eval"
LM_NLL_TABLE = "nll"
"""The name (without suffix) of `lm eval`'s NLL table in a run's eval folder."""
LM_EXIT_TABLE = "nll_exit"
"""The name (without suffix) of the table of exit rules `lm eval` writes in a run's eval folder."""
GATES_DIR = "gates"
GATE_RECORD_FILE = "gate.json"
GATE_CALIBRATION_FILE = "calibration.npz"
RECALL_CACHE_FILE = "recall.parquet"
EXITS_CACHE_FILE = "exits.parquet"
STORED_BITS_CACHE_FILE = "stored_bits.parquet"
STATE_NORM_CACHE_FILE = "state_norm.parquet"
FINAL, FRACTIONS, ALL = "final", "fractions", "all"
KEYWORDS = (FINAL, FRACTIONS, ALL, SWITCH)
_STATE_PREFIX = "state-"
_UPDATE_PREFIX = "update-"
# The hidden temporary of an atomic write (`biosrecall.atomic`): `.<name>.XXXXXXXX.tmp` or `.old`.
_LEFTOVER = re.compile(r"\.(.+)\.[a-z0-9_]{8}\.(?:tmp|old)")
_DATA_KIND = {"bios": "dataset", "lm": "corpus"}


class RunFolder:
    """One run folder (see the module docstring); cheap to make, it holds only the path (and, while a
    new run is built under a temporary name, where `publish` puts it)."""

    def __init__(
        self, path: str | Path, *, publish_to: Path | None = None, swap: Callable[[], None] | None = None
    ):
        self.path = Path(path)
        self._publish_to, self._swap = publish_to, swap

    def __repr__(self) -> str:
        return f"RunFolder({str(self.path)!r})"

    # ---- names ----------------------------------------------------------------------------------

    @property
    def config_file(self) -> Path:
        return self.path / CONFIG_FILE

    @property
    def metrics_file(self) -> Path:
        return self.path / METRICS_FILE

    @property
    def checkpoints_dir(self) -> Path:
        return self.path / CHECKPOINTS

    @property
    def latest_link(self) -> Path:
        return self.checkpoints_dir / LATEST

    @property
    def eval_dir(self) -> Path:
        """Where `lm eval` and `lm harness` write their tables by default."""
        return self.path / EVAL_DIR

    def lm_eval_tables(self) -> tuple[Path, Path]:
        """(the NLL table, the exit rules' table) that `lm eval` caches in the eval folder, as parquet
        (`biosrecall.lm.evaluate` writes them, a csv beside each): where every LM study reads them."""
        return self.eval_dir / f"{LM_NLL_TABLE}.parquet", self.eval_dir / f"{LM_EXIT_TABLE}.parquet"

    @property
    def lock_file(self) -> Path:
        """The lock a writing process holds, beside the run folder (`biosrecall.locking`)."""
        return lock_path(self.path)

    def gate_dir(self, label: str) -> Path:
        """The folder of the learned exit gate fitted on checkpoint `label` (`biosrecall gate train`)."""
        return self.path / GATES_DIR / label

    def checkpoint_dir(self, fraction: float | str) -> Path:
        """A checkpoint folder by budget fraction, or by folder name ("switch", `update_dirname(N)`)."""
        name = fraction if isinstance(fraction, str) else fraction_dirname(fraction)
        return self.checkpoints_dir / name

    def state_dir(self, update: int) -> Path:
        return self.checkpoints_dir / state_dirname(update)

    # ---- creating a run -------------------------------------------------------------------------

    def check_new_or_resumable(self, resume: bool, overwrite: bool) -> bool:
        """Check the folder for a resumable run (`resume`) or a new one; returns whether the new run will
        replace what the folder holds (with `overwrite`, or a run that never saved a resumable state)."""
        if resume and overwrite:
            raise BiosrecallError("--resume and --overwrite contradict each other; choose one")
        refuse_file(self.path)  # before training, a dangling link included
        if resume:
            self.require_run()
            return False
        if not self.path.is_dir() or not any(self.path.iterdir()):
            return False
        if overwrite or self.holds_nothing_resumable():
            return True  # `start` replaces only a run (RUN_RECORD): a folder of other files stays
        raise BiosrecallError(f"run folder {self.path} already holds files (pass --resume or --overwrite)")

    def start(self, replace: bool, building: ExitStack) -> RunFolder:
        """The folder of a new run, built under a temporary sibling name until its `publish` swaps it
        into place (a replaced run is moved aside first and deleted only once the new one is in); an
        exception before that unwinds `building`, which removes it and leaves this folder as it was."""
        temporary = building.enter_context(atomic_directory(self.path, overwrite=replace, record=RUN_RECORD))
        return RunFolder(temporary, publish_to=self.path, swap=building.close)

    def started_elsewhere(self, temporary: Path) -> RunFolder:
        """The folder another process `start`ed at `temporary` (a torchrun rank other than 0): its
        `publish` only follows the rename that process makes."""
        return RunFolder(temporary, publish_to=self.path)

    @property
    def building(self) -> bool:
        """A new run under its temporary name, not yet published."""
        return self._publish_to is not None

    def publish(self) -> None:
        """Swap a run being built into place. Only this object's path changes: everything writing the
        run holds this RunFolder (the trainer, its checkpointer, the metrics log), so every later
        write lands in the run's own folder, and a file already open moved with the rename."""
        if self._swap is not None:
            with writing(self._publish_to):
                self._swap()
        self.path, self._publish_to, self._swap = self._publish_to, None, None

    def write_config(self, record: dict[str, Any]) -> None:
        with writing(self.config_file):
            atomic_write_json(self.config_file, {**record, "versions": versions(), "machine": machine()})

    # ---- the resumable state --------------------------------------------------------------------

    def save_latest(
        self, model: torch.nn.Module, meta: dict[str, Any], training_state: dict[str, Any]
    ) -> None:
        """Write `state-<update>/`, point `latest` at it by an atomic link swap, then drop older states."""
        save_checkpoint(self.state_dir(meta["update"]), model, meta, training_state)
        self.swap_latest(meta["update"])

    def swap_latest(self, update: int) -> None:
        """Point `latest` at the complete state of `update` by one atomic rename of a fresh link, then
        delete every other state. Each is first hidden by one rename, so a kill during the slow delete
        leaves only a hidden leftover (deleted by the next swap), never a visible half-deleted state."""
        root, name, link = self.checkpoints_dir, state_dirname(update), self.latest_link
        link_tmp = temporary_path(link)
        with writing(link):
            link_tmp.unlink(missing_ok=True)
            os.symlink(name, link_tmp)
            os.replace(link_tmp, link)
            for old in root.glob(f"{_STATE_PREFIX}*"):
                if old.name != name:
                    hide_state(old)
        for leftover in root.glob(f".{_STATE_PREFIX}*{ASIDE_SUFFIX}"):
            shutil.rmtree(leftover, ignore_errors=True)

    def remove_leftovers(self) -> None:
        """Delete the hidden temporaries killed saves left in the run folder (call holding its lock)."""
        for folder in (self.path, self.checkpoints_dir):
            names = {
                found.group(1) for entry in _entries(folder) if (found := _LEFTOVER.fullmatch(entry.name))
            }
            for name in sorted(names):
                remove_stale_temporaries(folder / name)

    def latest_checkpoint(self) -> Path | None:
        """The folder `latest` points at, or None when the run has not saved one yet."""
        return self.latest_link.resolve() if self.latest_link.exists() else None

    def holds_nothing_resumable(self) -> bool:
        """A run killed before its first checkpoint: its own files only, and no checkpoint folder yet."""
        names = {entry.name for entry in self.path.iterdir()}
        if CONFIG_FILE not in names or not names <= {CONFIG_FILE, METRICS_FILE, CHECKPOINTS}:
            return False
        checkpoints = self.checkpoints_dir
        if not checkpoints.is_dir() or checkpoints.is_symlink():
            return not os.path.lexists(checkpoints)
        return all(entry.name.startswith(".") for entry in checkpoints.iterdir())

    def saved_states(self) -> dict[int, Path]:
        """Update -> a checkpoint folder of the run holding the whole training state after that update:
        the states a branch may start from (`biosrecall.train.branch`)."""
        found: dict[int, Path] = {}
        for update, folder in self._resumable_folders():
            if (folder / STATE_FILE).is_file():
                found.setdefault(update, folder.resolve())
        return found

    def newest_intact_checkpoint(self, besides: Path | None = None) -> tuple[Path, int] | None:
        """The kept or state folder with the highest update (other than `besides`) whose meta, weights
        and training state all load: what a run whose `latest` is damaged can still resume from."""
        found = [(update, child) for update, child in self._resumable_folders() if child.resolve() != besides]
        for update, child in sorted(found, reverse=True):
            with contextlib.suppress(BiosrecallError):
                load_checkpoint(child)
                load_training_state(child)
                return child, update
        return None

    def _resumable_folders(self) -> list[tuple[int, Path]]:
        """(update, folder) of each checkpoint folder whose meta.json is a resumable state's."""
        found = []
        for folder in self._checkpoint_folders():
            with contextlib.suppress(DamagedCheckpoint):
                found.append((read_meta(folder, resumable=True)["update"], folder))
        return found

    def _checkpoint_folders(self) -> list[Path]:
        """The folders under checkpoints/ by name: kept checkpoints and states, not `latest` (a link)
        nor the hidden temporaries of interrupted saves."""
        root = self.checkpoints_dir
        entries = root.iterdir() if root.is_dir() else ()
        return sorted(entry for entry in entries if not entry.name.startswith(".") and not entry.is_symlink())

    # ---- reading a run --------------------------------------------------------------------------

    def require_run(self) -> None:
        """Refuse, in one line, a folder that holds no run (no config.json)."""
        if not os.path.lexists(self.config_file):
            raise BiosrecallError(f"{self.path} is not a run folder (no {CONFIG_FILE})")

    def read_config(self) -> dict[str, Any]:
        """The run's `config.json` as JSON read it, checked as a `RunConfigRecord`."""
        self.require_run()
        return read_checked_json(self.config_file, RunConfigRecord, "run config")

    def read_metrics(self, limit: int | None = None) -> list[dict[str, Any]]:
        """Every logged update of the run (the first `limit`), in order (a last line torn by a hard kill
        is dropped)."""
        return _read_rows(self.metrics_file, limit)

    def fraction_checkpoints(self) -> dict[float, Path]:
        """Budget-fraction checkpoints of the run, sorted by fraction (the `latest` folder is not listed)."""
        found = {}
        for child in self._checkpoint_folders():
            with contextlib.suppress(ValueError):  # a name that is no fraction: a state, switch, update-N
                if (child / META_FILE).is_file():
                    found[float(child.name)] = child
        return dict(sorted(found.items()))

    def kept_checkpoints(self) -> dict[str, Path]:
        """Every kept checkpoint by label: the fractions ascending, then switch if kept."""
        kept = {fraction_dirname(f): path for f, path in self.fraction_checkpoints().items()}
        switch = self.checkpoint_dir(SWITCH)
        if (switch / META_FILE).is_file():
            kept[SWITCH] = switch
        return kept

    def finished(self) -> bool:
        """The run reached the end of its budget: its final (1.0) checkpoint is there."""
        return 1.0 in self.fraction_checkpoints()

    def select_checkpoints(self, selector: str | float | Iterable[str | float] = ALL) -> dict[str, Path]:
        """The run's checkpoints named by `selector` (text, or repeated values or parts), by label.
        A malformed selector or a checkpoint the run does not have raises one line naming the run and
        listing what it has."""
        kept = self._kept_or_refused()
        try:
            parsed = parse_selector(selector)
        except BiosrecallError as exc:
            raise BiosrecallError(f"{exc}; {self.path} has {_listing(kept)}") from None
        chosen: dict[str, Path] = {}
        for part in parsed:
            for label in self._labels(part, kept):
                chosen[label] = kept[label]
        return dict(sorted(chosen.items(), key=lambda item: _order(item[0])))

    def select_checkpoint(self, selector) -> tuple[str, Path]:
        """The one checkpoint `selector` names (a command that works on a single checkpoint)."""
        chosen = self.select_checkpoints(selector)
        if len(chosen) != 1:
            asked = ",".join(
                part if isinstance(part, str) else f"{part:g}" for part in parse_selector(selector)
            )
            raise BiosrecallError(
                f"--checkpoint names one checkpoint here, but {asked!r} names {_listing(chosen)} in {self.path}"
            )
        return next(iter(chosen.items()))

    def _kept_or_refused(self) -> dict[str, Path]:
        """`kept_checkpoints`; a folder that holds no run, or no checkpoint yet, is refused."""
        self.require_run()
        kept = self.kept_checkpoints()
        if not kept:
            raise BiosrecallError(
                f"{self.path} has no checkpoints yet (no folders under {self.checkpoints_dir})"
            )
        return kept

    def _labels(self, part: str | float, kept: dict[str, Path]) -> list[str]:
        """The labels `part` names; one the run does not have is refused, listing those it has."""
        fractions = [label for label in kept if label != SWITCH]  # ascending: `kept_checkpoints`
        if part in (ALL, FRACTIONS):
            return list(kept) if part == ALL else fractions
        if part == FINAL:
            found, missing = fractions[-1:], "budget-fraction checkpoint yet"
        elif part == SWITCH:
            found = [SWITCH] if SWITCH in kept else []
            missing = "switch checkpoint: only schedules with a switch, such as fixed_first, keep one"
        else:
            found = [label for label in fractions if math.isclose(float(label), part, abs_tol=1e-9)]
            missing = f"checkpoint at fraction {part:g}"
        if not found:
            raise BiosrecallError(f"{self.path} has no {missing} (it has {_listing(kept)})")
        return found

    def training_data(self, meta_or_record: dict, data_dir: str | Path | None = None) -> Path:
        """The dataset (bioS) or corpus (LM) folder the run was trained on: `data_dir` when given, else
        the path recorded in its config.json or checkpoint meta (a relative one first against the run
        folder, as a study archive writes it, then as given)."""
        kind = _data_kind(meta_or_record)
        if data_dir is not None:
            path = Path(data_dir)
            if not path.is_dir():
                raise BiosrecallError(f"{kind} folder {path} does not exist")
            return path
        recorded = (meta_or_record.get("dataset") or {}).get("path")
        if not recorded:
            raise BiosrecallError(f"{self.path} records no {kind} it was trained on; pass --data DIR")
        for candidate in (self.path / recorded, Path(recorded)):
            if candidate.is_dir():
                return candidate
        raise BiosrecallError(
            f"{kind} folder {recorded} that {self.path} was trained on is missing (pass --data DIR to point at it)"
        )

    def check_training_data(self, meta_or_record: dict, path: str | Path, found_hash: str) -> None:
        """Refuse data whose manifest hash differs from the one the run recorded at training time."""
        expected = (meta_or_record.get("dataset") or {}).get("manifest_hash")
        if found_hash != expected:
            kind = _data_kind(meta_or_record)
            raise BiosrecallError(
                f"{kind} {path} (manifest hash {str(found_hash)[:12]}) is not the one {self.path} was "
                f"trained on ({str(expected)[:12]}); pass --data with the right {kind} folder"
            )


# ---- names inside a checkpoint folder and the checkpoints folder ------------------------------------


def recall_cache_file(checkpoint: str | Path) -> Path:
    """The recall table `recall-curve` caches inside a checkpoint folder."""
    return Path(checkpoint) / RECALL_CACHE_FILE


def exits_cache_file(checkpoint: str | Path) -> Path:
    """The serving frontier rows `biosrecall.eval.serving` caches inside a checkpoint folder."""
    return Path(checkpoint) / EXITS_CACHE_FILE


def state_norm_cache_file(checkpoint: str | Path) -> Path:
    """The recurrent state's RMS per depth (`biosrecall.eval.state_norms`) cached inside a checkpoint
    folder by `recall-curve --state-norms` and `lm eval --state-norms`."""
    return Path(checkpoint) / STATE_NORM_CACHE_FILE


def fraction_dirname(fraction: float) -> str:
    """`0.45` -> "0.45", `1` -> "1.0": the shortest text that reads back as the same float."""
    return repr(float(fraction))


def update_dirname(update: int) -> str:
    """The folder of a state kept after `update` updates for branching (`TrainConfig.keep_updates`)."""
    return f"{_UPDATE_PREFIX}{int(update):08d}"


def state_dirname(update: int) -> str:
    """The folder of the resumable state after `update` updates (`latest` points at one of them)."""
    return f"{_STATE_PREFIX}{int(update):08d}"


def is_resumable_state(path: str | Path) -> bool:
    """A `state-<N>` or `update-<N>` folder of a run's checkpoints: what a run resumes or branches from."""
    path = Path(path)
    return path.parent.name == CHECKPOINTS and path.name.startswith((_STATE_PREFIX, _UPDATE_PREFIX))


def temporary_path(path: Path) -> Path:
    """`.<name>.tmp` beside `path`: where a folder or link is built before it is renamed to `path`."""
    return path.parent / f".{path.name}{TEMPORARY_SUFFIX}"


def hide_state(state: Path) -> Path:
    """Rename a state folder to `.<name>.old` (one atomic step), where the next `swap_latest` deletes it."""
    hidden = state.parent / f".{state.name}{ASIDE_SUFFIX}"
    if hidden.exists():  # left by a kill during an earlier delete
        shutil.rmtree(hidden)
    os.replace(state, hidden)
    return hidden


def _entries(folder: Path) -> list[Path]:
    return list(folder.iterdir()) if folder.is_dir() and not folder.is_symlink() else []


# ---- selectors ----------------------------------------------------------------------------------------


def parse_selector(text: str | float | Iterable[str | float]) -> tuple[str | float, ...]:
    """Read a selector (text such as "0.45,final", a number, or the values of a repeated option) into
    its parts, each a keyword of `KEYWORDS` or a budget fraction."""
    pieces = [text] if isinstance(text, str | int | float) else list(text)
    raw = ",".join(str(piece) for piece in pieces)
    parts = [part.strip().lower() for part in raw.split(",")]
    fraction = ITEM_LIMITS["checkpoint_fractions"]  # (0, 1]
    try:
        return tuple(
            part if part in KEYWORDS else check_number(part, parse_float(part), fraction) for part in parts
        )
    except BiosrecallError:  # an empty part, or one that is no fraction in (0, 1]
        raise BiosrecallError(
            "--checkpoint takes a budget fraction in (0, 1] such as 0.45, final, fractions, all, switch, "
            f"or a comma list of these (got {raw!r})"
        ) from None


def _order(label: str) -> tuple[int, float]:
    return (1, 0.0) if label == SWITCH else (0, float(label))


def _listing(checkpoints) -> str:
    return ", ".join(sorted(checkpoints, key=_order))


def fraction_of(label: str) -> float | None:
    """The budget fraction of a checkpoint label; None for the switch checkpoint."""
    return None if label == SWITCH else float(label)


def _data_kind(meta_or_record: dict) -> str:
    return _DATA_KIND.get((meta_or_record.get("task") or {}).get("name"), "dataset")


# ---- config.json ------------------------------------------------------------------------------------


def versions() -> dict[str, str]:
    import torch

    return {
        "biosrecall": __version__,
        "torch": torch.__version__,
        "numpy": np.__version__,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
    }


def machine() -> dict[str, Any]:
    """What tells two machines apart when the same seed gives different numbers: the CPU model, the
    math libraries torch was built with, and the threads it uses (single runs differ across CPUs)."""
    import torch

    build = torch.__config__.show()
    return {
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "mkl": torch.backends.mkl.is_available(),
        "mkldnn": torch.backends.mkldnn.is_available(),
        "blas": _build_setting(build, "BLAS_INFO"),
        "lapack": _build_setting(build, "LAPACK_INFO"),
        "cpu_capability": _build_setting(build, "CPU capability usage"),
        "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
    }


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _build_setting(build: str, name: str) -> str | None:
    """One `NAME=value` or `NAME: value` setting of `torch.__config__.show()`, or None."""
    match = re.search(rf"{re.escape(name)}\s*[=:]\s*([^,\n]+)", build)
    return match.group(1).strip() if match else None


@dataclass(kw_only=True)
class RunPlan:
    """The plan section of a run's config.json (`biosrecall.compute.planner.Plan.summary`), as far as
    later stages read it."""

    updates: Annotated[int, Meta(ge=1)]
    """Updates the run takes."""
    budget: Annotated[float, Meta(gt=0, le=FLOAT_MAX)]
    """The FLOP budget the updates fit."""
    switch_update: Count | None = None
    """The update where a fixed-first schedule switches (null: the schedule has none)."""

    def __post_init__(self) -> None:
        if self.switch_update is not None and self.switch_update > self.updates:
            raise ValueError(f"switch_update {self.switch_update} is past the plan's {self.updates} updates")


@dataclass(kw_only=True)
class RunConfigRecord:
    """What every later stage reads from a run's config.json (resume, evaluation, the diagnostic);
    the model and train configs are checked by building them."""

    model_config: dict[str, Any]
    """The resolved `ModelConfig`."""
    train_config: dict[str, Any]
    """The `TrainConfig` (`TrainConfig.to_dict`)."""
    plan: RunPlan
    """The planned updates and budget."""
    task: dict[str, Any] | UnsetType = optional()
    """The task (bios or lm) and the options the command was given."""
    dataset: dict[str, Any] | UnsetType = optional()
    """The data trained on: its path and manifest hash."""

    def __post_init__(self) -> None:
        # A recipe from a file (--recipe-module) is registered before the model config naming it is built.
        register_recorded_recipe({"model_config": self.model_config, "train_config": self.train_config})
        for section, build in (
            ("model_config", ModelConfig.from_dict),
            ("train_config", TrainConfig.from_dict),
        ):
            try:
                build(getattr(self, section))
            except (BiosrecallError, TypeError, ValueError) as exc:
                raise ValueError(f"{section}: {first_line(exc)}") from None


def seq_len_of(record: dict) -> int:
    """The training sequence length of a run, from its config.json record."""
    config = TrainConfig.from_dict(record["train_config"])
    return resolve_seq_len(config, ModelConfig.from_dict(record["model_config"]))


def refuse_differences(
    action: str, name: str, old: Any, new: Any, ignored=frozenset(), owner: str = "run", where: str = ""
) -> None:
    """Refuse `new` unless it equals `old`, two config.json sections (`name`) as JSON reads them back
    (tuples are lists), keys in `ignored` aside: one line naming the first key that differs, as in
    "cannot resume: train_config.lr differs (run has 0.002, given 0.003)"."""
    old, new = json.loads(json.dumps(old)), json.loads(json.dumps(new))
    if not (isinstance(old, dict) and isinstance(new, dict)):
        old, new = {"": old}, {"": new}
    for key in sorted(set(old) | set(new)):
        if key not in ignored and old.get(key) != new.get(key):
            label = f"{name}.{key}" if key else name
            raise BiosrecallError(
                f"cannot {action}: {label} differs ({owner} has {old.get(key)!r}, given {new.get(key)!r}){where}"
            )


# ---- metrics.jsonl ----------------------------------------------------------------------------------


class MetricsLog:
    """Append-only JSON lines, one per update in order; on resume, cut back to the updates the
    checkpoint has seen, so no update is ever logged twice. Each row is written straight to the file
    (no buffer), so a killed run leaves whole rows and at most one torn last line; a run that fails
    cuts the file back to the newest saved state (`saved`, `cut_to_saved`), so it never holds updates
    a resume would train again. A branch starts with its parent's rows (`rows_from`) of the updates
    before the branch point."""

    def __init__(self, run: RunFolder, resume_from_update: int = 0, rows_from: RunFolder | None = None):
        self.run = run
        source = (rows_from or run).metrics_file
        kept = _read_rows(source, limit=resume_from_update) if resume_from_update else []
        if len(kept) < resume_from_update:
            raise BiosrecallError(
                f"cannot resume: {source} holds {len(kept)} updates, the checkpoint has seen "
                f"{resume_from_update}"
            )
        text = "".join(json.dumps(row, sort_keys=True) + "\n" for row in kept)
        with writing(self.path):
            atomic_write_text(self.path, text)
            self._handle = self.path.open("ab", buffering=0)
        self.next_update = resume_from_update
        self._saved = (resume_from_update, len(text.encode("utf-8")))  # (update, bytes up to it)

    @property
    def path(self) -> Path:
        """Read from the run each time: a new run's folder is renamed into place at its first save
        (`RunFolder.publish`), and the open file moves with it."""
        return self.run.metrics_file

    def append(self, record: dict[str, Any]) -> None:
        """Write the row of update `next_update`."""
        data = memoryview((json.dumps(record, sort_keys=True) + "\n").encode("utf-8"))
        with writing(self.path):
            while data:
                data = data[self._handle.write(data) :]
        self.next_update += 1

    def saved(self, update: int) -> None:
        """The run's state of `update` is saved: the rows so far are the ones a resume keeps."""
        if update == self.next_update:
            self._saved = (update, self._handle.tell())

    def cut_to_saved(self) -> None:
        """Drop the rows past the newest saved state: a failed run trains them again when resumed.
        Cutting a file frees space, so it works on a full disk too; should it fail anyway, the rows
        stay and the resume cuts them."""
        update, size = self._saved
        if self.next_update != update:
            with contextlib.suppress(OSError):
                os.truncate(self.path, size)
                self.next_update = update

    def close(self) -> None:
        self._handle.close()


def _read_rows(path: Path, limit: int | None = None) -> list[dict[str, Any]]:
    """The first `limit` (default: all) rows of `metrics.jsonl`, checked to be objects numbered 0, 1,
    2, ...; anything else but a torn last line (which a kill mid-write leaves) is refused with the
    line number. Lines after the first `limit` rows are not read."""
    if not os.path.lexists(path):
        return []
    require_regular_file(path, "metrics log")
    try:
        lines = path.read_bytes().split(b"\n")
    except OSError as exc:
        raise BiosrecallError(f"metrics log {path} cannot be read: {exc.strerror}") from None
    rows: list[dict[str, Any]] = []
    for number, line in enumerate(lines, start=1):
        if len(rows) == limit:
            break
        if not line.strip():
            continue
        try:
            row = json.loads(line.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
            row = None  # not UTF-8 JSON
        if row is None and number == len(lines) and line.startswith(b"{"):
            break  # the unterminated last line of a killed write
        if not isinstance(row, dict) or row.get("update") != len(rows):
            found = "not a JSON row" if row is None else f"expected the row of update {len(rows)}"
            raise BiosrecallError(f"metrics log {path} is corrupt at line {number}: {found}")
        rows.append(row)
    return rows
