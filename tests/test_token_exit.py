"""Per-token exit against whole-query exit (`biosrecall.eval.token_exit`, `recall-curve --per-token`).

A criterion that stops every token at the same depth K must score exactly what the all-depth pass
scores at K (the decoder's cache then holds what `forward(tokens, K)` computes); the gap table's
columns are consistent with each other; `--per-token` without `--exit` is one error line.

    pytest -q tests/test_token_exit.py
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from test_cli_recall import _one_error_line, run_cli, write_real_run
from test_decode import tiny_model
from test_readout_free_exits import PROMPTS, SETTLING, _eval_set

from biosrecall.eval.exits import Fixed, Stable
from biosrecall.eval.sweep import exact_by_depth
from biosrecall.eval.token_exit import TABLE_NAME, per_token_exact


@pytest.fixture(scope="module")
def answered():
    """A tiny model and an eval set whose answers are its own depth-4 predictions: all exact at 4."""
    model = tiny_model(**SETTLING)
    eval_set = _eval_set(PROMPTS)
    with torch.no_grad():
        for row, prompt in enumerate(PROMPTS):
            eval_set.tokens[row, len(prompt)] = int(model(torch.tensor([prompt]), 4)[0, -1].argmax())
    return model, eval_set


@pytest.mark.parametrize("depth", [1, 2, 4, 7])
def test_one_depth_for_every_token_scores_what_the_all_depth_pass_scores(answered, depth):
    model, eval_set = answered
    exact, mean_depth = per_token_exact(model, eval_set, Fixed(depth), max_depth=8, batch_size=2)
    assert mean_depth == depth
    assert (
        exact.tolist() == exact_by_depth(model, eval_set, 8, batch_size=2, progress=False)[depth - 1].tolist()
    )
    if depth == 4:
        assert exact.all()


def test_the_gap_table_of_a_run(tmp_path, capsys):
    run, _, _ = write_real_run(tmp_path, people=4)
    out = tmp_path / "out"
    args = [run, "--exit", "stable:2,kl:1e-3,oracle", "--per-token", "--max-depth", "4", "--out", out]
    code, printed, err = run_cli(args, capsys)
    assert code == 0, err
    assert "per-token against whole-query exit" in printed
    gap = pd.read_csv(out / f"{TABLE_NAME}.csv")
    assert list(gap["criterion"]) == ["stable:2", "kl:0.001"]  # the oracle decides nothing per token
    frontier = pd.read_csv(out / "exit_frontier.csv").set_index("criterion")
    for row in gap.itertuples():
        assert row.whole_query_bits == pytest.approx(frontier.loc[row.criterion, "bits"])
        assert row.gap_vs_whole_query == pytest.approx(row.per_token_bits - row.whole_query_bits)
        assert row.gap_vs_fixed_depth == pytest.approx(row.per_token_bits - row.fixed_bits_at_same_depth)
        assert 1 <= row.per_token_mean_depth <= 4
    assert np.isfinite(gap["per_token_bits"]).all()


def test_per_token_needs_exit_criteria(tmp_path, capsys):
    run, _, _ = write_real_run(tmp_path, people=4)
    code, _, err = run_cli([run, "--per-token", "--out", tmp_path / "out"], capsys)
    _one_error_line(code, err, "--per-token needs --exit")
    assert not (tmp_path / "out").exists()


def test_a_stable_criterion_decides_each_token_on_its_own(answered):
    model, eval_set = answered
    exact, mean_depth = per_token_exact(model, eval_set, Stable(2), max_depth=8, batch_size=5)
    assert exact.shape == (len(PROMPTS),) and 2 <= mean_depth <= 8  # stable:2 needs two equal argmaxes
