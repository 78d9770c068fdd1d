"""`biosrecall figure1` scores adaptive-depth serving of its 100% checkpoints: the frontier table and
figure and the headline table land in its output, and an output made before they existed is continued
(not refused) and gains them on rerun, its settings record untouched.

    pytest -q tests/test_figure1_serving.py
"""

from __future__ import annotations

import shutil

import pandas as pd
import pytest
from test_figure1_promises import TINY, figure1_args, final_weights, run_cli

from biosrecall.eval.exits import parse_exits
from biosrecall.eval.scoring import BASELINE
from biosrecall.eval.serving import HEADLINE_NAME, SERVING_CRITERIA, TABLE_NAME, serving_names
from biosrecall.experiments import figure1
from biosrecall.experiments.claims import INCONCLUSIVE, NOT_MEASURED, read_claims


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    out = tmp_path_factory.mktemp("serving") / "out"
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(figure1.FIGURE1_PRESETS, "tiny", TINY)
        assert run_cli(figure1_args(out)) == 0
    return out


@pytest.fixture
def tiny_preset(monkeypatch):
    monkeypatch.setitem(figure1.FIGURE1_PRESETS, "tiny", TINY)


def test_frontier_and_headline_of_the_final_checkpoints(finished):
    for name in serving_names():
        assert (finished / name).stat().st_size > 0, name
    frontier = pd.read_parquet(finished / f"{TABLE_NAME}.parquet")
    runs = {f"seed0/{name}" for name in figure1.FIGURE1_SCHEDULES}  # labelled as in the recall tables
    assert set(frontier["run"]) == runs
    assert set(frontier["checkpoint"]) == {"1.0"}
    scored = frontier[frontier["kind"] != BASELINE]
    assert set(scored["criterion"]) == {c.spec for c in parse_exits(SERVING_CRITERIA)}
    for _, rows in frontier.groupby("run"):
        baseline = rows[rows["kind"] == BASELINE]
        assert baseline["parameter"].tolist() == list(range(1, TINY.max_depth + 1))
        assert (rows["mean_depth"] <= TINY.max_depth).all()
    recall = pd.read_parquet(finished / "recall_curve.parquet")
    final = recall[(recall["fraction"] == 1.0) & (recall["attribute"] == "all")]
    for run, rows in frontier[frontier["kind"] == BASELINE].groupby("run"):  # same scoring as Figure 1
        expected = final[final["run"] == run].set_index("depth")["bits"]
        assert rows.set_index("parameter")["bits"].to_numpy() == pytest.approx(expected.to_numpy())
    headline = pd.read_parquet(finished / f"{HEADLINE_NAME}.parquet")
    assert set(headline["run"]) == runs
    assert (headline["checkpoint"] == "1.0").all()


def test_the_claims_gain_two_serving_rows_per_schedule(finished):
    claims = read_claims(finished / "claims.csv")
    keys = [
        f"{kind}_{name}" for name in figure1.FIGURE1_SCHEDULES for kind in ("serving_pays", "oracle_headroom")
    ]
    assert [key for key in claims["claim"] if key in keys] == keys
    served = claims.set_index("claim").loc[keys]
    assert (served["n_seeds"] <= 1).all() and set(served["verdict"]) <= {
        INCONCLUSIVE,
        NOT_MEASURED,
    }  # one seed
    assert (finished / "claims.md").read_text().count("At 100%, the oracle depth recalls more") == 3


def test_an_output_without_them_is_continued_and_gains_them(finished, tmp_path, tiny_preset, capsys):
    out = tmp_path / "out"
    shutil.copytree(finished, out)
    for name in serving_names():
        (out / name).unlink()
    settings = (out / figure1.RECORD).read_text()
    kept = final_weights(out)
    assert run_cli(figure1_args(out)) == 0
    assert "fixed against adaptive" in capsys.readouterr().out
    assert (out / figure1.RECORD).read_text() == settings
    assert final_weights(out) == kept
    for name in serving_names():
        assert (out / name).stat().st_size > 0, name
    made = {name: (out / name).stat().st_mtime_ns for name in serving_names()}
    assert run_cli(figure1_args(out)) == 0  # a complete output keeps its serving results
    assert {name: (out / name).stat().st_mtime_ns for name in serving_names()} == made
