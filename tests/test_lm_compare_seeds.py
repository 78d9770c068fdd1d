"""`lm compare --aggregate-seeds`: runs that differ only in the seed become one row with a mean, a 95%
t interval and the seed count for every number; runs that differ in anything else are refused with
the field named. Tiny LM runs (seconds each) with an injected lm-eval table for the harness rows.

    pytest -q tests/test_lm_compare_seeds.py
"""

from __future__ import annotations

import json
import math
import shutil

import numpy as np
import pandas as pd
import pytest
from test_lm_train import cli, write_corpus

from biosrecall.errors import BiosrecallError
from biosrecall.lm import Corpus, prepare_corpus
from biosrecall.lm.compare import compare_runs
from biosrecall.lm.evaluate import evaluate_run
from biosrecall.lm.task import train_lm
from biosrecall.train.config import TrainConfig

T_975_DF2, T_975_DF1 = 4.303, 12.706  # Student t(0.975) for 3 and 2 seeds (tables)
SCHEDULES = {
    "uniform": ("uniform:1-16", (1, 2, 3)),
    "ff": ("fixed_first:k0=2,switch=0.5,finish=uniform", (1, 2)),
}


@pytest.fixture(scope="module")
def groups(tmp_path_factory):
    """root/uniform/seed{1,2,3} and root/ff/seed{1,2}, trained and evaluated at depths 1..4."""
    root = tmp_path_factory.mktemp("lm-seeds")
    corpus = Corpus([write_corpus(root / "corpus.txt", 200, seed=5)])
    data = prepare_corpus(corpus, root / "data", vocab_size=300, val_fraction=0.05, seed=0).path
    for name, (schedule, seeds) in SCHEDULES.items():
        for seed in seeds:
            run = root / name / f"seed{seed}"
            config = TrainConfig(schedule=schedule, updates=8, batch_size=8, seq_len=16, lr=3e-3, seed=seed,
                                 device="cpu")  # fmt: skip
            train_lm(data, run, config, preset="lm-tiny")
            evaluate_run(run, depths=range(1, 5), max_sequences=4, device="cpu")
    return root


def member_nll(run) -> pd.DataFrame:
    return pd.read_parquet(run / "eval" / "nll.parquet")


def interval(values, t) -> tuple[float, float, float]:
    values = np.asarray(values, dtype=float)
    half = t * values.std(ddof=1) / math.sqrt(values.size)
    return values.mean(), values.mean() - half, values.mean() + half


def test_seed_groups_report_mean_interval_and_seed_count(groups):
    uniform, ff = groups / "uniform", groups / "ff"
    comparison = compare_runs([uniform, ff], aggregate_seeds=True)
    table = comparison.table.set_index("run")
    assert table.loc[str(uniform), "n_seeds"] == 3 and table.loc[str(ff), "n_seeds"] == 2
    assert table.loc[str(uniform), "reference"] and not table.loc[str(ff), "reference"]
    per_seed = [member_nll(uniform / f"seed{s}")["nll"].mean() for s in (1, 2, 3)]
    assert len(set(per_seed)) == 3  # the seeds really differ
    mean, low, high = interval(per_seed, T_975_DF2)
    row = table.loc[str(uniform)]
    assert (row["mean_nll"], row["mean_nll_low"], row["mean_nll_high"]) == pytest.approx((mean, low, high))
    ff_nll = [member_nll(ff / f"seed{s}")["nll"].mean() for s in (1, 2)]
    relative = [100 * (value / mean - 1) for value in ff_nll]  # each seed against the reference's mean
    expected = interval(relative, T_975_DF1)
    got = table.loc[str(ff), ["mean_nll_vs_ref_pct", "mean_nll_vs_ref_pct_low", "mean_nll_vs_ref_pct_high"]]
    assert tuple(got) == pytest.approx(expected)
    curves = comparison.curves[comparison.curves["run"] == str(uniform)].set_index("depth")
    for depth in range(1, 5):
        values = [member_nll(uniform / f"seed{s}").set_index("depth").loc[depth, "nll"] for s in (1, 2, 3)]
        assert tuple(curves.loc[depth, ["nll", "nll_low", "nll_high"]]) == pytest.approx(
            interval(values, T_975_DF2)
        )
    assert set(comparison.summaries["n_seeds"]) <= {2, 3}


def test_without_aggregation_a_folder_of_seeds_is_not_a_run(groups):
    with pytest.raises(BiosrecallError, match="has no eval/nll.parquet"):
        compare_runs([groups / "uniform"])
    with pytest.raises(BiosrecallError, match="is compared twice"):
        compare_runs([groups / "uniform", groups / "uniform" / "seed1"], aggregate_seeds=True)
    single = compare_runs([groups / "uniform" / "seed1", groups / "ff" / "seed1"]).table
    assert (single["n_seeds"] == 1).all() and single["mean_nll_low"].isna().all()


def inject_harness(run, values: dict[int, float]) -> None:
    """An lm-eval table as `lm harness` writes it, with known values per depth."""
    rows = [
        {"run": run.name, "schedule": "s", "checkpoint": "1.0", "update": 8, "flops": 1.0, "train_tokens": 1,
         "wall_seconds": 1.0, "task": "tiny_mc", "metric": "acc", "depth": depth, "value": value, "stderr": 0.1}
        for depth, value in values.items()
    ]  # fmt: skip
    pd.DataFrame(rows).to_parquet(run / "eval" / "harness.parquet", index=False)


def test_cli_aggregates_harness_rows_and_draws_bands(groups, tmp_path, capsys):
    seeds = {1: {4: 0.25, 8: 0.5}, 2: {4: 0.5, 8: 0.75}, 3: {4: 0.75, 8: 1.0}}
    for seed, values in seeds.items():
        inject_harness(groups / "uniform" / f"seed{seed}", values)
    try:
        args = ["lm", "compare", groups / "uniform", groups / "ff", "--aggregate-seeds", "--out", tmp_path]
        code, out, err = cli(capsys, *args)
    finally:
        for seed in seeds:
            (groups / "uniform" / f"seed{seed}" / "eval" / "harness.parquet").unlink()
    assert code == 0, err
    assert " ± " in out and "tiny_mc" in out
    harness = pd.read_csv(tmp_path / "lm_harness.csv").set_index("depth")
    assert set(harness["run"]) == {str(groups / "uniform")}  # ff has no harness table
    assert tuple(harness.loc[4, ["value", "value_low", "value_high"]]) == pytest.approx(
        interval([0.25, 0.5, 0.75], T_975_DF2)
    )
    assert harness.loc[8, "value"] == pytest.approx(0.75) and (harness["n_seeds"] == 3).all()
    assert harness.loc[8, "stderr"] == pytest.approx(0.1)
    compared = pd.read_csv(tmp_path / "lm_compare.csv")
    assert {"n_seeds", "mean_nll_low", "flops_high", "compute_saving_pct_low"} <= set(compared.columns)
    for name in ("nll_vs_depth", "nll_vs_compute", "harness_vs_depth"):
        assert (tmp_path / f"{name}.png").stat().st_size > 0 and (tmp_path / f"{name}.pdf").stat().st_size > 0


def copy_group(groups, tmp_path, edit) -> object:
    """tmp_path/mixed/{a,b}: copies of uniform seeds 1 and 2, b's config.json changed by `edit`."""
    mixed = tmp_path / "mixed"
    for name, seed in (("a", 1), ("b", 2)):
        shutil.copytree(groups / "uniform" / f"seed{seed}", mixed / name)
    path = mixed / "b" / "config.json"
    config = json.loads(path.read_text())
    edit(config)
    path.write_text(json.dumps(config))
    return mixed


@pytest.mark.parametrize(
    ("field", "edit", "message"),
    [
        (
            "lr",
            lambda c: c["train_config"].update(lr=1e-3),
            "differ in train_config.lr (0.003 against 0.001)",
        ),
        ("preset", lambda c: c["task"].update(preset="lm-200m"), "differ in task.preset"),
        ("data", lambda c: c["dataset"].update(manifest_hash="0" * 64), "differ in dataset.manifest_hash"),
        ("seed", lambda c: c["train_config"].update(seed=1), "both have seed 1"),
    ],
)
def test_runs_that_differ_in_more_than_the_seed_are_refused(groups, tmp_path, capsys, field, edit, message):
    mixed = copy_group(groups, tmp_path, edit)
    code, _, err = cli(
        capsys, "lm", "compare", mixed, "--reference", mixed, "--aggregate-seeds", "--out", tmp_path / "o"
    )
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: cannot aggregate"), err
    assert message in lines[0]
    assert not (tmp_path / "o").exists()


def test_settings_that_do_not_change_results_may_differ(groups, tmp_path):
    def edit(config):
        config["train_config"].update(threads=1, device="cuda", log_every=1, grad_accum=2, compile=True)
        config["dataset"]["path"] = "/elsewhere/data"
        config["machine"] = {"cpu": "another"}

    mixed = copy_group(groups, tmp_path, edit)
    table = compare_runs([mixed], reference=mixed, aggregate_seeds=True).table
    assert table["n_seeds"].tolist() == [2]
