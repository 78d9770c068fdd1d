"""`baseline` stays bit-identical to the runs made before recipes existed: the same config trains to
the same weights. The digests below were recorded from the code as it was before the recipe registry
(commit d26e023: the loop, its injections and the loss written inline), with this file's training
settings.

They are sha256 digests of every final weight (float32 bytes, keys sorted). Float arithmetic differs
in its last bits from one processor to another (AVX-512 or AVX2 kernels, the code path MKL picks for
the processor), so the training runs in a child process whose arithmetic is pinned to the portable
paths every x86-64 processor takes (`PORTABLE_ARITHMETIC`: ATen's unvectorised kernels, MKL's
COMPATIBLE branch, oneDNN at SSE4.1, one thread). On another torch build, or off x86-64, the test is
skipped rather than wrong.

    pytest -q tests/test_recipe_baseline_golden.py
    # record the digests again (from a checkout of d26e023 to keep what they mean), one per variant:
    PYTHONPATH=<checkout> python tests/test_recipe_baseline_golden.py OUT
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

RECORDED_WITH = "2.13.0+cpu"
GOLDEN = {
    "concat": "6476524d2190c977313ef6019531719e455998ccb720417fd9057d3c677a5101",
    "add-noise-sandwich-bp2": "1269e904bbb4b7ec3f0b87cb9c9b10f7332c7c81f88fe8edfc2e6730df978901",
    "none": "be154b90415ad68526629b0c921f629a273af3e5b870441dca26bfb7be6da479",
    "concat-checkpointed": "6476524d2190c977313ef6019531719e455998ccb720417fd9057d3c677a5101",
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
# Read when torch, MKL and oneDNN load, hence a child process.
PORTABLE_ARITHMETIC = {
    "ATEN_CPU_CAPABILITY": "default",
    "MKL_CBWR": "COMPATIBLE,STRICT",  # STRICT: the same bits whatever the arrays' alignment
    "ONEDNN_MAX_CPU_ISA": "SSE41",
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
}


def train_variants(out: Path) -> dict[str, str]:
    """Generate the test's dataset under `out`, train every variant on it, return their digests."""
    from safetensors.torch import load_file

    from biosrecall.cli import main
    from biosrecall.train.config import TrainConfig
    from biosrecall.train.run_folder import RunFolder
    from biosrecall.train.trainer import train_bios

    data = out / "data"
    main(["generate", "--out", str(data), "--seed", "11", "--people", "50", "--pool-size", "employer=64"])
    digests = {}
    for variant, (overrides, checkpointed) in sorted(VARIANTS.items()):
        config = TrainConfig(
            schedule="uniform:1-16",
            updates=4,
            batch_size=4,
            seed=3,
            save_every=100,
            checkpoint_fractions=(1.0,),
            activation_checkpointing=checkpointed,
        )
        train_bios(data, out / variant, config, preset="bios-tiny", model_overrides=overrides)
        weights = load_file(str(RunFolder(out / variant).fraction_checkpoints()[1.0] / "model.safetensors"))
        digest = hashlib.sha256()
        for name in sorted(weights):
            digest.update(name.encode())
            digest.update(weights[name].contiguous().numpy().tobytes())
        digests[variant] = digest.hexdigest()
    return digests


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> dict[str, str]:
    import torch

    if torch.__version__ != RECORDED_WITH or platform.machine() not in ("x86_64", "AMD64"):
        pytest.skip(f"digests recorded with torch {RECORDED_WITH} on x86-64")
    out = tmp_path_factory.mktemp("golden")
    done = subprocess.run(
        [sys.executable, __file__, str(out)],
        env={**os.environ, **PORTABLE_ARITHMETIC},
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.splitlines()[-1])


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_baseline_trains_to_the_recorded_weights(trained, variant):
    assert trained[variant] == GOLDEN[variant]


if __name__ == "__main__":
    print(json.dumps(train_variants(Path(sys.argv[1]))))
