"""The recurrent state's RMS over depth (`biosrecall.eval.state_norms`): it measures the states the
model's own iterations return (one trajectory, or a call per depth for a recipe told K), counts only
the masked positions, pools batches, and is cached beside the checkpoint so that a folder without
weights still serves it.

    pytest -q tests/test_state_norms.py
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from biosrecall.errors import BiosrecallError
from biosrecall.eval.state_norms import bios_state_norms, cached_state_norms, growth, state_rms
from biosrecall.model import LoopedTransformer, get_preset
from biosrecall.model.recipes import get_recipe

VOCAB = 61


def tiny_model(recipe: str) -> LoopedTransformer:
    """The recipe on the tiny preset, its weights moved off their (zero or identity) init."""
    torch.manual_seed(0)
    config = get_preset(
        "bios-tiny", vocab_size=VOCAB, **{**get_recipe(recipe).model_defaults, "recipe": recipe}
    )
    model = LoopedTransformer(config).eval()
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn_like(param), alpha=0.1)
    return model


def tokens(batch=3, length=12, seed=1) -> torch.Tensor:
    return torch.randint(0, VOCAB, (batch, length), generator=torch.Generator().manual_seed(seed))


def observed_rms(model, ids, depth: int) -> float:
    """The RMS of the last state a `depth`-iteration forward hands its observers."""
    seen = []
    with torch.no_grad(), model.observing_states(seen.append):
        model(ids, depth)
    return float(seen[-1].double().pow(2).mean().sqrt())


@pytest.mark.parametrize("recipe", ["baseline", "parcae", "loopformer"])
def test_each_depth_is_the_state_a_call_of_that_depth_ends_in(recipe):
    model, ids = tiny_model(recipe), tokens()
    rms = state_rms(model, [(ids, None)], 6)
    assert rms.shape == (6,) and rms.dtype == np.float64
    for depth in (1, 2, 6):
        assert rms[depth - 1] == pytest.approx(observed_rms(model, ids, depth), rel=1e-5)
    assert len(set(np.round(rms, 6))) > 1  # the state moves with depth: the test can tell depths apart


def test_only_masked_positions_count_and_batches_pool():
    model, ids = tiny_model("baseline"), tokens(batch=4)
    whole = state_rms(model, [(ids, None)], 4)
    split = state_rms(model, [(ids[:1], None), (ids[1:], None)], 4)
    np.testing.assert_allclose(split, whole, rtol=1e-6)
    # Padding appended after the sequences changes nothing once it is masked out (causal attention).
    padded = torch.cat([ids, torch.zeros(4, 5, dtype=ids.dtype)], dim=1)
    mask = torch.zeros_like(padded, dtype=torch.bool)
    mask[:, : ids.shape[1]] = True
    np.testing.assert_allclose(state_rms(model, [(padded, mask)], 4), whole, rtol=1e-5)
    assert not np.allclose(state_rms(model, [(padded, None)], 4), whole, rtol=1e-5)
    with pytest.raises(BiosrecallError, match="no token positions"):
        state_rms(model, [(ids, torch.zeros_like(ids, dtype=torch.bool))], 2)


def test_growth_is_the_deep_over_the_shallow_rms():
    import pandas as pd

    table = pd.DataFrame({"depth": [1, 2, 64], "state_rms": [2.0, 3.0, 5.0]})
    assert growth(table) == 2.5
    assert np.isnan(growth(table.iloc[:2]))


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    from biosrecall.bios import generate_dataset
    from biosrecall.train.config import TrainConfig
    from biosrecall.train.trainer import train_bios

    root = tmp_path_factory.mktemp("norms")
    generate_dataset(root / "data", people=20, seed=0)
    config = TrainConfig(batch_size=4, budget_of="fixed:2:4", seed=0, checkpoint_fractions=(1.0,))
    train_bios(root / "data", root / "run", config, preset="bios-tiny")
    return root / "run"


def test_the_table_is_cached_beside_the_checkpoint_and_served_without_weights(trained, tmp_path):
    import shutil

    from biosrecall.train.run_folder import RunFolder, state_norm_cache_file

    run = tmp_path / "run"
    shutil.copytree(trained, run)
    (deep,) = bios_state_norms(run, "final", max_depth=8, device="cpu").values()
    assert list(deep["depth"]) == list(range(1, 9)) and (deep["state_rms"] > 0).all()
    checkpoint = RunFolder(run).checkpoint_dir(1.0)
    assert state_norm_cache_file(checkpoint).is_file()
    (checkpoint / "model.safetensors").unlink()  # an archive keeps meta.json and the cached tables

    # Served from the cache (the weights are gone), a shallower request cut from the deeper table.
    (shallow,) = bios_state_norms(run, "final", max_depth=4, device="cpu").values()
    np.testing.assert_allclose(shallow["state_rms"], deep["state_rms"][:4])

    def measure():
        raise AssertionError("measured again")

    with pytest.raises(AssertionError, match="measured again"):  # other tokens, or deeper: a miss
        cached_state_norms(checkpoint, measure, {"rows": 3}, 4, "cpu")
    with pytest.raises(BiosrecallError):  # deeper than cached: measured, and the weights are gone
        bios_state_norms(run, "final", max_depth=9, device="cpu")


def test_recall_curve_state_norms_caches_and_prints_each_checkpoint(trained, tmp_path, capsys):
    import shutil

    from harness import run_cli

    from biosrecall.train.run_folder import RunFolder, state_norm_cache_file

    run = tmp_path / "run"
    shutil.copytree(trained, run)
    argv = ["recall-curve", str(run), "--max-depth", "4", "--device", "cpu", "--out", str(tmp_path / "rc")]
    code, err = run_cli([*argv, "--state-norms"], capsys)
    assert code == 0, err
    cached = pd.read_parquet(state_norm_cache_file(RunFolder(run).checkpoint_dir(1.0)))
    assert list(cached["depth"]) == [1, 2, 3, 4]
    assert (cached["tokens"] > 0).all() and (cached["state_rms"] > 0).all()


def test_lm_eval_state_norms_on_the_first_validation_windows(tmp_path, capsys):
    from test_lm_train import cli, train, write_corpus

    from biosrecall.lm import Corpus, prepare_corpus
    from biosrecall.lm.evaluate import evaluate_state_norms
    from biosrecall.train.run_folder import RunFolder, state_norm_cache_file

    corpus = Corpus([write_corpus(tmp_path / "corpus.txt", 120, seed=2)])
    data = prepare_corpus(corpus, tmp_path / "data", vocab_size=300, val_fraction=0.1, seed=0).path
    run = tmp_path / "run"
    train(capsys, data, run, "--schedule", "fixed:2", "--updates", "2")
    code, out, err = cli(
        capsys, "lm", "eval", run, "--max-depth", "5", "--max-sequences", "2", "--state-norms"
    )
    assert code == 0, err
    assert "state RMS K=1:" in out and "K=5 / K=1:" in out
    (label,) = RunFolder(run).select_checkpoints("final")
    table = pd.read_parquet(state_norm_cache_file(RunFolder(run).select_checkpoints("final")[label]))
    assert list(table["depth"]) == [1, 2, 3, 4, 5]
    # The windows are the corpus's first validation windows: the library call reads the same table.
    (again,) = evaluate_state_norms(run, max_depth=3, device="cpu").values()
    np.testing.assert_allclose(again["state_rms"], table["state_rms"][:3])
