"""Transformer building blocks: RMSNorm, rotary positions, causal attention, MLPs, one layer.

    layer = TransformerLayer(cfg)                # cfg: a ModelConfig
    cos, sin = rope_tables(cfg)                  # [context_length, head_dim / 2] each
    y = layer(x, rope=torch.stack((cos[:T], sin[:T]), -1))   # x: [B, T, d]; rope=None without RoPE
    y = layer(x, rope, cache=KVCache(store, start))          # positions start.. of a cached sequence

Attention goes through `torch.nn.functional.scaled_dot_product_attention(is_causal=True)`, so GPUs
use flash kernels. With a `KVCache` (the incremental decoder, `model/decode.py`) a layer writes its
keys and values into the cache and attends over every cached position, with the same arithmetic.
With an explicit `mask` (a Hugging Face export's left-padded batch) attention follows the mask instead.
All projections are bias-free; the FLOP account in `compute/flops.py` counts exactly the matmuls made
here (norms, RoPE and activations are not counted).

The training loss has a head of its own: `head_cross_entropy(x, weight, targets)` is the summed
cross-entropy of the logits `x @ weight.T`, computed a block of rows at a time so the [tokens, vocab]
logits are never held in full, and with its gradient made while each block is still in cache.

This file imports torch only: a Hugging Face export ships a copy of it beside its modeling code
(`biosrecall.hf.export`), so the exported model runs these very layers without biosrecall installed.
`cfg` is a `ModelConfig` here, the export's config there: both carry the fields read below.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

# fp32 [T, head_dim / 2, 2]: (cos, sin) of t theta_j for position t, pair j; or [B, T, head_dim / 2, 2],
# a position per row (an export's left-padded batch)
Rope = torch.Tensor | None

IGNORE_INDEX = -100
"""A target that carries no loss (padding), as `torch.nn.functional.cross_entropy`'s ignore_index."""
LOGIT_BLOCK_BYTES = 1 << 20
"""The logits `head_cross_entropy` holds at once: a block of rows small enough to stay in a core's L2
cache (1-2 MiB on current x86 cores) from the head's matmul through the softmax to both gradient
matmuls. One pass over the full [1024, 2137] logits of a `bios-tiny` batch from memory costs about
as much as the matmul that made them."""
MIN_BLOCK_ROWS = 16
"""Fewest rows per block, so a large vocabulary still gets matmuls of a useful size."""


class KVCache(NamedTuple):
    """One layer's keys and values of a sequence: `store` [2, B, context_length, n_heads, head_dim]
    (K then V, in the parameters' dtype) holds positions 0..start-1; a call with this cache computes
    positions start.., writes their keys and values into `store`, and attends over all of them."""

    store: torch.Tensor
    start: int


class RMSNorm(nn.Module):
    """Root-mean-square norm with a learned per-channel gain (no bias, no mean subtraction)."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Under bf16 autocast x arrives in bf16; a weight of another dtype rules out the fused kernel.
        return F.rms_norm(x, self.weight.shape, self.weight.to(x.dtype), self.eps)


def rope_tables(cfg) -> tuple[torch.Tensor, torch.Tensor]:
    """Cosine and sine tables [context_length, head_dim / 2] (fp32, computed in fp64)."""
    half = cfg.head_dim // 2
    inv_freq = 1.0 / (cfg.rope_base ** (torch.arange(half, dtype=torch.float64) / half))
    angles = torch.outer(torch.arange(cfg.context_length, dtype=torch.float64), inv_freq)
    return angles.cos().float(), angles.sin().float()


def apply_rope(x: torch.Tensor, rope: torch.Tensor) -> torch.Tensor:
    """Rotate adjacent channel pairs of x [B, T, n, H, hd] by position (in fp32), queries and keys
    together; `rope` is [T, hd/2, 2] or, a position per row, [B, T, hd/2, 2]. Eager: one complex
    multiply (measured 3x faster fwd+bwd than the real arithmetic below). Under torch.compile: the
    same products written out in reals, because inductor generates no code for complex tensors and
    would fall back to eager kernels; both give bit-identical results."""
    pairs = x.float().unflatten(-1, (-1, 2))
    if torch.compiler.is_compiling():
        real, imag = pairs.unbind(-1)
        cos, sin = rope[..., None, None, :, :].unbind(-1)
        rotated = torch.stack((real * cos - imag * sin, real * sin + imag * cos), dim=-1)
        return rotated.flatten(-2).to(x.dtype)
    rotation = torch.view_as_complex(rope)[..., None, None, :]
    return torch.view_as_real(torch.view_as_complex(pairs) * rotation).flatten(-2).to(x.dtype)


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention with a fused QKV projection and optional RoPE."""

    def __init__(self, cfg) -> None:
        super().__init__()
        self.n_heads = cfg.n_heads
        self.head_dim = cfg.head_dim
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model, bias=False)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model, bias=False)
        self.attend_at = _attend_at  # `TransformerLayer.compile` swaps in a version kept out of graphs

    def forward(
        self,
        x: torch.Tensor,
        rope: Rope,
        positions: torch.Tensor | None = None,
        cache: KVCache | None = None,
        mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """[B, T, d], or [P, d] for the queries at the True entries of `positions` (bool [B, T]), in
        row-major order. Keys and values always come from every position, the cached ones included.
        `mask` (bool [B, 1, T, T], True where a query may attend) replaces the causal rule."""
        batch, seq, width = x.shape
        qkv = self.qkv(x).view(batch, seq, 3, self.n_heads, self.head_dim)
        qk, v = qkv[:, :, :2], qkv[:, :, 2]
        if rope is not None:
            qk = apply_rope(qk, rope)
        q, k = qk.unbind(dim=2)
        if positions is not None:
            return self.proj(self.attend_at(q, k, v, positions).flatten(1))
        if cache is None:
            y = F.scaled_dot_product_attention(
                q.transpose(1, 2),
                k.transpose(1, 2),
                v.transpose(1, 2),
                attn_mask=mask,
                is_causal=mask is None,
            )
        else:
            y = _attend_cached(q, k, v, cache)
        return self.proj(y.transpose(1, 2).reshape(batch, seq, width))


def _attend_cached(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cache: KVCache) -> torch.Tensor:
    """Attention output [B, n, T, hd] of the queries at positions start.. ([B, T, n, hd] inputs) over
    the cache, after writing this call's keys and values into it. Several queries at once come only
    from a prefill, which starts the sequence: only there does one causal block line up with the keys."""
    store, start = cache
    end = start + q.shape[1]
    store[0, :, start:end], store[1, :, start:end] = k, v
    keys, values = store[0, :, :end].transpose(1, 2), store[1, :, :end].transpose(1, 2)
    # Under bf16 autocast the cache (in the parameters' dtype) is wider than the queries.
    keys, values = keys.to(q.dtype), values.to(q.dtype)
    # A prefill's block of queries is square and causal; a single query sees everything.
    return F.scaled_dot_product_attention(q.transpose(1, 2), keys, values, is_causal=q.shape[1] > 1)


def _attend_at(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """Causal attention output [P, n, hd] for the queries at `positions` only ([B, T, n, hd] inputs).

    The selected queries are packed to the left of a [B, Q] grid (Q = most selected in one row); each
    attends to keys up to its own position. Unused slots point at position 0 and are dropped, so only
    P of the B x T queries are ever computed.
    """
    rows, columns = positions.nonzero(as_tuple=True)
    slots = positions.long().cumsum(dim=1)[rows, columns] - 1
    width = int(slots.max()) + 1 if len(slots) else 1
    query_position = torch.zeros(q.shape[0], width, dtype=torch.long, device=q.device)
    query_position[rows, slots] = columns
    packed = q.new_zeros(q.shape[0], width, *q.shape[2:])
    packed[rows, slots] = q[rows, columns]
    visible = torch.arange(q.shape[1], device=q.device) <= query_position[..., None]  # [B, Q, T]
    y = F.scaled_dot_product_attention(
        packed.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), attn_mask=visible[:, None]
    )
    return y.transpose(1, 2)[rows, slots]


class MLP(nn.Module):
    """SwiGLU (silu(x W_gate) * x W_up, one fused input matrix) or GELU MLP, bias-free."""

    def __init__(self, cfg) -> None:
        super().__init__()
        self.gated = cfg.mlp == "swiglu"
        hidden = 2 * cfg.d_mlp if self.gated else cfg.d_mlp
        self.w_in = nn.Linear(cfg.d_model, hidden, bias=False)
        self.w_out = nn.Linear(cfg.d_mlp, cfg.d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.w_in(x)
        if self.gated:
            gate, up = h.chunk(2, dim=-1)
            h = F.silu(gate) * up
        else:
            h = F.gelu(h, approximate="tanh")
        return self.w_out(h)


def head_cross_entropy(x: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Summed cross-entropy of the head's logits `x @ weight.T` (x [N, d], weight [V, d]) against
    `targets` [N], over the targets that are not `IGNORE_INDEX`: the training loss.

    Equal, within rounding, to `F.cross_entropy(F.linear(x, weight).float(), targets,
    ignore_index=IGNORE_INDEX, reduction="sum")` and its gradients (tests/test_fused_loss.py), but
    only the rows with a real target reach the head, and their logits are made `LOGIT_BLOCK_BYTES` at
    a time: each block's softmax, loss and gradient are taken while it is in cache, instead of four
    passes over the whole [N, V] logits from memory (forward, log-softmax, its backward, the head's
    backward). Under autocast (bf16 training) it is that plain expression, so those runs compute
    exactly what they computed before this function existed.
    """
    if torch.is_autocast_enabled(x.device.type) or x.dtype not in (torch.float32, torch.float64):
        logits = F.linear(x, weight).float()
        return F.cross_entropy(logits, targets, ignore_index=IGNORE_INDEX, reduction="sum")
    real = targets != IGNORE_INDEX
    grad = torch.is_grad_enabled()
    return _HeadCrossEntropy.apply(
        x[real], weight, targets[real], grad and x.requires_grad, grad and weight.requires_grad
    )


class _HeadCrossEntropy(torch.autograd.Function):
    """The summed loss of `head_cross_entropy` over rows that all carry a target.

    The loss is the last operation before backward, so its gradient (the softmax minus the one-hot
    target, through the head) is computed here in the forward pass, block by block, and backward only
    scales it by the incoming gradient: no block of logits is made twice or kept."""

    @staticmethod
    def forward(ctx, x, weight, targets, want_x: bool, want_weight: bool):
        rows, vocab = x.shape[0], weight.shape[0]
        block = max(MIN_BLOCK_ROWS, LOGIT_BLOCK_BYTES // (vocab * x.element_size()))
        grad_x = torch.empty_like(x) if want_x else None
        grad_weight = torch.zeros_like(weight) if want_weight else None
        losses = x.new_empty(rows, 1)
        buffer = x.new_empty(min(block, rows), vocab)
        minus_one = x.new_full((min(block, rows), 1), -1.0)
        for start in range(0, rows, block):
            end = min(start + block, rows)
            xs, ts = x[start:end], targets[start:end, None]
            logits = torch.mm(xs, weight.t(), out=buffer[: end - start])
            top = logits.amax(dim=1, keepdim=True)
            # log-sum-exp minus the target's logit, from the shifted logits: (top - picked) + log(sum)
            shift = top - logits.gather(1, ts)
            probs = logits.sub_(top).exp_()
            total = probs.sum(dim=1, keepdim=True)
            torch.add(shift, total.log(), out=losses[start:end])
            if grad_x is None and grad_weight is None:
                continue
            probs.div_(total).scatter_add_(1, ts, minus_one[: end - start])
            if grad_x is not None:
                torch.mm(probs, weight, out=grad_x[start:end])
            if grad_weight is not None:
                grad_weight.addmm_(probs.t(), xs)
        ctx.save_for_backward(grad_x, grad_weight)
        return losses.sum()

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad):
        grad_x, grad_weight = ctx.saved_tensors
        return (
            None if grad_x is None else grad_x * grad,
            None if grad_weight is None else grad_weight * grad,
            None,
            None,
            None,
        )


class TransformerLayer(nn.Module):
    """Attention then MLP, each a residual branch.

    `pre`:      x = x + attn(n1(x));       x = x + mlp(n2(x))
    `sandwich`: x = n2(x + attn(n1(x)));   x = n4(x + mlp(n3(x)))   (Huginn's placement: the
    residual stream leaves every branch normalised, so the recurrent state cannot grow with K).
    """

    def __init__(self, cfg) -> None:
        super().__init__()
        self.sandwich = cfg.norm == "sandwich"
        self.attn = CausalSelfAttention(cfg)
        self.mlp = MLP(cfg)
        n_norms = 4 if self.sandwich else 2
        self.norms = nn.ModuleList(RMSNorm(cfg.d_model, cfg.norm_eps) for _ in range(n_norms))

    def forward(
        self,
        x: torch.Tensor,
        rope: Rope,
        positions: torch.Tensor | None = None,
        cache: KVCache | None = None,
        mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """[B, T, d], or [P, d] at the True entries of `positions`: equal to forward(x)[positions], but
        the queries, projections and MLP run only there (a readout that needs a few positions). With
        `cache` instead, x holds positions cache.start.. and earlier positions' keys and values come
        from it. With `mask`, attention follows it instead of the causal rule."""
        n = self.norms
        attended = self.attn(n[0](x), rope, positions, cache, mask)
        if positions is not None:
            x = x[positions]
        if self.sandwich:
            x = n[1](x + attended)
            return n[3](x + self.mlp(n[2](x)))
        x = x + attended
        return x + self.mlp(n[1](x))

    def compile(self, *args, **kwargs) -> None:
        """`nn.Module.compile`, with the attention at selected positions left eager: its shapes depend
        on the data (nonzero, max), so inside a graph it would break the graph on every call. The
        exclusion is applied here rather than as a decorator because `torch.compiler.disable` imports
        torch._dynamo (over a second), which eager use never needs."""
        self.attn.attend_at = torch.compiler.disable(_attend_at)
        super().compile(*args, **kwargs)
