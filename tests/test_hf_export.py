"""`biosrecall export`: a run's checkpoint as a Hugging Face folder that transformers loads offline and
that computes exactly what biosrecall computes (logits, greedy tokens, token ids), with a model card.

    pytest -q tests/test_hf_export.py
"""

from __future__ import annotations

import ast
import io
import json
import math
import sys

import numpy as np
import pytest
import torch
from hf_fixtures import hf_world, one_error_line, run_cli

pytest.importorskip("transformers")

from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

from biosrecall.hf.export import TEMPLATE, build_hf_model, check_supported  # noqa: E402
from biosrecall.model import LoopedTransformer, get_preset  # noqa: E402
from biosrecall.model.decode import greedy_decode  # noqa: E402
from biosrecall.train.checkpoint_files import load_checkpoint
from biosrecall.train.run_folder import RunFolder


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    return hf_world(tmp_path_factory)


@pytest.fixture(scope="module")
def exported(world):
    """(Hugging Face model loaded from the export folder, biosrecall model of the same checkpoint)."""
    model = AutoModelForCausalLM.from_pretrained(world.export, trust_remote_code=True)
    reference, _ = load_checkpoint(RunFolder(world.run).select_checkpoint("final")[1])
    return model, reference


@pytest.fixture(scope="module")
def dataset(world):
    from biosrecall.bios import load_dataset

    return load_dataset(world.data)


@pytest.mark.parametrize("depth", [1, 4, 16])
def test_exported_logits_equal_biosrecall_forward(exported, dataset, depth):
    model, reference = exported
    rows = torch.as_tensor(dataset.eval_set(np.arange(3)).tokens)  # right-padded bioS rows
    noise = torch.randint(0, dataset.vocab_size, (2, 70), generator=torch.Generator().manual_seed(depth))
    with torch.no_grad():
        for tokens in (rows, noise):
            expected = reference(tokens, depth)
            found = model(tokens, num_steps=depth).logits
            assert found.shape == expected.shape
            assert torch.allclose(found, expected, atol=1e-5, rtol=0), float((found - expected).abs().max())


VARIANTS = [
    {},
    {"position": "learned", "mlp": "gelu", "injection": "add"},
    {"injection": "none", "init_state": "noise", "init_state_seed": 11, "tie_embeddings": False},
    {"norm": "sandwich", "n_block": 2, "n_coda": 0, "rope_base": 500.0},
]


@pytest.mark.parametrize(
    "overrides", VARIANTS, ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()) or "default"
)
def test_every_model_feature_matches_biosrecall(overrides):
    """The modeling code against biosrecall's forward for every norm, MLP, injection, position and
    initial-state choice (untrained weights: the arithmetic, not the learning, is under test)."""
    torch.manual_seed(1)
    reference = LoopedTransformer(get_preset("bios-tiny", **overrides)).eval()
    model = build_hf_model(reference, num_steps=4, provenance={})
    tokens = torch.randint(0, 256, (2, 40))
    with torch.no_grad():
        for depth in (1, 4, 16):
            expected, found = reference(tokens, depth), model(tokens, num_steps=depth).logits
            assert torch.allclose(found, expected, atol=1e-5, rtol=0), (overrides, depth)


def test_generate_gives_biosrecalls_greedy_tokens(exported, dataset, world):
    model, reference = exported
    tokenizer = AutoTokenizer.from_pretrained(world.export, trust_remote_code=True)
    eval_set = dataset.eval_set(np.arange(2))
    prompts = [eval_set.tokens[i, : eval_set.answer_start[i]].tolist() for i in (0, 7, 13, 29, 41)]
    for depth in (1, 4, 16):
        expected = [greedy_decode(reference, p, 6, depth).tokens for p in prompts]
        for prompt, tokens in zip(prompts, expected, strict=True):
            out = model.generate(torch.tensor([prompt]), num_steps=depth, max_new_tokens=6, do_sample=False)
            assert out[0, len(prompt) :].tolist() == _until_eos(tokens, model.config.eos_token_id)
        # A left-padded batch (positions, noise rows and keys follow the real tokens) gives the same.
        batch = tokenizer([tokenizer.decode(p[1:]) for p in prompts], return_tensors="pt", padding=True)
        out = model.generate(**batch, num_steps=depth, max_new_tokens=6, do_sample=False)
        for row, tokens in zip(out[:, batch.input_ids.shape[1] :].tolist(), expected, strict=True):
            assert row[: len(_until_eos(tokens, 1))] == _until_eos(tokens, 1)


def _until_eos(tokens: list[int], eos: int) -> list[int]:
    return tokens[: tokens.index(eos) + 1] if eos in tokens else tokens


def test_default_depth_is_the_runs_mean_training_depth(exported, world):
    model, _ = exported
    plan = json.loads((world.run / "config.json").read_text())["plan"]
    assert model.config.num_steps == math.floor(plan["mean_depth"] + 0.5)
    tokens = torch.tensor([[1, 5, 9, 14]])
    with torch.no_grad():
        default = model(tokens).logits
        chosen = model(tokens, num_steps=model.config.num_steps).logits
        other = model(tokens, num_steps=model.config.num_steps + 3).logits
    assert torch.equal(default, chosen) and not torch.equal(default, other)
    loss = model(tokens, labels=tokens).loss  # the usual shifted next-token loss, for fine-tuning
    assert torch.isclose(loss, torch.nn.functional.cross_entropy(default[0, :-1], tokens[0, 1:]))
    card = (world.export / "README.md").read_text()
    assert f"defaults to {model.config.num_steps}, the run's mean training depth" in card


@pytest.mark.parametrize("trust", [False, True])
def test_tokenizer_round_trip_equals_biosrecalls_ids(world, dataset, monkeypatch, trust):
    # transformers 5 asks on stdin before reading config.json's code; an empty answer means no.
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    tokenizer = AutoTokenizer.from_pretrained(world.export, trust_remote_code=trust or None)
    eval_set = dataset.eval_set()
    texts = [dataset.tokenizer.decode(row[1 : s + n].tolist()) for row, s, n in
             zip(eval_set.tokens, eval_set.answer_start, eval_set.answer_len, strict=True)]  # fmt: skip
    texts += _training_biographies(dataset)
    for text in texts:
        ids = dataset.tokenizer.encode(text).ids
        assert tokenizer(text, add_special_tokens=False).input_ids == ids
        assert tokenizer(text).input_ids == [dataset.sep_id, *ids]  # <sep> first, as in training rows
        assert tokenizer.decode(tokenizer(text).input_ids, skip_special_tokens=True) == text


def _training_biographies(dataset) -> list[str]:
    """The biographies of two training rows, as the trainer's sampler draws them, decoded."""
    from biosrecall.bios.sampler import BatchSampler

    rows = BatchSampler(dataset, 2, 128).batch(np.random.default_rng(0))
    ids = [t for t in rows.ravel().tolist() if t != dataset.pad_id]
    bounds = [i for i, t in enumerate(ids) if t == dataset.sep_id] + [len(ids)]
    pieces = [ids[a + 1 : b] for a, b in zip(bounds, bounds[1:], strict=False) if b > a + 1]
    assert len(pieces) >= 2
    return [dataset.tokenizer.decode(piece) for piece in pieces]


def test_folder_holds_a_self_contained_model_and_its_card(world):
    files = {path.name for path in world.export.iterdir()}
    assert {
        "config.json",
        "model.safetensors",
        "modeling_biosrecall.py",
        "README.md",
        "tokenizer.json",
    } <= files
    assert "generation_config.json" in files and "tokenizer_config.json" in files
    config = json.loads((world.export / "config.json").read_text())
    assert config["auto_map"]["AutoModelForCausalLM"] == "modeling_biosrecall.BiosrecallLoopedForCausalLM"
    code = (world.export / "modeling_biosrecall.py").read_text()
    assert code == TEMPLATE.read_text()
    # The modeling code and the recipe files it imports (relatively, beside it) need only torch and
    # transformers; an import inside try (the recipe's fallback to biosrecall) is one transformers skips.
    for name in ("modeling_biosrecall.py", "recipe.py", "recipe_base.py"):
        tree = ast.parse((world.export / name).read_text())
        tried = {
            id(node) for block in ast.walk(tree) if isinstance(block, ast.Try) for node in ast.walk(block)
        }
        imported = {
            (node.module if isinstance(node, ast.ImportFrom) else alias.name).split(".")[0]
            for node in ast.walk(tree)
            if isinstance(node, ast.Import | ast.ImportFrom) and id(node) not in tried
            for alias in node.names
        }
        assert imported <= {"__future__", "math", "re", "torch", "transformers"}, (name, imported)
    card = (world.export / "README.md").read_text()
    for fact in (
        "fixed_first:k0=2,switch=0.5",
        "modeled FLOPs",
        "20 fictional people",
        "| 16 |",
        "bits at K =",
    ):
        assert fact in card, fact
    assert "No recall was computed" in (world.switch_export / "README.md").read_text()


def test_checkpoint_selector_picks_the_weights(world):
    switch = AutoModelForCausalLM.from_pretrained(world.switch_export, trust_remote_code=True)
    reference, meta = load_checkpoint(RunFolder(world.run).select_checkpoint("switch")[1])
    assert switch.config.biosrecall["checkpoint"] == "switch"
    assert switch.config.biosrecall["update"] == meta["update"]
    assert torch.equal(switch.embed.weight, reference.embed.weight)


def test_existing_output_is_refused_then_replaced_with_overwrite(world, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    one_error_line(*run_cli(["export", world.run, "--out", out], capsys)[::2], "not empty", "--overwrite")
    # --overwrite replaces only an export (its config.json's biosrecall section), never the user's files.
    args = ["export", world.run, "--out", out, "--overwrite"]
    one_error_line(*run_cli(args, capsys)[::2], "replaces only a folder that export wrote")
    assert [p.name for p in out.iterdir()] == ["keep.txt"]
    (out / "keep.txt").unlink()
    assert run_cli(["export", world.run, "--out", out], capsys)[0] == 0
    code, stdout, stderr = run_cli(
        ["export", world.run, "--checkpoint", "0.5", "--out", out, "--overwrite"], capsys
    )
    assert code == 0, stderr
    assert json.loads((out / "config.json").read_text())["biosrecall"]["checkpoint"] == "0.5"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"], "no temporary folder is left behind"


def test_missing_checkpoint_is_one_error_line(world, tmp_path, capsys):
    code, _, err = run_cli(["export", world.run, "--checkpoint", "0.3", "--out", tmp_path / "x"], capsys)
    one_error_line(code, err, "no checkpoint at fraction 0.3", "0.5, 1.0, switch")
    assert not (tmp_path / "x").exists()


def test_unsupported_model_feature_is_refused(world, tmp_path, capsys, monkeypatch):
    from biosrecall.hf.export import modeling_module

    with pytest.raises(Exception, match="field dropout"):
        check_supported({**get_preset("bios-tiny").to_dict(), "dropout": 0.1})
    monkeypatch.setitem(modeling_module().SUPPORTED_CHOICES, "norm", ("pre",))
    code, _, err = run_cli(["export", world.run, "--out", tmp_path / "x"], capsys)
    one_error_line(code, err, "norm = 'sandwich' is not implemented")
    assert not (tmp_path / "x").exists()


def test_without_transformers_the_error_names_the_extra(world, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)
    code, _, err = run_cli(["export", world.run, "--out", tmp_path / "x"], capsys)
    one_error_line(code, err, "pip install 'biosrecall[hf]'")


@pytest.mark.parametrize("name", ["__init__", "export", "card", "loading", "prompts", "scoring"])
def test_every_module_imports_without_transformers(name, monkeypatch):
    """The default install (no `hf` extra) imports every biosrecall module; transformers is needed
    only when a function runs. Each module's own top-level code is run again with it blocked."""
    import importlib.util
    from pathlib import Path

    import biosrecall.hf

    monkeypatch.setitem(sys.modules, "transformers", None)
    path = Path(biosrecall.hf.__file__).with_name(f"{name}.py")
    spec = importlib.util.spec_from_file_location(f"_without_transformers_{name}", path)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)  # dataclasses look their module up
    spec.loader.exec_module(module)
