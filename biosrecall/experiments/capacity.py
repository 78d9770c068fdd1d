"""Knowledge capacity at matched exposures: stored bits of looped and standard models against people.

    from biosrecall.experiments.capacity import CapacityOptions, run_capacity
    options = CapacityOptions(preset="bios-tiny", people=(50, 100, 200), seeds=(0, 1, 2), exposures=100)
    result = run_capacity("runs/capacity", options)     # or: biosrecall capacity --out runs/capacity ...

A study declared on the engine (`biosrecall.experiments.engine`, `CAPACITY`). For every people count
it generates a dataset, then trains, at every seed, the three schedules of Figure 1 on the looped
preset (fixed K=4, fixed-first, uniform 1..16) and its two standard-transformer baselines
(`<preset>-std-params`, `<preset>-std-flops`, at their one depth), each run as long as it takes to
show every person's biography `exposures` times (`biosrecall.bios.exposures`), so every model sees
the same data and only what it spends differs. Each final checkpoint is scored here (`score_runs`)
at the serving depths (a baseline at depth 1 only), and
`biosrecall.experiments.capacity_results` holds the tables, the claims and capacity.md. Layout:

    OUT/capacity.json                     the engine's record: options, command, versions, machine
    OUT/data/people<N>/                   the bioS dataset of N people (seed `DATA_SEED`)
    OUT/runs/seed<S>/people<N>/<model>/   one run folder each (model: fixed_k4, ..., std_params)
    OUT/runs/.sweep/                      each run's spec, record and log (`biosrecall.sweep`)
    OUT/capacity*.csv/.md/.png, OUT/capacity_claims.*   (`capacity_results`)

The engine locks OUT, refuses other settings on an existing output, trains through the sweep engine
(a scored run is not handed to it again), scores every run at once (`evaluate`) and writes the
study's tables, capacity.md (`markdown`: a page of its own), claims (`judge`: columns of their own,
under the stem capacity_claims) and figure (`capacity_results`); `--seeds` and
`--people` may grow and the `FREE` options (`--depths`, `--device`) may change, and a call with more
trains only what is new. Each people count's dataset is made under OUT by the study's `inputs`
(`make_datasets`), under the engine's lock and before any run is checked, so the engine gives the
grid (`capacity_runs`), which names the datasets, OUT. The record names the command that makes the
output (the engine's `study_command`, naming `shown` options even at their default), and a record of
release 0.2.0 is read as the engine's (`upgrade`), so its outputs continue. `--plan` is this
module's own: a run's length is a count of its dataset's batches, planned on a probe dataset.
"""

from __future__ import annotations

import math
import os
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from biosrecall.bios import generate_dataset, load_dataset
from biosrecall.compute.flops import param_counts
from biosrecall.compute.schedules import MAX_UPDATES
from biosrecall.errors import BiosrecallError

# What loads torch is imported where it is used: `biosrecall capacity --help` reads this module.
from biosrecall.experiments import capacity_results as results
from biosrecall.experiments.engine import Study, executor_slots, run_study, study_executor
from biosrecall.experiments.study import MAIN_SCHEDULES, check_depths, check_people, check_seeds
from biosrecall.locking import scratch_folder
from biosrecall.model.presets import BASELINES as KNOWN
from biosrecall.model.presets import DEFAULT_BIOS_PRESET
from biosrecall.numbers import EXPOSURES, check_count, check_number
from biosrecall.records import Count, parse_record
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
from biosrecall.train.checkpoint_files import load_checkpoint, read_meta
from biosrecall.train.config import TrainConfig, resolve_seq_len
from biosrecall.train.run_folder import STORED_BITS_CACHE_FILE, RunFolder

RECORD, DATA = "capacity.json", "data"
DATA_SEED = 0
"""Every people count's dataset seed: all seeds and models of a count train on the same people, so
two models' numbers are compared paired by seed (only the training randomness differs)."""
BASELINES = {"std_params": "std-params", "std_flops": "std-flops"}
"""Baseline run name -> the suffix of its preset (`biosrecall.model.presets.BASELINES`)."""
BASELINE_SCHEDULE = "fixed:1"  # a baseline's one depth: the only schedule it accepts
FREE = ("depths", "device")
"""Options a later call may change on the same output (the record keeps the latest): where the runs
are scored and trained, not what they are. A GPU study is re-tabulated on a laptop, or rescored at
other depths from its weights (the study's `free` options)."""


@dataclass(frozen=True)
class CapacityOptions:
    """What a capacity study trains and scores; checked on construction. Each field is an option of
    `biosrecall capacity` of the same name, its docstring the option's help."""

    preset: str = DEFAULT_BIOS_PRESET
    """Looped model preset with -std-params and -std-flops baselines (bios-tiny or bios-cpu)."""
    people: tuple[int, ...] = (50, 100, 200)
    """People counts of the sweep, one dataset each (more people, more facts to store)."""
    seeds: tuple[int, ...] = (0,)
    """Training seeds, e.g. 0,1,2; the claims need two or more (95% t interval over seeds)."""
    exposures: float = 100.0
    """Mean exposures per person of every run: its length (the 3.3 paper's 100 gives ~1 bit/param)."""
    batch_size: int = 8
    """Sequences per update."""
    seq_len: int | None = None
    """Tokens per sequence [default: the preset's context]."""
    lr: float = 1e-2
    """Peak learning rate of every run."""
    depths: tuple[int, ...] = (1, 4, 16, 64)
    """Serving depths each looped model is scored at (a baseline has one depth, 1)."""
    device: str = "auto"
    """Where runs train and are scored: auto, cpu or cuda."""

    def __post_init__(self) -> None:
        check_people(self.people)
        check_seeds(self.seeds)
        check_number("exposures", self.exposures, EXPOSURES)
        check_depths(self.depths)
        model_presets(self.preset)


def model_presets(preset: str) -> dict[str, tuple[str, str, str]]:
    """Run name -> (schedule, model preset, kind "looped" or "baseline") for the study of `preset`."""

    if any(f"{preset}-{suffix}" not in KNOWN for suffix in BASELINES.values()):  # an unknown preset too
        with_baselines = sorted({looped for looped, _, _ in KNOWN.values()})
        raise BiosrecallError(
            f"preset {preset!r} has no standard-transformer baselines; choose one of: {', '.join(with_baselines)}"
        )
    runs = {name: (schedule, preset, "looped") for name, schedule in MAIN_SCHEDULES.items()}
    for name, suffix in BASELINES.items():
        runs[name] = (BASELINE_SCHEDULE, f"{preset}-{suffix}", "baseline")
    return runs


def capacity_runs(options: CapacityOptions, out_dir: Path) -> list[SweepRun]:
    """Every run of the study, people counts x seeds x (three schedules, two baselines): folder
    seed<S>/people<N>/<name>, sized by exposures with one checkpoint, on its people count's dataset
    (`out_dir`/data/people<N>) and model preset, and its labels (people, name, kind: "looped" or
    "baseline", schedule, model_preset, seed: the per-run table's first columns)."""
    base = TrainConfig(
        exposures=float(options.exposures),
        batch_size=options.batch_size,
        seq_len=options.seq_len,
        lr=options.lr,
        device=options.device,
        checkpoint_fractions=(1.0,),
    )
    runs = []
    for people in options.people:
        for seed in options.seeds:
            for name, (schedule, preset, kind) in model_presets(options.preset).items():
                config = replace(base, schedule=schedule, seed=seed)
                task = {"data": (out_dir / DATA / f"people{people}").resolve(), "preset": preset}
                labels = {
                    "people": people,
                    "name": name,
                    "kind": kind,
                    "schedule": schedule,
                    "model_preset": preset,
                    "seed": seed,
                }
                runs.append(SweepRun(f"seed{seed}/people{people}/{name}", "train", config, task, labels))
    return runs


def scored(run_dir: Path) -> bool:
    """A run whose final checkpoint holds its stored bits: the engine hands it to no sweep."""
    final = RunFolder(run_dir).fraction_checkpoints().get(1.0)
    return final is not None and (final / STORED_BITS_CACHE_FILE).is_file()


STORED_BITS_CACHE_FORMAT = 1  # bumped when the cached stored-bits table changes what it holds


def score_runs(runs_dir: Path, runs: list, options: CapacityOptions, executor) -> pd.DataFrame:
    """The study's `evaluate`: one row per run (folders under `runs_dir`) and serving depth, its final
    checkpoint's stored bits, labelled, `executor`'s workers at a time on the CPU (`eval.parallel`)
    on `options.device`. Each checkpoint's stored-bits table is cached next to it
    (`eval.table_cache`), so a rerun, or an archive without weights, is re-tabulated without loading
    a model."""
    from biosrecall.eval.parallel import map_in_processes
    from biosrecall.train.distributed import resolve_device

    device = resolve_device(str(options.device))
    items = [(runs_dir / run.name, run, options, device) for run in runs]  # folder first: errors name it
    workers = executor_slots(executor) if device.type == "cpu" else 1
    return pd.concat(map_in_processes(_score, items, workers, executor.threads), ignore_index=True)


def _score(item) -> pd.DataFrame:
    """The final checkpoint's stored bits (a baseline at its one depth), with the run's labels and
    what it cost: mean exposures, updates and training FLOPs."""
    from biosrecall.eval.scoring import cached_dataset

    run_dir, run, options, device = item
    dataset = cached_dataset(run.task["data"])
    folder = RunFolder(run_dir)
    checkpoint = folder.fraction_checkpoints()[1.0]
    meta = read_meta(checkpoint)
    folder.check_training_data(meta, dataset.path, dataset.manifest_hash)
    table = _stored_bits(checkpoint, dataset, options.depths, device)
    plan = folder.read_config()["plan"]
    costs = {
        "exposures": float(options.exposures),
        "exposures_mean": float(plan.get("exposures", {}).get("mean", math.nan)),
        "updates": int(meta["update"]),
        "train_flops": float(meta.get("flops", math.nan)),
        "run": run.name,
    }
    # The run's labels (`capacity_runs`), then what it trained.
    front = pd.DataFrame({key: [value] * len(table) for key, value in run.labels.items()})
    return pd.concat([front, table.drop(columns=["people"]).assign(**costs)], axis=1)


def _stored_bits(checkpoint: Path, dataset, depths, device) -> pd.DataFrame:
    """`stored_bits_table` at `depths` (a baseline's at 1), from its cache (`eval.table_cache`)."""
    from biosrecall.eval.stored_bits import stored_bits_table
    from biosrecall.eval.table_cache import checkpoint_key, read_cached, write_cached

    key = checkpoint_key(
        checkpoint, format=STORED_BITS_CACHE_FORMAT, depths=list(depths), manifest_hash=dataset.manifest_hash
    )
    cache = checkpoint / STORED_BITS_CACHE_FILE
    table = read_cached(cache, key)
    if table is None:
        model, _ = load_checkpoint(checkpoint, device=device)
        depths = depths if model.config.recurrent else (1,)
        table = stored_bits_table(model, dataset.eval_set(), dataset.pool_sizes, depths=depths, device=device)
        write_cached(cache, key, table)
    return table


def make_datasets(out_dir: Path, options: CapacityOptions, report=None) -> None:
    """The study's `inputs`: each people count's dataset under OUT, then every model at every count
    planned at the first seed, so what a run would refuse is refused before anything trains."""
    for people in options.people:
        _dataset(out_dir / DATA / f"people{people}", people, report)
    first = options.seeds[0]
    plan_table([run for run in capacity_runs(options, out_dir) if run.config.seed == first])


@dataclass(frozen=True)
class EarlierRecord:
    """The fields of a capacity.json of release 0.2.0 that `upgrade` reads (its other keys are kept)."""

    settings: dict[str, Any]
    """The options but the lists: preset, exposures, batch_size, seq_len and lr."""
    people: list[Count]
    """People counts of the sweep."""
    seeds: list[Count]
    """Training seeds."""
    depths: list[Count]
    """Serving depths."""
    train_config: dict[str, Any] = field(default_factory=dict)
    """The first run's config: its `device` is the study's."""


def upgrade(record: dict[str, Any], where: str) -> dict[str, Any]:
    """`CAPACITY.upgrade`: a capacity.json of release 0.2.0 as the engine's record, so that its output
    (the committed archives docs/results/capacity and capacity-pilot) continues. Its exposures keep
    the form that release's command gave them (100, not 100.0): the command the engine rebuilds from
    the record (`study_command`, the README's provenance line) reads as it did."""
    if "options" in record or "settings" not in record:  # the engine's, or neither: its check says
        return record
    earlier = parse_record(record, EarlierRecord, where)
    exposures = earlier.settings.get("exposures")
    options = {
        **earlier.settings,
        "exposures": int(exposures) if isinstance(exposures, float) and exposures.is_integer() else exposures,
        "people": earlier.people,
        "seeds": earlier.seeds,
        "depths": earlier.depths,
        "device": earlier.train_config.get("device", "auto"),
    }
    return {**record, "study": "capacity", "options": options}


CAPACITY = Study(
    name="capacity",
    summary="Stored bits per parameter of the three schedules and two standard transformers, against people.",
    options=CapacityOptions,
    runs=capacity_runs,  # given OUT, as it names OUT's datasets (the study has `inputs`)
    done=scored,
    evaluate=score_runs,  # stored bits are no sweep evaluation command: scored here, cached per run
    tables=results.tables,
    markdown=results.markdown,  # capacity.md: both tables on one page, the knees between them
    judge=results.judge_capacity_claims,  # capacity_claims.csv has columns in an order of its own
    claims_stem="capacity_claims",
    figures=results.figures,
    growing=("seeds", "people"),
    free=FREE,
    inputs=make_datasets,
    shown=("preset", "people", "seeds", "exposures"),  # always named, as release 0.2.0 named them
    upgrade=upgrade,
    command="capacity",
)


def run_capacity(out_dir: str | Path, options: CapacityOptions, *, threads=None, workers=None, report=None):
    """Generate the datasets, train and score every run (skipping scored ones), write the results:
    `run_study` on `CAPACITY`; its `StudyResult`.

    Raises `BiosrecallError` for an output made with other settings, `Interrupted` when Ctrl-C stops
    training and `StudyRunFailed` when a run fails (`biosrecall.experiments.engine`)."""
    out_dir = Path(out_dir)
    check_study_size(options, out_dir, study_executor(workers, threads, options.device).slots(), report)
    return run_study(CAPACITY, out_dir, options, workers, threads, report)


def check_study_size(options: CapacityOptions, out_dir: Path | None, workers: int, report=None) -> None:
    """Refuse a study larger than the machine before anything is written (`biosrecall.sizing`): the
    datasets still to make, every run process holding its dataset (`workers` at a time) and every
    scoring process its evaluation set; a long preparation of the data says what it will take.
    `out_dir` None: the datasets go to a temporary folder (`--plan`)."""

    largest, depth = max(options.people), max(options.depths)
    missing = [
        n for n in options.people if out_dir is None or not os.path.lexists(out_dir / DATA / f"people{n}")
    ]
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


def plan_table(runs: list[SweepRun]) -> pd.DataFrame:
    """One row per run: what it will train (people, model, seed, parameters) and spend (updates,
    tokens, modeled FLOPs, mean exposures), from the planner every run uses; nothing is trained. An
    exposure count beyond the planner's limit, a sequence too short for a biography or a schedule a
    preset refuses fails here."""
    from biosrecall.train.trainer import bios_training_task, make_plan

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
        rows.append(
            {
                "people": run.labels["people"],
                "name": run.labels["name"],
                "model_preset": run.task["preset"],
                "seed": config.seed,
                "parameters": counts["total"],
                "non_embedding_parameters": counts["non_embedding"],
                "updates": plan.updates,
                "tokens": plan.updates * plan.tokens_per_update,
                "train_flops": plan.total_flops,
                "exposures_mean": counted.mean,
            }
        )
    return pd.DataFrame.from_records(rows)


PLAN_PROBE_PEOPLE = 2_000
"""`--plan` plans a people count up to this on its own dataset, made in a scratch folder; a larger
count from this many people's batches, scaled (about: a larger dataset's batches pack biographies of
the same lengths). So a plan never makes or reads a dataset larger than this, whatever --people asks:
its cost is a probe's and its own arithmetic (2,000 people: about 3 s on a 2-core CPU)."""


def plan_capacity(options: CapacityOptions, report=None):
    """`plan_table` of every run of the study, its datasets generated in a temporary folder: what
    `biosrecall capacity --plan` prints, with nothing written (a dry run of a long study). The
    engine's `plan_study` cannot give it: a run's length here is a count of its dataset's batches.
    Counts over `PLAN_PROBE_PEOPLE` are estimated from the probe's plan. A plan larger than the
    machine is refused first, and the scratch folder of a plan that was killed is removed by the next
    one (`biosrecall.locking.scratch_folder`)."""

    counted = replace(
        options, device="cpu", people=tuple(dict.fromkeys(min(n, PLAN_PROBE_PEOPLE) for n in options.people))
    )
    check_study_size(counted, None, 1, report)
    with scratch_folder("capacity-plan") as scratch:
        for people in counted.people:
            _dataset(scratch / DATA / f"people{people}", people, report)
        table = plan_table(capacity_runs(counted, scratch))
    return pd.concat([_scaled(table, people) for people in options.people], ignore_index=True)


def _scaled(table: pd.DataFrame, people: int) -> pd.DataFrame:
    """The planned rows of `people`: the probe's rows scaled by people / probe (updates, tokens and
    FLOPs grow with the people a run must show `exposures` times; the model does not change)."""
    probe = min(people, PLAN_PROBE_PEOPLE)
    rows = table[table["people"] == probe].copy()
    if people == probe:
        return rows
    updates = np.ceil(rows["updates"] * people / probe).astype(int)
    check_count(
        int(updates.max()),
        f"the updates --people {people:,} needs at this batch and these exposures",
        high=MAX_UPDATES,
        why="the planner's limit: use smaller --people counts or a larger --batch-size",
    )
    grown = updates / rows["updates"]
    per_update = rows["tokens"] // rows["updates"]
    return rows.assign(
        people=people, updates=updates, tokens=per_update * updates, train_flops=rows["train_flops"] * grown
    )
