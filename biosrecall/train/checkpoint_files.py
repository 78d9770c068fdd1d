"""The file format of one checkpoint folder: `model.safetensors`, a `meta.json` sidecar and, where
kept, `training_state.pt`, with their one writer and their checked readers.

    CHECKPOINT/model.safetensors   weights (safetensors; tied weights handled)
    CHECKPOINT/meta.json           model config, schedule, update, FLOPs, tokens, seed, dataset hash,
                                   metrics so far
    CHECKPOINT/training_state.pt   optimizer and batch-source state (resume, branches, the diagnostic)

Where such folders sit in a run folder (`checkpoints/<fraction>/`, `switch/`, `state-N/` behind
`latest`) is `biosrecall.train.run_folder.RunFolder`'s business: modules find checkpoints through it
and read each one here. A folder is built under a temporary name and renamed into place
(`save_checkpoint`), so a crash leaves a complete checkpoint or none, and a write that fails (disk
full, no permission) raises `SaveFailed`, one line with the path and the errno.

`read_meta`, `load_checkpoint` and `load_training_state` check what they read (types, required keys,
value ranges) and turn any damage into a `DamagedCheckpoint`, one line naming the file and the problem:

    model, meta = load_checkpoint("runs/ff/checkpoints/0.45")

Importing this module does not import torch (a command that only lists checkpoints never needs it);
the functions that write or load tensors import it when first called.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from msgspec import UNSET, UnsetType
from safetensors import SafetensorError

from biosrecall.atomic import atomic_directory, write_failed
from biosrecall.errors import BiosrecallError, first_line
from biosrecall.files import require_regular_file
from biosrecall.model.config import ModelConfig
from biosrecall.model.recipes import get_recipe, load_recipe_module
from biosrecall.records import Amount, Count, Fraction, optional, read_checked_json

if TYPE_CHECKING:
    import torch

MODEL_FILE = "model.safetensors"
META_FILE = "meta.json"
STATE_FILE = "training_state.pt"


class DamagedCheckpoint(BiosrecallError):
    """A checkpoint file is missing, unreadable or corrupt."""


class SaveFailed(BiosrecallError):
    """Writing a checkpoint or the metrics log failed (disk full, no permission); what was complete
    before is still in place."""


@contextmanager
def writing(path: str | Path) -> Iterator[None]:
    """Turn an I/O failure inside the block into `SaveFailed` naming `path`: the reason and its errno
    (also when a library only says it in its message, as safetensors does; `atomic.write_failed`)."""
    try:
        yield
    except (OSError, SafetensorError) as exc:
        raise SaveFailed(str(write_failed(path, exc))) from None


def save_checkpoint(
    path: str | Path,
    model: torch.nn.Module,
    meta: dict[str, Any],
    training_state: dict[str, Any] | None = None,
) -> Path:
    """Write weights, sidecar and (for `latest`) the training state as one atomic folder."""
    path = Path(path)
    with writing(path), atomic_directory(path, overwrite=True) as tmp:
        save_model(model, str(tmp / MODEL_FILE), metadata={"format": "biosrecall"})
        write_meta(tmp, meta)
        if training_state is not None:
            write_training_state(tmp / STATE_FILE, training_state)
    return path


def save_model(model: torch.nn.Module, filename: str, metadata: dict[str, str]) -> None:
    """safetensors' `save_model`, imported on first use (it imports torch)."""
    from safetensors.torch import save_model as save

    save(model, filename, metadata=metadata)


def write_meta(folder: Path, meta: dict[str, Any]) -> None:
    (folder / META_FILE).write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")


class _WriteRecorder:
    """A file wrapper keeping the OSError of a failed write: torch.save reports it without the errno."""

    def __init__(self, handle):
        self.handle = handle
        self.error: OSError | None = None

    def write(self, data) -> int:
        try:
            return self.handle.write(data)
        except OSError as exc:
            self.error = exc
            raise

    def flush(self) -> None:
        self.handle.flush()


def write_training_state(path: Path, state: dict[str, Any]) -> None:
    """torch.save `state` to `path`; a failed write raises its OSError (errno and all)."""
    import torch

    with open(path, "wb") as handle:
        recorder = _WriteRecorder(handle)
        try:
            torch.save(state, recorder)
        except RuntimeError:
            if recorder.error is not None:
                raise recorder.error from None
            raise


# ---- reading ---------------------------------------------------------------------------------------


@dataclass(kw_only=True)
class CheckpointMeta:
    """The fields of a checkpoint's meta.json that readers use (see `Trainer._meta` for all it holds);
    a kept checkpoint needs only the model config and its update."""

    model_config: dict[str, Any]
    """The resolved model config (checked where a model is built from it, `model_config_of`)."""
    update: Count
    """Updates done when the checkpoint was saved."""
    tokens: Count | UnsetType = optional()
    """Tokens trained on, padding included."""
    real_tokens: Count | UnsetType = optional()
    """Tokens trained on, padding excluded."""
    seed: Count | UnsetType = optional()
    """The run's seed."""
    planned_updates: Count | UnsetType = optional()
    """Updates the run's plan holds."""
    flops: Amount | UnsetType = optional()
    """Modeled training FLOPs spent so far."""
    budget: Amount | UnsetType = optional()
    """The run's FLOP budget."""
    wall_seconds: Amount | UnsetType = optional()
    """Training time so far."""
    loss: float | UnsetType = optional()
    """The last update's training loss."""
    fraction: Fraction | None | UnsetType = optional()
    """The budget fraction a kept checkpoint stands for (null: a state or the switch checkpoint)."""
    fractions_done: list[Fraction] | UnsetType = optional()
    """The budget fractions whose checkpoints are kept so far."""
    schedule: str | UnsetType = optional()
    """The depth schedule's spec."""
    dataset: dict[str, Any] | UnsetType = optional()
    """The data trained on: its path and manifest hash."""
    task: dict[str, Any] | UnsetType = optional()
    """The task (bios or lm) and its options."""

    def __post_init__(self) -> None:
        if self.planned_updates is not UNSET and self.update > self.planned_updates:
            raise ValueError(f"update {self.update} is past the planned {self.planned_updates}")


@dataclass(kw_only=True)
class ResumableMeta(CheckpointMeta):
    """The meta.json of a state a run resumes or branches from: the counters it carries on from, which
    the trainer restores (`field()`: required here, though optional in a kept checkpoint). The settings
    a resume compares (seed, schedule, budget) are compared where the file records them, and always
    in config.json."""

    tokens: Count = field()
    real_tokens: Count = field()
    flops: Amount = field()
    wall_seconds: Amount = field()
    loss: float = field()
    fractions_done: list[Fraction] = field()


def read_meta(path: str | Path, resumable: bool = False) -> dict[str, Any]:
    """The sidecar of one checkpoint folder as JSON read it, checked as a `CheckpointMeta` (a
    `ResumableMeta` when `resumable`); anything wrong raises `DamagedCheckpoint` naming the file."""
    meta_path = Path(path) / META_FILE
    if not os.path.lexists(meta_path):
        raise DamagedCheckpoint(f"{path} is not a checkpoint folder (no {META_FILE})")
    record = ResumableMeta if resumable else CheckpointMeta
    return read_checked_json(meta_path, record, "checkpoint meta", error=DamagedCheckpoint)


def register_recorded_recipe(record: dict[str, Any]) -> None:
    """Register the recipe file a run trained with (`--recipe-module FILE`, recorded in its config.json
    and each meta.json) while the file is still there and the recipe is not installed otherwise: another
    process (a sweep's evaluation, `recall-curve` in a new shell) then rebuilds the model as the
    training process did. Without the file, the recipe's name is refused as not installed."""

    module = (record.get("train_config") or {}).get("recipe_module")
    recipe = (record.get("model_config") or {}).get("recipe")
    if isinstance(module, str) and isinstance(recipe, str) and Path(module).is_file():
        try:
            get_recipe(recipe)
        except BiosrecallError:
            load_recipe_module(module)


def model_config_of(path: str | Path, meta: dict[str, Any]):
    """The `ModelConfig` a checkpoint's meta describes; an invalid one is a `DamagedCheckpoint`."""
    register_recorded_recipe(meta)
    try:
        return ModelConfig.from_dict(meta["model_config"])
    except (BiosrecallError, TypeError, ValueError) as exc:
        raise DamagedCheckpoint(
            f"checkpoint meta {Path(path) / META_FILE} is corrupt: model_config: {first_line(exc)}"
        ) from None


def load_checkpoint(path: str | Path, device: str | torch.device = "cpu"):
    """Rebuild the model described by the sidecar and load its weights; returns (model, meta)."""
    from safetensors.torch import load_model

    from biosrecall.model.looped import LoopedTransformer  # torch: `biosrecall --help` reads this module

    path = Path(path)
    meta = read_meta(path)
    weights = _checkpoint_file(path, MODEL_FILE, "checkpoint weights", f"{path} has no {MODEL_FILE}")
    model_config = model_config_of(path, meta)
    model = LoopedTransformer(model_config)
    try:
        missing, unexpected = load_model(model, str(weights), strict=False)
    except Exception as exc:  # safetensors and torch raise several types for a damaged file
        raise DamagedCheckpoint(f"checkpoint weights {weights} are corrupt: {first_line(exc)}") from None
    if unexpected or _really_missing(model, missing):
        raise DamagedCheckpoint(f"{weights} does not match its config (missing {missing[:3]})")
    model.to(device)
    model.eval()
    return model, meta


def _checkpoint_file(folder: Path, name: str, what: str, absent: str) -> Path:
    """`folder/name`, which must be a regular file (`absent` is the message when it is not there)."""
    if not os.path.lexists(folder / name):
        raise DamagedCheckpoint(absent)
    return require_regular_file(folder / name, what, error=DamagedCheckpoint)


def _really_missing(model: torch.nn.Module, missing: list[str]) -> bool:
    """Tied weights are stored once; a name missing only because it aliases a loaded tensor is fine."""
    state = model.state_dict()
    pointers = {t.data_ptr() for name, t in state.items() if name not in missing}
    return any(state[name].data_ptr() not in pointers for name in missing)


def load_training_state(path: str | Path, optimizer: bool = True) -> dict[str, Any]:
    """`training_state.pt` of a checkpoint: the batch source's state under "source" and, with
    `optimizer`, the optimizer's state dict under "optimizer". Loaded as data only (no code runs)."""
    import torch

    path = Path(path)
    absent = f"{path} holds no optimizer state (it was written by another version)"
    state_path = _checkpoint_file(path, STATE_FILE, "training state", absent)
    try:
        state = torch.load(state_path, map_location="cpu", weights_only=True)
    except Exception as exc:  # truncated zip, garbage, a pickle of something other than data
        raise DamagedCheckpoint(f"training state {state_path} is corrupt: {first_line(exc)}") from None
    required = {"source": ()} | ({"optimizer": ("state", "param_groups")} if optimizer else {})
    for key, inner in required.items():
        value = state.get(key) if isinstance(state, dict) else None
        if not isinstance(value, dict) or any(name not in value for name in inner):
            raise DamagedCheckpoint(f"training state {state_path} is corrupt: no valid {key!r} entry")
    return state
