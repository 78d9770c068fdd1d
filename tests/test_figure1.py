"""`biosrecall figure1 --seeds 0,1 --budgets 0.5,1` end to end, on a small task: the per-run and
seed-aggregated tables, the claims, their agreement with `recall-curve --aggregate-seeds`, the budget
sweep's branches and compute-to-target, resumability, and the notebook.

The quick preset's model and batch on 10 people, 100 fixed K=4 updates and serving depths 1..24 keep
the suite's longest fixture to about a minute on 2 cores (the quick preset at half its budget took
125 s); the runs still learn enough that the seeds' curves differ, and depths beyond 16 are scored.
The quick preset itself runs in `make demo` and, stopped while it trains, in
tests/test_figure1_promises.py."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from biosrecall.cli import main
from biosrecall.experiments.budget_results import DEPTH_RANGES, TARGETS, saving_claim
from biosrecall.experiments.claims import CLAIMS, FAILS, HOLDS, INCONCLUSIVE, NOT_MEASURED, NOT_TESTABLE
from biosrecall.experiments.figure1 import FIGURE1_PRESETS, FIGURE1_SCHEDULES, FRACTIONS
from biosrecall.experiments.study import FIXED_FIRST, UNIFORM
from biosrecall.train.run_folder import RunFolder

NOTEBOOK = Path(__file__).resolve().parent.parent / "notebooks" / "figure1.ipynb"
SMALL = replace(FIGURE1_PRESETS["quick"], people=10, seq_len=96, budget_updates=100, max_depth=24)
DEPTHS = list(range(1, SMALL.max_depth + 1))
STUDY = ["--preset", "small", "--quiet", "--seeds", "0,1", "--budgets", "0.5,1"]
SERVING_KEYS = [
    f"{kind}_{name}" for name in FIGURE1_SCHEDULES for kind in ("serving_pays", "oracle_headroom")
]
CLAIM_KEYS = [claim.key for claim in CLAIMS] + SERVING_KEYS + [saving_claim()["claim"]]


@pytest.fixture(scope="module", autouse=True)
def small_preset():
    """Registered for the whole module: the rerun test looks the preset up by name again."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(FIGURE1_PRESETS, "small", SMALL)
        yield


@pytest.fixture(scope="module")
def figure1_out(tmp_path_factory):
    out = tmp_path_factory.mktemp("figure1") / "out"
    main(["figure1", "--out", str(out), *STUDY])  # SystemExit on failure
    return out


@pytest.mark.slow
def test_figure1_writes_the_table_the_summary_and_the_figure(figure1_out):
    for name in ("figure1.png", "figure1.pdf", "recall_curve.csv", "recall_curve.parquet", "summary.csv"):
        assert (figure1_out / name).stat().st_size > 0, name
    table = pd.read_parquet(figure1_out / "recall_curve.parquet")
    assert set(table["run"]) == {f"seed{seed}/{name}" for name in FIGURE1_SCHEDULES for seed in (0, 1)}
    assert sorted(table["fraction"].unique()) == list(FRACTIONS)
    assert sorted(table["depth"].unique()) == DEPTHS
    # One matched budget: every run's final checkpoint spent it to within one update.
    final = table[table["fraction"] == 1.0].groupby("run")["flops"].first()
    budget = table["budget"].iloc[0]
    assert (final <= budget).all() and (final > 0.8 * budget).all()
    whole = table[table["attribute"] == "all"]
    assert whole["bits"].between(0, whole["ceiling_bits"].iloc[0] + 1e-9).all()


@pytest.mark.slow
def test_seeds_are_aggregated_with_intervals_and_every_claim_is_judged(figure1_out):
    table = pd.read_parquet(figure1_out / "recall_curve.parquet")
    assert sorted(table["seed"].unique()) == [0, 1]
    # The seeds share the people but not the training: their curves differ.
    whole = (
        table[table["attribute"] == "all"]
        .set_index(["label", "fraction", "depth", "seed"])["bits"]
        .sort_index()
    )
    assert not np.allclose(whole.xs(0, level="seed"), whole.xs(1, level="seed"))
    seeds = pd.read_parquet(figure1_out / "recall_curve_seeds.parquet")
    assert (seeds["n_seeds"] == 2).all() and (seeds["bits_low"] <= seeds["bits"]).all()
    one = seeds[(seeds["group"] == "fixed_k4") & (seeds["fraction"] == 1.0) & (seeds["depth"] == 4)].iloc[0]
    assert one["bits"] == pytest.approx(whole.loc[("fixed_k4", 1.0, 4)].mean())
    summary = pd.read_csv(figure1_out / "summary.csv")
    assert {"K=4", "K=4_low", "K=4_high", "min", "min_low", "n_seeds"} <= set(summary.columns)
    assert len(summary) == 2 * len(FIGURE1_SCHEDULES) and (summary["n_seeds"] == 2).all()
    claims = pd.read_csv(figure1_out / "claims.csv")
    assert list(claims["claim"]) == CLAIM_KEYS
    verdicts = {HOLDS, FAILS, INCONCLUSIVE, NOT_MEASURED}
    assert all(v in verdicts or v.startswith(NOT_TESTABLE) for v in claims["verdict"])
    measured = claims.set_index("claim")["verdict"]
    assert measured["fixed_k_best_near_own_depth"] == NOT_MEASURED  # no --fixed-sweep
    assert measured["fixed_beats_uniform_near_k4_at_45"] != NOT_MEASURED
    assert measured[CLAIM_KEYS[-1]] != NOT_MEASURED  # the budget sweep ran
    assert (figure1_out / "claims.md").read_text().count("\n| ") == len(CLAIM_KEYS)  # one row per claim
    record = json.loads((figure1_out / "figure1.json").read_text())
    assert record["options"]["study"]["seeds"] == [0, 1] and record["machine"]["cpu"]


@pytest.mark.slow
def test_recall_curve_aggregate_seeds_agrees_with_figure1(figure1_out, tmp_path):
    runs = sorted((figure1_out / "runs").glob("seed*/fixed_k4"))
    out = tmp_path / "rc"
    main(["recall-curve", *map(str, runs), "--aggregate-seeds", "--out", str(out),
          "--max-depth", str(SMALL.max_depth)])  # fmt: skip
    ours = pd.read_csv(out / "summary.csv").set_index("fraction")
    theirs = pd.read_csv(figure1_out / "summary.csv")
    theirs = theirs[theirs["group"] == "fixed_k4"].set_index("fraction")
    for column in ("K=4", "K=4_low", "K=4_high", "mean K>16"):
        assert ours[column].to_numpy() == pytest.approx(theirs[column].to_numpy())


@pytest.mark.slow
def test_aggregating_runs_that_differ_in_more_than_the_seed_is_refused(figure1_out, tmp_path, capsys):
    other = tmp_path / "elsewhere" / "fixed_k4"
    shutil.copytree(figure1_out / "runs" / "seed1" / "fixed_k4", other)
    config = json.loads((other / "config.json").read_text())
    config["train_config"]["lr"] = 3e-3
    (other / "config.json").write_text(json.dumps(config))
    out = tmp_path / "rc"
    with pytest.raises(SystemExit) as exit_info:
        main(["recall-curve", str(figure1_out / "runs" / "seed0" / "fixed_k4"), str(other), "--aggregate-seeds",
              "--out", str(out)])  # fmt: skip
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1 and "train_config.lr" in err
    assert not out.exists()


@pytest.mark.slow
def test_rerunning_figure1_skips_finished_runs(figure1_out, capsys):
    stamps = {p: p.stat().st_mtime_ns for p in (figure1_out / "runs").rglob("model.safetensors")}
    main(["figure1", "--out", str(figure1_out), *STUDY])
    assert {p: p.stat().st_mtime_ns for p in stamps} == stamps
    assert "figure:" in capsys.readouterr().out


@pytest.mark.slow
def test_the_budget_sweep_branches_from_shared_trunks_and_writes_compute_to_target(figure1_out):
    curve = pd.read_csv(figure1_out / "budget_curve.csv")
    assert len(curve) == len(FIGURE1_SCHEDULES) * 2 * 2 and (figure1_out / "budget_curve.png").stat().st_size
    for _, runs in curve.groupby(["name", "seed"]):
        assert runs.sort_values("budget_multiple")["flops"].is_monotonic_increasing
    # Fixed-first at 1x is a branch of the seed's longest fixed K=4 run, at its switch.
    run = figure1_out / "runs" / "seed1" / "fixed_first_k4_80_wsd_b1"
    branch, plan = RunFolder(run).read_config()["branch"], RunFolder(run).read_config()["plan"]
    assert branch["path"].endswith("seed1/fixed_k4_wsd_b1") and branch["at_update"] == plan["switch_update"]
    targets = pd.read_csv(figure1_out / "compute_to_target.csv")
    flops = targets[targets["kind"] == "flops"]
    assert len(flops) == len(FIGURE1_SCHEDULES) * len(TARGETS) * len(DEPTH_RANGES)
    assert (flops["value"].notna() | (flops["note"] == "not reached within the sweep")).all()
    savings = targets[targets["kind"] == "saving"]
    assert set(savings["subject"]) == {f"{FIXED_FIRST} vs {UNIFORM}"}
    assert (figure1_out / "compute_to_target.md").read_text().count("\n") == 2 + len(targets)
    # The 1x branches against the study's own (independent, cosine) runs, paired over both seeds.
    modes = pd.read_csv(figure1_out / "budget_modes.csv")
    assert set(modes["name"]) == set(FIGURE1_SCHEDULES) and (modes["budget_multiple"] == 1).all()
    assert (modes["n_seeds"] == 2).all() and np.allclose(modes["margin"], 0.1 * curve["ceiling_bits"].iloc[0])


@pytest.mark.slow
def test_the_notebook_runs_top_to_bottom_on_the_output(figure1_out, monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    monkeypatch.setenv("BIOSRECALL_FIGURE1", str(figure1_out))
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    client = nbclient.NotebookClient(
        notebook, timeout=180, kernel_name="python3", resources={"metadata": {"path": str(NOTEBOOK.parent)}}
    )
    client.execute()
    errors = [
        o for cell in notebook.cells for o in cell.get("outputs", []) if o.get("output_type") == "error"
    ]
    assert not errors
