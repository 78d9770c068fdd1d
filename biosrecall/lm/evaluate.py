"""Validation NLL per token of a trained looped LM at every serving depth, from one all-depth sweep.

    table = evaluate_run("runs/lm-ff")                     # final checkpoint, serving depths 1..16
    table = evaluate_run("runs/lm-ff", checkpoints="all", max_sequences=512)
    summarize(table)                                       # mean serving-depth NLL per checkpoint
    # CLI: biosrecall lm eval runs/lm-ff [--checkpoint all|final|switch|0.45,1.0] [--max-sequences N]

Checkpoints are chosen with the selector syntax of `biosrecall.runs` (the same in every command); the
corpus is the one the run recorded, or `data_dir`, whose tokenizer must be the run's.

Each validation batch runs through the model once, `forward_all_depths` reading out logits after
every requested depth (the state after k iterations does not depend on how many follow), so a curve
over K = 1..16 costs one 16-iteration pass. NLL is the mean cross-entropy in nats over every target
token of the validation windows (the same windows, in stream order, for every run and checkpoint).

The table is written atomically to RUN_DIR/eval/nll.csv and RUN_DIR/eval/nll.parquet, one row per
(checkpoint, depth): run, schedule, checkpoint, update, flops, train_tokens, wall_seconds, depth, nll,
eval_tokens. The mean serving-depth NLL is the unweighted mean of `nll` over depths 1..16.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

from biosrecall import runs
from biosrecall.errors import BiosrecallError
from biosrecall.lm.loader import validation_batches
from biosrecall.lm.shards import load_manifest
from biosrecall.outputs import write_table
from biosrecall.runs import load_checkpoint
from biosrecall.train.run_dir import read_config

SERVING_DEPTHS = tuple(range(1, 17))
EVAL_DIR = "eval"
TABLE = "nll"


def depth_nll(model, batches: Iterable[np.ndarray], depths: Sequence[int], device, autocast) -> pd.DataFrame:
    """Mean NLL per target token at each depth over `batches` (int64 [B, T + 1] windows)."""
    depths = sorted(set(depths))
    sums, tokens = np.zeros(len(depths)), 0
    for rows in batches:
        window = torch.from_numpy(rows).to(device)
        inputs, targets = window[:, :-1], window[:, 1:].flatten()
        with autocast():
            for index, (_, logits) in enumerate(model.forward_all_depths(inputs, depths)):
                loss = F.cross_entropy(logits.float().flatten(0, 1), targets, reduction="sum")
                sums[index] += float(loss)
        tokens += targets.numel()
    if tokens == 0:
        raise BiosrecallError("the validation split gave no sequences to evaluate")
    return pd.DataFrame({"depth": depths, "nll": sums / tokens, "eval_tokens": tokens})


def check_data(run_config: dict, data_dir: Path) -> None:
    """The validation shards must use the tokenizer the run was trained with."""
    trained = run_config.get("dataset", {}).get("tokenizer_sha256")
    given = load_manifest(data_dir)["tokenizer"]["sha256"]
    if trained is not None and trained != given:
        raise BiosrecallError(
            f"{data_dir} was prepared with tokenizer {given[:12]}..., but the run was trained with "
            f"{trained[:12]}...: tokenizer and shards do not match"
        )


def evaluate_run(
    run_dir: str | Path,
    *,
    checkpoints="final",
    data_dir: str | Path | None = None,
    depths: Sequence[int] = SERVING_DEPTHS,
    batch_size: int = 8,
    max_sequences: int | None = None,
    device: str = "auto",
    precision: str = "auto",
) -> pd.DataFrame:
    """Evaluate the checkpoints `checkpoints` selects (selector text, repeated values or a
    `runs.Selector`) of an LM run on the validation split; write and return the table."""
    from biosrecall.train.distributed import resolve_device
    from biosrecall.train.setup import autocast_for

    run_dir = Path(run_dir)
    config = read_config(run_dir)
    if config.get("task", {}).get("name") != "lm":
        raise BiosrecallError(f"{run_dir} is not a language-model run (train it with `biosrecall lm train`)")
    if batch_size < 1 or (max_sequences is not None and max_sequences < 1):
        raise BiosrecallError("batch size and max sequences must be at least 1")
    chosen = runs.select_checkpoints(run_dir, checkpoints)
    data_dir = runs.training_data_of(run_dir, config, data_dir)
    check_data(config, data_dir)
    seq_len = runs.seq_len_of(config)
    target = resolve_device(device)
    autocast = autocast_for(target, precision)
    tables = []
    for name, path in chosen.items():
        model, meta = load_checkpoint(path, device=target)
        batches = validation_batches(data_dir, seq_len, batch_size, max_windows=max_sequences)
        table = depth_nll(model, batches, depths, target, autocast)
        tables.append(_describe(table, run_dir, config, name, meta))
    result = pd.concat(tables, ignore_index=True)
    write_table(result, run_dir / EVAL_DIR / TABLE)
    return result


def _describe(table: pd.DataFrame, run_dir: Path, config: dict, name: str, meta: dict) -> pd.DataFrame:
    """Prefix a depth table with the run and checkpoint columns."""
    columns = {
        "run": run_dir.name,
        "schedule": config["plan"]["schedule"],
        "checkpoint": name,
        "update": int(meta["update"]),
        "flops": float(meta["flops"]),
        "train_tokens": int(meta["tokens"]),
        "wall_seconds": float(meta["wall_seconds"]),
    }
    return pd.DataFrame({**columns, **{c: table[c] for c in table.columns}})


def read_table(run_dir: str | Path) -> pd.DataFrame:
    """A run's evaluation table, with a pointer to `lm eval` when there is none."""
    path = Path(run_dir) / EVAL_DIR / f"{TABLE}.parquet"
    if not path.is_file():
        raise BiosrecallError(
            f"{run_dir} has no {EVAL_DIR}/{TABLE}.parquet (run `biosrecall lm eval {run_dir}`)"
        )
    return pd.read_parquet(path)


def summarize(table: pd.DataFrame) -> pd.DataFrame:
    """Per checkpoint: mean NLL over its depths, NLL at the smallest and largest depth."""
    rows = []
    keys = ["run", "schedule", "checkpoint", "update", "flops", "train_tokens", "wall_seconds"]
    for key, group in table.groupby(keys, sort=False):
        group = group.sort_values("depth")
        first, last = group.iloc[0], group.iloc[-1]
        rows.append(
            {
                **dict(zip(keys, key, strict=True)),
                "mean_nll": float(group["nll"].mean()),
                f"nll_k{int(first['depth'])}": float(first["nll"]),
                f"nll_k{int(last['depth'])}": float(last["nll"]),
            }
        )
    return pd.DataFrame(rows).sort_values(["run", "update"], ignore_index=True)
