"""Standard-transformer baselines (the bios-*-std presets): matched to their looped presets by the one
FLOP and parameter account, one depth, trained by the same trainer and scored by the same evaluator.

    pytest -q tests/test_baselines.py
"""

from __future__ import annotations

import pytest
import torch
from harness import run_cli
from test_flops import CPU_SDPA

from biosrecall.bios import generate_dataset, load_dataset
from biosrecall.cli import main
from biosrecall.compute.flops import (
    forward_flops_per_token,
    match_ratios,
    param_counts,
    update_flops,
)
from biosrecall.errors import BiosrecallError
from biosrecall.eval import scoring
from biosrecall.eval.curves import score_runs
from biosrecall.model import LoopedTransformer, get_preset
from biosrecall.model.presets import BASELINE_DEPTH, BASELINES, standard_transformer
from biosrecall.train.checkpoint_files import load_checkpoint
from biosrecall.train.config import TrainConfig
from biosrecall.train.run_folder import RunFolder
from biosrecall.train.trainer import train_bios

TOLERANCE = 0.06
"""How far from 1 a baseline's matched ratio may be: whole layers of these widths allow no closer (the
looped model's adapter, 2 d^2, has no layer to match it); each is also the closest layer count."""
DOCUMENTED = [  # the ratios `biosrecall.model.presets` states, to three places
    ("bios-tiny-std-params", "parameters", 0.950),
    ("bios-tiny-std-params", "non_embedding", 0.938),
    ("bios-tiny-std-flops", "train_flops", 0.964),
    ("bios-tiny-std-flops", "forward_flops", 0.959),
    ("bios-cpu-std-params", "parameters", 0.973),
    ("bios-cpu-std-params", "non_embedding", 0.951),
    ("bios-cpu-std-flops", "train_flops", 0.967),
    ("bios-cpu-std-flops", "forward_flops", 0.964),
    ("bios-cpu-std-flops", "non_embedding", 1.902),
]
SHAPE = ("d_model", "n_heads", "d_mlp", "mlp", "vocab_size", "context_length", "position", "norm")
MATCHES = {"parameters": "parameters", "flops": "train_flops"}
"""What each kind of baseline matches: the key of `match_ratios` it is sized by."""


def closest_layers(looped, match: str, depth: int = BASELINE_DEPTH, most: int = 64) -> int:
    """The layer count (1..most) of the standard transformer whose `match` ratio ("parameters" or
    "flops") to `looped` is closest to 1: the layers a baseline preset should have."""

    def distance(layers: int) -> float:
        return abs(match_ratios(standard_transformer(looped, layers), looped, depth)[MATCHES[match]] - 1)

    return min(range(1, most + 1), key=distance)


@pytest.mark.parametrize("name", BASELINES)
def test_a_baseline_matches_its_looped_preset_within_the_tolerance(name):
    looped, match, layers = BASELINES[name]
    baseline, reference = get_preset(name), get_preset(looped)
    assert [getattr(baseline, f) for f in SHAPE] == [getattr(reference, f) for f in SHAPE]
    assert not baseline.recurrent
    assert (baseline.n_prelude, baseline.n_block, baseline.n_coda) == (layers, 0, 0)
    assert abs(match_ratios(baseline, reference)[MATCHES[match]] - 1) <= TOLERANCE
    assert closest_layers(reference, match) == layers
    # The trainer gives bios-* presets the dataset's vocabulary: the match holds at any of them.
    for vocab in (300, 2137, 8192):
        resized = match_ratios(baseline.replace(vocab_size=vocab), reference.replace(vocab_size=vocab))
        assert abs(resized[MATCHES[match]] - 1) <= TOLERANCE, vocab


@pytest.mark.parametrize(("name", "key", "ratio"), DOCUMENTED)
def test_the_documented_ratios(name, key, ratio):
    looped = BASELINES[name][0]
    assert match_ratios(get_preset(name), get_preset(looped))[key] == pytest.approx(ratio, abs=5e-4)


def _counted(fn) -> int:
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False, custom_mapping=CPU_SDPA) as counter:
        fn()
    return counter.get_total_flops()


def test_the_account_prices_a_baseline_exactly_and_every_depth_is_its_one_depth():
    cfg = get_preset("bios-tiny-std-flops", vocab_size=97, context_length=32)
    torch.manual_seed(0)
    model = LoopedTransformer(cfg)
    assert model.num_parameters() == param_counts(cfg)["total"]
    tokens = torch.randint(0, cfg.vocab_size, (2, 24))
    with torch.no_grad():
        assert _counted(lambda: model(tokens, 1)) == 48 * forward_flops_per_token(cfg, 24).at_depth(1)
        logits = dict(model.forward_all_depths(tokens, [1, 2, 7]))
        assert torch.equal(logits[1], logits[7]) and torch.equal(model(tokens, 5), logits[1])
    trained = _counted(lambda: model(tokens, 1).float().pow(2).mean().backward())
    assert trained == update_flops(cfg, 1, 48, 24)


def test_no_recurrent_block_means_no_injection():
    with pytest.raises(
        BiosrecallError, match="n_block 0 .* needs injection none and recipe baseline, got injection 'concat'"
    ):
        get_preset("bios-tiny", n_block=0)
    assert get_preset("bios-tiny", n_block=0, injection="none").recurrent is False


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    return generate_dataset(tmp_path_factory.mktemp("baselines") / "bios", people=20, seed=4)


def test_a_baseline_trains_and_is_scored_at_its_one_depth(data_dir, tmp_path, monkeypatch):
    config = TrainConfig(schedule="fixed:1", updates=6, batch_size=4, seq_len=128, lr=1e-2, seed=2)
    train_bios(data_dir, tmp_path / "std", config, preset="bios-tiny-std-params")
    checkpoint = RunFolder(tmp_path / "std").fraction_checkpoints()[1.0]
    model, meta = load_checkpoint(checkpoint)
    assert meta["model_config"]["n_block"] == 0 and meta["schedule"] == "fixed:1"
    scored = []
    real = scoring.exact_by_depth
    monkeypatch.setattr(scoring, "exact_by_depth", lambda *a, **k: scored.append(a[2]) or real(*a, **k))
    table = score_runs([tmp_path / "std"], "final", max_depth=8, device="cpu").recall
    assert scored == [1]  # one pass at its one depth, not eight
    whole = table[table["attribute"] == "all"].sort_values("depth")
    assert list(whole["depth"]) == list(range(1, 9)) and whole["bits"].nunique() == 1
    # The repeated row is what the model really answers at every depth.
    eval_set = load_dataset(data_dir).eval_set()
    assert (real(model, eval_set, 8) == real(model, eval_set, 1)[0]).all()


def test_recall_curve_and_flops_show_the_baseline(data_dir, tmp_path, capsys):
    run = tmp_path / "std"
    args = ["train", "--data", str(data_dir), "--out", str(run), "--preset", "bios-tiny-std-flops",
            "--schedule", "fixed:1", "--exposures", "1", "--batch-size", "4", "--seq-len", "128", "--quiet"]  # fmt: skip
    assert run_cli(args, capsys)[0] == 0
    code, err = run_cli(["recall-curve", str(run), "--out", str(tmp_path / "rc"), "--max-depth", "4"], capsys)
    assert code == 0, err
    assert (tmp_path / "rc" / "recall_curve.png").is_file()
    main(["flops", "--preset", "bios-cpu-std-flops", "--preset", "bios-tiny-std-params"])
    out = capsys.readouterr().out
    assert "layers 6 (standard transformer, no recurrent block)" in out
    assert "baseline of bios-cpu, matched in training FLOPs per token at K = 4 (6 layers)" in out
    assert "training FLOPs per token x0.967" in out and "schedules: none" in out
    main(["flops", "--help"])
    listed = "".join(capsys.readouterr().out.split())  # help wraps inside names, after their hyphens
    assert all(name in listed for name in BASELINES)
