"""Per-token exit against whole-query exit on bioS: what deciding the depth token by token costs.

    scores = score_runs(["runs/figure1/runs/seed0/uniform_1_16"], "final", parse_exits("kl:1e-3,stable:2"),
                        per_token=True)        # biosrecall.eval.curves; scores.gap is this table
    biosrecall recall-curve RUN --exit kl:1e-3,stable:2 --per-token    # writes exit_token_gap.*

Whole-query exit (`biosrecall.eval.serving`) runs a query to one depth and reads every answer token
there. Per-token exit runs each token through the KV-cached decoder (`biosrecall.model.decode`,
teacher forcing), where every token stops at the first depth its own criterion holds, and a later
token attends to an earlier one's state at the depth that token stopped at (as Huginn does). That is
how a generating model exits, and its failure mode: an earlier token that stopped shallow offers
shallow keys and values to every token after it.

Per run, checkpoint and realisable criterion, one row: per_token_bits (recalled bits per person, 4 of
5 templates exact, from teacher-forced answers: an answer is exact when every answer token is the
argmax, which is what greedy decoding would produce) and per_token_mean_depth (over the answer
tokens), whole_query_bits and whole_query_mean_depth (the same criterion, whole query),
fixed_bits_at_same_depth (the fixed-depth curve interpolated at the per-token mean depth), and the
gaps: per_token_bits minus each of the two.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from biosrecall.eval.exits import BASELINE, exit_judge
from biosrecall.eval.recall import DEFAULT_THRESHOLD, score_exact
from biosrecall.eval.sweep import DEFAULT_BATCH_SIZE, answer_batches, exact_rows
from biosrecall.model.decode import teacher_forced

TABLE_NAME = "exit_token_gap"
UNDECIDED_KINDS = (BASELINE, "fixed", "oracle")
"""Rows that decide nothing per token (a fixed depth is the same either way; the oracle reads the answer)."""


def per_token_exact(model, eval_set, criterion, max_depth: int, batch_size: int = DEFAULT_BATCH_SIZE):
    """bool [M] (each eval-set row's answer exact under per-token exit) and the mean exit depth of
    the answer tokens."""
    exact = np.zeros(len(eval_set.answer_start), dtype=bool)
    depth_sum, depth_count = 0.0, 0
    for batch in answer_batches(model, eval_set, batch_size):
        steps = list(teacher_forced(model, batch.tokens, max_depth, lambda: exit_judge(criterion)))
        logits = torch.stack([step[0] for step in steps], dim=1)  # [B, T, V]
        depths = torch.stack([step[1] for step in steps], dim=1)  # [B, T]
        exact[batch.rows] = exact_rows(logits[batch.positions], batch).cpu().numpy()
        depth_sum += float(depths[batch.positions].sum())
        depth_count += int(batch.positions.sum())
    return exact, depth_sum / depth_count


def gap_rows(
    model,
    eval_set,
    pool_sizes,
    criteria,
    max_depth: int,
    whole: pd.DataFrame,
    threshold: int = DEFAULT_THRESHOLD,
    batch_size: int = DEFAULT_BATCH_SIZE,
) -> pd.DataFrame:
    """One checkpoint's rows (module doc) for every criterion that decides per token; `whole` is the
    checkpoint's whole-query frontier (`biosrecall.eval.scoring.exit_rows` of the same criteria). The
    checkpoint's model is loaded once for both (`eval.scoring.score_checkpoint`, `Scoring.per_token`)."""
    fixed = whole[whole["kind"] == BASELINE].sort_values("mean_depth")
    records = []
    for criterion in criteria:
        if criterion.name in UNDECIDED_KINDS:
            continue
        exact, mean_depth = per_token_exact(model, eval_set, criterion, max_depth, batch_size)
        bits = score_exact(exact, eval_set, pool_sizes, threshold).bits_per_person
        same = whole[whole["criterion"] == criterion.spec].iloc[0]
        at_depth = float(np.interp(mean_depth, fixed["mean_depth"], fixed["bits"]))
        records.append(
            {
                "criterion": criterion.spec,
                "per_token_bits": bits,
                "per_token_mean_depth": mean_depth,
                "whole_query_bits": float(same["bits"]),
                "whole_query_mean_depth": float(same["mean_depth"]),
                "fixed_bits_at_same_depth": at_depth,
                "gap_vs_whole_query": bits - float(same["bits"]),
                "gap_vs_fixed_depth": bits - at_depth,
            }
        )
    return pd.DataFrame.from_records(records)
