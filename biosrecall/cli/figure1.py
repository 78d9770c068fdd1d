"""`biosrecall figure1`: reproduce the paper's Figure 1 (and optionally Figure 5) in one command.

biosrecall figure1 --out runs/figure1 --preset quick      # a few minutes: the smoke test
biosrecall figure1 --out runs/figure1                     # the default, sized for a 2-core CPU
biosrecall figure1 --out runs/study --seeds 0,1,2 --update-matched --fixed-sweep 2,8   # the README study
biosrecall figure1 --out runs/study --plan     # each claim's verdict and seeds to decide; trains nothing
biosrecall figure1 --out runs/study --archive docs/results/study   # the study without weights, to commit

Ctrl-C (or SIGTERM) stops it with exit code 130 and the line "rerun the same command to continue";
the same command then carries on where it stopped. A rerun with other settings is refused (exit 2)
unless `--overwrite` asks for the output to be replaced.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import click

from biosrecall.cli.config_file import config_option
from biosrecall.cli.options import NumberList, Real, field_options, parse_overrides, train_field_option
from biosrecall.cli.study import OUTPUT, QUIET, SEEDS, THREADS, WORKERS, archive_option, run_engine_command
from biosrecall.experiments.study import BUDGET_MODES, Figure1Options, StudyOptions, figure1_command
from biosrecall.numbers import DEPTH, rates
from biosrecall.train.config import LIMITS

# Each list's numbers are read and checked by its type (`NumberList`: depths, rates); the callbacks
# add the rules of a list (no repeats, not too many).
DEPTHS = NumberList(DEPTH, "depths", "1,2,4,8")
LEARNING_RATES = NumberList(LIMITS["lr"], "learning rates", "3e-3,1e-2")
MULTIPLES = NumberList(rates(0.0, low_open=True), "budget multiples", "0.5,1,2")
# What the options of `Figure1Options` and `StudyOptions` take beyond their fields' types (their help
# is the docstring under each field); None: an option written below, or none.
CHECKED = {
    "study": None,
    "log": None,
    "budget": {"type": Real(LIMITS["budget"])},
    "seeds": SEEDS,
    "lr_grid": {"type": LEARNING_RATES},
    "model_overrides": {
        "flag": "--model-override",
        "name": "model_override",
        "type": str,
        "default": (),
        "multiple": True,
        "callback": parse_overrides,
    },
    "fixed_sweep": {"type": DEPTHS},
    "budgets": {"type": MULTIPLES},
    "budget_mode": {"type": click.Choice(BUDGET_MODES)},
}


@click.command()
@config_option()
@OUTPUT
@field_options(Figure1Options, CHECKED)
@field_options(StudyOptions, CHECKED)
@train_field_option("log")
@WORKERS
@THREADS
@click.option(
    "--overwrite",
    is_flag=True,
    help="Replace an output made with other settings (its dataset, runs and results) instead of "
    "refusing it. An output made with these settings is continued either way.",
)
@QUIET
@click.option(
    "--plan",
    is_flag=True,
    help="Train nothing: print each claim of the finished output --out with its verdict, seed count "
    "and seeds to decide (a planning estimate), and the command that runs that many seeds. Other "
    "options are ignored.",
)
@archive_option("--seeds or controls")
def figure1(out_dir, preset, budget, device, model_override, log, plan, **given):
    """Train fixed K=4, fixed-first (K0=4 for 80%, then uniform 1..16) and uniform 1..16 at one matched
    FLOP budget for every seed, evaluate their 45% and 100% checkpoints at serving depths 1..64, draw
    Figure 1 with seed intervals, and judge the paper's claims (claims.csv, claims.md); score
    adaptive-depth serving of every seed's 100% checkpoints (exit_frontier.*, exit_headline.*) and
    judge whether an exit criterion pays (two claims rows per schedule).

    Rerunning the same command skips finished runs and resumes interrupted ones (Ctrl-C stops with
    exit code 130), so a long study can be run in parts; adding seeds or controls continues the
    output. A rerun with other settings is refused unless --overwrite."""
    if plan:  # reads figure1.json and claims.csv only: no training, no torch
        from biosrecall.experiments.claims_plan import plan_text

        click.echo(plan_text(out_dir))
        return

    def options(study) -> Figure1Options:
        study = StudyOptions(model_overrides=model_override, **study)
        return Figure1Options(preset, budget, device, study, tuple(log))

    run_engine_command(
        ("biosrecall.experiments.figure1", "FIGURE1"),
        options,
        lambda result, options: _print(result, _more_seeds_command(out_dir, preset, options.study, budget)),
        out_dir=out_dir,
        **given,
    )


def _more_seeds_command(out_dir: Path, preset: str, study, budget: float | None = None) -> str:
    """The command that adds two seeds to this output, with its other options (finished runs are kept)."""

    seeds = study.seeds
    more = (*seeds, *range(max(seeds) + 1, max(seeds) + 3))
    return figure1_command(preset, {**asdict(study), "seeds": more}, out_dir, budget)


def _print(result, more_seeds: str) -> None:
    """The summary (one row per run, schedule and budget fraction), the claims, the serving headline,
    then the paths of the claims, the summary and the figures."""
    from biosrecall.experiments.claims import claims_markdown, earlier_looks

    shown = [
        "run",
        "schedule",
        "fraction",
        "K=1",
        "K=4",
        "K=16",
        "K=64",
        "mean K<=16",
        "mean K>16",
        "min",
        "n_seeds",
    ]
    summary = result.tables["summary"].rename(columns={"group": "run"})
    summary = summary[[c for c in shown if c in summary]]
    click.echo("recalled bits per person, mean over seeds (intervals in summary.csv):")
    click.echo(summary.to_string(index=False, float_format=lambda x: f"{x:.2f}"))
    n_seeds = int(result.claims["n_seeds"].max())
    if n_seeds > 1:
        click.echo(f"claims, judged over {n_seeds} seeds (95% intervals):")
    else:  # why every verdict is inconclusive, and how to add seeds
        click.echo(
            "claims, from 1 seed: one seed cannot decide a claim (no interval), so every measured claim this "
            f"size can test reads inconclusive; add seeds with the same options plus --seeds, e.g.\n  {more_seeds}"
        )
    columns = ["claim", "statement", "metric", "threshold", "mean", "low", "high", "n_seeds", "verdict"]
    claims = result.claims[[c for c in columns if c in result.claims]]
    looks = earlier_looks(result.out_dir, n_seeds) if "claim" in claims else []
    click.echo(claims_markdown(claims, looks))
    headline = result.tables.get("exit_headline")
    if headline is not None:
        click.echo("mean depth to reach 95% of each run's best recall, fixed against adaptive (100% budget):")
        click.echo(headline.to_string(index=False, float_format=lambda x: f"{x:.3g}"))
    click.echo(f"claims:  {result.out_dir / 'claims.md'}")
    click.echo(f"summary: {result.out_dir / 'summary.md'}")
    for path in result.figures:
        click.echo(f"figure:  {path}")
