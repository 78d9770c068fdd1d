"""The update diagnostic (`biosrecall diagnose-update`): AdamW arithmetic, RMS matching, continuation,
zero advantage for identical depths, the command end to end, and one-line errors with exit 2.

One tiny fixed-first run is trained once for the whole file (a few seconds on a CPU).

    pytest -q tests/test_diagnose.py
"""

from __future__ import annotations

import copy
import json
import shutil
from dataclasses import asdict

import numpy as np
import pandas as pd
import pytest
import torch
from safetensors.torch import load_file

from biosrecall.bios import generate_dataset
from biosrecall.cli import main
from biosrecall.diagnose import (
    DiagnoseOptions,
    candidate_updates,
    continue_run,
    diagnose_update,
    load_run_state,
    parse_depth_list,
)
from biosrecall.diagnose.batch_update import (
    adamw_batch_update,
    batch_gradient,
    optimizer_params,
    rms,
    scale_to_rms,
)
from biosrecall.diagnose.report import summarize
from biosrecall.errors import BiosrecallError
from biosrecall.train.checkpoint_files import load_training_state
from biosrecall.train.config import TrainConfig
from biosrecall.train.optim import build_optimizer
from biosrecall.train.run_folder import RunFolder

SCHEDULE = "fixed_first:k0=4,switch=0.8,finish=uniform"
SMALL = {"batches": 2, "people": 6, "serving_depths": range(1, 5), "bootstrap": 50}


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    return generate_dataset(tmp_path_factory.mktemp("diagnose") / "data", people=60, seed=3)


def train_tiny(data_dir, run_dir, **overrides):
    """A fixed-first run of a few dozen updates: a checkpoint before the switch, the switch, the end."""
    from biosrecall.train.trainer import train_bios

    values = {"batch_size": 4, "budget_of": "fixed:4:30", "seed": 1, "lr": 3e-3, **overrides}
    config = TrainConfig(schedule=SCHEDULE, checkpoint_fractions=(0.5, 1.0), **values)
    train_bios(data_dir, run_dir, config, preset="bios-tiny")
    return run_dir


@pytest.fixture(scope="module")
def run_dir(data_dir):
    return train_tiny(data_dir, data_dir.parent / "run")


@pytest.fixture()
def state(run_dir):
    return load_run_state(run_dir, "switch")[0]


def test_the_batch_caused_update_is_zero_for_a_zero_gradient(state):
    params = optimizer_params(state.optimizer)
    assert any(state.optimizer.state[p]["exp_avg"].abs().sum() > 0 for p in params)  # momentum is live
    update = adamw_batch_update(state.optimizer, [torch.zeros_like(p) for p in params], state.lr())
    assert all(torch.count_nonzero(delta) == 0 for delta in update)


def test_the_batch_caused_update_equals_torch_step_minus_zero_gradient_step(run_dir, state):
    params = optimizer_params(state.optimizer)
    grads = batch_gradient(state.model, params, state.source.batch(state.update), 0, 16, 1.0)
    expected = adamw_batch_update(state.optimizer, grads, state.lr())
    stepped = []
    # torch's own AdamW in float64, so subtracting the two steps loses nothing to rounding
    for gradient in (grads, [torch.zeros_like(g) for g in grads]):
        model = copy.deepcopy(state.model).double()
        optimizer = build_optimizer(model, state.config)
        optimizer.load_state_dict(
            load_training_state(RunFolder(run_dir).checkpoint_dir("switch"))["optimizer"]
        )
        for group in optimizer.param_groups:
            group["lr"] = state.lr()
        for p, g in zip(optimizer_params(optimizer), gradient, strict=True):
            p.grad = g.double()
        optimizer.step()
        stepped.append([p.detach().clone() for p in optimizer_params(optimizer)])
    assert state.config.weight_decay > 0  # decay is part of both torch steps and must cancel
    for with_batch, without, delta in zip(*stepped, expected, strict=True):
        torch.testing.assert_close(with_batch - without, delta, rtol=1e-9, atol=1e-15)
    assert rms(expected) > 1e-6  # a real, non-trivial update was compared


@pytest.mark.parametrize("target", ["shallow", "deep", 2.5e-4])
def test_rms_matching_holds_exactly(state, target):
    candidates = candidate_updates(state, state.source.batch(state.update), (4, 16), target)
    (shallow, raw_shallow), (deep, raw_deep) = candidates[4], candidates[16]
    wanted = {"shallow": raw_shallow, "deep": raw_deep}.get(target, target)
    assert raw_shallow != pytest.approx(raw_deep, rel=1e-3)  # the raw sizes really differ
    assert rms(shallow) == pytest.approx(wanted, rel=1e-12)
    assert rms(deep) == pytest.approx(wanted, rel=1e-12)


def test_a_zero_update_stays_zero_when_rescaled():
    zero = [torch.zeros(3, dtype=torch.float64)]
    assert torch.count_nonzero(scale_to_rms(zero, 1.0)[0]) == 0


@pytest.mark.parametrize("grad_accum", [1, 2])
def test_continuing_from_the_switch_reproduces_the_runs_own_final_weights(
    data_dir, run_dir, tmp_path, grad_accum
):
    run = run_dir if grad_accum == 1 else train_tiny(data_dir, tmp_path / "run", grad_accum=grad_accum)
    state = load_run_state(run, "switch")[0]
    final = load_file(str(RunFolder(run).checkpoint_dir(1.0) / "model.safetensors"))
    assert not all(torch.equal(state.model.state_dict()[name], final[name]) for name in final)
    continue_run(state, state.planned - state.update)
    mine = state.model.state_dict()
    assert all(torch.equal(mine[name], final[name]) for name in final)
    with pytest.raises(BiosrecallError, match="cannot continue"):
        continue_run(state, 1)


def test_identical_depths_give_exactly_zero_advantage(run_dir):
    result = diagnose_update(run_dir, "switch", depths=(4, 4), after_uniform=(0, 1), **SMALL)
    assert (result.batches[["nll_advantage", "bits_advantage"]] == 0).all().all()
    assert (result.batches["nll_change_shallow"] != 0).any()  # the update itself did change the loss
    assert (result.summary[["mean", "ci_low", "ci_high"]] == 0).all().all()


def test_summary_means_and_intervals_over_batches():
    batches = pd.DataFrame(
        {
            "after_uniform": 0,
            "update": 5,
            "batch": np.repeat([0, 1, 2], 2),
            "serving_depth": np.tile([1, 2], 3),
            "nll_advantage": [1.0, 3.0, 2.0, 3.0, 3.0, 3.0],
            "bits_advantage": 0.5,
            **{f"{m}_change_{c}": 0.0 for m in ("nll", "bits") for c in ("shallow", "deep")},
        }
    )
    summary = summarize(batches, bootstrap=500, level=0.9, seed=0).set_index(["metric", "serving_depth"])
    assert summary.loc[("nll", 1), "mean"] == pytest.approx(2.0)
    assert 1.0 <= summary.loc[("nll", 1), "ci_low"] < 2.0 < summary.loc[("nll", 1), "ci_high"] <= 3.0
    assert summary.loc[("nll", 2), ["mean", "ci_low", "ci_high"]].tolist() == [3.0, 3.0, 3.0]
    average = summary[summary.index.get_level_values(1).isna()]
    assert average.loc["nll", "mean"].item() == pytest.approx(2.5)
    assert average.loc["bits", ["ci_low", "ci_high"]].to_numpy().ravel().tolist() == [0.5, 0.5]


def test_depth_lists_parse_ranges_and_lists():
    assert parse_depth_list("1..4,8") == [1, 2, 3, 4, 8]
    assert parse_depth_list("0,4,16", minimum=0) == [0, 4, 16]
    for bad in ("", "1..x", "0..3"):
        with pytest.raises(BiosrecallError):
            parse_depth_list(bad)


def run_cli(args, capsys) -> tuple[int, str, str]:
    try:
        main(["diagnose-update", *map(str, args)])
        code = 0
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def test_the_command_runs_end_to_end(run_dir, tmp_path, capsys):
    args = [run_dir, "--after-uniform", "0,2", "--batches", "2", "--people", "6", "--serving-depths", "1..4"]
    code, out, err = run_cli(
        [*args, "--bootstrap", "50", "--seed", "3", "--out", tmp_path, "--quiet"], capsys
    )
    assert code == 0, err
    assert "advantage of the K=16 update over K=4" in out and err == ""
    names = {path.name for path in tmp_path.iterdir()}
    stems = ["diagnose_switch.csv", "diagnose_switch_batches.parquet", "diagnose_switch.png"]
    assert {*stems, "diagnose_switch.pdf", "diagnose_switch.json"} <= names
    summary = pd.read_parquet(tmp_path / "diagnose_switch.parquet")
    assert set(summary["after_uniform"]) == {0, 2} and (summary["n_batches"] == 2).all()
    assert sorted(summary["serving_depth"].dropna().unique()) == [1, 2, 3, 4]
    assert summary["serving_depth"].isna().sum() == 4  # depth average: 2 after_uniform x 2 metrics
    options = json.loads((tmp_path / "diagnose_switch.json").read_text())
    assert options["seed"] == 3 and options["depths"] == [4, 16] and options["people"] == 6
    assert [s["update"] - options["checkpoint_update"] for s in options["states"]] == [0, 2]


def without_optimizer_state(run_dir, tmp_path):
    copied = shutil.copytree(run_dir, tmp_path / "run", symlinks=True)
    (RunFolder(copied).checkpoint_dir("switch") / "training_state.pt").unlink()
    return copied


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--checkpoint", "0.3"], "no checkpoint at fraction 0.3"),
        (["--checkpoint", "middle"], "--checkpoint takes a budget fraction"),
        (["--depths", "4"], "--depths takes two depths"),
        (["--depths", "4,x"], "--depths takes two depths"),
        (["--depths", "0,16"], "--depths takes two depths"),
        (["--serving-depths", "1..x"], "--serving-depths takes integers"),
        (["--after-uniform", "1000"], "runs past the run's end"),
        (["--checkpoint", "0.5", "--after-uniform", "2"], "before the switch"),
        (["--rms", "big"], "--rms takes shallow, deep or a positive number"),
        (["--val-sequences", "8"], "--val-sequences applies to LM runs only"),
        (["--no-optimizer-state"], "holds no optimizer state"),
    ],
)
def test_bad_inputs_exit_2_with_one_error_line(run_dir, tmp_path, capsys, extra, message):
    target = run_dir
    if extra == ["--no-optimizer-state"]:
        target, extra = without_optimizer_state(run_dir, tmp_path), []
    code, out, err = run_cli([target, *extra, "--out", tmp_path / "out", "--quiet"], capsys)
    assert code == 2
    assert err.startswith("error: ") and err.count("\n") == 1 and message in err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("depths", "message"),
    [("16,4", "with the shallower first"), ("4,4", "compares depth 4 with itself"), ("4,8,16", "two depths")],
)
def test_the_command_refuses_candidate_depths_that_are_not_two_distinct_ascending(
    run_dir, tmp_path, capsys, depths, message
):
    code, _, err = run_cli([run_dir, "--depths", depths, "--out", tmp_path / "out", "--quiet"], capsys)
    assert code == 2
    assert err.startswith("error: ") and err.count("\n") == 1 and message in err, err
    assert not (tmp_path / "out").exists()


def test_options_are_checked_and_normalised_when_built():
    options = DiagnoseOptions(after_uniform=[16, 0, 16], serving_depths=range(4, 0, -1), rms="1e-4")
    assert options.after_uniform == (0, 16) and options.serving_depths == (1, 2, 3, 4)
    assert options.rms == 1e-4
    with pytest.raises(BiosrecallError, match="shallower first"):
        DiagnoseOptions(depths=(16, 4))  # refused, not reordered: the deeper one's advantage is reported
    assert DiagnoseOptions(depths=(4, 4)).depths == (4, 4)  # the library's null control
    with pytest.raises(BiosrecallError, match="--batches must be a positive integer"):
        DiagnoseOptions(batches=0)


def test_the_checkpoint_takes_the_selector_syntax_of_every_command(run_dir, tmp_path, capsys):
    state, _ = load_run_state(run_dir, "final")
    assert state.checkpoint == "1.0" and state.update == state.planned
    args = [run_dir, "--checkpoint", "final", "--batches", "1", "--people", "2", "--serving-depths", "1..2"]
    code, _, err = run_cli([*args, "--bootstrap", "10", "--out", tmp_path, "--quiet"], capsys)
    assert code == 0, err
    options = json.loads((tmp_path / "diagnose_1.0.json").read_text())
    assert options["checkpoint"] == "1.0" and options["checkpoint_selector"] == "final"
    assert set(asdict(DiagnoseOptions())) - {"people", "val_sequences"} <= set(options)
    for several in ("fractions", "0.5,switch"):
        code, _, err = run_cli([run_dir, "--checkpoint", several, "--out", tmp_path / "out"], capsys)
        assert code == 2 and "names one checkpoint" in err and err.count("\n") == 1, err
