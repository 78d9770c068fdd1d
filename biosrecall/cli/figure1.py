"""`biosrecall figure1`: reproduce the paper's Figure 1 (and optionally Figure 5) in one command.

biosrecall figure1 --out runs/figure1 --preset quick      # a few minutes: the smoke test
biosrecall figure1 --out runs/figure1                     # the default, sized for a 2-core CPU

Ctrl-C (or SIGTERM) stops it with exit code 130 and the line "rerun the same command to continue";
the same command then carries on where it stopped. A rerun with other settings is refused (exit 2)
unless `--overwrite` asks for the output to be replaced.
"""

from __future__ import annotations

from pathlib import Path

import click

RERUN_HINT = "rerun the same command to continue"


def parse_depth_list(ctx, param, value: str | None) -> tuple[int, ...]:
    if not value:
        return ()
    try:
        depths = tuple(int(part) for part in value.split(","))
    except ValueError:
        raise click.BadParameter(f"expected comma-separated depths such as 1,2,4,8, got {value!r}") from None
    if any(k < 1 for k in depths):
        raise click.BadParameter(f"depths must be at least 1, got {value!r}")
    return depths


@click.command()
@click.option("--out", "out_dir", required=True, type=click.Path(path_type=Path), help="Output folder.")
@click.option("--preset", default="default", show_default=True, help="Experiment size: quick or default.")
@click.option(
    "--budget",
    type=float,
    default=None,
    help="Matched FLOP budget [default: the preset's, what fixed K=4 spends in its updates].",
)
@click.option(
    "--fixed-sweep",
    callback=parse_depth_list,
    default=None,
    help="Also train fixed-depth runs at these depths (e.g. 1,2,4,8) and plot them (Figure 5).",
)
@click.option("--seed", default=0, show_default=True, help="Seeds the dataset, weights, batches and depths.")
@click.option("--device", default="auto", show_default=True, help="auto, cpu or cuda.")
@click.option(
    "--threads", type=click.IntRange(min=1), default=None, help="CPU threads [default: one per core]."
)
@click.option(
    "--overwrite",
    is_flag=True,
    help="Replace an output made with other settings (its dataset, runs and results) instead of "
    "refusing it. An output made with these settings is continued either way.",
)
@click.option("--quiet", is_flag=True, help="No progress output.")
def figure1(out_dir, preset, budget, fixed_sweep, seed, device, threads, overwrite, quiet):
    """Train fixed K=4, fixed-first (K0=4 for 80%, then uniform 1..16) and uniform 1..16 at one matched
    FLOP budget, evaluate their 45% and 100% checkpoints at serving depths 1..64, and draw Figure 1;
    score adaptive-depth serving of the 100% checkpoints (exit_frontier.*, exit_headline.*).

    Rerunning the same command skips finished runs and resumes interrupted ones (Ctrl-C stops with
    exit code 130); a rerun with other settings is refused unless --overwrite."""
    from biosrecall.experiments.figure1 import run_figure1
    from biosrecall.train.loop import Interrupted
    from biosrecall.train.progress import make_reporter

    def reporter_for(run_name: str):
        reporter = make_reporter(quiet, log_every=100)
        reporter.message(f"training {run_name}")
        return reporter

    try:
        result = run_figure1(
            out_dir, preset, budget=budget, fixed_sweep=fixed_sweep, seed=seed, device=device,
            threads=threads, overwrite=overwrite, reporter_factory=reporter_for,
        )  # fmt: skip
    except (Interrupted, KeyboardInterrupt) as exc:
        # Finished runs and recall caches are kept and a stopped run saved its progress, so no option
        # is needed to carry on: the same command resumes.
        stopped = str(exc) if isinstance(exc, Interrupted) else "interrupted"
        click.echo(f"{stopped}; {RERUN_HINT}", err=True)
        raise SystemExit(130) from None
    click.echo(result.summary.to_string(index=False, float_format=lambda x: f"{x:.2f}"))
    if result.headline is not None:
        click.echo("mean depth to reach 95% of each run's best recall, fixed against adaptive (100% budget):")
        click.echo(result.headline.to_string(index=False, float_format=lambda x: f"{x:.3g}"))
    for path in result.figures:
        click.echo(f"figure: {path}")
