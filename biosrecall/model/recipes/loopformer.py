"""`loopformer`: every iteration told its normalised time and step size, and a shortcut-consistency
loss (Jeddi et al., ICLR 2026, "LoopFormer", arXiv 2602.11451; reference code armenjeddi/loopformer,
read, not copied).

    biosrecall train --data D --out R --recipe loopformer

A call of K iterations is a trajectory from t = 0 to 1 in steps of dt = 1/K; iteration i is at
t_i = (i - 1)/K. It is told (t_i, dt) through a conditioning vector and a modulation initialised at
zero (adaLN-style):

    c_i = MLP_t(phi(t_i)) + MLP_dt(phi(dt)),   phi(x) = [cos(1000 x w_j), sin(1000 x w_j)]_j,
          w_j = 10000^(-j/F), j < F = 16
    s_i = block(u_i (1 + gamma(c_i)) + beta(c_i)),   u_i = inject(s_{i-1}, e)  (the baseline's)

gamma and beta one Linear(d, 2d) initialised at zero, so an untrained model is the baseline (the
authors' adaLN-zero instead zero-gates each layer's residual branches, an identity block at init).
phi feeds 1000 t to F = 16 frequencies, as DiT feeds its timesteps in [0, 1000]; the authors feed t in
[0, 1] to 256 frequencies, which at F = 16 would leave every angle under 1 radian and the steps of a
deep call nearly indistinguishable. Training at sampled depth K (the full route: the run's schedule
draws it, where the authors' full route is always their L iterations) adds a shorter route of
M = floor(K/2) steps (dt = 1/M) from the same input, and minimises

    L = CE(full) + 0.1 CE(short) + 0.1 sum_tokens mean_d (h_short - stopgrad(h_full))^2

with h the final hidden state (coda and final norm; the gap taken in fp32) and padding (targets of
-100) left out of both. The weights 0.1 are the authors'. Choices where this differs from their code:
the conditioning modulates the block's input once per iteration, not every layer's norms, so the
shared layers stay the host's (and the cached decoder and the export need nothing new); the short
route has a fixed length floor(K/2) with equal steps, not a random length with random steps, so an
update's loss is a function of (weights, batch, K) and its FLOPs are known before it runs (one route
of M more: about 1.5x, as the authors report); at K = 1 there is no shorter route.
The state depends on K, so a pass reads one depth (`prefix_consistent` False) and the cached decoder
conditions on its max depth. FLOPs: the conditioning MLPs run on one vector per iteration, not per
token (under 2% of an iteration at bios-tiny, 0 in the per-token account).
"""

import math

try:  # inside an exported model folder, beside its copy of the base
    from .recipe_base import Recipe, torch_modules
except ImportError:
    from biosrecall.model.recipes.base import Recipe, torch_modules

FREQUENCIES = 16
CONSISTENCY_WEIGHT = SHORT_WEIGHT = 0.1
IGNORE_INDEX = -100


class LoopFormer(Recipe):
    name = "loopformer"
    prefix_consistent = False

    def build(self, model, config):
        super().build(model, config)
        _, nn, _ = torch_modules()
        d = config.d_model
        for name in ("loop_time", "loop_step"):
            setattr(model, name, nn.Sequential(nn.Linear(2 * FREQUENCIES, d), nn.SiLU(), nn.Linear(d, d)))
        model.loop_modulation = nn.Linear(d, 2 * d)

    def reset_parameters(self, model, config):
        torch, _, _ = torch_modules()
        with torch.no_grad():
            for mlp in (model.loop_time, model.loop_step):
                mlp[0].bias.zero_()
                mlp[2].bias.zero_()
            model.loop_modulation.weight.zero_()
            model.loop_modulation.bias.zero_()

    def conditioning(self, model, index, depth, like):
        """(gamma, beta) [d] each, for iteration `index` of a call of `depth` iterations."""
        torch, _, F = torch_modules()
        weight = model.loop_modulation.weight
        scales = torch.exp(-math.log(10000.0) * torch.arange(FREQUENCIES, dtype=torch.float32) / FREQUENCIES)

        def phi(value):
            angles = 1000.0 * value * scales
            return torch.cat([torch.cos(angles), torch.sin(angles)]).to(
                device=weight.device, dtype=weight.dtype
            )

        c = model.loop_time(phi((index - 1) / depth)) + model.loop_step(phi(1.0 / depth))
        gamma, beta = model.loop_modulation(F.silu(c)).to(like.dtype).chunk(2)
        return gamma, beta

    def step(self, model, state, inject, block, index, depth):
        gamma, beta = self.conditioning(model, index, depth, state)
        return super().step(model, state, inject, lambda u: block(u * (1 + gamma) + beta), index, depth)

    def loss(self, model, tokens, depth, targets):
        full = self.final_hidden(model, tokens, depth)
        loss = model.head_loss(full, targets)
        if depth < 2:
            return loss
        short = self.final_hidden(model, tokens, depth // 2)
        real = targets != IGNORE_INDEX
        gap = (short[real].float() - full[real].detach().float()).pow(2).mean(dim=-1).sum()
        return loss + SHORT_WEIGHT * model.head_loss(short, targets) + CONSISTENCY_WEIGHT * gap

    def parameter_count(self, config):
        d = config.d_model
        mlp = 2 * FREQUENCIES * d + d + d * d + d
        return super().parameter_count(config) + 2 * mlp + 2 * d * d + 2 * d

    def train_flops(self, config, depth, grad_iters, cost):
        return cost.route(depth) + (cost.route(depth // 2) if depth >= 2 else 0)


RECIPE = LoopFormer()
