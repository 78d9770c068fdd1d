"""`biosrecall train`: train one looped transformer on a bioS dataset with a depth schedule and a FLOP budget.

    biosrecall train --data data/bios --out runs/ff --schedule fixed_first:k0=4,switch=0.8,finish=uniform \
        --budget-of fixed:4:2000
    torchrun --nproc_per_node 2 -m biosrecall train ...   # data-parallel (DDP, or --parallel fsdp)
"""

from __future__ import annotations

import click

from biosrecall.train.config import DEFAULT_FRACTIONS, TrainConfig


def parse_fractions(ctx, param, value: str) -> tuple[float, ...]:
    try:
        fractions = tuple(sorted({float(part) for part in value.split(",") if part.strip()}))
    except ValueError:
        raise click.BadParameter(f"expected comma-separated fractions, got {value!r}") from None
    if not fractions or any(not 0 < f <= 1 for f in fractions):
        raise click.BadParameter(f"fractions must lie in (0, 1], got {value!r}")
    return fractions


@click.command()
@click.option(
    "--data", "data_dir", required=True, type=click.Path(), help="Dataset folder from `biosrecall generate`."
)
@click.option("--out", "run_dir", required=True, type=click.Path(), help="Run folder to create (or resume).")
@click.option(
    "--schedule",
    default=TrainConfig.schedule,
    show_default=True,
    help="Depth schedule, e.g. fixed:4, uniform:1-16, fixed_first:k0=4,switch=0.8,finish=uniform, "
    "curriculum:mean=8,warmup=0.5,shape=linear.",
)
@click.option(
    "--preset", default="bios-cpu", show_default=True, help="Model preset (see `biosrecall flops`)."
)
@click.option("--budget", type=float, default=None, help="Modeled training FLOPs to spend, e.g. 2e14.")
@click.option(
    "--budget-of",
    default=None,
    help="Instead of --budget: the FLOPs that SPEC spends in UPDATES updates, e.g. fixed:4:2000.",
)
@click.option(
    "--updates",
    type=int,
    default=None,
    help="Instead of a budget: exactly this many updates (not FLOP-matched).",
)
@click.option("--batch-size", default=TrainConfig.batch_size, show_default=True, help="Sequences per update.")
@click.option(
    "--seq-len", type=int, default=None, help="Tokens per sequence [default: the preset's context]."
)
@click.option("--lr", default=TrainConfig.lr, show_default=True, help="Peak AdamW learning rate.")
@click.option(
    "--min-lr-ratio", default=TrainConfig.min_lr_ratio, show_default=True, help="Final LR / peak LR."
)
@click.option("--lr-schedule", type=click.Choice(["cosine", "wsd"]), default="cosine", show_default=True)
@click.option(
    "--warmup", default=TrainConfig.warmup, show_default=True, help="Warm-up as a fraction of updates."
)
@click.option("--weight-decay", default=TrainConfig.weight_decay, show_default=True)
@click.option(
    "--grad-clip", default=TrainConfig.grad_clip, show_default=True, help="Global norm clip; 0 = off."
)
@click.option("--seed", default=0, show_default=True, help="Seeds weights, batches and depth draws.")
@click.option("--device", default="auto", show_default=True, help="auto, cpu or cuda.")
@click.option("--precision", default="auto", show_default=True, help="auto (bf16 on CUDA), fp32 or bf16.")
@click.option(
    "--threads", type=click.IntRange(min=1), default=None, help="CPU threads [default: one per core]."
)
@click.option("--compile/--no-compile", default=False, show_default=True, help="torch.compile the model.")
@click.option(
    "--parallel",
    type=click.Choice(["ddp", "fsdp"]),
    default="ddp",
    show_default=True,
    help="Data-parallel mode under torchrun.",
)
@click.option(
    "--checkpoint-fractions",
    default=",".join(map(str, DEFAULT_FRACTIONS)),
    show_default=True,
    callback=parse_fractions,
    help="Budget fractions at which weights are kept.",
)
@click.option(
    "--save-every",
    default=TrainConfig.save_every,
    show_default=True,
    help="Updates between refreshes of the resumable `latest` checkpoint.",
)
@click.option(
    "--log-every",
    default=TrainConfig.log_every,
    show_default=True,
    help="Updates between log lines when stderr is not a terminal.",
)
@click.option(
    "--injection",
    type=click.Choice(["concat", "add", "none"]),
    default=None,
    help="Override the preset's input injection.",
)
@click.option(
    "--init-state",
    type=click.Choice(["zeros", "noise"]),
    default=None,
    help="Override the preset's initial recurrent state.",
)
@click.option("--norm", type=click.Choice(["pre", "sandwich"]), default=None, help="Override norm placement.")
@click.option(
    "--backprop-depth",
    type=int,
    default=None,
    help="Backpropagate through only the last k iterations [default: all].",
)
@click.option("--resume", is_flag=True, help="Continue the run in --out from its `latest` checkpoint.")
@click.option("--overwrite", is_flag=True, help="Replace an existing run in --out.")
@click.option("--quiet", is_flag=True, help="No progress output.")
def train(
    data_dir,
    run_dir,
    preset,
    injection,
    init_state,
    norm,
    backprop_depth,
    resume,
    overwrite,
    quiet,
    **options,
):
    """Train a looped transformer on a bioS dataset at a modeled-FLOP budget.

    Prints the plan (updates, switch update, FLOPs, tokens, parameters, estimated time), trains,
    keeps weights at each budget fraction under OUT/checkpoints/<fraction>/ and a resumable
    OUT/checkpoints/latest, and logs every update to OUT/metrics.jsonl."""
    from biosrecall.train.bios_task import train_bios
    from biosrecall.train.loop import Interrupted, TrainingDiverged
    from biosrecall.train.progress import make_reporter

    config = TrainConfig(**options)
    overrides = {
        "injection": injection,
        "init_state": init_state,
        "norm": norm,
        "backprop_depth": backprop_depth,
    }
    reporter = make_reporter(quiet, config.log_every)
    try:
        result = train_bios(data_dir, run_dir, config, preset, overrides, resume, overwrite, reporter)
    except (TrainingDiverged, Interrupted) as exc:
        click.echo(f"error: {exc}", err=True)
        raise SystemExit(130 if isinstance(exc, Interrupted) else 1) from None
    if not quiet:
        click.echo(
            f"trained {result.updates} updates, {result.flops:.3e} FLOPs in {result.wall_seconds:.1f}s"
        )
    for fraction, path in result.checkpoints.items():
        click.echo(f"checkpoint {fraction:g}: {path}")
