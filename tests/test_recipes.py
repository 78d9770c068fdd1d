"""Every recipe (the six built in and the example outside one) keeps the promises the model makes:
one definition of an iteration, read the same by every path.

    pytest -q tests/test_recipes.py

Per recipe: `forward_all_depths` equals `forward` at every depth; cached greedy decoding equals
uncached `forward`; the modeled FLOPs of a forward and backward at K = 4 (and 12, past huginn's
backprop depth) match torch's FlopCounterMode within 5%; the parameter account matches the model; a run trained on the tiny preset
resumes bit-exactly; its export loads in transformers and gives biosrecall's logits at K = 1, 4, 16.
The untrained models are perturbed (`tiny_model`), so no recipe's own path hides behind a zero init.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from torch.utils.flop_counter import FlopCounterMode, sdpa_backward_flop_count, sdpa_flop_count

from biosrecall.cli import main
from biosrecall.compute.flops import param_counts, train_flops_per_token
from biosrecall.model import LoopedTransformer, get_preset
from biosrecall.model.decode import gate_cdf_judges, greedy_decode, uncached_greedy
from biosrecall.model.recipes import get_recipe, load_recipe_module, recipe_file, recipe_names
from biosrecall.train.checkpoint_files import load_checkpoint
from biosrecall.train.config import TrainConfig
from biosrecall.train.run_folder import RunFolder
from biosrecall.train.stops import Interrupted
from biosrecall.train.trainer import train_bios

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "my_recipe.py"
RECIPES = [*recipe_names(), "my-recipe"]
_ATEN = torch.ops.aten
CPU_SDPA = {  # FlopCounterMode has no entry for the CPU flash kernel (see tests/test_flops.py)
    _ATEN._scaled_dot_product_flash_attention_for_cpu: lambda q, k, v, *a, **kw: sdpa_flop_count(q, k, v),
    _ATEN._scaled_dot_product_flash_attention_for_cpu_backward: (
        lambda grad, q, k, v, *a, **kw: sdpa_backward_flop_count(grad, q, k, v)
    ),
}


@pytest.fixture(scope="module", autouse=True)
def example_recipe():
    return load_recipe_module(EXAMPLE)


def tiny_model(recipe: str, **overrides) -> LoopedTransformer:
    """The recipe on the tiny preset, every parameter then moved by seeded noise: a recipe's extra
    parameters start at zero or at the identity (LoopFormer's modulation, the example's gate), where it
    would compute what baseline computes and a test of its own path would pass whatever that path did."""
    torch.manual_seed(0)
    defaults = get_recipe(recipe).model_defaults
    config = get_preset("bios-tiny", vocab_size=61, **{**defaults, **overrides, "recipe": recipe})
    model = LoopedTransformer(config).eval()
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn_like(param), alpha=0.1)
    return model


def tokens(batch=2, length=20, seed=1) -> torch.Tensor:
    return torch.randint(0, 61, (batch, length), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("recipe", RECIPES)
def test_forward_all_depths_equals_forward_at_every_depth(recipe):
    model, ids = tiny_model(recipe), tokens()
    depths = [1, 2, 3, 5, 8, 16]
    with torch.no_grad():
        swept = dict(model.forward_all_depths(ids, depths))
        for depth in depths:
            torch.testing.assert_close(swept[depth], model(ids, depth), rtol=0, atol=1e-5)
        if not model.recipe.prefix_consistent:  # told K: depth 8 of a 16-deep call is another function
            states = {k: (state, rope) for k, state, rope in model.gradient_states(ids, 16)}
            read_inside = model.head_logits(model.final_hidden(*states[8]))
            assert (read_inside - swept[8]).abs().max() > 1e-3


@pytest.mark.parametrize("recipe", RECIPES)
def test_cached_greedy_decoding_equals_uncached_forward(recipe):
    model, prompt = tiny_model(recipe), tokens(1, 9)[0].tolist()
    for depth in (1, 4):
        cached = greedy_decode(model, prompt, max_new_tokens=6, max_depth=depth)
        assert cached.tokens == uncached_greedy(model, prompt, 6, depth)
        assert cached.depths == [depth] * 6


@pytest.mark.parametrize("depth", [4, 12])  # 12: past huginn's backprop depth of 8 (truncated backprop)
@pytest.mark.parametrize("recipe", RECIPES)
def test_modeled_training_flops_match_the_flop_counter(recipe, depth):
    model, ids = tiny_model(recipe).train(), tokens(2, 24)
    with FlopCounterMode(display=False, custom_mapping=CPU_SDPA) as counter:
        model(ids, depth, targets=ids.roll(-1, 1)).backward()
    modeled = ids.numel() * train_flops_per_token(model.config, depth, seq_len=24)
    assert abs(modeled / counter.get_total_flops() - 1) <= 0.05
    assert model.num_parameters() == param_counts(model.config)["total"]


@pytest.mark.parametrize("recipe", RECIPES)
def test_one_iteration_is_defined_once_by_the_recipe(recipe, monkeypatch):
    """Forward, the cached decoder and activation checkpointing all run the recipe's step, K times."""
    model, ids = tiny_model(recipe), tokens(1, 6)
    seen = []
    step = type(model.recipe).step

    def counted(self, model, state, inject, block, index, depth):
        seen.append((index, depth))
        return step(self, model, state, inject, block, index, depth)

    monkeypatch.setattr(type(model.recipe), "step", counted)
    with torch.no_grad():
        model(ids, 3)
    greedy_decode(model, ids[0].tolist(), max_new_tokens=1, max_depth=3)
    model.activation_checkpointing = True
    model(ids, 3, targets=ids).backward()
    forward, prefill, token = (
        [(i, 3) for i in (1, 2, 3)],
        [(i, 3) for i in (1, 2, 3)],
        [(i, 3) for i in (1, 2, 3)],
    )
    assert seen[:9] == forward + prefill + token
    assert len(seen) >= 9 + 3 + 3  # the checkpointed iterations run again in backward


def test_state_readers_observe_what_the_step_returns(monkeypatch):
    """latent, accel and the gates read `observing_states`: the recipe's state after each iteration,
    even when the step does more after the block (a hook on the last block layer would miss that)."""
    model, ids = tiny_model("baseline"), tokens(1, 6)
    step = type(model.recipe).step
    monkeypatch.setattr(type(model.recipe), "step", lambda self, *args: 0.5 * step(self, *args))
    seen = []
    with torch.no_grad():
        with model.observing_states(seen.append):
            for _ in model.forward_all_depths(ids, [1, 2, 3]):
                pass
        states = [state for _, state, _ in model.gradient_states(ids, 3)]
    assert len(seen) == 3 and all(torch.equal(a, b) for a, b in zip(seen, states, strict=True))
    assert not model._state_observers  # closed: later passes are not observed


def test_ouro_gate_exits_where_its_cdf_reaches_q():
    model, prompt = tiny_model("ouro-gate"), tokens(1, 9)[0].tolist()
    with torch.no_grad():
        model.exit_gate_head.bias.fill_(-1.0)  # lambda near sigmoid(-1) = 0.27 at every iteration
        model.exit_gate_head.weight.zero_()
    lam = torch.sigmoid(torch.tensor(-1.0)).item()
    first = next(t for t in range(1, 17) if 1 - (1 - lam) ** t >= 0.6)  # CDF 1 - (1 - lambda)^t
    decoded = greedy_decode(model, prompt, 3, max_depth=16, new_judge=gate_cdf_judges(model, 0.6))
    assert decoded.depths == [first] * 3
    with pytest.raises(Exception, match="trains no exit gate"):
        gate_cdf_judges(tiny_model("baseline"), 0.5)


def test_parcae_transition_contracts_whatever_the_weights():
    model = tiny_model("parcae")
    with torch.no_grad():
        model.parcae_log_a.uniform_(-5, 5)
        model.parcae_delta.uniform_(-5, 5)
    decay = model.recipe.transition(model)
    assert bool(((decay >= 0) & (decay < 1)).all())  # exp(-x), x > 0: may round to 0, never reach 1


def test_parcae_trains_its_dynamics_without_weight_decay():
    """As its authors train it: A (log A), Delta and B take no weight decay; the block's matrices do."""
    from biosrecall.train.optim import build_optimizer

    model = tiny_model("parcae")
    decayed, kept = build_optimizer(model, TrainConfig(weight_decay=0.1)).param_groups
    assert decayed["weight_decay"] == 0.1 and kept["weight_decay"] == 0.0
    dynamics = {id(p) for p in (model.parcae_log_a, model.parcae_delta, model.parcae_b.weight)}
    assert dynamics <= {id(p) for p in kept["params"]}
    assert id(model.block[0].attn.qkv.weight) in {id(p) for p in decayed["params"]}


def test_ouro_exit_distribution_and_loss_stay_finite_when_the_gate_saturates():
    """p(t) = lambda_t prod_{j<t} (1 - lambda_j), the last depth taking the rest, sums to 1; a gate at
    exactly 0 or 1 (log 0 in the entropy) still gives a finite loss and finite gradients."""
    from biosrecall.model.recipes.ouro_gate import exit_distribution

    lam = torch.tensor([[0.2, 1.0, 0.0], [0.5, 0.3, 0.0], [0.9, 0.5, 0.0]])  # [depth, token]
    p = exit_distribution(lam)
    expected = torch.tensor([[0.2, 1.0, 0.0], [0.8 * 0.5, 0.0, 0.0], [0.8 * 0.5, 0.0, 1.0]])
    torch.testing.assert_close(p, expected)
    torch.testing.assert_close(p.sum(0), torch.ones(3))
    model, ids = tiny_model("ouro-gate").train(), tokens(2, 12)
    with torch.no_grad():
        model.exit_gate_head.weight.zero_()
        model.exit_gate_head.bias.fill_(200.0)  # sigmoid rounds to exactly 1: p = (1, 0, 0, 0)
    loss = model(ids, 4, targets=ids.roll(-1, 1))
    loss.backward()
    assert bool(torch.isfinite(loss))
    assert all(bool(torch.isfinite(q.grad).all()) for q in model.parameters() if q.grad is not None)


# ---- runs: training, resuming and exporting on the tiny preset ---------------------------------------


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("recipes") / "data"
    main(["generate", "--out", str(out), "--seed", "5", "--people", "30", "--pool-size", "employer=64"])
    return out


def run_config(recipe: str, **changes) -> TrainConfig:
    module = str(EXAMPLE) if recipe == "my-recipe" else None
    settings = dict(schedule="uniform:1-6", updates=6, batch_size=4, seed=2, save_every=3)
    return TrainConfig(
        **{**settings, "checkpoint_fractions": (1.0,), "recipe": recipe, "recipe_module": module, **changes}
    )


class StopAt:
    """A reporter that asks the run to stop (as Ctrl-C does) after update `at`."""

    def __init__(self, at: int) -> None:
        self.at = at

    def start(self, total, first) -> None: ...

    def message(self, text) -> None: ...

    def update(self, row) -> None:
        if row["update"] == self.at:
            os.kill(os.getpid(), signal.SIGINT)

    def close(self) -> None: ...


def final_weights(run: Path) -> dict[str, torch.Tensor]:
    return load_file(str(RunFolder(run).fraction_checkpoints()[1.0] / "model.safetensors"))


@pytest.fixture(scope="module")
def runs(data, tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("recipe-runs")
    made = {}
    for recipe in RECIPES:
        made[recipe] = root / recipe
        train_bios(data, made[recipe], run_config(recipe), preset="bios-tiny")
    return made


@pytest.mark.parametrize("recipe", RECIPES)
def test_a_resumed_run_is_bit_exact(recipe, data, runs, tmp_path):
    cut = tmp_path / "cut"
    with pytest.raises(Interrupted):
        train_bios(data, cut, run_config(recipe), preset="bios-tiny", reporter=StopAt(3))
    train_bios(data, cut, run_config(recipe), preset="bios-tiny", resume=True)
    whole, resumed = final_weights(runs[recipe]), final_weights(cut)
    assert whole.keys() == resumed.keys()
    assert all(torch.equal(whole[name], resumed[name]) for name in whole)
    losses = [[row["loss"] for row in RunFolder(run).read_metrics()] for run in (runs[recipe], cut)]
    assert losses[0] == losses[1]


@pytest.mark.parametrize("recipe", RECIPES)
def test_the_run_records_its_recipe_and_the_export_round_trip_is_exact(recipe, runs, tmp_path):
    pytest.importorskip("transformers")
    from transformers import AutoModelForCausalLM

    from biosrecall.hf.export import export_run

    record = RunFolder(runs[recipe]).read_config()
    assert record["model_config"].get("recipe", "baseline") == recipe
    # A baseline run's records read as before recipes existed, so archived runs compare equal.
    assert ("recipe" in record["model_config"]) == (recipe != "baseline")
    assert ("recipe" in record["train_config"]) == (recipe != "baseline")
    out = export_run(runs[recipe], tmp_path / f"export_{recipe.replace('-', '_')}", num_steps=4)
    assert (out / "recipe.py").read_bytes() == recipe_file(get_recipe(recipe)).read_bytes()
    exported = AutoModelForCausalLM.from_pretrained(out, trust_remote_code=True, local_files_only=True).eval()
    assert exported.config.recipe == recipe
    model, _ = load_checkpoint(RunFolder(runs[recipe]).fraction_checkpoints()[1.0])
    ids = tokens(2, 30)
    with torch.no_grad():
        for depth in (1, 4, 16):
            torch.testing.assert_close(
                exported(input_ids=ids, num_steps=depth).logits, model(ids, depth), rtol=0, atol=1e-5
            )


@pytest.mark.parametrize("recipe", ["parcae", "loopformer"])
def test_state_exits_in_a_depth_sweep_need_one_trajectory(recipe, bios_dataset):
    """latent and accel watch one pass's states; a recipe told K runs a pass per depth, so it is refused."""
    from biosrecall.errors import BiosrecallError
    from biosrecall.eval.sweep import answer_stats_by_depth

    torch.manual_seed(0)
    config = get_preset("bios-tiny", vocab_size=bios_dataset.vocab_size, **get_recipe(recipe).model_defaults)
    model = LoopedTransformer(config.replace(recipe=recipe)).eval()
    eval_set = bios_dataset.eval_set(np.arange(2))
    if recipe == "loopformer":
        with pytest.raises(BiosrecallError, match="recipe loopformer runs a pass per depth"):
            answer_stats_by_depth(model, eval_set, 3, states=True)
    else:
        stats = answer_stats_by_depth(model, eval_set, 3, states=True)
        assert stats is not None


def test_recall_curve_serves_the_ouro_gate_where_its_cdf_reaches_q(runs, tmp_path, capsys):
    """`--exit cdf:q` reads the gate the recipe trained: deeper exits for a larger q, never past the cap."""
    import pandas as pd
    from hf_fixtures import one_error_line, run_cli

    out = tmp_path / "curve"
    argv = [
        "recall-curve",
        runs["ouro-gate"],
        "--checkpoint",
        "final",
        "--max-depth",
        "6",
        "--exit",
        "cdf",
        "--out",
        out,
    ]
    code, _, err = run_cli(argv, capsys)
    assert code == 0, err
    frontier = pd.read_csv(out / "exit_frontier.csv").set_index("criterion")
    depths = [frontier.loc[f"cdf:{q:g}", "mean_depth"] for q in (0.3, 0.5, 0.7, 0.9)]
    assert depths == sorted(depths) and depths[0] >= 1 and depths[-1] <= 6
    code, _, err = run_cli([*argv[:-4], "--exit", "cdf:0.5", "--out", tmp_path / "other"], capsys)
    assert code == 0, err
    argv[1] = runs["baseline"]
    code, _, err = run_cli([*argv[:-4], "--exit", "cdf:0.5", "--out", tmp_path / "base"], capsys)
    one_error_line(code, err, "cdf:q reads the exit gate a recipe trains", "recipe baseline")
    assert not (tmp_path / "base").exists()
    code, _, err = run_cli([*argv[:-4], "--exit", "cdf:1.5", "--out", tmp_path / "base"], capsys)
    one_error_line(code, err, "the exit CDF level q must lie in (0, 1]")
