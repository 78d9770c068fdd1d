"""The paper's language-model statements, each judged from the LM study's NLL table over seeds.

    claims = judge_lm_claims(table)        # table: lm_nll (item, seed, depth, nll, flops, wall_seconds)
    write_lm_claims(claims, "runs/lm-study")   # lm_claims.csv / .parquet / .md

The machinery is the Figure-1 claims' (`biosrecall.experiments.claims`): each claim is a metric
computed on every seed separately (paired: the runs of one seed read the same batches), a 95% t
interval over seeds and a threshold; "holds" when the whole interval is on the claim's side,
"does not hold" when it is wholly on the other side, "inconclusive" when it straddles the threshold
or there is one seed; "not measured" when the grid left out a run the claim needs. Each row carries
the paper's own number (`paper`) and, in lm_claims.md, how many seeds would decide it. Earlier looks
at another seed count are kept as lm_claims_at_<n>seeds.csv and shown beside the current verdict.

Metrics: mean serving NLL is the mean over K=1..16 of the final checkpoint's validation NLL; a NLL
gap is run / uniform - 1 (same seed); a compute saving is 1 - modeled training FLOPs / uniform's
(the trainer's own FLOP account, the same for every seed), a wall-clock saving the same with the
measured training seconds. "About X%" of a saving is read as within 5 points of X.

The update diagnostic's row (`diagnosis`, one depth-averaged advantage per seed from
`lm_study.diagnose_runs`) reads "indistinguishable from zero" as the paper does: it holds when the
95% interval over seeds contains 0 and does not hold when it excludes 0 (one seed: inconclusive).
Its seeds-to-decide estimate is then the seed count at which the interval would exclude 0 ("never"
when the mean is 0).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from biosrecall.experiments.claims import (
    FAILS,
    HOLDS,
    NOT_MEASURED,
    Claim,
    judge_claims,
    write_claims,
)
from biosrecall.experiments.lm_grid import CURRICULUM, MATCHED, SERVING, UNIFORM, fixed_first_name

NAME = "lm_claims"
ABOUT = 5.0  # "about X%" of a saving: within this many percentage points of X
FIXED_FIRST = [fixed_first_name(k0, s, "uniform") for k0 in (1, 2, 4) for s in (0.67, 0.8)]


def _nll(rows: pd.DataFrame, item: str, depths: tuple[int, int] = SERVING) -> pd.Series:
    """NLL of `item` in one seed's rows, indexed by depth, over the inclusive depth range."""
    part = rows[(rows["item"] == item) & rows["depth"].between(*depths)]
    return part.set_index("depth")["nll"].sort_index()


def _mean(rows, item) -> float:
    values = _nll(rows, item)
    return float(values.mean()) if len(values) else math.nan


def _value(rows, item, column) -> float:
    part = rows.loc[rows["item"] == item, column]
    return float(part.iloc[0]) if len(part) else math.nan


def _gap_pct(rows, item) -> float:
    """Mean serving NLL of `item` against uniform's, in % (run / uniform - 1)."""
    return 100 * (_mean(rows, item) / _mean(rows, UNIFORM) - 1)


def _saving_pct(rows, item, column="flops") -> float:
    return 100 * (1 - _value(rows, item, column) / _value(rows, UNIFORM, column))


def _off_by(target: float):
    """Distance in points of `item`'s modeled compute saving from the paper's `target`."""
    return lambda item: lambda rows: abs(_saving_pct(rows, item) - target)


def _worst(values, pick) -> float:
    """`pick` (min or max) of `values`, NaN when any is NaN (a run the claim needs is missing)."""
    values = [float(v) for v in values]
    return math.nan if not values or any(math.isnan(v) for v in values) else pick(values)


def _k1_advantage(rows) -> float:
    """At 67%: NLL at K=1 of K0=1 minus the better of K0=2 and K0=4 (negative: K0=1 is best)."""
    at_k1 = [_nll(rows, fixed_first_name(k0, 0.67, "uniform"), (1, 1)) for k0 in (1, 2, 4)]
    if any(len(values) == 0 for values in at_k1):
        return math.nan
    return float(at_k1[0].iloc[0] - min(at_k1[1].iloc[0], at_k1[2].iloc[0]))


def _reversed_from_k3(rows) -> float:
    """At 67%: the smallest margin, over K=3..16, of the reversed order K0=4 < K0=2 < K0=1 (positive
    at every depth: the order holds everywhere from K=3 on)."""
    curves = [_nll(rows, fixed_first_name(k0, 0.67, "uniform"), (3, SERVING[1])) for k0 in (1, 2, 4)]
    if any(len(curve) == 0 for curve in curves):
        return math.nan
    k1, k2, k4 = curves
    return float(np.minimum(k1 - k2, k2 - k4).min())


def _finish_margin(rows) -> float:
    """Smallest margin, over the six fixed-first schedules, of Poisson-lognormal's mean NLL above the
    uniform finish's (positive: uniform finish lower in all six)."""
    margins = [
        _mean(rows, fixed_first_name(k0, s, "poisson_lognormal"))
        - _mean(rows, fixed_first_name(k0, s, "uniform"))
        for k0 in (1, 2, 4)
        for s in (0.67, 0.8)
    ]
    return _worst(margins, min)


def _k2_vs_curriculum_nll(rows) -> float:
    """Largest mean-NLL gap of the K0=2 uniform-finish schedules to the curriculum (negative: both
    lower)."""
    return _worst(
        [_mean(rows, fixed_first_name(2, s, "uniform")) - _mean(rows, CURRICULUM) for s in (0.67, 0.8)], max
    )


def _k2_vs_curriculum_compute(rows) -> float:
    """Largest modeled-compute ratio of the K0=2 uniform-finish schedules to the curriculum, minus 1."""
    ratios = [
        _value(rows, fixed_first_name(2, s, "uniform"), "flops") / _value(rows, CURRICULUM, "flops")
        for s in (0.67, 0.8)
    ]
    return _worst(ratios, max) - 1


def _matched_worse(rows) -> float:
    """Compute-matched uniform's mean NLL minus the better of K0=4 / 67% and uniform (positive: worse
    than both)."""
    return _mean(rows, MATCHED) - _worst([_mean(rows, K4_67), _mean(rows, UNIFORM)], min)


def _wall_vs_modeled(rows) -> float:
    """Largest relative distance, over the uniform-finish fixed-first runs, of the measured wall-clock
    saving from the modeled one: |wall saving - modeled saving| / modeled saving."""
    gaps = []
    for item in FIXED_FIRST:
        modeled, wall = _saving_pct(rows, item), _saving_pct(rows, item, "wall_seconds")
        gaps.append(abs(wall - modeled) / modeled if modeled > 0 else math.nan)
    return _worst(gaps, max)


K2_67, K2_80, K4_67 = (
    fixed_first_name(2, 0.67, "uniform"),
    fixed_first_name(2, 0.8, "uniform"),
    FIXED_FIRST[4],
)

# (claim, the paper's own number): thresholds from the paper's statements, each with its reading.
LM_CLAIMS: tuple[tuple[Claim, str], ...] = (
    (Claim("k2_67_compute_saving", "K0=2 at 67% saves about 45% of modeled compute",
           "distance of the modeled compute saving vs uniform from 45%, in points", False, ABOUT,
           "'about 45%' read as within 5 points", _off_by(45.0)(K2_67)), "45%"),
    (Claim("k2_67_nll_within", "K0=2 at 67%: mean serving NLL within 0.5% of uniform",
           "mean NLL K=1..16, run / uniform - 1, in % (paired by seed)", False, 0.5,
           "the paper's bound", lambda r: _gap_pct(r, K2_67)), "within 0.5%"),
    (Claim("k2_80_compute_saving", "K0=2 at 80% saves about 54% of modeled compute",
           "distance of the modeled compute saving vs uniform from 54%, in points", False, ABOUT,
           "'about 54%' read as within 5 points", _off_by(54.0)(K2_80)), "54%"),
    (Claim("k2_80_nll_within", "K0=2 at 80%: mean serving NLL within 0.8% of uniform",
           "mean NLL K=1..16, run / uniform - 1, in % (paired by seed)", False, 0.8,
           "the paper's bound", lambda r: _gap_pct(r, K2_80)), "within 0.8%"),
    (Claim("k1_best_at_k1", "At 67%, K0=1 has the best NLL at K=1",
           "NLL at K=1: K0=1 minus the better of K0=2, K0=4 (uniform finish, 67%)", False, 0.0,
           "a direction", _k1_advantage), "K0=1 best at K=1"),
    (Claim("order_reverses_from_k3", "At 67%, the ordering reverses from K=3 on (K0=4 < K0=2 < K0=1)",
           "smallest margin over K=3..16 of nll(K0=1)-nll(K0=2) and nll(K0=2)-nll(K0=4)", True, 0.0,
           "a direction, at every depth from 3 to 16", _reversed_from_k3), "reversed from K=3"),
    (Claim("uniform_finish_beats_pln", "A uniform finish gives lower mean NLL than Poisson-lognormal, "
           "for all six fixed-first schedules",
           "smallest over the six of mean NLL (Poisson-lognormal) - mean NLL (uniform finish)", True, 0.0,
           "a direction, for every one of the six", _finish_margin), "6 of 6"),
    (Claim("k2_beats_curriculum_nll", "The K0=2 uniform-finish schedules beat the curriculum's mean NLL",
           "largest over 67%, 80% of mean NLL (K0=2) - mean NLL (curriculum)", False, 0.0,
           "a direction, for both", _k2_vs_curriculum_nll), "both lower"),
    (Claim("k2_less_compute_than_curriculum", "... with less compute than the curriculum",
           "largest over 67%, 80% of modeled FLOPs (K0=2) / curriculum - 1", False, 0.0,
           "a direction, for both", _k2_vs_curriculum_compute), "both cheaper"),
    (Claim("k4_67_nll_within", "K0=4 at 67%: mean serving NLL within 0.1% of uniform",
           "mean NLL K=1..16, run / uniform - 1, in % (paired by seed)", False, 0.1,
           "the paper's bound", lambda r: _gap_pct(r, K4_67)), "within 0.1%"),
    (Claim("k4_67_compute_saving", "K0=4 at 67% uses about 31% less compute",
           "distance of the modeled compute saving vs uniform from 31%, in points", False, ABOUT,
           "'about 31%' read as within 5 points", _off_by(31.0)(K4_67)), "31%"),
    (Claim("matched_uniform_worse", "The compute-matched uniform run is worse than both K0=4 at 67% and uniform",
           "mean NLL (matched uniform) - the better of K0=4 / 67% and uniform", True, 0.0,
           "a direction", _matched_worse), "worse than both"),
    (Claim("wall_matches_modeled", "Fixed-first's measured wall-clock saving is within 10% of its modeled saving",
           "largest over the uniform-finish fixed-first runs of abs(wall saving - modeled saving) / modeled",
           False, 0.10, "the paper's 10%, relative to the modeled saving", _wall_vs_modeled), "within 10%"),
)  # fmt: skip


DIAGNOSTIC = (
    Claim("update_diagnostic_zero", "16 uniform updates after the switch (K0=4, 67%), a K=16 update's "
          "depth-averaged advantage over a K=4 update is indistinguishable from zero",
          "depth-averaged NLL advantage of the K=16 update (`biosrecall diagnose`), per seed", True, 0.0,
          "the paper's reading: the 95% interval contains 0 (holds) or excludes it (does not hold)",
          lambda rows: _value(rows, "update-diagnostic", "nll")),
    "interval contains 0",
)  # fmt: skip


def judge_lm_claims(table: pd.DataFrame, diagnosis: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per claim, with the paper's number (`paper`) before the measured columns; the
    diagnostic's row is judged from `diagnosis` (columns seed, advantage), "not measured" without it."""
    rows = [*LM_CLAIMS, DIAGNOSTIC]
    if diagnosis is not None and len(diagnosis):
        extra = diagnosis.assign(item="update-diagnostic", nll=diagnosis["advantage"])[
            ["item", "seed", "nll"]
        ]
        table = pd.concat([table, extra], ignore_index=True)
    claims = judge_claims(table, [claim for claim, _ in rows])
    claims.insert(claims.columns.get_loc("mean"), "paper", [paper for _, paper in rows])
    last = claims.index[-1]
    if claims.at[last, "verdict"] != NOT_MEASURED and claims.at[last, "n_seeds"] >= 2:
        low, high = claims.at[last, "low"], claims.at[last, "high"]
        claims.at[last, "verdict"] = HOLDS if low <= 0 <= high else FAILS
    claims.at[last, "threshold"] = "interval contains 0"
    return claims


def write_lm_claims(claims: pd.DataFrame, out_dir: str | Path) -> list[Path]:
    """OUT/lm_claims.{csv,parquet,md}, as `claims.write_claims` writes claims.* (an lm_claims.csv
    judged over another seed count is kept first as lm_claims_at_<n>seeds.csv); the .md shows the
    paper's number beside each statement."""
    papers = zip(claims["statement"], claims["paper"], strict=True)
    shown = claims.assign(statement=[f"{statement} (paper: {paper})" for statement, paper in papers])
    return write_claims(claims, out_dir, stem=NAME, shown=shown)


def measured(claims: pd.DataFrame) -> pd.DataFrame:
    """The rows whose runs were trained (the others are "not measured")."""
    return claims[claims["verdict"] != NOT_MEASURED]
