"""An outside recipe in one file: a learned, per-channel gate on how much of e enters each iteration.

    biosrecall train --data data/bios --out runs/mine --recipe-module examples/my_recipe.py --recipe my-recipe

The worked example of docs/guides/add-a-recipe.md. Its iteration:

    s_i = block(s_{i-1} + sigmoid(g) * e),   g in R^d learned, initialised at 0 (half of e enters)

It overrides only what differs from `Recipe` (the baseline): `build` adds g where the adapter would be,
`reset_parameters` initialises it, `begin` and `step` say how e enters, and the FLOP and parameter
hooks say what that costs (element-wise only: no matmul, d parameters). The objective is inherited: the
cross-entropy at the sampled depth. The import below works both here and inside an exported model
folder, where this file ships as `recipe.py` beside `recipe_base.py`.
"""

try:  # inside an exported model folder, beside its copy of the base
    from .recipe_base import Recipe, torch_modules
except ImportError:
    from biosrecall.model.recipes.base import Recipe, torch_modules


class GatedAdd(Recipe):
    name = "my-recipe"

    def build(self, model, config):
        torch, nn, _ = torch_modules()
        model.my_gate = nn.Parameter(torch.zeros(config.d_model))

    def reset_parameters(self, model, config):
        torch, _, _ = torch_modules()
        with torch.no_grad():
            model.my_gate.zero_()

    def begin(self, model, x, noise):
        torch, _, _ = torch_modules()
        state = torch.zeros_like(x) if noise is None else noise.expand_as(x)
        return x, state

    def step(self, model, state, inject, block, index, depth):
        torch, _, _ = torch_modules()
        return block(state + torch.sigmoid(model.my_gate).to(state.dtype) * inject)

    def injection_flops(self, config):
        return 0

    def iteration_flops(self, config):
        return 0

    def injects_every_iteration(self, config):
        return True

    def parameter_count(self, config):
        return config.d_model


RECIPE = GatedAdd()
