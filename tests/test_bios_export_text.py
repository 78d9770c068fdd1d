"""The text export for other trainers: biographies from the training sampler, evaluation prompts with
answers, loadable with `datasets` as JSON Lines and parquet, reproducible, and refused cleanly."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pyarrow.parquet as pq
import pytest
from harness import changes, run_cli, snapshot

from biosrecall.bios import ATTRIBUTES, BatchSampler, TextExport, export_text, load_dataset
from biosrecall.bios.templates import render

EXPOSURES = 4
SEED = 11


def read_records(folder, stem, text_format):
    path = folder / f"{stem}.{text_format}"
    if text_format == "jsonl":
        return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    return pq.read_table(path).to_pylist()


def file_hashes(folder):
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


@pytest.fixture(scope="module", params=["jsonl", "parquet"])
def exported(request, bios_dataset_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp(f"text-{request.param}") / "text"
    manifest = export_text(bios_dataset_dir, TextExport(out, request.param, exposures=EXPOSURES, seed=SEED))
    return request.param, out, manifest


def test_datasets_loads_both_files_with_the_promised_counts(exported, bios_dataset, tmp_path, monkeypatch):
    datasets = pytest.importorskip("datasets")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    text_format, out, _ = exported
    loader = "json" if text_format == "jsonl" else "parquet"
    load = {"cache_dir": str(tmp_path / "cache"), "split": "train"}
    train = datasets.load_dataset(loader, data_files=str(out / f"train.{text_format}"), **load)
    evaluation = datasets.load_dataset(loader, data_files=str(out / f"eval.{text_format}"), **load)
    assert train.num_rows == bios_dataset.num_people * EXPOSURES
    assert evaluation.num_rows == bios_dataset.num_people * len(ATTRIBUTES) * 5
    assert train.column_names == ["text", "person", "exposure"]
    assert evaluation.column_names == ["prompt", "answer", "person", "attribute", "template"]
    assert train[0] == read_records(out, "train", text_format)[0]


def test_folder_holds_exactly_the_files_and_a_truthful_manifest(exported, bios_dataset):
    text_format, out, manifest = exported
    assert sorted(p.name for p in out.iterdir()) == sorted(
        ["manifest.json", f"train.{text_format}", f"eval.{text_format}"]
    )
    assert json.loads((out / "manifest.json").read_text()) == manifest
    assert manifest["dataset"]["manifest_hash"] == bios_dataset.manifest_hash
    assert manifest["dataset"]["total_bits"] == bios_dataset.total_bits
    assert (manifest["seed"], manifest["exposures"], manifest["text_format"]) == (
        SEED,
        EXPOSURES,
        text_format,
    )
    assert set(manifest["versions"]) >= {"biosrecall", "numpy", "pyarrow", "tokenizers"}
    for name, entry in manifest["files"].items():
        data = (out / name).read_bytes()
        assert (entry["bytes"], entry["sha256"]) == (len(data), hashlib.sha256(data).hexdigest())
    assert manifest["files"][f"train.{text_format}"]["records"] == 300 * EXPOSURES


def test_every_eval_prompt_and_answer_is_the_datasets_evaluation_row(exported, bios_dataset):
    text_format, out, _ = exported
    records = read_records(out, "eval", text_format)
    evalset = bios_dataset.eval_set()
    prompts = bios_dataset.manifest["templates"]["eval"]
    people = bios_dataset.people
    assert [r["person"] for r in records] == evalset.person.tolist()
    assert [r["template"] for r in records] == evalset.template.tolist()
    assert [r["attribute"] for r in records] == [ATTRIBUTES[a] for a in evalset.attribute]
    encoded = bios_dataset.tokenizer.encode_batch([f"{r['prompt']} {r['answer']}" for r in records])
    for i, (record, encoding) in enumerate(zip(records, encoded, strict=True)):
        person = people.iloc[record["person"]]
        assert record["prompt"] == render(prompts[record["attribute"]][record["template"]], person["name"])
        assert record["answer"] == person[record["attribute"]]
        end = evalset.answer_start[i] + evalset.answer_len[i]
        assert encoding.ids == evalset.tokens[i, 1:end].tolist()  # the exact tokens recall is scored on


def test_each_exposure_shows_everyone_once_with_fresh_phrasing(exported, bios_dataset):
    text_format, out, _ = exported
    records = read_records(out, "train", text_format)
    n = bios_dataset.num_people
    assert [r["exposure"] for r in records] == [e for e in range(EXPOSURES) for _ in range(n)]
    by_person: dict[int, set[str]] = {}
    for e in range(EXPOSURES):
        people = [r["person"] for r in records[e * n : (e + 1) * n]]
        assert sorted(people) == list(range(n))
        if e:
            assert people != [r["person"] for r in records[:n]]  # a fresh order each exposure
    for record in records:
        by_person.setdefault(record["person"], set()).add(record["text"])
        assert bios_dataset.people.iloc[record["person"]]["name"] in record["text"]
    assert all(len(texts) == EXPOSURES for texts in by_person.values())


def test_exposures_are_what_the_training_batch_source_draws(exported, bios_dataset):
    """Exposure e is update e of a training run with this seed, batch size 1 and a context of everyone."""
    from biosrecall.train.trainer import BiosBatchSource

    text_format, out, _ = exported
    records = read_records(out, "train", text_format)
    seq_len = BatchSampler.everyone_once(bios_dataset).seq_len
    source = BiosBatchSource(bios_dataset, batch_size=1, seq_len=seq_len, seed=SEED)
    n, sep, pad = bios_dataset.num_people, bios_dataset.sep_id, bios_dataset.pad_id
    for exposure in range(2):
        row = source.batch(exposure)[0]
        row = row[row != pad]
        cuts = np.flatnonzero(row == sep)
        biographies = np.split(row, cuts[1:])
        texts = [r["text"] for r in records[exposure * n : (exposure + 1) * n]]
        assert len(biographies) == n
        assert [bio[1:].tolist() for bio in biographies] == [
            e.ids for e in bios_dataset.tokenizer.encode_batch(texts)
        ]


def test_same_seed_gives_the_same_bytes_and_another_seed_other_text(bios_dataset_dir, tmp_path):
    def export(name, seed):
        return export_text(bios_dataset_dir, TextExport(tmp_path / name, "jsonl", exposures=2, seed=seed))

    export("a", 3), export("b", 3), export("c", 4)
    assert file_hashes(tmp_path / "a") == file_hashes(tmp_path / "b")
    other = file_hashes(tmp_path / "c")
    assert other["train.jsonl"] != file_hashes(tmp_path / "a")["train.jsonl"]
    assert other["eval.jsonl"] == file_hashes(tmp_path / "a")["eval.jsonl"]


def test_generate_with_export_text_writes_both_folders(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    argv = ["generate", "--out", "d", "--people", "20", "--export-text", "parquet", "--text-out", "t"]
    code, err = run_cli([*argv, "--exposures", "3"], capsys)
    assert code == 0, err
    manifest = json.loads((tmp_path / "t" / "manifest.json").read_text())
    assert manifest["dataset"]["manifest_hash"] == load_dataset(tmp_path / "d").manifest_hash
    assert manifest["files"]["train.parquet"]["records"] == 60
    code, err = run_cli(
        ["generate", "--from-dataset", "d", "--export-text", "jsonl", "--text-out", "j"], capsys
    )
    assert code == 0, err
    assert len((tmp_path / "j" / "train.jsonl").read_text().splitlines()) == 20 * 100  # default exposures


BAD_EXPORTS = [
    (["--from-dataset", "d", "--export-text", "jsonl", "--text-out", "d/text"], "lies inside the input d"),
    (["--from-dataset", "d", "--export-text", "jsonl", "--text-out", "."], "is the working folder"),
    (["--from-dataset", "d", "--export-text", "jsonl", "--text-out", "t", "--exposures", "0"], "exposures"),
    (["--from-dataset", "d", "--export-text", "jsonl", "--text-out", "t", "--exposures", "10001"], "10,000"),
    (["--from-dataset", "d", "--export-text", "csv", "--text-out", "t"], "'csv' is not one of"),
    (["--from-dataset", "d", "--export-text", "jsonl"], "needs --text-out"),
    (["--from-dataset", "d", "--text-out", "t"], "give --export-text FORMAT"),
    (["--out", "n", "--text-out", "t"], "--text-out only applies with --export-text"),
    (["--out", "n", "--exposures", "5"], "--exposures only applies with --export-text"),
    (
        ["--from-dataset", "d", "--export-text", "jsonl", "--text-out", "t", "--people", "5"],
        "--people describes",
    ),
    (["--from-dataset", "d", "--export-text", "jsonl", "--out", "t"], "the text folder is --text-out"),
    (
        ["--from-dataset", "nowhere", "--export-text", "jsonl", "--text-out", "t"],
        "dataset folder nowhere not found",
    ),
    (["--from-dataset", "d", "--export-text", "jsonl", "--text-out", "full"], "not empty"),
    (["--out", "n", "--export-text", "jsonl", "--text-out", "n/t"], "lies inside the input n"),
    (["--out", "n", "--export-text", "jsonl", "--text-out", "full"], "not empty"),  # before the dataset
    ([], "missing option --out"),
]


@pytest.mark.parametrize(("args", "message"), BAD_EXPORTS, ids=[str(i) for i in range(len(BAD_EXPORTS))])
def test_bad_export_input_is_one_error_line_and_writes_nothing(
    args, message, bios_dataset_dir, tmp_path, capsys, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "d").symlink_to(bios_dataset_dir)
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep.txt").write_text("mine")
    before = snapshot(tmp_path)
    code, err = run_cli(["generate", *args], capsys)
    assert code == 2 and err.startswith("error: ") and err.count("\n") == 1, err
    assert message in err, err
    assert changes(before, snapshot(tmp_path)) == []
