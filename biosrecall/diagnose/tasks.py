"""What the update diagnostic scores on each kind of run: the run's own batch source and its effect metric.

    task = load_task(RunInfo(run_dir, record, meta, config, seq_len, autocast), data_dir=None)
    task.source.batch(u)            # update u's batch, from the trainer's own batch source for this run
    task.score(model, [1, 2, 4])    # {"nll": array over the serving depths (ascending), ...}
    task.units                      # metric -> what it measures (the plot's axis label), in report order
    task.record                     # what the options JSON records about the data and the scored set
    answer_scores(model, eval_set, pool_sizes, [1, 2, 4])   # bioS: (answer NLL, recalled bits) per depth

bioS runs (`biosrecall train`): answer NLL under teacher forcing and recalled bits per person, over the
evaluation prompts of the first `people` people (DEFAULT_PEOPLE; 0 = all), as `recall-curve` counts
them.

LM runs (`biosrecall lm train`): validation NLL, the mean next-token cross-entropy over every target
token of the first `val_sequences` windows (DEFAULT_VAL_SEQUENCES; 0 = all) of the run's corpus
validation split in stream order: the windows `biosrecall lm eval --max-sequences N` reads, scored by
its `depth_nll`.

Each builder finds the data through `biosrecall.train.run_folder` and checks that it is the one the checkpoint
records (by hash), so `source` draws the batches the trainer drew. Another kind of run is one more entry
in `BUILDERS`.
`pytest -q tests/test_diagnose.py tests/test_diagnose_lm.py` covers both kinds.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from biosrecall.bios import load_dataset
from biosrecall.diagnose.options import DEFAULT_PEOPLE, DEFAULT_VAL_SEQUENCES
from biosrecall.errors import BiosrecallError
from biosrecall.eval.recall import score_exact

# The recall sweep's answer scores: the diagnostic's "recalled" means exactly what `recall-curve` means.
from biosrecall.eval.stored_bits import answer_scores_by_depth
from biosrecall.lm.evaluate import depth_nll
from biosrecall.lm.loader import validation_batches
from biosrecall.lm.shard_manifest import load_manifest
from biosrecall.lm.task import LMBatchSource
from biosrecall.train.config import TrainConfig
from biosrecall.train.run_folder import RunFolder
from biosrecall.train.trainer import BiosBatchSource

EVAL_BATCH = 16  # validation windows per forward pass; the mean NLL does not depend on it
HIGHER_IS_BETTER = frozenset({"bits"})  # every other metric is a loss


@dataclass(frozen=True)
class RunInfo:
    """What a builder needs to know of the run: config.json (`record`), the checkpoint's meta.json, the
    training config, the training sequence length and the autocast context the model runs under."""

    run_dir: Path
    record: dict
    meta: dict
    config: TrainConfig
    seq_len: int
    autocast: Callable


@dataclass(frozen=True)
class DiagnosisTask:
    """A run's batch source and `score(model, serving_depths) -> {metric: per-depth array}`."""

    name: str
    source: Any  # a trainer `BatchSource`: batch(update) -> int64 [B, T + 1], and pad_id
    score: Callable[[torch.nn.Module, Sequence[int]], dict[str, np.ndarray]]
    units: dict[str, str]
    record: dict[str, Any]


def load_task(run: RunInfo, data_dir=None, people=None, val_sequences=None) -> DiagnosisTask:
    """The task of the run's kind; `people` is for bioS runs and `val_sequences` for LM runs only
    (None = the default), so an option the run cannot use is refused instead of ignored."""
    name = (run.record.get("task") or {}).get("name")
    if name not in BUILDERS:
        raise BiosrecallError(
            f"{run.run_dir} records task {name!r}: the update diagnostic knows bioS and LM runs only"
        )
    return BUILDERS[name](run, data_dir, people, val_sequences)


def bios_diagnosis_task(run: RunInfo, data_dir, people, val_sequences) -> DiagnosisTask:
    """Answer NLL and recalled bits on the prompts of the first `people` people of the run's dataset."""

    _refuse(val_sequences, "--val-sequences", "LM", run.run_dir, "bioS", "--people")
    path = RunFolder(run.run_dir).training_data(run.meta, data_dir)
    dataset = load_dataset(path)
    RunFolder(run.run_dir).check_training_data(run.meta, path, dataset.manifest_hash)
    people = DEFAULT_PEOPLE if people is None else people
    chosen = dataset.num_people if people == 0 else min(people, dataset.num_people)
    eval_set = dataset.eval_set(np.arange(chosen))

    def score(model, depths: Sequence[int]) -> dict[str, np.ndarray]:
        nll, bits = answer_scores(model, eval_set, dataset.pool_sizes, depths)
        return {"nll": nll, "bits": bits}

    return DiagnosisTask(
        name="bios",
        source=BiosBatchSource(dataset, run.config.batch_size, run.seq_len, run.config.seed),
        score=score,
        units={"nll": "answer NLL (nats/token)", "bits": "recalled bits per person"},
        record={
            "people": chosen,
            "people_rule": "person ids 0..people-1 of the dataset",
            "batch_stream": "the run's own batches at updates update..update+batches-1 (run seed)",
            "manifest_hash": dataset.manifest_hash,
        },
    )


def lm_diagnosis_task(run: RunInfo, data_dir, people, val_sequences) -> DiagnosisTask:
    """Validation NLL over the first `val_sequences` validation windows of the run's own corpus."""

    _refuse(people, "--people", "bioS", run.run_dir, "LM", "--val-sequences")
    path = RunFolder(run.run_dir).training_data(run.meta, data_dir)
    source = LMBatchSource(path, run.config.batch_size, run.seq_len, run.config.seed)
    RunFolder(run.run_dir).check_training_data(run.meta, path, source.loader.data_sha256)
    windows = validation_windows(
        path, run.seq_len, DEFAULT_VAL_SEQUENCES if val_sequences is None else val_sequences
    )

    def score(model, depths: Sequence[int]) -> dict[str, np.ndarray]:
        device = next(model.parameters()).device
        with torch.inference_mode():
            table = depth_nll(model, windows, depths, device, run.autocast)
        return {"nll": table["nll"].to_numpy()}

    sequences = sum(len(rows) for rows in windows)
    return DiagnosisTask(
        name="lm",
        source=source,
        score=score,
        units={"nll": "validation NLL (nats/token)"},
        record={
            "val_sequences": sequences,
            "val_tokens": sequences * run.seq_len,
            "val_rule": "the first val_sequences windows of the validation split in stream order (lm eval's)",
            "batch_stream": "the run's LM loader stream at updates update..update+batches-1 (run seed)",
            "manifest_hash": source.loader.data_sha256,
        },
    )


def answer_scores(
    model, eval_set, pool_sizes: Mapping[str, int], serving_depths: Sequence[int], batch_size: int = 256
) -> tuple[np.ndarray, np.ndarray]:
    """Per serving depth (ascending): mean NLL of the answer tokens under teacher forcing, and recalled
    bits per person (a fact is recalled when >= 4 of its 5 prompts are answered exactly)."""
    scores = answer_scores_by_depth(model, eval_set, serving_depths, batch_size=batch_size)
    bits = np.array([score_exact(flags, eval_set, pool_sizes).bits_per_person for flags in scores.exact])
    return scores.nats.sum(axis=1) / int(np.sum(eval_set.answer_len)), bits


def validation_windows(data_dir: Path, seq_len: int, sequences: int) -> list[np.ndarray]:
    """The first `sequences` validation windows (0 = all), read once and kept: every score of a
    diagnosis sees the same tokens."""

    held_out = (load_manifest(data_dir)["splits"].get("validation") or {}).get("tokens", 0)
    if not held_out:
        raise BiosrecallError(
            f"{data_dir} has no validation split (prepared with --val-fraction 0): the update diagnostic "
            "of an LM run scores validation NLL; prepare the corpus with a validation fraction > 0"
        )
    return list(validation_batches(data_dir, seq_len, EVAL_BATCH, max_windows=sequences or None))


def _refuse(value, option: str, applies_to: str, run_dir, kind: str, instead: str) -> None:
    if value is not None:
        raise BiosrecallError(
            f"{option} applies to {applies_to} runs only: {run_dir} is a {kind} run (use {instead})"
        )


BUILDERS: dict[str, Callable[..., DiagnosisTask]] = {"bios": bios_diagnosis_task, "lm": lm_diagnosis_task}
