"""Exit criteria and adaptive-depth scoring: the parser, the per-step statistics, whole-query exit
scored from the all-depth pass, and `recall-curve --exit` end to end (with one-line errors).

    pytest -q tests/test_exits.py
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch
from test_cli_recall import _one_error_line, run_cli, write_real_run
from test_recall import FakeDataset, NoisyRecurrentModel, oracle_for

from biosrecall.errors import BiosrecallError
from biosrecall.eval.exits import (
    DEFAULT_SWEEPS,
    KL,
    Entropy,
    Fixed,
    LogitTrail,
    Oracle,
    Stable,
    check_max_depth,
    parse_exits,
)
from biosrecall.eval.recall import recall_table
from biosrecall.eval.scoring import exit_depths, exit_rows
from biosrecall.eval.serving import headline_table
from biosrecall.eval.sweep import answer_stats_by_depth, exact_by_depth

MAX_DEPTH = 12


def test_parser_reads_each_criterion_and_expands_a_bare_name():
    assert parse_exits("fixed:4, kl:1e-3,stable:2,entropy:0.5,oracle") == [
        Fixed(4),
        KL(1e-3),
        Stable(2),
        Entropy(0.5),
        Oracle(),
    ]
    assert parse_exits(["kl:1e-3", "kl:1e-3,oracle"]) == [KL(1e-3), Oracle()]
    assert parse_exits("stable") == [Stable(m) for m in DEFAULT_SWEEPS["stable"]]
    assert [c.spec for c in parse_exits("kl:0.001,fixed:3")] == ["kl:0.001", "fixed:3"]


@pytest.mark.parametrize(
    "text, needle",
    [
        ("nope:1", "unknown exit criterion"),
        ("kl:-1e-3", "positive"),
        ("entropy:0", "positive"),
        ("kl:abc", "the kl threshold must be a positive number, got 'abc'"),
        ("stable:0", "at least 1"),
        ("fixed:2.5", "fixed needs a whole number of at least 1, got '2.5'"),
        ("oracle:3", "no parameter"),
        ("", "no exit criterion"),
    ],
)
def test_parser_refuses_malformed_criteria_in_one_line(text, needle):
    with pytest.raises(BiosrecallError, match=needle) as info:
        parse_exits(text)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("depth", [0, -3, True, 2.5])
def test_max_depth_below_one_is_refused(depth):
    with pytest.raises(BiosrecallError, match="max depth"):
        check_max_depth(depth)


def test_logit_trail_statistics_follow_their_definitions():
    trail = LogitTrail()
    first = trail.observe(torch.tensor([[0.0, 0.0], [4.0, 0.0]]))
    assert math.isinf(first.kl[0]) and (first.unchanged == 0).all()
    assert first.entropy[0] == pytest.approx(math.log(2))
    second = trail.observe(torch.tensor([[0.0, 0.0], [0.0, 4.0]]))
    assert second.kl[0] == pytest.approx(0.0, abs=1e-7) and second.kl[1] > 1.0
    assert second.unchanged.tolist() == [1, 0]  # row 1's argmax flipped: the count starts over
    third = trail.observe(torch.tensor([[0.0, 0.0], [0.0, 5.0]]))
    assert third.unchanged.tolist() == [2, 1]
    assert Stable(2).holds(3, third).tolist() == [True, False]
    assert KL(1e-3).holds(2, second).tolist() == [True, False]
    assert Entropy(0.1).holds(3, third).tolist() == [False, True]
    assert Fixed(3).holds(3, third).tolist() == [True, True]


@pytest.fixture(scope="module")
def scored():
    """A depth-dependent model on a fake dataset: exact flags move with depth, so exits matter."""
    dataset = FakeDataset(people=12)
    eval_set = dataset.eval_set()
    model = NoisyRecurrentModel(oracle_for(dataset, min_depth=1 + eval_set.person % 5))
    stats = answer_stats_by_depth(model, eval_set, MAX_DEPTH, batch_size=64, progress=False)
    return dataset, eval_set, model, stats


def test_statistics_pass_gives_the_sweeps_exact_flags(scored):
    dataset, eval_set, model, stats = scored
    assert np.array_equal(stats.exact, exact_by_depth(model, eval_set, MAX_DEPTH, progress=False))
    assert np.isinf(stats.kl[0]).all() and np.isfinite(stats.kl[1:]).all()
    assert (stats.unchanged[0] == 0).all() and (stats.unchanged[1:] <= np.arange(1, MAX_DEPTH)[:, None]).all()


def test_fixed_exit_equals_the_fixed_depth_column_of_the_recall_curve(scored):
    dataset, eval_set, model, stats = scored
    curve = recall_table(
        exact_by_depth(model, eval_set, MAX_DEPTH, progress=False), eval_set, dataset.pool_sizes
    )
    bits_at = curve[curve["attribute"] == "all"].set_index("depth")["bits"]
    criteria = [Fixed(k) for k in range(1, MAX_DEPTH + 3)]
    table = exit_rows(stats, eval_set, dataset.pool_sizes, criteria, MAX_DEPTH).set_index("criterion")
    assert len(set(bits_at)) > 2, "the model's recall must move with depth for this test to mean anything"
    for k in range(1, MAX_DEPTH + 3):
        row = table.loc[f"fixed:{k}"]
        depth = min(k, MAX_DEPTH)  # every criterion is capped at the max depth
        assert row["bits"] == pytest.approx(bits_at[depth]) == pytest.approx(table.loc[f"K={depth}", "bits"])
        assert row["mean_depth"] == row["p95_depth"] == depth


def test_oracle_is_never_below_another_criterion(scored):
    dataset, eval_set, _, stats = scored
    criteria = parse_exits("fixed,kl,stable,entropy")
    table = exit_rows(stats, eval_set, dataset.pool_sizes, [*criteria, Oracle()], MAX_DEPTH)
    oracle = table[table["kind"] == "oracle"].iloc[0]
    assert (table["bits"] <= oracle["bits"] + 1e-12).all()
    # At the same cost: every query another criterion gets right, the oracle gets right no deeper.
    oracle_depth = exit_depths(Oracle(), stats, MAX_DEPTH)
    columns = np.arange(stats.exact.shape[1])
    for criterion in criteria:
        depth = exit_depths(criterion, stats, MAX_DEPTH)
        right = stats.exact[depth - 1, columns]
        assert stats.exact[oracle_depth[right] - 1, columns[right]].all()
        assert (oracle_depth[right] <= depth[right]).all()
    assert oracle["mean_depth"] <= table.loc[table["bits"] >= oracle["bits"] - 1e-12, "mean_depth"].min()


def test_exit_depths_are_capped_and_the_headline_finds_the_shallowest_depth(scored):
    dataset, eval_set, _, stats = scored
    assert exit_depths(Stable(10**6), stats, 5).max() == 5
    assert exit_depths(KL(1e9), stats, 5).min() == 2  # KL needs two readouts
    table = exit_rows(stats, eval_set, dataset.pool_sizes, parse_exits("kl,stable"), MAX_DEPTH)
    table.insert(0, "run", "r")
    table[["schedule", "checkpoint", "fraction"]] = ["fixed:4", "1.0", 1.0]
    row = headline_table(table).iloc[0]
    baseline = table[table["kind"] == "fixed-depth"]
    reaching = baseline[baseline["bits"] >= 0.95 * baseline["bits"].max() - 1e-12]
    assert row["fixed_depth"] == reaching["mean_depth"].min()
    assert row["best_bits"] == baseline["bits"].max()


def test_cli_scores_exits_end_to_end(tmp_path, capsys):
    run, dataset, _ = write_real_run(tmp_path, people=6)
    out = tmp_path / "out"
    args = [run, "--max-depth", 4, "--out", out, "--device", "cpu", "--exit", "kl:1e-3,stable:2,fixed:2"]
    code, stdout, stderr = run_cli([*args, "--exit", "oracle,entropy"], capsys)
    assert code == 0, stderr
    frontier = pd.read_parquet(out / "exit_frontier.parquet")
    curve = pd.read_parquet(out / "recall_curve.parquet").query("attribute == 'all'").set_index("depth")
    assert set(frontier["kind"]) == {"fixed-depth", "kl", "stable", "fixed", "oracle", "entropy"}
    fixed2 = frontier.set_index("criterion").loc["fixed:2"]
    assert fixed2["bits"] == pytest.approx(curve.loc[2, "bits"]) and fixed2["mean_depth"] == 2
    assert (frontier["mean_depth"] <= 4).all() and (frontier["flops_per_query"] > 0).all()
    baseline = frontier[frontier["kind"] == "fixed-depth"].sort_values("mean_depth")
    assert baseline["flops_per_query"].is_monotonic_increasing
    for name in ("exit_frontier.csv", "exit_frontier.png", "exit_frontier.pdf", "exit_headline.parquet"):
        assert (out / name).stat().st_size > 0
    assert "adaptive exit" in stdout and "95%" in stdout


def test_frontier_is_cached_per_checkpoint_and_rescored_only_for_new_criteria(tmp_path, capsys):
    """What lets a study archived without its weights be re-tabulated and extended by seeds."""
    run, _, _ = write_real_run(tmp_path, people=6)
    args = [run, "--max-depth", 4, "--device", "cpu", "--exit"]
    assert run_cli([*args, "kl:1e-3,latent:0.03", "--out", tmp_path / "a"], capsys)[0] == 0
    assert list(run.glob("checkpoints/*/exits.parquet"))
    for weights in run.glob("checkpoints/*/model.safetensors"):
        weights.unlink()
    code, _, stderr = run_cli([*args, "kl:1e-3,latent:0.03", "--out", tmp_path / "b"], capsys)
    assert code == 0, stderr
    for name in ("exit_frontier.parquet", "recall_curve.parquet"):
        pd.testing.assert_frame_equal(
            pd.read_parquet(tmp_path / "a" / name), pd.read_parquet(tmp_path / "b" / name)
        )
    code, _, stderr = run_cli([*args, "kl:1e-2,latent:0.03", "--out", tmp_path / "c"], capsys)
    assert code == 2 and "model.safetensors" in stderr, "another criterion is scored from the weights"


@pytest.mark.parametrize(
    "extra, needle",
    [
        (["--exit", "nope"], "unknown exit criterion"),
        (["--exit", "kl:-1"], "positive"),
        (["--exit", "stable:0"], "at least 1"),
        (["--exit", "kl", "--max-depth", 0], "--max-depth"),
    ],
)
def test_cli_bad_exit_input_is_one_error_line(tmp_path, capsys, extra, needle):
    code, _, stderr = run_cli([tmp_path / "not-even-read", *extra], capsys)
    _one_error_line(code, stderr, needle)
