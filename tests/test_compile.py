"""`--compile`: the layers are compiled, the depth loop is not, so no depth costs a graph of its own.

    pytest -q tests/test_compile.py                 # the graph count (dynamo's eager backend): seconds
    pytest -q tests/test_compile.py -m slow         # inductor: compiled and eager training losses agree

Graphs are counted with dynamo's own counters (`unique_graphs`). The count test uses the "eager"
backend: dynamo traces, guards and recompiles exactly as under inductor, without inductor's code
generation, which takes tens of seconds on a CPU.
"""

from __future__ import annotations

import pytest
import torch
import torch._dynamo
from torch._dynamo.utils import counters

from biosrecall.model import LoopedTransformer, ModelConfig
from biosrecall.model.layers import apply_rope

TINY = ModelConfig(
    vocab_size=64, d_model=32, n_heads=2, d_mlp=64, n_prelude=1, n_block=2, n_coda=1, context_length=32
)
# Compiled (inductor, fused fp32 kernels) against eager: the same arithmetic in another order, so the
# losses of a few updates agree to float32 rounding, far inside this.
LOSS_TOLERANCE = 1e-4


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    """Every test starts with empty caches and counters (compiled code is cached per Python function,
    across models)."""
    torch._dynamo.reset()
    counters.clear()
    yield
    torch._dynamo.reset()


def _graphs() -> int:
    return counters["stats"]["unique_graphs"]


def _compiled_model(**overrides) -> LoopedTransformer:
    torch.manual_seed(0)
    model = LoopedTransformer(TINY.replace(**overrides))
    model.compile_layers(backend="eager")
    return model


def _tokens() -> torch.Tensor:
    return torch.randint(0, TINY.vocab_size, (2, 16), generator=torch.Generator().manual_seed(1))


def _train(model: LoopedTransformer, depths) -> None:
    for depth in depths:
        model(_tokens(), depth).sum().backward()


def _evaluate(model: LoopedTransformer, depths) -> None:
    """Single-depth forwards and an all-depth recall-style pass (readout at a few positions only)."""
    tokens = _tokens()
    positions = torch.zeros_like(tokens, dtype=torch.bool)
    positions[:, 5:9] = True
    with torch.no_grad():
        for depth in depths:
            model(tokens, depth)
    for _ in model.forward_all_depths(tokens, depths, positions):
        pass


@pytest.mark.parametrize("overrides", [{}, {"backprop_depth": 4}], ids=["full-backprop", "backprop-4"])
def test_no_depth_compiles_a_graph_of_its_own(overrides):
    model = _compiled_model(**overrides)
    _train(model, [1, 5])
    _evaluate(model, [1, 5])
    warm = _graphs()
    assert warm > 0  # the layers really are compiled
    _train(model, [2, 3, 8, 13, 16])
    _evaluate(model, range(1, 65))
    assert _graphs() == warm


def test_training_at_any_depth_runs_one_graph_without_breaks():
    _train(_compiled_model(), [1, 4, 16])
    # One graph serves every layer of the prelude, block and coda at every depth, unbroken.
    assert _graphs() == 1
    assert not counters["graph_break"]


def test_compiled_layers_keep_the_models_outputs_and_state_dict():
    torch.manual_seed(0)
    eager = LoopedTransformer(TINY)
    compiled = _compiled_model()
    tokens = _tokens()
    torch.testing.assert_close(compiled(tokens, 6), eager(tokens, 6), rtol=0, atol=1e-6)
    assert list(compiled.state_dict()) == list(eager.state_dict())  # checkpoints are unchanged


def test_compiled_graphs_hold_no_complex_tensors():
    """Inductor generates no code for complex arithmetic (it falls back to eager kernels), so RoPE
    must reach the graphs in reals."""
    graphs = []

    def recording_backend(graph_module, example_inputs):
        graphs.append(graph_module)
        return graph_module.forward

    torch.manual_seed(0)
    model = LoopedTransformer(TINY)
    model.compile_layers(backend=recording_backend)
    _train(model, [3])
    values = [node.meta.get("example_value") for graph in graphs for node in graph.graph.nodes]
    tensors = [value for value in values if isinstance(value, torch.Tensor)]
    assert graphs and tensors
    assert [value.dtype for value in tensors if value.dtype.is_complex] == []


def test_real_valued_rope_equals_the_complex_multiply(monkeypatch):
    torch.manual_seed(0)
    x = torch.randn(3, 11, 2, 2, 16)
    angles = torch.randn(11, 8, dtype=torch.float64) * 100
    rope = torch.stack((angles.cos().float(), angles.sin().float()), dim=-1)
    complex_form = apply_rope(x, rope)
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    torch.testing.assert_close(apply_rope(x, rope), complex_form, rtol=0, atol=0)


@pytest.mark.slow
def test_inductor_training_losses_match_eager(tmp_path):
    """The real trainer with --compile (inductor) against eager: the same loss at every update."""
    from biosrecall.bios import generate_dataset
    from biosrecall.train.config import TrainConfig
    from biosrecall.train.run_folder import RunFolder
    from biosrecall.train.trainer import train_bios

    data = generate_dataset(tmp_path / "data", people=20, seed=0)
    losses = {}
    for compile_ in (False, True):
        config = TrainConfig(
            schedule="uniform:1-6", updates=4, batch_size=2, seq_len=96, seed=0, compile=compile_,
            checkpoint_fractions=(1.0,), save_every=10**9,
        )  # fmt: skip
        run_dir = tmp_path / f"compile-{compile_}"
        train_bios(data, run_dir, config, preset="bios-tiny")
        losses[compile_] = [row["loss"] for row in RunFolder(run_dir).read_metrics()]
    assert _graphs() > 0 and not counters["graph_break"]  # inductor compiled the layers, unbroken
    assert losses[True] == pytest.approx(losses[False], abs=LOSS_TOLERANCE)
