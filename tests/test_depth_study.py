"""`biosrecall study depth`: the study declared on the engine (docs/guides/write-a-study.md), end to end
on its tiny preset: it plans without writing, trains and judges, continues without training, refuses
other settings in one line, and its archive continues elsewhere, training only added seeds.

    pytest -q tests/test_depth_study.py
"""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import pandas as pd
import pytest
from harness import changes, run_cli, snapshot

from biosrecall.experiments import engine
from biosrecall.experiments.depth_study import DEPTH, DepthOptions, tables

WORDS = ["the", "a", "river", "city", "model", "loop", "depth", "recall", "and", "of"]
DEPTH_ARGS = ["study", "depth", "--device", "cpu", "--workers", "2", "--threads", "1", "--quiet"]
SMALL = ["--schedules", "uniform,fixed-k4", "--max-depth", "20"]
TABLES = ("depth_extrapolation.csv", "depth_extrapolation.md", "claims.csv", "claims.md")


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    from biosrecall.lm import Corpus, prepare_corpus

    root = tmp_path_factory.mktemp("depth")
    rng = random.Random(0)
    docs = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(10, 60))) + "." for _ in range(200)]
    (root / "corpus.txt").write_text("\n\n".join(docs) + "\n", encoding="utf-8")
    return prepare_corpus(Corpus([root / "corpus.txt"]), root / "data", vocab_size=300, val_fraction=0.1).path


def depth(capsys, data: Path, out: Path, *extra: str):
    return run_cli([*DEPTH_ARGS, "--data", str(data), "--out", str(out), *SMALL, *extra], capsys)


def trained_runs(monkeypatch) -> list[str]:
    """The names of the runs the study hands to the sweep engine from now on."""
    handed, real = [], engine.sweep_study_runs

    def recording(runs_dir, runs, *args, **kwargs):
        handed.extend(run.name for run in runs)
        return real(runs_dir, runs, *args, **kwargs)

    monkeypatch.setattr(engine, "sweep_study_runs", recording)
    return handed


@pytest.mark.slow
def test_the_depth_study_end_to_end(data, tmp_path, capsys, monkeypatch):
    out = tmp_path / "depth"
    code, err = depth(capsys, data, out, "--plan")
    assert code == 0 and not out.exists(), err
    handed = trained_runs(monkeypatch)
    code, err = depth(capsys, data, out, "--seeds", "0,1")
    assert code == 0, err
    assert sorted(handed) == ["fixed-k4/seed0", "fixed-k4/seed1", "uniform/seed0", "uniform/seed1"]
    summary = pd.read_csv(out / "depth_extrapolation.csv").set_index("schedule")
    assert list(summary.index) == ["uniform", "fixed-k4"] and (summary["n_seeds"] == 2).all()
    claims = pd.read_csv(out / "claims.csv", dtype=str).set_index("claim")
    assert list(claims.index) == ["uniform_holds_beyond_k16", "fixed-k4_holds_beyond_k16"]
    assert set(claims["threshold"]) == {"in [-1, 1]"}
    assert (out / "nll_vs_depth.png").is_file() and (out / "nll_vs_depth.pdf").is_file()
    record = json.loads((out / "depth.json").read_text())
    assert record[
        "command"
    ] == f"biosrecall study depth --data {data} --schedules uniform,fixed-k4 --seeds 0,1 " + (
        "--max-depth 20 --device cpu"
    )
    written = {name: (out / name).read_bytes() for name in TABLES}

    handed.clear()
    assert depth(capsys, data, out, "--seeds", "0,1")[0] == 0
    assert handed == [], "a finished, evaluated run is not trained again"
    assert {name: (out / name).read_bytes() for name in TABLES} == written

    before = snapshot(tmp_path)
    code, err = depth(capsys, data, out, "--seeds", "0,1", "--margin-pct", "2")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "--margin-pct 1.0, not 2.0" in err, err
    assert changes(before, snapshot(tmp_path)) == []

    archive = tmp_path / "archive"
    assert run_cli(["study", "depth", "--out", str(out), "--archive", str(archive)], capsys)[0] == 0
    assert not list(archive.rglob("model.safetensors")) and not list(archive.rglob("metrics.jsonl"))
    assert (archive / "runs.tar.xz").is_file() and not (archive / "runs").exists(), "the runs are packed"
    again = tmp_path / "again"  # archiving is byte-stable: the pack holds no times or owners
    assert run_cli(["study", "depth", "--out", str(out), "--archive", str(again)], capsys)[0] == 0
    assert (again / "runs.tar.xz").read_bytes() == (archive / "runs.tar.xz").read_bytes()
    copy = tmp_path / "copy"
    shutil.copytree(archive, copy)
    assert depth(capsys, data, copy, "--seeds", "0,1")[0] == 0
    assert handed == [] and {name: (copy / name).read_bytes() for name in TABLES} == written
    assert (copy / "runs").is_dir() and not (copy / "runs.tar.xz").exists(), "unpacked by the rerun"
    assert depth(capsys, data, copy, "--seeds", "0,1,2")[0] == 0
    assert sorted(handed) == ["fixed-k4/seed2", "uniform/seed2"], "only the added seed trains"
    assert pd.read_csv(copy / "claims.csv")["n_seeds"].max() == 3
    assert (copy / "claims_at_2seeds.csv").is_file(), "the earlier look is kept"


def test_the_tables_are_pure_functions_of_the_per_run_table():
    """A gap computed from a made-up per-run table: NLL 2.0 at K=16 and 2.02 beyond is +1%."""
    rows = [{"schedule": "uniform", "seed": s, "depth": k, "nll": 2.0 if k <= 16 else 2.02 + s / 1000}
            for s in (0, 1, 2) for k in range(1, 21)]  # fmt: skip
    table = tables(pd.DataFrame(rows), DepthOptions(max_depth=20))["depth_extrapolation"]
    assert table.loc[0, "gap_pct"] == pytest.approx(100 * (2.021 / 2.0 - 1))
    assert table.loc[0, "n_seeds"] == 3


def test_bad_options_are_one_line_and_write_nothing(data, tmp_path, capsys):
    before = snapshot(tmp_path)
    for bad in (
        ["--schedules", "uniform,bogus"],
        ["--schedules", ","],  # not "every schedule of the grid"
        ["--seeds", "0,0"],
        ["--seeds", "x"],
        ["--trained-depth", "30"],
        ["--margin-pct", "0"],
        ["--preset", "nonesuch"],
        ["--device", "bogus"],
    ):
        code, err = depth(capsys, data, tmp_path / "out", *bad)
        assert code == 2 and len(err.strip().splitlines()) == 1, (bad, err)
    code, err = run_cli([*DEPTH_ARGS, "--data", str(tmp_path), "--out", str(tmp_path / "out")], capsys)
    assert code == 2 and "lm prepare" in err, err
    assert changes(before, snapshot(tmp_path)) == []


def test_the_command_that_makes_an_output_names_what_differs_from_the_defaults():
    options = DepthOptions(data="data/lm-kjv", seeds=(0, 1, 2), margin_pct=0.5)
    assert engine.study_command(DEPTH, options) == (
        "biosrecall study depth --data data/lm-kjv --seeds 0,1,2 --margin-pct 0.5"
    )
