"""The serving claims rows judged from crafted frontiers with a known answer: an exit criterion that
is cheaper than the cheapest fixed depth on every seed pays, one that never reaches the target is
charged the deepest fixed depth, and the oracle's headroom is its bits over the best fixed depth.

    pytest -q tests/test_study_serving.py
"""

from __future__ import annotations

import pandas as pd
import pytest

from biosrecall.eval.scoring import BASELINE
from biosrecall.experiments.claims import FAILS, HOLDS, INCONCLUSIVE
from biosrecall.experiments.study_serving import SUMMARY_COLUMNS, serving_claims, serving_summary
from biosrecall.outputs import markdown_columns


def frontier_of(run: str, fixed_bits: list[float], adaptive: tuple[float, float] | None, oracle: float):
    """One run: fixed depths 1..len(fixed_bits) at 10 FLOPs per depth, an optional criterion (bits,
    FLOPs) and the oracle."""
    rows = [
        {
            "run": run,
            "criterion": f"K={k}",
            "kind": BASELINE,
            "bits": bits,
            "mean_depth": k,
            "flops_per_query": 10 * k,
        }
        for k, bits in enumerate(fixed_bits, start=1)
    ]
    if adaptive is not None:
        rows.append({"run": run, "criterion": "kl:0.01", "kind": "kl", "bits": adaptive[0], "mean_depth": 1.5,
                     "flops_per_query": adaptive[1]})  # fmt: skip
    rows.append({"run": run, "criterion": "oracle", "kind": "oracle", "bits": oracle, "mean_depth": 1.2,
                 "flops_per_query": 12.0})  # fmt: skip
    table = pd.DataFrame(rows)
    return table.assign(schedule="fixed:4", checkpoint="1.0", fraction=1.0)


def judged(frontiers: dict[tuple[str, int], pd.DataFrame]) -> pd.DataFrame:
    frontier = pd.concat(frontiers.values(), ignore_index=True)
    names = {f"seed{seed}/{name}": (name, seed) for name, seed in frontiers}
    return serving_claims(frontier, names).set_index("claim")


def test_a_criterion_cheaper_on_every_seed_pays_and_the_oracle_headroom_is_measured():
    # Fixed depth 3 (30 FLOPs) is the shallowest to reach 95% of the best (20 bits); the criterion
    # reaches 19.5 bits at 15, 18 and 21 FLOPs: ratios 0.5, 0.6, 0.7.
    runs = {("fixed_k4", s): frontier_of(f"seed{s}/fixed_k4", [5, 15, 20], (19.5, f), 22 + s)
            for s, f in enumerate((15, 18, 21))}  # fmt: skip
    claims = judged(runs)
    pays, headroom = claims.loc["serving_pays_fixed_k4"], claims.loc["oracle_headroom_fixed_k4"]
    assert pays["per_seed"] == "0.5;0.6;0.7" and pays["mean"] == pytest.approx(0.6)
    assert pays["verdict"] == HOLDS and pays["threshold"] == "< 1"
    assert headroom["per_seed"] == "2;3;4" and headroom["verdict"] == HOLDS


def test_a_criterion_that_never_reaches_the_target_is_charged_the_deepest_depth():
    # No criterion reaches 95% of 20 bits: each seed is charged fixed K=3 (30 FLOPs) against K=3.
    runs = {("uniform_1_16", s): frontier_of(f"seed{s}/uniform_1_16", [5, 15, 20], (10, 5), 20)
            for s in range(3)}  # fmt: skip
    pays = judged(runs).loc["serving_pays_uniform_1_16"]
    assert pays["per_seed"] == "1;1;1" and pays["verdict"] == FAILS  # no spread, on the threshold: fails
    headroom = judged(runs).loc["oracle_headroom_uniform_1_16"]
    assert headroom["mean"] == 0 and headroom["verdict"] == FAILS


def test_each_schedule_is_judged_on_its_own_seeds():
    runs = {("fixed_k4", 0): frontier_of("seed0/fixed_k4", [20], (20, 5), 21),
            ("fixed_k4", 1): frontier_of("seed1/fixed_k4", [20], (20, 15), 20),
            ("uniform_1_16", 0): frontier_of("seed0/uniform_1_16", [0, 0], None, 0)}  # fmt: skip
    claims = judged(runs)
    assert list(claims.index) == [
        "serving_pays_fixed_k4", "oracle_headroom_fixed_k4", "serving_pays_uniform_1_16", "oracle_headroom_uniform_1_16",
    ]  # fmt: skip
    assert claims.loc["serving_pays_fixed_k4", "n_seeds"] == 2
    assert claims.loc["serving_pays_fixed_k4", "verdict"] == INCONCLUSIVE  # 0.5 and 1.5 straddle 1
    assert claims.loc["serving_pays_uniform_1_16", "verdict"] == "not measured"  # it recalls nothing


def test_the_summary_agrees_with_the_claims_and_names_the_criterion_most_seeds_chose():
    runs = {("fixed_k4", s): frontier_of(f"seed{s}/fixed_k4", [5, 15, 20], (19.5, f), 22 + s)
            for s, f in enumerate((15, 18, 21))}  # fmt: skip
    frontier = pd.concat(runs.values(), ignore_index=True)
    names = {f"seed{seed}/{name}": (name, seed) for name, seed in runs}
    row = serving_summary(frontier, names).iloc[0]
    claims = judged(runs)
    assert row["schedule"] == "fixed K=4" and row["n_seeds"] == 3
    assert (row["criterion"], row["criterion_seeds"]) == ("kl:0.01", 3)
    assert (row["fixed_depth"], row["fixed_flops"], row["adaptive_flops"]) == (3, 30, 18)
    assert row["best_bits"] == 20 and row["oracle_mean_depth"] == pytest.approx(1.2)
    for column, claim in (("ratio", "serving_pays_fixed_k4"), ("headroom", "oracle_headroom_fixed_k4")):
        for suffix, field in (("", "mean"), ("_low", "low"), ("_high", "high")):
            assert row[column + suffix] == pytest.approx(claims.loc[claim, field])
    line = markdown_columns(serving_summary(frontier, names), SUMMARY_COLUMNS).splitlines()[2]
    assert line.startswith(
        "| fixed K=4 | 3 | 20.0 [20.0, 20.0] | 3.00, 3e-05 | kl:0.01 (3/3): 1.50, 1.8e-05 |"
    )
    assert "0.60 [0.35, 0.85]" in line
