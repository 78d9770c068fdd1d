"""The training loss's fused head (`biosrecall.model.layers.head_cross_entropy`, reached as
`model(tokens, depth, targets=targets)`) against plain `F.cross_entropy` on the full logits: the loss
within 1e-6 relative and its gradients within rounding, whatever the number of row blocks; bf16
autocast keeps the plain expression exactly; the logits path is not touched.

    pytest -q tests/test_fused_loss.py
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from biosrecall.bios import BatchSampler, batch_generator, generate_dataset, load_dataset
from biosrecall.errors import BiosrecallError
from biosrecall.model import LoopedTransformer, get_preset, layers
from biosrecall.model.layers import IGNORE_INDEX, head_cross_entropy
from biosrecall.train.trainer import split_batch


def plain(x, weight, targets):
    return F.cross_entropy(F.linear(x, weight), targets, ignore_index=IGNORE_INDEX, reduction="sum")


def problem(rows=300, width=16, vocab=97, dtype=torch.float32, seed=0):
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, width, generator=generator, dtype=dtype)
    weight = torch.randn(vocab, width, generator=generator, dtype=dtype) * 2  # confident logits too
    targets = torch.randint(0, vocab, (rows,), generator=generator)
    targets[torch.rand(rows, generator=generator) < 0.25] = IGNORE_INDEX
    return x, weight, targets


def loss_and_grads(function, x, weight, targets):
    x, weight = x.clone().requires_grad_(), weight.clone().requires_grad_()
    loss = function(x, weight, targets)
    (loss * 0.37).backward()  # a scaled loss, as the step normalises it
    return loss.detach(), x.grad, weight.grad


@pytest.mark.parametrize("block_bytes", [1 << 20, 97 * 4 * 16, 97 * 4 * 37])
def test_fused_loss_and_gradients_match_cross_entropy_on_full_logits(monkeypatch, block_bytes):
    """One block, blocks of MIN_BLOCK_ROWS rows, and blocks that leave a remainder."""
    monkeypatch.setattr(layers, "LOGIT_BLOCK_BYTES", block_bytes)
    x, weight, targets = problem()
    want = loss_and_grads(plain, x, weight, targets)
    got = loss_and_grads(head_cross_entropy, x, weight, targets)
    assert float(got[0]) == pytest.approx(float(want[0]), rel=1e-6)
    torch.testing.assert_close(got[1], want[1], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(got[2], want[2], rtol=1e-5, atol=1e-6)
    assert not got[1][targets == IGNORE_INDEX].any()  # padding rows get no gradient


def test_in_float64_the_fused_loss_is_the_same_function():
    x, weight, targets = problem(dtype=torch.float64)
    want = loss_and_grads(plain, x, weight, targets)
    got = loss_and_grads(head_cross_entropy, x, weight, targets)
    for one, two in zip(got, want, strict=True):
        torch.testing.assert_close(one, two, rtol=1e-12, atol=1e-12)


def test_without_gradients_or_real_targets_it_is_still_the_loss():
    x, weight, targets = problem()
    with torch.no_grad():
        assert float(head_cross_entropy(x, weight, targets)) == pytest.approx(
            float(plain(x, weight, targets)), rel=1e-6
        )
    frozen = loss_and_grads(lambda a, w, t: head_cross_entropy(a, w.detach(), t), x, weight, targets)
    assert frozen[2] is None and frozen[1] is not None
    none = torch.full_like(targets, IGNORE_INDEX)
    loss, grad_x, grad_weight = loss_and_grads(head_cross_entropy, x, weight, none)
    assert float(loss) == 0.0 and not grad_x.any() and not grad_weight.any()


def test_under_bf16_autocast_it_is_the_plain_expression_bit_for_bit():
    x, weight, targets = problem()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        fused = head_cross_entropy(x, weight, targets)
        expected = F.cross_entropy(
            F.linear(x, weight).float(), targets, ignore_index=IGNORE_INDEX, reduction="sum"
        )
    assert fused.dtype == torch.float32
    assert torch.equal(fused, expected)


@pytest.fixture(scope="module")
def bios_batch(tmp_path_factory):
    """A fixed bios-tiny training batch: 8 rows of 128 tokens, padded as the trainer pads them."""
    data = load_dataset(generate_dataset(tmp_path_factory.mktemp("fused") / "data", people=40, seed=0))
    rows = BatchSampler(data, 8, 128).batch(batch_generator(0, 0))
    return data, split_batch(rows, data.pad_id)


@pytest.mark.parametrize("overrides", [{}, {"tie_embeddings": False, "backprop_depth": 2}])
def test_the_models_training_loss_is_todays_on_a_fixed_batch(bios_batch, overrides):
    """`model(tokens, depth, targets=)` against the loss the step took before the fused head: the
    cross-entropy of `model(tokens, depth)`'s logits; the loss within 1e-6 relative, every parameter's
    gradient within rounding."""
    data, batch = bios_batch
    results = []
    for fused in (True, False):
        torch.manual_seed(0)
        model = LoopedTransformer(get_preset("bios-tiny", vocab_size=data.vocab_size, **overrides))
        if fused:
            loss = model(batch.inputs, 4, targets=batch.targets)
        else:
            logits = model(batch.inputs, 4)
            loss = F.cross_entropy(
                logits.flatten(0, 1), batch.targets.flatten(), ignore_index=IGNORE_INDEX, reduction="sum"
            )
        (loss / batch.real_tokens).backward()
        results.append((float(loss.detach()), {name: p.grad for name, p in model.named_parameters()}))
    (fused_loss, fused_grads), (plain_loss, plain_grads) = results
    assert fused_loss == pytest.approx(plain_loss, rel=1e-6)
    assert fused_grads.keys() == plain_grads.keys()
    for name, grad in plain_grads.items():
        torch.testing.assert_close(fused_grads[name], grad, rtol=1e-4, atol=1e-6, msg=name)


def test_targets_must_be_shaped_like_the_tokens():
    model = LoopedTransformer(get_preset("bios-tiny"))
    tokens = torch.from_numpy(np.zeros((2, 5), dtype=np.int64))
    with pytest.raises(BiosrecallError, match="shaped like tokens"):
        model(tokens, 1, targets=tokens[:, :4])
