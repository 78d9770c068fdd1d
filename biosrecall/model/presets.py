"""Named model shapes. `get_preset(name, **overrides)` returns a validated `ModelConfig`.

    cfg = get_preset("bios-cpu", vocab_size=dataset.vocab_size)   # the trainer sets the vocabulary
    cfg = get_preset("lm-200m", backprop_depth=8)

Shapes (layers written prelude + block x K + coda; parameter counts with the default vocabulary, a
tied head counted once; `biosrecall flops --preset NAME` prints the split):

- `bios-tiny`  width 32, 2 heads, SwiGLU 64, 1 + 1xK + 1, context 128 (a bioS biography takes up
  to about 90 tokens), vocab 256: 41,216 parameters.
  For tests: a forward at K = 16 takes milliseconds on a CPU.
- `bios-cpu`   width 128, 4 heads, SwiGLU 384, 1 + 1xK + 1, context 256, vocab 4096: 1,197,056
  parameters (672,768 without the embedding). The default for bioS on a 2-core CPU: one layer per
  stage, so a serving-depth sweep to K = 64 over a few hundred people stays in minutes.
- `lm-tiny`    width 64, 2 heads, SwiGLU 128, 1 + 2xK + 1, context 128, vocab 512: 205,440 parameters.
  For tests of the language-model pipeline.
- `lm-200m`    width 1152, 18 heads, SwiGLU 3840, 2 + 5xK + 2, context 2048, vocab 32768:
  207,641,088 parameters. Huginn-like (2 prelude / 2 coda layers around a deeper block), sized so
  the FLOP account gives the paper's savings: 45.3 / 54.1 / 31.4% for K0 = 2 at 67% / K0 = 2 at 80%
  / K0 = 4 at 67% (reported 45.3 / 54.3 / 31.3).
- `lm-1b`      width 2048, 16 heads, SwiGLU 7168, 4 + 7xK + 4, context 2048, vocab 32768:
  987,824,128 parameters; K0 = 4 at 67% / 80% saves 30.8 / 36.8% (reported 30.8 / 36.9).

Standard-transformer baselines (`standard_transformer`): a looped preset's width, heads, MLP, context
and vocabulary with L untied layers and no recurrent block (n_block 0, injection none: one depth,
trained at fixed:1). Each is the whole number of layers closest to its looped preset, by the account
of `biosrecall.compute.flops` (tests/test_baselines.py checks both the counts and the choice of L):

- `bios-tiny-std-params` 3 layers: 39,168 parameters, 0.950 of bios-tiny's (non-embedding 0.938).
- `bios-tiny-std-flops`  6 layers: training FLOPs per token 0.964 of bios-tiny's at K = 4 (forward
  0.959); 70,080 parameters.
- `bios-cpu-std-params`  3 layers: 1,164,288 parameters, 0.973 of bios-cpu's (non-embedding 0.951).
- `bios-cpu-std-flops`   6 layers: training FLOPs per token 0.967 of bios-cpu's at K = 4 (forward
  0.964); 1,804,032 parameters, 1.90 x bios-cpu's non-embedding ones.

What no whole layer matches is the looped model's concat adapter: 2 d^2 parameters, and 2 d^2 FLOPs
per token per iteration plus once for the injection.

The bios vocabularies are defaults only: the trainer replaces them with the dataset tokenizer's size.
Everything else uses the `ModelConfig` defaults: RoPE, pre-norm, concat injection, zero initial
state, full backprop through depth.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from biosrecall.errors import BiosrecallError
from biosrecall.model.config import ModelConfig, check_field_names
from biosrecall.numbers import parse_float, parse_int

DEFAULT_BIOS_PRESET = "bios-cpu"
"""The preset a bioS run trains when none is named (`biosrecall train --preset`)."""

_COLUMNS = ("vocab_size", "d_model", "n_heads", "d_mlp", "n_prelude", "n_block", "n_coda", "context_length")
_SHAPES = {
    "bios-tiny": (256, 32, 2, 64, 1, 1, 1, 128),
    "bios-cpu": (4096, 128, 4, 384, 1, 1, 1, 256),
    "lm-tiny": (512, 64, 2, 128, 1, 2, 1, 128),
    "lm-200m": (32768, 1152, 18, 3840, 2, 5, 2, 2048),
    "lm-1b": (32768, 2048, 16, 7168, 4, 7, 4, 2048),
}
PRESETS: dict[str, ModelConfig] = {
    name: ModelConfig(**dict(zip(_COLUMNS, shape, strict=True))) for name, shape in _SHAPES.items()
}
"""Every named shape (the looped ones, then the baselines below): the fields of `_COLUMNS` as each
row of `_SHAPES` gives them, every other field at its default."""


def standard_transformer(looped: ModelConfig, layers: int) -> ModelConfig:
    """A standard transformer of `looped`'s shape: `layers` untied layers, no recurrent block.

    The layers are the prelude: embed, `layers` pre-norm layers, then the model's two RMSNorms (state
    and final, one after the other: a final norm with a second learned scale) and the head. With
    n_block 0 and no injection every depth computes the same function, at the same modeled cost."""
    return looped.replace(n_prelude=layers, n_block=0, n_coda=0, injection="none")


BASELINES: dict[str, tuple[str, str, int]] = {
    "bios-tiny-std-params": ("bios-tiny", "parameters", 3),
    "bios-tiny-std-flops": ("bios-tiny", "flops", 6),
    "bios-cpu-std-params": ("bios-cpu", "parameters", 3),
    "bios-cpu-std-flops": ("bios-cpu", "flops", 6),
}
"""Baseline preset -> (the looped preset it matches, what it matches: parameters, or training FLOPs per
token at `BASELINE_DEPTH`, and its layers)."""
BASELINE_DEPTH = 4
"""The looped depth whose FLOPs per token the flops-matched baselines match (fixed:4, the paper's K0)."""
PRESETS.update(
    {name: standard_transformer(PRESETS[looped], layers) for name, (looped, _, layers) in BASELINES.items()}
)


def get_preset(name: str, **overrides: Any) -> ModelConfig:
    """The named preset with some fields replaced (validated); unknown names or fields are errors."""
    if name not in PRESETS:
        raise BiosrecallError(f"unknown preset {name!r}; choose one of: {', '.join(PRESETS)}")
    return PRESETS[name].replace(**overrides)


def parse_model_overrides(pairs: list[str]) -> dict[str, Any]:
    """`["norm=sandwich", "n_block=2"]` -> {"norm": "sandwich", "n_block": 2}, each value converted to
    its field's type and checked by building a config with it; an unknown field or an invalid value is
    a `BiosrecallError` naming it."""
    texts: dict[str, str] = {}
    for pair in pairs:
        name, sep, text = pair.partition("=")
        if not sep or not name.strip():
            raise BiosrecallError(f"model override {pair!r} is not FIELD=VALUE, e.g. norm=sandwich")
        texts[name.strip()] = text.strip()
    check_field_names(texts)
    fields = {f.name: f for f in dataclasses.fields(ModelConfig)}
    overrides = {name: _typed(fields[name], text) for name, text in texts.items()}
    get_preset(DEFAULT_BIOS_PRESET).replace(**overrides)  # validates every value, naming the field
    return overrides


def _typed(field: dataclasses.Field, text: str) -> Any:
    kind = field.type if isinstance(field.type, str) else getattr(field.type, "__name__", str(field.type))
    try:
        if kind.startswith("int"):
            return None if text == "None" and "None" in kind else parse_int(text)
        if kind.startswith("float"):
            return parse_float(text)
        if kind.startswith("bool"):
            return {"true": True, "1": True, "false": False, "0": False}[text.lower()]
    except (ValueError, KeyError):  # a BiosrecallError is a ValueError; KeyError: not a truth value
        raise BiosrecallError(f"model override {field.name}={text!r}: expected {kind}") from None
    return text
