"""What one iteration of the loop computes: the `Recipe` contract, and today's loop as its default.

    from biosrecall.model.recipes.base import Recipe
    class Mine(Recipe):
        name = "mine"
        def step(self, model, state, inject, block, index, depth):
            return block(state + inject)      # s_i from s_{i-1}; block(x) runs the shared layers
    RECIPE = Mine()

This file is the only place that says what an iteration is. Every host calls it: biosrecall's
`LoopedTransformer` (forward, forward_all_depths, activation checkpointing, compiled layers), the
KV-cached decoder (`model/decode.py`) and the Hugging Face model of an export, which ships a copy of
this file (as `recipe_base.py`) and of the recipe's own file (as `recipe.py`). So it imports nothing
from biosrecall and torch only inside methods (the FLOP account reads a recipe without torch).

A host calls, per forward pass of T tokens with prelude output x [B, T, d]:

    inject, state = recipe.begin(model, x, noise)           # noise: the [T, d] initial state or None
    for i in 1..K: state = recipe.step(model, state, inject, block, i, K)
    logits = head(final_norm(coda(state_norm(state))))      # the host's readout

`block(x)` applies the host's shared block layers (with its KV cache, mask or RoPE). `model` is the
host; a recipe reads `model.config` (the ModelConfig fields) and the modules its `build` added.
`index` is 1-based; `depth` is the call's total K (the decoder's max depth). A recipe whose state at
iteration i depends on K sets `prefix_consistent = False`; the host then runs a pass per depth where
it would read several depths from one.

The default is today's loop, s_i = block(inject(s_{i-1}, e)) with the injection `config.injection`:
`concat` (Huginn's adapter W [d, 2d], applied as s W_s^T + e W_e^T, e W_e^T once per call), `add`
(s + e) or `none` (e is the initial state). Its FLOPs: 2 d^2 per token once per call and 2 d^2 per
iteration for `concat`, nothing otherwise.

The training objective (`loss`) is the summed cross-entropy of the last depth; a recipe may return
another summed loss over depths (`model.gradient_states` yields every gradient-carrying state) and
then states its training FLOPs in `train_flops`.
"""

from __future__ import annotations

import re


def torch_modules():
    """(torch, torch.nn, torch.nn.functional), imported when a recipe first computes something."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    return torch, nn, F


class Recipe:
    """A looped-model recipe: how e enters, what each iteration is told, extra parameters, and the
    training objective over depths. Subclasses override what they change."""

    name = "baseline"
    """The registry name (`train --recipe NAME`): lower-case letters, digits and dashes."""
    model_defaults: dict = {}
    """ModelConfig fields this recipe sets unless the run sets them itself."""
    prefix_consistent = True
    """The state after i iterations is the same whatever the call's total depth K."""
    exit_gate = False
    """The recipe trains an exit gate (`gate(model, state)`) that serving reads."""

    def check(self, config) -> str | None:
        """The rule a model config breaks for this recipe (one phrase), or None."""
        return None

    # ---- architecture -----------------------------------------------------------------------------

    def build(self, model, config) -> None:
        """Add this recipe's modules to `model`, in place of the adapter (registration order fixes
        the seeded initialisation, so the default builds exactly what the model always had)."""
        _, nn, _ = torch_modules()
        d = config.d_model
        model.adapter = nn.Linear(2 * d, d, bias=False) if config.injection == "concat" else None

    def reset_parameters(self, model, config) -> None:
        """Initialise parameters that are not Linear, Embedding or RMSNorm weights (the host does those)."""

    def begin(self, model, x, noise):
        """(injected term, s_0) from the prelude output x [B, T, d]; `noise` is the [T, d] (or [B, T,
        d]) initial-state noise, or None for zeros."""
        torch, _, F = torch_modules()
        injection = model.config.injection
        if injection == "none":
            return None, x if noise is None else x + noise
        state = torch.zeros_like(x) if noise is None else noise.expand_as(x)
        if injection == "add":
            return x, state
        return F.linear(x, model.adapter.weight[:, model.config.d_model :]), state

    def step(self, model, state, inject, block, index: int, depth: int):
        """s_index from s_{index-1}: the block on the state with e injected."""
        torch, _, _ = torch_modules()
        injection = model.config.injection
        if injection == "concat":
            w_state = model.adapter.weight[:, : model.config.d_model]
            x = torch.addmm(inject.flatten(0, 1), state.flatten(0, 1), w_state.t()).view_as(inject)
        elif injection == "add":
            x = state + inject
        else:
            x = state
        return block(x)

    def gate(self, model, state):
        """The exit probability lambda [...] of each position's state [..., d] (`exit_gate` recipes)."""
        raise NotImplementedError(f"recipe {self.name} trains no exit gate")

    # ---- objective --------------------------------------------------------------------------------

    def loss(self, model, tokens, depth: int, targets):
        """The summed training loss of a batch at depth K: the last depth's cross-entropy."""
        return model.head_loss(self.final_hidden(model, tokens, depth), targets)

    def final_hidden(self, model, tokens, depth: int):
        """What the head reads after a `depth`-iteration call on `tokens` (coda and final norm)."""
        # gradient_states yields every depth up to `depth`; only the last one reaches the head.
        *_, (_, state, rope) = model.gradient_states(tokens, depth)
        return model.final_hidden(state, rope)

    # ---- FLOPs and parameters (per token, matmuls only, 2 FLOPs per multiply-add) -----------------

    def injection_flops(self, config) -> int:
        """Forward FLOPs of this recipe's own matmuls once per call (before the loop)."""
        return 2 * config.d_model**2 if config.injection == "concat" else 0

    def iteration_flops(self, config) -> int:
        """Forward FLOPs of this recipe's own matmuls per iteration (besides the block's layers)."""
        return 2 * config.d_model**2 if config.injection == "concat" else 0

    def injects_every_iteration(self, config) -> bool:
        """e reaches every iteration (so the prelude gets a gradient even under truncated backprop)."""
        return config.injection != "none"

    def parameter_count(self, config) -> int:
        """Parameters this recipe adds to the prelude, block, coda and head."""
        return 2 * config.d_model**2 if config.injection == "concat" else 0

    def train_flops(self, config, depth: int, grad_iters: int, cost) -> float:
        """Forward + backward FLOPs per token of one update at depth K. `cost` prices the parts:
        `cost.route(K)` one pass at depth K with one readout and its backward (the default);
        `cost.readout` one more readout's forward and backward (coda + head, gradient into the state)."""
        return cost.route(depth)


def check_recipe_name(name) -> str | None:
    """The rule a recipe name breaks, or None."""
    if not isinstance(name, str) or not re.fullmatch(r"[a-z][a-z0-9-]{0,63}", name):
        return "a recipe name is 1 to 64 lower-case letters, digits and dashes, starting with a letter"
    return None
