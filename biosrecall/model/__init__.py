"""The looped (prelude / recurrent block x K / coda) transformer, its config and named presets.

from biosrecall.model import LoopedTransformer, get_preset
model = LoopedTransformer(get_preset("bios-tiny"))
logits = model(tokens, depth=4)

`LoopedTransformer` is loaded on first use: the config and the presets need no torch, so the command
line can describe and check its options without paying for torch's import.
"""

from biosrecall.model.config import ModelConfig
from biosrecall.model.presets import PRESETS, get_preset

__all__ = ["PRESETS", "LoopedTransformer", "ModelConfig", "get_preset"]


def __getattr__(name: str):
    if name == "LoopedTransformer":
        from biosrecall.model.looped import LoopedTransformer

        return LoopedTransformer
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
