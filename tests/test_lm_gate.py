"""The learned exit gate of a language-model run: `gate train` fits it on training-shard windows and
calibrates it on the validation split, and `lm eval --exit gate:DELTA` serves with it.

    pytest -q tests/test_lm_gate.py
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from test_lm_train import cli, train, write_corpus

from biosrecall.eval.gate import exit_depths_at
from biosrecall.lm import Corpus, prepare_corpus
from biosrecall.lm.gate import split_windows
from biosrecall.train.run_folder import GATE_CALIBRATION_FILE, GATE_RECORD_FILE, RunFolder, seq_len_of

MAX_DEPTH = 6


@pytest.fixture(scope="module")
def gated(tmp_path_factory):
    """A tiny uniform LM run with its final checkpoint's gate fitted (the capsys of one test)."""
    root = tmp_path_factory.mktemp("lm-gate")
    corpus = Corpus([write_corpus(root / "corpus.txt", 300, seed=3)])
    data = prepare_corpus(corpus, root / "data", vocab_size=300, val_fraction=0.2, seed=0).path
    return root, data


def test_gate_fits_on_training_windows_and_is_calibrated_on_validation(gated, capsys):
    root, data = gated
    run = root / "uniform"
    train(capsys, data, run, "--schedule", "uniform:1-16", "--updates", "12")
    code, out, err = cli(capsys, "gate", "train", run, "--max-depth", MAX_DEPTH, "--confidence", "0.9")
    assert code == 0, err
    folder = RunFolder(run).gate_dir("1.0")
    record = json.loads((folder / GATE_RECORD_FILE).read_text())
    assert record["task"] == "lm" and 1 <= record["reference_depth"] <= MAX_DEPTH
    assert record["fit"]["split"] == "train" and record["calibration"]["split"] == "validation"
    seq_len = seq_len_of(RunFolder(run).read_config())
    validation = sum(len(rows) for rows in split_windows(data, seq_len, "validation", 10**6, 8))
    assert record["calibration"]["queries"] == validation, "one position per validation window"
    with np.load(folder / GATE_CALIBRATION_FILE) as arrays:
        scores, exact = arrays["scores"], arrays["exact"]
    reference = record["reference_depth"]
    for row in record["calibration"]["deltas"]:  # the chosen threshold's loss, recomputed
        depths = exit_depths_at(scores, row["threshold"], reference)
        lost = int((exact[reference - 1] & ~exact[depths - 1, np.arange(exact.shape[1])]).sum())
        assert lost == row["losses"] and lost / validation <= row["delta"]
        if row["threshold"] is not None:
            assert row["p_value"] <= 1 - record["confidence"] + 1e-12
    assert "reference depth" in out

    code, out, err = cli(capsys, "lm", "eval", run, "--max-depth", MAX_DEPTH, "--max-sequences", "2",
                         "--batch-size", "2", "--exit", "gate:0.2,kl:1e-2", "--val-sequences", "2")  # fmt: skip
    assert code == 0, err
    exits = pd.read_parquet(run / "eval" / "nll_exit.parquet").set_index("criterion")
    assert exits.loc["gate:0.2", "kind"] == "gate"
    assert 1 <= exits.loc["gate:0.2", "mean_depth"] <= reference


def test_gate_delta_on_an_lm_run_without_a_gate_names_the_command(gated, capsys):
    root, data = gated
    run = root / "plain"
    train(capsys, data, run, "--schedule", "fixed:2", "--updates", "4")
    code, _, err = cli(capsys, "lm", "eval", run, "--max-depth", 4, "--exit", "gate:0.1")
    assert code == 2 and err.startswith("error: ") and "biosrecall gate train" in err, err
    assert not (run / "eval").exists()
