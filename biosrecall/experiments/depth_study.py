"""Depth extrapolation: does a schedule's NLL hold beyond the deepest depth it trained on?

    biosrecall study depth --data data/lm-kjv --out runs/depth --preset small --seeds 0,1,2
    biosrecall study depth --data data/lm-kjv --out runs/depth --plan      # sizes; trains nothing

The worked example of docs/guides/write-a-study.md: a whole study declared on the engine
(`biosrecall.experiments.engine`) in one file. Each schedule of `lm study`'s grid named in
`schedules` trains one `lm train` run per seed at an `lm study` preset's size, and is evaluated on the
corpus's validation split at serving depths 1..`max_depth` (`lm eval`; 64 by default, the paper's
K=17..64 beyond the training range).

Table `depth_extrapolation`, per schedule over seeds (mean and 95% t interval): the NLL at
K=`trained_depth`, the mean NLL over K=trained_depth+1..max_depth, and their gap (beyond / at K - 1,
in %); figure `nll_vs_depth`, the NLL against serving depth per schedule. Claims, one per schedule:
its NLL beyond the trained depth stays within `margin_pct` % of its NLL at that depth. A margin
claim: it holds when the whole interval of the gap lies inside the margin, does not hold when it
lies wholly outside, and is inconclusive otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from biosrecall.errors import BiosrecallError
from biosrecall.experiments.engine import Study
from biosrecall.experiments.lm_grid import GRID
from biosrecall.experiments.study import check_seeds
from biosrecall.sweep.jobs import Evaluation, SweepRun
from biosrecall.train.config import TrainConfig

TABLE = "depth_extrapolation"
WHY = "--margin-pct: the LM study's largest NLL gap between schedules is 1.6%; a smaller drift keeps their order"


@dataclass(frozen=True)
class DepthOptions:
    data: str = ""
    """The corpus folder `biosrecall lm prepare` wrote."""
    preset: str = "tiny"
    """The size of every run, an `lm study` preset: tiny (seconds per run) or small (the LM study's)."""
    schedules: tuple[str, ...] = ("uniform", "ff-k4-s0.67-uniform", "fixed-k4")
    """The schedules compared, as `lm study --grid` names them."""
    seeds: tuple[int, ...] = (0,)
    """Seeds: each trains every schedule, and the claims are judged over them."""
    trained_depth: int = 16
    """The reference depth: the deepest one the schedules train on (uniform's K=1..16)."""
    max_depth: int = 64
    """The deepest serving depth evaluated."""
    margin_pct: float = 1.0
    """A schedule holds its NLL when the gap stays within +-this many percent: the largest NLL gap
    between schedules the LM study reports is 1.6%, so a smaller drift does not reorder them."""
    device: str = "auto"
    """Where runs train and evaluate: auto, cpu, cuda or mps."""


def _settings(options: DepthOptions):
    """The `lm study` preset, every option checked before anything is written."""
    from biosrecall.experiments.lm_study import resolve_preset
    from biosrecall.lm.shard_manifest import load_manifest

    check_seeds(options.seeds)
    if not 1 <= options.trained_depth < options.max_depth or not options.margin_pct > 0:
        raise BiosrecallError("need 1 <= --trained-depth < --max-depth and a --margin-pct above 0")
    load_manifest(Path(options.data))  # one line when it is not `lm prepare` output
    return resolve_preset(options.preset)


def runs(options: DepthOptions) -> list:
    from biosrecall.experiments.lm_study import parse_grid

    s = _settings(options)
    task = {
        "data": Path(options.data).resolve(),
        "preset": s.model_preset,
        "model_overrides": dict(s.model_overrides) or None,
    }
    return [
        SweepRun(
            f"{item}/seed{seed}",
            "lm train",
            TrainConfig(
                schedule=GRID[item],
                seed=seed,
                batch_size=s.batch_size,
                seq_len=s.seq_len,
                lr=s.lr,
                updates=s.updates,
                device=options.device,
                checkpoint_fractions=(1.0,),
            ),
            task,
            {"schedule": item, "seed": seed},
        )
        for seed in options.seeds
        for item in parse_grid(",".join(options.schedules))
    ]


def evaluations(options: DepthOptions) -> list:
    sequences = _settings(options).eval_sequences
    extra = {} if sequences is None else {"max_sequences": sequences}
    return [Evaluation("lm eval", {"max_depth": options.max_depth, "device": options.device, **extra})]


def done(run_dir: Path) -> bool:
    from biosrecall.experiments.lm_study import evaluated

    return evaluated(run_dir)


def read(run_dir: Path):
    """The final checkpoint's NLL at every serving depth (`lm study`'s rows of it)."""
    from biosrecall.experiments.lm_study import read

    return read(run_dir)[["depth", "nll"]]


def _gap_pct(rows, options: DepthOptions) -> float:
    """One run's mean NLL beyond the trained depth against its NLL there, in % (NaN without it)."""
    at = rows.loc[rows["depth"] == options.trained_depth, "nll"]
    beyond = rows.loc[rows["depth"] > options.trained_depth, "nll"]
    return 100 * (beyond.mean() / at.iloc[0] - 1) if len(at) and len(beyond) else float("nan")


def tables(per_run, options: DepthOptions) -> dict:
    import pandas as pd

    from biosrecall.stats import aggregate_seeds

    k = options.trained_depth
    rows = [
        {
            "schedule": schedule,
            "seed": seed,
            f"nll_k{k}": float(part.loc[part["depth"] == k, "nll"].mean()),
            "nll_beyond": float(part.loc[part["depth"] > k, "nll"].mean()),
            "gap_pct": _gap_pct(part, options),
        }
        for (schedule, seed), part in per_run.groupby(["schedule", "seed"], sort=False)
    ]
    return {TABLE: aggregate_seeds(pd.DataFrame(rows), ["schedule"], [f"nll_k{k}", "nll_beyond", "gap_pct"])}


def claims(per_run, options: DepthOptions) -> list:
    from biosrecall.experiments.claims import Claim

    k, margin = options.trained_depth, options.margin_pct
    return [
        Claim(
            f"{schedule}_holds_beyond_k{k}",
            f"{schedule}: the NLL over K={k + 1}..{options.max_depth} stays within {margin:g}% of the NLL at K={k}",
            f"mean NLL over K={k + 1}..{options.max_depth} / NLL at K={k} - 1, in % (per seed)",
            True,
            (-margin, margin),
            WHY,
            lambda rows, schedule=schedule: _gap_pct(rows[rows["schedule"] == schedule], options),
        )
        for schedule in dict.fromkeys(per_run["schedule"])
    ]


def figures(per_run, options: DepthOptions) -> dict:
    """NLL against serving depth, one line per schedule (mean over seeds, 95% band)."""
    from biosrecall.lm.compare_plots import plot_nll_vs_depth
    from biosrecall.stats import aggregate_seeds

    labelled = per_run.assign(run=per_run["schedule"], schedule=per_run["schedule"].map(GRID))
    curves = aggregate_seeds(labelled, ["run", "schedule", "depth"], ["nll"])
    return {"nll_vs_depth": plot_nll_vs_depth(curves, list(dict.fromkeys(per_run["schedule"])))}


def sizes(run, options: DepthOptions) -> dict:
    """Updates, tokens and modeled FLOPs of a run: `lm study`'s, as its runs are (no data is read)."""
    from biosrecall.experiments.lm_study import sizes

    return sizes(run, options)


DEPTH = Study(
    name="depth",
    summary="Depth extrapolation: each schedule's NLL beyond the deepest depth it trained on.",
    options=DepthOptions,
    runs=runs,
    evaluations=evaluations,
    done=done,
    read=read,
    tables=tables,
    claims=claims,
    figures=figures,
    sizes=sizes,
)
