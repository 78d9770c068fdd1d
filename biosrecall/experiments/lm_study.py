"""The paper's Figure-2 language-model study as an experiment: the 200M grid over seeds, judged.

    from biosrecall.experiments.lm_study import run_lm_study
    result = run_lm_study("runs/lm-study", "data/lm-kjv", preset="small", seeds=(0, 1, 2))
    # CLI: biosrecall lm study --data data/lm-kjv --out runs/lm-study --preset small --seeds 0,1,2
    #      [--grid uniform,ff-k2-s0.67-uniform,...] [--tokens N] [--workers 2 --threads 1] [--plan]

The grid is `scripts/lm/sweep-200m.toml`'s (`GRID`): fixed-first K0 in {1, 2, 4} x switch {67%, 80%}
x finish {uniform, Poisson-lognormal}; uniform over K=1..16; the McLeish curriculum; uniform matched
to the modeled compute of K0=4 / 67% (the paper's "compute-matched uniform"); plus fixed K=4, the
sizing control (its NLL beyond the training depth shows whether depth matters at this size). Every
run trains the same number of updates (the preset's, or as many as `tokens` buys) on the same data,
is evaluated on the corpus's validation split at serving depths 1..`max_depth` (64: the paper's
serving range 1..16 and beyond), and the claims of `biosrecall.experiments.lm_claims` are judged from
the NLL tables, over seeds. Layout:

    OUT/lm_study.json            resolved preset, data (its manifest's sha256), updates, grid, seeds,
                                 versions, machine: a later call with other settings is refused
    OUT/runs/<item>/seed<S>/     one `lm train` run folder each (`lm compare OUT/runs/* --aggregate-seeds`
                                 reads them too); its evaluation in eval/nll.{csv,parquet}
    OUT/runs/.sweep/             each run's spec, record and log (`biosrecall.sweep`)
    OUT/lm_nll.{csv,parquet}     every run's NLL at every serving depth, one row per seed and depth
    OUT/lm_summary.{csv,parquet,md}  per grid item: mean serving NLL (K=1..16), NLL at K=1 and K=16,
                                 beyond (K=17..max), modeled FLOPs and wall seconds, savings vs
                                 uniform, each a mean over seeds with its 95% interval
    OUT/nll_vs_depth.*, nll_vs_compute.*   the Figure-2 plots (`biosrecall.lm.compare_plots`)
    OUT/diagnose/<item>/seed<S>/, lm_diagnose.{csv,parquet}   the update diagnostic (`biosrecall.diagnose`)
                                 of K0=4 / 67% at each seed: 16 uniform updates after its switch, the
                                 depth-averaged NLL advantage of a K=16 over a K=4 update
    OUT/lm_claims.{csv,parquet,md}   the claims (`lm_claims`); earlier looks as lm_claims_at_<n>seeds.csv
    OUT/timings.jsonl, timings.md    wall time per phase of every call (`study_timings`)

Every run is a `biosrecall lm train --config OUT/runs/.sweep/.specs/<run>.json` process of the sweep engine
(`SweepRun` with command "lm train", then `Evaluation` "lm eval"), `workers` at a time locally; the
same runs can go to a cluster with `biosrecall sweep` (`sweep_runs` gives them). Calling again
continues: finished runs are skipped, an interrupted one resumes from its last save, and added seeds
or grid items train only what is new. `plan_lm_study` (`--plan`) says what each run would do and
spend, and writes nothing. `lm study --archive DEST` copies a finished study without its weights
(`biosrecall.experiments.study_archive`); a copy continues it, since a run with its NLL table and a
seed with its diagnosis are done without them.
"""

from __future__ import annotations

import json
import math
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import pandas as pd
import torch

from biosrecall.atomic import atomic_write_text
from biosrecall.diagnose import DiagnoseOptions, diagnose_update
from biosrecall.diagnose.report import depth_average
from biosrecall.errors import BiosrecallError
from biosrecall.experiments.lm_claims import judge_lm_claims, write_lm_claims
from biosrecall.experiments.lm_grid import (
    AFTER_UNIFORM,
    DIAGNOSE,
    DIAGNOSED,
    GRID,
    MATCHED,
    MATCHED_TO,
    RECORD,
    SERVING,
    UNIFORM,
)
from biosrecall.experiments.study import check_seeds
from biosrecall.experiments.study_engine import study_executor, sweep_study_runs, write_study_record
from biosrecall.experiments.study_timings import StudyTimer
from biosrecall.files import file_sha256, parse_json_text
from biosrecall.lm import compare_plots as plots
from biosrecall.lm.evaluate import TABLE as NLL_TABLE
from biosrecall.lm.evaluate import read_table
from biosrecall.lm.shard_manifest import load_manifest
from biosrecall.lm.task import LM_VOCABULARY
from biosrecall.locking import output_lock
from biosrecall.outputs import markdown_table, save_figure, write_table
from biosrecall.stats import aggregate_seeds, interval_text
from biosrecall.sweep.engine import planned_actions, prepare
from biosrecall.sweep.jobs import BOOKKEEPING, Evaluation, SweepRun
from biosrecall.train.config import TrainConfig
from biosrecall.train.run_folder import RunFolder, machine, versions
from biosrecall.train.trainer import build_model_config, make_plan

RUNS = "runs"
PLOTTED_DEPTHS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)


@dataclass(frozen=True)
class LMStudyPreset:
    """One size of the study: the model, the batch and the updates every run trains."""

    model_preset: str
    """Model preset (see `biosrecall flops`)."""
    batch_size: int
    """Sequences per update."""
    seq_len: int
    """Tokens per sequence."""
    updates: int
    """Updates of every run (the compute-matched run: as many as K0=4 / 67%'s FLOPs buy)."""
    lr: float
    """Peak learning rate of every run (the same for every schedule: the paper's protocol)."""
    max_depth: int = 64
    """Serving depths evaluated: 1..max_depth."""
    eval_sequences: int | None = None
    """Validation sequences scored per run (None: the whole validation split)."""
    model_overrides: tuple[tuple[str, Any], ...] = ()
    """Architecture changes from the model preset, e.g. (("d_model", 32),)."""
    diagnose_batches: int = 8
    """Training batches the update diagnostic averages over (`biosrecall.diagnose`)."""


LM_STUDY_PRESETS = {
    # The tests' and a smoke run's: seconds per run on a CPU, on any small prepared corpus.
    "tiny": LMStudyPreset(
        model_preset="lm-tiny",
        batch_size=4,
        seq_len=16,
        updates=60,
        lr=3e-3,
        max_depth=20,
        eval_sequences=8,
        diagnose_batches=2,
    ),  # 60 updates: the diagnostic continues 16 past the switch at update 40
    # The laptop-class study, sized by measurement (docs/results/lm-sizing.md): lm-tiny (205k
    # parameters) on the King James Bible (`lm prepare pkg:kjv --vocab-size 512 --val-fraction 0.05`),
    # 500 updates of 8 x 128 tokens (0.31 epochs): the smallest budget measured at which uniform's NLL
    # at K=1 and K=8 differ by more than the seed spread and fixed K=4's moves beyond K=16 (250 did
    # not). NLL on the first 128 validation windows (16k tokens, the same for every run).
    "small": LMStudyPreset(
        model_preset="lm-tiny", batch_size=8, seq_len=128, updates=500, lr=3e-3, eval_sequences=128
    ),
}


@dataclass
class LMStudyResult:
    out_dir: Path
    runs: dict[str, Path]  # run name (<item>/seed<S>) -> its folder
    table: pd.DataFrame  # lm_nll: one row per item, seed and depth
    summary: pd.DataFrame
    claims: pd.DataFrame
    figures: list[Path]


def parse_grid(items: str | None) -> tuple[str, ...]:
    """A comma list of grid items (None or empty: all of `GRID`), in `GRID`'s order; an unknown or
    repeated item is one error naming the choices."""
    if not items:
        return tuple(GRID)
    names = [item.strip() for item in items.split(",")]
    for name in names:
        if name not in GRID:
            raise BiosrecallError(f"unknown grid item {name!r}; choose from: {', '.join(GRID)}")
    if len(set(names)) != len(names):
        raise BiosrecallError(f"a grid item is given twice in {items!r}")
    return tuple(name for name in GRID if name in names)


def resolve_preset(preset: str) -> LMStudyPreset:
    if preset not in LM_STUDY_PRESETS:
        raise BiosrecallError(
            f"unknown lm study preset {preset!r}; choose one of: {', '.join(LM_STUDY_PRESETS)}"
        )
    return LM_STUDY_PRESETS[preset]


def study_updates(settings: LMStudyPreset, tokens: int | None) -> int:
    """The updates every run trains: the preset's, or as many whole updates as `tokens` buys."""
    if tokens is None:
        return settings.updates
    per_update = settings.batch_size * settings.seq_len
    if tokens < per_update:
        raise BiosrecallError(
            f"a token budget of {tokens:,} is under one update ({settings.batch_size} x {settings.seq_len} "
            f"= {per_update:,} tokens)"
        )
    return tokens // per_update


def _data_record(data_dir: Path) -> dict[str, Any]:
    """The corpus as the record pins it: `lm prepare` output (checked), its manifest's hash."""

    manifest = load_manifest(data_dir)  # a BiosrecallError when it is not `lm prepare` output
    return {
        "manifest_sha256": file_sha256(data_dir / "manifest.json"),
        "tokenizer_sha256": manifest["tokenizer"]["sha256"],
        "vocab_size": int(manifest["tokenizer"]["vocab_size"]),
        "train_tokens": int(manifest["splits"]["train"]["tokens"]),
        "sources": [entry.get("location") for entry in manifest.get("source", {}).get("inputs", [])],
    }


@dataclass(frozen=True)
class _Study:
    """Everything one call resolved before anything is written."""

    out_dir: Path
    data_dir: Path
    preset: str
    settings: LMStudyPreset
    updates: int
    seeds: tuple[int, ...]
    grid: tuple[str, ...]
    device: str

    def run_name(self, item: str, seed: int) -> str:
        return f"{item}/seed{seed}"

    def describe(self, item: str, seed: int) -> tuple[TrainConfig, dict[str, Any]]:
        """The run's `lm train` TrainConfig and task."""
        s = self.settings
        size = (
            {"budget_of": f"{GRID[MATCHED_TO]}:{self.updates}"}
            if item == MATCHED
            else {"updates": self.updates}
        )
        config = TrainConfig(
            schedule=GRID[item], seed=seed, batch_size=s.batch_size, seq_len=s.seq_len, lr=s.lr,
            device=self.device, checkpoint_fractions=(1.0,), **size,
        )  # fmt: skip
        task = {
            "data": self.data_dir.resolve(),
            "preset": s.model_preset,
            "model_overrides": dict(s.model_overrides) or None,
        }
        return config, task

    def runs(self) -> list[SweepRun]:
        return [
            SweepRun(
                self.run_name(item, seed),
                "lm train",
                *self.describe(item, seed),
                {"item": item, "seed": seed},
            )
            for seed in self.seeds
            for item in self.grid
        ]

    def evaluation(self) -> Evaluation:
        options: dict[str, Any] = {"max_depth": self.settings.max_depth, "device": self.device}
        if self.settings.eval_sequences is not None:
            options["max_sequences"] = self.settings.eval_sequences
        return Evaluation("lm eval", options)

    def record(self, data: dict[str, Any]) -> dict[str, Any]:
        """What lm_study.json holds, as it reads back from JSON (lists, not tuples)."""

        settings = {
            "preset": self.preset,
            "settings": asdict(self.settings),
            "updates": self.updates,
            "tokens_per_update": self.settings.batch_size * self.settings.seq_len,
            "device": self.device,
            "data": data,
            "schedules": {item: GRID[item] for item in GRID},
        }
        record = {**settings, "grid": list(self.grid), "seeds": list(self.seeds)}
        return json.loads(json.dumps({**record, "versions": versions(), "machine": machine()}))


SETTINGS_KEYS = ("preset", "settings", "updates", "tokens_per_update", "device", "data", "schedules")


def _check_record(out_dir: Path, record: dict[str, Any]) -> dict[str, Any] | None:
    """The record already in OUT, refusing one made with other settings: its runs' seeds would be
    repeated under other settings (or mixed with them) in one output."""

    path = out_dir / RECORD
    if not path.is_file():
        if out_dir.is_dir() and any(out_dir.iterdir()):
            raise BiosrecallError(f"{out_dir} is not empty and holds no {RECORD}: give a new or empty --out")
        return None
    old = parse_json_text(path.read_text(encoding="utf-8"), str(path))
    if not isinstance(old, dict) or any(key not in old for key in SETTINGS_KEYS):
        raise BiosrecallError(f"{path} is not an lm study record; give another --out")
    changed = [key for key in SETTINGS_KEYS if _identity(old, key) != _identity(record, key)]
    if changed:
        seeds = sorted(set(old.get("seeds", [])) & set(record["seeds"]))
        repeat = f"seeds {','.join(map(str, seeds))} would repeat" if seeds else "its seeds would mix with"
        raise BiosrecallError(
            f"{out_dir} holds an lm study with other settings ({', '.join(changed)} differ): {repeat} "
            "the runs already there; use another --out"
        )
    return old


def lm_study_command(record: dict[str, Any]) -> str:
    """The `biosrecall lm study` command that wrote an output, from its lm_study.json: defaults left
    out and no `--out`, as `biosrecall.experiments.study.figure1_command` writes figure1's. The record
    pins the corpus by its manifest, not its folder, so `--data` names what `lm prepare` read."""
    sources = " ".join(str(source) for source in record["data"].get("sources") or ["?"])
    flags = [f"--data <lm prepare {sources}>", f"--preset {record['preset']}"]
    flags.append("--seeds " + ",".join(map(str, record["seeds"])))
    if list(record["grid"]) != list(GRID):
        flags.append("--grid " + ",".join(record["grid"]))
    if record["updates"] != record["settings"]["updates"]:
        flags.append(f"--tokens {record['updates'] * record['tokens_per_update']}")
    if record["device"] != "auto":
        flags.append(f"--device {record['device']}")
    return "biosrecall lm study " + " ".join(flags)


def _identity(record: dict[str, Any], key: str) -> Any:
    """What must match for a call to continue an output: the corpus is its tokenizer (trained on its
    training documents), vocabulary and training tokens. Its source locations are only informative
    (an archive writes them relative to where it was made), and so is its manifest's hash, which
    also records the release that prepared it: the same corpus prepared by a later release is the
    same data."""
    value = record[key]
    if key == "data" and isinstance(value, dict):
        return {name: item for name, item in value.items() if name not in ("sources", "manifest_sha256")}
    return value


def _resolve(out_dir, data_dir, preset, seeds, grid, tokens, device) -> _Study:
    settings = resolve_preset(preset)
    check_seeds(tuple(seeds))
    return _Study(
        Path(out_dir), Path(data_dir), preset, settings, study_updates(settings, tokens), tuple(seeds),
        parse_grid(grid) if isinstance(grid, str) or grid is None else parse_grid(",".join(grid)), device,
    )  # fmt: skip


def sweep_runs(study: _Study) -> tuple[list[SweepRun], list[Evaluation]]:
    """The study's runs and their evaluation, for `biosrecall.sweep` (locally or on Slurm)."""
    return study.runs(), [study.evaluation()]


def plan_lm_study(out_dir, data_dir, preset="small", *, seeds=(0,), grid=None, tokens=None, device="auto",
                  workers=None, threads=None, executor=None) -> list[str]:  # fmt: skip
    """What each run would do now (train, resume, evaluate, skip) and spend (updates, tokens,
    modeled FLOPs), every setting checked as `run_lm_study` checks it; nothing is written."""

    study = _resolve(out_dir, data_dir, preset, seeds, grid, tokens, device)
    data = _data_record(study.data_dir)
    _check_record(study.out_dir, study.record(data))
    executor = executor or study_executor(workers, threads, device)
    runs, evaluations = sweep_runs(study)
    jobs = prepare(study.out_dir / RUNS, runs, evaluations, executor)
    plans = _plans(study, data["vocab_size"])
    lines = [
        f"lm study {preset}: {len(study.grid)} grid item(s) x {len(study.seeds)} seed(s) = {len(runs)} runs, "
        f"{study.updates:,} updates of {study.settings.batch_size} x {study.settings.seq_len} tokens each; "
        f"evaluated at depths 1..{study.settings.max_depth}; {_slots(executor)} at a time on "
        f"{executor.threads} thread(s) each"
    ]
    total = 0.0
    for (name, action, _), run, job in zip(planned_actions(jobs), runs, jobs, strict=True):
        action = "skip" if evaluated(job.run_dir) else action
        plan = plans[run.labels["item"]]
        total += plan.total_flops
        lines.append(
            f"  {name:<36} {action:<8} {plan.schedule}: {plan.updates:,} updates, "
            f"{plan.updates * plan.tokens_per_update:,} tokens, {plan.total_flops:.3e} FLOPs"
        )
    lines.append(f"modeled training FLOPs of every run: {total:.4e}")
    return lines


def _plans(study: _Study, vocab: int) -> dict[str, Any]:
    """Each grid item's training plan from the trainer's own planner (a budget under one update, an
    unknown schedule or override fails here)."""

    s = study.settings
    model = build_model_config(s.model_preset, vocab, dict(s.model_overrides), LM_VOCABULARY)
    base = TrainConfig(batch_size=s.batch_size, seq_len=s.seq_len, lr=s.lr, updates=study.updates)
    plans = {}
    for item in study.grid:
        config = replace(base, schedule=GRID[item])
        if item == MATCHED:
            config = replace(config, updates=None, budget_of=f"{GRID[MATCHED_TO]}:{study.updates}")
        config.validate()
        plans[item] = make_plan(model, config)
    return plans


def _slots(executor) -> int | str:
    """Runs at once: the local executor's slots, or a Slurm array's parallelism."""
    return executor.slots() if hasattr(executor, "slots") else f"up to {executor.array_parallelism} (Slurm)"


def run_lm_study(out_dir, data_dir, preset="small", *, seeds=(0,), grid=None, tokens=None, device="auto",
                 workers=None, threads=None, executor=None, report=None) -> LMStudyResult:  # fmt: skip
    """Train (or continue) every run of the study, evaluate, and write the tables, figures and claims.

    Refuses, before anything is written, an output made with other settings, a corpus folder that is
    not `lm prepare` output, an unknown grid item and a token budget under one update. `executor`
    (a `biosrecall.sweep.executors` one, e.g. a `SlurmExecutor`) replaces the local one of `workers`
    x `threads`; the diagnostic and the tables run here either way. Raises
    `Interrupted` when Ctrl-C stops training (rerun the same call to continue) and `StudyRunFailed`
    when a run fails."""

    study = _resolve(out_dir, data_dir, preset, seeds, grid, tokens, device)
    data = _data_record(study.data_dir)
    record = study.record(data)
    executor = executor or study_executor(workers, threads, device)
    runs, evaluations = sweep_runs(study)
    _check_record(study.out_dir, record)
    _plans(study, data["vocab_size"])
    prepare(study.out_dir / RUNS, runs, evaluations, executor)  # every run's options checked, nothing written
    timer = StudyTimer(report, seeds=list(study.seeds), workers=_slots(executor), threads=executor.threads)
    with output_lock(study.out_dir):
        old = _check_record(study.out_dir, record)
        if old is not None:  # what earlier calls trained stays recorded
            record["seeds"] = sorted(set(old["seeds"]) | set(record["seeds"]))
            record["grid"] = [item for item in GRID if item in set(old["grid"]) | set(record["grid"])]

        write_study_record(study.out_dir / RECORD, json.dumps(record, indent=2) + "\n")
        with timer.phase(
            "training", f"{len(runs)} run(s) and their evaluation at depths 1..{study.settings.max_depth}"
        ):
            folders = _train(study, runs, evaluations, executor, report)
        with timer.phase("evaluation", "the update diagnostic at K0=4 / 67%'s switch, 16 updates on"):
            diagnosis = diagnose_runs(study, folders, report, executor.threads)
        with timer.phase("tables", "writing the NLL tables, figures and claims"):
            table = nll_table(study, folders)
            summary = summary_table(table)
            written = write_table(table, study.out_dir / "lm_nll") + write_table(
                summary, study.out_dir / "lm_summary"
            )
            atomic_write_text(study.out_dir / "lm_summary.md", summary_markdown(summary))
            figures = _figures(table, study)
            if diagnosis is not None:
                written += write_table(diagnosis, study.out_dir / "lm_diagnose")
            claims = judge_lm_claims(table, diagnosis)
            write_lm_claims(claims, study.out_dir)
        timer.save(study.out_dir)
    del written
    return LMStudyResult(study.out_dir, folders, table, summary, claims, figures)


def _train(study: _Study, runs, evaluations, executor, report) -> dict[str, Path]:
    """Bring every run to done and evaluated through the sweep engine; errors in the study's words."""

    runs_dir = study.out_dir / RUNS
    folders = {run.name: runs_dir / run.name for run in runs}
    # A finished run with its NLL table is done whatever the sweep's bookkeeping says: an archived
    # study keeps no weights and no bookkeeping, and its copy continues without training or scoring.
    left = [run for run in runs if not evaluated(folders[run.name])]
    if not left:
        return folders
    if report is not None:
        report(f"progress of each run in {runs_dir / BOOKKEEPING}/<run>.log")
    sweep_study_runs(runs_dir, left, evaluations, executor, report)
    return folders


def evaluated(run_dir: Path) -> bool:
    """Whether the run has finished and `lm eval` has written its NLL table (the study's settings,
    checked against lm_study.json, fix the evaluation's)."""
    return RunFolder(run_dir).finished() and (RunFolder(run_dir).eval_dir / f"{NLL_TABLE}.parquet").is_file()


def diagnose_runs(
    study: _Study, folders: dict[str, Path], report=None, threads: int = 1
) -> pd.DataFrame | None:
    """Per seed, the depth-averaged NLL advantage of a K=16 over a K=4 update after `AFTER_UNIFORM`
    uniform updates from K0=4 / 67%'s switch (None when the grid has no such run). Each seed's
    diagnosis is written to OUT/diagnose/<item>/seed<S>/ and read back on later calls."""

    if DIAGNOSED not in study.grid:
        return None
    options = DiagnoseOptions(after_uniform=(AFTER_UNIFORM,), batches=study.settings.diagnose_batches,
                              val_sequences=study.settings.eval_sequences, seed=0)  # fmt: skip
    rows = []
    for seed in study.seeds:
        name = study.run_name(DIAGNOSED, seed)
        out = study.out_dir / DIAGNOSE / name
        summary_path = out / "diagnose_switch.parquet"
        if not (out / "diagnose_switch.json").is_file():  # written last: the diagnosis is complete
            if report is not None:
                report(f"diagnosing {name}")
            with torch_threads(threads):
                diagnose_update(folders[name], "switch", options, device=study.device).write(out)
        averages = depth_average(pd.read_parquet(summary_path))
        row = averages[(averages["metric"] == "nll") & (averages["after_uniform"] == AFTER_UNIFORM)].iloc[0]
        rows.append({"item": DIAGNOSED, "seed": seed, "after_uniform": AFTER_UNIFORM, "update": int(row["update"]),
                     "advantage": float(row["mean"]), "ci_low": float(row["ci_low"]),
                     "ci_high": float(row["ci_high"]), "n_batches": int(row["n_batches"])})  # fmt: skip
    return pd.DataFrame(rows)


@contextmanager
def torch_threads(threads: int):
    """Torch on `threads` threads for the block (a run's own count): the diagnostic runs in this
    process, and on torch's default, on a busy 2-core machine, it was many times slower than one
    thread (docs/results/lm-sizing.md)."""

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def nll_table(study: _Study, folders: dict[str, Path]) -> pd.DataFrame:
    """lm_nll: every run's final-checkpoint NLL at every serving depth, with its item and seed."""

    frames = []
    for run in study.runs():
        table = read_table(folders[run.name])
        final = table[table["update"] == table["update"].max()]
        frames.append(final.assign(item=run.labels["item"], seed=run.labels["seed"]))
    table = pd.concat(frames, ignore_index=True)
    columns = ["item", "schedule", "seed", "depth", "nll", "update", "flops", "train_tokens", "wall_seconds"]
    return table[columns].sort_values(["item", "seed", "depth"], key=_grid_order, ignore_index=True)


def _grid_order(column: pd.Series) -> pd.Series:
    return column.map(list(GRID).index) if column.name == "item" else column


def per_run(table: pd.DataFrame) -> pd.DataFrame:
    """One row per item and seed: mean serving NLL over K=1..16, NLL at K=1, K=16 and beyond, updates, FLOPs,
    wall seconds, and both savings against the same seed's uniform run (NaN without one)."""
    rows = []
    for (item, seed), part in table.groupby(["item", "seed"], sort=False):
        by_depth = part.set_index("depth")["nll"]
        serving = by_depth[(by_depth.index >= SERVING[0]) & (by_depth.index <= SERVING[1])]
        beyond = by_depth[by_depth.index > SERVING[1]]
        rows.append({
            "item": item, "schedule": part["schedule"].iloc[0], "seed": seed,
            "mean_nll": float(serving.mean()), "nll_k1": float(by_depth.get(1, math.nan)),
            "nll_k16": float(by_depth.get(16, math.nan)),
            "beyond_nll": float(beyond.mean()) if len(beyond) else math.nan,
            "update": int(part["update"].iloc[0]), "flops": float(part["flops"].iloc[0]),
            "wall_seconds": float(part["wall_seconds"].iloc[0]),
        })  # fmt: skip
    runs = pd.DataFrame(rows)
    uniform = runs[runs["item"] == UNIFORM].set_index("seed")
    for column, saving in (("flops", "compute_saving_pct"), ("wall_seconds", "wall_saving_pct")):
        runs[saving] = 100 * (1 - runs[column] / runs["seed"].map(uniform[column]))
    runs["mean_nll_vs_uniform_pct"] = 100 * (runs["mean_nll"] / runs["seed"].map(uniform["mean_nll"]) - 1)
    return runs


def summary_table(table: pd.DataFrame) -> pd.DataFrame:
    """lm_summary: `per_run`'s numbers per item, mean over seeds with 95% intervals."""
    values = ["mean_nll", "nll_k1", "nll_k16", "beyond_nll", "flops", "wall_seconds", "compute_saving_pct",
              "wall_saving_pct", "mean_nll_vs_uniform_pct"]  # fmt: skip
    return aggregate_seeds(per_run(table), ["item", "schedule"], values)


SUMMARY_COLUMNS = (
    ("mean_nll", "mean NLL, K=1..16", "{:.4f}"),
    ("nll_k1", "NLL at K=1", "{:.4f}"),
    ("nll_k16", "NLL at K=16", "{:.4f}"),
    ("beyond_nll", "NLL, K=17..max", "{:.4f}"),
    ("mean_nll_vs_uniform_pct", "mean NLL vs uniform, %", "{:+.2f}"),
    ("compute_saving_pct", "modeled compute saving, %", "{:.1f}"),
    ("wall_saving_pct", "wall-clock saving, %", "{:.1f}"),
)
"""lm_summary.md's columns: (lm_summary column, header, number format); each a mean [95% interval]."""


def summary_markdown(summary: pd.DataFrame) -> str:
    """lm_summary as a Markdown table: one row per grid item (its schedule is `GRID`'s), each value its
    mean over seeds with the 95% interval (NLL in nats per token; savings and NLL against the same
    seed's uniform run)."""
    header = ["item", *(title for _, title, _ in SUMMARY_COLUMNS), "seeds"]
    rows = []
    for row in summary.itertuples(index=False):
        values = row._asdict()
        cells = [
            interval_text(values[name], values[f"{name}_low"], values[f"{name}_high"], fmt)
            for name, _, fmt in SUMMARY_COLUMNS
        ]
        rows.append([row.item, *cells, row.n_seeds])
    return markdown_table(header, rows)


def _figures(table: pd.DataFrame, study: _Study) -> list[Path]:
    """NLL against serving depth and mean serving NLL against modeled compute, over seeds."""

    # Log-spaced depths: the plot ticks every depth it draws, and 64 ticks on a log axis overlap
    # (lm_nll.csv has every depth).
    shown = [d for d in sorted(set(table["depth"])) if d in PLOTTED_DEPTHS or d == table["depth"].max()]
    labelled = table[table["depth"].isin(shown)].rename(columns={"item": "run"})
    curves = aggregate_seeds(labelled, ["run", "schedule", "depth"], ["nll"])
    points = per_run(table).rename(columns={"item": "run"}).assign(checkpoint="1.0")
    summaries = aggregate_seeds(points, ["run", "schedule", "checkpoint"], ["update", "flops", "mean_nll"])
    order = [item for item in GRID if item in set(table["item"])]
    written = save_figure(plots.plot_nll_vs_depth(curves, order), study.out_dir / "nll_vs_depth")
    return written + save_figure(
        plots.plot_nll_vs_compute(summaries, order), study.out_dir / "nll_vs_compute"
    )
