"""The sweep engine's launchers beyond one local process per run: torchrun for runs over several
GPUs, and `lm train` sweeps evaluated with `lm eval` and compared by `collect` (split from
tests/test_sweep.py, whose fixtures and helpers these reuse).

    pytest -q tests/test_sweep_launchers.py
"""

from __future__ import annotations

import random

import pandas as pd
import pytest
from test_sweep import folder, registered, run_cli, spec_file  # noqa: F401  (fixtures used here)

from biosrecall.sweep.engine import run_sweep
from biosrecall.sweep.executors import LocalExecutor
from biosrecall.sweep.jobs import SweepRun
from biosrecall.train.config import TrainConfig
from biosrecall.train.run_folder import RunFolder


@pytest.mark.distributed
@pytest.mark.slow
def test_a_run_over_several_gpus_starts_under_torchrun(folder, tmp_path):  # noqa: F811  (the fixture)
    """gpus_per_run > 1 launches torchrun with one process per GPU (here on CPU: two gloo ranks)."""
    config = TrainConfig(batch_size=4, schedule="fixed:2", budget_of="fixed:2:10", device="cpu")
    task = {"data": str(folder / "data"), "preset": "bios-tiny", "quiet": True}
    executor = LocalExecutor(gpus_per_run=2)
    result = run_sweep(tmp_path / "out", [SweepRun("ddp", "train", config, task)], executor=executor)
    assert [(o.state, o.action) for o in result.outcomes] == [("done", "trained")], result.summary()
    assert (
        "torch.distributed.run --standalone --nproc_per_node 2 -m biosrecall train"
        in (tmp_path / "out/.sweep/ddp.log").read_text()
    )
    assert 1.0 in RunFolder(tmp_path / "out/ddp").fraction_checkpoints()


@pytest.mark.slow
def test_a_language_model_sweep_is_evaluated_and_compared(tmp_path, capsys):
    """`lm train` runs laid out as NAME/seed<S>, each evaluated by `lm eval`, compared by collect."""
    from biosrecall.lm import Corpus, prepare_corpus

    words = ["the", "cat", "dog", "sat", "ran", "on", "under", "a", "tree", "house", "big", "red"]
    rng = random.Random(0)
    text = "\n\n".join(" ".join(rng.choice(words) for _ in range(rng.randint(10, 60))) for _ in range(300))
    (tmp_path / "corpus.txt").write_text(text + "\n")
    prepare_corpus(
        Corpus([tmp_path / "corpus.txt"]), tmp_path / "lm", vocab_size=300, val_fraction=0.05, seed=0
    )
    spec = spec_file(tmp_path, """
[sweep]
out = "runs"
command = "lm train"
[base]
data = "lm"
preset = "lm-tiny"
seq_len = 16
batch_size = 8
updates = 6
device = "cpu"
quiet = true
[grid]
seed = [0]
[[runs]]
name = "uniform"
schedule = "uniform:1-16"
[[runs]]
name = "ff"
schedule = "fixed_first:k0=4,switch=0.67,finish=uniform"
[eval]
lm_eval = { checkpoints = "all" }
""")  # fmt: skip
    code, out, err = run_cli(["sweep", "run", str(spec), "--workers", "2"], capsys)
    assert code == 0 and "2 runs: 2 trained" in out, out + err
    code, out, _ = run_cli(["sweep", "collect", str(spec)], capsys)
    compare = pd.read_csv(tmp_path / "runs/collect/lm_compare.csv")
    assert code == 0 and sorted(compare["run"]) == sorted(
        str(tmp_path / "runs" / n) for n in ("ff", "uniform")
    )
    assert set(compare["n_seeds"]) == {1}
