"""Tests of LM training on the shared trainer, LM evaluation and comparison, and the paper-run plans.

The corpus is generated here (seeded word salad); nothing is downloaded. Multi-process tests start
`torch.distributed.run` with gloo on the CPU, one thread per rank.

    pytest -q tests/test_lm_train.py                 # everything (the torchrun tests take minutes)
    pytest -q tests/test_lm_train.py -m "not slow"   # the quick ones
"""

from __future__ import annotations

import math
import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from harness import free_port, run_launched, wait_for_updates
from safetensors.torch import load_file

from biosrecall.cli import main
from biosrecall.errors import BiosrecallError
from biosrecall.lm import Corpus, ShardLoader, prepare_corpus, train_tokenizer
from biosrecall.lm.task import LMBatchSource
from biosrecall.train.checkpoint_files import load_checkpoint, load_training_state
from biosrecall.train.config import TrainConfig
from biosrecall.train.distributed import DistInfo, check_divisible
from biosrecall.train.optim import build_optimizer
from biosrecall.train.run_folder import RunFolder

ROOT = Path(__file__).resolve().parents[1]
WORDS = ["the", "a", "river", "city", "model", "loop", "depth", "recall", "and", "of", "über", "東京"]
TRAIN = ["--preset", "lm-tiny", "--seq-len", "16", "--batch-size", "8", "--lr", "3e-3", "--seed", "1"]
TRAIN += ["--device", "cpu", "--quiet"]


def write_corpus(path: Path, documents: int, seed: int) -> Path:
    rng = random.Random(seed)
    docs = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(10, 60))) + "." for _ in range(documents)]
    path.write_text("\n\n".join(docs) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("lm")
    corpus = Corpus([write_corpus(root / "corpus.txt", 300, seed=0)])
    return prepare_corpus(corpus, root / "data", vocab_size=300, val_fraction=0.05, seed=0).path


def cli(capsys, *args: str) -> tuple[int, str, str]:
    try:
        main([str(a) for a in args])
        code = 0
    except SystemExit as exc:
        code = exc.code
    out = capsys.readouterr()
    return code, out.out, out.err


def train(capsys, data, run_dir, *extra):
    code, out, err = cli(capsys, "lm", "train", "--data", data, "--out", run_dir, *TRAIN, *extra)
    assert code == 0, err
    return RunFolder(run_dir).read_metrics()


def test_prepare_train_eval_compare_end_to_end(data, tmp_path, capsys):
    corpus = write_corpus(tmp_path / "corpus.txt", 300, seed=4)
    code, _, err = cli(capsys, "lm", "prepare", corpus, "--out", tmp_path / "data", "--vocab-size", "300")
    assert code == 0, err
    runs = {"uniform": "uniform:1-16", "ff": "fixed_first:k0=2,switch=0.67,finish=uniform"}
    for name, schedule in runs.items():
        metrics = train(capsys, tmp_path / "data", tmp_path / name, "--schedule", schedule, "--updates", "24")
        assert len(metrics) == 24
    code, out, err = cli(capsys, "lm", "eval", tmp_path / "uniform", tmp_path / "ff", "--checkpoints", "all")
    assert code == 0, err
    assert "mean NLL" in out
    code, _, err = cli(capsys, "lm", "eval", tmp_path / "ff", "--data", data)  # another tokenizer's shards
    assert code == 2 and "tokenizer and shards do not match" in err
    table = pd.read_parquet(tmp_path / "ff" / "eval" / "nll.parquet")
    assert table.equals(pd.read_csv(tmp_path / "ff" / "eval" / "nll.csv", dtype={"checkpoint": str}))
    final = table[table["checkpoint"] == "1.0"]
    assert final["depth"].tolist() == list(range(1, 17)) and np.isfinite(final["nll"]).all()
    first = table[table["checkpoint"] == "0.25"]["nll"].mean()
    assert final["nll"].mean() < first < math.log(512)  # it learns (chance is ln of the vocabulary)
    assert "switch" in set(table["checkpoint"])
    code, out, err = cli(
        capsys, "lm", "compare", tmp_path / "ff", tmp_path / "uniform", "--out", tmp_path / "fig"
    )
    assert code == 0, err
    compared = pd.read_csv(tmp_path / "fig" / "lm_compare.csv").set_index("run")
    ff, uniform = compared.loc[str(tmp_path / "ff")], compared.loc[str(tmp_path / "uniform")]
    spent = [RunFolder(tmp_path / name).read_metrics()[-1]["flops"] for name in ("ff", "uniform")]
    assert ff["compute_vs_ref"] == pytest.approx(spent[0] / spent[1]) and uniform["reference"]
    assert ff["mean_nll"] == pytest.approx(final["nll"].mean())
    for name in ("nll_vs_depth", "nll_vs_compute"):
        assert (tmp_path / "fig" / f"{name}.png").stat().st_size > 0
        assert (tmp_path / "fig" / f"{name}.pdf").stat().st_size > 0


def test_batches_are_the_loader_stream_and_a_pure_function_of_the_update(data):
    source = LMBatchSource(data, batch_size=7, seq_len=16, seed=3)
    loader = ShardLoader(data, 16, seed=3)
    updates = 3 * loader.num_windows // 7 + 2  # crosses several epochs, mid-batch
    expected = [loader.batch(7) for _ in range(updates)]
    for update in [*range(updates), 5, 0, updates - 1]:  # any order gives the same batch
        np.testing.assert_array_equal(source.batch(update), expected[update])
    state = source.state_dict()
    LMBatchSource(data, batch_size=7, seq_len=16, seed=3).load_state_dict(state)
    with pytest.raises(BiosrecallError, match="seed"):
        LMBatchSource(data, batch_size=7, seq_len=16, seed=4).load_state_dict(state)


def test_resuming_with_another_batch_size_is_refused(data, tmp_path, capsys):
    """A batch is a function of (seed, update, batch size): the trainer refuses a resume that changes
    the batch size, as config.json and the checkpoint both record it."""
    args = ("--schedule", "fixed:2", "--updates", "2")
    train(capsys, data, tmp_path / "run", *args)
    code, _, err = cli(
        capsys, "lm", "train", "--data", data, "--out", tmp_path / "run", *TRAIN, *args, "--batch-size", "4",
        "--resume",
    )  # fmt: skip
    assert code == 2 and "train_config.batch_size differs" in err, err


def test_gradient_accumulation_matches_one_batch(data, tmp_path, capsys):
    args = ("--schedule", "uniform:1-16", "--updates", "6")
    whole = train(capsys, data, tmp_path / "one", *args)
    split = train(capsys, data, tmp_path / "four", *args, "--grad-accum", "4")
    assert [m["depth"] for m in whole] == [m["depth"] for m in split]
    for a, b in zip(whole, split, strict=True):
        assert b["loss"] == pytest.approx(a["loss"], rel=1e-5)


def bad_tokenizer(tmp_path: Path) -> Path:
    other = train_tokenizer(["a completely different text " * 20], 270)
    other.save(tmp_path / "other.json")
    return tmp_path / "other.json"


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (("--tokenizer", "OTHER"), "tokenizer and shards do not match"),
        (("--seq-len", "256"), "longer than the context of preset lm-tiny"),
        (("--vocab-size", "100"), "the tokenizer has"),
        (("--parallel", "fsdp"), "needs several processes"),
        (("--batch-size", "6", "--grad-accum", "4"), "must be at least 1 and divide the batch size"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_overwrites_nothing(data, tmp_path, capsys, extra, message):
    run = tmp_path / "run"
    run.mkdir()
    (run / "keep.txt").write_text("old run")
    extra = [str(bad_tokenizer(tmp_path)) if e == "OTHER" else e for e in extra]
    args = ["lm", "train", "--data", data, "--out", run, *TRAIN, "--updates", "4", "--overwrite", *extra]
    code, _, err = cli(capsys, *args)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err
    assert sorted(p.name for p in run.iterdir()) == ["keep.txt"]


def test_world_size_must_divide_the_global_batch(capsys):
    with pytest.raises(BiosrecallError, match="not divisible by the world size 3"):
        check_divisible(8, DistInfo(rank=0, world_size=3))
    code, _, err = cli(capsys, "lm", "plan", "--batch-size", "8", "--updates", "5", "--nproc-per-node", "3")
    assert code == 2 and "not divisible by the world size 3" in err


@pytest.mark.parametrize(
    ("config", "schedule", "updates", "tokens", "saving"),
    [
        ("200m", "fixed_first:k0=4,switch=0.67,finish=uniform", 4800, "2,516,582,400 (2.52B)", "31.4%"),
        ("200m", "uniform:1-16", 4800, "2,516,582,400 (2.52B)", "0.0%"),
        ("1b", "fixed_first:k0=4,switch=0.67,finish=uniform", 20000, "10,485,760,000 (10.49B)", "30.8%"),
    ],
)
def test_plan_prints_the_paper_runs_tokens_and_flops(capsys, config, schedule, updates, tokens, saving):
    code, out, err = cli(
        capsys, "lm", "plan", "--config", ROOT / "scripts" / "lm" / f"{config}.toml",
        "--schedule", schedule, "--updates", updates, "--nproc-per-node", "8",
    )  # fmt: skip
    assert code == 0, err
    assert f"tokens {tokens}" in out and f"{saving} less than uniform" in out
    assert "modeled training FLOPs" in out and "8 x 32 rows" in out


# ---- torchrun: DDP and FSDP2 against one process, resume from a sharded checkpoint ----------------


def lm_train_command(data, run_dir, processes: int, *extra) -> list[str]:
    launcher = [sys.executable]
    if processes > 1:
        launcher += ["-m", "torch.distributed.run", "--nproc_per_node", str(processes)]
        launcher += ["--master_port", str(free_port())]
    args = ["lm", "train", "--data", data, "--out", run_dir, *TRAIN, "--schedule", "uniform:1-16"]
    return [*launcher, "-m", "biosrecall", *map(str, args), *extra]


ENV = {**os.environ, "OMP_NUM_THREADS": "1"}
LIMIT = 300  # seconds for one launched run (about 30 here): a hang fails the test instead of stalling it


def final_weights(run_dir) -> dict[str, torch.Tensor]:
    return load_file(str(RunFolder(run_dir).fraction_checkpoints()[1.0] / "model.safetensors"))


@pytest.fixture(scope="module")
def one_process(data, tmp_path_factory):
    run = tmp_path_factory.mktemp("one") / "run"
    subprocess.run(lm_train_command(data, run, 1, "--updates", "10"), check=True, env=ENV, timeout=LIMIT)
    return run


@pytest.mark.distributed
@pytest.mark.slow
@pytest.mark.parametrize("parallel", ["ddp", "fsdp"])
def test_two_processes_match_one_process(data, one_process, tmp_path, parallel):
    extra = ("--updates", "10", "--parallel", parallel, "--grad-accum", "2")
    run_launched(lm_train_command(data, tmp_path / "two", 2, *extra), ENV, LIMIT)
    one, two = RunFolder(one_process).read_metrics(), RunFolder(tmp_path / "two").read_metrics()
    assert [m["depth"] for m in one] == [m["depth"] for m in two]
    for a, b in zip(one, two, strict=True):
        assert b["loss"] == pytest.approx(a["loss"], rel=1e-4, abs=1e-5)
    single, shared = final_weights(one_process), final_weights(tmp_path / "two")
    for name, tensor in single.items():
        torch.testing.assert_close(shared[name], tensor, rtol=1e-4, atol=1e-5)
    # The kept checkpoint holds the whole optimizer in torch.optim's layout, whatever the parallelism.
    model, _ = load_checkpoint(RunFolder(tmp_path / "two").fraction_checkpoints()[1.0])
    optimizer = build_optimizer(model, TrainConfig(budget=1.0))
    optimizer.load_state_dict(
        load_training_state(RunFolder(tmp_path / "two").fraction_checkpoints()[1.0])["optimizer"]
    )
    for param in (p for group in optimizer.param_groups for p in group["params"]):
        assert optimizer.state[param]["exp_avg"].shape == param.shape


FSDP_RUN = ("--updates", "24", "--parallel", "fsdp", "--save-every", "4")


@pytest.fixture(scope="module")
def fsdp_whole(data, tmp_path_factory):
    run = tmp_path_factory.mktemp("fsdp") / "whole"
    args = FSDP_RUN
    run_launched(lm_train_command(data, run, 2, *args), ENV, LIMIT)
    return run


@pytest.mark.distributed
@pytest.mark.slow
@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGKILL], ids=["SIGINT", "SIGKILL"])
def test_fsdp_resume_from_a_sharded_checkpoint_matches_an_uninterrupted_run(data, fsdp_whole, tmp_path, stop):
    cut = tmp_path / "cut"
    command = lm_train_command(data, cut, 2, *FSDP_RUN)
    # A session of its own, so the stop reaches torchrun and both ranks like Ctrl-C (or a node loss).
    process = subprocess.Popen(command, env=ENV, start_new_session=True, stderr=subprocess.PIPE, text=True)
    try:
        wait_for_updates(cut, 10, process)  # past the 0.25 checkpoint (update 6) and a save (update 8)
    finally:
        os.killpg(process.pid, stop)
        _, stderr = process.communicate(timeout=LIMIT)
    if stop == signal.SIGINT:
        assert "resume with --resume" in stderr
    latest = (cut / "checkpoints" / "latest").resolve()
    assert (latest / "dcp" / ".metadata").is_file() and load_checkpoint(
        RunFolder(cut).fraction_checkpoints()[0.25]
    )
    run_launched([*command, "--resume"], ENV, LIMIT)
    whole, resumed = final_weights(fsdp_whole), final_weights(cut)
    assert all(torch.equal(whole[name], resumed[name]) for name in whole)
    assert [m["loss"] for m in RunFolder(fsdp_whole).read_metrics()] == [
        m["loss"] for m in RunFolder(cut).read_metrics()
    ]


@pytest.mark.slow
def test_launch_script_dry_run_prints_every_plan():
    env = {**ENV, "DRY_RUN": "1", "BIOSRECALL": f"{sys.executable} -m biosrecall"}
    script = ROOT / "scripts" / "lm" / "compare-1b.sh"
    out = subprocess.run(["bash", script], check=True, env=env, capture_output=True, text=True).stdout
    assert out.count("tokens 10,485,760,000 (10.49B)") == 3 and out.count("== 1b/") == 3
    assert "36.8% less than uniform" in out and "30.8% less than uniform" in out
