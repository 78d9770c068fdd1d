"""The trainer: matched budgets, checkpoint fractions, resume after a hard kill, failure handling."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest
import torch
from harness import free_port, run_launched, wait_for_updates
from safetensors.torch import load_file

from biosrecall.bios import generate_dataset
from biosrecall.train.checkpoint_files import load_checkpoint
from biosrecall.train.config import TrainConfig
from biosrecall.train.run_folder import RunFolder

FIG1 = {
    "fixed": "fixed:4",
    "fixed_first": "fixed_first:k0=4,switch=0.8,finish=uniform",
    "uniform": "uniform:1-16",
}


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    return generate_dataset(tmp_path_factory.mktemp("data") / "bios", people=60, seed=3)


def tiny_config(**overrides) -> TrainConfig:
    values = {"batch_size": 4, "budget_of": "fixed:2:24", "seed": 1, "save_every": 5, "lr": 3e-3}
    values.update(overrides)
    return TrainConfig(**values)


def train(dataset, run_dir, **overrides):
    from biosrecall.train.trainer import train_bios

    return train_bios(dataset, run_dir, tiny_config(**overrides), preset="bios-tiny")


def final_weights(run_dir):
    return load_file(str(RunFolder(run_dir).fraction_checkpoints()[1.0] / "model.safetensors"))


def test_figure1_schedules_spend_the_same_budget(dataset, tmp_path):
    results = {
        name: train(dataset, tmp_path / name, schedule=spec, budget_of="fixed:4:30")
        for name, spec in FIG1.items()
    }
    budget = RunFolder(tmp_path / "fixed").read_config()["plan"]["budget"]
    for name, result in results.items():
        metrics = RunFolder(tmp_path / name).read_metrics()
        per_update = [b["flops"] - a["flops"] for a, b in zip(metrics, metrics[1:], strict=False)]
        assert result.flops <= budget
        assert budget - result.flops < max(per_update), name
        assert RunFolder(tmp_path / name).read_config()["plan"]["budget"] == budget
    # A K=4 update is cheaper than the average uniform update, so the uniform run takes fewer steps.
    assert results["uniform"].updates < results["fixed_first"].updates < results["fixed"].updates


def test_checkpoints_are_written_when_the_running_flops_cross_each_fraction(dataset, tmp_path):
    train(dataset, tmp_path / "run", schedule=FIG1["fixed_first"], checkpoint_fractions=(0.25, 0.45, 1.0))
    metrics = RunFolder(tmp_path / "run").read_metrics()
    budget = RunFolder(tmp_path / "run").read_config()["plan"]["budget"]
    checkpoints = RunFolder(tmp_path / "run").fraction_checkpoints()
    assert sorted(checkpoints) == [0.25, 0.45, 1.0]
    for fraction in (0.25, 0.45):
        _, meta = load_checkpoint(checkpoints[fraction])
        crossing = next(m for m in metrics if m["flops"] >= fraction * budget)
        assert meta["update"] == crossing["update"] + 1
        assert meta["flops"] == pytest.approx(crossing["flops"])
    _, final = load_checkpoint(checkpoints[1.0])
    assert final["update"] == len(metrics) == RunFolder(tmp_path / "run").read_config()["plan"]["updates"]
    assert final["model_config"]["vocab_size"] > 0 and final["dataset"]["manifest_hash"]


def test_a_run_is_reproducible_from_its_seed(dataset, tmp_path):
    train(dataset, tmp_path / "a", schedule=FIG1["uniform"])
    train(dataset, tmp_path / "b", schedule=FIG1["uniform"])
    losses = [[m["loss"] for m in RunFolder(tmp_path / run).read_metrics()] for run in ("a", "b")]
    assert losses[0] == losses[1]
    depths = [m["depth"] for m in RunFolder(tmp_path / "a").read_metrics()]
    assert len(set(depths)) > 3


def test_non_finite_loss_stops_the_run_and_keeps_the_last_good_checkpoint(dataset, tmp_path, monkeypatch):
    from biosrecall.model import LoopedTransformer
    from biosrecall.train.stops import TrainingDiverged

    calls = {"n": 0}
    original = LoopedTransformer.forward

    def poisoned(self, tokens, depth, **fused):  # fused: the training step's targets (loss, not logits)
        calls["n"] += 1
        out = original(self, tokens, depth, **fused)
        return out * float("nan") if calls["n"] > 2 + 12 else out  # 2 calibration passes first

    monkeypatch.setattr(LoopedTransformer, "forward", poisoned)
    with pytest.raises(TrainingDiverged, match="non-finite loss at update 12"):
        train(dataset, tmp_path / "run", schedule="fixed:2", checkpoint_fractions=(1.0,))
    _, meta = load_checkpoint(tmp_path / "run" / "checkpoints" / "latest")
    assert meta["update"] == 10  # save_every=5: the last state saved before the failure
    assert all(
        torch.isfinite(p).all() for p in load_checkpoint(tmp_path / "run/checkpoints/latest")[0].parameters()
    )


def cli_train(dataset, run_dir, *extra):
    return [
        sys.executable, "-m", "biosrecall", "train", "--data", str(dataset), "--out", str(run_dir),
        "--preset", "bios-tiny", "--batch-size", "4", "--seed", "1", "--lr", "3e-3",
        "--schedule", FIG1["fixed_first"], "--budget-of", "fixed:2:60", "--save-every", "3", "--quiet", *extra,
    ]  # fmt: skip


@pytest.mark.slow
# SIGKILL at random moments, then a bit-identical resume, is tests/test_crash_safety.py.
@pytest.mark.parametrize("stop", [signal.SIGINT])
def test_resume_after_a_stop_matches_an_uninterrupted_run(dataset, tmp_path, stop):
    subprocess.run(cli_train(dataset, tmp_path / "whole"), check=True)
    process = subprocess.Popen(cli_train(dataset, tmp_path / "cut"), stderr=subprocess.PIPE, text=True)
    wait_for_updates(tmp_path / "cut", 20, process)
    os.kill(process.pid, stop)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == (-9 if stop == signal.SIGKILL else 130), stderr
    if stop == signal.SIGINT:
        assert "resume with --resume" in stderr
    for path in RunFolder(tmp_path / "cut").fraction_checkpoints().values():
        load_checkpoint(path)  # whatever was on disk at the kill loads cleanly
    subprocess.run([*cli_train(dataset, tmp_path / "cut"), "--resume"], check=True)
    whole, cut = final_weights(tmp_path / "whole"), final_weights(tmp_path / "cut")
    assert whole.keys() == cut.keys()
    assert all(torch.equal(whole[name], cut[name]) for name in whole)
    losses = [[m["loss"] for m in RunFolder(tmp_path / run).read_metrics()] for run in ("whole", "cut")]
    assert losses[0] == losses[1]


@pytest.mark.distributed
@pytest.mark.slow
def test_two_process_ddp_matches_one_process(dataset, tmp_path):
    args = ["--schedule", "uniform:1-16", "--budget-of", "uniform:1-16:8", "--device", "cpu"]
    subprocess.run([*cli_train(dataset, tmp_path / "one"), *args], check=True)
    torchrun = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node",
        "2",
        "--master_port",
        str(free_port()),
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    run_launched([*torchrun, *cli_train(dataset, tmp_path / "two", *args)[1:]], env)
    one, two = RunFolder(tmp_path / "one").read_metrics(), RunFolder(tmp_path / "two").read_metrics()
    assert [m["depth"] for m in one] == [m["depth"] for m in two]
    for a, b in zip(one, two, strict=True):
        assert b["loss"] == pytest.approx(a["loss"], rel=1e-4, abs=1e-5)
    assert (
        json.loads((tmp_path / "two" / "config.json").read_text())["plan"]
        == RunFolder(tmp_path / "one").read_config()["plan"]
    )
