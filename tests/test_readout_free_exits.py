"""Readout-free exit criteria (`latent:eps`, `accel:eps`): their definitions, the all-depth pass against
the KV-cached decoder on the same prompts, per-token exit in `ask` and `lm eval`, whole-query exit in
`recall-curve --exit`, and one-line refusals of a bad eps.

    pytest -q tests/test_readout_free_exits.py
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import torch
from test_cli_recall import _one_error_line, run_cli, write_real_run
from test_decode import run_ask, tiny_model
from test_lm_exit import WINDOWS
from test_lm_train import cli

from biosrecall.errors import BiosrecallError
from biosrecall.eval.exits import (
    DEFAULT_SWEEPS,
    Accel,
    Fixed,
    Latent,
    StateTrail,
    exit_judge,
    parse_exits,
)
from biosrecall.eval.scoring import exit_depths, query_stats_by_depth
from biosrecall.model.decode import CachedDecoder, greedy_decode, teacher_forced

MAX_DEPTH = 12
# A variant whose state settles with depth (the default one's wanders), so thresholds separate tokens.
SETTLING = {"injection": "add", "norm": "pre"}
PROMPTS = [[1, 7, 3, 12, 5, 9], [4, 4, 18], [9, 8, 7, 6, 5, 4, 3, 2, 30], [2, 11], [33, 1, 20, 14, 6]]


def test_parser_reads_latent_and_accel_and_sweeps_a_bare_name():
    assert parse_exits("latent:0.03,accel:1e-2") == [Latent(0.03), Accel(0.01)]
    assert parse_exits("latent") == [Latent(eps) for eps in DEFAULT_SWEEPS["latent"]]
    assert parse_exits("accel") == [Accel(eps) for eps in DEFAULT_SWEEPS["accel"]]
    assert [c.spec for c in parse_exits("latent:0.030,accel:0.5")] == ["latent:0.03", "accel:0.5"]


@pytest.mark.parametrize(
    "text, needle",
    [
        ("latent:-0.03", "positive"),
        ("accel:-1", "positive"),
        ("latent:nan", "positive"),
        ("accel:inf", "positive"),
        ("latent:-inf", "positive"),
        ("latent:0.0\u0663", "must be a positive number, got"),  # an Arabic-Indic digit: ASCII only
        ("accel:1_0", "must be a positive number, got"),
    ],
)
def test_a_bad_eps_is_refused_in_one_line(text, needle):
    with pytest.raises(BiosrecallError, match=needle) as info:
        parse_exits(text)
    assert "\n" not in str(info.value)


def test_state_trail_follows_its_definitions():
    trail, states = StateTrail(), [[4.0, 0.0], [4.0, 3.0], [4.0, 4.0], [4.0, 4.0], [4.0, 4.0]]
    seen = [trail.observe(torch.tensor([state])) for state in states]
    latent = [float(s.latent[0]) for s in seen]
    accel = [float(s.accel[0]) for s in seen]
    assert math.isinf(latent[0]) and latent[1] == pytest.approx(3 / 5) and latent[3] == 0.0
    # second differences |s_k - 2 s_{k-1} + s_{k-2}| / |s_k| at depths 3, 4, 5: 2/sqrt(32), 1/sqrt(32), 0
    assert all(math.isinf(a) for a in accel[:3])
    assert accel[3] == pytest.approx(2 / math.sqrt(32)) and accel[4] == pytest.approx(1 / math.sqrt(32))
    assert Latent(0.1).holds(4, seen[3]).tolist() == [True]
    assert Accel(0.2).holds(5, seen[4]).tolist() == [True] and Accel(0.2).holds(4, seen[3]).tolist() == [
        False
    ]


def _eval_set(prompts):
    """Each prompt's last token is its one checked (answer-predicting) position."""
    width = max(map(len, prompts)) + 1
    tokens = np.zeros((len(prompts), width), dtype=np.int64)
    for row, prompt in enumerate(prompts):
        tokens[row, : len(prompt)] = prompt
    starts = np.array([len(p) for p in prompts])
    return SimpleNamespace(tokens=tokens, answer_start=starts, answer_len=np.ones(len(prompts), dtype=int))


class Recorder:
    """A judge that reads the state, records its statistics and never stops the token."""

    reads_state = True

    def __init__(self) -> None:
        self.trail, self.latent, self.accel = StateTrail(), [], []

    def __call__(self, depth: int, state: torch.Tensor) -> bool:
        stats = self.trail.observe(state)
        self.latent.append(float(stats.latent))
        self.accel.append(float(stats.accel))
        return False


@pytest.fixture(scope="module")
def passes():
    """The all-depth pass's statistics of PROMPTS (batched, padded) and the decoder's, prompt by prompt."""
    model = tiny_model(**SETTLING)
    stats = query_stats_by_depth(
        model, _eval_set(PROMPTS), MAX_DEPTH, [Latent(0.1)], batch_size=3, progress=False
    )
    decoded = []
    for prompt in PROMPTS:
        recorder = Recorder()
        greedy_decode(model, prompt, 1, MAX_DEPTH, lambda r=recorder: r)
        decoded.append(recorder)
    return model, stats, decoded


def test_all_depth_pass_equals_the_cached_decoder(passes):
    _, stats, decoded = passes
    for row, recorder in enumerate(decoded):
        # the decoder asks at every depth but the last, where every token stops anyway
        np.testing.assert_allclose(stats.latent[: MAX_DEPTH - 1, row], recorder.latent, rtol=1e-9)
        np.testing.assert_allclose(stats.accel[: MAX_DEPTH - 1, row], recorder.accel, rtol=1e-9)


@pytest.mark.parametrize("kind", [Latent, Accel])
def test_exit_depths_of_the_pass_equal_the_decoders(passes, kind):
    model, stats, _ = passes
    values = np.unique(getattr(stats, kind.name)[: MAX_DEPTH - 1])
    finite = values[np.isfinite(values)]
    # Halfway between neighbouring values, so rounding cannot put a value on either side.
    picks = np.linspace(0, len(finite) - 2, 6).astype(int)
    thresholds = (finite[picks] + finite[picks + 1]) / 2
    spread = False
    for eps in thresholds:
        whole_query = exit_depths(kind(eps), stats, MAX_DEPTH)
        per_token = [
            greedy_decode(model, prompt, 1, MAX_DEPTH, lambda e=eps: exit_judge(kind(e))).depths[0]
            for prompt in PROMPTS
        ]
        assert whole_query.tolist() == per_token
        spread |= len(set(per_token)) > 1
    assert spread, "some threshold must stop the prompts at different depths"


def test_a_readout_free_token_is_read_out_once_at_its_exit_depth():
    model, prompt = tiny_model(**SETTLING), PROMPTS[0]
    decoders = [CachedDecoder(model, MAX_DEPTH) for _ in range(2)]
    with torch.no_grad():
        for decoder in decoders:
            decoder.prefill(prompt[:-1])
        counted = decoders[0]._readout
        calls = []
        decoders[0]._readout = lambda *a, **kw: calls.append(1) or counted(*a, **kw)
        logits, depth = decoders[0].step(prompt[-1], exit_judge(Latent(0.2)))
        fixed_logits, fixed_depth = decoders[1].step(prompt[-1], exit_judge(Fixed(depth)))
    assert 1 < depth < MAX_DEPTH and len(calls) == 1 and fixed_depth == depth
    torch.testing.assert_close(logits, fixed_logits, rtol=0, atol=1e-12)
    torch.testing.assert_close(decoders[0].coda, decoders[1].coda, rtol=0, atol=1e-12)


@pytest.mark.parametrize("criterion", [Latent(0.2), Accel(0.01)])
def test_teacher_forced_rows_side_by_side_equal_each_row_alone(criterion):
    model = tiny_model(**SETTLING)
    steps = list(teacher_forced(model, WINDOWS, MAX_DEPTH, lambda: exit_judge(criterion)))
    depths = torch.stack([d for _, d in steps], dim=1)
    assert depths.min() < depths.max() <= MAX_DEPTH
    for row, tokens in enumerate(WINDOWS.tolist()):
        decoder = CachedDecoder(model, MAX_DEPTH)
        with torch.no_grad():
            alone = [decoder.step(token, exit_judge(criterion)) for token in tokens]
        assert [d for _, d in alone] == depths[row].tolist()
        for (logits, _), (batched, _) in zip(alone, steps, strict=True):
            torch.testing.assert_close(batched[row], logits, rtol=0, atol=1e-9)


def test_recall_curve_and_ask_take_readout_free_criteria(tmp_path, capsys):
    run, dataset, _ = write_real_run(tmp_path, people=6)
    out = tmp_path / "out"
    args = [run, "--max-depth", 4, "--out", out, "--device", "cpu", "--exit", "latent:0.5,accel,kl:1e-3"]
    code, _, stderr = run_cli(args, capsys)
    assert code == 0, stderr
    frontier = pd.read_parquet(out / "exit_frontier.parquet").set_index("criterion")
    assert {"latent", "accel"} <= set(frontier["kind"])
    assert (frontier.loc[[c for c in frontier.index if c.startswith("accel")], "mean_depth"] == 4).all()
    name = str(dataset.people["name"][0])
    ask = [run, f"{name} was born in", "--max-depth", 3, "--max-new-tokens", 2, "--device", "cpu"]
    code, stdout, stderr = run_ask([*ask, "--exit", "latent:0.5"], capsys)
    assert code == 0, stderr
    assert all(1 <= int(line.rsplit("depth", 1)[1]) <= 3 for line in stdout.strip().splitlines()[1:])


@pytest.mark.parametrize("spec", ["latent:-0.03", "accel:nan", "latent:inf", "accel:-1e-3"])
def test_cli_refuses_a_bad_eps_in_one_line_and_writes_nothing(tmp_path, capsys, spec):
    out = tmp_path / "out"
    _one_error_line(*run_cli([tmp_path / "run", "--out", out, "--exit", spec], capsys)[::2], "positive")
    _one_error_line(*run_ask([tmp_path / "run", "born", "--exit", spec], capsys)[::2], "positive")
    code, _, err = cli(capsys, "lm", "eval", tmp_path / "run", "--exit", spec)
    _one_error_line(code, err, "positive")
    assert not out.exists() and not (tmp_path / "run").exists()
