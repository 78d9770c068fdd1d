"""The one modeled-FLOP account: forward and training FLOPs per token, and parameter counts.

    bd = forward_flops_per_token(cfg, seq_len=2048)   # FlopBreakdown, per token, by component
    train_flops_per_token(cfg, depth=4)               # one token of an update at K = 4
    update_flops(cfg, depth=4, tokens=524_288)        # a whole update
    param_counts(cfg)                                 # parameters by component
    recompute_flops_per_token(cfg, depth=16)          # extra, with activation checkpointing
    serving_flops(cfg, length=15, depth=4, checked=2, readouts=4)  # one query, read out per iteration
    serving_flops(cfg, 15, 4, 2, gate_checks=3)       # one query under the learned exit gate
    readout_flops(cfg, positions=15, checked=2)       # one readout, the head at 2 of 15 positions
    match_ratios(get_preset("bios-cpu-std-flops"), get_preset("bios-cpu"))  # baseline / looped

Every other module (planner, trainer, `biosrecall flops`, benchmarks) asks here; nothing else
multiplies parameter counts by 2 or 6.

Formula. Only matmuls are counted, 2 FLOPs per multiply-add, exactly the ones `LoopedTransformer`
makes (norms, RoPE, activations, softmax and the embedding lookup count 0). Forward, per token, with
d = d_model, m = d_mlp, V = vocab, T = sequence length:

    layer      = 8 d^2 (QKV + output projection) + 6 d m (SwiGLU; 4 d m for GELU) + 4 T d (attention)
    prelude    = n_prelude x layer
    injection  = the recipe's own matmuls once per call (`Recipe.injection_flops`; baseline's concat
                 adapter: 2 d^2, its prelude-output half)
    adapter    = the recipe's own matmuls per iteration (`Recipe.iteration_flops`; concat: 2 d^2)
    block      = n_block x layer per iteration
    coda       = n_coda x layer
    head       = 2 d V
    forward(K) = prelude + injection + K (adapter + block) + coda + head

Attention scores are counted over the full T x T square, as `torch.utils.flop_counter` counts SDPA
(causal masking is ignored there too). Backward costs 2x forward for a matmul whose input carries a
gradient, 1x when only the weight gradient is needed, and 2.5x for SDPA (5 batched matmuls against
2). An update at depth K with backprop depth k (None: k = K) runs the forward over all K iterations
and the backward over the last min(k, K) iterations, the coda and head, the injection and the
prelude (the prelude only when its output reaches a gradient-carrying iteration: always for a recipe
that injects e every iteration, `Recipe.injects_every_iteration`, only at k >= K otherwise). The state
entering the first gradient-carrying iteration never carries a gradient, so that iteration's adapter
half is charged 1x. That is one route; a recipe whose objective reads more depths or runs a second
route prices it from these parts (`Recipe.train_flops`: deep supervision and the exit gate add a
readout per depth, LoopFormer a shorter second route).

What the savings depend on. With full backprop an update's cost is linear in K: C(K) = A + K B, with
A the non-recurrent training FLOPs (prelude, injection, coda, head) and B those of one iteration (each
about 3x its forward FLOPs). A schedule with mean depth E[K] therefore costs (A + E[K] B) / (A + 8.5 B)
of uniform U{1..16} at the same number of updates, and fixed-first K0 for a fraction s of the updates
saves s (8.5 - K0) / (r + 8.5) with r = A / B. The saving is set by r alone: a wide vocabulary or long
context (head and attention FLOPs) or more prelude/coda layers raise r and shrink the saving; a deeper
recurrent block lowers r and raises it (r -> 0 gives the upper bound s (8.5 - K0) / 8.5). `lm-200m`
has r = 1.11 (1.12 in forward FLOPs, what `recurrent_ratio` returns), which gives the paper's
45.3 / 54.3 / 31.3% to within 0.2 points. Truncated backprop makes C(K) flatter beyond k and the savings smaller.

Serving (`serving_flops`, what the exit frontier charges a query). A query of T input tokens whose
last P are checked (bioS: the answer-predicting positions) runs the prelude and K iterations at all T
and then reads out: the coda at all T (causal attention: the checked positions need every earlier
position's coda keys and values), except that the last coda layer's attention scores, output
projection and MLP and the head run at the P checked positions only, exactly what the model computes
with `positions=` (its fused QKV projection still makes queries everywhere). A criterion that reads
logits pays one readout per iteration, a readout-free one its norms (4 d FLOPs per checked position
and check) and one readout; a fixed depth pays one.

Standard-transformer baselines (`match_ratios`; `report.py` prints it). A baseline runs
at its one depth (1); the looped preset is priced at `BASELINE_DEPTH` (K = 4), the depth a
flops-matched baseline stands in for, by the same account: match_ratios(bios-cpu-std-flops, bios-cpu)
gives parameters 1.507, non-embedding 1.902, training FLOPs 0.967 and forward FLOPs 0.964.

Activation checkpointing (`--activation-checkpointing`) reruns the forward of every gradient-carrying
iteration during backward: `recompute_flops_per_token` is that cost, a line of its own. It is not part
of `train_flops_per_token`, so budgets and the schedule comparison (modeled FLOPs) are the same with or
without it; the measured wall clock is where it shows.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from biosrecall.errors import BiosrecallError
from biosrecall.model.config import ModelConfig
from biosrecall.model.presets import BASELINE_DEPTH
from biosrecall.model.recipes import get_recipe
from biosrecall.numbers import check_count

MAX_TOKENS_PER_UPDATE = 2**26
"""Most tokens one update may take (67,108,864: 4 x the 16M-token batches of the largest LLM runs), so a
mistyped batch size is refused with this number instead of failing in the allocator."""


@dataclass(frozen=True)
class FlopBreakdown:
    """Forward FLOPs per token by component, for one sequence length."""

    seq_len: int
    """Sequence length T the attention terms were counted with."""
    prelude: int
    """All prelude layers (once per call)."""
    injection: int
    """The recipe's own matmuls once per call (baseline: the prelude-output half of the concat
    adapter; 0 for add/none)."""
    adapter: int
    """The recipe's own matmuls per block iteration (baseline: the concat adapter's state half)."""
    block: int
    """All layers of the recurrent block, per iteration."""
    coda: int
    """All coda layers (once per call)."""
    head: int
    """Output projection to the vocabulary (the embedding lookup costs 0)."""

    @property
    def iteration(self) -> int:
        """FLOPs of one block iteration (adapter + block)."""
        return self.adapter + self.block

    @property
    def non_recurrent(self) -> int:
        """FLOPs paid once per call whatever the depth (prelude, injection, coda, head)."""
        return self.prelude + self.injection + self.coda + self.head

    def at_depth(self, depth: float) -> float:
        """Forward FLOPs per token at depth K (a float K gives the linear interpolation)."""
        return self.non_recurrent + depth * self.iteration


def _seq_len(cfg: ModelConfig, seq_len: int | None) -> int:
    seq_len = cfg.context_length if seq_len is None else seq_len
    seq_len = check_count(seq_len, "sequence length")
    if seq_len > cfg.context_length:
        raise BiosrecallError(f"sequence length {seq_len} exceeds the model's context {cfg.context_length}")
    return int(seq_len)


def _layer(cfg: ModelConfig, seq_len: int) -> tuple[int, int]:
    """(matmul, attention-score) forward FLOPs per token of one transformer layer."""
    d, m = cfg.d_model, cfg.d_mlp
    mlp = 6 * d * m if cfg.mlp == "swiglu" else 4 * d * m
    return 8 * d * d + mlp, 4 * seq_len * d


def forward_flops_per_token(cfg: ModelConfig, seq_len: int | None = None) -> FlopBreakdown:
    """Forward FLOPs per token split by component; seq_len defaults to the context length."""
    seq_len = _seq_len(cfg, seq_len)
    layer = sum(_layer(cfg, seq_len))
    recipe = get_recipe(cfg.recipe)
    return FlopBreakdown(
        seq_len=seq_len,
        prelude=cfg.n_prelude * layer,
        injection=recipe.injection_flops(cfg),
        adapter=recipe.iteration_flops(cfg),
        block=cfg.n_block * layer,
        coda=cfg.n_coda * layer,
        head=2 * cfg.d_model * cfg.vocab_size,
    )


def _grad_depth(cfg: ModelConfig, depth: int, backprop_depth: int | None) -> int:
    depth = check_count(depth, "depth")
    keep = cfg.backprop_depth if backprop_depth is None else backprop_depth
    keep = None if keep is None else check_count(keep, "backprop depth")
    return int(depth) if keep is None else int(min(depth, keep))


def train_flops_per_token(
    cfg: ModelConfig, depth: int, seq_len: int | None = None, backprop_depth: int | None = None
) -> int:
    """Forward + backward FLOPs per token of an update at depth K. backprop_depth overrides the
    config's (None: use the config's, whose None means full backprop). The recipe's objective says
    which routes and readouts an update runs (`Recipe.train_flops`)."""
    costs = TrainingCosts(cfg, _seq_len(cfg, seq_len), backprop_depth)
    grad_iters = _grad_depth(cfg, depth, backprop_depth)
    return int(get_recipe(cfg.recipe).train_flops(cfg, int(depth), grad_iters, costs))


class TrainingCosts:
    """The parts a recipe's training FLOPs are made of, per token (see the module docstring)."""

    def __init__(self, cfg: ModelConfig, seq_len: int, backprop_depth: int | None) -> None:
        self.cfg, self.backprop_depth = cfg, backprop_depth
        self.fwd = forward_flops_per_token(cfg, seq_len)
        mm, att = _layer(cfg, seq_len)
        self.layer_bwd = 2 * mm + 5 * att // 2
        self.readout = self.fwd.coda + self.fwd.head + cfg.n_coda * self.layer_bwd + 2 * self.fwd.head
        # one readout (coda and head), forward and backward, its gradient flowing into the state

    def route(self, depth: int) -> int:
        """One pass at depth K with one readout: forward over K iterations, backward over the last
        min(k, K)."""
        cfg, fwd, layer_bwd = self.cfg, self.fwd, self.layer_bwd
        grad_iters = _grad_depth(cfg, depth, self.backprop_depth)
        bwd = 2 * fwd.head + cfg.n_coda * layer_bwd + grad_iters * cfg.n_block * layer_bwd
        bwd += (2 * grad_iters - 1) * fwd.adapter + 2 * fwd.injection
        if get_recipe(cfg.recipe).injects_every_iteration(cfg) or grad_iters >= depth:
            bwd += cfg.n_prelude * layer_bwd  # else the prelude output is cut off
        return fwd.non_recurrent + depth * fwd.iteration + bwd


def recompute_flops_per_token(
    cfg: ModelConfig, depth: int, seq_len: int | None = None, backprop_depth: int | None = None
) -> int:
    """Forward FLOPs per token that activation checkpointing adds to an update at depth K: each of the
    last min(k, K) iterations (those carrying gradients) runs its forward a second time in backward."""
    grad_iters = _grad_depth(cfg, depth, backprop_depth)
    return grad_iters * forward_flops_per_token(cfg, _seq_len(cfg, seq_len)).iteration


def update_flops(
    cfg: ModelConfig, depth: int, tokens: int, seq_len: int | None = None, backprop_depth: int | None = None
) -> int:
    """Training FLOPs of one update at depth K over `tokens` tokens (sequences of seq_len)."""
    return check_tokens_per_update(tokens) * train_flops_per_token(cfg, depth, seq_len, backprop_depth)


def check_tokens_per_update(tokens: int) -> int:
    """`tokens` as an int, refused unless 1 <= tokens <= MAX_TOKENS_PER_UPDATE."""
    tokens = check_count(tokens, "tokens per update")
    if tokens > MAX_TOKENS_PER_UPDATE:
        raise BiosrecallError(
            f"{tokens:,} tokens per update (batch size x sequence length) exceeds the limit of "
            f"{MAX_TOKENS_PER_UPDATE:,}"
        )
    return int(tokens)


def train_flops_table(
    cfg: ModelConfig, max_depth: int, seq_len: int | None = None, backprop_depth: int | None = None
) -> np.ndarray:
    """float64 array t with t[K] = training FLOPs per token at depth K for K = 1..max_depth (t[0] = 0)."""
    table = np.zeros(int(max_depth) + 1)
    for depth in range(1, int(max_depth) + 1):
        table[depth] = train_flops_per_token(cfg, depth, seq_len, backprop_depth)
    return table


def recurrent_ratio(cfg: ModelConfig, seq_len: int | None = None) -> float:
    """r = non-recurrent / per-iteration forward FLOPs, the one number the savings depend on."""
    fwd = forward_flops_per_token(cfg, seq_len)
    return fwd.non_recurrent / fwd.iteration


def param_counts(cfg: ModelConfig) -> dict[str, int]:
    """Parameters by component; `total` equals `LoopedTransformer.num_parameters()` and
    `non_embedding` leaves out the token/position embeddings and an untied head."""
    d, m = cfg.d_model, cfg.d_mlp
    norms_per_layer = (4 if cfg.norm == "sandwich" else 2) * d
    layer = 4 * d * d + (3 if cfg.mlp == "swiglu" else 2) * d * m + norms_per_layer
    counts = {
        "embedding": cfg.vocab_size * d + (cfg.context_length * d if cfg.position == "learned" else 0),
        "prelude": cfg.n_prelude * layer,
        "adapter": get_recipe(cfg.recipe).parameter_count(cfg),
        "block": cfg.n_block * layer,
        "coda": cfg.n_coda * layer,
        "final_norms": 2 * d,
        "head": 0 if cfg.tie_embeddings else cfg.vocab_size * d,
    }
    counts["total"] = sum(counts.values())
    counts["non_embedding"] = counts["total"] - counts["embedding"] - counts["head"]
    return counts


STATE_CHECK_FLOPS_PER_WIDTH = 4
"""FLOPs per model dimension of one readout-free check at one position: two squared norms of
d-vectors (the difference and the state), 2 FLOPs per multiply-add like the matmuls."""


GATE_CHECK_FLOPS_PER_WIDTH = 4
"""FLOPs per model dimension of one learned-gate check at one position (`biosrecall.eval.gate`):
LayerNorm then Linear(d, 1). The Linear is one dot product (2 d); the LayerNorm's variance is a sum
of squares (2 d); its mean and centring are additions, counted 0 like every norm, and its affine
weight and bias fold into the Linear's, so they cost nothing at serving."""


def readout_flops(cfg: ModelConfig, positions: int, checked: int) -> int:
    """Forward FLOPs of one readout (coda + head) of a query read at `checked` positions, the last of
    which is position `positions` - 1 (a query's input ends there). Causal attention makes the checked
    positions attend to the coda keys and values of every position before them, so every coda layer
    runs at all `positions`, except that the last one's attention scores, output projection and MLP,
    and the head, run only at the checked ones; its fused QKV projection still makes queries at every
    position, as the model does (`LoopedTransformer.final_hidden` with `positions=`)."""
    positions, checked = _seq_len(cfg, positions), int(checked)
    if not 1 <= checked <= positions:
        raise BiosrecallError(f"checked positions must be 1..{positions}, got {checked}")
    d = cfg.d_model
    mm, att = _layer(cfg, positions)
    head = 2 * d * cfg.vocab_size * checked
    if cfg.n_coda == 0:
        return head
    mlp = mm - 8 * d * d
    last = 6 * d * d * positions + checked * (att + 2 * d * d + mlp)
    return (cfg.n_coda - 1) * (mm + att) * positions + last + head


def serving_flops(
    cfg: ModelConfig,
    length: int,
    depth: int,
    checked: int,
    readouts: int = 1,
    state_checks: int = 0,
    gate_checks: int = 0,
) -> int:
    """Forward FLOPs of serving one query of `length` input tokens read at its last `checked`
    positions, to exit depth `depth`: the prelude and `depth` iterations at every position,
    `readouts` readouts (`readout_flops`: one for a fixed depth, one per checked iteration for a
    criterion that reads out, the last being the answer) and `state_checks` readout-free checks at
    each checked position (`STATE_CHECK_FLOPS_PER_WIDTH` x d each) and `gate_checks` learned-gate
    checks there (`GATE_CHECK_FLOPS_PER_WIDTH` x d each)."""
    fwd = forward_flops_per_token(cfg, _seq_len(cfg, length))
    depth = check_count(depth, "depth")
    recurrent = length * (fwd.prelude + fwd.injection + int(depth) * fwd.iteration)
    per_position = (
        int(state_checks) * STATE_CHECK_FLOPS_PER_WIDTH + int(gate_checks) * GATE_CHECK_FLOPS_PER_WIDTH
    )
    checks = per_position * int(checked) * cfg.d_model
    return recurrent + int(readouts) * readout_flops(cfg, length, checked) + checks


def match_ratios(
    baseline: ModelConfig, looped: ModelConfig, depth: int = BASELINE_DEPTH, seq_len: int | None = None
) -> dict[str, float]:
    """Baseline / looped: parameters (all and non-embedding), and training and forward FLOPs per token
    of the baseline at its one depth against the looped model at `depth` (attention at `seq_len`,
    default each model's context)."""
    mine, theirs = param_counts(baseline), param_counts(looped)
    train = train_flops_per_token(baseline, 1, seq_len), train_flops_per_token(looped, depth, seq_len)
    forward = (
        forward_flops_per_token(baseline, seq_len).at_depth(1),
        forward_flops_per_token(looped, seq_len).at_depth(depth),
    )
    return {
        "parameters": mine["total"] / theirs["total"],
        "non_embedding": mine["non_embedding"] / theirs["non_embedding"],
        "train_flops": train[0] / train[1],
        "forward_flops": forward[0] / forward[1],
    }
