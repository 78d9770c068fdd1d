"""Hostile inputs on the data side: damaged files of every kind (dataset manifest, shard manifest,
tokenizer, shards) and hostile corpora (FIFOs, devices, endless lines, absurd nesting or vocabulary).

Each bad case runs the CLI (in-process through `biosrecall.cli.main`) in a private copy of a small
world (a bioS dataset, a prepared LM corpus, a text corpus, a copy of the templates) and asserts exit
code 2, exactly one `error: ...` line holding the expected words, no traceback, and that no file under
the test's folder was created, changed or removed. `test_hostile_outputs` reuses this world and these
checks for overlapping, concurrent and killed writers.

    pytest -q tests/test_hostile_data.py
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from harness import changes, run_cli, snapshot
from tokenizers import Tokenizer, models, pre_tokenizers

from biosrecall.bios import generate_dataset
from biosrecall.errors import BiosrecallError
from biosrecall.lm import ShardLoader, load_manifest
from biosrecall.lm import corpus as corpus_module
from biosrecall.lm.loader import set_verification
from biosrecall.lm.shards import HEADER_BYTES
from biosrecall.paths import TEMPLATES_DIR

TRAIN_BIOS = ["train", "--data", "data", "--out", "newrun", "--preset", "bios-tiny", "--batch-size", "4",
              "--budget-of", "fixed:2:8", "--quiet"]  # fmt: skip
TRAIN_LM = ["lm", "train", "--data", "shards", "--out", "lmrun", "--updates", "2", "--quiet"]
PREPARE = ["lm", "prepare", "corpus/good.txt", "--val-fraction", "0.2", "--vocab-size", "300"]
SENTENCES = ["The river runs past the old mill.", "A loop repeats the block.", "Depth is chosen late."]


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> Path:
    """Built once; each test works on its own copy (see `case_dir`)."""
    from biosrecall.lm.corpus import Corpus
    from biosrecall.lm.shards import prepare_corpus

    root = tmp_path_factory.mktemp("hostile")
    generate_dataset(root / "data", people=30, seed=1)
    (root / "corpus").mkdir()
    docs = [" ".join(SENTENCES[(i + j) % 3] for j in range(1 + i % 3)) for i in range(40)]
    (root / "corpus" / "good.txt").write_text("\n\n".join(docs) + "\n")
    prepare_corpus(
        Corpus([root / "corpus"]), root / "shards", vocab_size=300, val_fraction=0.2, shard_tokens=200
    )
    shutil.copytree(TEMPLATES_DIR, root / "templates")
    return root


@pytest.fixture
def case_dir(world, tmp_path, monkeypatch) -> Path:
    """A private copy of the world one level below tmp_path (so `..` stays inside what is checked)."""
    copy = tmp_path / "root" / "w"
    shutil.copytree(world, copy, symlinks=True)
    monkeypatch.chdir(copy)
    return copy


def assert_refused(argv: list[str], expect: str, checked: Path, capsys) -> str:
    """Exit 2, one `error:` line holding `expect`, no traceback, nothing under `checked` touched."""
    before = snapshot(checked)
    code, stderr = run_cli(argv, capsys)
    lines = stderr.splitlines()
    assert "Traceback" not in stderr, stderr
    assert code == 2, f"exit {code}; stderr: {stderr}"
    assert len(lines) == 1 and lines[0].startswith("error: "), stderr
    assert expect in lines[0], lines[0]
    assert changes(before, snapshot(checked)) == []
    return lines[0]


def hidden(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


@pytest.fixture
def alarm():
    """Turn a hang (a blocking FIFO read, an endless tokenizer run) into a failure after 120 s."""

    def hung(signum, frame):
        raise TimeoutError("the command did not finish within 120 s")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(120)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


def edit_json(path: Path, change: Callable[[dict], object]) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def replace_with(kind: str) -> Callable[[Path], None]:
    """An edit that replaces a file by raw text, a FIFO or a folder."""

    def edit(path: Path) -> None:
        path.unlink()
        if kind == "fifo":
            os.mkfifo(path)
        elif kind == "folder":
            path.mkdir()
        else:
            path.write_text(kind)

    return edit


DEEP_JSON = "[" * 100_000 + "]" * 100_000


def _cases(table: list[tuple]) -> list:
    return [pytest.param(*row[1:], id=row[0]) for row in table]


# ---- damaged bioS dataset manifests ----------------------------------------------------------------


def _set(*keys_and_value) -> Callable[[Path], None]:
    """An edit of a JSON file that sets the value at a key path (list indices allowed)."""
    *keys, value = keys_and_value

    def change(data: dict) -> None:
        for key in keys[:-1]:
            data = data[key]
        data[keys[-1]] = value

    return lambda path: edit_json(path, change)


def _drop(*keys) -> Callable[[Path], None]:
    """An edit of a JSON file that deletes the entry at a key path."""

    def change(data: dict) -> None:
        for key in keys[:-1]:
            data = data[key]
        del data[keys[-1]]

    return lambda path: edit_json(path, change)


DATASET_MANIFESTS = [
    ("not-json", replace_with("{not json"), "manifest.json is corrupt: Expecting property name"),
    ("deeply-nested", replace_with(DEEP_JSON), "nested too deeply"),
    ("a-list", replace_with("[]"), "is not a 'biosrecall-bios-1' manifest"),
    ("a-fifo", replace_with("fifo"), "is not a regular file"),
    ("a-folder", replace_with("folder"), "is not a regular file"),
    ("no-tokenizer", _drop("tokenizer"), "field 'tokenizer'"),
    ("vocab-size-text", _set("tokenizer", "vocab_size", "many"), "field 'tokenizer.vocab_size'"),
    ("pad-id-outside", _set("tokenizer", "pad_id", 10**9), "field 'tokenizer': pad_id 1000000000 is outside the vocabulary"),
    ("vocab-size-below-specials", _set("tokenizer", "vocab_size", 1), "field 'tokenizer.vocab_size': expected int >= 3, got 1"),
    ("no-seed", _drop("seed"), "field 'seed'"),
    ("people-negative", _set("num_people", -3), "field 'num_people'"),
    ("no-pool-sizes", _drop("pool_sizes"), "field 'pool_sizes'"),
    ("no-bits-per-attribute", _drop("bits_per_attribute"), "field 'bits_per_attribute'"),
    ("chance-bits-nan", _set("chance_bits_per_attribute", "major", float("nan")), "chance_bits_per_attribute"),
    ("total-bits-negative", _set("total_bits", -1), "field 'total_bits'"),
    ("templates-not-lists", _set("templates", "train", "major", "text"), "field 'templates.train.major'"),
    ("no-files", _drop("files"), "field 'files'"),
]  # fmt: skip


class TestDamagedDatasetManifest:
    @pytest.mark.parametrize(("edit", "expect"), _cases(DATASET_MANIFESTS))
    def test_training_on_it_is_one_error_line(self, case_dir, capsys, edit, expect):
        edit(case_dir / "data" / "manifest.json")
        line = assert_refused(TRAIN_BIOS, expect, case_dir.parent.parent, capsys)
        assert "data" in line

    def test_an_oversized_manifest_is_refused_unread(self, case_dir, capsys, monkeypatch):
        from biosrecall.bios import validation

        monkeypatch.setattr(validation, "MAX_MANIFEST_BYTES", 1000)
        assert_refused(TRAIN_BIOS, "above the 1,000 allowed", case_dir.parent.parent, capsys)


# ---- damaged LM shard manifests --------------------------------------------------------------------


FIRST_SHARD = ("splits", "train", "shards", 0)
SHARD_MANIFESTS = [
    ("not-json", replace_with("{not json"), "LM shard manifest"),
    ("deeply-nested", replace_with(DEEP_JSON), "nested too deeply"),
    ("a-fifo", replace_with("fifo"), "is not a regular file"),
    ("no-splits", _drop("splits"), "field 'splits' is missing"),
    ("no-tokenizer", _drop("tokenizer"), "field 'tokenizer' is missing"),
    ("no-validation-split", _drop("splits", "validation"), "field 'splits.validation' is missing"),
    ("tokenizer-a-string", _set("tokenizer", "tok"), "field 'tokenizer': expected object, got str"),
    ("vocab-negative", _set("tokenizer", "vocab_size", -5), "field 'tokenizer.vocab_size': expected int >= 1, got -5"),
    ("vocab-huge", _set("tokenizer", "vocab_size", 10**12), "field 'tokenizer.vocab_size': expected int <= 4194304"),
    ("eod-outside", _set("tokenizer", "eod_id", 300), "field 'tokenizer': eod_id 300 is outside the vocabulary of 300"),
    ("sha-not-hex", _set("tokenizer", "sha256", "zz"), "field 'tokenizer.sha256'"),
    ("dtype-unknown", _set("dtype", "<f8"), "field 'dtype'"),
    ("dtype-too-wide", _set("dtype", "<u4"), "but a vocabulary of 300 is stored as <u2"),
    ("version-2", _set("format_version", 2), "of format version 1 (it records format 'biosrecall-lm-shards', format version 2)"),
    ("shards-not-list", _set("splits", "train", "shards", {}), "field 'splits.train.shards'"),
    ("shard-escapes", _set(*FIRST_SHARD, "file", "../../etc/passwd"), "field 'splits.train.shards[0].file'"),
    ("shard-tokens-negative", _set(*FIRST_SHARD, "tokens", -1), "field 'splits.train.shards[0].tokens': expected int >= 0, got -1"),
    ("split-tokens-mismatch", _set("splits", "train", "tokens", 7), "field 'splits.train': tokens is 7 but its shards hold"),
    ("max-token-beyond-vocab", _set(*FIRST_SHARD, "max_token", 300), "holds token id 300, outside"),
]  # fmt: skip


class TestDamagedShardManifest:
    @pytest.mark.parametrize(("edit", "expect"), _cases(SHARD_MANIFESTS))
    def test_training_on_it_is_one_error_line_and_no_run_folder(self, case_dir, capsys, edit, expect):
        edit(case_dir / "shards" / "manifest.json")
        assert_refused(TRAIN_LM, expect, case_dir.parent.parent, capsys)


# ---- damaged tokenizer files -----------------------------------------------------------------------


def _gapped_tokenizer(path: Path) -> None:
    """A word-level tokenizer whose ids skip numbers: its size no longer bounds its ids."""
    vocab = {"<|endoftext|>": 0, "<pad>": 1, "<sep>": 2, "<unk>": 3, "hello": 70000}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    path.unlink(missing_ok=True)
    tokenizer.save(str(path))


TOKENIZERS = [
    ("not-json", replace_with("{not json"), "is not a valid tokenizer.json"),
    ("empty", replace_with(""), "is not a valid tokenizer.json"),
    ("deeply-nested", replace_with(DEEP_JSON), "is not a valid tokenizer.json"),
    ("a-fifo", replace_with("fifo"), "is not a regular file"),
    ("a-folder", replace_with("folder"), "is not a regular file"),
    ("ids-with-gaps", _gapped_tokenizer, "token ids are not exactly 0..4"),
]


def _rehash(folder: Path, name: str) -> None:
    """Record a file's new hash in a dataset manifest, so only the file's own reader can object."""
    _set("files", name, hashlib.sha256((folder / name).read_bytes()).hexdigest())(folder / "manifest.json")


class TestDamagedTokenizer:
    @pytest.mark.parametrize(("edit", "expect"), _cases(TOKENIZERS))
    def test_a_given_lm_tokenizer(self, case_dir, capsys, edit, expect):
        target = case_dir / "given.json"
        shutil.copy(case_dir / "shards" / "tokenizer.json", target)
        edit(target)
        argv = ["lm", "prepare", "corpus/good.txt", "--out", "lmdata", "--tokenizer", "given.json"]
        assert_refused(argv, expect, case_dir.parent.parent, capsys)

    @pytest.mark.parametrize(("edit", "expect"), _cases([TOKENIZERS[0], TOKENIZERS[5]]))
    def test_a_dataset_tokenizer_with_a_matching_hash(self, case_dir, capsys, edit, expect):
        edit(case_dir / "data" / "tokenizer.json")
        _rehash(case_dir / "data", "tokenizer.json")
        assert_refused(TRAIN_BIOS, expect, case_dir.parent.parent, capsys)

    def test_a_given_tokenizer_is_checked_by_the_trainer_too(self, case_dir, capsys):
        _gapped_tokenizer(case_dir / "given.json")
        assert_refused(
            [*TRAIN_LM, "--tokenizer", "given.json"], "not exactly 0..4", case_dir.parent.parent, capsys
        )


# ---- damaged shards --------------------------------------------------------------------------------


def _shard(folder: Path) -> Path:
    return folder / load_manifest(folder)["splits"]["train"]["shards"][0]["file"]


def _put_token(folder: Path, token: int, legacy: bool) -> None:
    """Write `token` into the first training shard; `legacy` makes the manifest one written before
    max_token and checksums were recorded (neither is in it)."""
    path = _shard(folder)
    raw = bytearray(path.read_bytes())
    raw[HEADER_BYTES : HEADER_BYTES + 2] = np.array([token], "<u2").tobytes()
    path.write_bytes(bytes(raw))
    if legacy:
        edit_json(folder / "manifest.json", _strip_max_token)


def _strip_max_token(data: dict) -> None:
    for split in data["splits"].values():
        for entry in split["shards"]:
            entry.pop("max_token", None)
            entry.pop("sha256", None)


def _truncate(folder: Path) -> None:
    path = _shard(folder)
    path.write_bytes(path.read_bytes()[:-3])


def _bad_magic(folder: Path) -> None:
    path = _shard(folder)
    path.write_bytes(b"X" + path.read_bytes()[1:])


SHARDS = [
    ("legacy-id-beyond-vocab", lambda f: _put_token(f, 5000, legacy=True), "holds token id 5000, outside"),
    ("truncated", _truncate, "truncated or padded"),
    ("bad-magic", _bad_magic, "not a biosrecall token shard"),
    ("a-fifo", lambda f: replace_with("fifo")(_shard(f)), "is not a regular file"),
    ("missing", lambda f: _shard(f).unlink(), "does not exist"),
    ("a-folder", lambda f: replace_with("folder")(_shard(f)), "is not a regular file"),
]  # fmt: skip


class TestDamagedShards:
    @pytest.mark.parametrize(("edit", "expect"), _cases(SHARDS))
    def test_training_on_them_is_one_error_line_and_no_run_folder(self, case_dir, capsys, edit, expect):
        edit(case_dir / "shards")
        assert_refused(TRAIN_LM, expect, case_dir.parent.parent, capsys)

    def test_a_legacy_manifest_without_max_token_still_opens(self, case_dir):
        edit_json(case_dir / "shards" / "manifest.json", _strip_max_token)
        assert ShardLoader(case_dir / "shards", 16).batch(2).max() < 300

    def test_a_shard_changed_after_prepare_fails_on_read_not_in_the_model(self, case_dir):
        _put_token(case_dir / "shards", 5000, legacy=False)  # the recorded max_token is now wrong
        set_verification(False)  # as under --no-verify: the checksum on open would catch it first
        try:
            loader = ShardLoader(case_dir / "shards", 16)
            with pytest.raises(BiosrecallError, match="holds token id 5000 .* a shard was changed"):
                for window in range(loader.num_windows):
                    loader.read_window(window)
        finally:
            set_verification(True)


# ---- hostile corpus inputs -------------------------------------------------------------------------


def _fifo_in_folder(w: Path) -> list[str]:
    os.mkfifo(w / "corpus" / "stream.txt")
    return ["corpus"]


def _device(w: Path) -> list[str]:
    os.symlink(os.devnull, w / "null.txt")
    return ["null.txt"]


def _deep_jsonl(w: Path) -> list[str]:
    (w / "deep.jsonl").write_text('{"text": "fine"}\n{"text": ' + DEEP_JSON + "}\n")
    return ["deep.jsonl"]


def _long_line(w: Path) -> list[str]:
    (w / "long.jsonl").write_text(json.dumps({"text": "x" * 400_000}) + "\n")
    return ["long.jsonl"]


def _long_document(w: Path) -> list[str]:
    (w / "long.txt").write_text("word " * 100 + "\n" + ("more words here\n" * 25_000))
    return ["long.txt"]


CORPORA = [
    ("fifo", lambda w: (os.mkfifo(w / "stream.txt"), ["stream.txt"])[1], "is not a regular file (a FIFO)"),
    ("fifo-in-folder", _fifo_in_folder, "stream.txt is not a regular file (a FIFO)"),
    ("device", _device, "is not a regular file (a device or socket)"),
    ("deeply-nested-jsonl", _deep_jsonl, "deep.jsonl:2: not valid JSON (nested too deeply)"),
    ("line-over-limit", _long_line, "long.jsonl:1: a line or document longer than 300,000 characters (the limit"),
    ("document-over-limit", _long_document, "a line or document longer than 300,000 characters (the limit; in a .txt file a blank line ends a document)"),
]  # fmt: skip


class TestHostileCorpus:
    @pytest.mark.parametrize(("make", "expect"), _cases(CORPORA))
    def test_prepare_refuses_it_up_front(self, case_dir, capsys, monkeypatch, alarm, make, expect):
        monkeypatch.setattr(corpus_module, "MAX_DOCUMENT_CHARS", 300_000)  # small files, same code
        inputs = make(case_dir)
        assert_refused(["lm", "prepare", *inputs, "--out", "lmdata"], expect, case_dir.parent.parent, capsys)

    def test_an_absurd_vocabulary_is_refused_before_the_tokenizer_library_aborts(self, case_dir, capsys):
        argv = [*PREPARE[:3], "--out", "lmdata", "--vocab-size", "1000000000"]
        assert_refused(argv, "vocabulary size 1000000000 is out of range", case_dir.parent.parent, capsys)

    def test_a_megabyte_line_without_spaces_is_prepared(self, case_dir, capsys, alarm):
        (case_dir / "corpus" / "blob.txt").write_text("x" * 1_000_000 + "\n")
        code, stderr = run_cli(
            ["lm", "prepare", "corpus", "--out", "lmdata", "--val-fraction", "0.1"], capsys
        )
        assert (code, stderr) == (0, "")
        assert load_manifest(case_dir / "lmdata")["splits"]["train"]["documents"] > 0
