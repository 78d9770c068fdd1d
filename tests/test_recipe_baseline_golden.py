"""`baseline` stays bit-identical to the runs made before recipes existed: the same config trains to
the same weights. The hashes below were recorded from the code as it was before the recipe registry
(the loop, its injections and the loss written inline), with this file's training settings.

    pytest -q tests/test_recipe_baseline_golden.py

They are sha256 digests of every final weight (float32 bytes, keys sorted), so they hold on the CPU
build of torch they were made with; on another torch version the test is skipped rather than wrong.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from biosrecall.cli import main
from biosrecall.train.config import TrainConfig
from biosrecall.train.run_folder import RunFolder
from biosrecall.train.trainer import train_bios

RECORDED_WITH = "2.13.0+cpu"
GOLDEN = {
    "concat": "5a25bd59149e2a49462685e32b20123a02bffd6b20e94b2f4071672774f10abc",
    "add-noise-sandwich-bp2": "e25d0cbcdfa7ab232e19957731071128478bdeaa09d1e7084ec6122c529481ef",
    "none": "b73e39b8dc843aa5895a1477d81f99b648bff63133ec964ce43c98d003d7265b",
    "concat-checkpointed": "5a25bd59149e2a49462685e32b20123a02bffd6b20e94b2f4071672774f10abc",
}
VARIANTS = {
    "concat": ({}, False),
    "add-noise-sandwich-bp2": (
        {"injection": "add", "init_state": "noise", "norm": "sandwich", "backprop_depth": 2},
        False,
    ),
    "none": ({"injection": "none"}, False),
    "concat-checkpointed": ({}, True),
}


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("golden") / "data"
    main(["generate", "--out", str(out), "--seed", "11", "--people", "50", "--pool-size", "employer=64"])
    return out


def weights_digest(run: Path) -> str:
    weights = load_file(str(RunFolder(run).fraction_checkpoints()[1.0] / "model.safetensors"))
    digest = hashlib.sha256()
    for name in sorted(weights):
        digest.update(name.encode())
        digest.update(weights[name].contiguous().numpy().tobytes())
    return digest.hexdigest()


@pytest.mark.skipif(torch.__version__ != RECORDED_WITH, reason=f"digests recorded with torch {RECORDED_WITH}")
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_baseline_trains_to_the_recorded_weights(data, tmp_path, variant):
    overrides, checkpointed = VARIANTS[variant]
    config = TrainConfig(
        schedule="uniform:1-16",
        updates=4,
        batch_size=4,
        seed=3,
        save_every=100,
        checkpoint_fractions=(1.0,),
        activation_checkpointing=checkpointed,
    )
    train_bios(data, tmp_path / "run", config, preset="bios-tiny", model_overrides=overrides)
    assert weights_digest(tmp_path / "run") == GOLDEN[variant]
