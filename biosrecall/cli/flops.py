"""`biosrecall flops`: parameters, FLOPs per token and schedule savings of model presets.

    biosrecall flops --preset lm-200m
    biosrecall flops --preset bios-cpu --schedule fixed:4 --schedule uniform:1-16 --seq-len 128
    biosrecall flops --preset bios-cpu --preset bios-cpu-std-params --preset bios-cpu-std-flops
    biosrecall flops --preset bios-tiny --recipe loopformer      # a recipe's own parameters and FLOPs

A standard-transformer baseline (no recurrent block) has one depth: it is shown at K = 1 with how it
matches its looped preset, and without schedules (every depth would cost the same).

A bioS preset's vocabulary (256 for bios-tiny) is a stand-in: `train` sizes the embedding to the
dataset's tokenizer, so `--data DATASET` counts what a run on that dataset has:

    biosrecall flops --preset bios-tiny --data runs/tour/data     # the tour's run: vocab 2,137

Every number comes from `biosrecall.compute` (the one FLOP account); this module only formats.
"""

from __future__ import annotations

from pathlib import Path

import click

from biosrecall.cli.config_file import config_option
from biosrecall.cli.options import Integer
from biosrecall.compute.flops import (
    describe_match,
    forward_flops_per_token,
    param_counts,
    recurrent_ratio,
    train_flops_per_token,
)
from biosrecall.compute.planner import saving_vs_uniform
from biosrecall.compute.schedules import Schedule, parse_schedule
from biosrecall.errors import BiosrecallError
from biosrecall.model.config import DEFAULT_RECIPE, ModelConfig
from biosrecall.model.presets import PRESETS, get_preset
from biosrecall.model.recipes import BUILT_IN, check_config, recipe_overrides
from biosrecall.numbers import DEPTH
from biosrecall.records import read_record
from biosrecall.train.config import LIMITS

CURRICULUM = "curriculum:mean=8,warmup=0.75,shape=1-sqrt"
PAPER_SCHEDULES = (
    *(
        f"fixed_first:k0={k0},switch={switch},finish={finish}"
        for finish in ("uniform", "poisson_lognormal")
        for k0 in (1, 2, 4)
        for switch in (0.67, 0.8)
    ),
    CURRICULUM,
    "fixed:4",
    "uniform:1-16",
)
# Savings (%) against uniform at the same number of updates reported in the paper, by preset.
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


@click.command("flops")
@config_option()
@click.option(
    "--preset",
    "presets",
    multiple=True,
    default=("lm-200m",),
    help=f"Model preset; repeat for several. One of: {', '.join(PRESETS)}.",
)
@click.option(
    "--schedule",
    "schedules",
    multiple=True,
    help="Schedule to compare against uniform:1-16; repeat for several (e.g. fixed:4, "
    "fixed_first:k0=4,switch=0.8,finish=uniform). Default: the paper's set: fixed-first K0 in {1, 2, 4} x "
    f"switch in {{0.67, 0.8}} x finish in {{uniform, poisson_lognormal}}, {CURRICULUM}, fixed:4, uniform:1-16.",
)
@click.option(
    "--seq-len",
    type=Integer(LIMITS["seq_len"]),
    default=None,
    help="Sequence length for attention FLOPs.  [default: preset's context length]",
)
@click.option(
    "--updates",
    type=Integer(
        LIMITS["updates"],
        "total updates",
        below="total updates must be a positive integer, got {value}",
        bare=True,
    ),
    default=4800,
    help="Run length at which schedules are compared (it only moves where switches and ramps fall; "
    "4800 is the paper's 200M run).",
)
@click.option(
    "--data",
    "data_dir",
    type=click.Path(path_type=Path),
    default=None,
    help="bioS dataset whose vocabulary sizes the embedding, as `train` does [default: the preset's "
    "stand-in vocabulary].",
)
@click.option(
    "--backprop-depth",
    type=Integer(DEPTH, "backprop_depth"),
    default=None,
    help="Backprop only through the last k iterations.  [default: the preset's, full backprop]",
)
@click.option(
    "--recipe",
    default=DEFAULT_RECIPE,
    show_default=True,
    help="The looped recipe to count, as `train --recipe` builds it (its model defaults under the "
    f"preset's shape; its extra parameters and training objective priced). Built in: {', '.join(BUILT_IN)}, "
    "or an installed package's biosrecall.recipes entry point.",
)
def flops(
    presets: tuple[str, ...],
    schedules: tuple[str, ...],
    seq_len: int | None,
    updates: int,
    data_dir: Path | None,
    backprop_depth: int | None,
    recipe: str,
) -> None:
    """Print, per preset, parameters by component, FLOPs per token at K = 1, 4, 8.5 (the mean of
    U{1..16}) and 16, and each schedule's modeled training compute relative to uniform:1-16 at the same
    number of updates (the saving is 1 minus that)."""
    parsed = [parse_schedule(text) for text in schedules or PAPER_SCHEDULES]
    vocabulary = None if data_dir is None else _dataset_vocabulary(data_dir)
    for index, name in enumerate(presets):
        overrides = {} if backprop_depth is None else {"backprop_depth": backprop_depth}
        if vocabulary is not None:
            overrides["vocab_size"] = vocabulary
        cfg = get_preset(name, **recipe_overrides(recipe, overrides))
        check_config(cfg)
        if index:
            click.echo()
        lines = _report(name, cfg, parsed, seq_len, updates, data_dir)
        click.echo("\n".join(line.rstrip() for line in lines))


def _dataset_vocabulary(data_dir: Path) -> int:
    """The vocabulary size a dataset's manifest records (what `train` sizes the embedding to)."""
    from biosrecall.bios.validation import DatasetManifest  # loads pandas: only with --data

    if not (data_dir / "manifest.json").is_file():
        raise BiosrecallError(f"--data {data_dir} holds no manifest.json: give a bioS dataset folder")
    return read_record(data_dir / "manifest.json", DatasetManifest, "dataset manifest").tokenizer.vocab_size


def _report(
    name: str, cfg: ModelConfig, schedules: list[Schedule], seq_len: int | None, updates: int, data_dir=None
) -> list[str]:
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
        *([match] if (match := describe_match(name)) else []),
        "",
    ]
    return lines + _parameters(cfg) + [""] + _per_token(cfg, seq_len) + [""] + savings


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
    name: str, cfg: ModelConfig, schedules: list[Schedule], seq_len: int | None, updates: int
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
