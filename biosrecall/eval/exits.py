"""Exit criteria for adaptive-depth serving: when to stop iterating the recurrent block.

Each criterion is a small named object with one parameter, written on the command line as text:

    fixed:K      stop at depth K
    kl:eps       KL(p_k || p_{k-1}) between successive readouts is below eps (never at depth 1)
    stable:m     the argmax has stayed the same for m iterations (a change at depth k resets the count)
    entropy:h    the entropy (nats) of the readout is below h
    latent:eps   the recurrent state's relative change ||s_k - s_{k-1}|| / ||s_k|| is below eps (never at
                 depth 1; Huginn's latent-difference exit, default 0.03 there): no readout needed
    accel:eps    the relative second difference ||s_k - 2 s_{k-1} + s_{k-2}|| / ||s_k|| is below eps at
                 two iterations in a row (never before depth 4; the two-scale rule of arXiv 2509.23314):
                 no readout needed
    gate:delta   the learned exit gate of the run's checkpoint (`biosrecall gate train`,
                 `biosrecall.eval.gate`) at the threshold calibrated so that the recall lost against
                 the best fixed depth stays under delta (in (0, 1)) with the confidence it was fitted
                 at; parsed here as `Gate(delta)` and resolved against a run by `eval.gate.resolve_gates`
    cdf:q        Ouro's rule on the exit gate a recipe trains (`--recipe ouro-gate`): stop at the first
                 depth t where the exit CDF 1 - prod_{i<=t} (1 - lambda_i) reaches q (in (0, 1]); parsed
                 as `GateCdf(q)` and bound to a checkpoint's model by `eval.gate.resolve_gates`
    oracle       the smallest depth at which the answer is exact (depth 1 when none is): an upper
                 bound on what any criterion could achieve; it needs the answer, so it only scores

    criteria = parse_exits("kl:1e-3,stable:2,oracle")     # the one parser; a bare name is a sweep
    trail = LogitTrail()
    stats = trail.observe(logits)                          # after each iteration: StepStats per row
    criteria[0].holds(depth, stats)                        # bool per row
    judge = exit_judge(criteria[0])                        # for model.decode: logits [V] or [B, V]
                                                           # -> stop? (bool, or bool [B] per row)
    StateTrail().observe(state)                            # latent and accel of states [..., d]

What a criterion reads (`reads`): "logits" (kl, stable, entropy: a readout after every iteration),
"state" (latent, accel: the recurrent state only, so the one readout is at the exit depth; their
judge has `reads_state` set and is given the state [..., d] instead of logits), or None (fixed and
the oracle need no decision), or "gate" (the learned gate: its logit from the state, one LayerNorm
and Linear per checked position and iteration; its judge too is given the state).
`compute.flops.serving_flops` prices each accordingly.

A query (or a token) exits at the first depth where its criterion holds, and always at the max depth
(`check_max_depth`, default 64). For a whole query the statistics of its answer-predicting positions
are reduced so that a criterion holds only when it holds at every position: the largest KL,
entropy, latent and accel, the smallest unchanged count, and exact only when every position is.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

import numpy as np
import torch

from biosrecall.errors import BiosrecallError
from biosrecall.numbers import check_count, parse_float, parse_int

BASELINE = "fixed-depth"
"""The kind of the fixed-depth rows K = 1..max_depth of a serving frontier, against which criteria are
read (`biosrecall.eval.scoring`)."""
# A bare criterion name expands to this threshold sweep, strictest-last.
DEFAULT_SWEEPS = {
    "fixed": (1, 2, 4, 8, 16, 32, 64),
    "kl": (1e-1, 1e-2, 1e-3, 1e-4, 1e-5),
    "stable": (1, 2, 3, 4, 6, 8),
    "entropy": (1.0, 0.5, 0.2, 0.1, 0.05, 0.01),
    "latent": (0.1, 0.05, 0.03, 0.01, 0.003, 0.001),
    "accel": (0.1, 0.05, 0.03, 0.01, 0.003, 0.001),
    "gate": (0.2, 0.1, 0.05, 0.02, 0.01),  # delta: the recall loss allowed, strictest last
    "cdf": (0.3, 0.5, 0.7, 0.9),  # q: the exit probability reached, strictest last
}


@dataclass(frozen=True)
class StepStats:
    """What a criterion may look at after one iteration, one entry per row (a query or a token); a
    field is None when nothing computed it (the state fields without a `StateTrail`, for one)."""

    kl: torch.Tensor | np.ndarray | None = None  # KL(p_k || p_{k-1}) in nats; +inf at depth 1
    entropy: torch.Tensor | np.ndarray | None = None  # entropy of p_k in nats
    unchanged: torch.Tensor | np.ndarray | None = None  # iterations the argmax has not changed (0 at depth 1)
    exact: torch.Tensor | np.ndarray | None = None  # every answer position right (scoring only)
    latent: torch.Tensor | np.ndarray | None = None  # relative state change; +inf at depth 1
    accel: torch.Tensor | np.ndarray | None = None  # larger of the last two relative second differences
    gate: torch.Tensor | np.ndarray | None = None  # learned gate logit (smallest over a query's positions)


class LogitTrail:
    """Follows successive readouts of the same rows and yields their `StepStats` (exact left None)."""

    def __init__(self) -> None:
        self._log_probs: torch.Tensor | None = None
        self._argmax: torch.Tensor | None = None
        self._unchanged: torch.Tensor | None = None

    def observe(self, logits: torch.Tensor) -> StepStats:
        """Statistics of `logits` [..., V] against the previous call's (the first call is depth 1)."""
        log_probs = torch.log_softmax(logits.float(), dim=-1)
        probs = log_probs.exp()
        entropy = -(probs * log_probs).sum(-1)
        argmax = log_probs.argmax(-1)
        if self._log_probs is None:
            kl = torch.full_like(entropy, math.inf)
            unchanged = torch.zeros_like(argmax)
        else:
            kl = (probs * (log_probs - self._log_probs)).sum(-1).clamp_min(0.0)
            unchanged = torch.where(argmax == self._argmax, self._unchanged + 1, 0)
        self._log_probs, self._argmax, self._unchanged = log_probs, argmax, unchanged
        return StepStats(kl=kl, entropy=entropy, unchanged=unchanged)


class StateTrail:
    """Follows successive recurrent states of the same rows and yields their `StepStats` (latent and
    accel only). Norms are taken in at least float32, so a bf16 state does not round the change away."""

    def __init__(self) -> None:
        self._state: torch.Tensor | None = None
        self._step: torch.Tensor | None = None
        self._second: torch.Tensor | None = None

    def observe(self, state: torch.Tensor) -> StepStats:
        """Statistics of `state` [..., d] against the previous calls' (the first call is depth 1)."""
        state = state.to(torch.promote_types(state.dtype, torch.float32))
        scale = torch.linalg.vector_norm(state, dim=-1).clamp_min(torch.finfo(state.dtype).tiny)
        inf = torch.full_like(scale, math.inf)
        step = second = None
        if self._state is not None:
            step = state - self._state
        if step is not None and self._step is not None:
            second = torch.linalg.vector_norm(step - self._step, dim=-1) / scale
        latent = inf if step is None else torch.linalg.vector_norm(step, dim=-1) / scale
        # Below eps at two iterations in a row is the larger of the last two below eps.
        accel = inf if second is None or self._second is None else torch.maximum(second, self._second)
        self._state, self._step, self._second = state, step, second
        return StepStats(latent=latent, accel=accel)


class OneParameter:
    """A criterion whose one parameter is its first field: written `name:value` (its `spec`)."""

    @property
    def spec(self) -> str:
        value = getattr(self, fields(self)[0].name)
        return f"{self.name}:{value if isinstance(value, int) else format(value, 'g')}"


class Below(OneParameter):
    """A criterion that stops where the statistic of its name (`StepStats`) is below its parameter."""

    def holds(self, depth: int, stats: StepStats):
        return getattr(stats, self.name) < parameter_of(self)


@dataclass(frozen=True)
class Fixed(OneParameter):
    """Stop at depth K."""

    depth: int
    name = "fixed"
    reads = None

    def holds(self, depth: int, stats: StepStats):
        # depth may be a column of depths; adding it to a zeroed statistic broadcasts it to the rows
        return stats.unchanged * 0 + depth >= self.depth


@dataclass(frozen=True)
class KL(Below):
    """Stop when KL(p_k || p_{k-1}) < eps."""

    eps: float
    name = "kl"
    reads = "logits"


@dataclass(frozen=True)
class Stable(OneParameter):
    """Stop when the argmax has not changed for m iterations."""

    iterations: int
    name = "stable"
    reads = "logits"

    def holds(self, depth: int, stats: StepStats):
        return stats.unchanged >= self.iterations


@dataclass(frozen=True)
class Entropy(Below):
    """Stop when the readout's entropy is below h nats."""

    nats: float
    name = "entropy"
    reads = "logits"


@dataclass(frozen=True)
class Oracle:
    """Stop at the first exact depth; never realisable (it reads the answer), so an upper bound."""

    name = "oracle"
    spec = "oracle"
    reads = None

    def holds(self, depth: int, stats: StepStats):
        return stats.exact


@dataclass(frozen=True)
class Latent(Below):
    """Stop when the state's relative change ||s_k - s_{k-1}|| / ||s_k|| < eps (no readout)."""

    eps: float
    name = "latent"
    reads = "state"
    span = 2  # states one check compares: it is made from depth 2 on


@dataclass(frozen=True)
class Accel(Below):
    """Stop when the relative second difference of the state is below eps at two iterations in a row
    (no readout)."""

    eps: float
    name = "accel"
    reads = "state"
    span = 3  # a second difference compares three states: made from depth 3 on


class Unbound(OneParameter):
    """A criterion that reads a gate of one checkpoint: it decides nothing until it is bound to it
    (`biosrecall.eval.gate.resolve_gates`); `unbound` says so, for `check_servable`."""

    reads = "gate"


@dataclass(frozen=True)
class Gate(Unbound):
    """The learned exit gate at recall loss delta, before it is resolved against a run's fitted gate
    (`resolve_gates` turns it into a `GateExit`, which serves and scores)."""

    delta: float
    name = "gate"
    unbound = (
        "needs the run's fitted exit gate (`biosrecall gate train RUN`), resolved against the checkpoint "
        "it was fitted on"
    )


@dataclass(frozen=True)
class GateCdf(Unbound):
    """Ouro's exit rule at level q on the gate a recipe trains, before it is bound to a checkpoint's
    model (`resolve_gates` turns it into a `RecipeGateExit`)."""

    q: float
    name = "cdf"
    unbound = "reads a checkpoint's trained exit gate: resolve it against one first"


LEARNED = (Gate, GateCdf)
"""Criteria bound to a checkpoint (its fitted gate, or its recipe's trained gate) before they serve."""
Criterion = Fixed | KL | Stable | Entropy | Latent | Accel | Gate | GateCdf | Oracle


def parameter_of(criterion: Criterion) -> float:
    """The criterion's one parameter as a number (NaN for the oracle, which has none)."""
    return float(next(iter(vars(criterion).values()), math.nan))


def check_max_depth(max_depth: int) -> int:
    """The cap every criterion obeys; below 1 is refused."""
    return check_count(max_depth, "max depth")


def depth_cap(criterion: Criterion, max_depth: int) -> int:
    """The deepest a query can go under `criterion`: max_depth, or K for fixed:K when smaller."""
    # fixed:K stops at K; a resolved gate (`eval.gate.GateExit`) at its reference depth
    limit = criterion.depth if isinstance(criterion, Fixed) else getattr(criterion, "cap", max_depth)
    return min(limit, max_depth)


def _positive(n: float) -> bool:
    return math.isfinite(n) and n > 0


# name -> (criterion, parser of its value, what the value must be, the refusal of any other value)
_BUILDERS = {
    "fixed": (Fixed, parse_int, lambda n: n >= 1, "fixed needs a whole number of at least 1"),
    "kl": (KL, parse_float, _positive, "the kl threshold must be a positive number"),
    "stable": (Stable, parse_int, lambda n: n >= 1, "stable needs a whole number of at least 1"),
    "entropy": (Entropy, parse_float, _positive, "the entropy threshold must be a positive number"),
    "latent": (Latent, parse_float, _positive, "the latent threshold must be a positive number"),
    "accel": (Accel, parse_float, _positive, "the accel threshold must be a positive number"),
    # `0 < n < 1` also refuses nan and the infinities
    "gate": (Gate, parse_float, lambda n: 0 < n < 1, "the recall loss delta must lie in (0, 1)"),
    "cdf": (GateCdf, parse_float, lambda n: 0 < n <= 1, "the exit CDF level q must lie in (0, 1]"),
}


def _build(name: str, value: str, raw: str) -> Criterion:
    """The criterion `name` with its value read ASCII-only, like every number (biosrecall.numbers)."""
    criterion, parse, allowed, refusal = _BUILDERS[name]
    try:
        number = parse(value)
    except BiosrecallError:
        number = None  # text that is no number breaks the same rule as a number out of range
    if number is None or not allowed(number):
        raise BiosrecallError(f"exit criterion {raw!r}: {refusal}, got {value!r}")
    return criterion(number)


_FORM = "NAME or NAME:VALUE, e.g. kl:1e-3 (a bare kl sweeps its thresholds)"


def parse_exit(text: str) -> list[Criterion]:
    """One criterion (`kl:1e-3`, `oracle`), or a bare name (`kl`) for its `DEFAULT_SWEEPS` sweep.

    Spaces may surround a criterion (after a list's comma) but not sit inside it, and a colon needs
    its value: `kl : 1e-3` and `kl:` are refused rather than read as something else."""
    raw = str(text).strip()
    if any(char.isspace() for char in raw):
        raise BiosrecallError(f"exit criterion {raw!r}: no spaces inside a criterion; expected {_FORM}")
    name, colon, value = raw.partition(":")
    name = name.lower()
    if name == "oracle":
        if colon:
            raise BiosrecallError(f"exit criterion {raw!r}: oracle takes no parameter")
        return [Oracle()]
    if name not in _BUILDERS:
        known = ", ".join([*_BUILDERS, "oracle"])
        raise BiosrecallError(f"unknown exit criterion {raw!r} (known: {known})")
    if colon and not value:
        raise BiosrecallError(f"exit criterion {raw!r}: the colon needs a value after it; expected {_FORM}")
    values = [value] if colon else [str(v) for v in DEFAULT_SWEEPS[name]]
    return [_build(name, v, raw) for v in values]


def parse_exits(text) -> list[Criterion]:
    """Criteria from a comma list, or from the values of a repeated option; duplicates dropped. An
    empty item (two commas in a row, or one at an end) is refused, not skipped."""
    parts = [text] if isinstance(text, str) else list(text)
    pieces = [piece for part in parts for piece in str(part).split(",")]
    if all(not piece.strip() for piece in pieces):
        raise BiosrecallError("no exit criterion given")
    if any(not piece.strip() for piece in pieces):
        shown = ",".join(str(part) for part in parts)
        raise BiosrecallError(
            f"exit criteria {shown!r} hold an empty item (two commas in a row, or one at an end); "
            f"expected a comma list of {_FORM}"
        )
    criteria = [criterion for piece in pieces for criterion in parse_exit(piece)]
    return list(dict.fromkeys(criteria))


def check_servable(criteria) -> list[Criterion]:
    """The criteria, if a per-token exit can use every one (the oracle reads the answer, so it cannot)."""
    # The oracle's refusal first, then the first criterion still to be bound to a checkpoint's gate.
    if any(isinstance(criterion, Oracle) for criterion in criteria):
        raise BiosrecallError("the oracle criterion needs the answer: it scores queries, it cannot serve")
    unbound = next((criterion for criterion in criteria if isinstance(criterion, LEARNED)), None)
    if unbound is not None:
        raise BiosrecallError(f"{unbound.spec} {unbound.unbound}")
    return list(criteria)


def exit_judge(criterion: Criterion):
    """A fresh judge for one token of each row (`biosrecall.model.decode`): judge(depth, logits
    [..., V]) -> bool [...], where the criterion holds; one token's logits [V] give a single bool.
    A readout-free criterion's judge (`reads_state` True) takes the recurrent state [..., d] instead."""
    check_servable([criterion])
    if criterion.reads == "gate":
        return criterion.judge()  # a resolved gate (`eval.gate.GateExit`) judges from the state itself
    trail = StateTrail() if criterion.reads == "state" else LogitTrail()

    def judge(depth: int, values: torch.Tensor) -> torch.Tensor:
        return torch.as_tensor(criterion.holds(depth, trail.observe(values)), dtype=torch.bool)

    judge.reads_state = criterion.reads == "state"
    return judge
