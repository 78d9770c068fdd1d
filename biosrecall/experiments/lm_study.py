"""The paper's Figure-2 language-model study, declared on the study engine: the 200M grid over seeds, judged.

    from biosrecall.experiments.engine import plan_study, run_study
    from biosrecall.experiments.lm_study import LM_STUDY, LMStudyOptions
    options = LMStudyOptions(data="data/lm-kjv", preset="small", seeds=(0, 1, 2))
    print("\n".join(plan_study(LM_STUDY, "runs/lm-study", options)))   # what would run; nothing written
    result = run_study(LM_STUDY, "runs/lm-study", options)
    # CLI: biosrecall lm study --data data/lm-kjv --out runs/lm-study --preset small --seeds 0,1,2
    #      [--grid uniform,ff-k2-s0.67-uniform,...] [--tokens N] [--workers 2 --threads 1] [--plan]

The grid is `scripts/lm/sweep-200m.toml`'s (`GRID`): fixed-first K0 in {1, 2, 4} x switch {67%, 80%}
x finish {uniform, Poisson-lognormal}; uniform over K=1..16; the McLeish curriculum; uniform matched
to the modeled compute of K0=4 / 67% (the paper's "compute-matched uniform"); plus fixed K=4, the
sizing control (its NLL beyond the training depth shows whether depth matters at this size). Every
run trains the same number of updates (the preset's, or as many as `tokens` buys) on the same data,
is evaluated on the corpus's validation split at serving depths 1..`max_depth` (64: the paper's
serving range 1..16 and beyond), and the paper's LM statements (`LM_CLAIMS`) are judged from the NLL
tables over seeds by the one claims engine (`biosrecall.experiments.claims`). Layout:

    OUT/lm_study.json            the engine's record: the options, what they resolve to (`pins`: the
                                 corpus, the preset's settings, the updates, the schedules), versions,
                                 machine: a later call with other settings is refused
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
    OUT/lm_claims.{csv,parquet,md}   the claims; earlier looks as lm_claims_at_<n>seeds.csv
    OUT/timings.jsonl, timings.md    wall time per phase of every call (`engine.StudyTimer`)

The study is `LM_STUDY`, declared on the engine (`biosrecall.experiments.engine`): its options
(`biosrecall.experiments.lm_grid.LMStudyOptions`, torch-free: `lm study`'s options are its fields),
grid, evaluation and run sizes, planned by `engine.plan_study` and run by `engine.run_study`, which
locks OUT, trains through the sweep engine (a finished, evaluated run is not handed to it again),
times each phase and judges the claims. Its record is the engine's, OUT/lm_study.json: the corpus is
pinned by what it holds rather than its folder (`pins`: `--data` may name another copy), and a record
an earlier release wrote in its own format continues as it is (`upgrade`). Its own hooks:
`evaluate` runs the update diagnostic after training (the per-run table is `Scores`: lm_nll and the
diagnosis); `markdown` gives lm_summary.md its "mean [95% interval]" cells; `judge` judges the claims
over each seed's `run_summaries` and diagnosis; the engine writes every file above, lm_claims.* with
the paper's number beside each statement. Calling again continues: finished runs are skipped,
an interrupted one resumes from its last save, and added seeds or grid items train only what is new
(the tables and claims cover every seed and item of the output).
`lm study --archive DEST` copies a finished study without its weights
(`biosrecall.experiments.study_archive`); a copy continues it, since a run with its NLL table and a
seed with its diagnosis are done without them.

The claims: each is a metric computed on every seed separately (paired: the runs of one seed read
the same batches), judged by its 95% t interval over seeds against a threshold; "not measured" when
the grid left out a run it needs. Each row carries the paper's own number (`paper`). Mean serving NLL
is the mean over K=1..16 of the final checkpoint's validation NLL; a NLL gap is run / uniform - 1
(same seed); a compute saving is 1 - modeled training FLOPs / uniform's (the trainer's own FLOP
account), a wall-clock saving the same with the measured training seconds. "About X%" of a saving is
read as within 5 points of X. "Within X% of uniform" is two-sided: the NLL gap's whole interval must
lie in [-X, X]. The update diagnostic's row (one depth-averaged advantage per seed) reads
"indistinguishable from zero" against a margin: 0.1% of uniform's mean serving NLL (the paper's
tightest bound on an NLL difference it calls none, K0=4 at 67% within 0.1% of uniform), in nats;
whether the interval contains 0 decides nothing. Without the uniform run there is no margin, and
the row is not measured.
"""

from __future__ import annotations

import math
import operator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from biosrecall.diagnose import DiagnoseOptions, diagnose_update
from biosrecall.diagnose.report import depth_average
from biosrecall.errors import BiosrecallError
from biosrecall.experiments.claims import Claim, judge_claims
from biosrecall.experiments.engine import RUNS, Study
from biosrecall.experiments.lm_grid import (
    AFTER_UNIFORM,
    CURRICULUM,
    DIAGNOSE,
    DIAGNOSED,
    GRID,
    MATCHED,
    MATCHED_TO,
    SERVING,
    UNIFORM,
    LMStudyOptions,
    fixed_first_name,
    parse_grid,
)
from biosrecall.experiments.study import check_seeds
from biosrecall.lm import compare_plots as plots
from biosrecall.lm.evaluate import read_table
from biosrecall.lm.shard_manifest import load_manifest
from biosrecall.lm.task import lm_plan
from biosrecall.outputs import interval_cell, markdown_columns
from biosrecall.records import Count, parse_record
from biosrecall.stats import aggregate_seeds
from biosrecall.sweep.jobs import Evaluation, SweepRun
from biosrecall.train.config import TrainConfig
from biosrecall.train.run_folder import RunFolder

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


def resolve_preset(preset: str) -> LMStudyPreset:
    if preset not in LM_STUDY_PRESETS:
        raise BiosrecallError(
            f"unknown lm study preset {preset!r}; choose one of: {', '.join(LM_STUDY_PRESETS)}"
        )
    return LM_STUDY_PRESETS[preset]


def _settings(options: LMStudyOptions) -> tuple[LMStudyPreset, int]:
    """The preset and the updates every run trains: the preset's, or as many whole updates as
    `tokens` buys."""
    settings = resolve_preset(options.preset)
    if options.tokens is None:
        return settings, settings.updates
    per_update = settings.batch_size * settings.seq_len
    if options.tokens < per_update:
        raise BiosrecallError(
            f"a token budget of {options.tokens:,} is under one update ({settings.batch_size} x "
            f"{settings.seq_len} = {per_update:,} tokens)"
        )
    return settings, options.tokens // per_update


# ---- the declaration: grid, evaluation, per-run table, tables, claims, figures, sizes ----


def runs(options: LMStudyOptions) -> list[SweepRun]:
    """One `lm train` run per grid item and seed, labelled with both."""
    check_seeds(tuple(options.seeds))
    s, updates = _settings(options)
    task = {
        "data": Path(options.data).resolve(),
        "preset": s.model_preset,
        "model_overrides": dict(s.model_overrides) or None,
    }

    def config(item: str, seed: int) -> TrainConfig:
        size = {"budget_of": f"{GRID[MATCHED_TO]}:{updates}"} if item == MATCHED else {"updates": updates}
        return TrainConfig(
            schedule=GRID[item],
            seed=seed,
            batch_size=s.batch_size,
            seq_len=s.seq_len,
            lr=s.lr,
            device=options.device,
            checkpoint_fractions=(1.0,),
            **size,
        )

    return [
        SweepRun(f"{item}/seed{seed}", "lm train", config(item, seed), task, {"item": item, "seed": seed})
        for seed in options.seeds
        for item in parse_grid(",".join(options.grid))  # checked, in `GRID`'s order
    ]


def evaluations(options: LMStudyOptions) -> list[Evaluation]:
    settings, _ = _settings(options)
    extra = {} if settings.eval_sequences is None else {"max_sequences": settings.eval_sequences}
    return [Evaluation("lm eval", {"max_depth": settings.max_depth, "device": options.device, **extra})]


def evaluated(run_dir: Path) -> bool:
    """Whether the run has finished and `lm eval` has written its NLL table (the study's settings,
    checked against lm_study.json, fix the evaluation's)."""
    folder = RunFolder(run_dir)
    return folder.finished() and folder.lm_eval_tables()[0].is_file()


def read(run_dir: Path) -> pd.DataFrame:
    """The final checkpoint's rows of the run's NLL table."""
    table = read_table(run_dir)
    return table[table["update"] == table["update"].max()]


def nll_table(per_run: pd.DataFrame) -> pd.DataFrame:
    """lm_nll: every run's final-checkpoint NLL at every serving depth, with its item and seed."""
    columns = ["item", "schedule", "seed", "depth", "nll", "update", "flops", "train_tokens", "wall_seconds"]
    return per_run[columns].sort_values(["item", "seed", "depth"], key=_grid_order, ignore_index=True)


def _grid_order(column: pd.Series) -> pd.Series:
    return column.map(list(GRID).index) if column.name == "item" else column


def run_summaries(table: pd.DataFrame) -> pd.DataFrame:
    """One row per item and seed: mean serving NLL over K=1..16, NLL at K=1, K=16 and beyond, updates, FLOPs,
    wall seconds, and both savings against the same seed's uniform run (NaN without one)."""
    rows = []
    for (item, seed), part in table.groupby(["item", "seed"], sort=False):
        by_depth = part.set_index("depth")["nll"]
        serving = by_depth[(by_depth.index >= SERVING[0]) & (by_depth.index <= SERVING[1])]
        beyond = by_depth[by_depth.index > SERVING[1]]
        rows.append(
            {
                "item": item,
                "schedule": part["schedule"].iloc[0],
                "seed": seed,
                "mean_nll": float(serving.mean()),
                "nll_k1": float(by_depth.get(1, math.nan)),
                "nll_k16": float(by_depth.get(16, math.nan)),
                "beyond_nll": float(beyond.mean()) if len(beyond) else math.nan,
                "update": int(part["update"].iloc[0]),
                "flops": float(part["flops"].iloc[0]),
                "wall_seconds": float(part["wall_seconds"].iloc[0]),
            }
        )
    runs_ = pd.DataFrame(rows)
    uniform = runs_[runs_["item"] == UNIFORM].set_index("seed")
    for column, saving in (("flops", "compute_saving_pct"), ("wall_seconds", "wall_saving_pct")):
        runs_[saving] = 100 * (1 - runs_[column] / runs_["seed"].map(uniform[column]))
    runs_["mean_nll_vs_uniform_pct"] = 100 * (runs_["mean_nll"] / runs_["seed"].map(uniform["mean_nll"]) - 1)
    return runs_


class Scores(NamedTuple):
    """The study's per-run table (`evaluate`): what its tables, claims and figures read."""

    nll: pd.DataFrame
    """lm_nll (`nll_table`): every run's final-checkpoint NLL at every serving depth."""
    diagnosis: pd.DataFrame | None
    """lm_diagnose (`diagnose_runs`): the update diagnostic per seed; None without its run."""


def tables(scores: Scores, options=None) -> dict[str, pd.DataFrame]:
    """lm_nll; lm_summary: `run_summaries`' numbers per item (all but its updates), mean over seeds
    with 95% intervals; lm_diagnose when the grid has the diagnosed run."""
    summaries = run_summaries(scores.nll)
    values = [column for column in summaries.columns if column not in ("item", "schedule", "seed", "update")]
    summary = aggregate_seeds(summaries, ["item", "schedule"], values)
    diagnosis = {} if scores.diagnosis is None else {"lm_diagnose": scores.diagnosis}
    return {"lm_nll": scores.nll, "lm_summary": summary, **diagnosis}


def markdown(tables: dict[str, pd.DataFrame]) -> dict[str, str]:
    """`LM_STUDY.markdown`: lm_summary.md (`SUMMARY_COLUMNS`), the one table with a page of its own."""
    return {"lm_summary": markdown_columns(tables["lm_summary"], SUMMARY_COLUMNS)}


SUMMARY_COLUMNS = {
    "item": "{item}",
    "mean NLL, K=1..16": interval_cell("mean_nll", "{:.4f}"),
    "NLL at K=1": interval_cell("nll_k1", "{:.4f}"),
    "NLL at K=16": interval_cell("nll_k16", "{:.4f}"),
    "NLL, K=17..max": interval_cell("beyond_nll", "{:.4f}"),
    "mean NLL vs uniform, %": interval_cell("mean_nll_vs_uniform_pct", "{:+.2f}"),
    "modeled compute saving, %": interval_cell("compute_saving_pct", "{:.1f}"),
    "wall-clock saving, %": interval_cell("wall_saving_pct", "{:.1f}"),
    "seeds": "{n_seeds}",
}
"""lm_summary.md's columns (header -> cell, `outputs.markdown_columns`): one row per grid item (its
schedule is `GRID`'s), each value its mean over seeds with the 95% interval (NLL in nats per token;
savings and NLL against the same seed's uniform run)."""


def figures(scores: Scores, options=None) -> dict[str, Any]:
    """From lm_nll: NLL against serving depth and mean serving NLL against modeled compute, over seeds."""
    table = scores.nll
    # Log-spaced depths: the plot ticks every depth it draws, and 64 ticks on a log axis overlap
    # (lm_nll.csv has every depth).
    shown = [d for d in sorted(set(table["depth"])) if d in PLOTTED_DEPTHS or d == table["depth"].max()]
    labelled = table[table["depth"].isin(shown)].rename(columns={"item": "run"})
    curves = aggregate_seeds(labelled, ["run", "schedule", "depth"], ["nll"])
    points = run_summaries(table).rename(columns={"item": "run"}).assign(checkpoint="1.0")
    summaries = aggregate_seeds(points, ["run", "schedule", "checkpoint"], ["update", "flops", "mean_nll"])
    order = [item for item in GRID if item in set(table["item"])]
    return {
        "nll_vs_depth": plots.plot_nll_vs_depth(curves, order),
        "nll_vs_compute": plots.plot_nll_vs_compute(summaries, order),
    }


def sizes(run: SweepRun, options: LMStudyOptions) -> dict[str, Any]:
    """Updates, tokens and modeled FLOPs of a run, from the trainer's own planner (a budget under one
    update, an unknown schedule or override fails here; the corpus's manifest gives the vocabulary)."""
    plan = lm_plan(run.config, run.task["preset"], run.task["model_overrides"], Path(options.data))[1]
    return {
        "updates": plan.updates,
        "tokens": plan.updates * plan.tokens_per_update,
        "FLOPs": int(plan.total_flops),
    }


# ---- the claims: the paper's statements, judged by `biosrecall.experiments.claims` ----

ABOUT = 5.0  # "about X%" of a saving: within this many percentage points of X
ZERO_SHARE = 1e-3
"""The update diagnostic's margin: this share of uniform's mean serving NLL (module docstring)."""
FIXED_FIRST = [fixed_first_name(k0, s, "uniform") for k0 in (1, 2, 4) for s in (0.67, 0.8)]
DIAGNOSTIC = "update-diagnostic"  # the diagnosis's rows in the table the claims are judged on


GAP, SAVING, WALL_SAVING = "mean_nll_vs_uniform_pct", "compute_saving_pct", "wall_saving_pct"


def _value(rows, item, column="mean_nll") -> float:
    """`column` of `item` in one seed's rows, NaN without the run: an lm_nll column, or one of its
    `run_summaries` (mean serving NLL, NLL at K=1, the NLL gap and savings against the seed's uniform)."""
    part = rows.loc[rows["item"] == item, column]
    return float(part.iloc[0]) if len(part) else math.nan


def _worst(values, pick) -> float:
    """`pick` (min or max) of `values`, NaN when any is NaN (a run the claim needs is missing)."""
    values = [float(v) for v in values]
    return math.nan if not values or any(math.isnan(v) for v in values) else pick(values)


def _worst_gap(pick, pairs, column="mean_nll", compare=operator.sub):
    """The metric "`pick` (min or max) over `pairs` of (run, other run) of compare(run's `column`,
    other's)" on one seed's rows: "A beats the better of B and C" is the max of A - B and A - C, "for
    all six" the min over six pairs."""
    return lambda rows: _worst(
        [compare(_value(rows, a, column), _value(rows, b, column)) for a, b in pairs], pick
    )


def _ratio_minus_one(value: float, other: float) -> float:
    return value / other - 1


def _reversed_from_k3(rows) -> float:
    """At 67%: the smallest margin, over K=3..16, of the reversed order K0=4 < K0=2 < K0=1 (positive
    at every depth: the order holds everywhere from K=3 on; NaN when a run is missing, as its curve
    is then empty)."""
    k1, k2, k4 = (_curve(rows, fixed_first_name(k0, 0.67, "uniform")) for k0 in (1, 2, 4))
    return float(np.minimum(k1 - k2, k2 - k4).min())


def _curve(rows, item) -> pd.Series:
    """NLL of `item` in one seed's rows at depths 3..16, indexed by depth."""
    part = rows[(rows["item"] == item) & rows["depth"].between(3, SERVING[1])]
    return part.set_index("depth")["nll"].sort_index()


def _wall_vs_modeled(rows) -> float:
    """Largest relative distance, over the uniform-finish fixed-first runs, of the measured wall-clock
    saving from the modeled one: |wall saving - modeled saving| / modeled saving."""
    gaps = []
    for item in FIXED_FIRST:
        modeled, wall = _value(rows, item, SAVING), _value(rows, item, WALL_SAVING)
        gaps.append(abs(wall - modeled) / modeled if modeled > 0 else math.nan)
    return _worst(gaps, max)


K1_67, K2_67, K2_80, K4_67 = (
    fixed_first_name(k0, s, "uniform") for k0, s in ((1, 0.67), (2, 0.67), (2, 0.8), (4, 0.67))
)
FINISHES_PAIRED = [
    (fixed_first_name(k0, s, "poisson_lognormal"), fixed_first_name(k0, s, "uniform"))
    for k0 in (1, 2, 4)
    for s in (0.67, 0.8)
]
"""Each fixed-first schedule with a Poisson-lognormal finish, beside its uniform-finish twin."""
K2_VS_CURRICULUM = [(K2_67, CURRICULUM), (K2_80, CURRICULUM)]


def _compute_saving(k0: int, switch: float, saving: float, statement: str) -> Claim:
    """The claim `statement`: fixed-first K0=`k0` at `switch` saves about `saving`% of uniform's
    modeled compute, "about" read as within `ABOUT` points."""
    item = fixed_first_name(k0, switch, "uniform")
    return Claim(
        f"k{k0}_{switch * 100:.0f}_compute_saving",
        statement,
        f"distance of the modeled compute saving vs uniform from {saving:g}%, in points",
        False,
        ABOUT,
        f"'about {saving:g}%' read as within {ABOUT:g} points",
        lambda r: abs(_value(r, item, SAVING) - saving),
        paper=f"{saving:g}%",
    )


def _nll_within(k0: int, switch: float, bound: float) -> Claim:
    """The claim that fixed-first K0=`k0` at `switch` has a mean serving NLL within `bound`% of
    uniform's: two-sided, the whole interval of the paired gap inside [-bound, bound]."""
    item = fixed_first_name(k0, switch, "uniform")
    return Claim(
        f"k{k0}_{switch * 100:.0f}_nll_within",
        f"K0={k0} at {switch:.0%}: mean serving NLL within {bound:g}% of uniform",
        "mean NLL K=1..16, run / uniform - 1, in % (paired by seed)",
        True,
        (-bound, bound),
        "the paper's bound, two-sided",
        lambda r: _value(r, item, GAP),
        paper=f"within {bound:g}%",
    )


# Thresholds from the paper's statements, each with its reading and the paper's own number.
LM_CLAIMS: tuple[Claim, ...] = (
    _compute_saving(2, 0.67, 45.0, "K0=2 at 67% saves about 45% of modeled compute"),
    _nll_within(2, 0.67, 0.5),
    _compute_saving(2, 0.8, 54.0, "K0=2 at 80% saves about 54% of modeled compute"),
    _nll_within(2, 0.8, 0.8),
    Claim(
        "k1_best_at_k1",
        "At 67%, K0=1 has the best NLL at K=1",
        "NLL at K=1: K0=1 minus the better of K0=2, K0=4 (uniform finish, 67%)",
        False,
        0.0,
        "a direction",
        _worst_gap(max, [(K1_67, K2_67), (K1_67, K4_67)], "nll_k1"),
        paper="K0=1 best at K=1",
    ),
    Claim(
        "order_reverses_from_k3",
        "At 67%, the ordering reverses from K=3 on (K0=4 < K0=2 < K0=1)",
        "smallest margin over K=3..16 of nll(K0=1)-nll(K0=2) and nll(K0=2)-nll(K0=4)",
        True,
        0.0,
        "a direction, at every depth from 3 to 16",
        _reversed_from_k3,
        paper="reversed from K=3",
    ),
    Claim(
        "uniform_finish_beats_pln",
        "A uniform finish gives lower mean NLL than Poisson-lognormal, for all six fixed-first schedules",
        "smallest over the six of mean NLL (Poisson-lognormal) - mean NLL (uniform finish)",
        True,
        0.0,
        "a direction, for every one of the six",
        _worst_gap(min, FINISHES_PAIRED),
        paper="6 of 6",
    ),
    Claim(
        "k2_beats_curriculum_nll",
        "The K0=2 uniform-finish schedules beat the curriculum's mean NLL",
        "largest over 67%, 80% of mean NLL (K0=2) - mean NLL (curriculum)",
        False,
        0.0,
        "a direction, for both",
        _worst_gap(max, K2_VS_CURRICULUM),
        paper="both lower",
    ),
    Claim(
        "k2_less_compute_than_curriculum",
        "... with less compute than the curriculum",
        "largest over 67%, 80% of modeled FLOPs (K0=2) / curriculum - 1",
        False,
        0.0,
        "a direction, for both",
        _worst_gap(max, K2_VS_CURRICULUM, "flops", _ratio_minus_one),
        paper="both cheaper",
    ),
    _nll_within(4, 0.67, 0.1),
    _compute_saving(4, 0.67, 31.0, "K0=4 at 67% uses about 31% less compute"),
    Claim(
        "matched_uniform_worse",
        "The compute-matched uniform run is worse than both K0=4 at 67% and uniform",
        "mean NLL (matched uniform) - the better of K0=4 / 67% and uniform",
        True,
        0.0,
        "a direction",
        _worst_gap(max, [(MATCHED, K4_67), (MATCHED, UNIFORM)]),
        paper="worse than both",
    ),
    Claim(
        "wall_matches_modeled",
        "Fixed-first's measured wall-clock saving is within 10% of its modeled saving",
        "largest over the uniform-finish fixed-first runs of abs(wall saving - modeled saving) / modeled",
        False,
        0.10,
        "the paper's 10%, relative to the modeled saving",
        _wall_vs_modeled,
        paper="within 10%",
    ),
)


def diagnostic_claim(margin: float) -> Claim:
    """The update diagnostic's claim against a margin of +-`margin` nats (NaN: no uniform run)."""
    return Claim(
        "update_diagnostic_zero",
        "16 uniform updates after the switch (K0=4, 67%), a K=16 update's depth-averaged advantage over "
        "a K=4 update is indistinguishable from zero",
        "depth-averaged NLL advantage of the K=16 update (`biosrecall diagnose`), per seed",
        True,
        (-margin, margin),
        f"'indistinguishable from zero' read as inside +-{ZERO_SHARE:.1%} of uniform's mean serving NLL, "
        "the paper's tightest bound on an NLL difference it calls none (K0=4 at 67% within 0.1%)",
        lambda rows: _value(rows, DIAGNOSTIC, "nll"),
        paper="indistinguishable from zero",
        note="" if not math.isnan(margin) else "needs the uniform run, whose NLL sets the margin",
    )


def zero_margin(summaries: pd.DataFrame) -> float:
    """The diagnostic's margin in nats: `ZERO_SHARE` of uniform's mean serving NLL over seeds (from
    `run_summaries`), to 3 significant digits (the threshold cell shows the number it was judged against)."""
    means = summaries.loc[summaries["item"] == UNIFORM, "mean_nll"].dropna()
    return float(f"{ZERO_SHARE * means.mean():.3g}") if len(means) else math.nan  # no all-NaN warning


def judge(scores: Scores, options=None) -> pd.DataFrame:
    """`LM_STUDY.judge`: the paper's statements (`LM_CLAIMS`) judged over the seeds of lm_nll, and the
    update diagnostic's against a margin from lm_nll, its row from the diagnosis (columns seed,
    advantage; "not measured" without it). A claim's reason for not being measured shows as its
    verdict, so the table has no `note` column. Each seed's rows carry its runs' `run_summaries`, the
    numbers lm_summary averages."""
    table, diagnosis = scores
    summaries = run_summaries(table)
    rows = table.merge(
        summaries[["item", "seed", "mean_nll", "nll_k1", GAP, SAVING, WALL_SAVING]], on=["item", "seed"]
    )
    if diagnosis is not None and len(diagnosis):
        extra = diagnosis.assign(item=DIAGNOSTIC, nll=diagnosis["advantage"])[["item", "seed", "nll"]]
        rows = pd.concat([rows, extra], ignore_index=True)
    claims = [*LM_CLAIMS, diagnostic_claim(zero_margin(summaries))]
    return judge_claims(rows, claims).drop(columns=["note"], errors="ignore")


# ---- the study's own steps on the engine (module doc): its record, diagnostic and files ----


def pins(options: LMStudyOptions) -> dict[str, Any]:
    """`LM_STUDY.pins`: what an output's runs were made with beyond its options (`--data` and
    `--tokens` are free: any folder of the same corpus, any budget of the same updates). The corpus
    is its tokenizer (trained on its training documents), vocabulary and training tokens: the same
    corpus prepared by a later release, whose manifest names that release, is the same data."""
    settings, updates = _settings(options)
    manifest = load_manifest(Path(options.data))  # a BiosrecallError when it is not `lm prepare` output
    corpus = {
        "tokenizer_sha256": manifest["tokenizer"]["sha256"],
        "vocab_size": int(manifest["tokenizer"]["vocab_size"]),
        "train_tokens": int(manifest["splits"]["train"]["tokens"]),
    }
    return {"data": corpus, "settings": asdict(settings), "updates": updates, "schedules": dict(GRID)}


@dataclass(kw_only=True)
class EarlierRecord:
    """The fields of an lm_study.json that releases up to 0.2.0 wrote, before the study's record was
    the engine's: `upgrade` reads them (its other keys, versions and machine, are kept)."""

    preset: str
    """The preset (`LM_STUDY_PRESETS`)."""
    settings: dict[str, Any]
    """The preset's settings."""
    updates: Count
    """Updates each run takes (the preset's, or what `--tokens` asked for)."""
    tokens_per_update: Count
    """Batch size times sequence length."""
    device: str
    """The `--device` asked for."""
    data: dict[str, Any]
    """The corpus: its tokenizer, vocabulary and training tokens, the manifest's hash and sources."""
    schedules: dict[str, str]
    """Every grid item the release knew, with its schedule (`lm_grid.GRID`)."""
    grid: list[str]
    """The grid items trained."""
    seeds: list[Count]
    """The seeds trained."""


def upgrade(record: dict[str, Any], where: str) -> dict[str, Any]:
    """`LM_STUDY.upgrade`: an lm_study.json of release 0.2.0 or before as the engine's record (its
    `--data` the command that prepared the corpus, as the record named it), so that its output, the
    committed archive included, continues."""
    if "options" in record:
        return record
    parse_record(record, EarlierRecord, where)
    updates, sources = record["updates"], " ".join(map(str, record["data"].get("sources") or ["?"]))
    options = {key: record[key] for key in ("preset", "seeds", "grid", "device")}
    options["data"] = f"<lm prepare {sources}>"
    options["tokens"] = (
        None if updates == record["settings"].get("updates") else updates * record["tokens_per_update"]
    )
    pinned = {key: record[key] for key in ("settings", "updates", "schedules")}
    pinned["data"] = {
        key: record["data"].get(key) for key in ("tokenizer_sha256", "vocab_size", "train_tokens")
    }
    return {**record, "study": "lm_study", "options": options, "pins": pinned}


def evaluate(runs_dir: Path, grid_runs: list[SweepRun], options: LMStudyOptions, executor) -> Scores:
    """Every run's NLL rows (`read` with its labels) and every seed's update diagnostic, made in
    OUT/diagnose (`LM_STUDY.evaluate`: it runs in this process, on a run's threads)."""
    diagnosis = diagnose_runs(runs_dir.parent, options, executor.threads)
    rows = [read(runs_dir / run.name).assign(**run.labels) for run in grid_runs]
    return Scores(nll_table(pd.concat(rows, ignore_index=True)), diagnosis)


def diagnose_runs(out_dir: Path, options: LMStudyOptions, threads: int = 1) -> pd.DataFrame | None:
    """Per seed, the depth-averaged NLL advantage of a K=16 over a K=4 update after `AFTER_UNIFORM`
    uniform updates from K0=4 / 67%'s switch (None when the grid has no such run). Each seed's
    diagnosis is written to OUT/diagnose/<item>/seed<S>/ and read back on later calls."""
    if DIAGNOSED not in options.grid:
        return None
    settings, _ = _settings(options)
    diagnose = DiagnoseOptions(
        after_uniform=(AFTER_UNIFORM,),
        batches=settings.diagnose_batches,
        val_sequences=settings.eval_sequences,
        seed=0,
    )
    rows = []
    for seed in options.seeds:
        name = f"{DIAGNOSED}/seed{seed}"
        out = out_dir / DIAGNOSE / name
        if not (out / "diagnose_switch.json").is_file():  # written last: the diagnosis is complete
            run_dir = out_dir / RUNS / name
            # One run's threads: on torch's default, on a busy 2-core machine, the diagnostic was many
            # times slower than on one thread (docs/results/lm-sizing.md).
            diagnose_update(run_dir, "switch", diagnose, device=options.device, threads=threads).write(out)
        averages = depth_average(pd.read_parquet(out / "diagnose_switch.parquet"))
        nll = averages[(averages["metric"] == "nll") & (averages["after_uniform"] == AFTER_UNIFORM)]
        rows.append(nll.head(1).assign(item=DIAGNOSED, seed=seed).rename(columns={"mean": "advantage"}))
    return pd.concat(rows, ignore_index=True)[DIAGNOSIS_COLUMNS]


DIAGNOSIS_COLUMNS = ["item", "seed", "after_uniform", "update", "advantage", "ci_low", "ci_high", "n_batches"]
"""lm_diagnose's columns: the diagnosed run and seed, then its depth-averaged advantage (`mean` of
`biosrecall.diagnose.report.depth_average`) with its interval over the diagnostic's batches."""


LM_STUDY = Study(
    name="lm_study",
    summary="The paper's Figure-2 LM study over seeds, with its claims judged.",
    options=LMStudyOptions,
    runs=runs,
    evaluations=evaluations,
    done=evaluated,
    sizes=sizes,
    growing=("seeds", "grid"),
    free=("data", "tokens"),
    pins=pins,
    shown=("preset",),
    upgrade=upgrade,
    command="lm study",
    evaluate=evaluate,  # the update diagnostic runs in this process, after training
    tables=tables,
    markdown=markdown,  # lm_summary.md's cells are "mean [95% interval]"; lm_nll and lm_diagnose have none
    judge=judge,
    claims_stem="lm_claims",
    claims_paper=True,
    figures=figures,
)
