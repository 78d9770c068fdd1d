"""The middle-loop transformer: prelude once, one recurrent block K times, coda once, head.

    model = LoopedTransformer(get_preset("bios-tiny"))
    logits = model(tokens, depth=4)                          # [B, T, V]
    loss_sum = model(tokens, depth=4, targets=targets)       # training: the summed cross-entropy
    with torch.no_grad():
        for k, logits in model.forward_all_depths(tokens, range(1, 65)):
            ...                                              # one 64-iteration pass, a readout per k
    with model.observing_states(seen.append):                # each iteration's state, as the recipe made it
        model(tokens, depth=4)

Per call: x = prelude(embed(tokens)); (inject, s_0) = recipe.begin(x, noise); s_i =
recipe.step(s_{i-1}, inject, block) for i = 1..K; logits = head(final_norm(coda(state_norm(s_K)))).
What an iteration computes is the model's recipe (`ModelConfig.recipe`, `biosrecall.model.recipes`;
the default, baseline, is s_i = block(inject(s_{i-1}, e))), and nothing here repeats it. The initial
state is deterministic (zeros or one seeded [T, d] draw shared by every sequence), so s_k does not
depend on batch-mates or on how many iterations follow, and a whole serving-depth curve is one pass
plus a readout per depth (a pass per depth for a recipe whose iterations are told K).

With `targets`, the recipe's training loss (baseline: the last depth's cross-entropy, the head and the
loss as one step, `layers.head_cross_entropy`, without the [B, T, V] logits). Every readout that
needs logits (recall, exits, decoding) gets them from the same final state as before, bit for bit.

For training on accelerators: `model.compile_layers()` compiles each transformer layer and leaves the
depth loop in Python, so every K reuses the same few graphs (compiling the whole model would unroll
the loop into one graph per K); `model.activation_checkpointing = True` keeps only each iteration's
input state for backward and recomputes the iteration there (memory flat in K, gradients unchanged).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from biosrecall.errors import BiosrecallError
from biosrecall.model.config import ModelConfig
from biosrecall.model.layers import KVCache, RMSNorm, Rope, TransformerLayer, head_cross_entropy, rope_tables
from biosrecall.model.recipes import check_config, get_recipe
from biosrecall.numbers import check_count

Caches = list[KVCache] | None
"""One `KVCache` per layer of a stack (prelude, one iteration of the block, coda), or None."""


class LoopedTransformer(nn.Module):
    """Decoder-only looped transformer whose depth (block iterations K) is chosen per call."""

    activation_checkpointing: bool = False
    """Recompute each gradient-carrying block iteration in backward instead of storing its activations
    (a training setting, not part of the function: outputs and gradients are the same either way)."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        d = config.d_model
        self.embed = nn.Embedding(config.vocab_size, d)
        self.pos_embed = nn.Embedding(config.context_length, d) if config.position == "learned" else None
        self.prelude = nn.ModuleList(TransformerLayer(config) for _ in range(config.n_prelude))
        check_config(config)
        self.recipe = get_recipe(config.recipe)
        self.recipe.build(self, config)  # where the adapter always was: the seeded init is unchanged
        self.block = nn.ModuleList(TransformerLayer(config) for _ in range(config.n_block))
        self.coda = nn.ModuleList(TransformerLayer(config) for _ in range(config.n_coda))
        self.state_norm = RMSNorm(d, config.norm_eps)
        self.final_norm = RMSNorm(d, config.norm_eps)
        self.head = None if config.tie_embeddings else nn.Linear(d, config.vocab_size, bias=False)
        if config.position == "rope":
            self.register_buffer("rope_table", torch.stack(rope_tables(config), dim=-1), persistent=False)
        self._init_states: dict[tuple[torch.device, torch.dtype], torch.Tensor] = {}
        self._state_observers: list[Callable[[torch.Tensor], None]] = []
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Small init (std sqrt(2 / (5 fan_in))); residual output projections are further divided by
        sqrt(2 x effective depth) so the state stays O(1) when the block is unrolled many times."""
        cfg = self.config
        effective_depth = cfg.n_prelude + cfg.n_coda + cfg.n_block * cfg.init_mean_depth
        residual_scale = 1.0 / math.sqrt(2.0 * effective_depth)
        for name, module in self.named_modules():
            if isinstance(module, nn.Linear):
                std = math.sqrt(2.0 / (5.0 * module.in_features))
                if name.endswith(("attn.proj", "mlp.w_out")):
                    std *= residual_scale
                nn.init.normal_(module.weight, std=std)
            elif isinstance(module, nn.Embedding):
                nn.init.normal_(module.weight, std=math.sqrt(2.0 / (5.0 * cfg.d_model)))
            elif isinstance(module, RMSNorm):
                nn.init.ones_(module.weight)
        self.recipe.reset_parameters(self, cfg)

    def compile_layers(self, **options) -> None:
        """Compile every prelude, block and coda layer in place (`nn.Module.compile`, `options` go to
        torch.compile); the depth loop stays in Python. The layers share one forward, so they share
        its graphs too: one per grad mode, readout kind and input shape, whatever the depth."""
        for layer in (*self.prelude, *self.block, *self.coda):
            layer.compile(**options)

    def num_parameters(self) -> int:
        """Trainable parameters (a tied head counted once); `compute.flops.param_counts` splits them."""
        return sum(p.numel() for p in self.parameters())

    def forward(self, tokens: torch.Tensor, depth: int, targets: torch.Tensor | None = None) -> torch.Tensor:
        """Logits [B, T, V] after `depth` block iterations; with `targets` (int [B, T], `IGNORE_INDEX`
        where a position carries no loss) the recipe's summed training loss instead (`Recipe.loss`;
        baseline: the cross-entropy of those logits, without making them in full). With
        `backprop_depth` = k set and gradients enabled, the first depth - k iterations run under no_grad."""
        depth = check_count(depth, "depth")
        if targets is not None and targets.shape != tokens.shape:
            raise BiosrecallError(
                f"targets {tuple(targets.shape)} must be shaped like tokens {tuple(tokens.shape)}"
            )
        if targets is not None:
            return self.recipe.loss(self, tokens, depth, targets)
        *_, (_, state, rope) = self.gradient_states(tokens, depth)
        return self.head_logits(self.final_hidden(state, rope))

    def gradient_states(self, tokens: torch.Tensor, depth: int) -> Iterator[tuple[int, torch.Tensor, Rope]]:
        """Run `depth` iterations on `tokens`; yield (k, s_k, RoPE slices) for every iteration k that
        carries a gradient (all of them, or the last `backprop_depth` when gradients are on; the
        earlier ones run under no_grad). A recipe's training objective reads the depths from here."""
        rope, inject, state = self.start(tokens)
        keep = self.config.backprop_depth
        done = 0
        if keep is not None and depth > keep and torch.is_grad_enabled():
            with torch.no_grad():
                state = self._iterate(state, inject, depth - keep, rope, 0, depth)
            done = depth - keep
        for k in range(done + 1, depth + 1):
            state = self._iterate(state, inject, 1, rope, k - 1, depth)
            yield k, state, rope

    def head_loss(self, hidden: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """The summed cross-entropy of the head on `hidden` [B, T, d] against `targets` [B, T]
        (`layers.head_cross_entropy`: the logits are never made in full)."""
        return head_cross_entropy(hidden.flatten(0, 1), self._head_weight(), targets.flatten())

    def head_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Logits of the head on `hidden` [..., d]."""
        return nn.functional.linear(hidden, self._head_weight())

    def forward_all_depths(
        self, tokens: torch.Tensor, depths: Iterable[int], positions: torch.Tensor | None = None
    ) -> Iterator[tuple[int, torch.Tensor]]:
        """Yield (k, logits) for each requested depth, ascending, from one max(depths)-deep pass
        without gradients. Logits are [B, T, V], or [P, V] at the True entries of `positions`
        (a bool [B, T] mask: the last coda layer's queries and MLP and the head run only there)."""
        wanted = sorted({check_count(k, "depth") for k in depths})
        if not wanted:
            raise BiosrecallError("depths must name at least one depth")
        if positions is not None and (positions.dtype != torch.bool or positions.shape != tokens.shape):
            raise BiosrecallError(
                f"positions must be a bool mask shaped like tokens {tuple(tokens.shape)}, "
                f"got {positions.dtype} {tuple(positions.shape)}"
            )
        with torch.no_grad():
            rope, inject, start = self.start(tokens)
        state, done = start, 0
        for k in wanted:
            # no_grad is entered per step, never held across a yield, so the caller's mode is untouched
            with torch.no_grad():
                if self.recipe.prefix_consistent:
                    state = self._iterate(state, inject, k - done, rope, done, wanted[-1])
                else:  # each depth is its own trajectory (the recipe's iterations are told K)
                    state = self._iterate(start, inject, k, rope, 0, k)
                logits = self.head_logits(self.final_hidden(state, rope, positions))
            done = k
            yield k, logits

    @contextmanager
    def observing_states(self, observer: Callable[[torch.Tensor], None]) -> Iterator[None]:
        """While open, `observer(s_i)` is called with the state [B, T, d] after every iteration the
        model runs (forward, forward_all_depths), in order: what the recipe's step returned, so a
        state-reading exit criterion sees exactly the states the readout reads, whatever the recipe."""
        self._state_observers.append(observer)
        try:
            yield
        finally:
            self._state_observers.remove(observer)

    def initial_state(self, seq_len: int, device: torch.device, dtype: torch.dtype) -> torch.Tensor | None:
        """The [seq_len, d] noise initial state (None for zeros). Drawn once on the CPU from
        `init_state_seed` for the whole context, so any prefix sees the same rows on any device."""
        if self.config.init_state == "zeros":
            return None
        key = (torch.device(device), dtype)
        if key not in self._init_states:
            generator = torch.Generator().manual_seed(self.config.init_state_seed)
            shape = (self.config.context_length, self.config.d_model)
            noise = torch.randn(shape, generator=generator) * self.config.init_state_std
            self._init_states[key] = noise.to(device=device, dtype=dtype)
        return self._init_states[key][:seq_len]

    def start(
        self, tokens: torch.Tensor, start: int = 0, caches: Caches = None
    ) -> tuple[Rope, torch.Tensor | None, torch.Tensor]:
        """Embed `tokens` [B, T] sitting at positions start.. and run the prelude (each layer with its
        `KVCache` when `caches` is given: the cached decoder); return the RoPE slices, the injected
        term and s_0, as the recipe begins (`Recipe.begin`)."""
        seq_len = self._check_tokens(tokens)
        # RoPE rotations of positions start .. start + seq_len - 1 (None without RoPE)
        rope = self.rope_table[start : start + seq_len].float() if self.config.position == "rope" else None
        x = self.embed(tokens)
        if self.pos_embed is not None:
            x = x + self.pos_embed.weight[start : start + seq_len]
        for j, layer in enumerate(self.prelude):
            x = layer(x, rope, cache=None if caches is None else caches[j])
        noise = self.initial_state(start + seq_len, x.device, x.dtype)
        inject, state = self.recipe.begin(self, x, None if noise is None else noise[start:])
        return rope, inject, state

    def _iterate(
        self, state: torch.Tensor, inject, steps: int, rope: Rope, done: int, depth: int
    ) -> torch.Tensor:
        """Iterations done + 1 .. done + steps of a call of total depth `depth` (each a checkpoint
        with `activation_checkpointing` when gradients are on)."""
        recompute = self.activation_checkpointing and torch.is_grad_enabled()
        for index in range(done + 1, done + steps + 1):
            if recompute:
                state = checkpoint(self._block_step, state, inject, rope, index, depth, use_reentrant=False)
            else:
                state = self._block_step(state, inject, rope, index, depth)
            for observe in self._state_observers:
                observe(state)
        return state

    def _block_step(
        self, state: torch.Tensor, inject, rope: Rope, index: int, depth: int, caches: Caches = None
    ) -> torch.Tensor:
        """Iteration `index` of a call of total depth `depth`, as the recipe defines it
        (`recipes.base.Recipe.step`), its block layers with their `KVCache` of this iteration when
        `caches` is given (the cached decoder)."""
        block = functools.partial(self.run_block, rope=rope, caches=caches)
        return self.recipe.step(self, state, inject, block, index, depth)

    def run_block(self, x: torch.Tensor, rope: Rope, caches: Caches = None) -> torch.Tensor:
        """The shared block layers on x: what a recipe's `block(x)` does (each layer with its `KVCache`
        of this iteration when `caches` is given: the cached decoder)."""
        for j, layer in enumerate(self.block):
            x = layer(x, rope, cache=None if caches is None else caches[j])
        return x

    def _head_weight(self) -> torch.Tensor:
        return self.embed.weight if self.head is None else self.head.weight

    def final_hidden(
        self, state: torch.Tensor, rope: Rope, positions: torch.Tensor | None = None, caches: Caches = None
    ) -> torch.Tensor:
        """What the head reads from a recurrent state [B, T, d]: coda and final norm, [P, d] at the
        True entries of `positions` (the last coda layer needs keys and values from every position but
        queries only there, which makes a 64-depth recall sweep's 64 readouts a fraction of a full
        coda each), each coda layer with its `KVCache` when `caches` is given (the cached decoder)."""
        x = self.state_norm(state)
        last = len(self.coda) - 1
        for j, layer in enumerate(self.coda):
            x = layer(x, rope, positions if j == last else None, None if caches is None else caches[j])
        if last < 0 and positions is not None:
            x = x[positions]
        return self.final_norm(x)

    def _check_tokens(self, tokens: torch.Tensor) -> int:
        """The sequence length of `tokens`, refused unless an integer tensor [batch, seq] that fits the
        context (beyond it the position tables would end short)."""
        context = self.config.context_length
        integers = tokens.dim() == 2 and tokens.dtype in (torch.int64, torch.int32)
        if not integers or not 1 <= tokens.shape[-1] <= context:
            raise BiosrecallError(
                f"tokens must be an integer tensor [batch, seq] with seq in 1..{context} (context_length), "
                f"got {tokens.dtype} {tuple(tokens.shape)}"
            )
        return tokens.shape[1]
