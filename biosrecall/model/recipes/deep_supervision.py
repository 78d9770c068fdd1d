"""`deep-supervision`: the loss at every depth of the update, not only at the last.

    biosrecall train --data D --out R --recipe deep-supervision

Deep supervision (Lee et al. 2015, "Deeply-Supervised Nets", arXiv 1409.5185: a loss on every
intermediate layer's readout), applied to the iterations of the loop, whose states all share one
readout. The iteration is the baseline's. At sampled depth K the update reads out every
gradient-carrying state s_k and minimises

    L = (1 / |G|) sum_{k in G} CE(head(final_norm(coda(state_norm(s_k)))), y),

G = {1..K}, or the last `backprop_depth` iterations under truncated backprop (an iteration run
without gradients cannot be supervised). Every depth weighs the same, 1 / |G| (Lee et al. weigh
each companion loss by its own alpha and decay them over training; no such schedule is public for
loops, and equal weights favour no serving depth). The mean, not the sum, keeps the loss on the scale
of one cross-entropy, so a learning rate tuned for baseline still fits. Padding (targets of -100)
carries no loss at any depth (`head_loss`). Training costs K readouts instead of
one: `train_flops` adds |G| - 1 readouts (coda and head, forward and backward) to the baseline route.
"""

try:  # inside an exported model folder, beside its copy of the base
    from .recipe_base import Recipe
except ImportError:
    from biosrecall.model.recipes.base import Recipe


class DeepSupervision(Recipe):
    name = "deep-supervision"

    def loss(self, model, tokens, depth, targets):
        losses = [
            model.head_loss(model.final_hidden(state, rope), targets)
            for _, state, rope in model.gradient_states(tokens, depth)
        ]
        return sum(losses) / len(losses)

    def train_flops(self, config, depth, grad_iters, cost):
        return cost.route(depth) + (grad_iters - 1) * cost.readout


RECIPE = DeepSupervision()
