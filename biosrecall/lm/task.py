"""Language-model training: the LM batch source and `train_lm`, which hands both to the one trainer.

    from biosrecall.lm.task import train_lm
    result = train_lm("data/lm", "runs/lm-ff", TrainConfig(schedule="fixed_first:k0=4,switch=0.67",
                      budget_of="fixed_first:k0=4,switch=0.67:4800", batch_size=256, seq_len=2048),
                      preset="lm-200m")
    # under torchrun (DDP or --parallel fsdp) the same call trains data-parallel

Everything but the batches is `biosrecall.train.trainer`, shared with bioS: the task layer, planner,
schedules, optimizer, checkpoints, DDP and FSDP2, resume. What this module adds is where batches come
from, how the tokenizer's vocabulary must fit the preset, and the plan report.

Design of the batch source: every rank reads the *whole* global batch from the one stream of a
`ShardLoader`, and the trainer keeps the rank's rows (`distributed.local_rows`), exactly as for bioS.
Rank-sharded loaders would save reading the other ranks' rows (about 1 MiB per update for 256 x
2049 uint16 tokens, read from the page cache: negligible next to one forward pass) but would make
the batch depend on the world size. This way a run on N processes sees the same sequences in the
same rows as a run on one, its losses match it, and its resume state is independent of N.

Update u's batch is windows u*B .. u*B + B - 1 of the loader's epoch-by-epoch order (B = global
batch), so `batch(u)` is a pure function of u: resuming needs no saved position, and the saved state
only guards against resuming with other data, sequence length or seed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from biosrecall.compute.flops import param_counts
from biosrecall.lm.loader import ShardLoader
from biosrecall.lm.shard_manifest import load_manifest
from biosrecall.lm.tokenizer import load_tokenizer
from biosrecall.model import get_preset
from biosrecall.numbers import check_count
from biosrecall.train.config import TrainConfig, resolve_seq_len
from biosrecall.train.distributed import DistInfo, check_divisible
from biosrecall.train.trainer import (
    Trainer,
    TrainingTask,
    TrainResult,
    VocabularyRule,
    build_model_config,
    make_plan,
    run_recipe,
)


class LMBatchSource:
    """Global batches of `batch_size` token windows of `seq_len + 1` from the train split."""

    pad_id = None  # windows are cut from one continuous stream: every target is a real token

    def __init__(self, data_dir, batch_size: int, seq_len: int, seed: int, tokenizer=None):
        self.loader = ShardLoader(data_dir, seq_len, split="train", seed=seed, tokenizer=tokenizer)
        self.batch_size = batch_size

    def batch(self, update: int) -> np.ndarray:
        """int64 [batch_size, seq_len + 1]: the update's windows (epochs roll over as the loader's do)."""
        self.loader.epoch, self.loader.position = divmod(update * self.batch_size, self.loader.num_windows)
        return self.loader.batch(self.batch_size)

    def state_dict(self) -> dict[str, Any]:
        return {"loader": self.loader.state_dict(), "batch_size": self.batch_size}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Check that the checkpoint was trained on the same stream (the position itself is implied).
        Its batch size needs no check here: the trainer refuses a resume with another one, as both
        config.json and the checkpoint record it."""
        self.loader.load_state_dict(state["loader"])


LM_VOCABULARY = VocabularyRule(
    spare_ids=True,
    needed_by="the tokenizer",
    hint="prepare the data with a smaller --vocab-size, or pass --vocab-size to the model",
)


def lm_training_task(
    data_dir: str | Path,
    preset: str = "lm-tiny",
    model_overrides: dict[str, Any] | None = None,
    tokenizer: str | Path | None = None,
) -> TrainingTask:
    """The LM task on a prepared folder; `tokenizer` (optional) is the tokenizer.json the model is
    meant for: shards written with another are refused when the batch source opens them."""
    manifest = load_manifest(data_dir)
    if tokenizer is not None:
        load_tokenizer(tokenizer)  # a clear error for an unreadable file before the shard check
    return TrainingTask(
        name="lm",
        preset=preset,
        vocab_size=int(manifest["tokenizer"]["vocab_size"]),
        vocab_rule=LM_VOCABULARY,
        batch_source=lambda config, seq_len: LMBatchSource(
            data_dir, config.batch_size, seq_len, config.seed, tokenizer
        ),
        data_record=dataset_record,
        model_overrides=model_overrides,
    )


def dataset_record(source: LMBatchSource) -> dict[str, Any]:
    """What `config.json` and every checkpoint record about the data (resume refuses other data)."""
    loader = source.loader
    return {
        "path": str(loader.data_dir.resolve()),
        "manifest_hash": loader.data_sha256,
        "tokenizer_sha256": loader.manifest["tokenizer"]["sha256"],
        "vocab_size": loader.manifest["tokenizer"]["vocab_size"],
        "train_tokens": loader.tokens,
    }


def train_lm(
    data_dir: str | Path,
    run_dir: str | Path,
    config: TrainConfig,
    preset: str = "lm-tiny",
    model_overrides: dict[str, Any] | None = None,
    tokenizer: str | Path | None = None,
    resume: bool = False,
    overwrite: bool = False,
    reporter=None,
) -> TrainResult:
    """Check the data against the preset, build the batch source, and run the shared `Trainer`. All
    checks run before the run folder is touched."""
    task = lm_training_task(data_dir, preset, model_overrides, tokenizer)
    return Trainer(task, run_dir, config, resume=resume, overwrite=overwrite, reporter=reporter).train()


def lm_plan(config: TrainConfig, preset: str, model_overrides: dict[str, Any] | None, data_dir=None):
    """(model config, training plan) of an LM run from the trainer's own planner, checked as the trainer
    checks them; the vocabulary is the corpus's (its manifest) given `data_dir`, else the preset's."""
    config.validate()
    vocab = get_preset(preset).vocab_size
    if data_dir is not None:
        vocab = int(load_manifest(data_dir)["tokenizer"]["vocab_size"])
    model_config = build_model_config(preset, vocab, model_overrides, LM_VOCABULARY, run_recipe(config))
    return model_config, make_plan(model_config, config)


def plan_lines(
    config: TrainConfig, preset: str, model_overrides: dict[str, Any] | None, processes: int, data_dir=None
) -> list[str]:
    """What a run will spend, from the trainer's own planner, checked as the trainer would check it:
    tokens, modeled FLOPs and the per-process batch split (and, given the data, how many epochs)."""

    model_config, plan = lm_plan(config, preset, model_overrides, data_dir)
    seq_len = resolve_seq_len(config, model_config, preset)
    check_count(processes, "--nproc-per-node")
    check_divisible(config.batch_size, DistInfo(world_size=processes), config.grad_accum)
    tokens = plan.tokens_per_update * plan.updates
    rows = config.batch_size // processes
    switch = "" if plan.switch_update is None else f" (switch at update {plan.switch_update:,})"
    lines = [
        f"preset {preset}: {param_counts(model_config)['total']:,} parameters, context "
        f"{model_config.context_length}, vocab {model_config.vocab_size}",
        f"schedule {plan.schedule}",
        f"updates {plan.updates:,}{switch}; global batch {config.batch_size} x {seq_len} = "
        f"{plan.tokens_per_update:,} tokens per update",
        f"tokens {tokens:,} ({tokens / 1e9:.2f}B)",
        f"modeled training FLOPs {plan.total_flops:.4e} (budget {plan.budget:.4e}); expected "
        f"{plan.expected_flops:.4e}, {100 * plan.saving_vs_uniform:.1f}% less than uniform:1-16 "
        "over the same updates",
        f"processes {processes} x {rows} rows = {config.grad_accum} micro-batch(es) of "
        f"{rows // config.grad_accum} sequences per process and update",
    ]
    if data_dir is not None:
        train_tokens = ShardLoader(data_dir, seq_len, seed=config.seed).tokens
        lines.append(
            f"data {train_tokens:,} training tokens: the run reads {tokens / train_tokens:.2f} epochs"
        )
    return lines
