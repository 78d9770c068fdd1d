"""How closely a standard-transformer baseline matches its looped preset, by the one FLOP account.

    match_ratios(get_preset("bios-cpu-std-flops"), get_preset("bios-cpu"))
    # {"parameters": 1.507, "non_embedding": 1.902, "train_flops": 0.967, "forward_flops": 0.964}
    closest_layers(get_preset("bios-cpu"), "flops")       # 6: the layer count of bios-cpu-std-flops
    describe_match("bios-cpu-std-params")                  # the line `biosrecall flops` prints

A baseline runs at its one depth (1); the looped preset is priced at `BASELINE_DEPTH` (K = 4), the
depth a flops-matched baseline stands in for. Every number is `compute.flops`' (`param_counts`,
`train_flops_per_token`, `forward_flops_per_token`): nothing here counts parameters or FLOPs itself.
"""

from __future__ import annotations

from biosrecall.compute.flops import forward_flops_per_token, param_counts, train_flops_per_token
from biosrecall.model.config import ModelConfig
from biosrecall.model.presets import BASELINE_DEPTH, BASELINES, get_preset, standard_transformer

MATCHES = {"parameters": "parameters", "flops": "train_flops"}
"""What each kind of baseline matches: the key of `match_ratios` it is sized by."""


def match_ratios(
    baseline: ModelConfig, looped: ModelConfig, depth: int = BASELINE_DEPTH, seq_len: int | None = None
) -> dict[str, float]:
    """Baseline / looped: parameters (all and non-embedding), and training and forward FLOPs per token
    of the baseline at its one depth against the looped model at `depth` (attention at `seq_len`,
    default each model's context)."""
    mine, theirs = param_counts(baseline), param_counts(looped)
    train = train_flops_per_token(baseline, 1, seq_len), train_flops_per_token(looped, depth, seq_len)
    forward = (
        forward_flops_per_token(baseline, seq_len).at_depth(1),
        forward_flops_per_token(looped, seq_len).at_depth(depth),
    )
    return {
        "parameters": mine["total"] / theirs["total"],
        "non_embedding": mine["non_embedding"] / theirs["non_embedding"],
        "train_flops": train[0] / train[1],
        "forward_flops": forward[0] / forward[1],
    }


def closest_layers(looped: ModelConfig, match: str, depth: int = BASELINE_DEPTH, most: int = 64) -> int:
    """The layer count (1..most) of the standard transformer whose `match` ratio ("parameters" or
    "flops") to `looped` is closest to 1."""
    key = MATCHES[match]

    def distance(layers: int) -> float:
        return abs(match_ratios(standard_transformer(looped, layers), looped, depth)[key] - 1)

    return min(range(1, most + 1), key=distance)


def describe_match(name: str) -> str | None:
    """One line on how the baseline preset `name` matches its looped preset; None for other presets."""
    if name not in BASELINES:
        return None
    looped, match, layers = BASELINES[name]
    ratios = match_ratios(get_preset(name), get_preset(looped))
    what = "parameters" if match == "parameters" else f"training FLOPs per token at K = {BASELINE_DEPTH}"
    return (
        f"  baseline of {looped}, matched in {what} ({layers} layers): parameters "
        f"x{ratios['parameters']:.3f} of {looped}'s (non-embedding x{ratios['non_embedding']:.3f}), "
        f"training FLOPs per token x{ratios['train_flops']:.3f} of its at K = {BASELINE_DEPTH} "
        f"(forward x{ratios['forward_flops']:.3f})"
    )
