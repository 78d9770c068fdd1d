"""`biosrecall recall-curve --hf-model`: any Hugging Face causal LM scored on bioS with recall-curve's
exact-match rule, its own tokenizer, and recall-curve's outputs; bad input is one error line, exit 2.

    pytest -q tests/test_hf_scoring.py
"""

from __future__ import annotations

import shutil
import sys

import pandas as pd
import pytest
from hf_fixtures import hf_world, one_error_line, run_cli

pytest.importorskip("transformers")

from biosrecall.hf.prompts import EncodedRows, EvalTexts  # noqa: E402
from biosrecall.hf.scoring import MAX_EXTRA_TOKENS, GreedyJudge  # noqa: E402


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    return hf_world(tmp_path_factory)


def test_scores_of_the_export_equal_recall_curve_of_the_run(world, tmp_path, capsys):
    """The strong test: the same exact-match table, bit for bit, from two different code paths (one
    all-depth pass over biosrecall token rows; prompts re-encoded by the exported tokenizer, one
    transformers forward per depth, greedy answers judged as text)."""
    runs_out, hf_out = tmp_path / "run", tmp_path / "hf"
    args = ["--checkpoint", "final", "--max-depth", 4, "--device", "cpu", "--out", runs_out]
    code, _, err = run_cli(["recall-curve", world.run, *args], capsys)
    assert code == 0, err
    hf_args = ["--data", world.data, "--depths", "1,2,4", "--device", "cpu", "--out", hf_out]
    code, out, err = run_cli(["recall-curve", "--hf-model", world.export, *hf_args], capsys)
    assert code == 0, err
    expected = pd.read_parquet(runs_out / "recall_curve.parquet").query("depth != 3").reset_index(drop=True)
    found = pd.read_parquet(hf_out / "recall_curve.parquet")
    pd.testing.assert_frame_equal(found, expected, check_exact=True)
    whole = found[found["attribute"] == "all"]
    assert ((whole["exact"] > 0.1) & (whole["exact"] < 0.9)).all(), "a meaningful mix of right and wrong"
    assert (whole["bits"] > 0).any()
    assert "recalled bits per person" in out and "K=4" in out
    for suffix in ("csv", "png", "pdf"):
        assert (hf_out / f"recall_curve.{suffix}").stat().st_size > 0


def test_an_export_scored_by_default_gets_its_runs_depths_and_mean(world, tmp_path, capsys):
    """Without --depths both paths score every depth 1..--max-depth by one rule: the same table and
    the same printed summary, so one model has one "mean K<=16"."""
    runs_out, hf_out = tmp_path / "run", tmp_path / "hf"
    common = ["--max-depth", 5, "--device", "cpu"]
    code, run_printed, err = run_cli(["recall-curve", world.run, "--checkpoint", "final", *common,
                                      "--out", runs_out], capsys)  # fmt: skip
    assert code == 0, err
    code, hf_printed, err = run_cli(["recall-curve", "--hf-model", world.export, "--data", world.data,
                                     *common, "--out", hf_out], capsys)  # fmt: skip
    assert code == 0, err
    expected = pd.read_parquet(runs_out / "recall_curve.parquet")
    found = pd.read_parquet(hf_out / "recall_curve.parquet")
    assert sorted(found["depth"].unique()) == [1, 2, 3, 4, 5]
    pd.testing.assert_frame_equal(found, expected, check_exact=True)

    def summary(printed):
        return [line for line in printed.splitlines() if "wrote" not in line]

    assert "mean K<=16" in hf_printed and summary(hf_printed) == summary(run_printed)


def test_a_non_looped_model_is_scored_at_one_depth(world, tmp_path, capsys):
    code, out, err = run_cli(
        ["recall-curve", "--hf-model", world.gpt2, "--data", world.data, "--out", tmp_path], capsys
    )
    assert code == 0, err
    table = pd.read_parquet(tmp_path / "recall_curve.parquet")
    assert set(table["depth"]) == {1} and len(table) == 7  # six attributes and "all"
    assert (
        set(table["run"]) == {"gpt2"}
        and set(table["schedule"]) == {"gpt2"}
        and set(table["checkpoint"]) == {"hf"}
    )
    whole = table[table["attribute"] == "all"].iloc[0]
    assert whole["ceiling_bits"] > 30 and whole["threshold"] == 4
    assert (tmp_path / "recall_curve.png").is_file() and "K=1" in out


def test_prompts_and_answers_as_text_and_in_another_tokenizer(world):
    """Eval rows decode to the dataset's prompt and value; a byte-level BPE encodes each answer (often
    in several tokens) after its prompt so that decoding them in context gives the answer back."""
    from transformers import AutoTokenizer

    from biosrecall.bios import ATTRIBUTES, load_dataset
    from biosrecall.hf.prompts import continuation_text, encode_rows, eval_texts

    dataset = load_dataset(world.data)
    eval_set = dataset.eval_set()
    texts = eval_texts(dataset, eval_set)
    for row in (0, 37, len(texts.answers) - 1):
        person, attribute, template = (int(eval_set.person[row]), ATTRIBUTES[eval_set.attribute[row]],
                                       int(eval_set.template[row]))  # fmt: skip
        name, value = dataset.people.loc[person, "name"], dataset.people.loc[person, attribute]
        prompt = dataset.manifest["templates"]["eval"][attribute][template].replace("{name}", name)
        assert (texts.prompts[row], texts.answers[row]) == (prompt, f" {value}")
    tokenizer = AutoTokenizer.from_pretrained(world.gpt2)
    rows = encode_rows(tokenizer, texts)
    assert max(len(ids) for ids in rows.answer_ids) > 1
    for prompt, answer, text in zip(rows.prompt_ids, rows.answer_ids, texts.answers, strict=True):
        assert continuation_text(tokenizer, prompt, answer) == text


class PieceTokenizer:
    """Token id -> text piece; decoding joins the pieces (enough for the greedy judge)."""

    pieces = {0: "<p>", 1: " Brandi", 2: "borough", 3: " Brandiborough", 4: " Bran", 5: ".", 6: "x", 7: ""}

    def decode(self, ids, skip_special_tokens=False):
        return "".join(self.pieces[i] for i in ids)


def judge_of(answer_ids) -> GreedyJudge:
    texts = EvalTexts(prompts=["The birthplace is"], answers=[" Brandiborough"])
    return GreedyJudge(PieceTokenizer(), texts, EncodedRows(prompt_ids=[[0]], answer_ids=[answer_ids]))


def never(path):
    raise AssertionError("greedy decoding should not have needed another token")


@pytest.mark.parametrize(
    ("answer_ids", "choice", "continuation", "exact"),
    [
        ([3], [3], None, True),  # the answer's own token
        ([3], [6], None, False),  # a wrong first token, nothing to continue
        ([3], [1], [2], True),  # another tokenization of the same text, spelled out greedily
        ([3], [1], [5], False),  # ... that then goes astray
        ([3], [4], [], False),  # ... that runs into the end of the context
        ([1, 2], [1, 2], None, True),  # a two-token answer, both right
        ([1, 2], [1, 6], None, False),  # the second token wrong
        ([3], [1], [7] * 100, False),  # a prefix that never grows: capped
    ],
)
def test_greedy_answers_are_judged_as_text(answer_ids, choice, continuation, exact):
    calls = []

    def extend(path):
        if continuation is None:
            never(path)
        calls.append(list(path))
        return continuation[len(calls) - 1] if len(calls) <= len(continuation) else None

    assert judge_of(answer_ids).exact(0, choice, extend) is exact
    assert len(calls) <= len(answer_ids) + MAX_EXTRA_TOKENS


def test_mode_errors(world, tmp_path, capsys):
    cases = [
        (["recall-curve", world.run, "--hf-model", world.export, "--data", world.data], "mutually exclusive"),
        (["recall-curve"], "give run folders"),
        (["recall-curve", "--hf-model", world.export], "needs --data"),
        (["recall-curve", "--hf-model", world.export, "--data", world.data, "--checkpoint", "final"],
         "--checkpoint applies to runs"),
        (["recall-curve", world.run, "--depths", "1,2"], "--depths applies to --hf-model only"),
        (["recall-curve", "--hf-model", world.gpt2, "--data", world.data, "--depths", "1,2"], "needs --depth-arg"),
        (["recall-curve", "--hf-model", world.gpt2, "--data", world.data, "--depth-arg", "num_steps"],
         "takes no argument of that name"),
        (["recall-curve", "--hf-model", world.export, "--data", world.data, "--depths", "1,x"], "--depths takes"),
        (["recall-curve", "--hf-model", world.export, "--data", world.data, "--depths", "1,2", "--max-depth", "4"],
         "not both"),
        (["recall-curve", "--hf-model", world.gpt2, "--data", world.data, "--max-depth", "4"], "needs --depth-arg"),
    ]  # fmt: skip
    for argv, needle in cases:
        one_error_line(*run_cli([*argv, "--out", tmp_path / "out"], capsys)[::2], needle)
    assert not (tmp_path / "out").exists()


def test_a_folder_that_is_not_a_causal_lm(world, tmp_path, capsys):
    from transformers import ViTConfig

    empty = tmp_path / "empty"
    empty.mkdir()
    ViTConfig(
        hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32
    ).save_pretrained(tmp_path / "vit")
    for folder, needle in (
        (empty, "no config.json"),
        (tmp_path / "vit", "ViTConfig"),
        (tmp_path / "nowhere", "not found"),
    ):
        argv = ["recall-curve", "--hf-model", folder, "--data", world.data, "--out", tmp_path / "out"]
        one_error_line(*run_cli(argv, capsys)[::2], needle)


def test_a_tokenizer_that_cannot_encode_a_bios_word(world, tmp_path, capsys):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    folder = tmp_path / "small-vocab"
    shutil.copytree(world.gpt2, folder)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (folder / name).unlink()
    words = Tokenizer(models.WordLevel({"<unk>": 0, "was": 1, "born": 2, "in": 3}, unk_token="<unk>"))
    words.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    PreTrainedTokenizerFast(tokenizer_object=words, unk_token="<unk>").save_pretrained(folder)
    argv = ["recall-curve", "--hf-model", folder, "--data", world.data, "--out", tmp_path / "out"]
    line = one_error_line(*run_cli(argv, capsys)[::2], "cannot encode the bioS word")
    assert line.split("word ")[1].split(";")[0].strip("'") not in ("was", "born", "in")


def test_foreign_code_needs_trust_and_another_dataset_is_refused(world, tmp_path, capsys):
    from biosrecall.bios import generate_dataset

    edited = tmp_path / "edited"
    shutil.copytree(world.export, edited)
    with open(edited / "modeling_biosrecall.py", "a") as handle:
        handle.write("\n# edited by hand\n")
    argv = ["recall-curve", "--hf-model", edited, "--data", world.data, "--out", tmp_path / "out"]
    one_error_line(*run_cli(argv, capsys)[::2], "--trust-remote-code")
    other = generate_dataset(tmp_path / "other", people=3, seed=5)
    argv = ["recall-curve", "--hf-model", world.export, "--data", other, "--out", tmp_path / "out"]
    one_error_line(*run_cli(argv, capsys)[::2], "is not the one", "was trained on")


def test_without_transformers_the_error_names_the_extra(world, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)
    argv = ["recall-curve", "--hf-model", world.export, "--data", world.data, "--out", tmp_path / "out"]
    one_error_line(*run_cli(argv, capsys)[::2], "pip install 'biosrecall[hf]'")
