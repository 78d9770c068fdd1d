"""The Hugging Face Trainer example end to end, as its docstring tells a client to run it: export bioS
text, train a tiny GPT-2 with `transformers.Trainer` for a few dozen updates, score it with
`recall-curve --hf-model`. Everything is built locally; nothing is downloaded.

    pytest -q tests/test_hf_trainer_example.py
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "hf_trainer_gpt2.py"
BIOSRECALL = [sys.executable, "-m", "biosrecall"]
TINY = ["--layers", "2", "--width", "32", "--heads", "2", "--steps", "30", "--batch-size", "8"]
TINY += ["--block-size", "64", "--lr", "3e-3", "--seed", "0"]


def run(argv, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    env["HF_HOME"] = str(cwd / "hf-home")  # the datasets cache and anything else stays in the test's folder
    return subprocess.run(
        [str(a) for a in argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=900
    )


def test_without_its_extras_the_example_says_which_to_install(tmp_path, monkeypatch, capsys):
    """One `error:` line naming the missing extra and the install command, exit 2, nothing written."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("hf_trainer_gpt2", EXAMPLE)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    found = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "datasets" else found(name, *a)
    )
    argv = ["--data", tmp_path / "data", "--text", tmp_path / "text", "--out", tmp_path / "model"]
    code = example.main([str(a) for a in argv])
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(lines) == 1, lines
    assert (
        lines[0].startswith("error: ") and "datasets extra" in lines[0] and "no module datasets" in lines[0]
    )
    assert 'pip install "biosrecall[hf,datasets]"' in lines[0]
    assert not (tmp_path / "model").exists()


@pytest.mark.slow
def test_trainer_example_trains_saves_and_is_scored(tmp_path):
    pytest.importorskip("transformers")
    pytest.importorskip("datasets")
    pytest.importorskip("accelerate")  # transformers.Trainer refuses to start without it
    made = run([*BIOSRECALL, "generate", "--out", "data", "--people", "12", "--export-text", "jsonl",
                "--text-out", "text", "--exposures", "10"], tmp_path)  # fmt: skip
    assert made.returncode == 0, made.stderr
    trained = run(
        [sys.executable, EXAMPLE, "--data", "data", "--text", "text", "--out", "model", *TINY], tmp_path
    )
    assert trained.returncode == 0, trained.stderr
    assert "for 30 updates" in trained.stdout
    assert "biosrecall recall-curve --hf-model model --data data --out recall-model" in trained.stdout
    # it learned something: below the loss of a uniform guess over the vocabulary
    vocab = json.loads((tmp_path / "data" / "manifest.json").read_text())["tokenizer"]["vocab_size"]
    loss = float(trained.stdout.split("final training loss ")[1].split()[0])
    assert loss < math.log(vocab)
    config = json.loads((tmp_path / "model" / "config.json").read_text())
    assert (config["model_type"], config["n_layer"], config["n_embd"]) == ("gpt2", 2, 32)
    assert config["vocab_size"] == vocab
    # the dataset's own word-level vocabulary, not a GPT-2 byte-level one
    dataset_vocab = json.loads((tmp_path / "data" / "tokenizer.json").read_text())["model"]["vocab"]
    model_vocab = json.loads((tmp_path / "model" / "tokenizer.json").read_text())["model"]["vocab"]
    assert model_vocab == dataset_vocab
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary left over

    scored = run(
        [*BIOSRECALL, "recall-curve", "--hf-model", "model", "--data", "data", "--out", "recall"], tmp_path
    )
    assert scored.returncode == 0, scored.stderr
    import pandas as pd

    table = pd.read_csv(tmp_path / "recall" / "recall_curve.csv")
    # one depth (GPT-2 has no depth argument), six attributes and the whole person
    assert sorted(table["attribute"]) == sorted(
        ["birth_city", "birth_day", "birth_month", "university", "major", "employer", "all"]
    )
    assert (
        set(table["depth"]) == {1} and set(table["run"]) == {"model"} and set(table["schedule"]) == {"gpt2"}
    )
    whole = table[table["attribute"] == "all"].iloc[0]
    total_bits = json.loads((tmp_path / "data" / "manifest.json").read_text())["total_bits"]
    assert whole["ceiling_bits"] == pytest.approx(total_bits)
    assert 0.0 <= whole["bits"] <= total_bits


def test_trainer_example_refuses_bad_input_with_one_line(tmp_path):
    (tmp_path / "data").mkdir()
    refused = run([sys.executable, EXAMPLE, "--data", "data", "--text", "text", "--out", "model"], tmp_path)
    assert refused.returncode == 2
    assert refused.stderr.strip().splitlines() == [
        "error: --data data holds no tokenizer.json: give a bioS dataset folder"
    ]
    assert not (tmp_path / "model").exists()
