"""Training on a bioS dataset folder: the batch source and the one call the CLI and `figure1` use.

from biosrecall.train.bios_task import train_bios
result = train_bios("data/bios-1k", "runs/ff", TrainConfig(schedule="fixed_first:k0=4,switch=0.8",
                    budget_of="fixed:4:2000"), preset="bios-cpu")
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from biosrecall.bios import BatchSampler, load_dataset
from biosrecall.errors import BiosrecallError
from biosrecall.model import get_preset
from biosrecall.train.config import TrainConfig
from biosrecall.train.loop import TrainResult, run_training

# Separates the batch stream from the depth draws, which are seeded from the same (seed, update).
_BATCH_STREAM = 0xB105


class BiosBatchSource:
    """Update u's batch is drawn from a generator seeded by (seed, u): no state to save or restore."""

    def __init__(self, dataset, batch_size: int, seq_len: int, seed: int):
        self.sampler = BatchSampler(dataset, batch_size, seq_len)
        self.pad_id = dataset.pad_id
        self.seed = seed

    def batch(self, update: int) -> np.ndarray:
        return self.sampler.batch(np.random.default_rng([self.seed, update, _BATCH_STREAM]))

    def state_dict(self) -> dict[str, Any]:
        return {"seed": self.seed}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("seed") != self.seed:
            raise BiosrecallError("cannot resume: the checkpoint's data seed differs from this run's")


def bios_model_config(preset: str, dataset, overrides: dict[str, Any] | None = None):
    """The preset's shape with the dataset's vocabulary (bioS presets take their vocabulary from data)."""
    overrides = {k: v for k, v in (overrides or {}).items() if v is not None}
    config = get_preset(preset, **overrides)
    if preset.startswith("bios-"):
        config = get_preset(preset, **{**overrides, "vocab_size": dataset.vocab_size})
    elif config.vocab_size != dataset.vocab_size:
        raise BiosrecallError(
            f"preset {preset} has vocabulary {config.vocab_size} but the dataset needs {dataset.vocab_size}"
        )
    return config


def train_bios(
    data_dir: str | Path,
    run_dir: str | Path,
    config: TrainConfig,
    preset: str = "bios-cpu",
    model_overrides: dict[str, Any] | None = None,
    resume: bool = False,
    overwrite: bool = False,
    reporter=None,
) -> TrainResult:
    dataset = load_dataset(data_dir)
    model_config = bios_model_config(preset, dataset, model_overrides)
    seq_len = config.seq_len or model_config.context_length
    source = BiosBatchSource(dataset, config.batch_size, seq_len, config.seed)
    record = {
        "task": {"name": "bios", "preset": preset},
        "dataset": {"path": str(Path(data_dir).resolve()), "manifest_hash": dataset.manifest_hash},
    }
    return run_training(
        model_config,
        config,
        source,
        run_dir,
        record=record,
        resume=resume,
        overwrite=overwrite,
        reporter=reporter,
    )
