"""The recurrent state's size over depth: does it stay bounded past the trained depths, or grow?

    rms = state_rms(model, [(tokens, tokens != pad_id)], max_depth=64)   # float64 [64], K = 1..64
    table = cached_state_norms(checkpoint, batches, source={"rows": 64}, max_depth=64, device="cpu")
    table = bios_state_norms("runs/uniform", "final", max_depth=64)       # {label: table}, cached
    # CLI: biosrecall recall-curve RUN --state-norms; biosrecall lm eval RUN --state-norms

`state_rms` is the root mean square of the recurrent state s_K (what the recipe's step returns,
`LoopedTransformer.gradient_states`) over every counted token position and model dimension,
sqrt(mean ||s_K||^2 / d), after K = 1..max_depth iterations, accumulated over batches in float64.
A recipe whose iterations are told K (`Recipe.prefix_consistent` False: loopformer) has no one
trajectory; its s_K is the last state of a K-iteration call, so it costs a call per depth.

The table (columns depth, state_rms, tokens) is cached inside the checkpoint folder
(`run_folder.state_norm_cache_file`, `biosrecall.eval.table_cache`) under the checkpoint's meta.json
digest, the tokens it was measured on (`source`) and the max depth (a deeper table serves a shallower
request), so a study reads it without weights. `recall-curve` measures it on `BIOS_ROWS` evaluation
rows spread evenly over the scored people, pads not counted; `lm eval` on the first `LM_WINDOWS`
validation windows (`biosrecall.lm.evaluate.evaluate_state_norms`).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from biosrecall.errors import BiosrecallError
from biosrecall.eval.scoring import load_checked_datasets, plan_jobs, scored_eval_set
from biosrecall.eval.table_cache import checkpoint_key, read_cached, write_cached
from biosrecall.numbers import check_count
from biosrecall.train.checkpoint_files import load_checkpoint
from biosrecall.train.distributed import resolve_device
from biosrecall.train.run_folder import state_norm_cache_file

BIOS_ROWS = 64
"""Evaluation rows the bioS state is measured on (every position but the padding)."""
LM_WINDOWS = 8
"""Validation windows the LM state is measured on (a recipe told K costs a call per depth)."""
FORMAT = 1


@torch.no_grad()
def state_rms(
    model, batches: Iterable[tuple[torch.Tensor, torch.Tensor | None]], max_depth: int
) -> np.ndarray:
    """float64 [max_depth]: the RMS of s_K for K = 1..max_depth over the positions each batch's mask
    marks (tokens [B, T], mask bool [B, T] or None for all), pooled over the batches."""
    check_count(max_depth, "the state norm's max depth")
    squares, counted = np.zeros(max_depth), 0
    for tokens, mask in batches:
        mask = torch.ones_like(tokens, dtype=torch.bool) if mask is None else mask.to(tokens.device)
        counted += int(mask.sum()) * model.config.d_model
        for k, state in _states(model, tokens, max_depth):
            squares[k - 1] += float(state[mask].double().pow(2).sum())
    if counted == 0:
        raise BiosrecallError("no token positions to measure the recurrent state on")
    return np.sqrt(squares / counted)


def _states(model, tokens: torch.Tensor, max_depth: int):
    """(K, s_K) for K = 1..max_depth: one pass, or a K-iteration call per depth when the recipe's
    iterations are told K."""
    if model.recipe.prefix_consistent:
        yield from ((k, state) for k, state, _ in model.gradient_states(tokens, max_depth))
        return
    for depth in range(1, max_depth + 1):
        *_, (_, state, _) = model.gradient_states(tokens, depth)
        yield depth, state


def cached_state_norms(checkpoint, batches, source: dict, max_depth: int, device="auto") -> pd.DataFrame:
    """The checkpoint's state-norm table to `max_depth` from its cache when current, else measured on
    `batches` (a function returning the (tokens, mask) batches, called only on a miss; `source` names
    them in the key) with the checkpoint's model on `device`, and cached."""

    path = state_norm_cache_file(checkpoint)
    key = checkpoint_key(Path(checkpoint), format=FORMAT, max_depth=int(max_depth), **source)
    table = read_cached(path, key, by_depth=True)
    if table is not None:
        return table
    measured = batches()
    target = resolve_device(str(device))
    model, _ = load_checkpoint(checkpoint, device=target)
    model.eval()
    on_device = [(tokens.to(target), mask) for tokens, mask in measured]
    tokens = sum(int(tokens.numel() if mask is None else mask.sum()) for tokens, mask in on_device)
    rms = state_rms(model, on_device, max_depth)
    table = pd.DataFrame({"depth": np.arange(1, len(rms) + 1), "state_rms": rms, "tokens": tokens})
    write_cached(path, key, table)
    return table


def bios_state_norms(
    run_dir,
    checkpoints,
    max_depth: int = 64,
    *,
    people: int | None = None,
    data_dir=None,
    device="auto",
    rows: int = BIOS_ROWS,
) -> dict[str, pd.DataFrame]:
    """{checkpoint label: state-norm table} of a bioS run's selected checkpoints, on `rows` evaluation
    rows spread evenly over its first `people` people (None: everyone), cached in each checkpoint."""

    jobs = plan_jobs([Path(run_dir)], checkpoints, data_dir)
    datasets = load_checked_datasets(jobs)  # each the dataset its checkpoints were trained on
    found = {}
    for job in jobs:
        dataset = datasets[job.dataset_path]

        def batches(dataset=dataset):
            eval_set = scored_eval_set(dataset, people)
            picked = np.unique(np.linspace(0, len(eval_set) - 1, min(rows, len(eval_set))).astype(np.int64))
            tokens = torch.from_numpy(eval_set.tokens[picked])
            return [(tokens, tokens != dataset.pad_id)]

        source = {"rows": rows, "people": people, "manifest_hash": dataset.manifest_hash}
        found[job.label] = cached_state_norms(job.path, batches, source, max_depth, device)
    return found


def summary_line(table: pd.DataFrame) -> str:
    """The RMS at K = 1, 4, 16, 64 (those measured) and its growth to the deepest depth, for a CLI."""
    rms = table.set_index("depth")["state_rms"]
    shown = "  ".join(f"K={k}:{rms[k]:.3g}" for k in (1, 4, 16, 64) if k in rms.index)
    deepest = int(rms.index.max())
    return f"state RMS {shown}  (K={deepest} / K=1: {growth(table, 1, deepest):.3g})"


def growth(table: pd.DataFrame, shallow: int = 1, deep: int = 64) -> float:
    """state RMS at K=`deep` / at K=`shallow` (NaN when either depth is missing)."""
    by_depth = table.set_index("depth")["state_rms"]
    if shallow not in by_depth.index or deep not in by_depth.index:
        return float("nan")
    return float(by_depth[deep] / by_depth[shallow])
