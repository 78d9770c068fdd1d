"""The paper's language-model statements, each judged from the LM study's NLL table over seeds.

    claims = judge_lm_claims(table)        # table: lm_nll (item, seed, depth, nll, flops, wall_seconds)
    write_lm_claims(claims, "runs/lm-study")   # lm_claims.csv / .parquet / .md

The judge is every study's (`biosrecall.experiments.claims`): each claim is a metric computed on
every seed separately (paired: the runs of one seed read the same batches), a 95% t interval over
seeds and a threshold; "holds" when the whole interval is on the claim's side, "does not hold" when
it is wholly on the other side, "inconclusive" when it straddles the threshold or there is one seed;
"not measured" when the grid left out a run the claim needs. Each row carries the paper's own number
(`paper`) and, in lm_claims.md, how many seeds would decide it. Earlier looks at another seed count
are kept as lm_claims_at_<n>seeds.csv and shown beside the current verdict.

Metrics: mean serving NLL is the mean over K=1..16 of the final checkpoint's validation NLL; a NLL
gap is run / uniform - 1 (same seed); a compute saving is 1 - modeled training FLOPs / uniform's
(the trainer's own FLOP account, the same for every seed), a wall-clock saving the same with the
measured training seconds. "About X%" of a saving is read as within 5 points of X.

"Within X% of uniform" is two-sided: the NLL gap's whole interval must lie in [-X, X] (a schedule
much better than uniform is not "within" it either). The update diagnostic's row (`diagnosis`, one
depth-averaged advantage per seed from `lm_study.diagnose_runs`) reads "indistinguishable from zero"
against a margin: 0.1% of uniform's mean serving NLL (the paper's tightest bound on an NLL difference
it calls none, K0=4 at 67% within 0.1% of uniform), in nats. It holds when the whole interval lies
inside the margin, does not hold when wholly outside, and is inconclusive otherwise; whether the
interval contains 0 decides nothing (`biosrecall.experiments.claims`). Without the uniform run there
is no margin, and the row is not measured.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from biosrecall.experiments.claims import NOT_MEASURED, Claim, judge_claims, write_claims
from biosrecall.experiments.lm_grid import CURRICULUM, MATCHED, SERVING, UNIFORM, fixed_first_name

NAME = "lm_claims"
ABOUT = 5.0  # "about X%" of a saving: within this many percentage points of X
ZERO_SHARE = 1e-3
"""The update diagnostic's margin: this share of uniform's mean serving NLL (module docstring)."""
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

# Thresholds from the paper's statements, each with its reading and the paper's own number.
LM_CLAIMS: tuple[Claim, ...] = (
    Claim("k2_67_compute_saving", "K0=2 at 67% saves about 45% of modeled compute",
           "distance of the modeled compute saving vs uniform from 45%, in points", False, ABOUT,
           "'about 45%' read as within 5 points", _off_by(45.0)(K2_67), paper="45%"),
    Claim("k2_67_nll_within", "K0=2 at 67%: mean serving NLL within 0.5% of uniform",
           "mean NLL K=1..16, run / uniform - 1, in % (paired by seed)", True, (-0.5, 0.5),
           "the paper's bound, two-sided", lambda r: _gap_pct(r, K2_67), paper="within 0.5%"),
    Claim("k2_80_compute_saving", "K0=2 at 80% saves about 54% of modeled compute",
           "distance of the modeled compute saving vs uniform from 54%, in points", False, ABOUT,
           "'about 54%' read as within 5 points", _off_by(54.0)(K2_80), paper="54%"),
    Claim("k2_80_nll_within", "K0=2 at 80%: mean serving NLL within 0.8% of uniform",
           "mean NLL K=1..16, run / uniform - 1, in % (paired by seed)", True, (-0.8, 0.8),
           "the paper's bound, two-sided", lambda r: _gap_pct(r, K2_80), paper="within 0.8%"),
    Claim("k1_best_at_k1", "At 67%, K0=1 has the best NLL at K=1",
           "NLL at K=1: K0=1 minus the better of K0=2, K0=4 (uniform finish, 67%)", False, 0.0,
           "a direction", _k1_advantage, paper="K0=1 best at K=1"),
    Claim("order_reverses_from_k3", "At 67%, the ordering reverses from K=3 on (K0=4 < K0=2 < K0=1)",
           "smallest margin over K=3..16 of nll(K0=1)-nll(K0=2) and nll(K0=2)-nll(K0=4)", True, 0.0,
           "a direction, at every depth from 3 to 16", _reversed_from_k3, paper="reversed from K=3"),
    Claim("uniform_finish_beats_pln", "A uniform finish gives lower mean NLL than Poisson-lognormal, "
           "for all six fixed-first schedules",
           "smallest over the six of mean NLL (Poisson-lognormal) - mean NLL (uniform finish)", True, 0.0,
           "a direction, for every one of the six", _finish_margin, paper="6 of 6"),
    Claim("k2_beats_curriculum_nll", "The K0=2 uniform-finish schedules beat the curriculum's mean NLL",
           "largest over 67%, 80% of mean NLL (K0=2) - mean NLL (curriculum)", False, 0.0,
           "a direction, for both", _k2_vs_curriculum_nll, paper="both lower"),
    Claim("k2_less_compute_than_curriculum", "... with less compute than the curriculum",
           "largest over 67%, 80% of modeled FLOPs (K0=2) / curriculum - 1", False, 0.0,
           "a direction, for both", _k2_vs_curriculum_compute, paper="both cheaper"),
    Claim("k4_67_nll_within", "K0=4 at 67%: mean serving NLL within 0.1% of uniform",
           "mean NLL K=1..16, run / uniform - 1, in % (paired by seed)", True, (-0.1, 0.1),
           "the paper's bound, two-sided", lambda r: _gap_pct(r, K4_67), paper="within 0.1%"),
    Claim("k4_67_compute_saving", "K0=4 at 67% uses about 31% less compute",
           "distance of the modeled compute saving vs uniform from 31%, in points", False, ABOUT,
           "'about 31%' read as within 5 points", _off_by(31.0)(K4_67), paper="31%"),
    Claim("matched_uniform_worse", "The compute-matched uniform run is worse than both K0=4 at 67% and uniform",
           "mean NLL (matched uniform) - the better of K0=4 / 67% and uniform", True, 0.0,
           "a direction", _matched_worse, paper="worse than both"),
    Claim("wall_matches_modeled", "Fixed-first's measured wall-clock saving is within 10% of its modeled saving",
           "largest over the uniform-finish fixed-first runs of abs(wall saving - modeled saving) / modeled",
           False, 0.10, "the paper's 10%, relative to the modeled saving", _wall_vs_modeled, paper="within 10%"),
)  # fmt: skip


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
        lambda rows: _value(rows, "update-diagnostic", "nll"),
        paper="indistinguishable from zero",
        note="" if not math.isnan(margin) else "needs the uniform run, whose NLL sets the margin",
    )


def zero_margin(table: pd.DataFrame) -> float:
    """The diagnostic's margin in nats: `ZERO_SHARE` of uniform's mean serving NLL over seeds, to 3
    significant digits (the threshold cell shows the number it was judged against)."""
    means = [_mean(rows, UNIFORM) for _, rows in table.groupby("seed")]
    uniform = float(np.nanmean(means)) if means and not all(map(math.isnan, means)) else math.nan
    return math.nan if math.isnan(uniform) else float(f"{ZERO_SHARE * uniform:.3g}")


def judge_lm_claims(table: pd.DataFrame, diagnosis: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per claim, with the paper's number (`paper`) before the measured columns; the
    diagnostic's row is judged from `diagnosis` (columns seed, advantage), "not measured" without it."""
    claims = [*LM_CLAIMS, diagnostic_claim(zero_margin(table))]
    if diagnosis is not None and len(diagnosis):
        extra = diagnosis.assign(item="update-diagnostic", nll=diagnosis["advantage"])[
            ["item", "seed", "nll"]
        ]
        table = pd.concat([table, extra], ignore_index=True)
    return judge_claims(table, claims).drop(columns=["note"], errors="ignore")


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
