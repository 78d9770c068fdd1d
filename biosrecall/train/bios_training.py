"""Training on a bioS dataset folder: its batch source and `train_bios`, the call the CLI and `figure1` use.

    from biosrecall.train.bios_training import train_bios
    result = train_bios("data/bios-1k", "runs/ff", TrainConfig(schedule="fixed_first:k0=4,switch=0.8",
                        budget_of="fixed:4:2000"), preset="bios-cpu")

Everything but the batches (and the count of their biographies that sizes a run by `--exposures`,
`biosrecall.bios.exposures`) is the shared task layer (`biosrecall.train.task`) and trainer.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from biosrecall.bios import BatchSampler, batch_generator, load_dataset
from biosrecall.bios.exposures import plan_exposures
from biosrecall.errors import BiosrecallError
from biosrecall.model.presets import DEFAULT_BIOS_PRESET
from biosrecall.train.config import TrainConfig
from biosrecall.train.loop import TrainResult
from biosrecall.train.task import TrainingTask, VocabularyRule, run_task

BIOS_VOCABULARY = VocabularyRule(
    spare_ids=False, needed_by="the dataset", hint="use a bios-* preset, sized by the dataset"
)


class BiosBatchSource:
    """Update u's batch is drawn from a generator seeded by (seed, u): no state to save or restore."""

    def __init__(self, dataset, batch_size: int, seq_len: int, seed: int):
        self.sampler = BatchSampler(dataset, batch_size, seq_len)
        self.pad_id = dataset.pad_id
        self.seed = seed

    def batch(self, update: int) -> np.ndarray:
        return self.sampler.batch(batch_generator(self.seed, update))

    def state_dict(self) -> dict[str, Any]:
        return {"seed": self.seed}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("seed") != self.seed:
            raise BiosrecallError("cannot resume: the checkpoint's data seed differs from this run's")


def bios_training_task(
    data_dir: str | Path, preset: str = DEFAULT_BIOS_PRESET, model_overrides: dict[str, Any] | None = None
) -> TrainingTask:
    """The bioS task on the dataset folder `data_dir` (read and validated here)."""
    dataset = load_dataset(data_dir)
    record = {"path": str(Path(data_dir).resolve()), "manifest_hash": dataset.manifest_hash}
    return TrainingTask(
        name="bios",
        preset=preset,
        vocab_size=dataset.vocab_size,
        vocab_rule=BIOS_VOCABULARY,
        batch_source=lambda config, seq_len: BiosBatchSource(
            dataset, config.batch_size, seq_len, config.seed
        ),
        data_record=lambda source: record,
        model_overrides=model_overrides,
        exposures=lambda source, asked: plan_exposures(source.sampler, source.seed, asked),
    )


def train_bios(
    data_dir: str | Path,
    run_dir: str | Path,
    config: TrainConfig,
    preset: str = DEFAULT_BIOS_PRESET,
    model_overrides: dict[str, Any] | None = None,
    resume: bool = False,
    overwrite: bool = False,
    reporter=None,
    branch=None,
) -> TrainResult:
    """Train on the bioS dataset in `data_dir` with the shared trainer (see `run_task`); a `branch`
    (`biosrecall.train.branch.Branch`) starts from another run's saved state."""
    task = bios_training_task(data_dir, preset, model_overrides)
    return run_task(
        task, run_dir, config, resume=resume, overwrite=overwrite, reporter=reporter, branch=branch
    )
