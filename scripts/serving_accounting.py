"""The serving headline of finished runs under two FLOP accounts: the readout's head at every position
of the query (the account before `eval.scoring.FLOPS_ACCOUNT`), and only at the answer-predicting
positions a criterion checks (the account today). The exit depths and the bits are the same; only
what each query is charged differs.

    python scripts/serving_accounting.py runs/study/runs/seed0/fixed_k4 runs/study/runs/seed0/uniform_1_16

Prints, per run, the headline's cheapest fixed depth and best realisable criterion under each
account, with the criterion / fixed FLOPs ratio, at the final checkpoint and depths 1..64.
"""

from __future__ import annotations

import sys
from pathlib import Path
from unittest import mock

import pandas as pd

from biosrecall.bios import load_dataset
from biosrecall.eval import scoring, serving
from biosrecall.eval.exits import parse_exits
from biosrecall.train.checkpoint_files import load_checkpoint
from biosrecall.train.run_folder import RunFolder

MAX_DEPTH = 64


def every_position(config, lengths, checked, depths, criterion=None):
    """`query_flops` with every input position read out: the earlier per-token account."""
    return ACCOUNT_NOW(config, lengths, lengths, depths, criterion)


ACCOUNT_NOW = scoring.query_flops


def headlines(run_dir: Path) -> pd.DataFrame:
    checkpoint = RunFolder(run_dir).fraction_checkpoints()[1.0]
    model, meta = load_checkpoint(checkpoint, device="cpu")
    dataset = load_dataset(RunFolder(run_dir).training_data(meta))
    eval_set = dataset.eval_set()
    criteria = parse_exits(serving.SERVING_CRITERIA)
    stats = scoring.query_stats_by_depth(model, eval_set, MAX_DEPTH, criteria, progress=False)
    rows = {}
    for account, price in (("every position", every_position), ("checked positions", ACCOUNT_NOW)):
        with mock.patch.object(scoring, "query_flops", price):
            frontier = scoring.exit_rows(
                stats, eval_set, dataset.pool_sizes, criteria, MAX_DEPTH, model.config
            )
        frontier = frontier.assign(
            run=run_dir.name, schedule=meta.get("schedule"), checkpoint="1.0", fraction=1.0
        )
        rows[account] = serving.headline_table(frontier).iloc[0]
    table = pd.DataFrame(rows).T
    table["ratio"] = table["adaptive_flops"] / table["fixed_flops"]
    return table[
        ["fixed_depth", "fixed_flops", "adaptive_criterion", "adaptive_mean_depth", "adaptive_flops", "ratio"]
    ]


def main() -> None:
    for run_dir in map(Path, sys.argv[1:]):
        print(f"== {run_dir}")
        print(headlines(run_dir).to_string(float_format=lambda x: f"{x:.4g}"))


if __name__ == "__main__":
    main()
