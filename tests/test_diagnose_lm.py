"""The update diagnostic on language-model runs: validation NLL at every serving depth, the run's own
batch stream, zero advantage for identical depths, the command end to end, and one-line errors.

A tiny fixed-first LM run is trained once for the whole file on a generated corpus (seeded word
salad, nothing downloaded): a couple of seconds on a CPU.

    pytest -q tests/test_diagnose_lm.py
"""

from __future__ import annotations

import json
import random

import numpy as np
import pandas as pd
import pytest
import torch
from safetensors.torch import load_file

from biosrecall.cli import main
from biosrecall.diagnose import continue_run, diagnose_update, load_run_state
from biosrecall.diagnose.options import DEFAULT_PEOPLE, DEFAULT_VAL_SEQUENCES
from biosrecall.errors import BiosrecallError
from biosrecall.lm import Corpus, ShardLoader, prepare_corpus
from biosrecall.lm.evaluate import depth_nll
from biosrecall.lm.loader import validation_batches
from biosrecall.lm.task import train_lm
from biosrecall.train.config import TrainConfig
from biosrecall.train.run_folder import RunFolder

WORDS = ["the", "a", "river", "city", "model", "loop", "depth", "recall", "and", "of"]
SCHEDULE = "fixed_first:k0=2,switch=0.67,finish=uniform"
SMALL = {"batches": 2, "serving_depths": range(1, 5), "val_sequences": 8, "bootstrap": 50}


def prepare(root, name: str, val_fraction: float, seed: int):
    rng = random.Random(seed)
    docs = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(10, 60))) + "." for _ in range(200)]
    (root / f"{name}.txt").write_text("\n\n".join(docs) + "\n", encoding="utf-8")
    corpus = Corpus([root / f"{name}.txt"])
    return prepare_corpus(corpus, root / name, vocab_size=300, val_fraction=val_fraction, seed=0).path


def train_tiny(data, run_dir, schedule=SCHEDULE, updates=24):
    config = TrainConfig(
        schedule=schedule,
        updates=updates,
        batch_size=8,
        seq_len=16,
        lr=3e-3,
        seed=1,
        checkpoint_fractions=(1.0,),
    )
    train_lm(data, run_dir, config, preset="lm-tiny")
    return run_dir


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return prepare(tmp_path_factory.mktemp("diagnose-lm"), "data", val_fraction=0.1, seed=0)


@pytest.fixture(scope="module")
def run_dir(data):
    return train_tiny(data, data.parent / "run")


def test_the_diagnostic_draws_the_trainers_batches_and_continues_to_the_final_weights(data, run_dir):
    state, task = load_run_state(run_dir, "switch")
    assert task.name == "lm" and state.source.pad_id is None
    # the trainer's stream is the loader's windows in order, B per update (tests/test_lm_train.py)
    loader = ShardLoader(data, 16, seed=1)
    stream = [loader.batch(8) for _ in range(state.update + 3)]
    for update in range(state.update, state.update + 3):
        np.testing.assert_array_equal(state.source.batch(update), stream[update])
    final = load_file(str(RunFolder(run_dir).checkpoint_dir(1.0) / "model.safetensors"))
    assert not all(torch.equal(state.model.state_dict()[name], final[name]) for name in final)
    continue_run(state, state.planned - state.update)
    mine = state.model.state_dict()
    assert all(torch.equal(mine[name], final[name]) for name in final)


def test_the_score_is_lm_evals_validation_nll(data, run_dir):
    state, task = load_run_state(run_dir, "switch", val_sequences=5)
    windows = list(validation_batches(data, 16, batch_size=5, max_windows=5))
    expected = depth_nll(state.model, windows, [1, 3], "cpu", state.autocast)["nll"].to_numpy()
    np.testing.assert_allclose(task.score(state.model, [1, 3])["nll"], expected, rtol=1e-6)
    assert set(task.score(state.model, [1, 3])) == {"nll"}
    assert task.record["val_sequences"] == 5 and task.record["val_tokens"] == 5 * 16


def test_identical_depths_give_exactly_zero_advantage(run_dir):
    result = diagnose_update(run_dir, "switch", depths=(4, 4), after_uniform=(0, 1), **SMALL)
    assert (result.batches["nll_advantage"] == 0).all()
    assert "bits_advantage" not in result.batches
    assert (result.batches["nll_change_shallow"] != 0).any()  # the update itself did change the loss
    assert (result.summary[["mean", "ci_low", "ci_high"]] == 0).all().all()


def run_cli(args, capsys) -> tuple[int, str, str]:
    try:
        main(["diagnose-update", *map(str, args)])
        code = 0
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def test_the_command_runs_end_to_end_on_an_lm_run(run_dir, tmp_path, capsys):
    args = [run_dir, "--after-uniform", "0,2", "--batches", "2", "--serving-depths", "1..4"]
    args += ["--val-sequences", "8", "--bootstrap", "50", "--out", tmp_path, "--quiet"]
    code, out, err = run_cli(args, capsys)
    assert code == 0, err
    assert "advantage of the K=16 update over K=4" in out and err == ""
    summary = pd.read_parquet(tmp_path / "diagnose_switch.parquet")
    assert set(summary["metric"]) == {"nll"} and (summary["n_batches"] == 2).all()
    for _, rows in summary.groupby("after_uniform"):
        assert rows["serving_depth"].dropna().tolist() == [1, 2, 3, 4]
    assert summary["serving_depth"].isna().sum() == 2  # one depth average per after_uniform
    assert np.isfinite(summary[["mean", "ci_low", "ci_high"]]).all().all()
    assert (tmp_path / "diagnose_switch.png").stat().st_size > 0
    assert (tmp_path / "diagnose_switch_batches.csv").is_file()
    options = json.loads((tmp_path / "diagnose_switch.json").read_text())
    assert options["task"] == "lm" and options["val_sequences"] == 8 and "people" not in options
    assert list(options["metrics"]) == ["nll"]
    assert [s["update"] - options["checkpoint_update"] for s in options["states"]] == [0, 2]


@pytest.fixture(scope="module")
def no_validation(data):
    """A corpus prepared without a validation split, and a run trained on it."""
    other = prepare(data.parent, "noval", val_fraction=0.0, seed=5)
    return other, train_tiny(other, data.parent / "noval-run", schedule="fixed:2", updates=3)


@pytest.mark.parametrize(
    ("target", "extra", "message"),
    [
        ("run", ["--people", "5"], "--people applies to bioS runs only"),
        ("run", ["--val-sequences", "-1"], "val_sequences must be a non-negative integer"),
        ("run", ["--data", "NOVAL"], "is not the one"),
        ("noval-run", ["--checkpoint", "1.0"], "has no validation split"),
    ],
)
def test_bad_inputs_exit_2_with_one_error_line(
    run_dir, no_validation, tmp_path, capsys, target, extra, message
):
    run = run_dir if target == "run" else no_validation[1]
    extra = [str(no_validation[0]) if e == "NOVAL" else e for e in extra]
    code, _, err = run_cli([run, *extra, "--out", tmp_path / "out", "--quiet"], capsys)
    assert code == 2
    assert err.startswith("error: ") and err.count("\n") == 1 and message in err, err
    assert not (tmp_path / "out").exists()


def test_the_help_states_the_librarys_defaults(capsys):
    code, out, _ = run_cli(["--help"], capsys)
    assert code == 0 and f"[{DEFAULT_VAL_SEQUENCES}]" in out and f"[{DEFAULT_PEOPLE}]" in out


def test_an_option_for_the_other_kind_of_run_is_refused_by_the_library(run_dir):
    with pytest.raises(BiosrecallError, match="--people applies to bioS runs only"):
        load_run_state(run_dir, "switch", people=10)
