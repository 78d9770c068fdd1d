"""Knowledge capacity at matched exposures: stored bits of looped and standard models against people.

    from biosrecall.experiments.capacity import CapacityOptions, run_capacity
    options = CapacityOptions(preset="bios-tiny", people=(50, 100, 200), seeds=(0, 1, 2), exposures=100)
    result = run_capacity("runs/capacity", options)     # or: biosrecall capacity --out runs/capacity ...

For every people count it generates a dataset, then trains, at every seed, the three schedules of
Figure 1 on the looped preset (fixed K=4, fixed-first, uniform 1..16) and its two standard-transformer
baselines (`<preset>-std-params`, `<preset>-std-flops`, at their one depth), each run as long as it
takes to show every person's biography `exposures` times (`biosrecall.bios.exposures`), so every
model sees the same data and only what it spends differs. Each final checkpoint is scored by
`biosrecall.experiments.capacity_scoring` at the serving depths (a baseline at depth 1 only), and
`biosrecall.experiments.capacity_results` writes the tables, the claims and the figure. Layout:

    OUT/capacity.json                     settings, seeds, people, versions, machine, the runs
    OUT/data/people<N>/                   the bioS dataset of N people (seed `DATA_SEED`)
    OUT/runs/seed<S>/people<N>/<model>/   one run folder each (model: fixed_k4, ..., std_params)
    OUT/runs/.sweep/                      each run's spec, record and log (`biosrecall.sweep`)
    OUT/capacity*.csv/.md/.png, OUT/capacity_claims.*   (`capacity_results`)

Runs go through the sweep engine like figure1's (`biosrecall.experiments.study_engine`): the same
command run again skips finished runs and resumes stopped ones, and more seeds or people counts only
train what is new. Other settings (preset, exposures, batch, sequence length, lr) are refused on an
existing output. The whole call holds the output's lock (`biosrecall.locking.output_lock`).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from biosrecall.bios import generate_dataset, load_dataset
from biosrecall.compute.flops import param_counts
from biosrecall.compute.schedules import MAX_UPDATES
from biosrecall.errors import BiosrecallError
from biosrecall.experiments.capacity_results import write_capacity_results
from biosrecall.experiments.capacity_scoring import score_runs
from biosrecall.experiments.study import MAIN_SCHEDULES, check_depths, check_people, check_seeds
from biosrecall.experiments.study_engine import (
    refuse_busy_runs,
    study_executor,
    train_study_runs,
    write_study_record,
)
from biosrecall.files import read_json_object
from biosrecall.locking import output_lock, scratch_folder
from biosrecall.model.presets import BASELINES as KNOWN
from biosrecall.model.presets import PRESETS
from biosrecall.numbers import EXPOSURES, check_number
from biosrecall.sizing import (
    Cost,
    check_fits,
    dataset_cost,
    describe,
    loaded_dataset_bytes,
    scoring_cost,
    shows_progress,
)
from biosrecall.sweep.jobs import SweepRun
from biosrecall.train.config import TrainConfig, resolve_seq_len
from biosrecall.train.run_folder import machine, versions
from biosrecall.train.trainer import bios_training_task, make_plan

RECORD, DATA, RUNS = "capacity.json", "data", "runs"
DATA_SEED = 0
"""Every people count's dataset seed: all seeds and models of a count train on the same people, so
two models' numbers are compared paired by seed (only the training randomness differs)."""
BASELINES = {"std_params": "std-params", "std_flops": "std-flops"}
"""Baseline run name -> the suffix of its preset (`biosrecall.model.presets.BASELINES`)."""
BASELINE_SCHEDULE = "fixed:1"  # a baseline's one depth: the only schedule it accepts
DEFAULT_PEOPLE = (50, 100, 200)
DEFAULT_DEPTHS = (1, 4, 16, 64)
IDENTITY = ("preset", "exposures", "batch_size", "seq_len", "lr")
"""What an output's runs depend on beside their people and seed: a rerun must repeat these."""


@dataclass(frozen=True)
class CapacityOptions:
    """What a capacity study trains and scores; checked on construction."""

    preset: str = "bios-cpu"
    """Looped model preset; it needs `<preset>-std-params` and `<preset>-std-flops` baselines."""
    people: tuple[int, ...] = DEFAULT_PEOPLE
    """People counts of the sweep, one dataset each."""
    seeds: tuple[int, ...] = (0,)
    """Training seeds (weights, batches, depth draws)."""
    exposures: float = 100.0
    """Mean exposures per person of every run (the 3.3 paper's 100 gives about 1 bit per parameter)."""
    batch_size: int = 8
    """Sequences per update."""
    seq_len: int | None = None
    """Tokens per sequence [default: the preset's context]."""
    lr: float = 1e-2
    """Peak learning rate of every run."""
    depths: tuple[int, ...] = DEFAULT_DEPTHS
    """Serving depths each looped model is scored at (a baseline has one, 1)."""

    def __post_init__(self) -> None:
        check_people(self.people)
        check_seeds(self.seeds)
        check_number("exposures", self.exposures, EXPOSURES)
        check_depths(self.depths)
        model_presets(self.preset)


def model_presets(preset: str) -> dict[str, tuple[str, str, str]]:
    """Run name -> (schedule, model preset, kind "looped" or "baseline") for the study of `preset`."""

    if preset not in PRESETS:
        raise BiosrecallError(f"unknown preset {preset!r}; choose one of: {', '.join(PRESETS)}")
    with_baselines = sorted({looped for looped, _, _ in KNOWN.values()})
    if any(f"{preset}-{suffix}" not in KNOWN for suffix in BASELINES.values()):
        raise BiosrecallError(
            f"preset {preset!r} has no standard-transformer baselines; choose one of: {', '.join(with_baselines)}"
        )
    runs = {name: (schedule, preset, "looped") for name, schedule in MAIN_SCHEDULES.items()}
    for name, suffix in BASELINES.items():
        runs[name] = (BASELINE_SCHEDULE, f"{preset}-{suffix}", "baseline")
    return runs


def capacity_runs(options: CapacityOptions, base: TrainConfig, datasets: dict[int, Path]) -> list[SweepRun]:
    """Every run of the study, people counts x seeds x (three schedules, two baselines): folder
    seed<S>/people<N>/<name>, `base` at the run's schedule and seed, its dataset and model preset, and
    its labels (people, name, kind: "looped" or "baseline")."""
    runs = []
    for people in options.people:
        for seed in options.seeds:
            for name, (schedule, preset, kind) in model_presets(options.preset).items():
                config = replace(base, schedule=schedule, seed=seed)
                task = {"data": datasets[people].resolve(), "preset": preset}
                labels = {"people": people, "name": name, "kind": kind}
                runs.append(SweepRun(f"seed{seed}/people{people}/{name}", "train", config, task, labels))
    return runs


@dataclass
class CapacityResult:
    out_dir: Path
    table: Any  # pandas DataFrame: one row per run and serving depth (capacity.csv)
    summary: Any  # the same over seeds: mean and 95% t interval (capacity_summary.csv)
    claims: Any  # capacity_claims.csv
    files: list[Path]


def run_capacity(
    out_dir: str | Path,
    options: CapacityOptions,
    *,
    device: str = "auto",
    threads: int | None = None,
    workers: int | None = None,
    report=None,
) -> CapacityResult:
    """Generate the datasets, train every run (skipping finished ones), score, write the results.

    Raises `BiosrecallError` for an output made with other settings, `Interrupted` when Ctrl-C stops
    training and `StudyRunFailed` when a run fails (`biosrecall.experiments.study_engine`)."""
    out_dir, base = Path(out_dir), _base_config(options, device)
    runs = capacity_runs(options, base, _dataset_dirs(out_dir, options))
    record = _record(options, base, runs)
    executor = study_executor(workers, threads, device)
    check_study_size(options, out_dir, executor.slots(), report)
    with output_lock(out_dir):
        _prepare(out_dir, options, record, runs, report)
        write_study_record(out_dir / RECORD, json.dumps(record, indent=2, sort_keys=True) + "\n")
        train_study_runs(out_dir / RUNS, runs, executor, report)
        if report is not None:  # cached scores are read back at once; a fresh one takes about a run's time
            report(f"scoring {len(runs)} final checkpoint(s), {executor.slots()} at a time")
        table = score_runs(runs, out_dir / RUNS, options, device, executor.slots(), executor.threads)
        written = write_capacity_results(out_dir, table)
    return CapacityResult(out_dir, table, written.summary, written.claims, written.files)


def _base_config(options: CapacityOptions, device: str):
    """Every run's trainer settings before its schedule and seed: sized by exposures, one checkpoint."""

    return TrainConfig(
        schedule=MAIN_SCHEDULES["fixed_k4"],
        exposures=float(options.exposures),
        batch_size=options.batch_size,
        seq_len=options.seq_len,
        lr=options.lr,
        seed=options.seeds[0],
        device=device,
        checkpoint_fractions=(1.0,),
    )


def _record(options: CapacityOptions, base, runs: list[SweepRun]) -> dict[str, Any]:
    """What capacity.json holds, as it reads back from JSON (lists, not tuples), so it compares equal."""
    record = {
        "settings": {key: getattr(options, key) for key in IDENTITY},
        "people": options.people,
        "seeds": options.seeds,
        "depths": options.depths,
        "data_seed": DATA_SEED,
        "models": {
            name: dict(zip(("schedule", "preset", "kind"), v, strict=True))
            for name, v in model_presets(options.preset).items()
        },  # fmt: skip
        "train_config": base.to_dict(),
        "runs": [run.name for run in runs],
        "versions": versions(),
        "machine": machine(),
    }
    return json.loads(json.dumps(record))


def check_study_size(options: CapacityOptions, out_dir: Path | None, workers: int, report=None) -> None:
    """Refuse a study larger than the machine before anything is written (`biosrecall.sizing`): the
    datasets still to make, every run process holding its dataset (`workers` at a time) and every
    scoring process its evaluation set; a long preparation of the data says what it will take.
    `out_dir` None: the datasets go to a temporary folder (`--plan`)."""

    largest, depth = max(options.people), max(options.depths)
    missing = [n for n in options.people if out_dir is None or not os.path.lexists(_dataset_dir(out_dir, n))]
    prepare = Cost()
    for people in missing:
        prepare = prepare.then(dataset_cost(people))
    prepare = prepare.then(Cost(loaded_dataset_bytes(largest)))  # planning reads every dataset
    cost = prepare
    if out_dir is not None:  # --plan trains and scores nothing
        scoring = scoring_cost(largest, depth)
        cost = cost.then(Cost(workers * loaded_dataset_bytes(largest))).then(Cost(workers * scoring.memory))
    fewer = "use smaller --people counts" + (" or fewer --workers" if workers > 1 and out_dir else "")
    check_fits(f"--people {largest:,}", cost, out_dir or tempfile.gettempdir(), fewer)
    if report is not None and shows_progress(prepare):
        report(f"preparing {len(missing)} dataset(s) of up to {largest:,} people: {describe(prepare)}")


def _dataset_dir(out_dir: Path, people: int) -> Path:
    return out_dir / DATA / f"people{people}"


def _dataset_dirs(out_dir: Path, options: CapacityOptions) -> dict[int, Path]:
    return {people: _dataset_dir(out_dir, people) for people in options.people}


def _prepare(out_dir: Path, options, record, runs, report=None) -> None:
    """Refuse an output made with other settings, make the missing datasets and plan every kind of
    run, before anything trains; a folder this call created is removed again if that fails."""
    if out_dir.exists() and not out_dir.is_dir():
        raise BiosrecallError(f"output path {out_dir} exists and is not a folder")
    _check_same_settings(out_dir, record)
    refuse_busy_runs(out_dir / RUNS)
    created = not out_dir.exists()
    try:
        for people, folder in _dataset_dirs(out_dir, options).items():
            _dataset(folder, people, report)
        _check_plans(runs)
    except BaseException:
        if created:
            shutil.rmtree(out_dir, ignore_errors=True)
        raise


def _check_same_settings(out_dir: Path, record: dict[str, Any]) -> None:

    path = out_dir / RECORD
    if not os.path.lexists(path):
        if os.path.lexists(out_dir / RUNS):
            raise BiosrecallError(f"{out_dir} holds {RUNS}/ but no {RECORD} saying how they were trained")
        return
    stored = read_json_object(path, "capacity record", required=("settings",))["settings"]
    changed = [f"{key} was {stored.get(key)}, now {value}" for key, value in record["settings"].items()
               if stored.get(key) != value]  # fmt: skip
    if changed:
        raise BiosrecallError(
            f"{out_dir} was made with other settings ({'; '.join(changed)}); rerun with the settings "
            "it was made with to continue it, or choose another --out"
        )


def _dataset(folder: Path, people: int, report=None) -> None:
    """Kept when it is the one asked for, generated when missing, refused otherwise."""

    if not os.path.lexists(folder):
        long = report is not None and shows_progress(dataset_cost(people))
        if long:
            report(f"generating {folder} ({people:,} people)")
        generate_dataset(folder, people=people, seed=DATA_SEED)
        return
    dataset = load_dataset(folder)
    if (dataset.num_people, dataset.manifest.get("seed")) != (people, DATA_SEED):
        raise BiosrecallError(f"dataset {folder} is not {people} people of seed {DATA_SEED}; remove it")


def _check_plans(runs: list[SweepRun]) -> None:
    """Plan each model at every people count (first seed): an exposure count beyond the planner's
    limit, a sequence too short for a biography or a schedule a preset refuses fails here."""
    first = runs[0].config.seed
    plan_table([run for run in runs if run.config.seed == first])


def plan_table(runs: list[SweepRun]) -> pd.DataFrame:
    """One row per run: what it will train (people, model, seed, parameters) and spend (updates,
    tokens, modeled FLOPs, mean exposures), from the planner every run uses; nothing is trained."""
    rows = []
    for run in runs:
        config = run.config
        config.validate()
        task = bios_training_task(run.task["data"], run.task["preset"])
        model_config = task.model_config()
        seq_len = resolve_seq_len(config, model_config, task.preset)
        counted = task.exposures(task.batch_source(config, seq_len), config.exposures)
        plan = make_plan(model_config, config, seq_len, lambda asked, c=counted: c)
        counts = param_counts(model_config)
        rows.append({
            "people": run.labels["people"], "name": run.labels["name"], "model_preset": run.task["preset"],
            "seed": config.seed, "parameters": counts["total"],
            "non_embedding_parameters": counts["non_embedding"], "updates": plan.updates,
            "tokens": plan.updates * plan.tokens_per_update, "train_flops": plan.total_flops,
            "exposures_mean": counted.mean,
        })  # fmt: skip
    return pd.DataFrame.from_records(rows)


PLAN_PROBE_PEOPLE = 2_000
"""`--plan` plans a people count up to this on its own dataset, made in a scratch folder; a larger
count from this many people's batches, scaled (about: a larger dataset's batches pack biographies of
the same lengths). So a plan never makes or reads a dataset larger than this, whatever --people asks:
its cost is a probe's and its own arithmetic (2,000 people: about 3 s on a 2-core CPU)."""


def plan_capacity(options: CapacityOptions, report=None):
    """`plan_table` of every run of the study, its datasets generated in a temporary folder: what
    `biosrecall capacity --plan` prints, with nothing written (a dry run of a long study). Counts
    over `PLAN_PROBE_PEOPLE` are estimated from the probe's plan. A plan larger than the machine is
    refused first, and the scratch folder of a plan that was killed is removed by the next one
    (`biosrecall.locking.scratch_folder`)."""

    base = _base_config(options, "cpu")
    counted = replace(options, people=tuple(dict.fromkeys(min(n, PLAN_PROBE_PEOPLE) for n in options.people)))
    check_study_size(counted, None, 1, report)
    with scratch_folder("capacity-plan") as scratch:
        datasets = {people: scratch / f"people{people}" for people in counted.people}
        for people, folder in datasets.items():
            _dataset(folder, people, report)
        table = plan_table(capacity_runs(counted, base, datasets))
    return pd.concat([_scaled(table, people) for people in options.people], ignore_index=True)


def _scaled(table: pd.DataFrame, people: int) -> pd.DataFrame:
    """The planned rows of `people`: the probe's rows scaled by people / probe (updates, tokens and
    FLOPs grow with the people a run must show `exposures` times; the model does not change)."""
    probe = min(people, PLAN_PROBE_PEOPLE)
    rows = table[table["people"] == probe].copy()
    if people == probe:
        return rows
    updates = np.ceil(rows["updates"] * people / probe).astype(int)
    if updates.max() > MAX_UPDATES:
        raise BiosrecallError(
            f"--people {people:,} needs about {updates.max():,} updates of this batch at these exposures, "
            f"beyond the planner's limit of {MAX_UPDATES:,} (use smaller --people counts or a larger "
            "--batch-size)"
        )
    grown = updates / rows["updates"]
    per_update = rows["tokens"] // rows["updates"]
    return rows.assign(
        people=people, updates=updates, tokens=per_update * updates, train_flops=rows["train_flops"] * grown
    )


def capacity_command(record: dict[str, Any]) -> str:
    """The `biosrecall capacity` command that wrote an output, from its capacity.json: defaults left
    out and no `--out`, as `biosrecall.experiments.study.figure1_command` writes figure1's."""
    settings, defaults = record["settings"], CapacityOptions()
    flags = [
        f"--preset {settings['preset']}",
        "--people " + ",".join(map(str, record["people"])),
        "--seeds " + ",".join(map(str, record["seeds"])),
        f"--exposures {settings['exposures']:g}",
    ]
    for key in ("batch_size", "seq_len", "lr"):
        if settings[key] != getattr(defaults, key):
            flags.append(f"--{key.replace('_', '-')} {settings[key]:g}")
    if tuple(record["depths"]) != defaults.depths:
        flags.append("--depths " + ",".join(map(str, record["depths"])))
    return "biosrecall capacity " + " ".join(flags)
