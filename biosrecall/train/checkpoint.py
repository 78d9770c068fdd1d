"""The one checkpoint format: a folder with `model.safetensors` and a `meta.json` sidecar.

    RUN_DIR/checkpoints/<fraction>/model.safetensors   weights (safetensors; tied weights handled)
    RUN_DIR/checkpoints/<fraction>/meta.json           model config, schedule, update, FLOPs, tokens,
                                                       seed, dataset hash, metrics so far
    RUN_DIR/checkpoints/<fraction>/training_state.pt   optimizer state (for the update diagnostic)
    RUN_DIR/checkpoints/switch/                        the same at a schedule's switch update
    RUN_DIR/checkpoints/latest -> state-<update>/      the same plus `training_state.pt` (optimizer,
                                                       data-loader state) for `--resume`

Each checkpoint folder is built under a temporary name and renamed into place; `latest` is a symbolic
link swapped by rename once the new state folder is complete, and only then is the old one deleted.
So a crash at any moment leaves a complete checkpoint behind, never a half-written one.

    model, meta = load_checkpoint("runs/ff/checkpoints/0.45")
    list_checkpoints("runs/ff")  # {0.25: Path(...), 0.45: Path(...), ...}
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_model, save_model

from biosrecall.atomic import atomic_directory
from biosrecall.errors import BiosrecallError

MODEL_FILE = "model.safetensors"
META_FILE = "meta.json"
STATE_FILE = "training_state.pt"
LATEST = "latest"
SWITCH = "switch"  # weights and optimizer at a schedule's switch update (fixed-first)


def fraction_dirname(fraction: float) -> str:
    """`0.45` -> "0.45", `1` -> "1.0": the shortest text that reads back as the same float."""
    return repr(float(fraction))


def checkpoint_dir(run_dir: str | Path, fraction: float | str) -> Path:
    name = fraction if isinstance(fraction, str) else fraction_dirname(fraction)
    return Path(run_dir) / "checkpoints" / name


def save_checkpoint(
    path: str | Path,
    model: torch.nn.Module,
    meta: dict[str, Any],
    training_state: dict[str, Any] | None = None,
) -> Path:
    """Write weights, sidecar and (for `latest`) the training state as one atomic folder."""
    path = Path(path)
    with atomic_directory(path, overwrite=True) as tmp:
        save_model(model, str(tmp / MODEL_FILE), metadata={"format": "biosrecall"})
        (tmp / META_FILE).write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
        if training_state is not None:
            torch.save(training_state, tmp / STATE_FILE)
    return path


def save_latest(
    run_dir: str | Path, model: torch.nn.Module, meta: dict[str, Any], training_state: dict[str, Any]
) -> Path:
    """Write `state-<update>/`, point `latest` at it by an atomic link swap, then drop older states."""
    root = Path(run_dir) / "checkpoints"
    name = f"state-{int(meta['update']):08d}"
    save_checkpoint(root / name, model, meta, training_state)
    link_tmp = root / f".{LATEST}.tmp"
    link_tmp.unlink(missing_ok=True)
    os.symlink(name, link_tmp)
    os.replace(link_tmp, root / LATEST)
    for old in root.glob("state-*"):
        if old.name != name:
            # Hide it first (one atomic rename): a kill during the slow delete leaves only a hidden
            # leftover, never a visible half-deleted checkpoint.
            hidden = root / f".{old.name}.old"
            os.replace(old, hidden)
    for leftover in root.glob(".state-*.old"):
        shutil.rmtree(leftover, ignore_errors=True)
    return root / name


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    """The folder `latest` points at, or None when the run has not saved one yet."""
    link = Path(run_dir) / "checkpoints" / LATEST
    return link.resolve() if link.exists() else None


def read_meta(path: str | Path) -> dict[str, Any]:
    """The sidecar of one checkpoint folder, with a clear error when it is missing or corrupt."""
    meta_path = Path(path) / META_FILE
    if not meta_path.is_file():
        raise BiosrecallError(f"{path} is not a checkpoint folder (no {META_FILE})")
    try:
        return json.loads(meta_path.read_text())
    except json.JSONDecodeError as exc:
        raise BiosrecallError(f"{meta_path} is corrupt: {exc.msg}") from None


def load_checkpoint(path: str | Path, device: str | torch.device = "cpu"):
    """Rebuild the model described by the sidecar and load its weights; returns (model, meta)."""
    from biosrecall.model import LoopedTransformer, ModelConfig

    path = Path(path)
    meta = read_meta(path)
    if not (path / MODEL_FILE).is_file():
        raise BiosrecallError(f"{path} has no {MODEL_FILE}")
    model = LoopedTransformer(ModelConfig.from_dict(meta["model_config"]))
    try:
        missing, unexpected = load_model(model, str(path / MODEL_FILE), strict=False)
    except Exception as exc:  # safetensors raises several types for a damaged file
        raise BiosrecallError(f"{path / MODEL_FILE} cannot be loaded: {exc}") from None
    if unexpected or _really_missing(model, missing):
        raise BiosrecallError(f"{path / MODEL_FILE} does not match its config (missing {missing[:3]})")
    model.to(device)
    model.eval()
    return model, meta


def _really_missing(model: torch.nn.Module, missing: list[str]) -> bool:
    """Tied weights are stored once; a name missing only because it aliases a loaded tensor is fine."""
    state = model.state_dict()
    pointers = {t.data_ptr() for name, t in state.items() if name not in missing}
    return any(state[name].data_ptr() not in pointers for name in missing)


def load_training_state(path: str | Path) -> dict[str, Any]:
    state_path = Path(path) / STATE_FILE
    if not state_path.is_file():
        raise BiosrecallError(f"{path} holds no optimizer state (it was written by another version)")
    return torch.load(state_path, map_location="cpu", weights_only=False)


def list_checkpoints(run_dir: str | Path) -> dict[float, Path]:
    """Budget-fraction checkpoints of a run, sorted by fraction (the `latest` folder is not listed)."""
    root = Path(run_dir) / "checkpoints"
    found = {}
    if root.is_dir():
        for child in root.iterdir():
            if (
                child.name.startswith((".", "state-"))
                or child.name == LATEST
                or not (child / META_FILE).is_file()
            ):
                continue
            try:
                found[float(child.name)] = child
            except ValueError:
                continue
    return dict(sorted(found.items()))
