"""The shape and behaviour of one looped transformer, as a validated, serialisable dataclass.

    from biosrecall.model.config import ModelConfig
    cfg = ModelConfig(vocab_size=512, d_model=64, n_heads=2, d_mlp=128,
                      n_prelude=1, n_block=2, n_coda=1, context_length=128)
    ModelConfig.from_dict(cfg.to_dict()) == cfg   # round-trips through JSON-safe dicts

A config validates itself on construction, so an invalid one never exists; every problem is a
`BiosrecallError` (a `ValueError`) naming the field. Named shapes live in `presets.py`.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from biosrecall.errors import BiosrecallError
from biosrecall.model.recipes.base import check_recipe_name
from biosrecall.numbers import DEPTH, MAX_SEED, SEED, check_number, counts, rates  # noqa: F401 (MAX_SEED: re-exported)

DEFAULT_RECIPE = "baseline"
# Stated maxima, so that a mistyped number is refused before anything is allocated: MAX_DEPTH and
# MAX_SEED are `biosrecall.numbers`' (one rule per kind of number), and the largest LLM vocabularies
# hold a few hundred thousand tokens.
MAX_VOCAB = 2**24
"""Largest vocabulary (16,777,216 ids, 64 x the largest LLM vocabularies)."""
INT_LIMITS = {
    **dict.fromkeys(("d_model", "n_heads", "d_mlp", "context_length"), counts()),
    "vocab_size": counts(2, MAX_VOCAB, "64 x the largest LLM vocabularies"),
    **dict.fromkeys(("n_prelude", "n_block", "n_coda"), counts(low=0)),
    "init_state_seed": SEED,
    "backprop_depth": DEPTH,
}
"""Every integer field's bounds (the command line's options apply the same); the layer counts may be 0
(no prelude, no block: a standard transformer)."""
CHOICES = {
    "position": ("rope", "learned"),
    "norm": ("pre", "sandwich"),
    "mlp": ("swiglu", "gelu"),
    "injection": ("concat", "add", "none"),
    "init_state": ("zeros", "noise"),
}
"""The values each text field may take."""


@dataclass(frozen=True)
class ModelConfig:
    """A middle-loop transformer: embedding, prelude layers, one recurrent block applied K times
    (the serving or training depth, chosen per call), coda layers, head."""

    vocab_size: int
    """Number of token ids; the embedding and the output head have this many rows."""
    d_model: int
    """Width of the residual stream and of the recurrent state."""
    n_heads: int
    """Attention heads per layer; must divide `d_model` (head width = d_model / n_heads)."""
    d_mlp: int
    """Hidden width of each MLP (for SwiGLU: the width after gating)."""
    n_prelude: int
    """Untied layers applied once before the loop; their output `e` is injected every iteration."""
    n_block: int
    """Layers inside the recurrent block; the block (these layers together) is applied K times. 0 (with
    `injection="none"`): no recurrent block, a standard transformer whose output is the same at every
    depth (`recurrent` is False; the bios-*-std presets)."""
    n_coda: int
    """Untied layers applied once after the loop, before the final norm and the head."""
    context_length: int
    """Longest sequence the model accepts (size of the RoPE table / learned position table)."""
    position: str = "rope"
    """Position scheme: `rope` (rotary, applied to queries and keys in every layer) or `learned`
    (an absolute position embedding added to the token embedding)."""
    rope_base: float = 10000.0
    """Base of the rotary frequencies (theta); only used with `position="rope"`."""
    norm: str = "pre"
    """Norm placement: `pre` (x + f(norm(x))) or `sandwich` (Huginn's norm(x + f(norm(x))), which
    keeps the recurrent state's scale fixed however many iterations run)."""
    norm_eps: float = 1e-6
    """Epsilon inside every RMSNorm."""
    mlp: str = "swiglu"
    """MLP type: `swiglu` (three d x d_mlp matrices) or `gelu` (two)."""
    injection: str = "concat"
    """How the prelude output e enters each iteration: `concat` (bias-free Linear 2d -> d on
    [state, e], Huginn's adapter), `add` (state + e), or `none` (e is only the initial state)."""
    init_state: str = "zeros"
    """Initial recurrent state: `zeros`, or `noise` (a seeded Gaussian of shape [T, d] shared by every
    sequence, so outputs never depend on batch-mates or on how many iterations follow)."""
    init_state_std: float = math.sqrt(2 / 5)
    """Standard deviation of the `noise` initial state (Huginn uses sqrt(2/5))."""
    init_state_seed: int = 0
    """Seed of the `noise` initial state; the draw is a function of this seed alone."""
    tie_embeddings: bool = True
    """Reuse the token embedding matrix as the output head."""
    backprop_depth: int | None = None
    """Truncated backprop through depth: unset (None) = gradients through all K iterations; k = only
    the last min(k, K) iterations carry gradients, earlier ones run under no_grad (memory flat in K)."""
    init_mean_depth: float = 8.5
    """Recurrence assumed when scaling residual output projections at initialisation (the mean of
    U{1..16}); the effective depth n_prelude + n_coda + n_block x this sets the scale."""
    recipe: str = "baseline"
    """What one iteration computes and how training weighs the depths (`biosrecall.model.recipes`):
    baseline (the loop above), huginn, deep-supervision, parcae, loopformer, ouro-gate, or an outside
    recipe's name. Left out of `to_dict()` when baseline, so earlier records read the same."""

    def __post_init__(self) -> None:
        self.validate()

    @property
    def recurrent(self) -> bool:
        """The depth K changes the function: False for a standard transformer (`n_block` 0), whose
        every depth is its one depth, 1."""
        return self.n_block > 0

    @property
    def head_dim(self) -> int:
        """Width of one attention head."""
        return self.d_model // self.n_heads

    def validate(self) -> None:
        """Raise `BiosrecallError` naming the first field whose value is impossible."""
        for name, limit in INT_LIMITS.items():
            if getattr(self, name) is not None or name != "backprop_depth":  # unset: through all K
                check_number(name, getattr(self, name), limit)
        if self.d_model % self.n_heads:
            raise BiosrecallError(
                f"n_heads ({self.n_heads}) must divide d_model ({self.d_model}) so every head has the same width"
            )
        if self.position == "rope" and self.head_dim % 2:
            raise BiosrecallError(f"rope needs an even head width, got d_model/n_heads = {self.head_dim}")
        for name, choices in CHOICES.items():
            if getattr(self, name) not in choices:
                raise BiosrecallError(
                    f"{name} must be one of {', '.join(choices)}, got {getattr(self, name)!r}"
                )
        for name in ("rope_base", "norm_eps", "init_state_std", "init_mean_depth"):
            check_number(name, getattr(self, name), rates(low_open=True))
        if not isinstance(self.tie_embeddings, bool):
            raise BiosrecallError(f"tie_embeddings must be true or false, got {self.tie_embeddings!r}")
        problem = check_recipe_name(self.recipe)
        if problem is not None:
            raise BiosrecallError(f"recipe {self.recipe!r}: {problem}")
        if self.n_block == 0 and (self.injection, self.recipe) != ("none", DEFAULT_RECIPE):
            # An adapter alone, applied K times, would still be a recurrence (a linear one); every other
            # recipe is a way of iterating the block.
            raise BiosrecallError(
                f"n_block 0 (no recurrent block: a standard transformer) needs injection none and recipe "
                f"{DEFAULT_RECIPE}, got injection {self.injection!r} and recipe {self.recipe!r}"
            )

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-safe dict of every field (`recipe` only when it is not baseline)."""
        data = dataclasses.asdict(self)
        if data["recipe"] == DEFAULT_RECIPE:
            del data["recipe"]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ModelConfig:
        """Build (and validate) a config from `to_dict()` output; unknown or missing keys are errors."""
        check_field_names(data)
        required = [f.name for f in dataclasses.fields(cls) if f.default is dataclasses.MISSING]
        missing = [name for name in required if name not in data]
        if missing:
            raise BiosrecallError(f"model config is missing field(s): {', '.join(missing)}")
        return cls(**data)

    def replace(self, **changes: Any) -> ModelConfig:
        """A validated copy with some fields changed; unknown field names are errors."""
        check_field_names(changes)
        return dataclasses.replace(self, **changes)


def check_field_names(names: Any) -> None:
    """Refuse a name that is not a `ModelConfig` field (a record's key, an override, a keyword)."""
    unknown = sorted(set(names) - {f.name for f in dataclasses.fields(ModelConfig)})
    if unknown:
        raise BiosrecallError(f"unknown model config field {', '.join(map(repr, unknown))}")
