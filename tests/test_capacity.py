"""`biosrecall capacity`: tables, claims and figure of a tiny sweep, reruns that train nothing, bad input.

    pytest -q tests/test_capacity.py            # the end-to-end study is marked slow
    pytest -q tests/test_capacity.py -m "not slow"

The study trains bios-tiny's three schedules and its two baselines at 6 and 12 people on seed 0,
3 exposures each (10 runs of a few updates; each a `biosrecall train` process, whose start-up is
nearly all of its time); the claims, over seeds, are judged on made-up tables whose verdicts are known.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from harness import changes, run_cli, snapshot

from biosrecall.cli import main
from biosrecall.experiments import capacity_results as results
from biosrecall.experiments.claims import FAILS, HOLDS, INCONCLUSIVE, NOT_MEASURED, verdict
from biosrecall.experiments.study import FIXED_FIRST, UNIFORM
from biosrecall.train.checkpoint_files import MODEL_FILE

VERDICTS = {HOLDS, FAILS, INCONCLUSIVE, NOT_MEASURED}
MODELS = {"fixed_k4", "fixed_first_k4_80", "uniform_1_16", "std_params", "std_flops"}
PEOPLE, SEEDS, DEPTHS = (6, 12), (0,), (1, 2, 4)
COLUMNS = {
    "people", "name", "kind", "seed", "depth", "exact_bits", "loss_bound_bits", "ceiling_bits",
    "parameters", "non_embedding_parameters", "exact_bits_per_param", "exact_bits_per_nonembedding_param",
    "loss_bound_bits_per_param", "loss_bound_bits_per_nonembedding_param", "exposures", "exposures_mean",
    "updates", "train_flops",
}  # fmt: skip


def capacity_args(out, *extra: str) -> list[str]:
    return [
        "capacity", "--out", str(out), "--preset", "bios-tiny", "--people", ",".join(map(str, PEOPLE)),
        "--seeds", ",".join(map(str, SEEDS)), "--exposures", "3", "--batch-size", "4", "--seq-len", "96",
        "--depths", ",".join(map(str, DEPTHS)), "--workers", "2", "--threads", "1", "--quiet", *extra,
    ]  # fmt: skip


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    """The tiny study's output folder, trained once for the module."""
    out = tmp_path_factory.mktemp("capacity") / "out"
    try:
        main(capacity_args(out))
    except SystemExit as exc:
        assert exc.code in (0, None), f"capacity exited {exc.code}"
    return out


def final_weights(out) -> dict[str, int]:
    return {
        str(p.relative_to(out)): p.stat().st_mtime_ns
        for p in out.glob(f"runs/*/*/*/checkpoints/1.0/{MODEL_FILE}")
    }


@pytest.mark.slow
def test_tables_hold_every_run_and_depth(study):
    table = pd.read_csv(study / "capacity.csv")
    assert set(table.columns) >= COLUMNS
    assert set(table["name"]) == MODELS and set(table["people"]) == set(PEOPLE)
    assert set(table["seed"]) == set(SEEDS)
    looped, baselines = table[table["kind"] == "looped"], table[table["kind"] == "baseline"]
    assert len(looped) == len(PEOPLE) * len(SEEDS) * 3 * len(DEPTHS)
    assert len(baselines) == len(PEOPLE) * len(SEEDS) * 2 and set(baselines["depth"]) == {1}
    assert table["exact_bits"].between(0, table["ceiling_bits"]).all()
    assert (table["loss_bound_bits"] <= table["ceiling_bits"] + 1e-9).all()
    assert (table["exposures_mean"] >= 3).all() and (table["train_flops"] > 0).all()
    ratio = table["exact_bits"] / table["parameters"]
    assert ratio.sub(table["exact_bits_per_param"]).abs().max() < 1e-12
    summary = pd.read_csv(study / "capacity_summary.csv")
    assert len(summary) == len(PEOPLE) * (3 * len(DEPTHS) + 2) and (summary["n_seeds"] == len(SEEDS)).all()
    assert {"exact_bits_low", "exact_bits_high", "loss_bound_bits_per_param_low"} <= set(summary.columns)
    markdown = (study / "capacity.md").read_text()
    assert "## Mean over seeds" in markdown and "std_params (baseline)" in markdown
    assert (study / "capacity.png").stat().st_size > 0
    record = json.loads((study / "capacity.json").read_text())
    assert record["options"]["seeds"] == list(SEEDS) and record["options"]["people"] == list(PEOPLE)
    assert record["options"]["preset"] == "bios-tiny" and "torch" in record["versions"]


@pytest.mark.slow
def test_claims_are_four_rows_with_verdicts(study):
    claims = pd.read_csv(study / "capacity_claims.csv")
    assert not (study / "claims.csv").exists(), "the claims are written once, as capacity_claims"
    assert list(claims["claim"]) == [
        "baseline_one_bit_per_param", "looped_no_more_per_param", "fixed_first_near_uniform_at_saturation",
        "looped_below_flops_matched",
    ]  # fmt: skip
    assert set(claims["verdict"]) <= VERDICTS
    # 3 exposures store far less than the few hundred bits 12 people hold, so the sweep shows each
    # model's capacity (the knee is passed); one seed gives it no interval, so nothing is decided.
    assert list(claims["verdict"].iloc[[0, 1, 3]]) == [INCONCLUSIVE] * 3
    assert claims["verdict"].iloc[2] in (INCONCLUSIVE, NOT_MEASURED)  # NOT_MEASURED: uniform stored nothing
    assert claims["note"].isna().all() and (claims["n_seeds"] <= len(SEEDS)).all()
    assert "verdict" in (study / "capacity_claims.md").read_text()


@pytest.mark.slow
def test_the_record_names_the_command_that_made_the_study(study):
    """Preset, people, seeds and exposures named even at their default (`CAPACITY.shown`)."""
    record = json.loads((study / "capacity.json").read_text())
    assert record["command"] == (
        "biosrecall capacity --preset bios-tiny --people 6,12 --seeds 0 --exposures 3.0 --batch-size 4 "
        "--seq-len 96 --depths 1,2,4"
    )


@pytest.mark.slow
def test_rerun_trains_nothing_and_other_settings_are_refused(study, capsys):
    weights = final_weights(study)
    assert len(weights) == len(PEOPLE) * len(SEEDS) * len(MODELS)
    code, _ = run_cli(capacity_args(study), capsys)
    assert code == 0 and final_weights(study) == weights
    before = snapshot(study)
    code, err = run_cli(capacity_args(study, "--lr", "0.02"), capsys)
    assert code == 2 and err.startswith("error:") and "made with --lr 0.01, not 0.02" in err
    assert changes(before, snapshot(study)) == []


@pytest.mark.slow
def test_other_depths_or_device_rescore_the_same_runs(study, capsys):
    """Where runs are scored is no setting of the output: they are rescored, and scored back."""
    tables = {name: (study / name).read_bytes() for name in ("capacity.csv", "capacity_claims.csv")}
    weights = final_weights(study)
    code, err = run_cli([*capacity_args(study), "--depths", "1,2", "--device", "cpu"], capsys)
    assert code == 0, err
    assert set(pd.read_csv(study / "capacity.csv")["depth"]) == {1, 2}
    assert json.loads((study / "capacity.json").read_text())["options"]["device"] == "cpu"
    code, err = run_cli(capacity_args(study), capsys)
    assert code == 0, err
    assert final_weights(study) == weights
    assert {name: (study / name).read_bytes() for name in tables} == tables


@pytest.mark.slow
def test_an_archive_without_weights_reruns_to_the_same_tables(study, tmp_path, capsys):
    """What lets a long study run in parts across machines: committed without weights, continued."""
    archive, copy = tmp_path / "archive", tmp_path / "copy"
    code, _ = run_cli(capacity_args(study, "--archive", str(archive)), capsys)
    assert code == 0 and not list(archive.rglob(MODEL_FILE))
    assert len(list(archive.rglob("stored_bits.parquet"))) == len(PEOPLE) * len(SEEDS) * len(MODELS)
    written_by = str(study).encode()
    assert not [path for path in archive.rglob("*") if path.is_file() and written_by in path.read_bytes()]
    shutil.copytree(archive, copy)
    code, _ = run_cli(capacity_args(copy), capsys)
    assert code == 0 and not list(copy.rglob(MODEL_FILE)), "every table came from the caches"
    for table in ("capacity.csv", "capacity_summary.csv", "capacity_claims.csv", "capacity.md"):
        assert (copy / table).read_bytes() == (study / table).read_bytes(), table


@pytest.mark.slow
def test_a_refused_people_count_is_not_added_to_the_output(study, tmp_path, capsys, monkeypatch):
    from biosrecall.errors import BiosrecallError
    from biosrecall.experiments import capacity as capacity_study

    copy = tmp_path / "copy"
    code, _ = run_cli(capacity_args(study, "--archive", str(copy)), capsys)
    record = (copy / "capacity.json").read_bytes()

    def refuse(runs):
        raise BiosrecallError("refused by the planner")

    monkeypatch.setattr(capacity_study, "plan_table", refuse)
    code, err = run_cli([*capacity_args(copy), "--people", "6,12,18"], capsys)
    assert code == 2 and "refused by the planner" in err
    assert (copy / "capacity.json").read_bytes() == record


@pytest.mark.slow
def test_an_output_of_release_0_2_0_continues(study, tmp_path, capsys):
    """Its capacity.json (settings, people, seeds, depths) is read as the engine's record."""
    copy = tmp_path / "old"
    code, _ = run_cli(capacity_args(study, "--archive", str(copy)), capsys)
    options = json.loads((copy / "capacity.json").read_text())["options"]
    settings = {key: options[key] for key in ("preset", "exposures", "batch_size", "seq_len", "lr")}
    old = {"settings": settings, "people": options["people"], "seeds": options["seeds"],
           "depths": options["depths"], "data_seed": 0, "train_config": {"device": "auto"}}  # fmt: skip
    (copy / "capacity.json").write_text(json.dumps(old))
    code, err = run_cli(capacity_args(copy), capsys)
    assert code == 0, err
    assert json.loads((copy / "capacity.json").read_text())["options"] == options
    assert (copy / "capacity_claims.csv").read_bytes() == (study / "capacity_claims.csv").read_bytes()


@pytest.mark.slow
def test_plan_is_what_the_study_trains_and_writes_nothing(study, tmp_path, capsys):
    table = pd.read_csv(study / "capacity.csv").drop_duplicates(["people", "name", "seed"])
    out = tmp_path / "planned"
    code, err = run_cli(capacity_args(out, "--plan"), capsys)
    assert code == 0, err
    assert not out.exists()
    from biosrecall.experiments.capacity import CapacityOptions, plan_capacity

    plan = plan_capacity(
        CapacityOptions("bios-tiny", PEOPLE, SEEDS, 3, batch_size=4, seq_len=96, depths=DEPTHS)
    )
    merged = plan.merge(table, on=["people", "name", "seed"], suffixes=("_planned", ""))
    assert len(merged) == len(PEOPLE) * len(SEEDS) * len(MODELS)
    for column in ("updates", "train_flops", "exposures_mean", "parameters"):
        assert merged[f"{column}_planned"].tolist() == pytest.approx(merged[column].tolist()), column


def test_plan_of_a_large_people_count_makes_no_dataset_of_it(tmp_path, capsys, monkeypatch):
    """A plan reads no data it was not given and costs only a probe and its arithmetic: a count beyond
    the probe is planned from the probe's batches, scaled, and one beyond the planner's limit is
    refused in one line, never by generating it first."""
    from biosrecall.experiments import capacity as capacity_study

    made, generate = [], capacity_study.generate_dataset
    monkeypatch.setattr(capacity_study, "PLAN_PROBE_PEOPLE", 12)
    monkeypatch.setattr(
        capacity_study,
        "generate_dataset",
        lambda folder, people, seed: made.append(people) or generate(folder, people=people, seed=seed),
    )
    args = ["--people", "6,12,1200", "--seeds", "0"]
    code, err = run_cli([*capacity_args(tmp_path / "out", "--plan"), *args], capsys)
    assert code == 0, err
    assert max(made) == 12 and not (tmp_path / "out").exists()
    options = capacity_study.CapacityOptions(
        "bios-tiny", (12, 1200), (0,), 3, batch_size=4, seq_len=96, depths=DEPTHS
    )
    plan = capacity_study.plan_capacity(options).set_index(["people", "name"])
    for name in MODELS:
        assert plan.loc[(1200, name), "updates"] == plan.loc[(12, name), "updates"] * 100
        assert plan.loc[(1200, name), "parameters"] == plan.loc[(12, name), "parameters"]
    made.clear()
    code, err = run_cli(
        [*capacity_args(tmp_path / "out", "--plan"), "--people", "6,2000000000", "--seeds", "0"], capsys
    )
    assert code == 2 and len(err.strip().splitlines()) == 1 and "--people 2,000,000,000" in err, err
    assert max(made) <= 12


def test_gpu_script_dry_run_plans_every_run_at_1000_exposures(tmp_path):
    out = tmp_path / "out"
    env = {**os.environ, "DRY_RUN": "1", "PEOPLE": "20,40", "SEEDS": "0", "OUT": str(out),
           "BIOSRECALL": f"{sys.executable} -m biosrecall"}  # fmt: skip
    script = Path(__file__).resolve().parent.parent / "scripts" / "capacity" / "e1000-gpu.sh"
    printed = subprocess.run(["bash", script], check=True, env=env, capture_output=True, text=True).stdout
    rows = [line.split() for line in printed.splitlines()[1:-1]]
    assert {(int(row[0]), row[1]) for row in rows} == {(n, name) for n in (20, 40) for name in MODELS}
    assert all(1000 <= float(row[-1]) < 1010 for row in rows), (
        "mean exposures: at least E, under one update more"
    )
    assert "at 1000 exposures; nothing was trained or written" in printed and not out.exists()


BAD_INPUTS = [
    ["--exposures", "0"], ["--exposures", "-2"], ["--exposures", "inf"], ["--exposures", "nan"],
    ["--people", "6,6"], ["--people", "0,6"], ["--people", "-3"], ["--seeds", "0,0"],
    ["--depths", "1,1"], ["--preset", "bios-tiny-std-params"], ["--preset", "nonesuch"],
    ["--exposures", "1e7"],  # refused by the planner once the datasets are made: they are taken back
]  # fmt: skip


@pytest.mark.parametrize("bad", BAD_INPUTS, ids=lambda bad: " ".join(bad))
def test_bad_input_is_one_line_exit_2_and_writes_nothing(tmp_path, capsys, bad):
    before = snapshot(tmp_path)
    code, err = run_cli(capacity_args(tmp_path / "out", *bad), capsys)
    assert code == 2, err
    assert err.startswith("error:") and len(err.strip().splitlines()) == 1, err
    assert changes(before, snapshot(tmp_path)) == []


def made_up(
    baseline: list[float], uniform_bits: dict[int, float], first_share: float, ceiling: float = 1e6
) -> pd.DataFrame:
    """A capacity table of 100-parameter models: per people count and seed, std_params at
    `baseline[seed]` bits per parameter, uniform storing `uniform_bits[people]` x (1 + seed/100) at
    every depth, fixed-first `first_share` of that; `ceiling` bits at every count."""
    rows = []
    for seed, per_param in enumerate(baseline):
        for people, bits in uniform_bits.items():
            rows.append({"people": people, "name": results.STD_PARAMS, "seed": seed, "depth": 1,
                         "exact_bits": per_param * 100, "loss_bound_bits": per_param * 100,
                         results.MEASURE: per_param})  # fmt: skip
            for depth in (1, 4):
                stored = bits * (1 + seed / 100)
                for name, share in ((UNIFORM, 1.0), (FIXED_FIRST, first_share)):
                    rows.append({"people": people, "name": name, "seed": seed, "depth": depth,
                                 "exact_bits": stored * share, "loss_bound_bits": stored * share,
                                 results.MEASURE: stored * share / 100})  # fmt: skip
    return pd.DataFrame(rows).assign(parameters=100, ceiling_bits=ceiling)


def verdicts(table: pd.DataFrame) -> list[str]:
    """The verdicts of claims 1-3 (the made-up tables have no fixed K=4 or std_flops rows for 4)."""
    return list(results.judge_capacity_claims(table)["verdict"])[:3]


def test_claims_are_judged_from_the_data():
    # Baseline at ~1 bit/param, uniform (0.5 bits/param) below it, fixed-first at 95% of uniform.
    assert verdicts(made_up([1.0, 1.02, 0.98], {10: 40, 20: 50}, 0.95)) == [HOLDS, HOLDS, HOLDS]
    # Baseline far from 1 bit/param, uniform above it, fixed-first at half of uniform.
    assert verdicts(made_up([0.1, 0.11, 0.12], {10: 40, 20: 50}, 0.5)) == [FAILS, FAILS, FAILS]
    # One seed: no interval, nothing decided.
    assert verdicts(made_up([1.0], {10: 40, 20: 50}, 0.95)) == [INCONCLUSIVE] * 3
    # A uniform that stores nothing leaves fixed-first's ratio undefined.
    assert verdicts(made_up([1.0, 1.02, 0.98], {10: 0, 20: 0}, 0.95))[2] == NOT_MEASURED
    # 30 bits of facts cannot make 0.7 bits on each of 100 parameters, and the baseline stores all
    # 30 (uniform 28 of them): the sweep never reached either model's capacity.
    claims = results.judge_capacity_claims(made_up([0.3, 0.3, 0.3], {10: 28, 20: 28}, 0.95, ceiling=30))
    assert list(claims["verdict"].iloc[:2]) == [NOT_MEASURED, NOT_MEASURED]
    assert "at least 47 people" in claims["note"].iloc[0] and "add larger counts" in claims["note"].iloc[1]
    # The same baseline below a ceiling of 50 has run out of room: 0.3 bits/param is its capacity.
    claims = results.judge_capacity_claims(made_up([0.3, 0.3, 0.3], {10: 28, 20: 28}, 0.95, ceiling=50))
    assert list(claims["verdict"].iloc[:2]) == [FAILS, HOLDS]


def test_capacity_is_the_most_a_model_stores_over_the_sweep():
    # The baseline stores 1 bit/param at 10 people, then stops learning at 20 (0.1): its capacity is
    # the 1 bit it showed, not the collapse, and uniform's 0.5 stays below it.
    table = made_up([1.0, 1.02, 0.98], {10: 50, 20: 5}, 0.95)
    collapsed = (table["name"] == results.STD_PARAMS) & (table["people"] == 20)
    table.loc[collapsed, [results.MEASURE, "loss_bound_bits"]] = (0.1, 10.0)
    assert verdicts(table)[:2] == [HOLDS, HOLDS]


def test_looped_against_flops_matched_compares_stored_bits_paired_by_seed():
    rows = []
    for seed, (looped, standard) in enumerate([(900, 1000), (950, 1020), (880, 990)]):
        for people, share in ((10, 0.5), (20, 1.0)):  # the most over the sweep: at 20 people
            rows += [
                {"people": people, "name": "fixed_k4", "seed": seed, "depth": 4, "loss_bound_bits": looped * share},
                {"people": people, "name": results.STD_FLOPS, "seed": seed, "depth": 1,
                 "loss_bound_bits": standard * share},
            ]  # fmt: skip
    table = pd.DataFrame(rows).assign(parameters=100, ceiling_bits=1e6, exact_bits=1.0)
    table[results.MEASURE] = table["loss_bound_bits"] / 100
    claims = results.judge_capacity_claims(table).set_index("claim")
    row = claims.loc["looped_below_flops_matched"]
    assert row["verdict"] == HOLDS and row["mean"] == pytest.approx(-(100 + 70 + 110) / 3)


def test_saturation_is_the_largest_count_near_the_most_bits():
    assert results.saturation_people(made_up([1.0, 1.0], {10: 40, 20: 80, 40: 79}, 1.0)) == 40
    assert results.saturation_people(made_up([1.0, 1.0], {10: 40, 20: 80, 40: 60}, 1.0)) == 20


def test_band_verdict():
    """Claim 1's band is a margin: inside holds, wholly outside fails, straddling an edge is open."""
    band = results.ONE_BIT_BAND
    assert verdict(0.8, 1.2, band) == HOLDS
    assert verdict(0.1, 0.5, band) == FAILS and verdict(1.4, 2.0, band) == FAILS
    assert verdict(0.5, 0.9, band) == INCONCLUSIVE
    assert verdict(math.nan, math.nan, band) == INCONCLUSIVE


def test_the_knee_is_between_the_last_full_count_and_the_peak():
    from biosrecall.experiments.capacity_results import knee_table

    # Ceiling 10 bits per person; the model stores everything to 20 people, most at 40, less at 80.
    stored = {10: 100.0, 20: 190.0, 40: 300.0, 80: 120.0}
    summary = pd.DataFrame(
        [{"name": "uniform_1_16", "kind": "looped", "depth": 4, "people": n, "ceiling_bits": 10.0 * n,
          "parameters": 1000, "loss_bound_bits": bits, "loss_bound_bits_low": bits - 5,
          "loss_bound_bits_high": bits + 5} for n, bits in stored.items()]
    )  # fmt: skip
    knee = knee_table(summary).iloc[0]
    assert (knee["full_until"], knee["peak_people"], knee["peak_bits"]) == (20, 40, 300.0)
    assert knee["peak_bits_per_param"] == pytest.approx(0.3) and knee["share_at_largest"] == pytest.approx(
        0.15
    )
