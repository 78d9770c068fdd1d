"""The one training step (`biosrecall.train.trainer.backward_and_clip`): how a batch becomes inputs and targets, the loss it
reports, gradient accumulation and clipping, and that the update diagnostic's gradient is the
trainer's own gradient, bit for bit.

    pytest -q tests/test_step.py
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch.optim.optimizer import register_optimizer_step_pre_hook

from biosrecall.bios import generate_dataset
from biosrecall.diagnose import load_run_state
from biosrecall.diagnose.batch_update import batch_gradient, optimizer_params
from biosrecall.errors import BiosrecallError
from biosrecall.model import LoopedTransformer, get_preset
from biosrecall.model.layers import IGNORE_INDEX as IGNORE
from biosrecall.train.config import TrainConfig
from biosrecall.train.distributed import DistInfo
from biosrecall.train.run_folder import RunFolder
from biosrecall.train.trainer import NonFiniteLoss, backward_and_clip, split_batch

PAD = 0


def tiny_model(seed: int = 0) -> LoopedTransformer:
    torch.manual_seed(seed)
    return LoopedTransformer(get_preset("bios-tiny", vocab_size=32))


def padded_rows(seed: int = 0) -> np.ndarray:
    """int64 [4, 13]: random tokens in 1..31, each row ending in a different amount of padding."""
    rows = np.random.default_rng(seed).integers(1, 32, size=(4, 13))
    for index, pad in enumerate((0, 2, 5, 9)):
        rows[index, rows.shape[1] - pad :] = PAD
    return rows


def gradients(model) -> list[torch.Tensor]:
    return [p.grad.clone() for p in model.parameters()]


def test_padding_targets_carry_no_loss_and_each_rank_gets_its_rows():
    rows = padded_rows()
    batch = split_batch(rows, PAD)
    assert torch.equal(batch.inputs, torch.from_numpy(rows[:, :-1]))
    assert torch.equal(batch.targets == IGNORE, torch.from_numpy(rows[:, 1:] == PAD))
    assert batch.real_tokens == int((rows[:, 1:] != PAD).sum())
    second = split_batch(rows, PAD, DistInfo(rank=1, world_size=2))
    assert torch.equal(second.inputs, torch.from_numpy(rows[2:, :-1]))
    assert second.real_tokens == batch.real_tokens  # the loss is normalised by the global batch
    with pytest.raises(BiosrecallError, match="no real tokens"):
        split_batch(np.full((2, 5), PAD), PAD)


def test_the_step_reports_the_mean_loss_and_accumulates_micro_batches_into_one_gradient():
    rows = padded_rows()
    whole, halves = tiny_model(), tiny_model()
    loss = backward_and_clip(whole, rows, PAD, depth=3, grad_clip=0)
    accumulated = backward_and_clip(halves, rows, PAD, depth=3, grad_clip=0, grad_accum=2)
    targets = torch.from_numpy(rows[:, 1:]).masked_fill(torch.from_numpy(rows[:, 1:] == PAD), IGNORE)
    with torch.no_grad():
        logits = tiny_model()(torch.from_numpy(rows[:, :-1]), 3)
    expected = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=IGNORE)
    assert loss.mean == pytest.approx(float(expected), rel=1e-6)
    assert accumulated.mean == pytest.approx(loss.mean, rel=1e-6)
    assert loss.real_tokens == accumulated.real_tokens == int((rows[:, 1:] != PAD).sum())
    for one, two in zip(gradients(whole), gradients(halves), strict=True):
        torch.testing.assert_close(two, one, rtol=1e-5, atol=1e-7)


def test_the_gradient_is_clipped_to_the_global_norm():
    rows = padded_rows()
    free, clipped = tiny_model(), tiny_model()
    backward_and_clip(free, rows, PAD, depth=2, grad_clip=0)
    norm = float(torch.linalg.vector_norm(torch.stack([g.norm() for g in gradients(free)])))
    backward_and_clip(clipped, rows, PAD, depth=2, grad_clip=norm / 10)
    clipped_norm = torch.linalg.vector_norm(torch.stack([g.norm() for g in gradients(clipped)]))
    assert float(clipped_norm) == pytest.approx(norm / 10, rel=1e-4)
    for raw, small in zip(gradients(free), gradients(clipped), strict=True):
        torch.testing.assert_close(small, raw / 10, rtol=1e-4, atol=1e-9)


def test_a_non_finite_loss_is_refused_with_one_line(monkeypatch):
    model = tiny_model()
    forward = model.forward
    monkeypatch.setattr(
        model, "forward", lambda tokens, depth, targets=None: forward(tokens, depth, targets) * float("nan")
    )
    with pytest.raises(NonFiniteLoss, match="not finite at depth 2") as error:
        backward_and_clip(model, padded_rows(), PAD, depth=2, grad_clip=1.0)
    assert isinstance(error.value, BiosrecallError)


@pytest.fixture()
def trainer_gradients():
    """Every gradient the trainer hands AdamW, in order: one list per update (clipped, as applied)."""
    captured = []

    def record(optimizer, args, kwargs):
        captured.append([p.grad.detach().clone() for p in optimizer_params(optimizer)])

    handle = register_optimizer_step_pre_hook(record)
    yield captured
    handle.remove()


def test_the_diagnostics_gradient_is_the_trainers_gradient_bit_for_bit(tmp_path, trainer_gradients):
    from biosrecall.train.trainer import train_bios

    data = generate_dataset(tmp_path / "data", people=60, seed=3)
    config = TrainConfig(
        schedule="fixed_first:k0=4,switch=0.8,finish=uniform",
        budget_of="fixed:4:30",
        batch_size=4,
        grad_accum=2,
        seed=1,
        lr=3e-3,
        checkpoint_fractions=(1.0,),
    )
    train_bios(data, tmp_path / "run", config, preset="bios-tiny")
    state, _ = load_run_state(tmp_path / "run", "switch", device="cpu")
    update = state.update
    assert len(trainer_gradients) == len(RunFolder(tmp_path / "run").read_metrics()) > update
    depth = int(state.depths[update])
    assert depth == RunFolder(tmp_path / "run").read_metrics()[update]["depth"]
    params = optimizer_params(state.optimizer)
    grads = batch_gradient(
        state.model,
        params,
        state.source.batch(update),
        state.source.pad_id,
        depth,
        state.config.grad_clip,
        state.autocast,
        state.config.grad_accum,
    )
    trainer = trainer_gradients[update]
    assert all(torch.equal(mine, theirs) for mine, theirs in zip(grads, trainer, strict=True))
    assert not torch.equal(trainer[0], trainer_gradients[update - 1][0])  # gradients differ per update
