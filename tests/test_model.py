"""Tests of the looped transformer, its config and presets.

    pytest -q tests/test_model.py

The central property: one all-depth pass gives exactly the logits of `forward(tokens, K)` for every K,
because the initial state is deterministic and state k never depends on how many iterations follow.
"""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F

from biosrecall.compute.flops import param_counts
from biosrecall.errors import BiosrecallError
from biosrecall.model import PRESETS, LoopedTransformer, ModelConfig, get_preset

VARIANTS = [
    {},
    {"norm": "sandwich", "init_state": "noise"},
    {"injection": "add", "init_state": "noise", "position": "learned"},
    {
        "injection": "none",
        "mlp": "gelu",
        "tie_embeddings": False,
        "init_state": "noise",
        "init_state_seed": 3,
    },
]


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """Tiny models gain nothing from intra-op threads, and on a shared 2-core machine threads waiting on
    each other slow every small op by orders of magnitude; the previous setting is restored after."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _model(seed: int = 0, **overrides) -> LoopedTransformer:
    torch.manual_seed(seed)
    return LoopedTransformer(get_preset("bios-tiny", **overrides))


def _tokens(batch: int = 3, seq: int = 20, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, 256, (batch, seq), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize(
    "overrides", VARIANTS, ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()) or "default"
)
def test_all_depths_equal_single_depth(overrides):
    model, tokens = _model(**overrides), _tokens()
    depths = list(range(1, 13))
    with torch.no_grad():
        swept = dict(model.forward_all_depths(tokens, depths))
        assert list(swept) == depths
        for k in depths:
            assert (swept[k] - model(tokens, k)).abs().max().item() <= 1e-5


@pytest.mark.parametrize(
    "overrides", VARIANTS, ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()) or "default"
)
def test_all_depths_at_positions_sorted_and_deduplicated(overrides):
    model, tokens = _model(**overrides), _tokens()
    mask = torch.zeros_like(tokens, dtype=torch.bool)
    mask[0, 3], mask[2, 7:12] = True, True
    with torch.no_grad():
        swept = list(model.forward_all_depths(tokens, [5, 2, 5, 1], positions=mask))
        assert [k for k, _ in swept] == [1, 2, 5]
        for k, logits in swept:
            assert logits.shape == (6, 256)
            assert (logits - model(tokens, k)[mask]).abs().max().item() <= 1e-5


@pytest.mark.parametrize("n_coda", [0, 2])
def test_readout_at_positions_with_any_coda_depth(n_coda):
    model, tokens = _model(n_coda=n_coda), _tokens()
    mask = torch.rand(tokens.shape, generator=torch.Generator().manual_seed(3)) < 0.3
    with torch.no_grad():
        logits = dict(model.forward_all_depths(tokens, [3], positions=mask))[3]
        assert (logits - model(tokens, 3)[mask]).abs().max().item() <= 1e-5


def test_all_depths_leaves_grad_mode_alone():
    model, tokens = _model(), _tokens()
    for _k, logits in model.forward_all_depths(tokens, [1, 3]):
        assert torch.is_grad_enabled() and not logits.requires_grad


def test_output_independent_of_batch_mates_and_sequence_length():
    model, tokens = _model(init_state="noise"), _tokens(batch=4, seq=24)
    with torch.no_grad():
        full = model(tokens, 6)
        alone = model(tokens[2:3], 6)
        prefix = model(tokens[:, :10], 6)
    assert (full[2:3] - alone).abs().max().item() <= 1e-5
    assert (full[:, :10] - prefix).abs().max().item() <= 1e-5


def test_noise_initial_state_is_seeded():
    a, b = _model(init_state="noise"), _model(init_state="noise")
    c = LoopedTransformer(get_preset("bios-tiny", init_state="noise", init_state_seed=1))
    c.load_state_dict(a.state_dict())
    tokens = _tokens()
    with torch.no_grad():
        assert torch.equal(a(tokens, 3), b(tokens, 3))
        assert not torch.allclose(a(tokens, 3), c(tokens, 3))
    state = a.initial_state(20, torch.device("cpu"), torch.float32)
    assert state.shape == (20, 32) and 0.5 < state.std().item() < 0.75  # std sqrt(2/5) = 0.63


def test_forward_shape_and_depth_validation():
    model, tokens = _model(), _tokens()
    assert model(tokens, 2).shape == (3, 20, 256)
    for bad in (0, -1, 1.5, "2", True):
        with pytest.raises(BiosrecallError, match="depth"):
            model(tokens, bad)
    for bad in ([], [0, 2]):
        with pytest.raises(BiosrecallError, match="depth"):
            list(model.forward_all_depths(tokens, bad))
    with pytest.raises(BiosrecallError, match="context_length"):
        model(_tokens(seq=model.config.context_length + 1), 1)
    with pytest.raises(BiosrecallError, match="integer tensor"):
        model(tokens.float(), 1)
    with pytest.raises(BiosrecallError, match="bool mask"):
        list(model.forward_all_depths(tokens, [1], positions=torch.ones(3, 5, dtype=torch.bool)))


def _grads(model: LoopedTransformer, tokens: torch.Tensor, depth: int) -> dict[str, torch.Tensor]:
    model.zero_grad(set_to_none=True)
    F.cross_entropy(model(tokens[:, :-1], depth).flatten(0, 1), tokens[:, 1:].flatten()).backward()
    return {name: p.grad.clone() for name, p in model.named_parameters()}


def test_truncated_backprop_keeps_forward_and_trains_every_part():
    full, cut = _model(), _model(backprop_depth=2)
    cut.load_state_dict(full.state_dict())
    tokens = _tokens(seq=21)
    with torch.no_grad():
        assert torch.equal(full(tokens, 6), cut(tokens, 6))
    g_full, g_cut = _grads(full, tokens, 6), _grads(cut, tokens, 6)
    assert all(g.abs().sum() > 0 for g in g_cut.values())  # prelude, adapter, block, coda, embeddings
    assert not torch.allclose(g_full["block.0.mlp.w_in.weight"], g_cut["block.0.mlp.w_in.weight"])
    g_short = _grads(cut, tokens, 2)  # depth <= backprop_depth: nothing is truncated
    assert torch.allclose(
        g_short["block.0.mlp.w_in.weight"], _grads(full, tokens, 2)["block.0.mlp.w_in.weight"]
    )


@pytest.mark.parametrize("norm", ["pre", "sandwich"])
def test_stable_at_depth_64_at_init(norm):
    model = LoopedTransformer(get_preset("bios-cpu", norm=norm, init_state="noise"))
    tokens = torch.randint(0, 4096, (2, 64), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        logits = dict(model.forward_all_depths(tokens, [1, 64]))
    assert torch.isfinite(logits[64]).all()
    assert logits[64].std() < 3 * logits[1].std()


def test_config_validation():
    with pytest.raises(ValueError, match="n_heads"):
        get_preset("bios-tiny", n_heads=3)
    for field, value in [
        ("norm", "post"),
        ("injection", "mul"),
        ("position", "alibi"),
        ("init_state", "ones"),
        ("mlp", "relu"),
        ("d_model", 0),
        ("n_block", 0),
        ("n_prelude", -1),
        ("backprop_depth", 0),
        ("init_state_std", -1.0),
        ("vocab_size", 1),
    ]:
        with pytest.raises(BiosrecallError, match=field):
            get_preset("bios-tiny", **{field: value})
    with pytest.raises(BiosrecallError, match="even head width"):
        get_preset("bios-tiny", d_model=30, n_heads=2)


def test_config_round_trip_and_errors():
    cfg = get_preset("lm-tiny", norm="sandwich", backprop_depth=8)
    assert ModelConfig.from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg
    with pytest.raises(BiosrecallError, match="unknown model config field"):
        ModelConfig.from_dict({**cfg.to_dict(), "colour": "red"})
    data = cfg.to_dict()
    del data["d_model"]
    with pytest.raises(BiosrecallError, match="missing field.*d_model"):
        ModelConfig.from_dict(data)


def test_presets():
    with pytest.raises(BiosrecallError, match="unknown preset 'huge'.*bios-tiny"):
        get_preset("huge")
    with pytest.raises(BiosrecallError, match="unknown model config field"):
        get_preset("bios-tiny", width=3)
    assert get_preset("bios-cpu", vocab_size=999).vocab_size == 999
    assert 128 <= PRESETS["bios-cpu"].d_model <= 256
    for name, cfg in PRESETS.items():
        with torch.device("meta"):
            model = LoopedTransformer(cfg)
        assert model.num_parameters() == param_counts(cfg)["total"], name
    assert abs(param_counts(PRESETS["lm-200m"])["total"] / 200e6 - 1) < 0.1
    assert abs(param_counts(PRESETS["lm-1b"])["total"] / 1e9 - 1) < 0.1
