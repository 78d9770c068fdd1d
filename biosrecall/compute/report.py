"""The report `biosrecall flops` prints for one model config: parameters by component, FLOPs per token
at a few depths, each schedule's modeled training compute against uniform:1-16, and how a
standard-transformer baseline matches its looped preset.

    from biosrecall.compute.report import flops_report
    print(flops_report("lm-200m", get_preset("lm-200m"), [parse_schedule("fixed:4")], None, 4800))

Every number comes from the FLOP account (`flops.py`) and the planner's saving (`planner.py`); this
module only lays them out.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from biosrecall.compute.flops import (
    forward_flops_per_token,
    match_ratios,
    param_counts,
    recurrent_ratio,
    train_flops_per_token,
)
from biosrecall.compute.planner import saving_vs_uniform
from biosrecall.compute.schedules import Schedule
from biosrecall.model.config import DEFAULT_RECIPE, ModelConfig
from biosrecall.model.presets import BASELINE_DEPTH, BASELINES, get_preset

REPORTED = {
    "lm-200m": {
        "fixed_first:k0=2,switch=0.67,finish=uniform,range=1-16": 45.3,
        "fixed_first:k0=2,switch=0.8,finish=uniform,range=1-16": 54.3,
        "fixed_first:k0=4,switch=0.67,finish=uniform,range=1-16": 31.3,
    },
    "lm-1b": {
        "fixed_first:k0=4,switch=0.67,finish=uniform,range=1-16": 30.8,
        "fixed_first:k0=4,switch=0.8,finish=uniform,range=1-16": 36.9,
    },
}
"""Savings (%) against uniform at the same number of updates reported in the paper, by preset."""


def flops_report(
    name: str,
    cfg: ModelConfig,
    schedules: Sequence[Schedule],
    seq_len: int | None,
    updates: int,
    data_dir: Path | None = None,
) -> str:
    """The report of preset `name` built as `cfg` (attention at `seq_len`, default its context),
    schedules compared over `updates` updates; `data_dir` names the dataset its vocabulary was read
    from (None: the preset's own)."""
    tie = "tied" if cfg.tie_embeddings else "untied"
    if data_dir is not None:
        vocab = f"vocab {cfg.vocab_size:,} (of {data_dir}; {tie} head)"
    elif name.startswith("bios-"):
        # The count a reader compares with a run's: say it is not one until --data makes it one.
        vocab = f"vocab {cfg.vocab_size:,} (the preset's stand-in: a run has its dataset's, --data counts it; {tie} head)"
    else:
        vocab = f"vocab {cfg.vocab_size:,} ({tie} head)"
    if cfg.recurrent:
        layers = f"{cfg.n_prelude} + {cfg.n_block} x K + {cfg.n_coda}"
        savings = _savings(name, cfg, schedules, seq_len, updates)
    else:
        layers = f"{cfg.n_prelude + cfg.n_coda} (standard transformer, no recurrent block)"
        savings = ["  schedules: none (one depth, trained at fixed:1: every depth would cost the same)"]
    lines = [
        f"{name}: width {cfg.d_model}, {cfg.n_heads} heads, {cfg.mlp} MLP {cfg.d_mlp}, layers "
        f"{layers}, context {cfg.context_length}, "
        f"{vocab}, {cfg.injection} injection, {cfg.norm}-norm"
        + ("" if cfg.recipe == DEFAULT_RECIPE else f", recipe {cfg.recipe}"),
        *_baseline_match(name),
        "",
        *_parameters(cfg),
        "",
        *_per_token(cfg, seq_len),
        "",
        *savings,
    ]
    return "\n".join(line.rstrip() for line in lines)


def _baseline_match(name: str) -> list[str]:
    """How the baseline preset `name` matches its looped preset, in one line; none for other presets."""
    if name not in BASELINES:
        return []
    looped, match, layers = BASELINES[name]
    ratios = match_ratios(get_preset(name), get_preset(looped))
    what = "parameters" if match == "parameters" else f"training FLOPs per token at K = {BASELINE_DEPTH}"
    return [
        f"  baseline of {looped}, matched in {what} ({layers} layers): parameters "
        f"x{ratios['parameters']:.3f} of {looped}'s (non-embedding x{ratios['non_embedding']:.3f}), "
        f"training FLOPs per token x{ratios['train_flops']:.3f} of its at K = {BASELINE_DEPTH} "
        f"(forward x{ratios['forward_flops']:.3f})"
    ]


def _parameters(cfg: ModelConfig) -> list[str]:
    counts = param_counts(cfg)
    lines = [f"  {'parameters':<28}{'count':>15}{'share':>9}"]
    for key, value in counts.items():
        share = f"{100 * value / counts['total']:.1f}%" if key not in ("total", "non_embedding") else ""
        lines.append(f"  {key.replace('_', ' '):<28}{value:>15,}{share:>9}")
    return lines


def _per_token(cfg: ModelConfig, seq_len: int | None) -> list[str]:
    fwd = forward_flops_per_token(cfg, seq_len)
    keep = "full" if cfg.backprop_depth is None else f"last {cfg.backprop_depth} iterations"
    rows = []
    depth_rows = (
        ("K = 1", [1]),
        ("K = 4", [4]),
        ("K = 8.5 (mean of U{1..16})", range(1, 17)),
        ("K = 16", [16]),
    )
    for label, depths in depth_rows if cfg.recurrent else (("K = 1 (its one depth)", [1]),):
        forward = sum(fwd.at_depth(k) for k in depths) / len(depths)
        rows.append(
            (label, forward, sum(train_flops_per_token(cfg, k, seq_len) for k in depths) / len(depths))
        )
    scale, unit = (1e9, "GFLOP") if rows[-1][2] >= 1e9 else (1e6, "MFLOP")
    title = f"{unit} per token (T = {fwd.seq_len}, backprop: {keep})"
    lines = [f"  {title:<43}{'forward':>12}{'training':>12}"]
    lines += [f"  {label:<43}{f / scale:>12.4g}{t / scale:>12.4g}" for label, f, t in rows]
    parts = ", ".join(
        f"{name} {getattr(fwd, name) / scale:.4g}" for name in ("prelude", "injection", "coda", "head")
    )
    if not cfg.recurrent:  # r divides by the iteration's FLOPs, which are 0 here
        lines.append(f"  forward {unit}: {fwd.non_recurrent / scale:.4g} ({parts}), no iteration")
        return lines
    lines.append(
        f"  forward {unit}: per iteration {fwd.iteration / scale:.4g}, non-recurrent "
        f"{fwd.non_recurrent / scale:.4g} ({parts}); r = non-recurrent / iteration = {recurrent_ratio(cfg, seq_len):.3f}"
    )
    return lines


def _savings(
    name: str, cfg: ModelConfig, schedules: Sequence[Schedule], seq_len: int | None, updates: int
) -> list[str]:
    reported = REPORTED.get(name, {})
    width = max(len(schedule.spec) for schedule in schedules) + 2
    lines = [
        f"  schedules over {updates} updates, modeled training compute vs uniform:1-16 at the same number of updates",
        f"  {'schedule':<{width}}{'mean K':>8}{'compute':>10}{'saving':>9}{'reported':>10}",
    ]
    for schedule in schedules:
        spec = schedule.spec
        mean_k = schedule.expected_cost(updates, lambda k: k) / updates
        saving = saving_vs_uniform(cfg, schedule, updates, seq_len=seq_len)
        paper = f"{reported[spec]:.1f}%" if spec in reported else ""
        lines.append(f"  {spec:<{width}}{mean_k:>8.2f}{1 - saving:>10.3f}{100 * saving:>8.1f}%{paper:>10}")
    return lines
