"""bf16 autocast checked on a CPU: training follows fp32's loss curve on fp32 master weights, and the
all-depth recall sweep nearly always gives fp32's exact-match flags.

    pytest -q tests/test_bf16.py            # the sweep comparison (seconds)
    pytest -q tests/test_bf16.py -m slow    # the training comparison (bf16 matmuls are slow on CPUs)

Tolerances, with what was measured on bios-tiny when they were set:
- loss curves: 40 updates of uniform 1..4 differ by at most 0.013 nats per update (0.027 over 150
  updates); allowed: 0.05.
- sweep flags: on a model trained to 140 of 240 exact items, 18 of 3,840 (item, depth) flags (0.5%)
  differ between fp32 and bf16 evaluation; allowed: 2%. They are not identical because bf16 keeps 8
  bits of mantissa, so an answer token whose logit is within about 1% of the runner-up's can swap
  places with it: recall measured under bf16 is a close estimate, not the fp32 number.
"""

from __future__ import annotations

from contextlib import nullcontext

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from biosrecall.bios import generate_dataset, load_dataset
from biosrecall.eval.sweep import exact_by_depth
from biosrecall.train.checkpoint_files import load_checkpoint, load_training_state
from biosrecall.train.config import TrainConfig
from biosrecall.train.distributed import autocast_for
from biosrecall.train.run_folder import RunFolder
from biosrecall.train.trainer import train_bios

LOSS_TOLERANCE = 0.05
FLAG_MISMATCH_TOLERANCE = 0.02


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    return generate_dataset(tmp_path_factory.mktemp("bf16") / "data", people=8, seed=0)


def _train(dataset, run_dir, precision: str, updates: int):
    config = TrainConfig(
        schedule="uniform:1-4", updates=updates, batch_size=8, seq_len=96, lr=1e-2, seed=0,
        precision=precision, device="cpu", checkpoint_fractions=(1.0,), save_every=10**9,
    )  # fmt: skip
    train_bios(dataset, run_dir, config, preset="bios-tiny")
    return [row["loss"] for row in RunFolder(run_dir).read_metrics()]


def test_precision_picks_the_autocast():
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    with autocast_for(cpu, "bf16")():
        assert torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.bfloat16
    for precision in ("auto", "fp32"):  # "auto" trains CPU runs in fp32
        with autocast_for(cpu, precision)():
            assert not torch.is_autocast_enabled("cpu")
    assert autocast_for(cuda, "fp32") is nullcontext and autocast_for(cuda, "auto") is not nullcontext


@pytest.mark.slow
def test_bf16_training_follows_the_fp32_loss_curve_on_fp32_weights(dataset, tmp_path):
    fp32 = _train(dataset, tmp_path / "fp32", "fp32", updates=40)
    bf16 = _train(dataset, tmp_path / "bf16", "bf16", updates=40)
    assert fp32[-1] < fp32[0] - 2  # it learns, so the curves have a shape to compare
    assert np.max(np.abs(np.array(bf16) - np.array(fp32))) < LOSS_TOLERANCE
    assert bf16 != fp32  # bf16 really ran
    final = RunFolder(tmp_path / "bf16").fraction_checkpoints()[1.0]
    assert {tensor.dtype for tensor in load_file(str(final / "model.safetensors")).values()} == {
        torch.float32
    }
    state = load_training_state(final)
    moments = [v for s in state["optimizer"]["state"].values() for v in s.values() if v.dim() > 0]
    assert moments and {m.dtype for m in moments} == {torch.float32}


def test_all_depth_sweep_nearly_always_gives_fp32s_flags(dataset, tmp_path):
    _train(dataset, tmp_path / "run", "fp32", updates=150)
    model, _ = load_checkpoint(RunFolder(tmp_path / "run").fraction_checkpoints()[1.0])
    eval_set = load_dataset(dataset).eval_set()
    fp32 = exact_by_depth(model, eval_set, 16, progress=False)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        bf16 = exact_by_depth(model, eval_set, 16, progress=False)
    assert fp32[3].mean() > 0.25  # trained well past chance, so the flags are worth comparing
    assert (fp32 != bf16).mean() <= FLAG_MISMATCH_TOLERANCE
