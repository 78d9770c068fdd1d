"""Shared builders of the Hugging Face tests (tests/test_hf_*.py): one tiny trained bioS run with its
exports, a tiny randomly initialised GPT-2 with a locally trained tokenizer, and an in-process CLI
runner. Everything is built offline, once per session (`hf_world` caches it), in a few seconds.

    world = hf_world(tmp_path_factory)       # world.data, world.run, world.export (final), ...
    code, out, err = run_cli(["export", ...], capsys)
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

PEOPLE = 20
# fixed-first, so the run keeps a switch checkpoint; noise initial state and sandwich norms, so the
# export is checked on the two features with the most arithmetic (a seeded draw, four norms a layer).
SCHEDULE = "fixed_first:k0=2,switch=0.5,finish=uniform,range=1-4"
MODEL_OVERRIDES = {"init_state": "noise", "init_state_seed": 3, "norm": "sandwich"}
# 150 updates of 8 biographies reach about half the answers exact: enough right and wrong answers
# for the recall comparisons to mean something.
TRAIN = {"batch_size": 8, "budget_of": "fixed:2:150", "lr": 3e-2, "seq_len": 96, "seed": 0}


@dataclass(frozen=True)
class HfWorld:
    data: Path
    run: Path
    export: Path
    """The final checkpoint, exported after recall-curve cached its recall table."""
    switch_export: Path
    """The switch checkpoint, exported without a cached recall table."""
    gpt2: Path
    """A random 1-layer GPT-2 with a byte-level BPE tokenizer trained on the dataset's text."""


_WORLD: dict[str, HfWorld] = {}


def run_cli(argv, capsys) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of an in-process `biosrecall` run."""
    from biosrecall.cli import main

    try:
        main([str(a) for a in argv])
        code = 0
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def one_error_line(code: int, err: str, *needles: str) -> str:
    """Assert the bad-input contract: exit 2 and exactly one `error:` line holding every needle."""
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), (code, err)
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


def hf_world(tmp_path_factory) -> HfWorld:
    """Built on first use, shared by every test module of the session."""
    if "world" not in _WORLD:
        _WORLD["world"] = _build(tmp_path_factory.mktemp("hf"))
    return _WORLD["world"]


def _build(root: Path) -> HfWorld:
    import torch

    from biosrecall.bios import generate_dataset
    from biosrecall.eval.curves import score_runs
    from biosrecall.hf.export import export_run
    from biosrecall.train.config import TrainConfig
    from biosrecall.train.trainer import train_bios

    torch.manual_seed(0)
    data = generate_dataset(root / "data", people=PEOPLE, seed=0)
    config = TrainConfig(schedule=SCHEDULE, checkpoint_fractions=(0.5, 1.0), save_every=1000, **TRAIN)
    train_bios(data, root / "run", config, preset="bios-tiny", model_overrides=MODEL_OVERRIDES)
    score_runs([root / "run"], "final", max_depth=16, device="cpu", progress=False)  # caches the table
    export = export_run(root / "run", root / "export", "final")
    switch_export = export_run(root / "run", root / "switch-export", "switch")
    return HfWorld(data, root / "run", export, switch_export, build_gpt2(data, root / "gpt2"))


def build_gpt2(data: Path, folder: Path) -> Path:
    """A tiny random GPT-2 (one layer, width 32) with a byte-level BPE tokenizer trained on the
    dataset's evaluation text, saved with save_pretrained; no download."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    from biosrecall.bios import load_dataset
    from biosrecall.hf import quiet_transformers
    from biosrecall.hf.prompts import eval_texts

    dataset = load_dataset(data)
    texts = eval_texts(dataset, dataset.eval_set())
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator([p + a for p, a in zip(texts.prompts, texts.answers, strict=True)], trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe, eos_token="<|endoftext|>", bos_token="<|endoftext|>"
    )
    eos = bpe.token_to_id("<|endoftext|>")
    config = GPT2Config(
        vocab_size=bpe.get_vocab_size(),
        n_positions=128,
        n_embd=32,
        n_layer=1,
        n_head=2,
        bos_token_id=eos,
        eos_token_id=eos,
    )
    with quiet_transformers():
        GPT2LMHeadModel(config).save_pretrained(folder)
        tokenizer.save_pretrained(folder)
    return folder
