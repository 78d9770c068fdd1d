"""The paper's Figure 1 end to end: dataset, three schedules at one matched FLOP budget, recall to K=64.

    from biosrecall.experiments.figure1 import run_figure1
    result = run_figure1("runs/figure1", preset="quick")

Layout of the output folder (every file readable from a notebook):

    OUT/figure1.json                      resolved preset, budget, seeds, versions, what was run
    OUT/data/                             the bioS dataset (generated when missing)
    OUT/runs/<schedule>/                  one run folder per schedule (see `biosrecall train`)
    OUT/recall_curve.{csv,parquet}        long-format recall table (every run, fraction, depth)
    OUT/summary.csv                       bits per person at K = 1, 4, 16, 64 per run and fraction
    OUT/figure1.{png,pdf}                 the figure
    OUT/figure5.{png,pdf}, fixed_sweep*   with `fixed_sweep`: fixed-depth runs (the paper's Figure 5)

Rerunning skips finished runs and resumes interrupted ones; recall results are cached per checkpoint.
"""

from __future__ import annotations

import shutil
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from biosrecall.atomic import atomic_write_json, atomic_write_text
from biosrecall.errors import BiosrecallError
from biosrecall.eval.curves import recall_curves, summary_table, write_tables
from biosrecall.eval.plots import plot_recall_curves
from biosrecall.train.checkpoint import latest_checkpoint, list_checkpoints
from biosrecall.train.config import TrainConfig
from biosrecall.train.run_dir import versions

# The paper's three schedules, in legend order: folder name -> schedule spec.
FIGURE1_SCHEDULES = {
    "fixed_k4": "fixed:4",
    "fixed_first_k4_80": "fixed_first:k0=4,switch=0.8,finish=uniform",
    "uniform_1_16": "uniform:1-16",
}
FRACTIONS = (0.45, 1.0)


@dataclass(frozen=True)
class Figure1Preset:
    """One size of the experiment. The budget is what `fixed:4` spends in `budget_updates` updates."""

    people: int
    """People in the dataset (more people = more facts to store = a harder task)."""
    model_preset: str
    """Model preset (see `biosrecall flops`)."""
    batch_size: int
    """Sequences per update."""
    seq_len: int
    """Tokens per sequence (several whole biographies)."""
    budget_updates: int
    """The matched budget, as a number of fixed K=4 updates."""
    lr: float
    """Peak learning rate (same for every schedule)."""
    max_depth: int = 64
    """Serving depths evaluated: 1..max_depth."""
    eval_people: int | None = None
    """Score recall on the first N people only (None: everyone); the sweep to K=64 dominates eval time."""
    model_overrides: tuple[tuple[str, Any], ...] = ()
    """Architecture changes from the model preset, e.g. (("injection", "add"),)."""


FIGURE1_PRESETS = {
    # Smoke test, demo and CI: well under a minute per run on a 2-core CPU; a 40-person task that a
    # 41k-parameter model partly learns, so the curves already differ by schedule.
    "quick": Figure1Preset(
        people=40, model_preset="bios-tiny", batch_size=8, seq_len=128, budget_updates=300, lr=1e-2
    ),
    # The laptop-class reproduction, sized by measurement (README, "Sizing the default"): at this
    # budget and lr, fixed K=4 recalls 20.6 of 33.4 bits at K=4 at 45% with 700 people (23.6 with
    # 500, 4.6 with 1,000) and 33.4 at 100%, so the 45% panel is neither empty nor saturated.
    "default": Figure1Preset(
        people=700,
        model_preset="bios-cpu",
        batch_size=16,
        seq_len=256,
        budget_updates=800,
        lr=1e-2,
        eval_people=250,
    ),
}


@dataclass
class Figure1Result:
    out_dir: Path
    runs: dict[str, Path]
    table: Any
    summary: Any
    figures: list[Path]


def run_figure1(
    out_dir: str | Path,
    preset: str = "quick",
    *,
    budget: float | None = None,
    fixed_sweep: tuple[int, ...] = (),
    seed: int = 0,
    device: str = "auto",
    threads: int | None = None,
    reporter_factory=None,
) -> Figure1Result:
    """Generate (if needed), train every schedule at one budget, evaluate, and draw the figure."""
    settings = _resolve(preset)
    out_dir = Path(out_dir)
    config = TrainConfig(
        batch_size=settings.batch_size,
        seq_len=settings.seq_len,
        lr=settings.lr,
        seed=seed,
        device=device,
        threads=threads,
        checkpoint_fractions=FRACTIONS,
        budget=budget,
        budget_of=None if budget is not None else f"fixed:4:{settings.budget_updates}",
    )
    data_dir = _prepare(out_dir, settings, config, seed, fixed_sweep)
    _write_record(out_dir, preset, settings, config, fixed_sweep)
    schedules = dict(FIGURE1_SCHEDULES)
    runs = {name: _train(out_dir / "runs" / name, data_dir, replace(config, schedule=spec), settings, reporter_factory)
            for name, spec in schedules.items()}  # fmt: skip
    table = recall_curves(
        list(runs.values()), FRACTIONS, settings.max_depth, device=device, people=settings.eval_people
    )
    figures = _publish(out_dir, table, "figure1")
    if fixed_sweep:
        sweep = {
            f"fixed_k{k}": _train(out_dir / "runs" / f"fixed_k{k}", data_dir,
                                  replace(config, schedule=f"fixed:{k}"), settings, reporter_factory)
            for k in fixed_sweep
        }  # fmt: skip
        sweep_table = recall_curves(
            list(sweep.values()), FRACTIONS, settings.max_depth, device=device, people=settings.eval_people
        )
        figures += _publish(out_dir, sweep_table, "figure5", table_name="fixed_sweep")
        runs.update(sweep)
    return Figure1Result(out_dir, runs, table, summary_table(table), figures)


def _resolve(preset: str) -> Figure1Preset:
    if preset not in FIGURE1_PRESETS:
        raise BiosrecallError(
            f"unknown figure1 preset {preset!r}; choose one of: {', '.join(FIGURE1_PRESETS)}"
        )
    return FIGURE1_PRESETS[preset]


def _prepare(out_dir: Path, settings: Figure1Preset, config: TrainConfig, seed: int, sweep) -> Path:
    """Dataset plus a plan of every run, so a bad budget or device fails before anything trains.

    A mistake found here removes the output folder if this call created it: nothing half-made stays.
    """
    from biosrecall.bios import load_dataset
    from biosrecall.train.bios_task import bios_model_config
    from biosrecall.train.distributed import resolve_device
    from biosrecall.train.setup import make_plan

    if out_dir.exists() and not out_dir.is_dir():
        raise BiosrecallError(f"output path {out_dir} exists and is not a folder")
    created = not out_dir.exists()
    try:
        config.validate()
        resolve_device(config.device)
        out_dir.mkdir(parents=True, exist_ok=True)
        data_dir = _dataset(out_dir / "data", settings, seed)
        model_config = bios_model_config(
            settings.model_preset, load_dataset(data_dir), dict(settings.model_overrides)
        )
        for spec in [*FIGURE1_SCHEDULES.values(), *(f"fixed:{k}" for k in sweep)]:
            make_plan(model_config, replace(config, schedule=spec))
    except BiosrecallError:
        if created:
            shutil.rmtree(out_dir, ignore_errors=True)
        raise
    return data_dir


def _dataset(data_dir: Path, settings: Figure1Preset, seed: int) -> Path:
    """Reuse OUT/data when it holds the dataset this preset asks for; generate it otherwise."""
    from biosrecall.bios import generate_dataset, load_dataset

    if (data_dir / "manifest.json").is_file():
        dataset = load_dataset(data_dir)
        found = (dataset.num_people, dataset.manifest.get("seed"))
        if found != (settings.people, seed):
            raise BiosrecallError(
                f"{data_dir} holds a dataset of {found[0]} people (seed {found[1]}), but this preset needs "
                f"{settings.people} people (seed {seed}); use another --out"
            )
        return data_dir
    return generate_dataset(data_dir, people=settings.people, seed=seed, overwrite=True)


def _train(
    run_dir: Path, data_dir: Path, config: TrainConfig, settings: Figure1Preset, reporter_factory
) -> Path:
    """Train one run unless it is finished; resume it when it was interrupted."""
    from biosrecall.train.bios_task import train_bios

    if 1.0 in list_checkpoints(run_dir):
        return run_dir
    resume = latest_checkpoint(run_dir) is not None
    reporter = reporter_factory(run_dir.name) if reporter_factory else None
    overrides = dict(settings.model_overrides)
    train_bios(data_dir, run_dir, config, settings.model_preset, overrides, resume, not resume, reporter)
    return run_dir


def _publish(out_dir: Path, table, figure_name: str, table_name: str = "recall_curve") -> list[Path]:
    write_tables(table, out_dir, table_name)
    summary_name = "summary.csv" if table_name == "recall_curve" else f"{table_name}_summary.csv"
    atomic_write_text(out_dir / summary_name, summary_table(table).to_csv(index=False))
    plot_recall_curves(table, out_path=out_dir / figure_name)
    return [out_dir / f"{figure_name}.png", out_dir / f"{figure_name}.pdf"]


def _write_record(out_dir: Path, preset: str, settings: Figure1Preset, config: TrainConfig, sweep) -> None:
    atomic_write_json(
        out_dir / "figure1.json",
        {
            "preset": preset,
            "settings": asdict(settings),
            "train_config": config.to_dict(),
            "schedules": FIGURE1_SCHEDULES,
            "fractions": list(FRACTIONS),
            "fixed_sweep": list(sweep),
            "versions": versions(),
        },
    )
