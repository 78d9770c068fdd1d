"""The task layer: what a kind of run (bioS, LM) hands the one trainer, and the one call that trains it.

A task differs from another only in where its batches come from, the vocabulary its model needs and
what its run records about its data. Everything else (model config from the preset, sequence length,
plan, loop, checkpoints, resume) is the same code for every task:

    task = TrainingTask(name="bios", preset="bios-cpu", vocab_size=dataset.vocab_size,
                        batch_source=lambda config, seq_len: ..., data_record=lambda source: {...})
    result = run_task(task, "runs/ff", TrainConfig(...))

`biosrecall.train.bios_training.train_bios` and `biosrecall.lm.task.train_lm` build their task and call
`run_task`; `build_model_config` is the one model-config builder (the vocabulary is its input).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from biosrecall.errors import BiosrecallError
from biosrecall.model import get_preset
from biosrecall.train.config import TrainConfig, resolve_seq_len
from biosrecall.train.loop import BatchSource, TrainResult, run_training

# Presets named so are shaped for bioS and take their vocabulary from the dataset they train on.
DATA_SIZED_PREFIX = "bios-"


@dataclass(frozen=True)
class VocabularyRule:
    """How a task's data vocabulary must fit a preset whose vocabulary is fixed."""

    spare_ids: bool
    """True: the model may have more ids than the data uses (unused rows, like a vocabulary padded for
    fast matmuls, so a preset keeps its size whatever tokenizer is used); False: exactly as many."""
    needed_by: str
    """What needs the ids, for the error message ("the dataset", "the tokenizer")."""
    hint: str = ""
    """How to fix a mismatch, appended to the error message."""


def build_model_config(preset: str, vocab_size: int, overrides: dict[str, Any] | None, rule: VocabularyRule):
    """The preset's shape with `overrides` (None values ignored) and a vocabulary for `vocab_size` ids.

    A data-sized preset (bios-*) takes `vocab_size` unless the overrides set one; any other preset keeps
    its vocabulary, which must fit the data as `rule` says."""
    overrides = {k: v for k, v in (overrides or {}).items() if v is not None}
    config = get_preset(preset, **overrides)
    if preset.startswith(DATA_SIZED_PREFIX) and "vocab_size" not in overrides:
        return config.replace(vocab_size=vocab_size)
    if rule.spare_ids and config.vocab_size < vocab_size:
        problem = f"{rule.needed_by} has {vocab_size} ids but preset {preset} only {config.vocab_size}"
    elif not rule.spare_ids and config.vocab_size != vocab_size:
        problem = (
            f"preset {preset} has vocabulary {config.vocab_size} but {rule.needed_by} needs {vocab_size}"
        )
    else:
        return config
    raise BiosrecallError(f"{problem} ({rule.hint})" if rule.hint else problem)


@dataclass(frozen=True)
class TrainingTask:
    """What one kind of run supplies to the trainer; see the module docstring."""

    name: str
    """Recorded as config.json's task name ("bios", "lm"); later stages tell runs apart by it."""
    preset: str
    """Model preset (see `biosrecall flops`)."""
    vocab_size: int
    """Token ids the data uses."""
    vocab_rule: VocabularyRule
    batch_source: Callable[[TrainConfig, int], BatchSource]
    """(train config, sequence length) -> the run's batch source."""
    data_record: Callable[[BatchSource], dict[str, Any]]
    """batch source -> what config.json and every checkpoint record about the data (path, hash...)."""
    model_overrides: dict[str, Any] | None = None
    exposures: Callable[[BatchSource, float], Any] | None = None
    """(batch source, E) -> the run length that shows every person's biography E times on average
    (`biosrecall.bios.exposures.Exposures`); None: the task has no people to count, and a run sized
    by `exposures` is refused."""

    def model_config(self):
        return build_model_config(self.preset, self.vocab_size, self.model_overrides, self.vocab_rule)


def run_task(
    task: TrainingTask,
    run_dir: str | Path,
    config: TrainConfig,
    *,
    resume: bool = False,
    overwrite: bool = False,
    reporter=None,
    branch=None,
) -> TrainResult:
    """Build the model config, sequence length and batch source of `task`, then run the one trainer
    (from `branch`'s parent state when given: `biosrecall.train.branch`).

    Every check runs before the run folder is touched."""
    model_config = task.model_config()
    seq_len = resolve_seq_len(config, model_config, task.preset)
    source = task.batch_source(config, seq_len)
    record = {"task": {"name": task.name, "preset": task.preset}, "dataset": task.data_record(source)}
    exposures = None if task.exposures is None else functools.cache(functools.partial(task.exposures, source))
    return run_training(
        model_config,
        config,
        source,
        run_dir,
        seq_len=seq_len,
        record=record,
        resume=resume,
        overwrite=overwrite,
        reporter=reporter,
        branch=branch,
        exposures=exposures,
    )
