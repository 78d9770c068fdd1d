"""`baseline`: today's loop, bit for bit (the default recipe).

    biosrecall train --data D --out R --recipe baseline     # the same as leaving --recipe out

The middle-loop transformer of the paper (Geiping et al.'s recurrent-depth design with the concat
adapter of Huginn as one injection choice): e = prelude(embed(x)); s_0 = zeros or a seeded noise draw;

    s_i = block(inject(s_{i-1}, e)),   inject = s W_s^T + e W_e^T (concat) | s + e (add) | s (none)

for i = 1..K, read out by head(final_norm(coda(state_norm(s_K)))); the loss is the cross-entropy at
the sampled depth K only. Everything is `base.Recipe`'s default; this file only names it. The same
config trains to the same weights as before recipes existed (tests/test_recipe_baseline_golden.py).
"""

try:  # inside an exported model folder, beside its copy of the base
    from .recipe_base import Recipe
except ImportError:
    from biosrecall.model.recipes.base import Recipe


class Baseline(Recipe):
    name = "baseline"


RECIPE = Baseline()
