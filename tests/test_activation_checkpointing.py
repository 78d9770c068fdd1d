"""`--activation-checkpointing`: each block iteration is recomputed in backward, the gradient unchanged.

    pytest -q tests/test_activation_checkpointing.py

What users rely on: the same gradients (and so the same training run) with less stored activation
memory, composed with truncated backprop (`--backprop-depth`) and with `--compile`; its recomputation
is a FLOP line of its own that leaves the modeled training FLOPs alone.
"""

from __future__ import annotations

import pytest
import torch
import torch._dynamo

from biosrecall.compute.flops import (
    forward_flops_per_token,
    recompute_flops_per_token,
    train_flops_per_token,
)
from biosrecall.model import LoopedTransformer, get_preset

# Recomputation runs the very same fp32 kernels on the same inputs: the gradients agree to rounding,
# and on a CPU bit for bit.
GRAD_TOLERANCE = 1e-6


def _model(checkpointing: bool, **overrides) -> LoopedTransformer:
    torch.manual_seed(0)
    model = LoopedTransformer(get_preset("bios-tiny", **overrides))
    model.activation_checkpointing = checkpointing
    return model


def _tokens() -> torch.Tensor:
    return torch.randint(0, 256, (3, 24), generator=torch.Generator().manual_seed(1))


def _gradients(model: LoopedTransformer, depth: int) -> dict[str, torch.Tensor]:
    tokens = _tokens()
    loss = torch.nn.functional.cross_entropy(model(tokens, depth).flatten(0, 1), tokens.roll(-1, 1).flatten())
    loss.backward()
    return {name: p.grad for name, p in model.named_parameters()}


def _block_calls(model: LoopedTransformer) -> list[int]:
    """A running count of block iterations run, recomputations included (module hooks do not fire
    during a checkpoint's recomputation, so the iteration itself is counted)."""
    calls, iterate = [0], model._block_step

    def counted(*args):
        calls[0] += 1
        return iterate(*args)

    model._block_step = counted
    return calls


@pytest.mark.parametrize(
    ("depth", "backprop_depth"), [(6, None), (8, 3), (2, 5)], ids=["full", "truncated", "k-above-depth"]
)
def test_gradients_equal_those_without_checkpointing(depth, backprop_depth):
    plain = _gradients(_model(False, backprop_depth=backprop_depth), depth)
    model = _model(True, backprop_depth=backprop_depth)
    calls = _block_calls(model)
    checkpointed = _gradients(model, depth)
    assert plain.keys() == checkpointed.keys()
    for name in plain:
        torch.testing.assert_close(checkpointed[name], plain[name], rtol=0, atol=GRAD_TOLERANCE, msg=name)
    # Every gradient-carrying iteration ran twice; the no_grad ones of truncated backprop once.
    carrying = depth if backprop_depth is None else min(depth, backprop_depth)
    assert calls[0] == depth + carrying


def _stored_activation_bytes(model: LoopedTransformer, depth: int) -> int:
    """Bytes autograd keeps for backward outside checkpoints (what activation memory grows with)."""
    stored = [0]

    def pack(tensor):
        stored[0] += tensor.numel() * tensor.element_size()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        model(_tokens(), depth).sum().backward()
    return stored[0]


def test_stored_activations_stop_growing_with_depth():
    plain = [_stored_activation_bytes(_model(False), depth) for depth in (4, 16)]
    checkpointed = [_stored_activation_bytes(_model(True), depth) for depth in (4, 16)]
    per_iteration_plain = (plain[1] - plain[0]) / 12
    per_iteration_checkpointed = (checkpointed[1] - checkpointed[0]) / 12
    # Only each iteration's input state is kept: a small fraction of an iteration's activations.
    assert per_iteration_checkpointed < 0.25 * per_iteration_plain
    assert checkpointed[1] < 0.5 * plain[1]


def test_composes_with_compiled_layers():
    torch._dynamo.reset()
    plain = _gradients(_model(False), 5)
    model = _model(True)
    model.compile_layers(backend="eager")
    checkpointed = _gradients(model, 5)
    torch._dynamo.reset()
    for name in plain:
        torch.testing.assert_close(checkpointed[name], plain[name], rtol=0, atol=GRAD_TOLERANCE, msg=name)


def test_trainer_option_trains_the_same_run(tmp_path):
    from biosrecall.bios import generate_dataset
    from biosrecall.train.config import TrainConfig
    from biosrecall.train.run_folder import RunFolder
    from biosrecall.train.trainer import train_bios

    data = generate_dataset(tmp_path / "data", people=20, seed=0)
    losses = {}
    for flag in (False, True):
        config = TrainConfig(
            schedule="uniform:1-8", updates=3, batch_size=2, seed=0, activation_checkpointing=flag,
            checkpoint_fractions=(1.0,), save_every=10**9,
        )  # fmt: skip
        train_bios(
            data, tmp_path / f"run-{flag}", config, preset="bios-tiny", model_overrides={"backprop_depth": 4}
        )
        losses[flag] = [row["loss"] for row in RunFolder(tmp_path / f"run-{flag}").read_metrics()]
    assert RunFolder(tmp_path / "run-True").read_config()["train_config"]["activation_checkpointing"] is True
    assert losses[True] == pytest.approx(losses[False], abs=GRAD_TOLERANCE)


def test_recomputation_is_its_own_flop_line():
    cfg = get_preset("lm-200m")
    iteration = forward_flops_per_token(cfg, 2048).iteration
    assert recompute_flops_per_token(cfg, 16, 2048) == 16 * iteration
    assert recompute_flops_per_token(cfg, 16, 2048, backprop_depth=8) == 8 * iteration
    assert recompute_flops_per_token(cfg, 3, 2048, backprop_depth=8) == 3 * iteration
    # About a third of an update's training FLOPs at K = 16 (forward + 2x backward of each iteration).
    share = recompute_flops_per_token(cfg, 16, 2048) / train_flops_per_token(cfg, 16, 2048)
    assert 0.25 < share < 1 / 3


def test_the_trainer_builds_its_model_with_the_settings():
    from biosrecall.train.config import TrainConfig
    from biosrecall.train.distributed import DistInfo
    from biosrecall.train.trainer import _build_model

    config = TrainConfig(updates=1, activation_checkpointing=True, compile=True)
    torch._dynamo.reset()
    raw_model, model, _ = _build_model(get_preset("bios-tiny"), config, DistInfo(), torch.device("cpu"))
    assert raw_model.activation_checkpointing and model is raw_model
    # Compiled layer by layer (never the whole model, which would compile a graph per depth).
    layers = (*raw_model.prelude, *raw_model.block, *raw_model.coda)
    assert all(layer._compiled_call_impl is not None for layer in layers)
    assert raw_model._compiled_call_impl is None
    torch._dynamo.reset()
