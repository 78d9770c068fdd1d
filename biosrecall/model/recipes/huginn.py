"""`huginn`: the recurrent-depth recipe of Huginn (Geiping et al. 2025, "Scaling up Test-Time Compute
with Latent Reasoning: A Recurrent Depth Approach", arXiv 2502.05171), from options this package has.

    biosrecall train --data D --out R --recipe huginn

Huginn's iteration is the baseline's, with its choices as model defaults (a run may still override
each one):

    e = prelude(x);  s_0 ~ N(0, sigma^2 I_{T x d}), sigma^2 = 2/5            (init_state = noise)
    s_i = block(W [s_{i-1}; e]),  W in R^{d x 2d}                            (injection = concat)
    block layers: x = n2(x + attn(n1(x))); x = n4(x + mlp(n3(x)))            (norm = sandwich)
    gradients through the last k = 8 iterations only                         (backprop_depth = 8)

The loss is the last depth's cross-entropy, as in the paper. Choices where Huginn differs or is not
public: the noise initial state is one seeded [T, d] draw shared by every sequence (not a fresh draw
per call), so a sequence's output never depends on its batch-mates or on the call; Huginn samples K
per update from a log-normal Poisson, which here is the run's schedule (`--schedule`), not the recipe.
"""

try:  # inside an exported model folder, beside its copy of the base
    from .recipe_base import Recipe
except ImportError:
    from biosrecall.model.recipes.base import Recipe


class Huginn(Recipe):
    name = "huginn"
    model_defaults = {"injection": "concat", "norm": "sandwich", "init_state": "noise", "backprop_depth": 8}


RECIPE = Huginn()
