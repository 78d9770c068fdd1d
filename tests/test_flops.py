"""Tests of the modeled-FLOP account against torch's FlopCounterMode and the paper's reported savings.

    pytest -q tests/test_flops.py

torch's FlopCounterMode prices the CUDA SDPA kernels (flash / efficient / cudnn) with its
`sdpa_flop_count` formulas but has no entry for the CPU flash kernel, so the tests map the CPU op to
those same formulas; everything else (mm, addmm, bmm) is counted by torch's own registry.
"""

from __future__ import annotations

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode, sdpa_backward_flop_count, sdpa_flop_count

from biosrecall.compute.flops import (
    forward_flops_per_token,
    param_counts,
    recurrent_ratio,
    train_flops_per_token,
    train_flops_table,
    update_flops,
)
from biosrecall.compute.planner import saving_vs_uniform
from biosrecall.errors import BiosrecallError
from biosrecall.model import LoopedTransformer, ModelConfig, get_preset

_ATEN = torch.ops.aten
CPU_SDPA = {
    _ATEN._scaled_dot_product_flash_attention_for_cpu: lambda q, k, v, *a, **kw: sdpa_flop_count(q, k, v),
    _ATEN._scaled_dot_product_flash_attention_for_cpu_backward: (
        lambda grad, q, k, v, *a, **kw: sdpa_backward_flop_count(grad, q, k, v)
    ),
}

SHAPES = [
    # (overrides of a small config, depth, batch, seq_len)
    ({}, 1, 2, 16),
    ({}, 5, 3, 24),
    ({"norm": "sandwich", "mlp": "gelu", "tie_embeddings": False}, 3, 2, 32),
    ({"injection": "add", "position": "learned", "init_state": "noise"}, 4, 2, 16),
    ({"injection": "none", "n_prelude": 2, "n_block": 1, "n_coda": 0}, 3, 2, 16),
    ({"backprop_depth": 2, "init_state": "noise"}, 6, 2, 16),
    ({"backprop_depth": 2, "injection": "none"}, 5, 2, 16),
    ({"backprop_depth": 8}, 3, 2, 16),
]


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """Tiny models gain nothing from intra-op threads, and on a shared 2-core machine threads waiting on
    each other slow every small op by orders of magnitude; the previous setting is restored after."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _config(**overrides) -> ModelConfig:
    base = dict(
        vocab_size=97, d_model=48, n_heads=4, d_mlp=96, n_prelude=1, n_block=2, n_coda=1, context_length=32
    )
    return ModelConfig(**{**base, **overrides})


def _counted(fn) -> int:
    with FlopCounterMode(display=False, custom_mapping=CPU_SDPA) as counter:
        fn()
    return counter.get_total_flops()


@pytest.mark.parametrize(("overrides", "depth", "batch", "seq"), SHAPES)
def test_account_matches_flop_counter(overrides, depth, batch, seq):
    cfg = _config(**overrides)
    torch.manual_seed(0)
    model = LoopedTransformer(cfg)
    tokens = torch.randint(0, cfg.vocab_size, (batch, seq))
    with torch.no_grad():
        forward = _counted(lambda: model(tokens, depth))
    train = _counted(lambda: model(tokens, depth).float().pow(2).mean().backward())
    modeled_forward = batch * seq * forward_flops_per_token(cfg, seq).at_depth(depth)
    modeled_train = update_flops(cfg, depth, batch * seq, seq)
    assert abs(modeled_forward / forward - 1) <= 0.03
    assert abs(modeled_train / train - 1) <= 0.03
    # the account prices exactly the matmuls the model makes
    assert (modeled_forward, modeled_train) == (forward, train)


def test_breakdown_and_training_arithmetic():
    cfg = get_preset("lm-200m")
    fwd = forward_flops_per_token(cfg, 2048)
    d, m, T = cfg.d_model, cfg.d_mlp, 2048
    layer = 8 * d * d + 6 * d * m + 4 * T * d
    assert (fwd.prelude, fwd.block, fwd.coda) == (2 * layer, 5 * layer, 2 * layer)
    assert (fwd.adapter, fwd.injection, fwd.head) == (2 * d * d, 2 * d * d, 2 * d * cfg.vocab_size)
    assert fwd.at_depth(4) == fwd.non_recurrent + 4 * fwd.iteration
    assert forward_flops_per_token(cfg) == fwd  # seq_len defaults to the context length
    ratio = train_flops_per_token(cfg, 8) / fwd.at_depth(8)
    assert 3.0 < ratio < 3.2  # backward = 2x matmuls, 2.5x attention scores
    assert recurrent_ratio(cfg) == pytest.approx(fwd.non_recurrent / fwd.iteration)
    assert update_flops(cfg, 4, 1000) == 1000 * train_flops_per_token(cfg, 4)
    table = train_flops_table(cfg, 16)
    assert table[0] == 0 and table[16] == train_flops_per_token(cfg, 16)


def test_truncated_backprop_is_cheaper_and_linear_beyond_k():
    cfg = get_preset("lm-tiny")
    full, cut = train_flops_per_token(cfg, 16), train_flops_per_token(cfg, 16, backprop_depth=8)
    assert cut < full
    # the first 8 of 16 iterations only run forward: the rest is exactly a full-backprop K = 8 update
    assert cut == train_flops_per_token(cfg, 8) + 8 * forward_flops_per_token(cfg).iteration
    assert train_flops_per_token(cfg, 6, backprop_depth=8) == train_flops_per_token(cfg, 6)
    assert (
        train_flops_per_token(cfg.replace(backprop_depth=8), 16) == cut
    )  # the config's value is the default


@pytest.mark.parametrize(
    "overrides",
    [
        {},
        {"tie_embeddings": False, "position": "learned"},
        {"norm": "sandwich", "mlp": "gelu", "injection": "none"},
    ],
)
def test_param_counts_match_model(overrides):
    cfg = _config(**overrides)
    counts = param_counts(cfg)
    assert counts["total"] == LoopedTransformer(cfg).num_parameters()
    assert counts["non_embedding"] == counts["total"] - counts["embedding"] - counts["head"]
    assert sum(v for k, v in counts.items() if k not in ("total", "non_embedding")) == counts["total"]


@pytest.mark.parametrize(
    ("preset", "updates", "k0", "switch", "reported"),
    [
        ("lm-200m", 4800, 2, 0.67, 45.3),
        ("lm-200m", 4800, 2, 0.8, 54.3),
        ("lm-200m", 4800, 4, 0.67, 31.3),
        ("lm-1b", 20000, 4, 0.67, 30.8),
        ("lm-1b", 20000, 4, 0.8, 36.9),
    ],
)
def test_presets_reproduce_paper_savings(preset, updates, k0, switch, reported):
    schedule = f"fixed_first:k0={k0},switch={switch},finish=uniform"
    saving = 100 * saving_vs_uniform(get_preset(preset), schedule, updates)
    assert abs(saving - reported) <= 1.5


def test_bad_inputs():
    cfg = get_preset("bios-tiny")
    for bad in (0, -2, 1.5, True):
        with pytest.raises(BiosrecallError, match="depth"):
            train_flops_per_token(cfg, bad)
    with pytest.raises(BiosrecallError, match="sequence length"):
        forward_flops_per_token(cfg, 0)
    with pytest.raises(BiosrecallError, match="tokens per update"):
        update_flops(cfg, 2, 0)
    with pytest.raises(BiosrecallError, match="backprop depth"):
        train_flops_per_token(cfg, 2, backprop_depth=0)
