"""Validation NLL with per-token exit (`biosrecall lm eval --exit`): teacher forcing through the
KV-cached decoder, `fixed:K` against the fixed-depth NLL, `lm compare`'s NLL-against-depth figure, and
one-line errors for bad criteria.

    pytest -q tests/test_lm_exit.py
"""

from __future__ import annotations

import pandas as pd
import pytest
import torch
from test_decode import tiny_model
from test_lm_train import cli, train, write_corpus

from biosrecall.eval.exits import KL, Entropy, Fixed, Stable, exit_judge
from biosrecall.lm import Corpus, prepare_corpus
from biosrecall.model.decode import CachedDecoder, teacher_forced

WINDOWS = torch.tensor([[1, 7, 3, 12, 5, 9, 2, 30], [4, 4, 18, 0, 22, 7, 7, 1], [9, 8, 7, 6, 5, 4, 3, 2]])


@pytest.mark.parametrize("depth", [1, 3])
@pytest.mark.parametrize("judged", [False, True])
def test_teacher_forcing_at_a_fixed_depth_equals_the_full_forward(depth, judged):
    model = tiny_model()
    new_judge = (lambda: exit_judge(Fixed(depth))) if judged else None
    steps = list(teacher_forced(model, WINDOWS, depth, new_judge))
    logits = torch.stack([step_logits for step_logits, _ in steps], dim=1)
    with torch.no_grad():
        expected = model(WINDOWS, depth)
    torch.testing.assert_close(logits, expected, rtol=0, atol=1e-9)
    assert all((depths == depth).all() for _, depths in steps)


@pytest.mark.parametrize("criterion", [KL(1.0), Stable(1), Entropy(2.0)])
def test_rows_side_by_side_equal_each_row_decoded_alone(criterion):
    """Batched teacher forcing is the decoder's per-token semantics, row by row; and the rows really
    do exit at different depths, so rows that stopped ride along without disturbing the others."""
    model = tiny_model()
    steps = list(teacher_forced(model, WINDOWS, 10, lambda: exit_judge(criterion)))
    depths = torch.stack([d for _, d in steps], dim=1)
    assert depths.min() < depths.max() <= 10
    for row, tokens in enumerate(WINDOWS.tolist()):
        decoder = CachedDecoder(model, 10)
        with torch.no_grad():
            alone = [decoder.step(token, exit_judge(criterion)) for token in tokens]
        assert [d for _, d in alone] == depths[row].tolist()
        for (logits, _), (batched, _) in zip(alone, steps, strict=True):
            torch.testing.assert_close(batched[row], logits, rtol=0, atol=1e-9)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    root = tmp_path_factory.mktemp("lm-exit")
    corpus = Corpus([write_corpus(root / "corpus.txt", 200, seed=2)])
    data = prepare_corpus(corpus, root / "data", vocab_size=300, val_fraction=0.05, seed=0).path
    return root, data


def test_eval_with_exit_end_to_end(trained, capsys):
    root, data = trained
    run = root / "uniform"
    train(capsys, data, run, "--schedule", "uniform:1-16", "--updates", "12")
    args = ["lm", "eval", run, "--max-depth", "6", "--max-sequences", "3", "--batch-size", "2"]
    code, out, err = cli(
        capsys, *args, "--exit", "fixed:3,kl:1e-2", "--exit", "stable:2", "--val-sequences", "3"
    )
    assert code == 0, err
    assert "exit kl:0.01: NLL" in out and "mean depth" in out
    fixed = pd.read_parquet(run / "eval" / "nll.parquet").set_index("depth")["nll"]
    exits = pd.read_parquet(run / "eval" / "nll_exit.parquet")
    assert exits.equals(pd.read_csv(run / "eval" / "nll_exit.csv", dtype={"checkpoint": str}))
    rows = exits.set_index("criterion")
    assert rows.loc["fixed:3", "nll"] == pytest.approx(fixed.loc[3], abs=1e-5)
    assert rows.loc["fixed:3", "mean_depth"] == 3 and rows.loc["fixed:3", "kind"] == "fixed"
    for k in range(1, 7):  # the baseline on the same windows is the fixed-depth table
        assert rows.loc[f"K={k}", "nll"] == pytest.approx(fixed.loc[k], abs=1e-6)
    for spec in ("kl:0.01", "stable:2"):
        assert 1 <= rows.loc[spec, "mean_depth"] <= rows.loc[spec, "p95_depth"] <= 6
    assert (exits["eval_tokens"] == exits["eval_tokens"].iloc[0]).all()
    code, out, err = cli(capsys, "lm", "compare", run, "--reference", run, "--out", root / "fig")
    assert code == 0, err
    assert (root / "fig" / "nll_vs_exit_depth.png").stat().st_size > 0
    compared = pd.read_csv(root / "fig" / "lm_exit.csv")
    assert set(compared["criterion"]) == set(exits["criterion"]) and set(compared["run"]) == {str(run)}


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (("--exit", "bogus:1"), "unknown exit criterion"),
        (("--exit", "kl:-1"), "positive number"),
        (("--exit", "stable:0"), "at least 1"),
        (("--exit", "oracle"), "cannot serve"),
        (("--val-sequences", "4"), "give --exit too"),
    ],
)
def test_bad_exit_is_one_error_line_and_writes_nothing(tmp_path, capsys, extra, message):
    code, _, err = cli(capsys, "lm", "eval", tmp_path / "missing-run", *extra)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], err
    assert not (tmp_path / "missing-run").exists()


def test_eval_serves_the_ouro_gate_where_its_cdf_reaches_q(trained, capsys):
    """`--exit cdf:q` on an ouro-gate LM run reads the gate the recipe trained, per token: q = 1 is never
    reached before the cap (every token at depth 6: the fixed-depth NLL), a low q exits earlier; a run
    whose recipe trains no gate is refused in one line, with nothing written."""
    root, data = trained
    run = root / "ouro"
    train(capsys, data, run, "--schedule", "uniform:1-6", "--updates", "6", "--recipe", "ouro-gate")
    args = ["lm", "eval", run, "--max-depth", "6", "--max-sequences", "2", "--batch-size", "2"]
    code, out, err = cli(capsys, *args, "--exit", "cdf:0.3,cdf:1", "--val-sequences", "2")
    assert code == 0, err
    rows = pd.read_parquet(run / "eval" / "nll_exit.parquet").set_index("criterion")
    assert (rows.loc[["cdf:0.3", "cdf:1"], "kind"] == "cdf").all()
    assert rows.loc["cdf:1", "mean_depth"] == 6
    assert rows.loc["cdf:1", "nll"] == pytest.approx(rows.loc["K=6", "nll"], abs=1e-6)
    assert 1 <= rows.loc["cdf:0.3", "mean_depth"] < 6
    plain = root / "plain-for-cdf"
    train(capsys, data, plain, "--schedule", "fixed:2", "--updates", "2")
    code, _, err = cli(capsys, "lm", "eval", plain, "--max-depth", "4", "--exit", "cdf:0.5")
    assert code == 2 and err.startswith("error: ") and err.count("\n") == 1, err
    assert "recipe baseline" in err and not (plain / "eval").exists()
