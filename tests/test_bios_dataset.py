"""Dataset folders: contents of the manifest, reproducibility, atomic writes, loader validation, eval set."""

from __future__ import annotations

import hashlib
import json
import math
import shutil

import numpy as np
import pyarrow.parquet as pq
import pytest

import biosrecall
from biosrecall.bios import ATTRIBUTES, EvalSet, generate_dataset, load_dataset, load_templates
from biosrecall.bios.templates import eval_completion, render
from biosrecall.errors import BiosrecallError
from biosrecall.paths import POOLS_DIR, TEMPLATES_DIR


def file_hashes(folder):
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def test_manifest_describes_the_dataset(bios_dataset, bios_dataset_dir):
    manifest = bios_dataset.manifest
    assert manifest["num_people"] == bios_dataset.num_people == len(bios_dataset.people) == 300
    assert manifest["seed"] == 7 and manifest["package_version"] == biosrecall.__version__
    assert round(bios_dataset.total_bits, 2) == 33.39
    assert bios_dataset.pool_sizes == {
        "birth_city": 64,
        "birth_day": 28,
        "birth_month": 12,
        "university": 64,
        "major": 64,
        "employer": 128,
    }
    assert bios_dataset.bits_per_attribute["employer"] == 7.0
    assert (
        manifest["source_hashes"]["pools/major.txt"]
        == hashlib.sha256((POOLS_DIR / "major.txt").read_bytes()).hexdigest()
    )
    assert (
        manifest["source_hashes"]["templates/eval.toml"]
        == hashlib.sha256((TEMPLATES_DIR / "eval.toml").read_bytes()).hexdigest()
    )
    assert manifest["templates"]["holdout_eval_templates"] is False
    assert (
        bios_dataset.manifest_hash
        == hashlib.sha256((bios_dataset_dir / "manifest.json").read_bytes()).hexdigest()
    )


def test_chance_bits_match_the_people_table(bios_dataset):
    people, expected = bios_dataset.people, 0.0
    for attribute in ATTRIBUTES:
        most_common = people[attribute].value_counts().max()
        expected += math.log2(bios_dataset.pool_sizes[attribute]) * most_common / len(people)
    assert bios_dataset.chance_bits == pytest.approx(expected)
    assert 0 < bios_dataset.chance_bits < bios_dataset.total_bits / 4


def test_people_table_agrees_with_arrays_and_values(bios_dataset):
    people, values = bios_dataset.people, bios_dataset.manifest["values"]
    assert list(people["id"]) == list(range(len(people)))
    assert people["name"].is_unique
    assert list(people["name"]) == [
        " ".join(p)
        for p in zip(people["first_name"], people["middle_name"], people["last_name"], strict=True)
    ]
    for column, attribute in enumerate(ATTRIBUTES):
        index = people[f"{attribute}_index"].to_numpy()
        assert np.array_equal(index, bios_dataset.arrays.person_values[:, column])
        assert list(people[attribute]) == [values[attribute][i] for i in index]


def test_same_arguments_give_byte_identical_files(tmp_path, bios_dataset_dir):
    again = generate_dataset(tmp_path / "again", people=300, seed=7)
    assert file_hashes(again) == file_hashes(bios_dataset_dir)
    other = generate_dataset(tmp_path / "other", people=300, seed=8)
    assert file_hashes(other)["people.parquet"] != file_hashes(again)["people.parquet"]


def test_pool_sizes_and_holdout_reach_the_manifest(tmp_path):
    path = generate_dataset(
        tmp_path / "d",
        people=50,
        seed=1,
        pool_sizes={"employer": 256, "birth_month": 6},
        holdout_eval_templates=True,
    )
    dataset = load_dataset(path)
    assert dataset.pool_sizes["employer"] == 256 and dataset.pool_sizes["birth_month"] == 6
    # employer 128 -> 256 adds one bit, birth_month 12 -> 6 removes one
    assert dataset.total_bits == pytest.approx(33.392317, abs=1e-6)
    assert set(dataset.people["birth_month"]) <= {"January", "February", "March", "April", "May", "June"}
    templates = load_templates()
    assert dataset.manifest["templates"]["holdout_eval_templates"] is True
    for attribute in ATTRIBUTES:
        trained = set(dataset.manifest["templates"]["train"][attribute])
        assert trained == set(templates.train[attribute])
        assert not trained & {eval_completion(p) for p in templates.eval[attribute]}


def test_existing_output_is_refused_then_replaced_with_overwrite(tmp_path):
    out = generate_dataset(tmp_path / "d", people=20, seed=0)
    before = file_hashes(out)
    with pytest.raises(BiosrecallError, match="not empty .*--overwrite"):
        generate_dataset(out, people=30, seed=0)
    assert file_hashes(out) == before
    generate_dataset(out, people=30, seed=0, overwrite=True)
    assert load_dataset(out).num_people == 30
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d"]


def test_an_interrupted_write_leaves_nothing(tmp_path, monkeypatch):
    import biosrecall.bios.dataset as dataset_module

    def write_then_die(folder, *args):
        (folder / "people.parquet").write_bytes(b"partial")
        raise KeyboardInterrupt

    monkeypatch.setattr(dataset_module, "_write_folder", write_then_die)
    with pytest.raises(KeyboardInterrupt):
        generate_dataset(tmp_path / "d", people=20, seed=0)
    assert list(tmp_path.iterdir()) == []


def corrupt_copy(source, target, edit):
    shutil.copytree(source, target)
    edit(target)
    return target


def rewrite_array(folder, name, array):
    np.save(folder / f"{name}.npy", array)
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["files"][f"{name}.npy"] = hashlib.sha256((folder / f"{name}.npy").read_bytes()).hexdigest()
    (folder / "manifest.json").write_text(json.dumps(manifest))


def flip_byte(path):
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda f: (f / "manifest.json").unlink(), "manifest.json does not exist"),
        (
            lambda f: (f / "manifest.json").write_text("{not json"),
            "manifest.json is corrupt: Expecting property name",
        ),
        (
            lambda f: (f / "manifest.json").write_text('{"format": "other"}'),
            "is not a 'biosrecall-bios-1' manifest",
        ),
        (lambda f: (f / "value_tokens.npy").unlink(), "value_tokens.npy does not exist"),
        (lambda f: flip_byte(f / "people.parquet"), "people.parquet does not match its sha256"),
        (lambda f: flip_byte(f / "tokenizer.json"), "tokenizer.json does not match its sha256"),
        (
            lambda f: rewrite_array(f, "person_values", np.zeros((5, 6), np.int32)),
            r"person_values.npy holds int32 of shape \(5, 6\), expected integers of shape \(300, 6\)",
        ),
        (
            lambda f: rewrite_array(f, "name_offsets", np.zeros(301, np.int64)),
            "name_offsets.npy does not index",
        ),
        (
            lambda f: rewrite_array(f, "person_values", np.full((300, 6), 99, np.int32)),
            "pool index outside its pool",
        ),
        (
            lambda f: rewrite_array(f, "value_tokens", np.load(f / "value_tokens.npy") + 10**6),
            "value_tokens.npy holds token ids outside the vocabulary",
        ),
    ],
)
def test_a_damaged_folder_is_one_clear_error(tmp_path, bios_dataset_dir, edit, message):
    folder = corrupt_copy(bios_dataset_dir, tmp_path / "copy", edit)
    with pytest.raises(BiosrecallError, match=message) as info:
        load_dataset(folder)
    assert "\n" not in str(info.value) and str(folder) in str(info.value)


def test_loading_a_missing_folder(tmp_path):
    with pytest.raises(BiosrecallError, match="dataset folder .* not found"):
        load_dataset(tmp_path / "absent")


def test_eval_set_layout(bios_dataset):
    evalset = bios_dataset.eval_set()
    n = bios_dataset.num_people
    assert isinstance(evalset, EvalSet) and len(evalset) == n * 6 * 5
    assert evalset.tokens.dtype == np.int64
    assert np.array_equal(evalset.person, np.repeat(np.arange(n), 30))
    assert np.array_equal(evalset.attribute[:30], np.repeat(np.arange(6), 5))
    assert np.array_equal(evalset.template[:30], np.tile(np.arange(5), 6))
    assert np.all(evalset.tokens[:, 0] == bios_dataset.sep_id)
    ends = evalset.answer_start + evalset.answer_len
    columns = np.arange(evalset.tokens.shape[1])
    assert np.all((evalset.tokens == bios_dataset.pad_id) == (columns[None, :] >= ends[:, None]))
    assert evalset.tokens.shape[1] == ends.max()


def test_eval_rows_are_the_prompt_then_exactly_the_answer(bios_dataset):
    evalset, tokenizer, people = bios_dataset.eval_set(), bios_dataset.tokenizer, bios_dataset.people
    prompts = bios_dataset.manifest["templates"]["eval"]
    for row in range(0, len(evalset), 7):
        person = people.iloc[evalset.person[row]]
        attribute = ATTRIBUTES[evalset.attribute[row]]
        start, length = evalset.answer_start[row], evalset.answer_len[row]
        prompt = render(prompts[attribute][evalset.template[row]], person["name"])
        assert evalset.tokens[row, 1:start].tolist() == tokenizer.encode(prompt).ids
        answer = evalset.tokens[row, start : start + length].tolist()
        assert tokenizer.decode(answer) == person[attribute]
        assert answer == tokenizer.encode(person[attribute]).ids


def test_eval_set_for_a_subset_of_people(bios_dataset):
    full, subset = bios_dataset.eval_set(), bios_dataset.eval_set(people=np.array([5, 2]))
    assert np.array_equal(subset.person, np.repeat([5, 2], 30))
    width = subset.tokens.shape[1]
    assert np.array_equal(subset.tokens[:30], full.tokens[150:180, :width])
    assert np.all(full.tokens[150:180, width:] == bios_dataset.pad_id)
    with pytest.raises(BiosrecallError, match="person ids must lie in"):
        bios_dataset.eval_set(people=np.array([300]))


def test_parquet_has_no_pandas_or_time_metadata(bios_dataset_dir):
    metadata = pq.read_schema(bios_dataset_dir / "people.parquet").metadata or {}
    assert b"pandas" not in metadata
