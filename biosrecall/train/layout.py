"""The layout of a run folder: the one module that names its paths and answers what it holds.

    RUN_DIR/config.json                  the run's settings and plan (`biosrecall.train.run_dir`)
    RUN_DIR/metrics.jsonl                one JSON line per update
    RUN_DIR/checkpoints/0.45/            kept at a budget fraction; its label is the folder name
    RUN_DIR/checkpoints/switch/          kept at a schedule's switch update (fixed-first)
    RUN_DIR/checkpoints/update-00000640/ the whole training state after update 640 (`--keep-updates`)
    RUN_DIR/checkpoints/state-00000800/  the resumable state after update 800 ...
    RUN_DIR/checkpoints/latest           ... a symbolic link to the newest one
    RUN_DIR/checkpoints/.<name>.tmp|.old temporaries of interrupted saves (hidden: names start with ".")
    RUN_DIR/eval/                        `lm eval` and `lm harness` tables (`biosrecall.lm.evaluate`)
    RUN_DIR/gates/<label>/               the learned exit gate of checkpoint <label> (`gate train`,
                                         `biosrecall.eval.gate`): gate.json and calibration.npz
    .RUN_DIR.lock                        beside the folder: held by the one process writing the run

Every checkpoint folder holds the files of `biosrecall.train.checkpoint_files` (`model.safetensors`,
`meta.json`, `training_state.pt`); a kept one also holds the tables evaluation caches there
(`recall.parquet`, `biosrecall.eval.curves`; `exits.parquet`, `biosrecall.eval.serving`). The
trainer writes through this module (`save_latest` swaps `latest` to a complete new state by one
rename, so a kill at any moment leaves a complete state behind); every other module finds a run's files here or through `biosrecall.runs` and spells no name
of its own:

    list_checkpoints("runs/ff")     # {0.25: Path(".../checkpoints/0.25"), ..., 1.0: ...}
    kept_checkpoints("runs/ff")     # {"0.25": ..., "1.0": ..., "switch": ...}
    latest_checkpoint("runs/ff")    # the folder `latest` points at, or None
    finished("runs/ff")             # the final 1.0 checkpoint is there
    saved_states("runs/trunk")      # {640: Path, ...}: the states a branch may start from

Importing this module does not import torch; reading a checkpoint's weights does.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from biosrecall.errors import BiosrecallError
from biosrecall.locking import ASIDE_SUFFIX, TEMPORARY_SUFFIX, lock_path, remove_stale_temporaries
from biosrecall.train.checkpoint_files import (
    META_FILE,
    MODEL_FILE,
    RESUME_REQUIRED,
    STATE_FILE,
    DamagedCheckpoint,
    load_checkpoint,
    load_training_state,
    read_meta,
    save_checkpoint,
    writing,
)

if TYPE_CHECKING:
    import torch

__all__ = [
    "CHECKPOINTS",
    "CONFIG_FILE",
    "EVAL_DIR",
    "GATES_DIR",
    "GATE_CALIBRATION_FILE",
    "GATE_RECORD_FILE",
    "LATEST",
    "METRICS_FILE",
    "META_FILE",
    "MODEL_FILE",
    "EXITS_CACHE_FILE",
    "RECALL_CACHE_FILE",
    "STORED_BITS_CACHE_FILE",
    "STATE_FILE",
    "SWITCH",
    "DamagedCheckpoint",
    "checkpoint_dir",
    "checkpoints_dir",
    "config_file",
    "eval_dir",
    "finished",
    "gate_dir",
    "fraction_dirname",
    "hidden_path",
    "hide_state",
    "holds_nothing_resumable",
    "is_resumable_state",
    "kept_checkpoints",
    "latest_checkpoint",
    "latest_link",
    "list_checkpoints",
    "load_checkpoint",
    "load_training_state",
    "lock_file",
    "metrics_file",
    "newest_intact_checkpoint",
    "read_meta",
    "exits_cache_file",
    "recall_cache_file",
    "stored_bits_cache_file",
    "remove_leftovers",
    "save_latest",
    "saved_states",
    "state_dir",
    "state_dirname",
    "swap_latest",
    "temporary_path",
    "update_dirname",
]

CONFIG_FILE = "config.json"
METRICS_FILE = "metrics.jsonl"
CHECKPOINTS = "checkpoints"
LATEST = "latest"
SWITCH = "switch"
EVAL_DIR = "eval"
RECALL_CACHE_FILE = "recall.parquet"
EXITS_CACHE_FILE = "exits.parquet"
STORED_BITS_CACHE_FILE = "stored_bits.parquet"
GATES_DIR = "gates"
GATE_RECORD_FILE = "gate.json"
GATE_CALIBRATION_FILE = "calibration.npz"
_STATE_PREFIX = "state-"
_UPDATE_PREFIX = "update-"
# The hidden temporary of an atomic write (`biosrecall.atomic`): `.<name>.XXXXXXXX.tmp` or `.old`.
_LEFTOVER = re.compile(r"\.(.+)\.[a-z0-9_]{8}\.(?:tmp|old)")

# ---- names -----------------------------------------------------------------------------------------


def config_file(run_dir: str | Path) -> Path:
    return Path(run_dir) / CONFIG_FILE


def metrics_file(run_dir: str | Path) -> Path:
    return Path(run_dir) / METRICS_FILE


def checkpoints_dir(run_dir: str | Path) -> Path:
    return Path(run_dir) / CHECKPOINTS


def eval_dir(run_dir: str | Path) -> Path:
    """Where `lm eval` and `lm harness` write their tables by default."""
    return Path(run_dir) / EVAL_DIR


def gate_dir(run_dir: str | Path, label: str) -> Path:
    """The folder of the learned exit gate fitted on checkpoint `label` (`biosrecall gate train`)."""
    return Path(run_dir) / GATES_DIR / label


def recall_cache_file(checkpoint: str | Path) -> Path:
    """The recall table `recall-curve` caches inside a checkpoint folder."""
    return Path(checkpoint) / RECALL_CACHE_FILE


def exits_cache_file(checkpoint: str | Path) -> Path:
    """The serving frontier rows `biosrecall.eval.serving` caches inside a checkpoint folder."""
    return Path(checkpoint) / EXITS_CACHE_FILE


def stored_bits_cache_file(checkpoint: str | Path) -> Path:
    """The stored-bits rows `biosrecall capacity` caches inside a checkpoint folder."""
    return Path(checkpoint) / STORED_BITS_CACHE_FILE


def lock_file(run_dir: str | Path) -> Path:
    """The lock a writing process holds, beside the run folder (`biosrecall.locking`)."""
    return lock_path(run_dir)


def fraction_dirname(fraction: float) -> str:
    """`0.45` -> "0.45", `1` -> "1.0": the shortest text that reads back as the same float."""
    return repr(float(fraction))


def update_dirname(update: int) -> str:
    """The folder of a state kept after `update` updates for branching (`TrainConfig.keep_updates`)."""
    return f"{_UPDATE_PREFIX}{int(update):08d}"


def state_dirname(update: int) -> str:
    """The folder of the resumable state after `update` updates (`latest` points at one of them)."""
    return f"{_STATE_PREFIX}{int(update):08d}"


def checkpoint_dir(run_dir: str | Path, fraction: float | str) -> Path:
    """A checkpoint folder by budget fraction, or by folder name ("switch", `update_dirname(N)`)."""
    name = fraction if isinstance(fraction, str) else fraction_dirname(fraction)
    return checkpoints_dir(run_dir) / name


def state_dir(run_dir: str | Path, update: int) -> Path:
    return checkpoints_dir(run_dir) / state_dirname(update)


def latest_link(run_dir: str | Path) -> Path:
    return checkpoints_dir(run_dir) / LATEST


def temporary_path(path: Path) -> Path:
    """`.<name>.tmp` beside `path`: where a folder or link is built before it is renamed to `path`."""
    return path.parent / f".{path.name}{TEMPORARY_SUFFIX}"


def hidden_path(path: Path) -> Path:
    """`.<name>.old` beside `path`: a state hidden by one rename, deleted by the next `swap_latest`."""
    return path.parent / f".{path.name}{ASIDE_SUFFIX}"


# ---- writing (the trainer) -------------------------------------------------------------------------


def save_latest(
    run_dir: str | Path, model: torch.nn.Module, meta: dict[str, Any], training_state: dict[str, Any]
) -> Path:
    """Write `state-<update>/`, point `latest` at it by an atomic link swap, then drop older states."""
    path = state_dir(run_dir, meta["update"])
    save_checkpoint(path, model, meta, training_state)
    swap_latest(run_dir, meta["update"])
    return path


def swap_latest(run_dir: str | Path, update: int) -> None:
    """Point `latest` at the complete state of `update` by one atomic rename of a fresh link, then
    delete every other state. Each is first hidden by one rename, so a kill during the slow delete
    leaves only a hidden leftover (deleted by the next swap), never a visible half-deleted state."""
    root, name, link = checkpoints_dir(run_dir), state_dirname(update), latest_link(run_dir)
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


def hide_state(state: Path) -> Path:
    """Rename a state folder to `.<name>.old` (one atomic step), where the next `swap_latest` deletes it."""
    hidden = hidden_path(state)
    if hidden.exists():  # left by a kill during an earlier delete
        shutil.rmtree(hidden)
    os.replace(state, hidden)
    return hidden


def remove_leftovers(run_dir: str | Path) -> None:
    """Delete the hidden temporaries killed saves left in the run folder (call holding its lock)."""
    for folder in (Path(run_dir), checkpoints_dir(run_dir)):
        names = {found.group(1) for entry in _entries(folder) if (found := _LEFTOVER.fullmatch(entry.name))}
        for name in sorted(names):
            remove_stale_temporaries(folder / name)


def _entries(folder: Path) -> list[Path]:
    return list(folder.iterdir()) if folder.is_dir() and not folder.is_symlink() else []


# ---- questions -------------------------------------------------------------------------------------


def is_resumable_state(path: str | Path) -> bool:
    """A `state-<N>` or `update-<N>` folder of a run's checkpoints: what a run resumes or branches from."""
    path = Path(path)
    return path.parent.name == CHECKPOINTS and path.name.startswith((_STATE_PREFIX, _UPDATE_PREFIX))


def holds_nothing_resumable(run_dir: str | Path) -> bool:
    """A run killed before its first checkpoint: its own files only, and no checkpoint folder yet."""
    run_dir = Path(run_dir)
    names = {entry.name for entry in run_dir.iterdir()}
    if CONFIG_FILE not in names or not names <= {CONFIG_FILE, METRICS_FILE, CHECKPOINTS}:
        return False
    checkpoints = checkpoints_dir(run_dir)
    if not checkpoints.is_dir() or checkpoints.is_symlink():
        return not os.path.lexists(checkpoints)
    return all(entry.name.startswith(".") for entry in checkpoints.iterdir())


def list_checkpoints(run_dir: str | Path) -> dict[float, Path]:
    """Budget-fraction checkpoints of a run, sorted by fraction (the `latest` folder is not listed)."""
    root = checkpoints_dir(run_dir)
    found = {}
    if root.is_dir():
        for child in root.iterdir():
            if (
                child.name.startswith((".", _STATE_PREFIX))
                or child.name == LATEST
                or not (child / META_FILE).is_file()
            ):
                continue
            try:
                found[float(child.name)] = child
            except ValueError:
                continue
    return dict(sorted(found.items()))


def kept_checkpoints(run_dir: str | Path) -> dict[str, Path]:
    """Every kept checkpoint of a run folder by label: the fractions ascending, then switch if kept."""
    kept = {fraction_dirname(f): path for f, path in list_checkpoints(run_dir).items()}
    switch = checkpoint_dir(run_dir, SWITCH)
    if (switch / META_FILE).is_file():
        kept[SWITCH] = switch
    return kept


def finished(run_dir: str | Path) -> bool:
    """The run reached the end of its budget: its final (1.0) checkpoint is there."""
    return 1.0 in list_checkpoints(run_dir)


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    """The folder `latest` points at, or None when the run has not saved one yet."""
    link = latest_link(run_dir)
    return link.resolve() if link.exists() else None


def saved_states(run_dir: str | Path) -> dict[int, Path]:
    """Update -> a checkpoint folder of the run holding the whole training state after that update:
    the states a branch may start from (`biosrecall.train.branch`)."""
    root = checkpoints_dir(run_dir)
    found: dict[int, Path] = {}
    if not root.is_dir():
        return found
    for folder in sorted(root.iterdir()):
        if folder.name.startswith(".") or not (folder / STATE_FILE).is_file():
            continue
        try:
            update = read_meta(folder, RESUME_REQUIRED)["update"]
        except DamagedCheckpoint:
            continue
        found.setdefault(update, folder.resolve())
    return found


def newest_intact_checkpoint(run_dir: str | Path, besides: Path | None = None) -> tuple[Path, int] | None:
    """The kept or state folder with the highest update (other than `besides`) whose meta, weights
    and training state all load: what a run whose `latest` is damaged can still resume from."""
    root = checkpoints_dir(run_dir)
    found = []
    for child in sorted(root.iterdir()) if root.is_dir() else []:
        if child.name.startswith(".") or child.is_symlink() or child.resolve() == besides:
            continue
        try:
            found.append((read_meta(child, RESUME_REQUIRED)["update"], child))
        except BiosrecallError:
            continue
    for update, child in sorted(found, reverse=True):
        try:
            load_checkpoint(child)
            load_training_state(child)
        except BiosrecallError:
            continue
        return child, update
    return None
