"""Shard checksums: `lm prepare` records the sha256 of each shard's tokens, the loader verifies a shard
the first time a process opens it (unless `--no-verify`), and folders prepared before checksums were
recorded still load, their ids scanned instead.

    pytest -q tests/test_lm_shard_checksums.py
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shlex
import shutil
from pathlib import Path

import numpy as np
import pytest

from biosrecall.cli import main
from biosrecall.errors import BiosrecallError
from biosrecall.lm import loader
from biosrecall.lm.loader import ShardLoader, set_verification
from biosrecall.lm.shard_manifest import load_manifest
from biosrecall.lm.shards import HEADER_BYTES, read_shard

WORDS = ["the", "a", "river", "city", "model", "loop", "depth", "recall", "and", "of", "über", "東京"]
PREPARE = ["corpus.txt", "--out", "shards", "--vocab-size", "300", "--val-fraction", "0.05",
           "--shard-tokens", "3000"]  # fmt: skip
TRAIN = ["lm", "train", "--data", "shards", "--out", "run", "--preset", "lm-tiny", "--seq-len", "16",
         "--batch-size", "8", "--updates", "4", "--seed", "1", "--device", "cpu", "--quiet"]  # fmt: skip


def cli(capsys, *argv: str) -> tuple[int, str]:
    try:
        main([str(a) for a in argv])
        code = 0
    except SystemExit as exc:
        code = exc.code
    return code, capsys.readouterr().err


@pytest.fixture(scope="module")
def prepared(tmp_path_factory) -> Path:
    """A corpus and its shard folder (several training shards), made by `lm prepare`."""
    root = tmp_path_factory.mktemp("checksums")
    rng = random.Random(0)
    docs = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(10, 60))) + "." for _ in range(300)]
    (root / "corpus.txt").write_text("\n\n".join(docs) + "\n", encoding="utf-8")
    previous = Path.cwd()
    os.chdir(root)
    try:
        main(["lm", "prepare", *PREPARE])
    except SystemExit as exc:
        assert exc.code == 0
    finally:
        os.chdir(previous)
    return root


@pytest.fixture
def case_dir(prepared, tmp_path, monkeypatch) -> Path:
    """A private copy of the prepared world as the working folder; verification back on afterwards."""
    copy = tmp_path / "w"
    shutil.copytree(prepared, copy)
    monkeypatch.chdir(copy)
    yield copy
    set_verification(True)


def first_shard(folder: Path) -> Path:
    return folder / load_manifest(folder)["splits"]["train"]["shards"][0]["file"]


def overwrite_tokens(shard: Path, values: np.ndarray) -> None:
    """Overwrite the shard's first tokens in place (header, size and manifest untouched)."""
    header, _ = read_shard(shard)
    with open(shard, "r+b") as handle:
        handle.seek(HEADER_BYTES)
        handle.write(values.astype(header.dtype).tobytes())


def strip_checksums(folder: Path) -> None:
    """Make the manifest look like one written before checksums were recorded."""
    path = folder / "manifest.json"
    manifest = json.loads(path.read_text())
    for split in manifest["splits"].values():
        for entry in split["shards"]:
            del entry["sha256"]
    path.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")


def test_prepare_records_the_sha256_of_each_shards_tokens(case_dir):
    shards = [e for s in load_manifest("shards")["splits"].values() for e in s["shards"]]
    assert len(shards) > 2
    for entry in shards:
        tokens = (case_dir / "shards" / entry["file"]).read_bytes()[HEADER_BYTES:]
        assert entry["sha256"] == hashlib.sha256(tokens).hexdigest()


def test_out_of_vocabulary_damage_stops_train_before_any_update(case_dir, capsys):
    overwrite_tokens(first_shard(case_dir / "shards"), np.full(200, 60_000))
    code, err = cli(capsys, *TRAIN)
    lines = err.splitlines()
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("error: shard shards/train-00000.bin is damaged"), lines[0]
    assert "prepare the folder again: biosrecall lm prepare corpus.txt --out shards --overwrite" in lines[0]
    assert not (case_dir / "run").exists()


def test_damage_inside_the_vocabulary_is_found_too_and_no_verify_trusts_it(case_dir, capsys):
    shard = first_shard(case_dir / "shards")
    _, tokens = read_shard(shard)
    overwrite_tokens(shard, np.asarray(tokens[:200])[::-1])  # every id valid, the order wrong
    code, err = cli(capsys, *TRAIN)
    assert code == 2 and "train-00000.bin is damaged" in err, err
    code, err = cli(capsys, *TRAIN, "--no-verify")
    assert code == 0, err


def test_the_printed_command_prepares_the_same_folder_again(case_dir, capsys):
    overwrite_tokens(first_shard(case_dir / "shards"), np.full(200, 60_000))
    before = load_manifest(case_dir / "shards")
    _, err = cli(capsys, *TRAIN)
    command = shlex.split(err.split("prepare the folder again: ")[1])
    assert command[:3] == ["biosrecall", "lm", "prepare"]
    code, err = cli(capsys, *command[1:])
    assert code == 0, err
    assert load_manifest(case_dir / "shards") == before
    assert ShardLoader("shards", 16).tokens == before["splits"]["train"]["tokens"]


def test_a_shard_that_disagrees_with_its_manifest_is_damage_named_with_the_fix(case_dir):
    path = case_dir / "shards" / "manifest.json"
    manifest = json.loads(path.read_text())
    first, second = manifest["splits"]["train"]["shards"][:2]
    first["tokens"], second["tokens"] = first["tokens"] + 1, second["tokens"] - 1  # the split's sum holds
    path.write_text(json.dumps(manifest))
    expected = (
        r"train-00000.bin does not match \S+ \(token count or dtype\); prepare the folder again: biosrecall"
    )
    with pytest.raises(BiosrecallError, match=expected):
        ShardLoader("shards", 16)


def test_a_folder_prepared_before_checksums_loads_and_its_ids_are_scanned(case_dir, capsys):
    strip_checksums(case_dir / "shards")
    shutil.copytree(case_dir / "shards", case_dir / "old")  # not opened yet by this process
    assert cli(capsys, *TRAIN) == (0, "")
    overwrite_tokens(first_shard(case_dir / "old"), np.full(200, 60_000))
    code, err = cli(capsys, *TRAIN, "--overwrite", "--data", "old")
    lines = err.splitlines()
    assert code == 2 and len(lines) == 1, err
    assert "shard old/train-00000.bin holds token id 60000, outside the vocabulary of 300" in lines[0]
    assert "prepare the folder again: biosrecall lm prepare" in lines[0]


def test_each_shard_is_read_for_its_checksum_once_per_process(case_dir, monkeypatch):
    hashed = []

    class CountingHashlib:
        @staticmethod
        def sha256(data=b""):
            if isinstance(data, np.ndarray):  # a shard's tokens (the manifest is hashed as bytes)
                hashed.append(data.nbytes)
            return hashlib.sha256(data)

    monkeypatch.setattr(loader, "hashlib", CountingHashlib)
    shards = load_manifest("shards")["splits"]["train"]["shards"]
    for _ in range(3):
        ShardLoader("shards", 16, seed=0)
    assert len(hashed) == len(shards)
