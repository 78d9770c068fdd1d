"""Exact serving FLOPs (`compute.flops.serving_flops`, `readout_flops`): equal to torch's
FlopCounterMode on the model's own readout at selected positions, used by every row of the exit
frontier, and a frontier priced by the old accounting is recomputed rather than kept.

    pytest -q tests/test_serving_flops.py
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from test_flops import _config, _counted
from test_recall import FakeDataset

from biosrecall.compute.flops import forward_flops_per_token, readout_flops, serving_flops
from biosrecall.errors import BiosrecallError
from biosrecall.eval.exits import StepStats, parse_exits
from biosrecall.eval.scoring import FLOPS_ACCOUNT, exit_depths, exit_rows
from biosrecall.eval.serving import _is_current, write_frontier
from biosrecall.model import LoopedTransformer

VARIANTS = [
    {},
    {"n_coda": 2, "mlp": "gelu", "norm": "sandwich", "tie_embeddings": False},
    {"n_coda": 0, "injection": "add", "position": "learned"},
    {"injection": "none", "n_prelude": 2, "init_state": "noise"},
]
CHECKED = (3, 8, 13)  # the last is the query's last input position, as for a bioS query


@pytest.mark.parametrize("overrides", VARIANTS)
@pytest.mark.parametrize("depth", [1, 3])
def test_exact_serving_flops_equal_the_flop_counter(overrides, depth):
    cfg = _config(**overrides)
    torch.manual_seed(0)
    model = LoopedTransformer(cfg)
    length = CHECKED[-1] + 1
    tokens = torch.randint(0, cfg.vocab_size, (1, length))
    mask = torch.zeros_like(tokens, dtype=torch.bool)
    mask[0, list(CHECKED)] = True
    with torch.no_grad():
        once = _counted(lambda: list(model.forward_all_depths(tokens, [depth], positions=mask)))
        every = _counted(lambda: list(model.forward_all_depths(tokens, range(1, depth + 1), positions=mask)))
    checked = len(CHECKED)
    assert serving_flops(cfg, length, depth, checked) == once  # a fixed depth: one readout
    assert serving_flops(cfg, length, depth, checked, readouts=depth) == every  # a readout per iteration
    if depth > 1:
        assert (every - once) // (depth - 1) == readout_flops(cfg, length, checked)


def test_reading_every_position_is_the_per_token_account():
    cfg = _config(n_coda=2)
    fwd = forward_flops_per_token(cfg, 20)
    assert readout_flops(cfg, 20, 20) == 20 * (fwd.coda + fwd.head)
    assert serving_flops(cfg, 20, 5, 20) == 20 * fwd.at_depth(5)
    # Reading two positions saves the head and the last coda layer's MLP at the other eighteen.
    assert readout_flops(cfg, 20, 2) < readout_flops(cfg, 20, 20) - 18 * fwd.head
    assert (
        serving_flops(cfg, 20, 5, 2, state_checks=4) == serving_flops(cfg, 20, 5, 2) + 4 * 2 * 4 * cfg.d_model
    )


@pytest.mark.parametrize(("positions", "checked"), [(10, 0), (10, 11), (0, 1), (33, 1)])
def test_impossible_readouts_are_refused(positions, checked):
    with pytest.raises(BiosrecallError):
        readout_flops(_config(), positions, checked)


@pytest.fixture(scope="module")
def frontier_inputs():
    """A fake bioS eval set, statistics of every kind drawn at random, and a config that fits it."""
    dataset = FakeDataset(people=4)
    eval_set = dataset.eval_set()
    rng = np.random.default_rng(0)
    shape = (8, len(eval_set.answer_start))
    stats = StepStats(
        exact=rng.random(shape) < 0.5,
        kl=rng.random(shape),
        entropy=rng.random(shape),
        unchanged=rng.integers(0, 4, shape),
        latent=rng.random(shape),
        accel=rng.random(shape),
    )
    config = _config(vocab_size=dataset.vocab_size)
    return dataset, eval_set, stats, config


def test_every_frontier_row_is_priced_by_the_exact_function(frontier_inputs):
    dataset, eval_set, stats, config = frontier_inputs
    criteria = parse_exits("kl:0.5,stable:2,latent:0.3,accel:0.5,fixed:3,oracle")
    table = exit_rows(stats, eval_set, dataset.pool_sizes, criteria, 8, config).set_index("criterion")
    checked = np.asarray(eval_set.answer_len)
    lengths = np.asarray(eval_set.answer_start) + checked - 1

    def mean_cost(depths, readouts, checks):
        costs = [
            serving_flops(config, int(n), int(e), int(c), readouts(e), checks(e))
            for n, c, e in zip(lengths, checked, depths, strict=True)
        ]
        return pytest.approx(np.mean(costs), rel=1e-12)

    one, none = (lambda e: 1), (lambda e: 0)
    assert table.loc["K=4", "flops_per_query"] == mean_cost(np.full(len(lengths), 4), one, none)
    expected = {
        "kl:0.5": (lambda e: int(e), none),
        "stable:2": (lambda e: int(e), none),
        "latent:0.3": (one, lambda e: int(e) - 1),
        "accel:0.5": (one, lambda e: max(0, int(e) - 2)),
        "fixed:3": (one, none),
        "oracle": (one, none),
    }
    for criterion in criteria:
        depths = exit_depths(criterion, stats, 8)
        readouts, checks = expected[criterion.spec]
        assert table.loc[criterion.spec, "flops_per_query"] == mean_cost(depths, readouts, checks)
    assert (table["flops_account"] == FLOPS_ACCOUNT).all()


def test_a_frontier_priced_by_another_account_is_not_kept(frontier_inputs, tmp_path):
    dataset, eval_set, stats, config = frontier_inputs
    criteria = parse_exits("kl:0.5,latent:0.3")
    rows = exit_rows(stats, eval_set, dataset.pool_sizes, criteria, 8, config)
    labels = pd.DataFrame(
        [{"run": "r", "schedule": "fixed:4", "checkpoint": "1.0", "fraction": 1.0}] * len(rows)
    )
    scored = pd.concat([labels, rows], axis=1)
    write_frontier(tmp_path, scored)
    assert _is_current(tmp_path, scored)
    for stale in (
        lambda f: f.assign(flops_account="every-position"),
        lambda f: f.drop(columns="flops_account"),
    ):
        frontier = pd.read_parquet(tmp_path / "exit_frontier.parquet")
        stale(frontier).to_parquet(tmp_path / "exit_frontier.parquet")
        assert not _is_current(tmp_path, scored)
