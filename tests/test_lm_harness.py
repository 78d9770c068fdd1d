"""`biosrecall lm harness`: the looped LM as an lm-eval model. Its log-likelihoods are the model's own
NLL on the same tokens, the table has one row per task x metric x depth with values in range, the
depth changes the scores, and an unknown task is one error line before any model runs.

Offline: the tasks are the YAML files in tests/data/lm_harness (local JSONL data, paths relative to
the repository root), the model a tiny LM trained here.

    pytest -q tests/test_lm_harness.py
"""

from __future__ import annotations

import json
import math
import os
import sys
from contextlib import nullcontext
from importlib.metadata import version
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import torch
from test_lm_train import cli, write_corpus

from biosrecall.errors import BiosrecallError
from biosrecall.lm import Corpus, load_tokenizer, prepare_corpus
from biosrecall.lm.evaluate import depth_nll
from biosrecall.lm.task import train_lm
from biosrecall.model.decode import uncached_greedy
from biosrecall.train.checkpoint_files import load_checkpoint
from biosrecall.train.config import TrainConfig
from biosrecall.train.run_folder import RunFolder

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before lm-eval (and datasets) are first imported
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
pytest.importorskip("lm_eval")

from biosrecall.lm.harness import check_tasks, looped_lm, require_lm_eval, resolve_tasks  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TASKS = ROOT / "tests" / "data" / "lm_harness"
SEQ_LEN = 24
METRICS = {
    "tiny_mc": {"acc", "acc_norm"},
    "tiny_rolling": {"word_perplexity", "byte_perplexity", "bits_per_byte"},
    "tiny_gen": {"exact_match,strip"},  # a filter other than "none" is part of the name
}


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """(run folder, model, tokenizer): a tiny LM trained for a few updates."""
    root = tmp_path_factory.mktemp("lm-harness")
    corpus = Corpus([write_corpus(root / "corpus.txt", 200, seed=3)])
    data = prepare_corpus(corpus, root / "data", vocab_size=300, val_fraction=0.05, seed=0).path
    config = TrainConfig(schedule="uniform:1-16", updates=16, batch_size=8, seq_len=SEQ_LEN, lr=3e-3, seed=0,
                         device="cpu")  # fmt: skip
    train_lm(data, root / "run", config, preset="lm-tiny")
    model, _ = load_checkpoint(RunFolder(root / "run").select_checkpoint("final")[1])
    return root / "run", model, load_tokenizer(data / "tokenizer.json")


def requests(*args) -> list[SimpleNamespace]:
    return [SimpleNamespace(args=a) for a in args]


def test_loglikelihoods_are_the_models_own_nll(trained):
    _, model, tokenizer = trained
    text = "the river and the city of depth."
    ids = tokenizer.encode(text)
    assert len(ids) < SEQ_LEN
    for depth in (1, 5):
        lm = looped_lm(model, tokenizer, depth, max_length=SEQ_LEN, batch_size=2)
        # The text after an end-of-document token: exactly what `lm eval` scores per target token.
        window = np.array([[tokenizer.eod_id, *ids]])
        nll = depth_nll(model, [window], [depth], torch.device("cpu"), nullcontext)["nll"].item()
        (rolling,) = lm.loglikelihood_rolling(requests((text,)))
        assert rolling == pytest.approx(-nll * len(ids), rel=1e-5)
        # context / continuation: log p(continuation tokens | eod + context) from a plain forward
        context, continuation = "the river and", " the city"
        tokens = [tokenizer.eod_id, *tokenizer.encode(context + continuation)]
        count = len(tokenizer.encode(context + continuation)) - len(tokenizer.encode(context))
        with torch.no_grad():
            logprobs = torch.log_softmax(model(torch.tensor([tokens[:-1]]), depth)[0], dim=-1)
        expected = sum(float(logprobs[i - 1, tokens[i]]) for i in range(len(tokens) - count, len(tokens)))
        batch = lm.loglikelihood(requests((context, continuation), (context + " ", "the city"), ("", text)))
        assert batch[0][0] == pytest.approx(expected, rel=1e-5)
        assert batch[1][0] == pytest.approx(expected, rel=1e-5)  # a trailing space moves to the continuation
        assert batch[2][0] == pytest.approx(rolling, rel=1e-5)  # empty context: after end-of-document
    greedy = [tokenizer.eod_id, *tokenizer.encode("the river")]
    with torch.no_grad():
        best = int(model(torch.tensor([greedy]), 3)[0, -1].argmax())
    lm = looped_lm(model, tokenizer, 3, max_length=SEQ_LEN)
    assert lm.loglikelihood(requests(("the river", tokenizer.decode([best]))))[0][1] is True


def test_generation_is_greedy_decoding_at_the_depth_cut_at_a_stop_string(trained):
    _, model, tokenizer = trained
    prompt = "the river and the"
    ids = [tokenizer.eod_id, *tokenizer.encode(prompt)]
    for depth in (2, 7):
        expected = uncached_greedy(model, ids, 6, depth)
        if tokenizer.eod_id in expected:
            expected = expected[: expected.index(tokenizer.eod_id)]
        text = tokenizer.decode(expected)
        lm = looped_lm(model, tokenizer, depth, max_length=SEQ_LEN)
        (free,) = lm.generate_until(requests((prompt, {"until": [], "max_gen_toks": 6})))
        assert free == text
        assert len(text.strip()) >= 2, text
        stop = text.strip()[:2]  # a stop string that occurs in the generation
        (cut,) = lm.generate_until(requests((prompt, {"until": ["\n\n", stop], "max_gen_toks": 6})))
        assert cut == text[: text.index(stop)]


def test_long_texts_are_scored_in_windows_predicting_every_token_once(trained):
    _, model, tokenizer = trained
    text = " ".join(["the model of the river and the city recall depth"] * 6)
    ids = tokenizer.encode(text)
    lm = looped_lm(model, tokenizer, 2, max_length=SEQ_LEN, batch_size=3)
    pairs = lm.rolling_pairs(ids)
    assert len(pairs) == math.ceil(len(ids) / SEQ_LEN) > 2
    assert [t for _, continuation in pairs for t in continuation] == ids
    assert all(len(context) + len(continuation) <= SEQ_LEN + 1 for context, continuation in pairs)
    (rolling,) = lm.loglikelihood_rolling(requests((text,)))
    assert rolling == pytest.approx(sum(lp for lp, _ in lm.score_pairs(pairs)), rel=1e-6)
    # Every window but the first predicts with as much context as fits (lm-eval's rule).
    assert all(len(context) + len(continuation) == SEQ_LEN + 1 for context, continuation in pairs[1:])


def test_harness_cli_writes_one_row_per_task_metric_and_depth(trained, capsys, monkeypatch):
    run, model, tokenizer = trained
    monkeypatch.chdir(ROOT)  # the task YAML files name their data relative to the repository root
    args = ["lm", "harness", run, "--tasks", "tiny_mc,tiny_rolling", "--tasks", "tiny_gen"]
    code, out, err = cli(capsys, *args, "--include-path", TASKS, "--depths", "1,6", "--device", "cpu")
    assert code == 0, err
    assert "K=6 tiny_mc acc" in out
    table = pd.read_parquet(run / "eval" / "harness.parquet")
    assert table.equals(pd.read_csv(run / "eval" / "harness.csv", dtype={"checkpoint": str}))
    expected = {
        (task, metric, depth) for task, metrics in METRICS.items() for metric in metrics for depth in (1, 6)
    }
    assert (
        len(table)
        == len(expected)
        == len(set(zip(table["task"], table["metric"], table["depth"], strict=True)))
    )
    assert set(zip(table["task"], table["metric"], table["depth"], strict=True)) == expected
    assert (table["checkpoint"] == "1.0").all() and (table["run"] == run.name).all()
    scores = table.set_index(["task", "metric", "depth"])["value"]
    for task, metric in [("tiny_mc", "acc"), ("tiny_mc", "acc_norm"), ("tiny_gen", "exact_match,strip")]:
        assert all(0 <= scores[task, metric, d] <= 1 for d in (1, 6))
    assert all(scores["tiny_rolling", "bits_per_byte", d] > 0 for d in (1, 6))
    assert scores["tiny_rolling", "bits_per_byte", 1] != scores["tiny_rolling", "bits_per_byte", 6]
    # lm-eval's bits per byte from our log-likelihoods: -sum(log p) / sum(bytes) / ln 2
    texts = [json.loads(line)["text"] for line in (TASKS / "tiny_rolling.jsonl").read_text().splitlines()]
    for depth in (1, 6):
        logprobs = looped_lm(model, tokenizer, depth, SEQ_LEN).loglikelihood_rolling(
            requests(*[(t,) for t in texts])
        )
        bits = -sum(logprobs) / sum(len(t.encode("utf-8")) for t in texts) / math.log(2)
        assert scores["tiny_rolling", "bits_per_byte", depth] == pytest.approx(bits, rel=1e-6)
    # multiple choice: accuracy of the argmax of log p(" " + choice | question), lm-eval's delimiter
    docs = [json.loads(line) for line in (TASKS / "tiny_mc.jsonl").read_text().splitlines()]
    for depth in (1, 6):
        lm = looped_lm(model, tokenizer, depth, SEQ_LEN)
        right = [
            int(np.argmax([lp for lp, _ in lm.loglikelihood(requests(*[(d["question"], " " + c) for c in d["choices"]]))]))
            == d["answer"]
            for d in docs
        ]  # fmt: skip
        assert scores["tiny_mc", "acc", depth] == pytest.approx(np.mean(right))
    record = json.loads((run / "eval" / "harness.json").read_text())
    assert record["lm_eval_version"] == version("lm_eval") and record["limit"] is None
    assert set(record["task_configs"]) == set(METRICS) and record["depths"] == [1, 6]


def test_unknown_task_is_refused_by_name():
    manager, tasks = resolve_tasks(["tiny_mc", "tiny_gen"], TASKS)  # the folder alone: no full index
    assert tasks == ["tiny_mc", "tiny_gen"] and set(manager.all_tasks) == set(METRICS)
    with pytest.raises(BiosrecallError, match=r"unknown lm-eval task\(s\) nope, nada \("):
        check_tasks(["tiny_mc", "nope", "nada"], manager)


@pytest.mark.slow  # indexing lm-eval's own ~15,000 task files takes 10-30 s
def test_unknown_task_is_one_error_line_before_any_model_runs(tmp_path, capsys):
    missing_run = tmp_path / "no-such-run"  # never read: the tasks are checked first
    args = ["lm", "harness", missing_run, "--tasks", "tiny_mc,hellaswag_typo", "--include-path", TASKS]
    code, _, err = cli(capsys, *args)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, err
    assert lines[0].startswith("error: unknown lm-eval task(s) hellaswag_typo ("), err
    assert not missing_run.exists()


def test_missing_extra_names_the_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "lm_eval", None)  # what an install without the extra sees
    with pytest.raises(BiosrecallError, match=r"pip install 'biosrecall\[eval\]'"):
        require_lm_eval()
