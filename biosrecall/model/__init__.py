"""The looped (prelude / recurrent block x K / coda) transformer, its config and named presets.

from biosrecall.model import LoopedTransformer, get_preset
model = LoopedTransformer(get_preset("bios-tiny"))
logits = model(tokens, depth=4)
"""

from biosrecall.model.config import ModelConfig
from biosrecall.model.looped import LoopedTransformer
from biosrecall.model.presets import PRESETS, get_preset

__all__ = ["PRESETS", "LoopedTransformer", "ModelConfig", "get_preset"]
