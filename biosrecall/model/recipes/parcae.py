"""`parcae`: the loop as a stable linear dynamical system plus the block's residual (Prairie et al.
2026, "Parcae", arXiv 2604.12946; reference code sandyresearch/parcae, read, not copied).

    biosrecall train --data D --out R --recipe parcae

With e = RMSNorm(prelude(x)) and s_0 the model's initial state (zeros, or the seeded noise draw):

    u_t     = A_bar s_t + B_bar e
    s_{t+1} = block(u_t) = u_t + R(u_t)              (R: the block's residual branches)
    A_bar   = exp(Delta A),  A = -exp(log A)         (diagonal, so 0 < A_bar < 1: rho(A_bar) < 1)
    B_bar   = Delta B,       Delta = softplus(delta)  (a learned step per channel)

So the linear part of the recurrence contracts by construction, whatever the weights, and e enters
every iteration through B_bar (computed once per call: B_bar e does not change with t).

Choices, following the reference code where it is public:
- Diagonal injection (the authors' default `injection_type="diagonal"`): log A, delta in R^d, B in
  R^{d x d}; B_bar e = Delta * (e B^T). Initialisation as theirs: log A = 0 (A = -1), Delta so that
  A_bar = sqrt(1/5) in every channel, B = I. As theirs, log A, delta and B take no weight decay (decay
  would pull B away from the identity and Delta towards softplus(0) for no modelling reason).
- e is RMS-normalised with its own gain (their `prelude_norm=True` at every size they train).
- A_bar s + B_bar e is formed in fp32 and rounded once to the state's dtype. Under bf16 autocast the
  state is the fp32 residual stream, so A_bar < 1 holds to fp32 precision; a model cast whole to bf16
  keeps 8 significant bits per iteration, and there a channel with A_bar above about 0.996 rounds back
  to its old value (a limit of the format, not of the recipe).
- The state entering an iteration is not normalised: the block's own (pre-norm or sandwich) layers
  read it, and `state_norm` reads out as in every recipe. Where this departs from their code: there is
  no output map C (their identity-initialised Linear between the loop and the coda), since the readout
  is the host's, shared by every recipe; s_0 is the host's initial state (zeros, or one seeded draw),
  not a fresh random draw per call, so an output never depends on the call.
- The model config's `injection` must stay `none`: this recipe replaces the adapter.

FLOPs: e B^T is 2 d^2 per token once per call; A_bar s and the scaling are element-wise (counted 0,
like norms). Parameters: d^2 + 3 d.
"""

import math

try:  # inside an exported model folder, beside its copy of the base
    from .recipe_base import Recipe, torch_modules
except ImportError:
    from biosrecall.model.recipes.base import Recipe, torch_modules

INITIAL_DECAY = math.sqrt(1 / 5)
"""A_bar of every channel at initialisation (the reference code's default `ssm_decay`)."""


class Parcae(Recipe):
    name = "parcae"
    model_defaults = {"injection": "none"}

    def check(self, config):
        if config.injection != "none":
            return f"injection must be none (Parcae injects e through B_bar), got {config.injection!r}"
        return None

    def build(self, model, config):
        torch, nn, _ = torch_modules()
        d = config.d_model
        model.parcae_log_a = nn.Parameter(torch.zeros(d))
        model.parcae_delta = nn.Parameter(torch.zeros(d))
        model.parcae_b = nn.Linear(d, d, bias=False)
        model.parcae_b.weight.no_weight_decay = True  # read by the optimizer's grouping
        model.parcae_e_gain = nn.Parameter(torch.ones(d))

    def reset_parameters(self, model, config):
        torch, _, _ = torch_modules()
        target = -math.log(INITIAL_DECAY)  # Delta at A = -1 that gives exp(-Delta) = INITIAL_DECAY
        with torch.no_grad():
            model.parcae_log_a.zero_()
            model.parcae_delta.fill_(target + math.log(-math.expm1(-target)))  # softplus^-1(target)
            model.parcae_b.weight.copy_(torch.eye(config.d_model))
            model.parcae_e_gain.fill_(1.0)

    def begin(self, model, x, noise):
        torch, _, F = torch_modules()
        e = F.rms_norm(x, (x.shape[-1],), model.parcae_e_gain.to(x.dtype), model.config.norm_eps)
        step = F.softplus(model.parcae_delta).to(x.dtype)
        state = torch.zeros_like(x) if noise is None else noise.expand_as(x)
        return step * model.parcae_b(e), state

    def step(self, model, state, inject, block, index, depth):
        carried = self.transition(model) * state.float() + inject.float()  # fp32: A_bar stays < 1
        return block(carried.to(state.dtype))

    def transition(self, model):
        """A_bar per channel, in fp32 (each in [0, 1): exp of a negative number)."""
        torch, _, F = torch_modules()
        return torch.exp(-F.softplus(model.parcae_delta.float()) * torch.exp(model.parcae_log_a.float()))

    def injection_flops(self, config):
        return 2 * config.d_model**2

    def iteration_flops(self, config):
        return 0

    def injects_every_iteration(self, config):
        return True

    def parameter_count(self, config):
        return config.d_model**2 + 3 * config.d_model


RECIPE = Parcae()
