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
    OUT/exit_frontier.{csv,parquet,png,pdf}, exit_headline.{csv,parquet}
                                          adaptive-depth serving of the 100% checkpoints
                                          (`biosrecall.eval.serving.write_serving_results`)
    OUT/figure5.{png,pdf}, fixed_sweep*   with `fixed_sweep`: fixed-depth runs (the paper's Figure 5)

The whole call holds the output's lock (`biosrecall.locking.output_lock`), so two processes never
write one output. Calling again with the same settings continues: finished runs are kept, an
interrupted one resumes from its last save, and recall results are cached per checkpoint. An output
made with other settings (preset, people, budget, seed, anything its results depend on, as recorded
in figure1.json) is refused with one `BiosrecallError` line naming the difference, before anything
is touched; `overwrite=True` replaces it instead, once the new settings have been checked.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from biosrecall.atomic import atomic_write_json, atomic_write_text
from biosrecall.errors import BiosrecallError
from biosrecall.eval.curves import recall_curves, summary_table
from biosrecall.eval.plots import plot_recall_curves
from biosrecall.eval.serving import serving_names, write_serving_results
from biosrecall.files import read_json_object, require_keys
from biosrecall.locking import ASIDE_SUFFIX, output_lock, temporary_prefix
from biosrecall.outputs import FIGURE_FORMATS, TABLE_FORMATS, save_figure, write_table
from biosrecall.train.checkpoint import latest_checkpoint, list_checkpoints
from biosrecall.train.config import RESUMABLE_DIFFERENCES, TrainConfig, resolve_seq_len
from biosrecall.train.loop import Interrupted
from biosrecall.train.run_dir import versions

# The paper's three schedules, in legend order: folder name -> schedule spec.
FIGURE1_SCHEDULES = {
    "fixed_k4": "fixed:4",
    "fixed_first_k4_80": "fixed_first:k0=4,switch=0.8,finish=uniform",
    "uniform_1_16": "uniform:1-16",
}
FRACTIONS = (0.45, 1.0)
RECORD, DATA, RUNS = "figure1.json", "data", "runs"
# Each result set: figure name -> (table name, summary file).
RESULTS = {"figure1": ("recall_curve", "summary.csv"), "figure5": ("fixed_sweep", "fixed_sweep_summary.csv")}
_SHOWN_DIFFERENCES = 4  # a refusal names this many differing settings, then counts the rest


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
    headline: Any = None  # adaptive against fixed serving depth (`biosrecall.eval.serving`)


def run_figure1(
    out_dir: str | Path,
    preset: str = "quick",
    *,
    budget: float | None = None,
    fixed_sweep: tuple[int, ...] = (),
    seed: int = 0,
    device: str = "auto",
    threads: int | None = None,
    overwrite: bool = False,
    reporter_factory=None,
) -> Figure1Result:
    """Generate (if needed), train every schedule at one budget, evaluate, and draw the figure.

    Continues an output made with the same settings; refuses one made with other settings unless
    `overwrite`. Raises `Interrupted` (naming the run) when Ctrl-C or SIGTERM stops a run's training.
    """
    settings = _resolve(preset)
    out_dir = Path(out_dir)
    config = _train_config(settings, budget, seed, device, threads)
    record = _record(preset, settings, config, fixed_sweep)
    with output_lock(out_dir):
        data_dir = _prepare(out_dir, record, settings, config, fixed_sweep, overwrite)
        atomic_write_json(out_dir / RECORD, record)
        trainer = (out_dir / RUNS, data_dir, config, settings, reporter_factory)
        runs = _train_all(FIGURE1_SCHEDULES, *trainer)
        table = _evaluate(runs, settings, device)
        figures = _write_results(out_dir, table, "figure1")
        final, people = str(max(FRACTIONS)), settings.eval_people
        served, headline = write_serving_results(
            out_dir, list(runs.values()), final, settings.max_depth, device=device, people=people
        )
        if fixed_sweep:
            sweep = _train_all({f"fixed_k{k}": f"fixed:{k}" for k in fixed_sweep}, *trainer)
            figures += _write_results(out_dir, _evaluate(sweep, settings, device), "figure5")
            runs.update(sweep)
    return Figure1Result(out_dir, runs, table, summary_table(table), figures + served, headline)


def _resolve(preset: str) -> Figure1Preset:
    if preset not in FIGURE1_PRESETS:
        raise BiosrecallError(
            f"unknown figure1 preset {preset!r}; choose one of: {', '.join(FIGURE1_PRESETS)}"
        )
    return FIGURE1_PRESETS[preset]


def _train_config(settings: Figure1Preset, budget, seed: int, device: str, threads) -> TrainConfig:
    """Every schedule's trainer settings; the budget is the preset's unless `budget` is given."""
    return TrainConfig(
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


def _record(preset: str, settings: Figure1Preset, config: TrainConfig, sweep) -> dict[str, Any]:
    """What figure1.json holds, as it reads back from JSON (lists, not tuples), so it compares equal."""
    record = {
        "preset": preset,
        "settings": asdict(settings),
        "train_config": config.to_dict(),
        "schedules": FIGURE1_SCHEDULES,
        "fractions": list(FRACTIONS),
        "fixed_sweep": list(sweep),
        "versions": versions(),
    }
    return json.loads(json.dumps(record))


def _prepare(out_dir: Path, record, settings: Figure1Preset, config: TrainConfig, sweep, overwrite) -> Path:
    """Check the settings, what the output already holds, and a plan of every run before anything trains.

    A mistake found here leaves the output as it was: a folder this call created is removed, and what
    `overwrite` moved aside is put back.
    """
    from biosrecall.train.distributed import resolve_device

    if out_dir.exists() and not out_dir.is_dir():
        raise BiosrecallError(f"output path {out_dir} exists and is not a folder")
    created, aside = not out_dir.exists(), None
    try:
        config.validate()
        resolve_device(config.device)
        differences = _differences(out_dir, record, settings, config.seed)
        if differences and not overwrite:
            raise _refusal(out_dir, differences)
        out_dir.mkdir(parents=True, exist_ok=True)
        aside = _move_aside(out_dir) if differences else None
        data_dir = _dataset(out_dir / DATA, settings, config.seed)
        _check_plans(data_dir, settings, config, sweep)
    except BaseException:
        if aside is not None:
            _put_back(out_dir, aside)
        if created:
            shutil.rmtree(out_dir, ignore_errors=True)
        raise
    if aside is not None:
        shutil.rmtree(aside, ignore_errors=True)
    return data_dir


def _check_plans(data_dir: Path, settings: Figure1Preset, config: TrainConfig, sweep) -> None:
    """Plan every run and build its batch source, so a budget too small for one update or a sequence
    too short for a biography fails before the first run trains."""
    from biosrecall.train.bios_training import bios_training_task
    from biosrecall.train.setup import make_plan

    task = bios_training_task(data_dir, settings.model_preset, dict(settings.model_overrides))
    model_config = task.model_config()
    task.batch_source(config, resolve_seq_len(config, model_config, task.preset))
    for spec in [*FIGURE1_SCHEDULES.values(), *(f"fixed:{k}" for k in sweep)]:
        make_plan(model_config, replace(config, schedule=spec))


def _identity(record: dict[str, Any]) -> dict[str, Any]:
    """The settings a figure1 record's results depend on, under the names a refusal shows them by."""
    train = {k: v for k, v in record["train_config"].items() if k not in RESUMABLE_DIFFERENCES}
    budget, budget_of = train.pop("budget", None), train.pop("budget_of", None)
    return {
        "preset": record["preset"],
        **record["settings"],
        **train,
        "budget": budget_of if budget is None else budget,
        "schedules": record.get("schedules"),
        "fractions": record.get("fractions"),
    }


def _differences(out_dir: Path, record: dict[str, Any], settings: Figure1Preset, seed: int) -> list[str]:
    """How what `out_dir` already holds differs from what these settings make; [] when it can be reused."""
    path = out_dir / RECORD
    if os.path.lexists(path):
        try:
            stored = read_json_object(path, "figure1 record", required=("preset", "settings", "train_config"))
            for key in ("settings", "train_config"):
                require_keys(stored[key], (), f"figure1 record {key}", path)
        except BiosrecallError as exc:
            return [str(exc)]
        old, new = _identity(stored), _identity(record)
        keys = dict.fromkeys([*new, *old])  # this call's order: the stored record's keys are sorted
        changed = [
            f"{key} was {old.get(key)}, now {new.get(key)}" for key in keys if old.get(key) != new.get(key)
        ]
        if changed:
            return changed
    elif os.path.lexists(out_dir / RUNS):
        return [f"it holds {RUNS}/ but no {RECORD} saying how they were trained"]
    return _dataset_differences(out_dir / DATA, settings, seed)


def _dataset_differences(data_dir: Path, settings: Figure1Preset, seed: int) -> list[str]:
    """Whether OUT/data is the dataset these settings ask for ([] also when there is none yet)."""
    from biosrecall.bios import load_dataset

    if not os.path.lexists(data_dir):
        return []
    try:
        dataset = load_dataset(data_dir)
    except BiosrecallError as exc:
        return [f"its dataset is unusable: {exc}"]
    found = (dataset.num_people, dataset.manifest.get("seed"))
    if found == (settings.people, seed):
        return []
    return [f"its dataset has {found[0]} people (seed {found[1]}), now {settings.people} (seed {seed})"]


def _refusal(out_dir: Path, differences: list[str]) -> BiosrecallError:
    shown = "; ".join(differences[:_SHOWN_DIFFERENCES])
    if len(differences) > _SHOWN_DIFFERENCES:
        shown += f"; and {len(differences) - _SHOWN_DIFFERENCES} more"
    return BiosrecallError(
        f"{out_dir} was made with other settings ({shown}); rerun with the settings it was made with to "
        "continue it, pass --overwrite to replace it, or choose another --out"
    )


def _made_names() -> list[str]:
    """Every entry figure1 makes in its output folder: what `overwrite` replaces."""
    names = [RECORD, DATA, RUNS, *serving_names()]
    for figure, (table, summary) in RESULTS.items():
        names += [f"{figure}.{fmt}" for fmt in FIGURE_FORMATS] + [f"{table}.{fmt}" for fmt in TABLE_FORMATS]
        names.append(summary)
    return names


def _move_aside(out_dir: Path) -> Path | None:
    """Move what figure1 made in `out_dir` into one hidden sibling folder; returns it (None: nothing).

    The folder is deleted once the new settings are checked; should this process die first, the next
    `output_lock(out_dir)` removes it. The record moves last, so until everything else has gone a
    plain rerun still refuses the output rather than reusing part of it.
    """
    present = [name for name in _made_names() if os.path.lexists(out_dir / name)]
    if not present:
        return None
    target = out_dir.resolve()
    aside = Path(tempfile.mkdtemp(prefix=temporary_prefix(target), suffix=ASIDE_SUFFIX, dir=target.parent))
    for name in sorted(present, key=lambda name: name == RECORD):
        os.replace(out_dir / name, aside / name)
    return aside


def _put_back(out_dir: Path, aside: Path) -> None:
    """Undo `_move_aside`: what was made meanwhile (a new dataset) gives way to what was there."""
    for entry in aside.iterdir():
        made = out_dir / entry.name
        if made.is_dir() and not made.is_symlink():
            shutil.rmtree(made)
        elif os.path.lexists(made):
            made.unlink()
        os.replace(entry, made)
    aside.rmdir()


def _dataset(data_dir: Path, settings: Figure1Preset, seed: int) -> Path:
    """OUT/data: kept when present (`_differences` has checked it), generated otherwise."""
    from biosrecall.bios import generate_dataset

    if os.path.lexists(data_dir):
        return data_dir
    return generate_dataset(data_dir, people=settings.people, seed=seed)


def _train_all(schedules: dict[str, str], runs_dir: Path, data_dir, config, settings, reporter_factory):
    """Train `schedules` (run name -> spec) one after another in `runs_dir`; returns name -> run folder."""
    return {
        name: _train(runs_dir / name, data_dir, replace(config, schedule=spec), settings, reporter_factory)
        for name, spec in schedules.items()
    }


def _train(
    run_dir: Path, data_dir: Path, config: TrainConfig, settings: Figure1Preset, reporter_factory
) -> Path:
    """Train one run unless it is finished; resume it when it was interrupted."""
    from biosrecall.train.bios_training import train_bios

    if 1.0 in list_checkpoints(run_dir):
        return run_dir
    resume = latest_checkpoint(run_dir) is not None
    reporter = reporter_factory(run_dir.name) if reporter_factory else None
    overrides = dict(settings.model_overrides)
    try:
        train_bios(data_dir, run_dir, config, settings.model_preset, overrides, resume, not resume, reporter)
    except Interrupted:
        # The loop's own message points at `train --resume`; here a plain call again continues.
        raise Interrupted(f"interrupted while training {run_dir.name}; its progress is saved") from None
    return run_dir


def _evaluate(runs: dict[str, Path], settings: Figure1Preset, device: str):
    """The long recall table of `runs` at every kept fraction and depth 1..max_depth."""
    return recall_curves(
        list(runs.values()), FRACTIONS, settings.max_depth, device=device, people=settings.eval_people
    )


def _write_results(out_dir: Path, table, figure_name: str) -> list[Path]:
    """Write the recall table (CSV + parquet), its summary (CSV) and the figure; return the figure's files."""
    table_name, summary_name = RESULTS[figure_name]
    write_table(table, out_dir / table_name)
    atomic_write_text(out_dir / summary_name, summary_table(table).to_csv(index=False))
    return save_figure(plot_recall_curves(table), out_dir / figure_name)
